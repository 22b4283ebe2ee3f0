import net from 'node:net';
import tls from 'node:tls';
import { type Batch, type BatchRecord, decodeBatch, encodeBatch, isBatchBody, type RecordMaker } from './batch.js';
import { type FieldValue, formatLine, isErrorReply, parseError, parseLine } from './command.js';
import { causeFromFirstBytes, connectCause, connectFailure, speaksTls } from './connect-errors.js';
import { TributaryError } from './errors.js';
import { DEFAULT_MAX_FRAME_BYTES, FrameDecoder, encodeFrame } from './frame.js';
import { FrameReader } from './frame-reader.js';

export interface ConnectionOptions {
  host: string;
  port: number;
  connectTimeoutMs?: number;
  maxFrameBytes?: number;
  /** Negotiate these features on connect (default: every feature the SDK understands). */
  features?: string[];
  /** Connect with TLS (CA, client certificate and key for mTLS, servername, ...). */
  tls?: tls.ConnectionOptions;
  /** Sent as `AUTH principal= token=` right after NEGOTIATE on every new connection. */
  auth?: AuthOptions;
  /** Local address to connect from (e.g. to tell clients on one host apart). */
  localAddress?: string;
  signal?: AbortSignal;
  /**
   * Stall bound (off when undefined): the connection fails with a retriable connection_lost once the
   * broker has answered nothing for this long past the own wait of the oldest pending request. It also
   * bounds the handshake (with connectTimeoutMs).
   */
  stallTimeoutMs?: number;
  /**
   * Asked once the connection looks stalled; resolving shows the broker is alive (e.g. it answered on
   * another connection), so the silence is a legitimately slow reply and the connection stays.
   */
  probe?: () => Promise<unknown>;
  /** Called when the watchdog gives up on the connection (before its requests fail). */
  onStall?: () => void;
  /**
   * Called once when the connection is gone, with why it failed or was abandoned; with no error when this
   * side ended it (close(), or the end of a stream() its caller stopped): a clean close is no failure.
   */
  onClose?: (err: Error | undefined) => void;
}

export interface AuthOptions {
  principal: string;
  token: string;
}

/** A reply frame: text (OK/ERROR/JSON) or a binary batch. */
export type Reply = { kind: 'text'; text: string } | { kind: 'batch'; batch: Batch; raw: Buffer };

interface Pending {
  resolve: (r: Reply) => void;
  reject: (e: Error) => void;
  sentAt: number;
  /** How long the reply may legitimately take (a long poll's wait_ms); 0 for an immediate answer. */
  waitMs: number;
  /** A batch reply's records are what this makes (consume() with a RecordMaker), not BatchRecords. */
  makeRecord?: RecordMaker<unknown>;
  /** Instead of `resolve`: the reply's body as it came, nothing decoded (requestBytes). */
  bytes?: (body: Buffer) => void;
}

/** The own wait of a command: its `wait_ms` (CONSUME, HEARTBEAT long polls), else 0. */
function ownWait(fields: Record<string, FieldValue | undefined>): number {
  const w = Number(fields.wait_ms ?? 0);
  return Number.isFinite(w) && w > 0 ? w : 0;
}

/** A plain TCP socket's reads (onread): into the reader's buffers, then to the connection once it exists. */
interface DirectReads {
  reader: FrameReader;
  conn: Connection | undefined;
}

const SDK_FEATURES = ['structured_errors_v1', 'stream_control_v1', 'offset_resume_v1', 'record_extensions_v1'];

/**
 * One broker connection with pipelined requests: replies are matched to requests by order, which the
 * protocol guarantees. After `stream()` the connection only delivers pushed frames.
 */
export class Connection {
  private readonly socket: net.Socket;
  /** TLS only (no onread there): plain TCP reads go through a FrameReader instead (connect()). */
  private readonly decoder: FrameDecoder | undefined;
  private readonly pending: Pending[] = [];
  private closedError: Error | undefined;
  private streamHandler: ((body: Buffer) => void) | undefined;
  enabledFeatures = new Set<string>();
  /** Stall watchdog (see ConnectionOptions.stallTimeoutMs): off until watch(). */
  private stall: { ms: number; probe: (() => Promise<unknown>) | undefined; onStall: (() => void) | undefined } | undefined;
  private stallTimer: NodeJS.Timeout | undefined;
  /**
   * Last time anything arrived on the socket, or a probe showed the broker alive. The watchdog's times
   * are performance.now(): a wall-clock step (NTP) must not fake or hide a stall.
   */
  private lastHeardAt = performance.now();
  private suspectSince: number | undefined;
  private probing = false;

  /** Requests written in this event-loop turn are held for one writev (enqueue). */
  private corked = false;
  private readonly uncork = (): void => {
    this.corked = false;
    this.socket.uncork();
  };

  /** Whether any byte came back yet: the first ones tell a TLS listener or an HTTP port from a broker. */
  private heard = false;

  /** This side ended the connection (close(), a stream stopped): its end is reported to onClose as clean. */
  private endedHere = false;

  private constructor(
    socket: net.Socket,
    maxFrameBytes: number,
    private readonly peer: { host: string; port: number },
    private readonly onClose?: (err: Error | undefined) => void,
    direct?: DirectReads,
  ) {
    this.socket = socket;
    socket.setNoDelay(true);
    if (direct) {
      direct.conn = this;
    } else {
      this.decoder = new FrameDecoder(maxFrameBytes);
      socket.on('data', (chunk) => this.onData(chunk));
    }
    socket.on('error', (err) => this.fail(new TributaryError('connection_lost', { reason: err.message }, `connection error: ${err.message}`)));
    socket.on('close', () => this.fail(new TributaryError('connection_lost', { reason: 'connection closed' }, 'connection closed')));
  }

  static async connect(opts: ConnectionOptions): Promise<Connection> {
    const maxFrameBytes = opts.maxFrameBytes ?? DEFAULT_MAX_FRAME_BYTES;
    // Plain TCP reads land where the reader says: a large frame straight in its own buffer, no assembly
    // copy. TLS has no onread, so its bytes come as 'data' chunks through a FrameDecoder.
    const direct: DirectReads | undefined = opts.tls ? undefined : { reader: new FrameReader(maxFrameBytes), conn: undefined };
    const socket = await new Promise<net.Socket>((resolve, reject) => {
      const local = opts.localAddress === undefined ? {} : { localAddress: opts.localAddress };
      // SNI carries host names only (RFC 6066): for an IP address Node would warn (DEP0123) and the
      // certificate is checked against the IP anyway.
      const servername = net.isIP(opts.host) === 0 ? { servername: opts.host } : {};
      const s: net.Socket = opts.tls
        ? tls.connect({ ...servername, ...opts.tls, ...local, host: opts.host, port: opts.port })
        : net.connect({
            host: opts.host,
            port: opts.port,
            ...local,
            onread: { buffer: () => direct!.reader.buffer(), callback: (n: number, buf: Uint8Array): boolean => Connection.onDirectRead(direct!, s, n, buf as Buffer) },
          });
      const ready = opts.tls ? 'secureConnect' : 'connect';
      const connectMs = opts.connectTimeoutMs ?? 5000;
      const timer = setTimeout(() => {
        s.destroy();
        const f = connectFailure(opts.host, opts.port, 'timeout', 'connect timeout', connectMs);
        reject(new TributaryError('request_timeout', { ...f.fields, reason: 'connect timeout' }, f.message));
      }, connectMs);
      const onAbort = () => {
        clearTimeout(timer);
        s.destroy();
        reject(opts.signal?.reason ?? new Error('aborted'));
      };
      opts.signal?.addEventListener('abort', onAbort, { once: true });
      s.once(ready, () => {
        clearTimeout(timer);
        opts.signal?.removeEventListener('abort', onAbort);
        resolve(s);
      });
      s.once('error', (e) => {
        clearTimeout(timer);
        opts.signal?.removeEventListener('abort', onAbort);
        reject(connectFailure(opts.host, opts.port, connectCause(e as NodeJS.ErrnoException), e.message));
      });
    });
    const conn = new Connection(socket, maxFrameBytes, { host: opts.host, port: opts.port }, opts.onClose, direct);
    const features = opts.features ?? SDK_FEATURES;
    if (features.length > 0 || opts.auth) {
      // The handshake is part of connecting: bounded by the same timeout and signal, and a failed one
      // does not leave the socket open (a broker that accepts but never answers must not hang callers;
      // a frozen process still completes TCP handshakes, so the stall bound applies here too).
      const handshakeMs = Math.min(opts.connectTimeoutMs ?? 5000, opts.stallTimeoutMs ?? Number.POSITIVE_INFINITY);
      const timer = setTimeout(
        () => conn.abandon(new TributaryError('connection_lost', { reason: 'no handshake reply', timeoutMs: handshakeMs }, `connect ${opts.host}:${opts.port}: no handshake reply within ${handshakeMs} ms`)),
        handshakeMs,
      );
      const onAbort = () => socket.destroy();
      opts.signal?.addEventListener('abort', onAbort, { once: true });
      try {
        if (features.length > 0) {
          const reply = await conn.command('NEGOTIATE', { version: 1, features: features.join(',') });
          const enabled = parseLine(reply).params.get('enabled') ?? '';
          conn.enabledFeatures = new Set(enabled.split(',').filter(Boolean));
        }
        if (opts.auth) await conn.command('AUTH', { principal: opts.auth.principal, token: opts.auth.token });
      } catch (err) {
        socket.destroy();
        if (opts.signal?.aborted) throw opts.signal.reason ?? err;
        // Closed or failed before it said anything: not a broker on this port, or one that wants TLS.
        if (err instanceof TributaryError && err.code === 'connection_lost' && err.fields.cause === undefined && !conn.heard) {
          const detail = String(err.fields.reason ?? err.message);
          if (err.fields.reason === 'no handshake reply') throw connectFailure(opts.host, opts.port, 'no_handshake', `nothing within ${handshakeMs} ms`);
          if (!opts.tls && (await speaksTls(opts.host, opts.port))) throw connectFailure(opts.host, opts.port, 'tls_required', detail);
          throw connectFailure(opts.host, opts.port, opts.tls ? 'tls' : 'closed', detail);
        }
        throw err;
      } finally {
        clearTimeout(timer);
        opts.signal?.removeEventListener('abort', onAbort);
      }
    }
    if (opts.stallTimeoutMs !== undefined) conn.watch(opts.stallTimeoutMs, opts.probe, opts.onStall);
    return conn;
  }

  /**
   * Turns on the stall watchdog. Replies come in order, so one reply that never comes holds back every
   * later one: once the oldest pending request is `stallMs` past its own wait with nothing received
   * meanwhile (and `probe`, asked halfway, did not show the broker alive), the connection fails with a
   * retriable connection_lost and callers retry elsewhere.
   */
  watch(stallMs: number, probe?: () => Promise<unknown>, onStall?: () => void): void {
    this.stall = { ms: stallMs, probe, onStall };
    this.armStall(stallMs / 2);
  }

  private armStall(delayMs: number): void {
    if (!this.stall || this.closedError || this.pending.length === 0) return;
    if (this.stallTimer) clearTimeout(this.stallTimer);
    this.stallTimer = setTimeout(() => this.checkStall(), Math.max(5, delayMs));
    this.stallTimer.unref();
  }

  private checkStall(): void {
    this.stallTimer = undefined;
    const head = this.pending[0];
    const stall = this.stall;
    if (!stall || !head || this.closedError) {
      this.suspectSince = undefined;
      return;
    }
    const now = performance.now();
    const half = stall.ms / 2;
    const quiet = now - Math.max(head.sentAt + head.waitMs, this.lastHeardAt);
    if (quiet < half) {
      this.suspectSince = undefined;
      this.armStall(half - quiet);
      return;
    }
    if (this.suspectSince === undefined || this.lastHeardAt >= this.suspectSince) {
      // Two looks at least half the bound apart, with a probe between them that got no answer: a client
      // event loop that was blocked reads what arrived meanwhile before the second look.
      this.suspectSince = now;
      this.startProbe();
      this.armStall(Math.max(half, stall.ms - quiet));
      return;
    }
    const suspected = now - this.suspectSince;
    if (quiet >= stall.ms && suspected >= half) {
      stall.onStall?.();
      const quietMs = Math.round(quiet);
      this.abandon(
        new TributaryError('connection_lost', { reason: 'stalled', quietMs, stallTimeoutMs: stall.ms }, `connection stalled: no reply for ${quietMs} ms past the expected wait (stallTimeoutMs ${stall.ms})`),
      );
      return;
    }
    this.armStall(Math.max(stall.ms - quiet, half - suspected));
  }

  private startProbe(): void {
    const probe = this.stall?.probe;
    if (!probe || this.probing) return;
    this.probing = true;
    probe().then(
      () => {
        this.probing = false;
        this.lastHeardAt = Math.max(this.lastHeardAt, performance.now());
      },
      () => {
        this.probing = false;
      },
    );
  }

  /** Fails every pending request with `err` and drops the socket at once (no graceful close). */
  abandon(err: Error): void {
    this.fail(err);
    this.socket.destroy();
  }

  get extensions(): boolean {
    return this.enabledFeatures.has('record_extensions_v1');
  }

  get closed(): boolean {
    return this.closedError !== undefined;
  }

  /** onread's callback: `n` bytes landed in `buf`, the reader's last buffer(); false stops reading. */
  private static onDirectRead(direct: DirectReads, socket: net.Socket, n: number, buf: Buffer): boolean {
    const conn = direct.conn;
    if (!conn) {
      // Cannot happen: reads start after 'connect', and connect() makes the Connection in that same turn.
      socket.destroy(new Error('bytes before the connection was set up'));
      return false;
    }
    conn.lastHeardAt = performance.now();
    if (!conn.heard && !conn.firstBytes(buf.subarray(0, n))) return false;
    let frames: Buffer[];
    try {
      frames = direct.reader.read(n);
    } catch (err) {
      conn.broken(err);
      return false;
    }
    conn.deliver(frames);
    return true;
  }

  private onData(chunk: Buffer): void {
    this.lastHeardAt = performance.now();
    if (!this.heard && !this.firstBytes(chunk)) return;
    let frames: Buffer[];
    try {
      frames = this.decoder!.push(chunk);
    } catch (err) {
      this.broken(err);
      return;
    }
    this.deliver(frames);
  }

  /** Whether the first bytes back can be a broker's; when not, the connection fails with why. */
  private firstBytes(chunk: Buffer): boolean {
    this.heard = true;
    const cause = causeFromFirstBytes(chunk);
    if (!cause) return true;
    this.fail(connectFailure(this.peer.host, this.peer.port, cause, 'unexpected reply'));
    this.socket.destroy();
    return false;
  }

  /**
   * A broken frame header (e.g. a declared length past the maximum) leaves the byte stream unusable:
   * the pending requests lost their connection before their replies, which is retriable.
   */
  private broken(err: unknown): void {
    const reason = err instanceof TributaryError ? `${err.code}: ${err.message}` : String(err);
    this.fail(new TributaryError('connection_lost', { reason }, `connection lost: ${reason}`));
    this.socket.destroy();
  }

  private deliver(frames: Buffer[]): void {
    for (const body of frames) {
      if (this.streamHandler) {
        this.streamHandler(body);
        continue;
      }
      if (body.length === 0) continue; // keepalive
      const p = this.pending.shift();
      if (!p) continue;
      try {
        // BatchRecords, unless the request brought its own maker (consume(), which returns its kind).
        if (p.bytes) p.bytes(body);
        else if (isBatchBody(body)) p.resolve({ kind: 'batch', batch: this.decode(body, p.makeRecord) as Batch, raw: body });
        else p.resolve({ kind: 'text', text: body.toString('utf8') });
      } catch (err) {
        p.reject(err as Error);
      }
    }
  }

  private fail(err: Error): void {
    if (this.closedError) return;
    this.closedError = err;
    if (this.stallTimer) clearTimeout(this.stallTimer);
    this.stallTimer = undefined;
    for (const p of this.pending.splice(0)) p.reject(err);
    this.streamHandler?.(Buffer.alloc(0, 0)); // wake a stream reader so it sees the close
    try {
      this.onClose?.(this.endedHere ? undefined : err);
    } catch {
      // an observer's failure is not the connection's
    }
  }

  /** Send a raw frame body and wait for its reply; `waitMs`: how long the broker may legitimately hold it. */
  request(body: Buffer | string, waitMs = 0): Promise<Reply> {
    if (this.closedError) return Promise.reject(this.closedError);
    return this.requestFramed(encodeFrame(body), waitMs);
  }

  /**
   * request() for a body already framed: `frame` starts with its 4-byte length and is written as it is,
   * without the copy request() makes (the SDK producer's batch frames, built in place). The caller must
   * not change `frame` until the reply has come (the broker then has all of it) or the connection failed.
   */
  requestFramed(frame: Buffer, waitMs = 0): Promise<Reply> {
    return this.send(frame, waitMs, undefined);
  }

  /**
   * request(), resolving with the reply frame's body as it came, text or binary: a batch is not decoded
   * (broker to broker: a follower stores the records its REPLICA_FETCH brings as bytes).
   */
  requestBytes(body: Buffer | string, waitMs = 0): Promise<Buffer> {
    if (this.closedError) return Promise.reject(this.closedError);
    return new Promise<Buffer>((resolve, reject) => {
      this.enqueue({ resolve: () => {}, bytes: resolve, reject, sentAt: performance.now(), waitMs }, encodeFrame(body));
    });
  }

  /** requestFramed(), with the maker of a batch reply's records (consume()'s, which returns their type). */
  private send(frame: Buffer, waitMs: number, makeRecord: RecordMaker<unknown> | undefined): Promise<Reply> {
    if (this.closedError) return Promise.reject(this.closedError);
    return new Promise<Reply>((resolve, reject) => {
      this.enqueue({ resolve, reject, sentAt: performance.now(), waitMs, makeRecord }, frame);
    });
  }

  private enqueue(p: Pending, frame: Buffer): void {
    this.pending.push(p);
    if (!this.corked) {
      // The requests of one event-loop turn (a producer's batches for several partitions, say) leave in
      // one writev rather than a write call each; uncorked before any I/O, so none waits for it.
      this.corked = true;
      this.socket.cork();
      process.nextTick(this.uncork);
    }
    this.socket.write(frame);
    if (this.stall && !this.stallTimer) this.armStall(p.waitMs + this.stall.ms / 2);
  }

  /** Text command; resolves with the reply text, rejects with a TributaryError for `ERROR:` replies. */
  async command(name: string, fields: Record<string, FieldValue | undefined> = {}, positional: string[] = []): Promise<string> {
    const reply = await this.request(formatLine(name, fields, positional), ownWait(fields));
    if (reply.kind !== 'text') throw new TributaryError('internal_error', { reason: 'unexpected batch reply' });
    if (isErrorReply(reply.text)) throw parseError(reply.text);
    return reply.text;
  }

  /** A command whose reply is JSON (DESCRIBE, PUBLISH acks, ...). */
  async json<T = Record<string, unknown>>(name: string, fields: Record<string, FieldValue | undefined> = {}): Promise<T> {
    const text = await this.command(name, fields);
    return JSON.parse(text) as T;
  }

  /** A batch frame; resolves with its JSON acknowledgement (a produce ack unless it is a transactional batch). */
  async produceBatch<T = { partition: number; base_offset: number; last_offset: number; count: number }>(batch: Batch): Promise<T> {
    const reply = await this.request(encodeBatch(batch, { extensions: this.extensions }));
    if (reply.kind !== 'text') throw new TributaryError('internal_error', { reason: 'unexpected batch reply' });
    if (isErrorReply(reply.text)) throw parseError(reply.text);
    return JSON.parse(reply.text);
  }

  /** A CONSUME; with `makeRecord` the reply's records are what it makes (decodeBatch). */
  consume(fields: Record<string, FieldValue | undefined>): Promise<Batch>;
  consume<R>(fields: Record<string, FieldValue | undefined>, makeRecord: RecordMaker<R>): Promise<Batch<R>>;
  async consume<R>(fields: Record<string, FieldValue | undefined>, makeRecord?: RecordMaker<R>): Promise<Batch<R | BatchRecord>> {
    const reply = await this.send(encodeFrame(formatLine('CONSUME', fields)), ownWait(fields), makeRecord);
    if (reply.kind === 'text') {
      if (isErrorReply(reply.text)) throw parseError(reply.text);
      throw new TributaryError('internal_error', { reason: `unexpected reply ${reply.text.slice(0, 80)}` });
    }
    // Records of the kind asked for: BatchRecords, or what makeRecord made.
    return reply.batch as Batch<R | BatchRecord>;
  }

  private decode(body: Buffer, makeRecord: RecordMaker<unknown> | undefined): Batch<unknown> {
    const opts = { extensions: this.extensions };
    return makeRecord ? decodeBatch(body, opts, makeRecord) : decodeBatch(body, opts);
  }

  /**
   * Switch to push mode. Yields batches until the broker sends STREAM_CONTROL type=CLOSE (returned as
   * the final value) or the socket is lost (throws a retriable error). With `makeRecord` the batches'
   * records are what it makes (decodeBatch).
   */
  stream(
    fields: Record<string, FieldValue | undefined>,
    signal?: AbortSignal,
    opts?: { silenceMs?: number },
  ): AsyncGenerator<Batch, Record<string, string>>;
  stream<R>(
    fields: Record<string, FieldValue | undefined>,
    signal: AbortSignal | undefined,
    opts: { silenceMs?: number; makeRecord: RecordMaker<R> },
  ): AsyncGenerator<Batch<R>, Record<string, string>>;
  async *stream<R>(
    fields: Record<string, FieldValue | undefined>,
    signal?: AbortSignal,
    opts: { silenceMs?: number; makeRecord?: RecordMaker<R> } = {},
  ): AsyncGenerator<Batch<R | BatchRecord>, Record<string, string>> {
    const queue: Buffer[] = [];
    let wake: (() => void) | undefined;
    let paused = false;
    let lastFrameAt = performance.now(); // monotonic, as the stall watchdog's times
    // Backpressure: stop reading the socket while the consumer of this generator is behind.
    this.streamHandler = (body) => {
      lastFrameAt = performance.now();
      queue.push(body);
      if (queue.length >= 64 && !paused) {
        paused = true;
        this.socket.pause();
      }
      wake?.();
    };
    const onAbort = () => {
      this.socket.write(encodeFrame('STREAM_CONTROL type=CLOSE'));
    };
    signal?.addEventListener('abort', onAbort, { once: true });
    this.socket.write(encodeFrame(formatLine('STREAM', fields)));
    try {
      for (;;) {
        while (queue.length === 0) {
          if (this.closedError) throw this.closedError;
          // silenceMs: the broker sends a frame (a keepalive at least) that often; nothing for longer
          // means a frozen or cut-off broker, whose socket may stay open for as long as that lasts.
          let timer: NodeJS.Timeout | undefined;
          await new Promise<void>((r) => {
            wake = r;
            if (opts.silenceMs !== undefined) {
              timer = setTimeout(() => {
                if (queue.length === 0 && performance.now() - lastFrameAt >= opts.silenceMs!) {
                  // As for a stalled request: lookups ask this broker last until it answers again.
                  this.stall?.onStall?.();
                  this.abandon(new TributaryError('connection_lost', { reason: 'stalled', silenceMs: opts.silenceMs! }, `stream silent for ${opts.silenceMs} ms`));
                }
                r();
              }, Math.max(1, lastFrameAt + opts.silenceMs - performance.now()));
            }
          });
          clearTimeout(timer);
          wake = undefined;
        }
        const body = queue.shift()!;
        if (paused && queue.length < 16) {
          paused = false;
          this.socket.resume();
        }
        if (body.length === 0) {
          // A keepalive, or the wake-up of a closed socket: frames queued behind it (a graceful CLOSE
          // that came before the socket closed) are still read first.
          if (this.closedError && queue.length === 0) throw this.closedError;
          continue;
        }
        if (isBatchBody(body)) {
          yield this.decode(body, opts.makeRecord) as Batch<R | BatchRecord>;
          continue;
        }
        const text = body.toString('utf8');
        if (isErrorReply(text)) throw parseError(text);
        const line = parseLine(text);
        if (line.head === 'STREAM_CONTROL') return Object.fromEntries(line.params);
      }
    } finally {
      signal?.removeEventListener('abort', onAbort);
      this.streamHandler = undefined;
      if (!this.closedError) {
        this.endedHere = true;
        this.socket.destroy();
      }
    }
  }

  close(): Promise<void> {
    if (!this.closedError) this.endedHere = true;
    if (this.stallTimer) clearTimeout(this.stallTimer);
    this.stallTimer = undefined;
    this.stall = undefined;
    return new Promise((resolve) => {
      if (this.socket.destroyed) return resolve();
      this.socket.once('close', () => resolve());
      this.socket.end();
      setTimeout(() => this.socket.destroy(), 1000).unref();
    });
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }
}

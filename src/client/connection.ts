import net from 'node:net';
import tls from 'node:tls';
import { type Batch, decodeBatch, encodeBatch, isBatchBody } from '../protocol/batch.js';
import { type FieldValue, formatLine, isErrorReply, parseError, parseLine } from '../protocol/command.js';
import { TributaryError } from '../protocol/errors.js';
import { DEFAULT_MAX_FRAME_BYTES, FrameDecoder, encodeFrame } from '../protocol/frame.js';

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
}

const SDK_FEATURES = ['structured_errors_v1', 'stream_control_v1', 'offset_resume_v1', 'record_extensions_v1'];

/**
 * One broker connection with pipelined requests: replies are matched to requests by order, which the
 * protocol guarantees. After `stream()` the connection only delivers pushed frames.
 */
export class Connection {
  private readonly socket: net.Socket;
  private readonly decoder: FrameDecoder;
  private readonly pending: Pending[] = [];
  private closedError: Error | undefined;
  private streamHandler: ((body: Buffer) => void) | undefined;
  enabledFeatures = new Set<string>();

  private constructor(socket: net.Socket, maxFrameBytes: number) {
    this.socket = socket;
    this.decoder = new FrameDecoder(maxFrameBytes);
    socket.setNoDelay(true);
    socket.on('data', (chunk) => this.onData(chunk));
    socket.on('error', (err) => this.fail(new TributaryError('connection_lost', { reason: err.message }, `connection error: ${err.message}`)));
    socket.on('close', () => this.fail(new TributaryError('connection_lost', { reason: 'connection closed' }, 'connection closed')));
  }

  static async connect(opts: ConnectionOptions): Promise<Connection> {
    const socket = await new Promise<net.Socket>((resolve, reject) => {
      const local = opts.localAddress === undefined ? {} : { localAddress: opts.localAddress };
      const s = opts.tls ? tls.connect({ servername: opts.host, ...opts.tls, ...local, host: opts.host, port: opts.port }) : net.connect({ host: opts.host, port: opts.port, ...local });
      const ready = opts.tls ? 'secureConnect' : 'connect';
      const timer = setTimeout(() => {
        s.destroy();
        reject(new TributaryError('request_timeout', { reason: 'connect timeout' }));
      }, opts.connectTimeoutMs ?? 5000);
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
        reject(new TributaryError('connection_lost', { reason: e.message }, `connect ${opts.host}:${opts.port}: ${e.message}`));
      });
    });
    const conn = new Connection(socket, opts.maxFrameBytes ?? DEFAULT_MAX_FRAME_BYTES);
    const features = opts.features ?? SDK_FEATURES;
    if (features.length > 0 || opts.auth) {
      // The handshake is part of connecting: bounded by the same timeout and signal, and a failed one
      // does not leave the socket open (a broker that accepts but never answers must not hang callers).
      const timer = setTimeout(() => socket.destroy(), opts.connectTimeoutMs ?? 5000);
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
        throw opts.signal?.aborted ? (opts.signal.reason ?? err) : err;
      } finally {
        clearTimeout(timer);
        opts.signal?.removeEventListener('abort', onAbort);
      }
    }
    return conn;
  }

  get extensions(): boolean {
    return this.enabledFeatures.has('record_extensions_v1');
  }

  get closed(): boolean {
    return this.closedError !== undefined;
  }

  private onData(chunk: Buffer): void {
    let frames: Buffer[];
    try {
      frames = this.decoder.push(chunk);
    } catch (err) {
      // A broken frame header (e.g. a declared length past the maximum) leaves the byte stream unusable:
      // the pending requests lost their connection before their replies, which is retriable.
      const reason = err instanceof TributaryError ? `${err.code}: ${err.message}` : String(err);
      this.fail(new TributaryError('connection_lost', { reason }, `connection lost: ${reason}`));
      this.socket.destroy();
      return;
    }
    for (const body of frames) {
      if (this.streamHandler) {
        this.streamHandler(body);
        continue;
      }
      if (body.length === 0) continue; // keepalive
      const p = this.pending.shift();
      if (!p) continue;
      try {
        if (isBatchBody(body)) p.resolve({ kind: 'batch', batch: decodeBatch(body, { extensions: this.extensions }), raw: body });
        else p.resolve({ kind: 'text', text: body.toString('utf8') });
      } catch (err) {
        p.reject(err as Error);
      }
    }
  }

  private fail(err: Error): void {
    if (this.closedError) return;
    this.closedError = err;
    for (const p of this.pending.splice(0)) p.reject(err);
    this.streamHandler?.(Buffer.alloc(0, 0)); // wake a stream reader so it sees the close
  }

  /** Send a raw frame body and wait for its reply. */
  request(body: Buffer | string): Promise<Reply> {
    if (this.closedError) return Promise.reject(this.closedError);
    return new Promise<Reply>((resolve, reject) => {
      this.pending.push({ resolve, reject });
      this.socket.write(encodeFrame(body));
    });
  }

  /** Text command; resolves with the reply text, rejects with a TributaryError for `ERROR:` replies. */
  async command(name: string, fields: Record<string, FieldValue | undefined> = {}, positional: string[] = []): Promise<string> {
    const reply = await this.request(formatLine(name, fields, positional));
    if (reply.kind !== 'text') throw new TributaryError('internal_error', { reason: 'unexpected batch reply' });
    if (isErrorReply(reply.text)) throw parseError(reply.text);
    return reply.text;
  }

  /** A command whose reply is JSON (DESCRIBE, PUBLISH acks, ...). */
  async json<T = Record<string, unknown>>(name: string, fields: Record<string, FieldValue | undefined> = {}): Promise<T> {
    const text = await this.command(name, fields);
    return JSON.parse(text) as T;
  }

  async produceBatch(batch: Batch): Promise<{ partition: number; base_offset: number; last_offset: number; count: number }> {
    const reply = await this.request(encodeBatch(batch, { extensions: this.extensions }));
    if (reply.kind !== 'text') throw new TributaryError('internal_error', { reason: 'unexpected batch reply' });
    if (isErrorReply(reply.text)) throw parseError(reply.text);
    return JSON.parse(reply.text);
  }

  async consume(fields: Record<string, FieldValue | undefined>): Promise<Batch> {
    const reply = await this.request(formatLine('CONSUME', fields));
    if (reply.kind === 'text') {
      if (isErrorReply(reply.text)) throw parseError(reply.text);
      throw new TributaryError('internal_error', { reason: `unexpected reply ${reply.text.slice(0, 80)}` });
    }
    return reply.batch;
  }

  /**
   * Switch to push mode. Yields batches until the broker sends STREAM_CONTROL type=CLOSE (returned as
   * the final value) or the socket is lost (throws a retriable error).
   */
  async *stream(fields: Record<string, FieldValue | undefined>, signal?: AbortSignal): AsyncGenerator<Batch, Record<string, string>> {
    const queue: Buffer[] = [];
    let wake: (() => void) | undefined;
    let paused = false;
    // Backpressure: stop reading the socket while the consumer of this generator is behind.
    this.streamHandler = (body) => {
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
          await new Promise<void>((r) => {
            wake = r;
          });
          wake = undefined;
        }
        const body = queue.shift()!;
        if (paused && queue.length < 16) {
          paused = false;
          this.socket.resume();
        }
        if (body.length === 0) {
          if (this.closedError) throw this.closedError;
          continue; // keepalive
        }
        if (isBatchBody(body)) {
          yield decodeBatch(body, { extensions: this.extensions });
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
      if (!this.closedError) this.socket.destroy();
    }
  }

  close(): Promise<void> {
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

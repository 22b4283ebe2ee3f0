/**
 * A STREAM on a client connection (docs/protocol.md, "STREAM"): pushes batch frames as the partition's
 * HWM (or LSO) advances, waits for `drain` before writing more, sends keepalives, and ends with one
 * `STREAM_CONTROL type=CLOSE` frame. The connection (client-connection.ts) hands a STREAM request here and
 * passes on what the client sends after it.
 */
import { isUtf8 } from 'node:buffer';
import type net from 'node:net';
import { type Params, formatError, formatLine, type parseLine } from 'tributary-protocol/command.js';
import { isBatchBody } from 'tributary-protocol/batch.js';
import { TributaryError } from 'tributary-protocol/errors.js';
import { encodeFrame, frameHeader } from 'tributary-protocol/frame.js';
import { type BrokerContext, type ConnectionContext, bodyLength } from './command-context.js';
import { checkStreamClose } from './commands.js';
import { checkFence, parseReadRequest, readBatch, resolveRemoteStart } from './consume-commands.js';
import { isFenced, watchReadFence } from './read-fence.js';

export type StreamCloseReason = 'stopped' | 'removed' | 'timeout' | 'error' | 'offset_out_of_range' | 'unauthorized';

type Line = ReturnType<typeof parseLine>;

/** What a stream needs of its connection. */
export interface StreamHost {
  readonly conn: ConnectionContext;
  readonly socket: net.Socket;
  readonly broker: BrokerContext;
  /** Resolves once every reply before the STREAM is written, so frames never interleave with them. */
  repliesWritten(): Promise<void>;
  /** Writes a frame body, maybe in pieces (its header already written); false when the socket's buffer is full. */
  writeBody(body: Buffer | Buffer[]): boolean;
  writeNow(frame: Buffer): void;
  destroy(reason: string): void;
  closed(): boolean;
}

export class PushStream {
  private readonly ac = new AbortController();
  private done: Promise<void> | undefined;
  private offset = 0;
  private ended = false;

  constructor(
    private readonly host: StreamHost,
    /** The STREAM request, held to the security rules again when they change (revalidate). */
    private readonly line: Line,
  ) {}

  start(p: Params): 'stream' {
    const { broker, socket } = this.host;
    // A client that watches the stream for silence asks for keepalives at least this often.
    const keepaliveMs = p.int('keepalive_ms', { min: 50, max: 3_600_000 });
    const req = parseReadRequest(broker, p);
    socket.setTimeout(0);
    this.done = this.run(req, this.ac.signal, keepaliveMs).catch((err) => {
      // A routing error (readBatch: this broker no longer leads the partition) is passed on as the close's
      // code, on which the reader looks the leader up again (docs/protocol.md, "STREAM"); others are failures.
      // Any other failure carries its code too (internal_error when it has none): a reader that took a
      // codeless close for a clean end opened the stream again at once, in a loop while the failure lasted.
      const routing = err instanceof TributaryError && err.errorClass === 'routing';
      if (!routing) broker.logger.warn({ err, remote: this.host.conn.remote }, 'stream failed');
      this.end('error', this.offset, err instanceof TributaryError ? err.code : 'internal_error');
    });
    return 'stream';
  }

  /**
   * Users or ACLs changed (SIGHUP): a STREAM they no longer allow ends now with `reason=unauthorized`
   * rather than serve a revoked principal until it disconnects (docs/security.md, "Revocation").
   */
  revalidate(authorize: (command: string, line: Line) => TributaryError | undefined): void {
    if (this.ac.signal.aborted) return;
    const refused = authorize('STREAM', this.line);
    if (!refused) return;
    this.host.broker.logger.info({ remote: this.host.conn.remote, code: refused.code }, 'stream ended: no longer authorized');
    this.end('unauthorized', this.offset);
  }

  private async run(req: ReturnType<typeof parseReadRequest>, signal: AbortSignal, keepaliveMs: number | undefined): Promise<void> {
    const { broker, conn } = this.host;
    let offset = req.offset;
    this.offset = offset;
    const keepalive = Math.min(broker.config.streamKeepaliveMs, keepaliveMs ?? Number.POSITIVE_INFINITY);
    await this.host.repliesWritten();
    // A fenced stream (read-fence.ts) is refused like a CONSUME before it starts, and ends `removed` the
    // moment its member loses the partition: every change to the group wakes it to check again, and a
    // check whose answer is a lease (a group coordinated elsewhere) is made again before it runs out.
    // `changed` wakes its wait on either, or on the stream's end (one controller per wake rather than an
    // AbortSignal.any per wait, which a quiet stream would make every keepalive).
    let changed = new AbortController();
    const unwatch = req.fence ? watchReadFence(broker, req.fence, () => changed.abort()) : undefined;
    if (req.fence) signal.addEventListener('abort', () => changed.abort(), { once: true });
    try {
      let validForMs: number;
      try {
        validForMs = await checkFence(broker, req);
      } catch (err) {
        if (!(err instanceof TributaryError)) throw err;
        if (!this.host.socket.destroyed) this.host.socket.end(encodeFrame(formatError(err)));
        return;
      }
      await resolveRemoteStart(broker, conn, req);
      offset = req.offset;
      this.offset = offset;
      /** The fence's check before serving; false once it ended the stream. */
      const fenced = async (): Promise<boolean> => {
        if (!req.fence) return false;
        try {
          validForMs = await checkFence(broker, req, true);
          return false;
        } catch (err) {
          if (!(err instanceof TributaryError)) throw err;
          this.end(isFenced(err) ? 'removed' : 'error', offset, err.code);
          return true;
        }
      };
      while (!signal.aborted && !this.host.closed()) {
        if (req.partition.isClosed) {
          const removed = !broker.topics.tryGet(req.topic);
          return this.end(removed ? 'removed' : 'stopped', offset);
        }
        if (offset < req.partition.earliest) return this.end('offset_out_of_range', offset);
        if (changed.signal.aborted) changed = new AbortController();
        if (await fenced()) return;
        const out = await readBatch(broker, conn, req, offset);
        // A read that passed only markers or aborted records is pushed too (its trailer's nextOffset), as
        // CONSUME answers it: else the client never learns its position moved, and its committed offset
        // stops short of a partition that ends in a marker (docs/sdk.md, "Offsets").
        if (out.count > 0 || (out.nextOffset > offset && conn.features.has('record_extensions_v1'))) {
          // Checked again at the moment of serving: the read itself may have waited for the disk.
          if (await fenced()) return;
          const socket = this.host.socket;
          socket.cork();
          socket.write(frameHeader(bodyLength(out.frame)));
          const ok = this.host.writeBody(out.frame);
          socket.uncork();
          offset = out.nextOffset;
          this.offset = offset;
          if (!ok) await this.waitDrain(signal);
          continue;
        }
        offset = out.nextOffset;
        this.offset = offset;
        const wait = req.fence ? changed.signal : signal;
        const hasData = await req.partition.waitForData(offset, Math.max(1, Math.min(keepalive, validForMs)), wait, req.isolation);
        if (!hasData && !signal.aborted && !this.host.closed() && !req.partition.isClosed) this.host.writeNow(frameHeader(0));
      }
      if (!this.host.closed()) this.end('stopped', offset);
    } finally {
      unwatch?.();
    }
  }

  /** Backpressure for push streams: wait for the client to read, close it if it never does. */
  private waitDrain(signal: AbortSignal): Promise<void> {
    const socket = this.host.socket;
    return new Promise<void>((resolve) => {
      const timer = setTimeout(() => {
        this.host.destroy('stream reader stalled');
        resolve();
      }, this.host.broker.config.writeStallTimeoutMs);
      timer.unref();
      const done = () => {
        clearTimeout(timer);
        socket.off('drain', done);
        socket.off('close', done);
        signal.removeEventListener('abort', done);
        resolve();
      };
      socket.once('drain', done);
      socket.once('close', done);
      signal.addEventListener('abort', done, { once: true });
    });
  }

  /** A frame from the client on the open stream: `STREAM_CONTROL type=CLOSE` ends it; anything else is refused. */
  onFrame(body: Buffer): void {
    if (body.length === 0) return;
    try {
      // A text body that is not UTF-8 is refused as on any connection (docs/protocol.md section 1); a
      // batch frame is no STREAM_CONTROL either.
      if (!isBatchBody(body) && !isUtf8(body)) throw new TributaryError('invalid_encoding');
      checkStreamClose(isBatchBody(body) ? '' : body.toString('utf8'));
    } catch (err) {
      this.host.writeNow(encodeFrame(formatError(err as TributaryError)));
      return;
    }
    this.ac.abort();
  }

  /** `code`: why a fenced stream ended (the fence's refusal, docs/protocol.md "Fenced reads"). */
  private end(reason: StreamCloseReason, offset: number, code?: string): void {
    // Once: a stream ended from outside (shutdown, revocation) also ends its own loop, which would say so again.
    if (this.host.socket.destroyed || this.ended) return;
    this.ended = true;
    this.ac.abort();
    this.host.socket.end(encodeFrame(formatLine('STREAM_CONTROL', { type: 'CLOSE', reason, offset, code })));
  }

  /** Graceful broker shutdown: the stream ends with a CLOSE frame. */
  async shutdown(): Promise<void> {
    this.end('stopped', this.offset);
    await this.done;
  }

  /** The connection closed. */
  abort(): void {
    this.ac.abort();
  }
}

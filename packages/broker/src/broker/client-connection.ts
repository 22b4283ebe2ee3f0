import { isUtf8 } from 'node:buffer';
import type net from 'node:net';
import { batchTxnKind, isBatchBody } from 'tributary-protocol/batch.js';
import { type Params, formatError, parseLine } from 'tributary-protocol/command.js';
import { TributaryError } from 'tributary-protocol/errors.js';
import { FrameDecoder, encodeFrame, frameHeader } from 'tributary-protocol/frame.js';
import { type BrokerContext, type CommandSpec, type ConnectionContext, type Reply, bodyLength } from './command-context.js';
import { lookupCommand } from './commands.js';
import type { DirectReads } from './direct-reads.js';
import { MAX_FRAME_BEFORE_AUTHENTICATION } from './limits.js';
import { produceBatch } from './produce-commands.js';
import { PushStream, type StreamHost } from './push-stream.js';
import { writeReplyBody } from './reply-buffers.js';
import { PRODUCE_ACKS } from './turn-writes.js';
import { FRAME_PREFIX, RequestBudget } from './request-budget.js';
import { txnBatch } from './txn-commands.js';

/** A request's place in the reply order. */
interface PendingReply {
  seq: number;
  /** The command, for the metrics. */
  label: string;
  /** When its frame arrived (performance.now()): the request's duration includes a wait behind a held one. */
  received: number;
  /** Its frame's bytes, pending (RequestBudget) until the reply was written. */
  bytes: number;
  done: boolean;
  reply: Reply | 'stream';
}

/**
 * One client connection: splits frames, runs requests, and writes replies in request order. It never
 * buffers without bound: a client that stops reading gets its socket paused, then closed; one past the
 * limits of its unanswered requests (RequestBudget) is not read until replies went out.
 */
export class ClientConnection implements ConnectionContext {
  features = new Set<string>();
  principal: string | undefined;
  readonly remote: string;
  receivedAt: number | undefined;
  /** Splits the frames: a FrameReader fed by direct reads (direct-reads.ts), else a FrameDecoder fed 'data' chunks. */
  private readonly decoder: { next(max?: number): Buffer | undefined; readonly pendingBytes: number };
  /** Requests started and not yet answered, in request order: each reply is written after every earlier one. */
  private readonly pending: PendingReply[] = [];
  /** Sequence number of the next request started. */
  private seq = 0;
  private writtenWaiters: Array<{ seq: number; resolve: () => void }> = [];
  /** A request that is not pipelined is running: later requests wait in `waiting` until it has finished. */
  private holding = false;
  private readonly waiting: Array<{ body: Buffer; received: number; bytes: number }> = [];
  /** The requests read and not answered, their count and bytes: past a limit the connection is not read. */
  private readonly budget: RequestBudget;
  private pumping = false;
  /** The STREAM this connection turned into (push-stream.ts): what the client sends after it is stream control. */
  private stream: PushStream | undefined;
  private frameTimer: NodeJS.Timeout | undefined;
  private stallTimer: NodeJS.Timeout | undefined;
  /** A request before authentication (AUTH) is running: the frames after it wait, unread, for its outcome. */
  private heldBeforeAuth = false;
  /** A frame header was refused: nothing after it is read. */
  private unframed = false;
  private closed = false;

  constructor(
    private readonly socket: net.Socket,
    private readonly broker: BrokerContext,
    /** Broker state and security gate (authentication, permissions, topic ACLs, rate); `req` is the line or batch body. */
    private readonly admission: (command: string, conn: ClientConnection, req: ReturnType<typeof parseLine> | Buffer) => TributaryError | undefined,
    private readonly onClosed: (c: ClientConnection) => void,
    reads?: DirectReads,
  ) {
    this.remote = `${socket.remoteAddress}:${socket.remotePort}`;
    if (reads) {
      this.decoder = reads.reader;
      // While held, no frame gets a buffer of its own: it would be memory for bytes not read yet.
      reads.limit = () =>
        this.closed || this.heldBeforeAuth || this.unframed || this.budget.full ? 0 : this.broker.security?.beforeAuthentication(this) === true ? MAX_FRAME_BEFORE_AUTHENTICATION : broker.config.maxFrameBytes;
      reads.onRead = (n) => {
        if (this.unframed || this.closed) return false;
        this.budget.read(n);
        reads.reader.wrote(n);
        try {
          this.pump();
        } catch (err) {
          // Node would not ask the reader where the next read lands: nothing more may be read.
          this.broker.logger.error({ remote: this.remote, err: String(err) }, 'failed to handle what a connection sent; closing it');
          this.destroy('internal_error');
          return false;
        }
        return true;
      };
    } else {
      const chunks = new FrameDecoder(broker.config.maxFrameBytes, broker.framePool?.take);
      this.decoder = chunks;
      socket.on('data', (chunk: Buffer) => this.onData(chunks, chunk));
    }
    this.budget = new RequestBudget(broker.metrics.pendingRequestBytes);
    socket.setNoDelay(true);
    socket.setTimeout(broker.config.idleTimeoutMs, () => {
      if (!this.stream) this.destroy('idle timeout');
    });
    socket.on('drain', () => this.onDrain());
    socket.on('error', () => {});
    socket.on('close', () => this.onClose());
  }

  private onData(chunks: FrameDecoder, chunk: Buffer): void {
    if (this.unframed) return;
    this.budget.read(chunk.length);
    chunks.append(chunk);
    this.pump();
  }

  /**
   * Splits and starts the complete frames, then reads on unless held (flow()). Before authentication each is
   * held to the small limit, checked on its declared length before its body is buffered, and a request that
   * holds the start (AUTH, whose check decides the limit of what follows) stops the splitting and the
   * reading until it has finished. At the limits of the requests unanswered (budget) no frame is taken.
   */
  private pump(): void {
    if (this.pumping) return; // a reply written from within the loop (writeReplies): the loop goes on
    this.pumping = true;
    let took = false;
    while (!this.closed && !this.heldBeforeAuth && !this.unframed && !this.budget.full) {
      const early = this.broker.security?.beforeAuthentication(this) === true;
      let body: Buffer | undefined;
      try {
        body = this.decoder.next(early ? MAX_FRAME_BEFORE_AUTHENTICATION : undefined);
      } catch (err) {
        this.pumping = false;
        this.refuseFraming(err as TributaryError, early);
        return;
      }
      if (body === undefined) break;
      took = true;
      this.onFrame(body);
      // An AUTH of a logged-in connection too: its session counts as logged out while the check runs.
      if (this.holding && (early || this.pending[this.pending.length - 1]?.label === 'AUTH')) this.heldBeforeAuth = true;
    }
    this.pumping = false;
    this.armFrameTimer(took);
    this.flow();
  }

  /** Reads unless held: an AUTH running, a refused frame, replies not read, the requests unanswered (budget). */
  private flow(): void {
    if (this.closed) return;
    if (this.budget.full || this.heldBeforeAuth || this.unframed || this.writeBlocked()) this.socket.pause();
    else this.socket.resume();
  }

  /**
   * The rest of the stream cannot be framed: answered once, after the replies to the requests before it, and
   * closed (not left half-open while the client is still sending the frame).
   */
  private refuseFraming(e: TributaryError, early: boolean): void {
    this.unframed = true;
    this.socket.pause();
    clearTimeout(this.frameTimer);
    const refused = early && e.code === 'frame_too_large' ? new TributaryError('frame_too_large', { ...e.fields, reason: 'before authentication' }) : e;
    void this.written(this.seq).then(() => {
      this.writeNow(encodeFrame(formatError(refused)));
      this.destroy(early ? 'frame too large before authentication' : 'bad frame', 1000);
    });
  }

  /** A request that held the frames before authentication has finished: the next ones see its outcome. */
  private releaseBeforeAuth(): void {
    if (!this.heldBeforeAuth) return;
    this.heldBeforeAuth = false;
    this.pump();
  }

  /**
   * A frame that starts but never completes (one byte a second) must not hold the connection forever.
   * Each frame is timed from its own first bytes (`completed`: the pending bytes, if any, begin a new one):
   * a pipelining client whose reads end mid-frame one after another is not a stalled frame.
   */
  private armFrameTimer(completed: boolean): void {
    // Neither armed nor kept while the bytes are held unread (heldBeforeAuth; budget full, reached only in
    // pump()): the frame gets its full time once they may be read.
    if (this.decoder.pendingBytes === 0 || completed || this.budget.full) {
      clearTimeout(this.frameTimer);
      this.frameTimer = undefined;
    }
    if (this.decoder.pendingBytes > 0 && !this.frameTimer && !this.heldBeforeAuth && !this.budget.full && !this.closed) {
      this.frameTimer = setTimeout(() => {
        this.writeNow(encodeFrame(formatError(new TributaryError('request_timeout', { reason: 'incomplete frame' }))));
        this.destroy('incomplete frame timeout', 200);
      }, this.broker.config.frameTimeoutMs);
      this.frameTimer.unref();
    }
  }

  private onFrame(body: Buffer): void {
    const bytes = body.length + FRAME_PREFIX;
    if (this.stream || body.length === 0) {
      // A frame on an open stream is answered at once (if at all), a keepalive from a client never.
      this.budget.answered(bytes, false);
      this.stream?.onFrame(body);
      return;
    }
    this.budget.taken();
    const received = performance.now();
    // A request that holds the start (or requests queued behind one) keeps this one waiting its turn.
    if (this.holding || this.waiting.length > 0) this.waiting.push({ body, received, bytes });
    else this.start(body, received, bytes);
  }

  /**
   * Runs one request. Its synchronous part (parsing, admission) runs now, in arrival order; a pipelined
   * request or a batch then lets the next one start at once, anything else holds later requests until it
   * has finished. Plain callbacks rather than an async function per request: at thousands of requests a
   * second, the promises of a per-request async frame were a large share of the broker's garbage.
   */
  private start(body: Buffer, received: number, bytes: number): void {
    const slot: PendingReply = { seq: this.seq++, label: 'unknown', received, bytes, done: false, reply: '' };
    this.pending.push(slot);
    let result: Reply | 'stream' | Promise<Reply | 'stream'>;
    try {
      if (isBatchBody(body)) {
        // A transactional batch is TXN_PUBLISH (a producer's) or TXN_APPEND (a coordinator's), for the permission check too.
        const txn = batchTxnKind(body);
        slot.label = txn === 'producer' ? 'TXN_PUBLISH' : txn === 'coordinator' ? 'TXN_APPEND' : 'BATCH';
        const refused = this.admission(slot.label, this, body);
        if (refused) throw refused;
        result = txn ? txnBatch(this.broker, this, body) : produceBatch(this.broker, this, body, received);
      } else {
        if (!isUtf8(body)) throw new TributaryError('invalid_encoding');
        const line = parseLine(body.toString('utf8'));
        const { name, spec, params } = lookupCommand(line);
        slot.label = name;
        const refused = this.admission(name, this, line);
        if (refused) throw refused;
        if (!spec) {
          // Set once its parameters passed: a refused STREAM leaves the connection taking requests.
          const stream = new PushStream(this.streamHost(), line);
          result = stream.start(params);
          this.stream = stream;
        } else if (spec.pipelined) {
          this.receivedAt = received;
          result = spec.handler(this.broker, this, params);
        } else {
          this.holding = true;
          result = this.runHeld(slot, spec, params, received);
        }
      }
    } catch (err) {
      this.failed(slot, err);
      return;
    }
    if (typeof result === 'object' && !Buffer.isBuffer(result) && !Array.isArray(result)) {
      result.then(
        (r) => this.completed(slot, r),
        (err: unknown) => this.failed(slot, err),
      );
    } else this.completed(slot, result);
  }

  /**
   * A request that is not pipelined runs only once every earlier reply is written (so it sees what earlier
   * pipelined requests did, e.g. a CONSUME after a PUBLISH) and the unread backlog is within
   * maxPendingReplyBytes: a client that never reads cannot make the broker build reply after reply.
   * Later requests wait until it has finished. A reload of the rules meanwhile holds it to the new ones (Security.recheck).
   */
  private async runHeld(slot: PendingReply, spec: CommandSpec, params: Params, received: number): Promise<Reply> {
    try {
      await this.written(slot.seq);
      while (this.writeBlocked() && !this.closed && !this.socket.destroyed) {
        await new Promise<void>((resolve) => {
          const done = () => {
            this.socket.off('drain', done);
            this.socket.off('close', done);
            resolve();
          };
          this.socket.once('drain', done);
          this.socket.once('close', done);
        });
      }
      if (this.closed || this.socket.destroyed) throw new TributaryError('request_timeout', { reason: 'connection closed' });
      this.broker.security?.recheck(slot.label, this, params.line);
      this.receivedAt = received;
      return await spec.handler(this.broker, this, params);
    } finally {
      this.holding = false;
      this.startWaiting();
      this.releaseBeforeAuth();
    }
  }

  /** Starts the requests that waited behind one that held the start, until another holds it. */
  private startWaiting(): void {
    while (!this.holding && this.waiting.length > 0) {
      const next = this.waiting.shift()!;
      if (this.stream) {
        // A STREAM started meanwhile: what the client sent after it is stream control, as onFrame treats it.
        this.budget.answered(next.bytes);
        this.stream.onFrame(next.body);
      } else this.start(next.body, next.received, next.bytes);
    }
  }

  private failed(slot: PendingReply, err: unknown): void {
    const answer = (e: unknown) => this.completed(slot, this.errorReply(e, slot.label));
    this.refineError(err).then(answer, answer);
  }

  /** A request has its reply: written now if every earlier reply was, else once they are. */
  private completed(slot: PendingReply, reply: Reply | 'stream'): void {
    slot.reply = reply;
    slot.done = true;
    if (this.pending[0] === slot) this.writeReplies();
  }

  /**
   * Writes the replies that are ready, in request order, up to the first that is not (a STREAM's place too:
   * its frames go out apart), then takes the frames left buffered at the limits of the budget, reads on.
   */
  private writeReplies(): void {
    const metrics = this.broker.metrics.requestDuration;
    let answered = false;
    for (let slot = this.pending[0]; slot?.done; slot = this.pending[0]) {
      this.pending.shift();
      metrics.child(slot.label).observe((performance.now() - slot.received) / 1000);
      this.budget.answered(slot.bytes);
      answered = true;
      if (slot.reply !== 'stream') this.writeReply(slot.reply, PRODUCE_ACKS.has(slot.label));
    }
    if (answered && this.decoder.pendingBytes > 0) this.pump();
    else if (answered) this.flow();
    if (this.writtenWaiters.length > 0) {
      const written = this.writtenSeq;
      const ready = this.writtenWaiters.filter((w) => w.seq <= written);
      if (ready.length > 0) {
        this.writtenWaiters = this.writtenWaiters.filter((w) => w.seq > written);
        for (const w of ready) w.resolve();
      }
    }
  }

  /** Sequence number of the first request whose reply is not written yet (the next one when none is pending). */
  private get writtenSeq(): number {
    return this.pending.length > 0 ? this.pending[0]!.seq : this.seq;
  }

  /** Resolves once every request before sequence number `seq` has its reply written. */
  private written(seq: number): Promise<void> {
    if (this.writtenSeq >= seq) return Promise.resolve();
    return new Promise<void>((resolve) => this.writtenWaiters.push({ seq, resolve }));
  }

  /**
   * In a cluster, a topic or partition this broker does not know may be one it has not opened yet: that is
   * the retriable `topic_loading`, never the final `topic_not_found` (ClusterNode.refineNotFound).
   */
  private async refineError(err: unknown): Promise<unknown> {
    const cluster = this.broker.cluster;
    if (!cluster || !(err instanceof TributaryError) || (err.code !== 'topic_not_found' && err.code !== 'partition_not_found')) return err;
    return cluster.refineNotFound(err);
  }

  private errorReply(err: unknown, label: string): string {
    let e: TributaryError;
    if (err instanceof TributaryError) e = err;
    else {
      this.broker.logger.error({ err, command: label, remote: this.remote }, 'request failed');
      e = new TributaryError('internal_error', { reason: err instanceof Error ? err.message : String(err) });
    }
    // Not a reply nobody reads: a closing SDK consumer leaves its group while its heartbeat and reads wait (docs/operations.md).
    if (!this.closed) this.broker.metrics.errors.inc({ command: label, code: e.code });
    return formatError(e);
  }

  private writeBlocked(): boolean {
    return this.socket.writableLength > this.broker.config.maxPendingReplyBytes;
  }

  /** `ack`: the reply is a produce acknowledgement (TurnWrites writes those last in a turn). */
  private writeReply(r: Reply, ack: boolean): void {
    this.broker.turnWrites.corkFor(this.socket, ack);
    // A text reply and its frame header in one buffer: one write rather than two.
    if (typeof r === 'string') this.socket.write(encodeFrame(r));
    else {
      this.socket.write(frameHeader(bodyLength(r)));
      this.writeBody(r);
    }
    this.checkBackpressure();
  }

  /** Writes a reply body, maybe in pieces; one from the broker's ReplyBuffers goes back to them once the socket wrote it. */
  private writeBody(body: Buffer | Buffer[]): boolean {
    return writeReplyBody(this.socket, body, this.broker.replyBuffers, this.broker.framePool);
  }

  private writeNow(frame: Buffer): void {
    if (!this.socket.destroyed) this.socket.write(frame);
  }

  /** Stop reading requests while the client does not read its replies; close it if that lasts. */
  private checkBackpressure(): void {
    if (!this.writeBlocked()) return;
    this.socket.pause();
    if (!this.stallTimer) {
      this.stallTimer = setTimeout(() => this.destroy('client does not read its replies'), this.broker.config.writeStallTimeoutMs);
      this.stallTimer.unref();
    }
  }

  private onDrain(): void {
    clearTimeout(this.stallTimer);
    this.stallTimer = undefined;
    this.flow();
  }

  /** What a STREAM needs of this connection; its seq is taken when it runs, after its own place. */
  private streamHost(): StreamHost {
    return {
      conn: this,
      socket: this.socket,
      broker: this.broker,
      repliesWritten: () => this.written(this.seq),
      writeBody: (buf) => this.writeBody(buf),
      writeNow: (frame) => this.writeNow(frame),
      destroy: (reason) => this.destroy(reason),
      closed: () => this.closed,
    };
  }

  /** Users or ACLs changed (SIGHUP): a STREAM they no longer allow ends (PushStream.revalidate). */
  revalidateStream(authorize: (command: string, conn: ClientConnection, req: ReturnType<typeof parseLine>) => TributaryError | undefined): void {
    this.stream?.revalidate((command, line) => authorize(command, this, line));
  }

  /** Graceful broker shutdown: end streams with a CLOSE frame, let in-flight replies finish. */
  async shutdown(): Promise<void> {
    if (this.stream) return this.stream.shutdown();
    // Requests waiting behind a held one start (and take a place in `pending`) before it completes, so
    // this also waits for their replies.
    while (this.writtenSeq < this.seq && !this.stream) await this.written(this.seq);
    this.socket.end();
  }

  destroy(reason: string, graceMs = 0): void {
    if (this.closed) return;
    this.broker.logger.debug({ remote: this.remote, reason }, 'closing connection');
    this.broker.metrics.connectionsRejected.inc({ reason });
    if (graceMs > 0) {
      this.socket.end();
      setTimeout(() => this.socket.destroy(), graceMs).unref();
    } else {
      this.socket.destroy();
    }
  }

  private readonly closedAc = new AbortController();
  get closedSignal(): AbortSignal {
    return this.closedAc.signal;
  }

  private onClose(): void {
    if (this.closed) return;
    this.closed = true;
    this.closedAc.abort();
    clearTimeout(this.frameTimer);
    clearTimeout(this.stallTimer);
    this.budget.release();
    this.stream?.abort();
    this.onClosed(this);
  }
}

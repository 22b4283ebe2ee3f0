/**
 * One client connection on the Kafka port. Requests may be pipelined: each starts when it is read, and
 * responses go out in request order, as Kafka clients require; past 256 of them, or 16 MiB, unanswered the
 * connection is not read until responses went out (MAX_PENDING_REQUEST_BYTES). What cannot be answered (a frame that is
 * not a request, an unknown API key, a version outside the advertised range of an API other than
 * ApiVersions) closes the connection, as a Kafka broker does; an ApiVersions request of a newer version
 * gets the KIP-511 downgrade reply (docs/kafka.md, "Bad input"). With authentication on, nothing but
 * ApiVersions, SaslHandshake and SaslAuthenticate is served until the connection has authenticated: any
 * other request closes it, as a Kafka broker closes a SASL listener's connection (docs/kafka.md,
 * "Authentication"). Until then its requests are also handled one at a time, each after the previous answer
 * went out, and a frame above 512 KiB closes it, as Kafka's SASL authenticator reads (the channel muted while
 * it authenticates, sasl.server.max.receive.size): pipelined SaslAuthenticate requests would each queue a
 * password check on the broker-wide queue, before the first one's failure ended the connection.
 */
import type net from 'node:net';
import type { Logger } from '../common/logger.js';
import { EndConnection, type KafkaHandler } from './apis/handler.js';
import type { AppendTurn, KafkaIdentity, KafkaRequestContext, SaslState } from './context.js';
import { API_VERSIONS_KEY } from './protocol/apis.js';
import { SaslAuthenticate, SaslHandshake } from './protocol/messages/sasl.js';
import { KafkaCodecError } from './protocol/errors.js';
import { kafkaErrorName } from './protocol/error-codes.js';
import { KafkaFrameSplitter, MIN_REQUEST_FRAME } from './protocol/frame.js';
import { authenticateBareToken } from './apis/sasl.js';
import { decodeRequest, encodeApiVersionsUnsupported, encodeResponseParts, peekRequestHeader } from './protocol/headers.js';

/** Past this many unanswered requests the connection stops reading until responses went out. */
const MAX_IN_FLIGHT = 256;
/**
 * Past this many bytes of requests read and not yet answered (the requests in flight and what is buffered
 * of the next ones) a connection stops reading until responses went out, as a Kafka broker reads one
 * request per connection at a time: 256 pipelined requests of up to `--max-frame-bytes` each would be
 * 16 GiB. One request alone is always read whole (up to `--max-frame-bytes`), so a connection holds at
 * most this, or one larger request, plus a socket read (docs/kafka.md, "Requests in flight").
 */
export const MAX_PENDING_REQUEST_BYTES = 16 * 1024 * 1024;
/** A frame's size prefix, counted with its request. */
const FRAME_PREFIX = 4;
/** The APIs served before a connection authenticated (authentication on). */
const BEFORE_AUTHENTICATION = new Set([API_VERSIONS_KEY, SaslHandshake.apiKey, SaslAuthenticate.apiKey]);
/** How long a connection that is being ended gets to take its last response. */
const END_GRACE_MS = 1000;
/** The largest frame before authentication (authentication on): Kafka's sasl.server.max.receive.size default. */
const MAX_FRAME_BEFORE_AUTHENTICATION = 512 * 1024;

export interface KafkaConnectionOptions {
  handlers: ReadonlyMap<number, KafkaHandler>;
  context: Pick<KafkaRequestContext, 'broker' | 'advertised'>;
  logger: Logger;
  maxFrameBytes: number;
  idleTimeoutMs: number;
  /** A frame begun but not completed within this closes the connection (`--frame-timeout-ms`). */
  frameTimeoutMs: number;
  /** Responses queued past this (a client that does not read) stop the reading of its requests. */
  maxPendingReplyBytes: number;
  /** A client that leaves more than maxPendingReplyBytes unread this long is closed (`--write-stall-timeout-ms`). */
  writeStallTimeoutMs: number;
  /** `--max-requests-per-second-per-connection` (0: no limit): past it responses carry a throttle time and reading pauses for it. */
  maxRequestsPerSecond: number;
  onClose: (c: KafkaConnection) => void;
}

export class KafkaConnection {
  private readonly splitter: KafkaFrameSplitter;
  private readonly abort = new AbortController();
  private readonly ctx: KafkaRequestContext;
  /** The response chain: each request's response is written after the previous one's. */
  private tail: Promise<void> = Promise.resolve();
  private inFlight = 0;
  /** Bytes read from the socket whose requests are not answered yet (MAX_PENDING_REQUEST_BYTES). */
  private unanswered = 0;
  private closed = false;
  /** The last response is going out, then the connection closes (a failed SASL exchange). */
  private ending = false;
  /** A request before authentication is being answered: the next frame waits for it (pump()). */
  private held = false;
  /** Shutting down (drain()): the responses in progress go out, no further frame is taken. */
  private draining = false;
  /** The request budget (a token bucket that may go into debt) and the time reading resumes after a throttle. */
  private tokens: number;
  private refilledAt = performance.now();
  private mutedUntil = 0;
  private muteTimer: NodeJS.Timeout | undefined;
  private stallTimer: NodeJS.Timeout | undefined;
  private frameTimer: NodeJS.Timeout | undefined;
  /** Released by the latest Produce once its appends started (produceTurn()). */
  private appendOrder: Promise<void> = Promise.resolve();
  readonly remote: string;

  constructor(
    private readonly socket: net.Socket,
    private readonly o: KafkaConnectionOptions,
  ) {
    this.remote = `${socket.remoteAddress}:${socket.remotePort}`;
    // The minimum request size is checked per frame (request()): a bare SASL token may be shorter.
    this.splitter = new KafkaFrameSplitter({ maxFrameBytes: o.maxFrameBytes, minFrameBytes: 0 });
    this.tokens = o.maxRequestsPerSecond;
    const identity: KafkaIdentity = {
      features: new Set(),
      principal: undefined,
      remote: this.remote,
      // A password check still queued when the connection closes is dropped (security.ts).
      closedSignal: this.abort.signal,
      destroy: (reason) => this.close(reason),
    };
    const sasl: SaslState = { step: 'start' };
    const security = o.context.broker.security;
    this.ctx = {
      ...o.context,
      signal: this.abort.signal,
      identity,
      sasl,
      produceTurn: () => this.produceTurn(),
      authorize: (command, topic, params) => {
        if (!security.enabled) return undefined;
        const map = new Map(params === undefined ? [] : Object.entries(params));
        if (topic !== undefined) map.set('topic', topic);
        return security.authorize(command, identity, { head: command, params: map, positional: [] });
      },
    };
    // The authentication timeout, and a client certificate naming a user authenticates (as on the main port).
    security.attach(identity, socket);
    socket.setNoDelay(true);
    socket.setTimeout(o.idleTimeoutMs, () => this.close('idle'));
    socket.on('data', (chunk: Buffer) => this.onData(chunk));
    socket.on('drain', () => this.flow());
    socket.on('error', () => this.close('socket error'));
    socket.on('close', () => this.close('closed by the client'));
  }

  /** Ends the connection (responses not yet written are dropped). */
  close(reason: string): void {
    if (this.closed) return;
    this.closed = true;
    clearTimeout(this.frameTimer);
    clearTimeout(this.muteTimer);
    clearTimeout(this.stallTimer);
    this.o.context.broker.metrics.kafkaPendingRequestBytes.dec(this.unanswered);
    this.unanswered = 0;
    this.abort.abort();
    this.o.logger.debug({ remote: this.remote, reason }, 'Kafka connection closed');
    this.socket.destroy();
    this.o.onClose(this);
  }

  /** Lets the responses in progress go out, then closes; for shutdown. */
  /** Answers what is in flight within `timeoutMs`, then closes; true when the timeout cut it short. */
  async drain(timeoutMs: number): Promise<boolean> {
    this.draining = true;
    this.socket.pause();
    const cut = await Promise.race([this.tail.then(() => false), new Promise<boolean>((r) => setTimeout(() => r(true), timeoutMs).unref())]);
    this.close('broker stopping');
    return cut;
  }

  private onData(chunk: Buffer): void {
    this.unanswered += chunk.length;
    this.o.context.broker.metrics.kafkaPendingRequestBytes.inc(chunk.length);
    this.splitter.append(chunk);
    this.pump();
    // A frame still arriving counts too: its bytes may be what reaches the limit.
    this.flow();
  }

  /** A request was answered (or needs no answer): its bytes are no longer pending. */
  private answered(bytes: number): void {
    if (this.closed) return;
    this.unanswered -= bytes;
    this.o.context.broker.metrics.kafkaPendingRequestBytes.dec(bytes);
  }

  /**
   * The requests not yet answered are at a limit (MAX_IN_FLIGHT, or MAX_PENDING_REQUEST_BYTES while one
   * is in flight): no frame is taken and nothing read until responses went out.
   */
  private get full(): boolean {
    return this.inFlight >= MAX_IN_FLIGHT || (this.inFlight > 0 && this.unanswered >= MAX_PENDING_REQUEST_BYTES);
  }

  /** Authentication is on and this connection has not authenticated (yet). */
  private get beforeAuthentication(): boolean {
    return this.ctx.broker.security.enabled && this.ctx.identity.principal === undefined;
  }

  /**
   * Handles the complete frames buffered: before authentication one at a time, each once the previous was
   * answered; after it, while the requests unanswered are within their limits (full).
   */
  private pump(): void {
    let took = false;
    while (!this.closed && !this.ending && !this.draining && !this.held && !this.full) {
      // Checked per frame, with the state the answers before it left: a client's first request after its
      // login may be large.
      const early = this.beforeAuthentication;
      let frame: Buffer | undefined;
      try {
        frame = this.splitter.next(early ? Math.min(MAX_FRAME_BEFORE_AUTHENTICATION, this.o.maxFrameBytes) : this.o.maxFrameBytes);
      } catch (err) {
        this.refuse(err, early ? 'frame too large before authentication' : 'bad frame');
        return;
      }
      if (frame === undefined) break;
      took = true;
      this.held = early;
      this.request(frame);
    }
    // A frame begun must complete within the frame timeout, however its bytes trickle in (armed once per
    // frame, as on the main port: re-arming on every chunk would let a slow sender hold it forever).
    // A completed frame ends its timer; the one now pending (if any) gets its own full timeout, from when
    // it may be read (a held or full connection is not reading).
    if (took || this.splitter.pendingBytes === 0 || this.closed) {
      clearTimeout(this.frameTimer);
      this.frameTimer = undefined;
    }
    if (this.splitter.pendingBytes > 0 && !this.closed && !this.held && !this.full && !this.frameTimer) {
      this.frameTimer = setTimeout(() => this.close('frame not completed in time'), this.o.frameTimeoutMs);
      this.frameTimer.unref();
    }
  }

  /** The next place in the order of appends: ready when the previous Produce released its own. */
  private produceTurn(): AppendTurn {
    const ready = this.appendOrder;
    let release!: () => void;
    this.appendOrder = new Promise<void>((r) => (release = r));
    return { ready, release };
  }

  /** Reads while the requests unanswered are within their limits (full) and the client takes its responses. */
  private flow(): void {
    if (this.closed || this.ending || this.draining) return;
    const muted = performance.now() < this.mutedUntil || this.held;
    const backlogged = this.socket.writableLength > this.o.maxPendingReplyBytes;
    const full = this.full;
    if (muted || full || backlogged) this.socket.pause();
    else this.socket.resume();
    // Not reading by the broker's choice: a frame begun gets its full timeout once reading resumes (pump()).
    if (full && this.frameTimer) {
      clearTimeout(this.frameTimer);
      this.frameTimer = undefined;
    }
    // A client that does not read its responses is closed once that lasts (as on the main port).
    if (backlogged && !this.stallTimer) {
      this.stallTimer = setTimeout(() => {
        this.o.logger.warn({ remote: this.remote }, 'Kafka connection closed: the client does not read its responses');
        this.close('client does not read its responses');
      }, this.o.writeStallTimeoutMs);
      this.stallTimer.unref();
    } else if (!backlogged && this.stallTimer) {
      clearTimeout(this.stallTimer);
      this.stallTimer = undefined;
    }
  }

  /**
   * The request rate limit, as Kafka's quotas (KIP-219): a request over the budget is still answered, with
   * the time the client must wait in its throttle time, and the connection reads nothing more until then.
   * Returns that time in ms (0 within the budget).
   */
  private throttle(): number {
    const rate = this.o.maxRequestsPerSecond;
    if (rate <= 0) return 0;
    // Monotonic, as the main port's limit: a wall-clock step must not mute the connection.
    const now = performance.now();
    this.tokens = Math.min(rate, this.tokens + ((now - this.refilledAt) * rate) / 1000);
    this.refilledAt = now;
    this.tokens -= 1;
    if (this.tokens >= 0) return 0;
    const waitMs = Math.ceil((-this.tokens * 1000) / rate);
    this.mutedUntil = now + waitMs;
    this.socket.pause();
    clearTimeout(this.muteTimer);
    this.muteTimer = setTimeout(() => this.flow(), waitMs);
    this.muteTimer.unref();
    return waitMs;
  }

  private refuse(err: unknown, what: string): void {
    this.o.logger.info({ remote: this.remote, reason: err instanceof Error ? err.message : String(err) }, `Kafka ${what}: connection closed`);
    this.close(what);
  }

  private request(frame: Buffer): void {
    const bytes = frame.length + FRAME_PREFIX;
    if (this.ctx.sasl.step === 'handshaken' && this.ctx.sasl.raw) {
      // After a SaslHandshake v0 the token comes bare; a refused one closes the connection unanswered.
      this.respond(bytes, authenticateBareToken(this.ctx, frame), () => (this.ctx.sasl.step === 'failed' ? 'SASL authentication failed' : undefined));
      return;
    }
    if (frame.length < MIN_REQUEST_FRAME) {
      this.refuse(new KafkaCodecError('frame_too_small', `frame of ${frame.length} bytes, below ${MIN_REQUEST_FRAME}`, { size: frame.length, at: 0 }), 'bad frame');
      return;
    }
    // Refused by the header alone: a request body is decoded only for an authenticated connection (a
    // Metadata request of 8 million topic names held the event loop for seconds before its refusal).
    const early = peekRequestHeader(frame).apiKey;
    if (this.ctx.broker.security.enabled && this.ctx.identity.principal === undefined && !BEFORE_AUTHENTICATION.has(early)) {
      this.refuse(new Error(`API key ${early} before SASL authentication`), 'request before authentication');
      return;
    }
    let decoded: ReturnType<typeof decodeRequest>;
    try {
      decoded = decodeRequest(frame);
    } catch (err) {
      if (err instanceof KafkaCodecError && err.reason === 'unsupported_version' && peekRequestHeader(frame).apiKey === API_VERSIONS_KEY) {
        this.respond(bytes, Promise.resolve([encodeApiVersionsUnsupported(peekRequestHeader(frame).correlationId)]));
        return;
      }
      this.refuse(err, 'request not understood');
      return;
    }
    const { header, api, body } = decoded;
    // Bound before recovery (a cluster registers its address): a client that came early reconnects later.
    if (!this.ctx.broker.ready) {
      this.refuse(new Error('the broker is not ready'), 'request before the broker is ready');
      return;
    }
    if (this.ctx.broker.security.enabled && this.ctx.identity.principal === undefined && !BEFORE_AUTHENTICATION.has(api.key)) {
      this.refuse(new Error(`${api.name} before SASL authentication`), 'request before authentication');
      return;
    }
    const h = this.o.handlers.get(api.key);
    const version = header.apiVersion;
    if (!h || version < api.minVersion || version > api.maxVersion) {
      if (api.key === API_VERSIONS_KEY) {
        this.respond(bytes, Promise.resolve([encodeApiVersionsUnsupported(header.correlationId)]));
        return;
      }
      this.refuse(new Error(`${api.name} v${version} is not served (served: ${h ? `${api.minVersion}-${api.maxVersion}` : 'none'})`), 'request not served');
      return;
    }
    const throttleMs = this.throttle();
    const started = performance.now();
    let endReason: string | undefined;
    const answer = Promise.resolve()
      .then(() => h.handle(this.ctx, version, body, header))
      .then((res) => {
        // Beside the main port's commands, under the API's name (docs/operations.md, "Metrics").
        this.ctx.broker.metrics.requestDuration.child(`kafka_${api.name}`).observe((performance.now() - started) / 1000);
        if (res !== null && !(res instanceof EndConnection)) {
          for (const code of errorCodesIn(res)) this.ctx.broker.metrics.errors.inc({ command: `kafka_${api.name}`, code: kafkaErrorName(code) ?? String(code) });
        }
        if (res instanceof EndConnection) endReason = res.reason;
        if (res === null || res instanceof EndConnection) return null;
        if (throttleMs > 0) res.throttleTimeMs = Math.max(throttleMs, (res.throttleTimeMs as number | undefined) ?? 0);
        return encodeResponseParts(api, version, header.correlationId, res);
      });
    // A failed SASL exchange gets its answer, then the connection ends; so does a handler's EndConnection.
    const isSasl = api.key === SaslHandshake.apiKey || api.key === SaslAuthenticate.apiKey;
    this.respond(bytes, answer, () => endReason ?? (isSasl && this.ctx.sasl.step === 'failed' ? 'SASL authentication failed' : undefined));
  }

  /** Stops reading, lets what was written go out (bounded), then closes. */
  private end(reason: string): void {
    if (this.closed || this.ending) return;
    this.ending = true;
    this.socket.pause();
    this.socket.end(() => this.close(reason));
    setTimeout(() => this.close(reason), END_GRACE_MS).unref();
  }

  /** `bytes`: the request's, pending until its response was written (or it needs none). */
  /** `endAfter`: why the connection ends once this answer went out, if it does. */
  private respond(bytes: number, answer: Promise<Buffer[] | null>, endAfter?: () => string | undefined): void {
    // Before authentication this is the one request being handled (pump() holds the next frames).
    const releases = this.held;
    this.inFlight++;
    this.flow();
    // A rejected answer is a bug in a handler (they turn errors into error codes): the connection ends.
    answer.catch(() => {});
    this.tail = this.tail.then(async () => {
      try {
        const parts = await answer;
        if (parts && !this.closed && !this.ending) {
          this.socket.cork();
          for (const p of parts) this.socket.write(p);
          process.nextTick(() => this.socket.uncork());
        }
        const endReason = endAfter?.();
        if (endReason !== undefined) this.end(endReason);
      } catch (err) {
        this.o.logger.error({ err, remote: this.remote }, 'Kafka request failed');
        this.close('internal error');
      } finally {
        this.inFlight--;
        this.answered(bytes);
        if (releases) this.held = false;
        // Frames left buffered while the connection was held or full.
        this.pump();
        this.flow();
      }
    });
  }
}

/**
 * The error codes other than NONE anywhere in a Kafka response (top level, per topic, per partition),
 * each once: tributary_request_errors_total counts error replies by code (docs/operations.md, "Metrics").
 */
function errorCodesIn(res: object): Set<number> {
  const codes = new Set<number>();
  const walk = (v: unknown): void => {
    if (v === null || typeof v !== 'object' || ArrayBuffer.isView(v)) return;
    if (Array.isArray(v)) {
      for (const x of v) walk(x);
      return;
    }
    for (const [k, x] of Object.entries(v)) {
      if (k === 'errorCode' && typeof x === 'number' && x !== 0) codes.add(x);
      else walk(x);
    }
  };
  walk(res);
  return codes;
}

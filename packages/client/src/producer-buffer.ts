/**
 * The producer's buffer memory (maxBufferedBytes) and its admission queue: send() calls queue their
 * records one at a time in call order, and wait for room while acknowledgements are pending
 * (docs/sdk.md, "Producer": `buffer_full` after requestTimeoutMs).
 */
import { TributaryError } from 'tributary-protocol/errors.js';

export interface BufferOptions {
  readonly maxBufferedBytes: number;
  readonly requestTimeoutMs: number;
}

export class SendBuffer {
  private buffered = 0;
  private roomWaiter: { size: number; wake: () => void } | undefined;
  /** A send is queuing its records on the slow path (waiting for metadata or room); others wait their turn. */
  private admittingValue = false;
  private readonly admissionQueue: Array<() => void> = [];

  constructor(
    private readonly options: BufferOptions,
    /** Aborted by the producer's forced close: a wait for room ends with client_closed. */
    private readonly closeSignal: AbortSignal,
    /** Closes and sends every lingering batch, so acknowledgements can make room. */
    private readonly sendLingering: () => void,
  ) {}

  /** Bytes of records accepted by send() and not yet acknowledged (or failed). */
  get bytes(): number {
    return this.buffered;
  }

  /** A send is queuing on the slow path: a new send must take its turn behind it. */
  get admitting(): boolean {
    return this.admittingValue;
  }

  /** Holds bytes the caller has seen fit (send()'s fast path). */
  hold(size: number): void {
    this.buffered += size;
  }

  /**
   * Queuing is one send at a time, in call order, so records are appended in the order send() was
   * called. Resolves when it is the caller's turn (at once when nobody queues); the wait is bounded by
   * the signal and by requestTimeoutMs (`buffer_full`: the sends ahead are stuck on a full buffer).
   */
  enterAdmission(signal: AbortSignal | undefined, bounded = true): Promise<void> | void {
    if (!this.admittingValue) {
      this.admittingValue = true;
      return;
    }
    const started = performance.now();
    return new Promise<void>((resolve, reject) => {
      const turn = () => {
        cleanup();
        resolve();
      };
      const cancel = (err: unknown) => {
        const i = this.admissionQueue.indexOf(turn);
        if (i >= 0) this.admissionQueue.splice(i, 1);
        cleanup();
        reject(err);
      };
      const cleanup = () => {
        clearTimeout(timer);
        signal?.removeEventListener('abort', onAbort);
      };
      const onAbort = () => cancel(signal!.reason);
      const timer = bounded ? setTimeout(() => cancel(this.full(started)), this.options.requestTimeoutMs) : undefined;
      signal?.addEventListener('abort', onAbort, { once: true });
      this.admissionQueue.push(turn);
    });
  }

  /** buffer_full for a wait that began at `started` (performance.now(), immune to wall-clock steps). */
  private full(started: number): TributaryError {
    return new TributaryError('buffer_full', {
      waitedMs: Math.round(performance.now() - started),
      buffered: this.buffered,
      max: this.options.maxBufferedBytes,
    });
  }

  leaveAdmission(): void {
    const next = this.admissionQueue.shift();
    if (next) next();
    else this.admittingValue = false;
  }

  /**
   * Holds `size` bytes of buffer, waiting for acknowledgements to free room when the buffer is full.
   * Returns undefined when it held them at once (no promise, no await per record while there is room).
   */
  reserve(size: number, signal: AbortSignal | undefined): Promise<void> | undefined {
    if (this.buffered + size <= this.options.maxBufferedBytes) {
      this.buffered += size;
      return undefined;
    }
    return this.waitForRoom(size, signal);
  }

  private async waitForRoom(size: number, signal: AbortSignal | undefined): Promise<void> {
    // Full: whatever is lingering goes out now, so acknowledgements can make room.
    this.sendLingering();
    const started = performance.now();
    await new Promise<void>((resolve, reject) => {
      const finish = (err?: unknown) => {
        clearTimeout(timer);
        signal?.removeEventListener('abort', onAbort);
        this.closeSignal.removeEventListener('abort', onClose);
        this.roomWaiter = undefined;
        if (err) reject(err);
        else resolve();
      };
      const onAbort = () => finish(signal!.reason);
      const onClose = () => finish(new TributaryError('client_closed'));
      const timer = setTimeout(() => finish(this.full(started)), this.options.requestTimeoutMs);
      signal?.addEventListener('abort', onAbort, { once: true });
      this.closeSignal.addEventListener('abort', onClose, { once: true });
      this.roomWaiter = {
        size,
        wake: () => {
          if (this.buffered + size <= this.options.maxBufferedBytes) finish();
        },
      };
    });
    this.buffered += size;
  }

  release(size: number): void {
    this.buffered -= size;
    this.roomWaiter?.wake();
  }
}

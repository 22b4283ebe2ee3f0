/**
 * run({ eachMessage, concurrency }) for one partition installation (docs/sdk.md, "Concurrency"): the
 * reader admits fetched messages into a KeyScheduler, which decides what runs; the processed offset
 * follows the contiguous prefix of handled messages, never past an unhandled one.
 *
 * A handler that throws (docs/sdk.md, "Offsets"): `crash` (fatal=false), no new handler starts, the
 * running ones settle, a backoff, then the partition is read again from its first unhandled message
 * (messages handled above it are not run again). seek() settles the window the same way and then reads
 * from the sought offset. pause() starts nothing new until resume(). Revocation and close abort the
 * handlers' signal and wait for the running ones (`idle()`); nothing handled after that is marked.
 */
import type { ResolvedConcurrency } from './concurrency-options.js';
import type { ConsumedMessage, ConsumerContext } from './consumer-context.js';
import { KeyScheduler, type WindowEntry } from './key-scheduler.js';
import type { EachMessagePayload } from './message-handlers.js';
import type { OffsetCommitter } from './offset-committer.js';
import type { PartitionWorker } from './partition-worker.js';
import { handlerFailureBackoff } from './retry.js';
import { sessionHeld } from './session-guard.js';

export class HandlerWindow {
  private readonly sched: KeyScheduler<ConsumedMessage>;
  /** Waiters for any change (an admission, a start, an end, a reset). */
  private waiters: Array<() => void> = [];
  /** Set while the window settles after a failure or a seek: nothing starts or is admitted. */
  private halting: Promise<void> | undefined;
  private failed = false;
  private sought: number | undefined;
  /** Offset of the last failure; consecutive failures (w.failures) count until the prefix passes it. */
  private failedAt = -1;
  /** Handled above the first unhandled message when a failure reset the window: not run again. */
  private handledAhead = new Set<number>();
  /** What the reader passed over without delivering (markers) counts once the window is empty. */
  private readThrough = -1;

  constructor(
    private readonly ctx: ConsumerContext,
    private readonly committer: OffsetCommitter,
    private readonly w: PartitionWorker,
    limits: ResolvedConcurrency,
    private readonly handler: (p: EachMessagePayload) => Promise<void> | void,
    /** The wait after a failure before reading again (injected by unit tests). */
    private readonly backoff: (failures: number, signal: AbortSignal) => Promise<void> = handlerFailureBackoff,
  ) {
    this.sched = new KeyScheduler<ConsumedMessage>(limits, (m) => m.key);
  }

  /** Messages held now (queued, running, or handled behind an unhandled one). */
  get buffered(): number {
    return this.sched.buffered;
  }

  get running(): number {
    return this.sched.running;
  }

  /**
   * The sink of the partition reader: admits a fetched batch, waiting for room. Returns early (the rest
   * is read again) on seek, pause or revocation, as the one-at-a-time sink does.
   */
  async admit(messages: ConsumedMessage[]): Promise<void> {
    const w = this.w;
    for (const m of messages) {
      // A seek settling the window resets it: a record the reader re-reads from the sought offset
      // meanwhile is judged against the window after the reset, not the one being dropped.
      while (this.halting && !w.signal.aborted && w.seekTo === undefined) await this.changed(w.signal);
      if (m.offset <= this.sched.lastAdmitted) continue; // read again, but still in the window
      for (;;) {
        if (w.signal.aborted || w.seekTo !== undefined) return;
        if (w.paused) {
          w.seekTo = m.offset; // paused mid-batch: the rest is read again after resume()
          return;
        }
        if (!this.halting && this.sched.hasRoom()) break;
        await this.changed(w.signal);
      }
      this.sched.admit(m.offset, m, this.handledAhead.delete(m.offset));
      this.markPrefix();
      this.pump();
    }
  }

  /** The reader delivered everything below `next` (the rest were markers or aborted records). */
  passedTo(next: number): void {
    if (next > this.readThrough) this.readThrough = next;
    this.markPrefix();
  }

  /** resume(): start what may start. */
  wake(): void {
    this.pump();
    this.notify();
  }

  /** seek(): settle, forget the window, read from `offset` (the reader applies `w.seekTo`). */
  seek(offset: number): void {
    this.sought = offset;
    this.halt();
  }

  /** Resolves once no handler of this window runs (revocation and close wait for it). */
  async idle(): Promise<void> {
    while (this.sched.running > 0) await this.changed();
  }

  private pump(): void {
    const w = this.w;
    if (this.halting || w.signal.aborted || w.paused) return;
    for (let e = this.sched.take(); e; e = this.sched.take()) void this.run(e);
  }

  private async run(e: WindowEntry<ConsumedMessage>): Promise<void> {
    const w = this.w;
    const message = e.message!;
    // Only within the member's proven session (session-guard.ts; docs/sdk.md, "Fenced reads").
    if (!(await sessionHeld(this.ctx, w.signal))) {
      this.sched.fail(e); // aborted meanwhile: not run, as an aborted handler's message
      this.notify();
      return;
    }
    const t0 = performance.now();
    const timer = setTimeout(
      () => this.ctx.emit('handler.slow', { partition: w.partition, offset: e.offset, elapsedMs: Math.round(performance.now() - t0) }),
      this.ctx.options.processingTimeoutMs,
    );
    let error: unknown;
    let ok = false;
    try {
      await this.handler({ message, signal: w.signal });
      ok = true;
    } catch (err) {
      error = err;
    } finally {
      clearTimeout(timer);
    }
    if (ok) {
      this.sched.complete(e);
      this.markPrefix();
    } else {
      this.sched.fail(e);
      if (!w.signal.aborted) {
        this.ctx.crash(error as Error, false);
        w.failures++;
        this.failedAt = Math.max(this.failedAt, e.offset);
        this.failed = true;
        this.halt();
      }
    }
    this.notify();
    this.pump();
  }

  /** The processed offset follows the first unhandled message (or what was read, when all are handled). */
  private markPrefix(): void {
    const w = this.w;
    if (w.signal.aborted) return;
    const frontier = this.sched.frontier();
    let next = frontier ?? Math.max(this.sched.lastAdmitted + 1, this.readThrough);
    if (next > this.failedAt && this.failedAt >= 0) {
      w.failures = 0;
      this.failedAt = -1;
    }
    // A pending seek reads from the sought offset again: an auto-commit meanwhile must not pass it.
    if (this.sought !== undefined && next > this.sought) next = this.sought;
    if (next <= 0 || next <= w.processed) return;
    try {
      this.committer.markProcessed(w.partition, w.assignmentGeneration, next - 1);
    } catch {
      // revoked meanwhile: work of a revoked installation is not marked
    }
  }

  private halt(): void {
    this.halting ??= this.settle()
      .catch((err: unknown) => this.ctx.crash(err as Error, false))
      .finally(() => {
        this.halting = undefined;
        this.notify();
        this.pump();
      });
  }

  /** Stop starting, let running handlers end, then reset the window and make the reader read again. */
  private async settle(): Promise<void> {
    const w = this.w;
    await this.idle();
    if (w.signal.aborted) return;
    if (this.failed) await this.backoff(w.failures, w.signal);
    if (w.signal.aborted) return;
    if (this.sought !== undefined) {
      // The user's seek decides where reading goes on; as seek() says, the processed offset does not
      // stay above it (what ran meanwhile is read again).
      if (w.processed > this.sought) w.processed = this.sought;
      this.handledAhead.clear();
      // Back into what was admitted (a handler's "not yet" seek to its own record): records below the
      // sought offset not handled yet (queued behind their key) are read again, not skipped; those handled
      // are not run again (docs/sdk.md, "Concurrency").
      const frontier = this.sched.frontier();
      if (frontier !== undefined && frontier < this.sought && this.sought <= this.sched.lastAdmitted) {
        for (const o of this.sched.handledAhead()) if (o < this.sought) this.handledAhead.add(o);
        w.seekTo = frontier;
        w.interruptRead?.();
      }
    } else {
      const frontier = this.sched.frontier();
      if (frontier !== undefined) {
        for (const o of this.sched.handledAhead()) this.handledAhead.add(o);
        w.seekTo = frontier;
        w.interruptRead?.(); // an idle stream would otherwise deliver nothing to read again
      }
    }
    this.failed = false;
    this.sought = undefined;
    this.sched.clear();
    this.readThrough = -1;
  }

  private notify(): void {
    const ws = this.waiters;
    this.waiters = [];
    for (const f of ws) f();
  }

  private changed(signal?: AbortSignal): Promise<void> {
    return new Promise<void>((resolve) => {
      if (signal?.aborted) return resolve();
      const done = () => {
        signal?.removeEventListener('abort', done);
        resolve();
      };
      signal?.addEventListener('abort', done, { once: true });
      this.waiters.push(done);
    });
  }
}

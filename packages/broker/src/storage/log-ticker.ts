/**
 * The periodic work of partitions (docs/architecture.md, "Storage"): the fsync of `flush=interval` and the
 * HWM checkpoint run at most one period after the write that called for them; the snapshot checks of
 * producer state and transactions every SNAPSHOT_INTERVAL_MS. One ticker per kind serves every partition
 * of a broker, and only what has work waits on it: a broker whose logs have nothing to flush arms no flush
 * timer. A timer per log (and two per partition for the snapshots) woke the event loop about once a
 * millisecond with 10,000 partitions, for nothing when they had nothing to do (a standalone broker under
 * flush=always never has).
 */
import { type Clock, type ClockTimer, systemClock } from '../common/clock.js';

export interface Tickable {
  /** The period is up: do the work this log asked for; ask again (`want`) for what must wait. */
  onTick(): void;
}

export class LogTicker {
  private due = new Set<Tickable>();
  private timer: ClockTimer | undefined;

  constructor(
    readonly periodMs: number,
    private readonly clock: Clock = systemClock,
  ) {}

  /** `t` has work for the next tick: at most one period from now. Idempotent until that tick. */
  want(t: Tickable): void {
    this.due.add(t);
    if (this.timer) return;
    this.timer = this.clock.setTimeout(() => this.tick(), this.periodMs);
    this.timer.unref();
  }

  /** `t` is closing: it gets no tick. */
  forget(t: Tickable): void {
    this.due.delete(t);
    if (this.due.size === 0) this.disarm();
  }

  /** Whether a tick is pending (for tests: an idle ticker has none). */
  get armed(): boolean {
    return this.timer !== undefined;
  }

  private tick(): void {
    this.timer = undefined;
    const due = this.due;
    this.due = new Set();
    // A log that asks again while ticking waits for the next period. onTick does not throw; if one did,
    // the other logs still get their tick.
    for (const t of due) {
      try {
        t.onTick();
      } catch {}
    }
  }

  private disarm(): void {
    this.clock.clearTimeout(this.timer);
    this.timer = undefined;
  }
}

/**
 * A Clock (src/common/clock.ts) that moves only when the test moves it: `advance(ms)` moves the wall and
 * the monotonic time together and fires the timers that fall due on the way, each at its own time and in
 * order, so coordinator state machines run their session, window and transaction timeouts without real
 * waiting. `jumpWall(ms)` steps the wall time alone, as NTP may: timers and monotonic time ignore it.
 */
import type { Clock, ClockTimer } from 'tributary-broker/common/clock.js';

interface FakeTimer extends ClockTimer {
  readonly id: number;
}

/** Lets the promise jobs and I/O callbacks queued so far run (one turn of the event loop). */
export const turn = (): Promise<void> => new Promise<void>((r) => setImmediate(r));

export class FakeClock implements Clock {
  /** Monotonic time; timers fall due on it. */
  private t: number;
  /** How far the wall time is from the monotonic time (moved by jumpWall). */
  private wallOffset = 0;
  private seq = 0;
  private readonly timers = new Map<number, { at: number; fn: () => void }>();

  constructor(start = 1_700_000_000_000) {
    this.t = start;
  }

  now(): number {
    return this.t + this.wallOffset;
  }

  monotonic(): number {
    return this.t;
  }

  /** Steps the wall time by `ms` (negative: back), leaving the monotonic time and the timers as they are. */
  jumpWall(ms: number): void {
    this.wallOffset += ms;
  }

  setTimeout(fn: () => void, ms: number): ClockTimer {
    const id = ++this.seq;
    this.timers.set(id, { at: this.t + Math.max(0, ms), fn });
    const timer: FakeTimer = { id, unref: () => timer };
    return timer;
  }

  clearTimeout(timer: ClockTimer | undefined): void {
    if (timer) this.timers.delete((timer as FakeTimer).id);
  }

  /** Timers armed and not fired or cleared. */
  get pending(): number {
    return this.timers.size;
  }

  /** When the next timer falls due, in monotonic time (undefined: none armed). */
  nextAt(): number | undefined {
    let at: number | undefined;
    for (const x of this.timers.values()) if (at === undefined || x.at < at) at = x.at;
    return at;
  }

  /**
   * Moves the time forward by `ms`. Each timer due by then fires with the clock at its due time, earliest
   * first (ties in the order they were armed), and gets an event-loop turn for the work it starts before
   * the next one fires.
   */
  async advance(ms: number): Promise<void> {
    await turn();
    const target = this.t + ms;
    for (;;) {
      let next: { id: number; at: number; fn: () => void } | undefined;
      for (const [id, x] of this.timers) if (x.at <= target && (!next || x.at < next.at)) next = { id, ...x };
      if (!next) break;
      this.timers.delete(next.id);
      this.t = Math.max(this.t, next.at);
      next.fn();
      await turn();
    }
    this.t = target;
    await turn();
  }

  /** Moves the monotonic time to `at` (not backwards), as `advance`: the same as the wall's until jumpWall. */
  advanceTo(at: number): Promise<void> {
    return this.advance(Math.max(0, at - this.t));
  }
}

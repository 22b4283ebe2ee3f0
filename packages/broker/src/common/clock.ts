/**
 * Time as the coordinators see it: every time they read and every timer they arm goes through a `Clock`.
 * The broker runs them on `systemClock`; unit tests pass a fake clock and move it by hand, so session
 * expiry, join windows, rebalance timeouts and transaction timeouts run without waiting.
 *
 * Two readings: `now()` (wall) for timestamps shown or persisted, `monotonic()` for every duration and
 * deadline in memory, so an NTP step of the wall clock neither expires every member at once nor keeps a
 * dead one alive.
 *
 * A leaf module: it imports nothing, so anything may depend on it.
 */

/** A timer armed through a Clock. `unref()` as Node's: the timer alone does not keep the process alive. */
export interface ClockTimer {
  unref(): unknown;
}

export interface Clock {
  /** Milliseconds since the epoch, as `Date.now()`: may step (NTP), so only for timestamps. */
  now(): number;
  /**
   * Whole milliseconds that never go back nor step: compared only with other readings of the same clock
   * (the system clock's start near the epoch value at process start, so 0 stays a safe "never").
   */
  monotonic(): number;
  /** Calls `fn` once, `ms` (at least 0) milliseconds from now, on the monotonic time (as Node's timers). */
  setTimeout(fn: () => void, ms: number): ClockTimer;
  /** Cancels a timer of this clock; an undefined or already fired timer is ignored. */
  clearTimeout(timer: ClockTimer | undefined): void;
}

/** The real clock: `Date.now()`, `performance` and Node's timers. */
export const systemClock: Clock = {
  now: () => Date.now(),
  // Whole milliseconds, as Date.now(): ages and deadlines derived from it are shown and logged.
  monotonic: () => Math.floor(performance.timeOrigin + performance.now()),
  setTimeout: (fn, ms) => setTimeout(fn, ms),
  clearTimeout: (timer) => clearTimeout(timer as ReturnType<typeof setTimeout> | undefined),
};

/** The wall time of a past monotonic reading, as the wall clock reads now: for display only. */
export function wallTimeOf(clock: Pick<Clock, 'now' | 'monotonic'>, monotonic: number): number {
  return clock.now() - (clock.monotonic() - monotonic);
}

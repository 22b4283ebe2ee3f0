/**
 * Time as the coordinators see it: every time they read and every timer they arm goes through a `Clock`.
 * The broker runs them on `systemClock`; unit tests pass a fake clock and move it by hand, so session
 * expiry, join windows, rebalance timeouts and transaction timeouts run without waiting.
 *
 * A leaf module: it imports nothing, so anything may depend on it.
 */

/** A timer armed through a Clock. `unref()` as Node's: the timer alone does not keep the process alive. */
export interface ClockTimer {
  unref(): unknown;
}

export interface Clock {
  /** Milliseconds since the epoch, as `Date.now()`. */
  now(): number;
  /** Calls `fn` once, `ms` (at least 0) milliseconds from now. */
  setTimeout(fn: () => void, ms: number): ClockTimer;
  /** Cancels a timer of this clock; an undefined or already fired timer is ignored. */
  clearTimeout(timer: ClockTimer | undefined): void;
}

/** The real clock: `Date.now()` and Node's timers. */
export const systemClock: Clock = {
  now: () => Date.now(),
  setTimeout: (fn, ms) => setTimeout(fn, ms),
  clearTimeout: (timer) => clearTimeout(timer as ReturnType<typeof setTimeout> | undefined),
};

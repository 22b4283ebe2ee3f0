/**
 * vitest fake timers for code under test that also does real I/O (loopback sockets to scripted servers,
 * files): only setTimeout, setInterval, Date and performance are faked, so socket and fs callbacks keep
 * running while the fake clock stands still, and the clock moves only when the test moves it
 * (`await vi.advanceTimersByTimeAsync(ms)`). A bound like "fails after stallTimeoutMs" is then checked
 * exactly (not settled 1 ms before it, settled at it), and "ends at once" is "ends with the clock not
 * moved at all": no timeout can have ended it.
 *
 * Waiting for the I/O in between must not move the clock: `until`, `eventually` and `sleep` (util.ts)
 * wait on the faked setTimeout and never wake, and vi.waitFor advances the fake clock on every poll; use
 * `untilReal`. Advance only up to the instant under test, then wait for the I/O it starts with
 * `untilReal` or by awaiting its promise: an advance runs timers one after another without waiting for
 * sockets, so I/O started by one timer may or may not be done when a later timer of the same advance
 * fires.
 *
 * Not faked: node:timers/promises (vitest 4.1 does not reach it), setImmediate, AbortSignal.timeout:
 * retry backoffs and the consumer's sleeps run in real time. A 0 ms timeout armed while an advance is
 * running falls due 1 ms later (fake-timers' rule), so do not rely on 0 ms timers to make progress.
 */
import { vi } from 'vitest';

// Captured when this module loads, before any test fakes them.
const realSetTimeout = globalThis.setTimeout;
const realNow = performance.now.bind(performance);

/**
 * Fakes setTimeout, setInterval, Date (from `now`, default the real time) and performance.now (the SDK
 * measures its bounds on it); see the module comment.
 */
export function useFakeTimersForIo(now?: number): void {
  vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout', 'setInterval', 'clearInterval', 'Date', 'performance'], ...(now === undefined ? {} : { now }) });
}

/**
 * Polls `cond` on real timers until it holds, without moving the fake clock; fails with `what` once
 * `timeoutMs` of real time passed (the wait for loopback I/O, not a bound under test).
 */
export async function untilReal(cond: () => boolean | Promise<boolean>, what: string, timeoutMs = 10_000): Promise<void> {
  const deadline = realNow() + timeoutMs;
  while (!(await cond())) {
    if (realNow() > deadline) throw new Error(`${what}: not within ${timeoutMs} ms`);
    await new Promise<void>((r) => realSetTimeout(r, 5));
  }
}

/** Follows `p` without waiting for it: `settled` turns true once it resolved or rejected (the rejection is handled). */
export function track<T>(p: Promise<T>): { readonly settled: boolean; readonly promise: Promise<T> } {
  const t = { settled: false, promise: p };
  p.then(
    () => {
      t.settled = true;
    },
    () => {
      t.settled = true;
    },
  );
  return t;
}

/**
 * Holding a retry topic's message until it is due (docs/sdk.md, "Retry and dead-letter topics"). All
 * messages of one retry topic wait the same delay, so a partition's messages fall due in offset order:
 * waiting for the head delays nothing that would be due earlier. The wait takes an injected clock so unit
 * tests run it on a fake one.
 */
import { TributaryError } from 'tributary-protocol/errors.js';

/** The time and timers the wait uses (the shape of the broker's `Clock`, so a test's fake clock fits). */
export interface RetryClock {
  now(): number;
  setTimeout(fn: () => void, ms: number): unknown;
  clearTimeout(timer: unknown): void;
}

const MAX_TIMER_MS = 2 ** 31 - 1;

export const systemRetryClock: RetryClock = {
  now: () => Date.now(),
  setTimeout: (fn, ms) => setTimeout(fn, ms),
  clearTimeout: (t) => clearTimeout(t as ReturnType<typeof setTimeout>),
};

/**
 * Resolves once `clock.now() >= dueAt` (at once when it already is); rejects with the signal's reason
 * when it aborts first. A timer may fire a little before the clock reads its due time, so the clock is
 * read again after each one rather than trusted.
 */
export async function waitUntilDue(dueAt: number, clock: RetryClock, signal?: AbortSignal): Promise<void> {
  for (;;) {
    if (signal?.aborted) throw signal.reason ?? new TributaryError('client_closed');
    const left = dueAt - clock.now();
    if (left <= 0) return;
    await new Promise<void>((resolve, reject) => {
      const onAbort = () => {
        clock.clearTimeout(timer);
        reject(signal!.reason ?? new TributaryError('client_closed'));
      };
      // A timer's limit (longer ones fire at once): a longer wait takes several.
      const timer = clock.setTimeout(() => {
        signal?.removeEventListener('abort', onAbort);
        resolve();
      }, Math.min(left, MAX_TIMER_MS));
      signal?.addEventListener('abort', onAbort, { once: true });
    });
  }
}

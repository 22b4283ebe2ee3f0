import { setTimeout as sleep } from 'node:timers/promises';
import { TributaryError } from 'tributary-protocol/errors.js';

export interface RetryOptions {
  /** Attempts after the first. */
  retries?: number;
  initialDelayMs?: number;
  maxDelayMs?: number;
  factor?: number;
  /** Give up once this much time has passed since the first attempt. */
  maxElapsedMs?: number;
  signal?: AbortSignal;
  /** Called before each retry with the error and the delay chosen. */
  onRetry?: (err: unknown, attempt: number, delayMs: number) => void;
}

/** The bounds a client's `retry` option leaves out (exported from the package root; frozen: every client reads it). */
export const DEFAULT_RETRY: Readonly<Required<Omit<RetryOptions, 'signal' | 'onRetry'>>> = Object.freeze({
  retries: 8,
  initialDelayMs: 50,
  maxDelayMs: 3000,
  factor: 2,
  maxElapsedMs: 30_000,
});

/**
 * Failures the retry bounds (`retries`, `maxElapsedMs`) do not count: a client's failed connects before
 * it ever reached a broker, which its bootstrapTimeoutMs bounds instead (cluster.ts turns the one past
 * it into brokers_unreachable, which is not retriable). Without this a Producer or Admin pointed at dead
 * addresses gave up after its retries with a retriable connection_lost, not as docs/sdk.md says.
 */
const uncounted = new WeakSet<object>();

/** Marks `err` as a failure the retry bounds do not count (see `uncounted`). */
export function notCountedByRetry<E extends object>(err: E): E {
  uncounted.add(err);
  return err;
}

/** Only errors the registry marks retriable (routing, availability) are retried. */
export function isRetriable(err: unknown): boolean {
  return err instanceof TributaryError && err.retriable;
}

/** Exponential backoff with full jitter: a random delay in [0, min(max, initial * factor^attempt)]. */
export function backoffDelay(attempt: number, opts: Pick<RetryOptions, 'initialDelayMs' | 'maxDelayMs' | 'factor'> = {}, random = Math.random): number {
  const initial = opts.initialDelayMs ?? DEFAULT_RETRY.initialDelayMs;
  const max = opts.maxDelayMs ?? DEFAULT_RETRY.maxDelayMs;
  const factor = opts.factor ?? DEFAULT_RETRY.factor;
  const cap = Math.min(max, initial * factor ** attempt);
  return Math.floor(random() * cap);
}

/**
 * Runs `fn` until it succeeds, throws something not retriable, or the bounds run out; the last error is
 * rethrown. `fn` gets the attempt number so a caller can refresh routing between attempts. Failures
 * marked notCountedByRetry are retried without counting: the bounds start after the last of them.
 */
export async function retry<T>(fn: (attempt: number) => Promise<T>, opts: RetryOptions = {}): Promise<T> {
  const retries = opts.retries ?? DEFAULT_RETRY.retries;
  const maxElapsed = opts.maxElapsedMs ?? DEFAULT_RETRY.maxElapsedMs;
  let started = performance.now(); // monotonic: a wall-clock step must not stretch or cut the budget
  let failures = 0; // counted ones
  for (let attempt = 0; ; attempt++) {
    opts.signal?.throwIfAborted();
    try {
      return await fn(attempt);
    } catch (err) {
      if (!isRetriable(err) || opts.signal?.aborted) throw err;
      const delay = backoffDelay(attempt, opts);
      if (uncounted.has(err as object)) {
        failures = 0;
        started = performance.now() + delay;
      } else if (++failures > retries || performance.now() - started + delay > maxElapsed) throw err;
      opts.onRetry?.(err, attempt + 1, delay);
      await sleep(delay, undefined, { signal: opts.signal });
    }
  }
}

/**
 * Sleeps `ms`, ending early when `signal` aborts, and never rejects: the loops that wait this way check
 * their own signal when they wake (the consumer's heartbeat, rejoin, read and handler loops).
 */
export function abortableSleep(ms: number, signal?: AbortSignal): Promise<void> {
  return sleep(ms, undefined, { signal }).catch(() => {});
}

/** One step of a loop's own backoff: `backoffDelay(attempt, opts)`, slept as abortableSleep does. */
export function backoffSleep(attempt: number, opts: Pick<RetryOptions, 'initialDelayMs' | 'maxDelayMs' | 'factor'>, signal?: AbortSignal): Promise<void> {
  return abortableSleep(backoffDelay(attempt, opts), signal);
}

/**
 * The wait before a consumer delivers again what its handler threw on (docs/sdk.md, "Offsets"): the
 * `failures`-th in a row, full jitter from 100 ms doubling to 5 s. Not the `retry` option, which bounds
 * requests to brokers.
 */
export function handlerFailureBackoff(failures: number, signal: AbortSignal): Promise<void> {
  return backoffSleep(Math.min(failures, 8), { initialDelayMs: 100, maxDelayMs: 5000 }, signal);
}

import { abortableSleep, backoffDelay, isRetriable } from 'tributary-client/retry.js';

/** How a start waits for a store (the metadata store, the offset store): until `signal` aborts, telling `onRetry` of each failure. */
export interface StoreWait {
  signal?: AbortSignal;
  onRetry?: (err: Error, attempt: number, delayMs: number) => void;
}

/**
 * Runs `fn` until it succeeds, trying a retriable failure (etcd or PostgreSQL not answering yet) again with
 * backoff (docs/architecture.md, "Readiness"); any other failure, or an abort, ends the start.
 */
export async function waitForStore(fn: () => Promise<void>, opts: StoreWait): Promise<void> {
  for (let attempt = 1; ; attempt++) {
    try {
      await fn();
      return;
    } catch (err) {
      if (!isRetriable(err) || opts.signal?.aborted) throw err;
      const delayMs = backoffDelay(Math.min(attempt, 8), { initialDelayMs: 250, maxDelayMs: 10_000 });
      opts.onRetry?.(err as Error, attempt, delayMs);
      await abortableSleep(delayMs, opts.signal);
      if (opts.signal?.aborted) throw opts.signal.reason ?? err;
    }
  }
}

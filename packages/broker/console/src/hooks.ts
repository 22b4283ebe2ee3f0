import { useEffect, useState } from 'preact/hooks';
import type { ApiError } from './api.js';

export interface Poll<T> {
  data: T | undefined;
  /** Why the last poll failed; cleared by the next one that succeeds. `data` stays the last answer. */
  error: ApiError | Error | undefined;
  /** When `data` was fetched (ms since the epoch). */
  updatedAt: number | undefined;
  reload: () => void;
}

/**
 * Calls `load` now and every `everyMs` (0: once) while mounted; keeps the last answer or error. A call
 * with no answer within `max(10 s, 2 × everyMs)` is given up and counts as failed (a broker that is
 * stopped, not gone, accepts the connection and never answers).
 */
export function usePoll<T>(load: (signal: AbortSignal) => Promise<T>, deps: unknown[], everyMs = 2000): Poll<T> {
  const [data, setData] = useState<T | undefined>(undefined);
  const [error, setError] = useState<ApiError | Error | undefined>(undefined);
  const [updatedAt, setUpdatedAt] = useState<number | undefined>(undefined);
  const [tick, setTick] = useState(0);
  useEffect(() => {
    const ac = new AbortController();
    let timer: ReturnType<typeof setTimeout> | undefined;
    const limitMs = Math.max(10_000, 2 * everyMs);
    const run = async () => {
      const call = new AbortController();
      const stop = () => call.abort();
      ac.signal.addEventListener('abort', stop);
      const limit = setTimeout(stop, limitMs);
      try {
        setData(await load(call.signal));
        setUpdatedAt(Date.now());
        setError(undefined);
      } catch (err) {
        if (!ac.signal.aborted) setError(call.signal.aborted ? new Error(`no answer within ${limitMs / 1000} s`) : (err as Error));
      } finally {
        clearTimeout(limit);
        ac.signal.removeEventListener('abort', stop);
      }
      if (everyMs > 0 && !ac.signal.aborted) timer = setTimeout(run, everyMs);
    };
    void run();
    return () => {
      ac.abort();
      clearTimeout(timer);
    };
  }, [...deps, tick]);
  return { data, error, updatedAt, reload: () => setTick((t) => t + 1) };
}

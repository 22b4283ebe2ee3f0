import { useEffect, useState } from 'preact/hooks';
import { ApiError } from './api.js';

/** Calls `load` now and every `everyMs` (0: once) while mounted; keeps the last answer or error. */
export function usePoll<T>(load: (signal: AbortSignal) => Promise<T>, deps: unknown[], everyMs = 2000): { data: T | undefined; error: ApiError | Error | undefined; reload: () => void } {
  const [data, setData] = useState<T | undefined>(undefined);
  const [error, setError] = useState<ApiError | Error | undefined>(undefined);
  const [tick, setTick] = useState(0);
  useEffect(() => {
    const ac = new AbortController();
    let timer: ReturnType<typeof setTimeout> | undefined;
    const run = async () => {
      try {
        setData(await load(ac.signal));
        setError(undefined);
      } catch (err) {
        if (!ac.signal.aborted) setError(err as Error);
      }
      if (everyMs > 0 && !ac.signal.aborted) timer = setTimeout(run, everyMs);
    };
    void run();
    return () => {
      ac.abort();
      clearTimeout(timer);
    };
  }, [...deps, tick]);
  return { data, error, reload: () => setTick((t) => t + 1) };
}

/** How a Partition parks a reader or a follower until what it waits on moves (waitForData, waitForLogEnd). */

/**
 * Resolves with ready() once it holds (the waiter made by `make`, kept in `set`, is woken by whoever
 * moves what it waits on), the wait ends, the signal aborts or, already `closed`, at once.
 */
export function park<W extends { wake: () => void }>(
  set: Set<W>,
  make: (wake: () => void) => W,
  ready: () => boolean,
  closed: boolean,
  timeoutMs: number,
  signal?: AbortSignal,
): Promise<boolean> {
  if (ready() || closed) return Promise.resolve(ready());
  if (timeoutMs <= 0 || signal?.aborted) return Promise.resolve(false);
  return new Promise<boolean>((resolve) => {
    const done = () => {
      clearTimeout(timer);
      signal?.removeEventListener('abort', done);
      set.delete(waiter);
      resolve(ready());
    };
    const waiter = make(done);
    const timer = setTimeout(done, timeoutMs);
    signal?.addEventListener('abort', done, { once: true });
    set.add(waiter);
  });
}

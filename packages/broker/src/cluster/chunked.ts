/**
 * Work over every partition, spread across event-loop turns. A broker hosting 10,000 partitions that
 * applies them all in one turn stalls for about a second, and a stall past a second makes its own lease
 * unconfirmed (lease-keeper.ts): a controller stops acting, leaders stop taking writes.
 */
export const CHUNK = 500;

/** Calls `fn` on each item, yielding to the event loop after every `chunk`; stops early once `stop()` holds. */
export async function eachInChunks<T>(items: readonly T[], fn: (item: T) => void, stop: () => boolean, chunk = CHUNK): Promise<void> {
  for (let i = 0; i < items.length && !stop(); i++) {
    fn(items[i]!);
    if (i % chunk === chunk - 1) await new Promise((resolve) => setImmediate(resolve));
  }
}

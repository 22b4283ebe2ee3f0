/**
 * The broker-wide bound on the memory of every partition's tail cache (`--tail-cache-bytes`,
 * docs/architecture.md "Storage"). Each cache has its own cap as well, but with thousands of partitions the
 * caps add up past any machine: 1,000 partitions written at 10 records/s each kept every record they were
 * ever sent. Past the bound, the oldest records of the cache appended to least recently go first: a
 * partition written since has readers that want its newest records, and an evicted record is read from its
 * segment instead.
 */

/** What the budget needs of a cache. */
export interface BudgetedCache {
  /** Drops the cache's oldest chunk of records (it reports the change back with `charge`). */
  evictOldest(): void;
}

export class TailCacheBudget {
  /** Each cache holding records, and what it is charged; least recently appended to first (Map order). */
  private readonly caches = new Map<BudgetedCache, number>();
  private total = 0;

  constructor(readonly max: number) {
    if (!Number.isSafeInteger(max) || max < 0) throw new RangeError(`tail cache bytes must be a non-negative integer, got ${max}`);
  }

  /** Bytes charged to every cache together (never above `max` after an append returns). */
  get bytes(): number {
    return this.total;
  }

  /** Caches holding records. */
  get size(): number {
    return this.caches.size;
  }

  /**
   * `cache` now holds `cost` bytes. `appended`: it grew by an append, so it becomes the most recent, and
   * the bound is enforced (evicting from the least recent caches, possibly this one when it is alone).
   */
  charge(cache: BudgetedCache, cost: number, appended: boolean): void {
    const before = this.caches.get(cache);
    if (before !== undefined) {
      this.total -= before;
      if (appended || cost === 0) this.caches.delete(cache);
    }
    if (cost > 0) {
      this.total += cost;
      this.caches.set(cache, cost);
    }
    if (appended) this.enforce();
  }

  private enforce(): void {
    // Each eviction drops a whole chunk, and a cache's last chunk leaves the map: this ends.
    while (this.total > this.max) {
      const oldest = this.caches.keys().next();
      if (oldest.done) return;
      const before = this.total;
      oldest.value.evictOldest();
      // A cache that could not give anything back would hold this loop forever.
      if (this.total >= before) return;
    }
  }
}

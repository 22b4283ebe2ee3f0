/**
 * The broker-wide bound on open segment files (`--max-open-segment-files`, docs/architecture.md "Storage"):
 * one LRU over the segments of every partition. A segment that opens or uses its file becomes the most
 * recent; past the bound, the least recent ones that may let go give their fd back and reopen on their next
 * read or write. A segment may let go when no read or write is in progress and, unless the log leaves
 * durability to the OS (flush=os), its writes are fsynced: a write-back error is reported only to fds open
 * before it happened, so an fsync through a reopened fd could miss it.
 */

/** What the budget needs of a segment. */
export interface FdHolder {
  /** No I/O in progress and nothing written since the last fsync that the log still has to fsync. */
  canRelease(): boolean;
  /** Closes the fd (it reopens on the next use). */
  release(): Promise<void>;
}

export class FdBudget {
  /** Segments holding an fd, least recently used first (a Map keeps insertion order). */
  private readonly holders = new Map<FdHolder, true>();

  constructor(readonly max: number) {
    if (!Number.isSafeInteger(max) || max < 1) throw new RangeError(`max open segment files must be a positive integer, got ${max}`);
  }

  /** Segments holding an fd now (it may exceed `max` while none of the oldest can let go). */
  get open(): number {
    return this.holders.size;
  }

  /** A segment opened or used its fd. */
  used(h: FdHolder): void {
    if (this.holders.has(h)) this.holders.delete(h);
    this.holders.set(h, true);
    if (this.holders.size > this.max) this.evict(h);
  }

  /** A segment closed its fd. */
  closed(h: FdHolder): void {
    this.holders.delete(h);
  }

  /** A segment may close now (its I/O ended, its writes were fsynced): catch up on a bound that was exceeded. */
  settled(): void {
    if (this.holders.size > this.max) this.evict(undefined);
  }

  private evict(keep: FdHolder | undefined): void {
    for (const h of this.holders.keys()) {
      if (this.holders.size <= this.max) return;
      if (h === keep || !h.canRelease()) continue;
      this.holders.delete(h);
      void h.release().catch(() => {});
    }
  }
}

/** How a segment takes part: the budget, and whether its log fsyncs (flush always or interval). */
export interface SegmentFdPolicy {
  budget: FdBudget;
  syncTracked: boolean;
}

/**
 * The broker-wide bound on open segment files (`--max-open-segment-files`, docs/architecture.md "Storage"):
 * one LRU over the segments of every partition. A segment takes a slot before it opens its file
 * (`acquire`) and gives it back once the file is closed (`closed`), so no more than the bound are open
 * unless a wait outlived `overflowAfterMs`, and never more than `overflowHeadroom` past it (see the
 * constructor). Past the bound an open waits, first come first served, while the least recently used segments
 * that may let go close their files; a segment that may let go only later (its read, write or fsync
 * ends) is closed then (`settled`) if an open is waiting. A segment may let go when no read or write is in
 * progress and, unless the log leaves durability to the OS (flush=os), its writes are fsynced: a write-back
 * error is reported only to fds open before it happened, so an fsync through a reopened fd could miss it.
 *
 * No deadlock: a segment that holds its file (I/O in progress, unsynced writes) lets go without needing
 * a slot itself: reads and writes end, and an fsync runs through the fd the segment already holds. A
 * segment that reopens waits for its own previous close to end first (Segment), so it never waits for
 * a slot it holds.
 */

/** What the budget needs of a segment. */
export interface FdHolder {
  /** No I/O in progress and nothing written since the last fsync that the log still has to fsync. */
  canRelease(): boolean;
  /** Closes the fd (it reopens on the next use); `closed` is called once it is closed. */
  release(): Promise<void>;
  /**
   * Held only for unsynced writes: asks its log for the fsync now rather than at the flush timer (a
   * journaled log fsyncs its segments once a flush interval); `settled` follows once it may let go.
   * Whether it asked (false: held for I/O in progress, which ends by itself).
   */
  requestSync?(): boolean;
}

interface Waiter {
  holder: FdHolder;
  /** When it began to wait (performance.now()). */
  since: number;
  /** Whose wait it is (a log's SegmentFdPolicy): `cancel` ends the waits of a log that closes. */
  owner: object | undefined;
  resolve: () => void;
  reject: (err: Error) => void;
}

export class FdBudget {
  /** Segments holding a slot (their file opening or open), least recently used first (a Map keeps insertion order). */
  private readonly holders = new Map<FdHolder, true>();
  /** Segments the budget is closing: their slot is taken until `closed`. */
  private readonly closing = new Set<FdHolder>();
  /** Opens waiting for a slot, first come first served. */
  private waiters: Waiter[] = [];
  /** Owners (logs) whose opens are refused rather than wait (refuseWaits), with the error they get. */
  private readonly refusing = new Map<object, Error>();

  /** The one timer that lets waits older than overflowAfterMs past the bound; null when none is armed. */
  private overflowTimer: NodeJS.Timeout | null = null;
  /** Opens let past the bound so far (a wait outlived overflowAfterMs). */
  overflows = 0;

  /**
   * `overflowAfterMs`: an open that has waited this long for a slot opens anyway, past the bound, until
   * files close (Infinity: never). A segment written without pause under flush=always always has writes
   * its next fsync must cover, so it can never let go: with more such partitions than the bound, every
   * other open would wait as long as they are written (reads of older segments included).
   * `overflowHeadroom`: how many files those opens may hold past the bound; further ones wait for a file
   * to close. Uncapped, a burst to many partitions on a machine slow to fsync went past the process's fd
   * limit (docs/operations.md, "Limits": the bound plus about 200) and appends failed with EMFILE.
   */
  constructor(
    readonly max: number,
    private readonly overflowAfterMs = Number.POSITIVE_INFINITY,
    private readonly overflowHeadroom = Number.POSITIVE_INFINITY,
  ) {
    if (!Number.isSafeInteger(max) || max < 1) throw new RangeError(`max open segment files must be a positive integer, got ${max}`);
  }

  /** Segment files open (or opening, or closing) now: more than `max` only after overflows. */
  get open(): number {
    return this.holders.size + this.closing.size;
  }

  /** Opens waiting for a slot now. */
  get waiting(): number {
    return this.waiters.length;
  }

  /**
   * Takes a slot for `h`, which is about to open its file: at once (undefined) while fewer than `max` are
   * taken and nobody waits, otherwise once a slot frees. `h` must not hold one already. Rejects with the
   * error given to `cancel` for `h`, or to `refuseWaits` for `owner`.
   */
  acquire(h: FdHolder, owner?: object): Promise<void> | undefined {
    if (this.waiters.length === 0 && this.open < this.max) {
      this.holders.set(h, true);
      return undefined;
    }
    const refused = owner === undefined ? undefined : this.refusing.get(owner);
    if (refused !== undefined) return Promise.reject(refused);
    return new Promise<void>((resolve, reject) => {
      this.waiters.push({ holder: h, owner, since: performance.now(), resolve, reject });
      this.evictLeastRecent();
      this.armOverflow();
    });
  }

  /** A segment used its fd: it becomes the most recent. */
  used(h: FdHolder): void {
    if (!this.holders.delete(h)) return;
    this.holders.set(h, true);
  }

  /** A segment's file is closed, or its open failed: its slot goes to the first waiting open. */
  closed(h: FdHolder): void {
    if (!this.holders.delete(h) && !this.closing.delete(h)) return;
    while (this.waiters.length > 0 && this.open < this.max) this.grantFirst();
    // Past the bound but under the headroom: an overdue open the headroom held back goes now.
    if (this.waiters.length > 0 && Number.isFinite(this.overflowAfterMs)) {
      this.grantOverdue(performance.now());
      this.armOverflow();
    }
  }

  /** The first waiting open gets its slot. */
  private grantFirst(): void {
    const w = this.waiters.shift() as Waiter;
    this.holders.set(w.holder, true);
    w.resolve();
  }

  /**
   * `h`'s I/O ended, or its writes were fsynced: closed if an open is waiting for a slot and it may let go,
   * else asked for the fsync that would let it (requestSync).
   */
  settled(h: FdHolder): void {
    if (this.waiters.length <= this.max - this.holders.size || !this.holders.has(h)) return;
    if (h.canRelease()) this.evict(h);
    else h.requestSync?.();
  }

  /**
   * The log `owner` closes: its opens waiting for a slot end with `err`, and so do the ones that would have
   * to wait from now on, until `admitWaits` (the close's own opens wait again).
   */
  refuseWaits(owner: object, err: Error): void {
    this.refusing.set(owner, err);
    this.cancel(owner, err);
  }

  admitWaits(owner: object): void {
    this.refusing.delete(owner);
  }

  /** Ends the waits of `key` (a log's SegmentFdPolicy, or a segment that closes) with `err`. */
  cancel(key: object, err: Error): void {
    if (this.waiters.length === 0) return;
    const cancelled = this.waiters.filter((w) => w.owner === key || w.holder === key);
    if (cancelled.length === 0) return;
    this.waiters = this.waiters.filter((w) => w.owner !== key && w.holder !== key);
    for (const w of cancelled) w.reject(err);
  }

  /** Waits older than overflowAfterMs open past the bound, as far as the headroom allows. */
  private grantOverdue(now: number): void {
    while (this.waiters.length > 0 && now - this.waiters[0]!.since >= this.overflowAfterMs && this.open < this.max + this.overflowHeadroom) {
      this.overflows++;
      this.grantFirst();
    }
  }

  private armOverflow(): void {
    if (this.overflowTimer !== null || this.waiters.length === 0 || !Number.isFinite(this.overflowAfterMs)) return;
    const due = this.waiters[0]!.since + this.overflowAfterMs - performance.now();
    // Overdue and held back by the headroom: the next close grants it (closed), no timer needed.
    if (due <= 0 && this.open >= this.max + this.overflowHeadroom) return;
    this.overflowTimer = setTimeout(() => {
      this.overflowTimer = null;
      this.grantOverdue(performance.now());
      this.armOverflow();
    }, Math.max(0, due));
    this.overflowTimer.unref();
  }

  /**
   * Closes the least recently used segments that may let go until the slots freed cover the waiting opens;
   * if still short, as many of those held only for unsynced writes are asked for their fsync.
   */
  private evictLeastRecent(): void {
    for (const h of this.holders.keys()) {
      if (this.waiters.length <= this.max - this.holders.size) return;
      if (h.canRelease()) this.evict(h);
    }
    let short = this.waiters.length - (this.max - this.holders.size);
    for (const h of this.holders.keys()) {
      if (short <= 0) return;
      if (h.requestSync?.() === true) short--;
    }
  }

  private evict(h: FdHolder): void {
    this.holders.delete(h);
    this.closing.add(h);
    void h.release().catch(() => {});
  }
}

/** How a segment takes part: the budget, and whether its log fsyncs (flush always or interval). One per log. */
export interface SegmentFdPolicy {
  budget: FdBudget;
  syncTracked: boolean;
  /** The log, asked for a pass that fsyncs its dirty segments (FdHolder.requestSync). A reference, not a closure: 10,000 idle logs each keep one. */
  log?: { requestSegmentSync(): void };
}

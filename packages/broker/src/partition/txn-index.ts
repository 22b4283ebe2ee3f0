import { TributaryError } from 'tributary-protocol/errors.js';
import { CONTROL_RECORD_VERSION, ControlType, RecordAttr } from 'tributary-protocol/record.js';
import { emptyArray, emptyMap, emptySet, writableArray, writableMap, writableSet } from '../common/empty.js';

/** How a transaction ends on a partition: the type of its marker (control record). */
export type MarkerType = 'commit' | 'abort';

/** The value of a marker (control record): [version, type]. */
export function encodeMarkerValue(type: MarkerType): Buffer {
  return Buffer.from([CONTROL_RECORD_VERSION, type === 'abort' ? ControlType.ABORT : ControlType.COMMIT]);
}

/** The type of a marker's value; anything but an explicit abort closes as a commit (never hides data by guess). */
export function decodeMarkerValue(value: Buffer): MarkerType {
  return value.length >= 2 && value[0] === CONTROL_RECORD_VERSION && value[1] === ControlType.ABORT ? 'abort' : 'commit';
}

/** Whether a record (by its attributes and producer id) belongs to a transaction (data or marker). */
export function isTransactional(attributes: number, producerId: string): boolean {
  return (attributes & RecordAttr.TRANSACTIONAL) !== 0 && producerId !== '';
}

/** A transaction of one producer that has records on this partition but no marker (yet). */
export interface OpenTxn {
  producerId: string;
  epoch: number;
  /** Offset of its first record; a lower bound (the log end when it was begun) until `confirmed`. */
  firstOffset: number;
  confirmed: boolean;
  /** Appends begun and not settled. */
  pending: number;
}

/** An aborted transaction: the TRANSACTIONAL records of `producerId` in [firstOffset, lastOffset) are aborted. */
export interface AbortedTxn {
  producerId: string;
  firstOffset: number;
  /** The offset of the abort marker (exclusive end of the range). */
  lastOffset: number;
}

export interface TxnSnapshot {
  version: 1;
  /** The state covers exactly the records below this offset. */
  offset: number;
  open: Array<{ producerId: string; epoch: number; firstOffset: number }>;
  aborted: AbortedTxn[];
}

/** A record as far as the index looks at it. */
export interface TxnRecordView {
  offset: number;
  producerId: string;
  epoch: number;
  attributes: number;
  value: Buffer;
}

/**
 * The transactions of one partition: open transactions per producer (which hold the last stable offset at
 * their first offset) and the aborted ranges (sorted by marker offset) that read_committed filters out.
 * In memory; Partition rebuilds it at open from a snapshot plus a scan of the log after it.
 */
export class TxnIndex {
  /** This and the next three start as shared empty collections (common/empty.ts): most partitions never see a transaction. */
  private open = emptyMap<string, OpenTxn>();
  /** Transactions whose marker is being written: still open until it lands. */
  private closing = emptySet<OpenTxn>();
  /** Sorted by lastOffset (marker offsets grow with the log). */
  private aborted = emptyArray<AbortedTxn>();
  /**
   * Transactions closed by a marker, committed or aborted, kept until a snapshot at or above their marker
   * (snapshot()): a snapshot as of an offset between a transaction's first record and its marker must
   * list it as open, or a rebuild from it (after a truncation cut the marker) would lose it.
   */
  private closed = emptyArray<{ producerId: string; epoch: number; firstOffset: number; markerOffset: number }>();
  /** Largest lastOffset - firstOffset of any aborted range: bounds the overlap search. */
  private maxSpan = 0;
  /** Bumped on every change (snapshots are written only when it moved). */
  version = 0;
  /**
   * Markers begun per producer id, whether they close a transaction or not: a leader that verified a
   * transactional append with a remote coordinator refuses it if one of its producer's came meanwhile
   * (kafka/apis/txn-produce.ts).
   */
  private markerCounts = emptyMap<string, number>();

  private openWritable(): Map<string, OpenTxn> {
    this.open = writableMap(this.open);
    return this.open;
  }

  private closingWritable(): Set<OpenTxn> {
    this.closing = writableSet(this.closing);
    return this.closing;
  }

  markersOf(producerId: string): number {
    return this.markerCounts.get(producerId) ?? 0;
  }

  /** The first offset of the earliest open transaction, or Infinity. */
  firstUnstableOffset(): number {
    if (this.open.size === 0 && this.closing.size === 0) return Infinity;
    let min = Infinity;
    for (const t of this.open.values()) if (t.firstOffset < min) min = t.firstOffset;
    for (const t of this.closing) if (t.firstOffset < min) min = t.firstOffset;
    return min;
  }

  /** The open transaction of a producer (not one whose marker is being written). */
  openTxn(producerId: string): OpenTxn | undefined {
    return this.open.get(producerId);
  }

  /**
   * Whether `offset` lies in the producer's open transaction (not one whose marker is being written): a
   * retried batch of it may be answered as a duplicate, a batch of a transaction that ended may not.
   */
  holds(producerId: string, offset: number): boolean {
    const t = this.open.get(producerId);
    return t?.confirmed === true && offset >= t.firstOffset;
  }

  /** Every open transaction, closing ones included. */
  openTxns(): OpenTxn[] {
    return [...this.open.values(), ...this.closing];
  }

  /** Every aborted range, sorted by marker offset. */
  abortedTxns(): readonly AbortedTxn[] {
    return this.aborted;
  }

  /**
   * A transactional append is about to be queued: opens the producer's transaction (at `logEnd`, a lower
   * bound of the append's base offset, until appended() gives the exact one) or joins the open one.
   * Throws stale_producer_epoch for an epoch below the open transaction's.
   */
  begin(producerId: string, epoch: number, logEnd: number): OpenTxn {
    let t = this.open.get(producerId);
    if (t) {
      if (epoch < t.epoch) throw new TributaryError('stale_producer_epoch', { producerId, epoch, current: t.epoch });
      t.epoch = epoch;
    } else {
      t = { producerId, epoch, firstOffset: logEnd, confirmed: false, pending: 0 };
      this.openWritable().set(producerId, t);
    }
    t.pending++;
    this.version++;
    return t;
  }

  /** The append begun with begin() landed at `baseOffset` (call before the HWM moves past it). */
  appended(t: OpenTxn, baseOffset: number): void {
    t.pending--;
    if (!t.confirmed) {
      t.firstOffset = baseOffset;
      t.confirmed = true;
    }
    this.version++;
  }

  /** The append begun with begin() wrote nothing (failed, or was a duplicate). */
  released(t: OpenTxn): void {
    t.pending--;
    if (!t.confirmed && t.pending === 0) {
      if (this.open.get(t.producerId) === t) this.open.delete(t.producerId);
      this.closing.delete(t);
    }
    this.version++;
  }

  /**
   * A marker for `producerId` is about to be queued: its open transaction (if any) moves to closing (it
   * still holds the LSO; a new transaction of the producer opens a fresh entry). Throws
   * stale_producer_epoch for an epoch below the open transaction's.
   */
  beginMarker(producerId: string, epoch: number): OpenTxn | null {
    (this.markerCounts = writableMap(this.markerCounts)).set(producerId, this.markersOf(producerId) + 1);
    const t = this.open.get(producerId);
    if (!t) return null;
    if (epoch < t.epoch) throw new TributaryError('stale_producer_epoch', { producerId, epoch, current: t.epoch });
    this.open.delete(producerId);
    this.closingWritable().add(t);
    this.version++;
    return t;
  }

  /** The marker landed at `markerOffset`: closes the transaction; an abort records its range. */
  markerWritten(t: OpenTxn | null, type: MarkerType, markerOffset: number): AbortedTxn | null {
    if (!t) return null;
    this.closing.delete(t);
    this.version++;
    if (t.confirmed) (this.closed = writableArray(this.closed)).push({ producerId: t.producerId, epoch: t.epoch, firstOffset: t.firstOffset, markerOffset });
    if (type !== 'abort' || !t.confirmed) return null;
    return this.addAborted({ producerId: t.producerId, firstOffset: t.firstOffset, lastOffset: markerOffset });
  }

  /** The marker was not written: the transaction is open again (unless the producer opened another). */
  markerFailed(t: OpenTxn | null): void {
    if (!t) return;
    if (!this.open.has(t.producerId)) {
      this.closing.delete(t);
      this.openWritable().set(t.producerId, t);
    }
    this.version++;
  }

  /** Rebuild: one record read back from the log, in offset order. */
  replay(r: TxnRecordView): void {
    if (!isTransactional(r.attributes, r.producerId)) return;
    if ((r.attributes & RecordAttr.CONTROL) !== 0) {
      const t = this.open.get(r.producerId);
      if (!t) return;
      this.open.delete(r.producerId);
      this.version++;
      (this.closed = writableArray(this.closed)).push({ producerId: t.producerId, epoch: t.epoch, firstOffset: t.firstOffset, markerOffset: r.offset });
      if (decodeMarkerValue(r.value) === 'abort') this.addAborted({ producerId: r.producerId, firstOffset: t.firstOffset, lastOffset: r.offset });
      return;
    }
    if (!this.open.has(r.producerId)) {
      this.openWritable().set(r.producerId, { producerId: r.producerId, epoch: r.epoch, firstOffset: r.offset, confirmed: true, pending: 0 });
      this.version++;
    }
  }

  private addAborted(a: AbortedTxn): AbortedTxn {
    const arr = (this.aborted = writableArray(this.aborted));
    let i = arr.length;
    while (i > 0 && arr[i - 1]!.lastOffset > a.lastOffset) i--;
    arr.splice(i, 0, a);
    if (a.lastOffset - a.firstOffset > this.maxSpan) this.maxSpan = a.lastOffset - a.firstOffset;
    this.version++;
    return a;
  }

  /** The aborted ranges overlapping [from, to): a binary search, then only ranges that can overlap. */
  abortedOverlapping(from: number, to: number): AbortedTxn[] {
    const arr = this.aborted;
    const out: AbortedTxn[] = [];
    if (arr.length === 0 || from >= to) return out;
    let lo = 0;
    let hi = arr.length;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if (arr[mid]!.lastOffset > from) hi = mid;
      else lo = mid + 1;
    }
    // firstOffset >= lastOffset - maxSpan: past that bound no later range can start below `to`.
    for (let i = lo; i < arr.length && arr[i]!.lastOffset - this.maxSpan < to; i++) {
      if (arr[i]!.firstOffset < to) out.push(arr[i]!);
    }
    return out;
  }

  /**
   * A predicate "is this record of an aborted transaction" for records in [from, to), or null when no
   * aborted range overlaps the window (the usual case: nothing to filter but control records).
   */
  abortedFilter(from: number, to: number): ((offset: number, producerId: string, attributes: number) => boolean) | null {
    const ranges = this.abortedOverlapping(from, to);
    if (ranges.length === 0) return null;
    const byProducer = new Map<string, AbortedTxn[]>();
    for (const r of ranges) {
      const l = byProducer.get(r.producerId);
      if (l) l.push(r);
      else byProducer.set(r.producerId, [r]);
    }
    return (offset, producerId, attributes) => {
      if ((attributes & RecordAttr.TRANSACTIONAL) === 0 || (attributes & RecordAttr.CONTROL) !== 0) return false;
      const l = byProducer.get(producerId);
      if (!l) return false;
      for (const r of l) if (offset >= r.firstOffset && offset < r.lastOffset) return true;
      return false;
    };
  }

  /** Forgets aborted ranges wholly below the log start (retention removed their records). */
  prune(logStartOffset: number): void {
    let n = 0;
    while (n < this.aborted.length && this.aborted[n]!.lastOffset <= logStartOffset) n++;
    if (n > 0) {
      this.aborted.splice(0, n);
      this.version++;
    }
  }

  /**
   * The state as of `offset` (records below it): open transactions that began below it, every abort before
   * it. The offset is lowered to the lower bound of any append not yet landed, which a snapshot cannot
   * describe (the rebuild then scans from there).
   */
  snapshot(offset: number): TxnSnapshot {
    for (const t of this.openTxns()) if (!t.confirmed && t.firstOffset < offset) offset = t.firstOffset;
    const open: TxnSnapshot['open'] = [];
    for (const t of this.openTxns()) {
      if (t.confirmed && t.firstOffset < offset) open.push({ producerId: t.producerId, epoch: t.epoch, firstOffset: t.firstOffset });
    }
    // Closed by a marker at or past the offset: as of the offset, still open.
    for (const c of this.closed) {
      if (c.firstOffset < offset && c.markerOffset >= offset) open.push({ producerId: c.producerId, epoch: c.epoch, firstOffset: c.firstOffset });
    }
    return { version: 1, offset, open, aborted: this.aborted.filter((a) => a.lastOffset < offset) };
  }

  /**
   * Forgets closed transactions whose marker is below `offset` (the high-water mark, which only grows
   * until a truncation rebuilds the index): no later snapshot is taken below it.
   */
  pruneClosed(offset: number): void {
    if (this.closed.length > 0 && this.closed[0]!.markerOffset < offset) this.closed = this.closed.filter((c) => c.markerOffset >= offset);
  }

  static fromSnapshot(s: TxnSnapshot): TxnIndex {
    if (s?.version !== 1 || !Number.isSafeInteger(s.offset) || !Array.isArray(s.open) || !Array.isArray(s.aborted)) throw new Error('bad transaction snapshot');
    const t = new TxnIndex();
    for (const o of s.open) {
      if (typeof o.producerId !== 'string' || !Number.isSafeInteger(o.firstOffset) || !Number.isSafeInteger(o.epoch)) throw new Error('bad transaction snapshot');
      t.openWritable().set(o.producerId, { producerId: o.producerId, epoch: o.epoch, firstOffset: o.firstOffset, confirmed: true, pending: 0 });
    }
    for (const a of s.aborted) {
      if (typeof a.producerId !== 'string' || !Number.isSafeInteger(a.firstOffset) || !Number.isSafeInteger(a.lastOffset)) throw new Error('bad transaction snapshot');
      t.addAborted({ producerId: a.producerId, firstOffset: a.firstOffset, lastOffset: a.lastOffset });
    }
    return t;
  }
}

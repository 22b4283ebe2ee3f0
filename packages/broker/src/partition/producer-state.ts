import { TributaryError } from 'tributary-protocol/errors.js';
import { RecordAttr } from 'tributary-protocol/record.js';
import { ATTR_END_OF_APPEND } from '../storage/record-codec.js';
import type { AppendGuard } from '../storage/log-options.js';
import { emptyMap, writableMap } from '../common/empty.js';

/**
 * Idempotent producer state of one partition: per producer id, the epoch and the last few appended
 * batches (sequence range and offsets), so a retried batch is answered with its original offsets instead
 * of being appended again. Pure bookkeeping (no I/O): Partition drives it around its appends, and rebuilds
 * it on open from a snapshot plus the log records after it.
 */

/** Batches per producer remembered for duplicate detection (the SDK keeps at most 5 in flight). */
export const PRODUCER_WINDOW = 5;

export interface AppendOffsets {
  baseOffset: number;
  lastOffset: number;
  timestamp: number;
}

export interface BatchEntry {
  firstSeq: number;
  lastSeq: number;
  /** Set once the append is done (-1 while pending). */
  baseOffset: number;
  lastOffset: number;
  timestamp: number;
  /** The append's outcome, for a duplicate that arrives while it is pending. */
  result?: Promise<AppendOffsets>;
  /**
   * Pending, and an earlier batch of the producer failed: it must not be written after the gap (the
   * numbers would skip the failed one's); its write is refused as out_of_order_sequence (partition.ts).
   */
  refusedAfter?: number;
  /**
   * Pending, and the producer had no state here before it (or before the failed batches ahead of it): if
   * it fails with the rest, the producer goes again, as in Kafka, where a failed append leaves no state
   * (a producer without state may start at any sequence, KIP-360).
   */
  first?: boolean;
}

interface ProducerEntry {
  epoch: number;
  /** Oldest first, at most PRODUCER_WINDOW (one more just after a load, see snapshot()). */
  batches: BatchEntry[];
  /**
   * Batches pushed out of the window since the last snapshot, oldest first (at most MAX_EVICTED): when all
   * of the window lies at or past a snapshot's offset, the newest of these below it is the producer's
   * state as of that offset (see snapshot()).
   */
  evicted?: BatchEntry[];
  lastSeenMs: number;
}

/**
 * Evicted batches kept per producer between snapshots: covers a follower holding up to this many (plus a
 * window) of one producer's batches not yet below its HWM.
 */
const MAX_EVICTED = 16;

export type CheckResult = { kind: 'append' } | { kind: 'duplicate'; entry: BatchEntry };

export interface ProducerSnapshot {
  version: 1;
  /** The state covers every append that ends below this offset. */
  offset: number;
  producers: Array<{ id: string; epoch: number; lastSeenMs: number; batches: Array<[number, number, number, number, number]> }>;
}

export class ProducerStateTable {
  /** The shared empty map until the first producer (common/empty.ts). */
  private producers = emptyMap<string, ProducerEntry>();
  /** Bumped on every change, so a snapshot is written only when something changed. */
  version = 0;

  get size(): number {
    return this.producers.size;
  }

  /**
   * Classifies a batch (firstSeq..lastSeq of producer `id` at `epoch`): a new append, a duplicate of a
   * remembered batch, or an error (stale_producer_epoch, out_of_order_sequence). `anyFirst`: a producer
   * without state may start at any sequence (Kafka's rule since KIP-360); else it starts at 0.
   */
  check(id: string, epoch: number, firstSeq: number, lastSeq: number, anyFirst = false): CheckResult {
    const p = this.producers.get(id);
    if (!p) {
      if (firstSeq !== 0 && !anyFirst) throw outOfOrder(id, epoch, firstSeq, 0);
      return { kind: 'append' };
    }
    if (epoch < p.epoch) throw new TributaryError('stale_producer_epoch', { producer_id: id, epoch, current_epoch: p.epoch });
    if (epoch > p.epoch) {
      if (firstSeq !== 0) throw outOfOrder(id, epoch, firstSeq, 0);
      return { kind: 'append' };
    }
    for (const b of p.batches) {
      if (b.firstSeq === firstSeq && b.lastSeq === lastSeq) return { kind: 'duplicate', entry: b };
    }
    const last = p.batches[p.batches.length - 1];
    const expected = last ? last.lastSeq + 1 : 0;
    if (firstSeq !== expected) throw outOfOrder(id, epoch, firstSeq, expected);
    return { kind: 'append' };
  }

  /** Records a batch check() accepted, as pending; complete() or abort() it once the append settles. */
  begin(id: string, epoch: number, firstSeq: number, lastSeq: number, nowMs: number): BatchEntry {
    let p = this.producers.get(id);
    const known = p !== undefined;
    if (!p || epoch > p.epoch) {
      p = { epoch, batches: [], lastSeenMs: nowMs };
      this.writable().set(id, p);
    }
    const entry: BatchEntry = { firstSeq, lastSeq, baseOffset: -1, lastOffset: -1, timestamp: 0 };
    if (!known) entry.first = true;
    p.batches.push(entry);
    trimWindow(p);
    p.lastSeenMs = nowMs;
    this.version++;
    return entry;
  }

  complete(entry: BatchEntry, res: AppendOffsets): void {
    entry.baseOffset = res.baseOffset;
    entry.lastOffset = res.lastOffset;
    entry.timestamp = res.timestamp;
    entry.result = undefined;
    this.version++;
  }

  /**
   * The append failed: forget the batch, so a retry of it is appended. The producer's batches checked
   * after it and still pending are refused when their turn to be written comes (`refusedAfter`).
   */
  abort(id: string, entry: BatchEntry): void {
    const p = this.producers.get(id);
    if (!p) return;
    const i = p.batches.indexOf(entry);
    if (i >= 0) {
      for (let j = i + 1; j < p.batches.length; j++) {
        const later = p.batches[j];
        if (later.baseOffset < 0) later.refusedAfter ??= entry.firstSeq;
      }
      p.batches.splice(i, 1);
      if (entry.first) {
        // Nothing of the producer was written before it: without a later batch it goes (Kafka keeps no
        // state of a failed append), else the next one (refused after the gap when its turn comes) inherits it.
        if (p.batches.length === 0 && !p.evicted?.length) this.producers.delete(id);
        else if (p.batches[0]) p.batches[0].first = true;
      }
    }
    // Otherwise the producer stays, with no batches, as a fence leaves it: its epoch still refuses older ones.
    this.version++;
  }

  /**
   * The write-time check of a begun batch (storage AppendGuard): an earlier batch of the producer, pending
   * when this one was checked, may fail first (a full disk), and this one must then not be written after
   * the gap. `failed` aborts the batch, once.
   */
  writeGuard(id: string, epoch: number, entry: BatchEntry): AppendGuard {
    let aborted = false;
    return {
      refused: () => (entry.refusedAfter === undefined ? undefined : outOfOrder(id, epoch, entry.firstSeq, entry.refusedAfter)),
      failed: () => {
        if (aborted) return;
        aborted = true;
        this.abort(id, entry);
      },
    };
  }

  /** Rebuild: an append found in the log (records in offset order). Batches already known are skipped. */
  replay(id: string, epoch: number, firstSeq: number, lastSeq: number, baseOffset: number, lastOffset: number, timestamp: number): void {
    let p = this.producers.get(id);
    if (p && epoch < p.epoch) return;
    if (!p || epoch > p.epoch) {
      p = { epoch, batches: [], lastSeenMs: timestamp };
      this.writable().set(id, p);
    }
    const last = p.batches[p.batches.length - 1];
    if (last && (last.lastOffset >= baseOffset || last.lastSeq >= firstSeq)) return;
    p.batches.push({ firstSeq, lastSeq, baseOffset, lastOffset, timestamp });
    trimWindow(p);
    // Record timestamps may be the producer's: a replayed producer counts as seen now.
    p.lastSeenMs = Math.max(p.lastSeenMs, timestamp, Date.now());
    this.version++;
  }

  /**
   * A transaction marker at `epoch` (the coordinator's, bumped when it fenced the producer): a higher epoch
   * replaces the producer's state, so appends of the older epoch are refused from now on (a fenced zombie
   * cannot reopen a transaction after its abort marker) and the new epoch starts at sequence 0.
   */
  fence(id: string, epoch: number, nowMs: number): void {
    const p = this.producers.get(id);
    if (p && epoch <= p.epoch) return;
    this.writable().set(id, { epoch, batches: [], lastSeenMs: nowMs });
    this.version++;
  }

  /** Drops the batches that end at or above `offset`, keeping every producer's epoch. */
  dropBatchesFrom(offset: number): void {
    for (const p of this.producers.values()) {
      p.batches = p.batches.filter((b) => b.lastOffset < offset);
      if (p.evicted) p.evicted = p.evicted.filter((b) => b.lastOffset < offset);
    }
    this.version++;
  }

  /**
   * Forgets the producers with no batch at epoch 0 (after a rebuild from a log cut below the snapshot, whose
   * batches of theirs the cut took): the log knows nothing of them, and no older epoch needs refusing.
   */
  forgetUnknown(): void {
    let n = 0;
    for (const [id, p] of this.producers) {
      if (p.epoch === 0 && p.batches.length === 0) {
        this.producers.delete(id);
        n++;
      }
    }
    if (n > 0) this.version++;
  }

  /** Drops producers not seen for `maxIdleMs` (whose batches are all done). */
  expire(nowMs: number, maxIdleMs: number): number {
    let n = 0;
    for (const [id, p] of this.producers) {
      if (nowMs - p.lastSeenMs > maxIdleMs && p.batches.every((b) => b.baseOffset >= 0)) {
        this.producers.delete(id);
        n++;
      }
    }
    if (n > 0) this.version++;
    return n;
  }

  /** The completed state (pending batches left out: replay finds them in the log past `offset`). */
  snapshot(offset: number): ProducerSnapshot {
    const producers: ProducerSnapshot['producers'] = [];
    for (const [id, p] of this.producers) {
      const done = p.batches.filter((b) => b.baseOffset >= 0);
      // Nothing of it written yet, and nothing known before: no state (abort()), replay finds what lands.
      if (done.length === 0 && p.batches[0]?.first && !p.evicted?.length) continue;
      // The state as of `offset` needs the producer's last batch below it. A load drops every batch from
      // the offset on and replays the log from there: a window wholly at or past it (more than a window of
      // batches not yet below the HWM, a follower's) would leave the producer with none, expecting
      // sequence 0 after a truncation. So the newest evicted batch below the offset goes first.
      if (p.evicted && !done.some((b) => b.lastOffset < offset)) {
        let floor: BatchEntry | undefined;
        for (const b of p.evicted) if (b.baseOffset >= 0 && b.lastOffset < offset) floor = b;
        if (floor) {
          done.unshift(floor);
          // Older ones are never needed again (a later snapshot's offset is not lower).
          p.evicted = p.evicted.filter((b) => b.lastOffset >= floor.lastOffset);
        }
      } else if (p.evicted) {
        p.evicted = p.evicted.filter((b) => b.lastOffset >= offset);
      }
      const batches = done.map((b) => [b.firstSeq, b.lastSeq, b.baseOffset, b.lastOffset, b.timestamp] as [number, number, number, number, number]);
      // A producer without batches still carries its (fenced) epoch.
      producers.push({ id, epoch: p.epoch, lastSeenMs: p.lastSeenMs, batches });
    }
    return { version: 1, offset, producers };
  }

  /** Throws, saying what is wrong, for anything but a whole snapshot (the caller then replays the log). */
  static fromSnapshot(s: ProducerSnapshot): ProducerStateTable {
    const t = new ProducerStateTable();
    checkSnapshot(s);
    for (const p of s.producers) {
      t.writable().set(p.id, {
        epoch: p.epoch,
        lastSeenMs: p.lastSeenMs,
        // The window and the batch below it a snapshot may hold (see snapshot()): a load drops what lies past
        // its offset, and trimWindow keeps the rest to the window.
        batches: p.batches
          .slice(-(PRODUCER_WINDOW + 1))
          .map(([firstSeq, lastSeq, baseOffset, lastOffset, timestamp]) => ({ firstSeq, lastSeq, baseOffset, lastOffset, timestamp })),
      });
    }
    return t;
  }

  private writable(): Map<string, ProducerEntry> {
    this.producers = writableMap(this.producers);
    return this.producers;
  }

  /** Test/inspection helper: the producer's epoch and last appended sequence. */
  describe(id: string): { epoch: number; lastSeq: number } | undefined {
    const p = this.producers.get(id);
    if (!p) return undefined;
    const last = p.batches[p.batches.length - 1];
    return { epoch: p.epoch, lastSeq: last ? last.lastSeq : -1 };
  }
}

/** A producer snapshot's structure, checked before anything of it is taken (a `{}` used to pass as an empty state). */
function checkSnapshot(s: ProducerSnapshot): void {
  const bad = (what: string) => new Error(`not a producer snapshot: ${what}`);
  if (typeof s !== 'object' || s === null) throw bad(`found ${JSON.stringify(s)}`);
  if (s.version !== 1) throw bad(`version ${JSON.stringify(s.version)}`);
  if (!Number.isSafeInteger(s.offset) || s.offset < 0) throw bad(`offset ${JSON.stringify(s.offset)}`);
  if (!Array.isArray(s.producers)) throw bad('no producers array');
  for (const p of s.producers) {
    const ok =
      typeof p === 'object' &&
      p !== null &&
      typeof p.id === 'string' &&
      Number.isSafeInteger(p.epoch) &&
      typeof p.lastSeenMs === 'number' &&
      Array.isArray(p.batches) &&
      p.batches.every((b) => Array.isArray(b) && b.length === 5 && b.every((n) => Number.isSafeInteger(n)));
    if (!ok) throw bad(`producer entry ${JSON.stringify(p)?.slice(0, 200)}`);
  }
}

/** Keeps the producer's window to PRODUCER_WINDOW batches; what falls out is kept for the next snapshot. */
function trimWindow(p: ProducerEntry): void {
  while (p.batches.length > PRODUCER_WINDOW) {
    // Pending ones too: complete() fills their offsets in; an aborted one keeps -1 and is never a floor.
    (p.evicted ??= []).push(p.batches.shift()!);
    if (p.evicted.length > MAX_EVICTED) p.evicted.shift();
  }
}

/** A transactional batch under the numbers of `e`, a batch of a transaction that ended (partition.ts). */
export function reusedSequence(b: { producerId: string; epoch: number; firstSequence: number }, e: BatchEntry): TributaryError {
  return new TributaryError('out_of_order_sequence', {
    producer_id: b.producerId,
    epoch: b.epoch,
    sequence: b.firstSequence,
    reason: `sequences ${e.firstSeq}..${e.lastSeq} were a batch of an ended transaction (at offset ${e.baseOffset})`,
  });
}

function outOfOrder(id: string, epoch: number, got: number, expected: number): TributaryError {
  return new TributaryError('out_of_order_sequence', { producer_id: id, epoch, sequence: got, expected });
}

/**
 * Feeds records read back from a log (append boundaries kept), in offset order, into a table: the
 * records of one append between end-of-append markers form one batch; a marker (control record) fences
 * its producer at its epoch. Used for the rebuild at open and for a follower's replicated records.
 */
export class ProducerStateReplay {
  private run: { id: string; epoch: number; firstSeq: number; base: number } | null = null;

  constructor(private readonly table: ProducerStateTable) {}

  record(r: { producerId: string; epoch: number; sequence: number; attributes: number; offset: number; timestamp: number }): void {
    if (r.producerId !== '' && (r.attributes & RecordAttr.CONTROL) !== 0) {
      this.table.fence(r.producerId, r.epoch, r.timestamp);
      this.run = null;
    } else if (r.producerId !== '' && r.sequence >= 0) {
      const run = this.run && this.run.id === r.producerId && this.run.epoch === r.epoch ? this.run : { id: r.producerId, epoch: r.epoch, firstSeq: r.sequence, base: r.offset };
      this.run = run;
      if ((r.attributes & ATTR_END_OF_APPEND) !== 0) {
        this.table.replay(run.id, run.epoch, run.firstSeq, r.sequence, run.base, r.offset, r.timestamp);
        this.run = null;
      }
    } else {
      this.run = null;
    }
  }
}

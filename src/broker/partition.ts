import type { LogRecord, RecordInput } from '../protocol/record.js';
import { RecordAttr } from '../protocol/record.js';
import { TributaryError } from '../protocol/errors.js';
import type { ScannedBatch } from '../protocol/batch.js';
import type { PartitionLog } from '../storage/partition-log.js';
import { ATTR_END_OF_APPEND } from '../storage/record-codec.js';
import { open, readFile, rename } from 'node:fs/promises';
import { join } from 'node:path';
import { type AppendOffsets, type CheckResult, type ProducerSnapshot, ProducerStateTable } from './producer-state.js';

/** Idempotent producer state of a partition, as of an offset (see loadProducerState). */
export const PRODUCER_SNAPSHOT_FILE = 'producer.snapshot';
/** How often a changed producer state is written to the snapshot (bounds the replay after a crash). */
const SNAPSHOT_INTERVAL_MS = 10_000;
/** Producers idle this long are forgotten (their next batch must start a new epoch or sequence 0). */
export const PRODUCER_ID_EXPIRATION_MS = 7 * 24 * 60 * 60 * 1000;

export interface IdempotentBatch {
  producerId: string;
  epoch: number;
  firstSequence: number;
  lastSequence: number;
}

export interface IdempotentAppend extends AppendOffsets {
  duplicate: boolean;
}

export type Isolation = 'read_committed' | 'read_uncommitted';

export interface ReadResult {
  records: LogRecord[];
  /** Where the next read continues: past the returned records and any filtered ones. */
  nextOffset: number;
}

interface Waiter {
  offset: number;
  wake: () => void;
}

/**
 * A partition as the broker serves it: the log plus the high-water mark that gates readers. The log
 * decides durability; this layer moves the HWM only once an append is durable, so a consumer never sees
 * a record that a crash could take back.
 */
export class Partition {
  private waiters = new Set<Waiter>();
  private closed = false;
  /** Idempotent producer state; null until loaded (loadProducerState runs from the constructor). */
  private producers: ProducerStateTable | null = null;
  private producersError: Error | null = null;
  private readonly producersReady: Promise<void>;
  private snapshotVersion = -1;
  private snapshotWrite: Promise<void> = Promise.resolve();
  private snapshotTimer: NodeJS.Timeout | null = null;

  constructor(
    readonly topic: string,
    readonly id: number,
    readonly log: PartitionLog,
  ) {
    // Everything that survived recovery is on disk, hence durable as far as a restart can tell.
    if (log.highWatermark < log.logEndOffset) log.setHighWatermark(log.logEndOffset);
    this.producersReady = this.loadProducerState().then(
      (t) => {
        this.producers = t;
      },
      (err: unknown) => {
        this.producersError = err instanceof Error ? err : new Error(String(err));
      },
    );
  }

  get earliest(): number {
    return this.log.logStartOffset;
  }

  get logEndOffset(): number {
    return this.log.logEndOffset;
  }

  get highWatermark(): number {
    return this.log.highWatermark;
  }

  /** The last stable offset: the end of what read_committed may see (no transactions yet: the HWM). */
  get lastStableOffset(): number {
    return this.log.highWatermark;
  }

  async append(records: RecordInput[]): Promise<{ baseOffset: number; lastOffset: number; timestamp: number }> {
    if (this.closed) throw new TributaryError('shutting_down');
    return this.appended(await this.log.append(records));
  }

  /** append() of the records of a produce batch, encoded straight from its wire bytes (PartitionLog.appendWire). */
  async appendWire(batch: ScannedBatch): Promise<{ baseOffset: number; lastOffset: number; timestamp: number }> {
    if (this.closed) throw new TributaryError('shutting_down');
    return this.appended(await this.log.appendWire(batch));
  }

  /**
   * An idempotent append: the state check and the append happen in one synchronous step (appends of a
   * partition are queued in call order), so a duplicate of a pending batch waits for that append's result.
   * A duplicate resolves with the original offsets and `duplicate: true`; errors: stale_producer_epoch,
   * out_of_order_sequence.
   */
  appendIdempotent(records: RecordInput[], b: IdempotentBatch): Promise<IdempotentAppend> {
    if (this.closed) return Promise.reject(new TributaryError('shutting_down'));
    if (this.producers === null && this.producersError === null) {
      // Still rebuilding (just opened): queue behind it; then-callbacks run in call order, so order holds.
      return this.producersReady.then(() => this.appendIdempotent(records, b));
    }
    if (this.producersError)
      return Promise.reject(new TributaryError('storage_error', { reason: `producer state unavailable: ${this.producersError.message}` }));
    const table = this.producers!;
    let check: CheckResult;
    try {
      check = table.check(b.producerId, b.epoch, b.firstSequence, b.lastSequence);
    } catch (err) {
      return Promise.reject(err);
    }
    if (check.kind === 'duplicate') {
      const e = check.entry;
      if (e.result) return e.result.then((r) => ({ ...r, duplicate: true }));
      return Promise.resolve({ baseOffset: e.baseOffset, lastOffset: e.lastOffset, timestamp: e.timestamp, duplicate: true });
    }
    const entry = table.begin(b.producerId, b.epoch, b.firstSequence, b.lastSequence, Date.now());
    const result = this.log.append(records).then(
      (res) => {
        table.complete(entry, res);
        return this.appended(res);
      },
      (err: unknown) => {
        table.abort(b.producerId, entry);
        throw err;
      },
    );
    entry.result = result;
    return result.then((r) => ({ baseOffset: r.baseOffset, lastOffset: r.lastOffset, timestamp: r.timestamp, duplicate: false }));
  }

  /** The producer state (for tests and inspection); undefined until loaded. */
  producerState(): ProducerStateTable | undefined {
    return this.producers ?? undefined;
  }

  /** Resolves once the producer state is rebuilt (or failed to). */
  whenProducerStateReady(): Promise<void> {
    return this.producersReady;
  }

  /**
   * Rebuild: the snapshot (state as of an offset), then every append after it up to the current log end.
   * Without a snapshot (a log from before idempotent producers, or a crash before the first snapshot),
   * the scan starts at the last segment. The state is then snapshotted right away and on a timer.
   */
  private async loadProducerState(): Promise<ProducerStateTable> {
    const path = join(this.log.dir, PRODUCER_SNAPSHOT_FILE);
    let table = new ProducerStateTable();
    let from: number;
    let loaded = false;
    try {
      const snap = JSON.parse(await readFile(path, 'utf8')) as ProducerSnapshot;
      table = ProducerStateTable.fromSnapshot(snap);
      from = snap.offset;
      loaded = true;
      // The log ends before the snapshot (a torn tail cut by recovery): those batches are not in it.
      if (from > this.log.logEndOffset) {
        table.truncate(this.log.logEndOffset);
        loaded = false;
      }
    } catch {
      table = new ProducerStateTable();
      const segs = this.log.segmentInfos();
      from = segs[segs.length - 1]!.baseOffset;
    }
    from = Math.max(from, this.log.logStartOffset);
    const end = this.log.logEndOffset;
    let run: { id: string; epoch: number; firstSeq: number; base: number } | null = null;
    let offset = Math.min(from, end);
    const scanned = offset < end;
    while (offset < end) {
      // Retention may have removed the segment being scanned: what it held is gone from the log anyway.
      if (offset < this.log.logStartOffset) offset = this.log.logStartOffset;
      const recs = await this.log.read(offset, { maxRecords: 10_000, maxBytes: 8 * 1024 * 1024, maxOffset: end, keepAppendMarker: true });
      if (recs.length === 0) break;
      for (const r of recs) {
        if (r.producerId !== '' && r.sequence >= 0) {
          if (!run || run.id !== r.producerId || run.epoch !== r.epoch) run = { id: r.producerId, epoch: r.epoch, firstSeq: r.sequence, base: r.offset };
          if ((r.attributes & ATTR_END_OF_APPEND) !== 0) {
            table.replay(run.id, run.epoch, run.firstSeq, r.sequence, run.base, r.offset, r.timestamp);
            run = null;
          }
        } else {
          run = null;
        }
      }
      offset = recs[recs.length - 1]!.offset + 1;
    }
    table.expire(Date.now(), PRODUCER_ID_EXPIRATION_MS);
    if (!this.closed) {
      if (scanned || !loaded) await this.writeSnapshot(table, end);
      else this.snapshotVersion = table.version;
      this.snapshotTimer = setInterval(() => {
        if (this.producers && this.producers.version !== this.snapshotVersion) {
          this.producers.expire(Date.now(), PRODUCER_ID_EXPIRATION_MS);
          void this.writeSnapshot(this.producers, this.log.highWatermark).catch(() => {});
        }
      }, SNAPSHOT_INTERVAL_MS);
      this.snapshotTimer.unref();
    }
    return table;
  }

  /** Writes the snapshot atomically (tmp + fsync + rename); writes are serialized. */
  private writeSnapshot(table: ProducerStateTable, offset: number): Promise<void> {
    const version = table.version;
    const data = JSON.stringify(table.snapshot(offset));
    const path = join(this.log.dir, PRODUCER_SNAPSHOT_FILE);
    const run = async () => {
      const tmp = `${path}.tmp`;
      const fh = await open(tmp, 'w');
      try {
        await fh.writeFile(data);
        await fh.sync();
      } finally {
        await fh.close();
      }
      await rename(tmp, path);
      this.snapshotVersion = version;
    };
    const p = this.snapshotWrite.then(run, run);
    this.snapshotWrite = p.catch(() => {});
    return p;
  }

  private stopSnapshots(): void {
    if (this.snapshotTimer) clearInterval(this.snapshotTimer);
    this.snapshotTimer = null;
  }

  private appended(res: { baseOffset: number; lastOffset: number; timestamp: number }): { baseOffset: number; lastOffset: number; timestamp: number } {
    if (res.lastOffset + 1 > this.log.highWatermark) {
      this.log.setHighWatermark(res.lastOffset + 1);
      this.notify();
    }
    return res;
  }

  /** Validate a starting offset against the retained range. */
  checkOffset(offset: number): void {
    if (offset < this.earliest || offset > this.logEndOffset) {
      throw new TributaryError('OFFSET_OUT_OF_RANGE', { requested: offset, earliest: this.earliest, latest: this.lastStableOffset });
    }
  }

  async read(offset: number, opts: { maxRecords: number; maxBytes: number; isolation: Isolation }): Promise<ReadResult> {
    this.checkOffset(offset);
    const end = opts.isolation === 'read_committed' ? this.lastStableOffset : this.highWatermark;
    if (offset >= end) return { records: [], nextOffset: offset };
    const raw = await this.log.read(offset, { maxRecords: opts.maxRecords, maxBytes: opts.maxBytes, maxOffset: end });
    if (raw.length === 0) return { records: [], nextOffset: offset };
    const nextOffset = raw[raw.length - 1]!.offset + 1;
    if (opts.isolation === 'read_uncommitted') return { records: raw, nextOffset };
    // Copy only when there is a control record to drop (the usual read has none).
    for (let i = 0; i < raw.length; i++) {
      if ((raw[i]!.attributes & RecordAttr.CONTROL) !== 0) return { records: raw.filter((r) => (r.attributes & RecordAttr.CONTROL) === 0), nextOffset };
    }
    return { records: raw, nextOffset };
  }

  /**
   * The reply batch of read() + encodeBatch(logRecordsToBatch(...)) written straight from the log's tail
   * cache, or null when the tail cache cannot serve it (or it is empty): the caller then takes read().
   */
  readWire(
    offset: number,
    opts: { maxRecords: number; maxBytes: number; isolation: Isolation },
    wire: { topic: string; extensions: boolean },
  ): { frame: Buffer; count: number; valueBytes: number; nextOffset: number } | null {
    if (offset < this.earliest || offset > this.logEndOffset) return null;
    const committed = opts.isolation === 'read_committed';
    const end = committed ? this.lastStableOffset : this.highWatermark;
    if (offset >= end) return null;
    return this.log.readWire(
      offset,
      { maxRecords: opts.maxRecords, maxBytes: opts.maxBytes, maxOffset: end },
      { topic: wire.topic, partition: this.id, extensions: wire.extensions, skipControl: committed },
    );
  }

  /** Resolves once data past `offset` is readable, the wait ends, the signal aborts or the partition closes. */
  waitForData(offset: number, timeoutMs: number, signal?: AbortSignal): Promise<boolean> {
    if (this.highWatermark > offset || this.closed) return Promise.resolve(this.highWatermark > offset);
    if (timeoutMs <= 0 || signal?.aborted) return Promise.resolve(false);
    return new Promise<boolean>((resolve) => {
      const done = () => {
        clearTimeout(timer);
        signal?.removeEventListener('abort', done);
        this.waiters.delete(waiter);
        resolve(this.highWatermark > offset);
      };
      const waiter: Waiter = { offset, wake: done };
      const timer = setTimeout(done, timeoutMs);
      signal?.addEventListener('abort', done, { once: true });
      this.waiters.add(waiter);
    });
  }

  private notify(): void {
    const hwm = this.highWatermark;
    for (const w of this.waiters) if (hwm > w.offset) w.wake();
  }

  /** Wake every waiter and refuse new waits: shutdown must not sit out long polls. */
  beginClose(): void {
    this.closed = true;
    for (const w of this.waiters) w.wake();
  }

  async close(): Promise<void> {
    this.closed = true;
    for (const w of this.waiters) w.wake();
    this.stopSnapshots();
    await this.producersReady;
    await this.log.close();
    // After the log is flushed: the state then covers every append up to the log end.
    if (this.producers) await this.writeSnapshot(this.producers, this.log.logEndOffset).catch(() => {});
  }

  async destroy(): Promise<void> {
    this.closed = true;
    for (const w of this.waiters) w.wake();
    this.stopSnapshots();
    await this.producersReady;
    await this.snapshotWrite;
    await this.log.destroy();
  }

  get isClosed(): boolean {
    return this.closed;
  }
}

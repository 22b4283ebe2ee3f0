import type { LogRecord, RecordInput } from '../protocol/record.js';
import { RecordAttr } from '../protocol/record.js';
import { TributaryError } from '../protocol/errors.js';
import type { ScannedBatch } from '../protocol/batch.js';
import type { PartitionLog } from '../storage/partition-log.js';

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

  constructor(
    readonly topic: string,
    readonly id: number,
    readonly log: PartitionLog,
  ) {
    // Everything that survived recovery is on disk, hence durable as far as a restart can tell.
    if (log.highWatermark < log.logEndOffset) log.setHighWatermark(log.logEndOffset);
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
    await this.log.close();
  }

  async destroy(): Promise<void> {
    this.closed = true;
    for (const w of this.waiters) w.wake();
    await this.log.destroy();
  }

  get isClosed(): boolean {
    return this.closed;
  }
}

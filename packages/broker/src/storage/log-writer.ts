/**
 * The write path of a partition log: appends are queued and written by a single writer, inside a mutex that
 * exclusive operations (flush, retention, the compaction swap, truncation) also take. Several queued batches
 * coalesce into one write call; the last record of every append carries ATTR_END_OF_APPEND, so recovery
 * keeps whole appends only (docs/architecture.md, "Storage"). Durability is left to GroupCommit.
 */
import { unlink } from 'node:fs/promises';
import { join } from 'node:path';
import { invalidParam, TributaryError } from 'tributary-protocol/errors.js';
import { systemClock } from '../common/clock.js';
import type { ScannedBatch } from 'tributary-protocol/batch.js';
import type { LogRecord, RecordInput } from 'tributary-protocol/record.js';
import { BLOCK_HEADER_BYTES, blockRecordStart, blockSize, inPlaceBlockable, stampBlockInPlace, wireBlockable, writeBlockFromWire } from './append-block.js';
import type { GroupCommit } from './group-commit.js';
import { HWM_CHECKPOINT_FILE } from './hwm-checkpoint.js';
import { fsyncDir, isFdExhaustion, makeDir, storageError, writeFailed } from './log-fs.js';
import { CLEAN_SHUTDOWN_FILE } from './log-loader.js';
import { type AppendGuard, type AppendResult, MAX_APPEND_BLOCK_BYTES } from './log-options.js';
import type { LogState } from './log-state.js';
import { Mutex } from './mutex.js';
import { type GroupWrite, nextGroup, type PendingAppend } from './log-write-queue.js';
import {
  ageTimestamp,
  ATTR_END_OF_APPEND,
  encodedSize,
  encodeRecordInto,
  USER_ATTR_MASK,
  lastWireTimestamp,
  storedSizeOfWire,
  validateEncodable,
  writeStoredFromWire,
} from './record-codec.js';
import type { SegmentFds } from './segment-fds.js';
import { Segment } from './segment.js';
import { StoredAppends } from './stored-appends.js';
import { cacheReplica, checkReplicaRecords, encodeReplicaRecords, type ReplicaWrite } from './replica-write.js';
import { MAX_BLOCK_BYTES, WriteArena } from './write-arena.js';

/** Upper bound of one append batch and of one coalesced write. */
const MAX_BATCH_BYTES = 1024 * 1024 * 1024;
const MAX_GROUP_BYTES = 4 * 1024 * 1024;
const NO_RECORDS: RecordInput[] = [];
const NO_SIZES: number[] = [];

/** Largest offset distance from a segment's base that its index can hold (u32 relative offsets). */
const MAX_RELATIVE_OFFSET = 0xffffffff;

export class LogWriter {
  private readonly mutex = new Mutex();
  private pending: PendingAppend[] = [];
  private drainScheduled = false;
  private exclusiveWaiting = 0;
  /** An exclusive operation is running (the 'interval' flush timer leaves the fsync to it). */
  exclusiveActive = false;
  /** Where the bytes of each write are encoded: shared blocks for small writes (write-arena.ts). */
  private readonly arena: WriteArena;

  constructor(
    private readonly st: LogState,
    private readonly sync: GroupCommit,
    private readonly fds: SegmentFds,
  ) {
    // Blocks at most a sixteenth of the broker-wide tail cache budget and a quarter of this log's cache.
    const { tailCacheBudget, tailCacheBytes } = st.options;
    this.arena = new WriteArena(systemClock, Math.min(MAX_BLOCK_BYTES, (tailCacheBudget?.max ?? Infinity) / 16, (tailCacheBytes ?? Infinity) / 4));
  }

  /** See PartitionLog.append. */
  append(records: RecordInput[], guard?: AppendGuard): Promise<AppendResult> {
    if (this.st.state !== 'open') return Promise.reject(storageError(this.st.dir, 'log is closed'));
    if (this.st.failed) return Promise.reject(storageError(this.st.dir, 'log failed', this.st.failed));
    if (!Array.isArray(records) || records.length === 0) return Promise.reject(invalidParam('records', 'must be a non-empty array'));
    const sizes = new Array<number>(records.length);
    let bytes = 0;
    const max = this.st.options.maxRecordBytes;
    for (let i = 0; i < records.length; i++) {
      const reason = validateEncodable(records[i]);
      if (reason) return Promise.reject(invalidParam('records', `record ${i}: ${reason}`));
      const size = encodedSize(records[i]);
      if (max !== undefined && size > max) return Promise.reject(new TributaryError('record_too_large', { size, max }));
      sizes[i] = size;
      bytes += size;
    }
    if (bytes > MAX_BATCH_BYTES) return Promise.reject(new TributaryError('record_too_large', { size: bytes, max: MAX_BATCH_BYTES }));
    return new Promise<AppendResult>((resolve, reject) => {
      this.pending.push(guard ? { records, sizes, bytes, resolve, reject, guard } : { records, sizes, bytes, resolve, reject });
      this.scheduleDrain();
    });
  }

  /** See PartitionLog.appendWire. */
  appendWire(batch: ScannedBatch, guard?: AppendGuard, firstSequence = -1): Promise<AppendResult> {
    if (this.st.state !== 'open') return Promise.reject(storageError(this.st.dir, 'log is closed'));
    if (this.st.failed) return Promise.reject(storageError(this.st.dir, 'log failed', this.st.failed));
    const n = batch.count;
    if (n === 0) return Promise.reject(invalidParam('records', 'must be a non-empty array'));
    const sizes = new Array<number>(n);
    let bytes = 0;
    const max = this.st.options.maxRecordBytes;
    const { body, starts, extensions } = batch;
    for (let i = 0; i < n; i++) {
      const size = storedSizeOfWire(body, starts[i], starts[i + 1], extensions, firstSequence >= 0);
      if (max !== undefined && size > max) return Promise.reject(new TributaryError('record_too_large', { size, max }));
      sizes[i] = size;
      bytes += size;
    }
    // A block is one whole append; maxRecordBytes still bounds each record at its per-record size above.
    const block =
      this.st.options.storedLayout === 'blocks' &&
      !batch.transactional &&
      batch.idempotent === firstSequence >= 0 &&
      blockSize(batch) <= (this.st.options.maxBlockBytes ?? MAX_APPEND_BLOCK_BYTES) &&
      wireBlockable(batch);
    if (block) bytes = blockSize(batch);
    if (bytes > MAX_BATCH_BYTES) return Promise.reject(new TributaryError('record_too_large', { size: bytes, max: MAX_BATCH_BYTES }));
    return new Promise<AppendResult>((resolve, reject) => {
      const p: PendingAppend = { records: NO_RECORDS, wire: batch, wireSequence: firstSequence, sizes, bytes, resolve, reject };
      if (block) p.block = true;
      if (block && inPlaceBlockable(batch)) p.inPlace = true;
      if (guard) p.guard = guard;
      this.pending.push(p);
      this.scheduleDrain();
    });
  }

  /**
   * See PartitionLog.appendReplica: checks the call and encodes the records with their own offsets, or
   * copies the bytes of appends in the stored layout (checked by StoredAppends.parse).
   */
  appendReplica(records: LogRecord[] | StoredAppends): Promise<AppendResult> {
    if (this.st.state !== 'open') return Promise.reject(storageError(this.st.dir, 'log is closed'));
    if (this.st.failed) return Promise.reject(storageError(this.st.dir, 'log failed', this.st.failed));
    if (records instanceof StoredAppends) {
      if (records.count === 0) return Promise.reject(invalidParam('records', 'must be a non-empty array'));
      const bytes = records.buf.length;
      return this.queueReplica(records.offsets[0], records.lastOffset, bytes, () => {
        // The tail cache keeps these bytes: unpooled memory, not the frame they came in (write-arena.ts).
        const buf = this.arena.take(bytes);
        records.buf.copy(buf);
        const { starts, offsets, lastOffset, maxTimestamp, untimed, count } = records;
        return { buf, starts, offsets, lastOffset, maxTimestamp, untimed, count };
      });
    }
    const checked = checkReplicaRecords(records);
    if (checked instanceof Error) return Promise.reject(checked);
    const { offsets, sizes, bytes } = checked;
    return this.queueReplica(offsets[0], offsets[offsets.length - 1], bytes, () => {
      // The tail cache keeps these bytes: unpooled memory, shared with neighbouring writes (write-arena.ts).
      const buf = this.arena.take(bytes);
      return encodeReplicaRecords(records, sizes, offsets, buf, this.st.dir);
    });
  }

  /** appendReplica's checks of the offsets against the log and of the size, then `encode` and the queue. */
  private queueReplica(first: number, last: number, bytes: number, encode: () => ReplicaWrite): Promise<AppendResult> {
    if (first < this.st.logEndOffset)
      return Promise.reject(invalidParam('records', `first offset ${first} is below the log end offset ${this.st.logEndOffset}`));
    if (last - first > MAX_RELATIVE_OFFSET) return Promise.reject(invalidParam('records', 'offsets span more than 2^32: split the call at an append boundary'));
    if (bytes > MAX_BATCH_BYTES) return Promise.reject(new TributaryError('record_too_large', { size: bytes, max: MAX_BATCH_BYTES }));
    let replica: ReplicaWrite;
    try {
      replica = encode();
    } catch (err) {
      return Promise.reject(err);
    }
    return new Promise<AppendResult>((resolve, reject) => {
      this.pending.push({ records: NO_RECORDS, replica, sizes: NO_SIZES, bytes, resolve, reject });
      this.scheduleDrain();
    });
  }

  /** Appends accepted and not yet written. */
  get queued(): number {
    return this.pending.length;
  }

  private scheduleDrain(): void {
    if (this.drainScheduled) return;
    this.drainScheduled = true;
    void this.mutex.run(this.drainTask);
  }

  private readonly drainTask = (): Promise<void> | undefined => {
    this.drainScheduled = false;
    return this.drain();
  };

  /**
   * Writes queued appends; must run inside the mutex. Yields to queued exclusive operations unless `force`.
   * Synchronous while its writes are (the active segment's file open, no roll due): a promise only once a
   * step has to wait, after which it goes on. Never rejects: a failure rejects the appends it concerns.
   */
  drain(force = false): Promise<void> | undefined {
    while (this.pending.length > 0) {
      if (this.exclusiveWaiting > 0 && !force) {
        this.scheduleDrain();
        return undefined;
      }
      if (this.st.failed || this.st.state === 'closed') {
        const err = this.st.failed ? storageError(this.st.dir, 'log failed', this.st.failed) : storageError(this.st.dir, 'log is closed');
        for (const p of this.pending.splice(0)) reject(p, err);
        return undefined;
      }
      const head = this.pending[0];
      const refused = head.guard?.refused();
      if (refused) {
        this.pending.shift();
        reject(head, refused);
        continue;
      }
      const waiting = this.writeNext();
      if (waiting !== undefined) return waiting.then(() => this.drain(force));
    }
    return undefined;
  }

  /** Writes the next group of queued appends, or begins what must come first; a promise when that waits. */
  private writeNext(): Promise<void> | undefined {
    let group: PendingAppend[] = [];
    try {
      if (this.st.dormant) return this.createFiles().then(undefined, (err: unknown) => this.failGroup([], err));
      const now = Date.now();
      const first = this.pending[0];
      if (first.replica) {
        // A replica append is a write of its own: it carries its offsets, checked against the log end it lands on.
        group = this.pending.splice(0, 1);
        const taken = group;
        return this.writeReplica(first, first.replica, now).then(undefined, (err: unknown) => this.failGroup(taken, err));
      }
      const { segmentBytes, segmentMs } = this.st.options;
      const seg = this.st.active;
      if (seg.size > 0 && (seg.size + first.bytes > segmentBytes || now - seg.createdMs >= segmentMs)) {
        return this.roll().then(undefined, (err: unknown) => this.failGroup([], err));
      }
      const { n, bytes, inPlace } = nextGroup(this.pending, seg.size, segmentBytes, MAX_GROUP_BYTES);
      group = this.pending.splice(0, n);
      const taken = group;
      const written = inPlace ? this.writeInPlace(seg, first, now) : this.writeGroup(seg, group, bytes, now);
      return written?.then(undefined, (err: unknown) => this.failGroup(taken, err));
    } catch (err) {
      this.failGroup(group, err);
      return undefined;
    }
  }

  private failGroup(group: PendingAppend[], err: unknown): void {
    // Nothing was taken yet (creating the files or rolling failed): fail the first append rather than retry forever.
    if (group.length === 0) group = this.pending.splice(0, 1);
    const e = err instanceof TributaryError ? err : storageError(this.st.dir, 'append failed', err);
    // Not a closing log's refusals: those are a shutdown's, not a fault's.
    if (e.code === 'storage_error' && this.st.state === 'open') this.st.reported('append', e);
    for (const p of group) reject(p, e);
  }

  /** Encodes and writes a group; a promise only when the write has to wait for the file to open. */
  private writeGroup(seg: Segment, group: PendingAppend[], bytes: number, now: number): Promise<void> | undefined {
    // The tail cache keeps these bytes: unpooled memory, shared with neighbouring writes (write-arena.ts).
    const buf = this.arena.take(bytes);
    // Where each unit (a record, or a block: block-records.ts) starts in `buf`, then the end: for the index
    // and the tail cache. With a block in the group, the first offset of each unit (else firstOffset + i).
    const recStarts: number[] = [];
    let unitOffsets: number[] | null = null;
    // The blocks among the units (unit index: their records' positions in `buf`, then the end), for the tail cache.
    let blocks: Map<number, number[]> | null = null;
    let headerless: Set<number> | null = null;
    const firstOffset = seg.nextOffset;
    let offset = firstOffset;
    let maxTs = seg.maxTimestamp;
    let p = 0;
    for (const b of group) {
      const base = offset;
      const wire = b.wire;
      if (wire && b.block) {
        if (unitOffsets === null) unitOffsets = recStarts.map((_, i) => firstOffset + i);
        unitOffsets.push(offset);
        recStarts.push(p);
        const end = writeBlockFromWire(wire, buf, p, { baseOffset: offset, now, flags: 0, firstSequence: b.wireSequence ?? -1 });
        if (end - p !== b.bytes) throw storageError(this.st.dir, 'block encoding size mismatch');
        // The records' positions in the block, then its end (without extensions each record grew by its tail).
        const at = p;
        (blocks ??= new Map()).set(
          recStarts.length - 1,
          wire.starts.map((_, i) => blockRecordStart(wire, at, i)),
        );
        if (!wire.extensions) (headerless ??= new Set()).add(recStarts.length - 1);
        // The block header's max timestamp (append-block.ts), as writeBlockFromWire stamped it.
        const blockTs = buf.readUInt32BE(p + 30) * 0x100000000 + buf.readUInt32BE(p + 34);
        if (blockTs > maxTs) maxTs = blockTs;
        p = end;
        offset += wire.count;
        b.result = { baseOffset: base, lastOffset: offset - 1, timestamp: now };
        continue;
      }
      if (wire) {
        const { body, starts, extensions, count } = wire;
        const sizes = b.sizes;
        const seq = b.wireSequence ?? -1;
        for (let i = 0; i < count; i++) {
          const end = writeStoredFromWire(body, starts[i], starts[i + 1], extensions, buf, p, offset, now, i === count - 1 ? ATTR_END_OF_APPEND : 0, seq < 0 ? -1 : seq + i);
          if (end - p !== sizes[i]) throw storageError(this.st.dir, 'record encoding size mismatch');
          if (unitOffsets !== null) unitOffsets.push(offset);
          recStarts.push(p);
          if (lastWireTimestamp > maxTs) maxTs = lastWireTimestamp;
          p = end;
          offset++;
        }
        b.result = { baseOffset: base, lastOffset: offset - 1, timestamp: now };
        continue;
      }
      const lastIdx = b.records.length - 1;
      for (let i = 0; i < b.records.length; i++) {
        const r = b.records[i];
        // 0 is "stamp on append", unless the timestamp is kept as given (a Kafka producer's CreateTime).
        const timestamp = r.keepTimestamp === true && r.timestamp !== undefined ? r.timestamp : r.timestamp || now;
        const attributes = ((r.attributes ?? 0) & USER_ATTR_MASK) | (i === lastIdx ? ATTR_END_OF_APPEND : 0);
        const end = encodeRecordInto(buf, p, {
          offset,
          timestamp,
          key: r.key,
          value: r.value,
          headers: r.headers,
          producerId: r.producerId,
          epoch: r.epoch,
          sequence: r.sequence,
          attributes,
        });
        if (end - p !== b.sizes[i]) throw storageError(this.st.dir, 'record encoding size mismatch');
        if (unitOffsets !== null) unitOffsets.push(offset);
        recStarts.push(p);
        const age = ageTimestamp(timestamp, now);
        if (age > maxTs) maxTs = age;
        p = end;
        offset++;
      }
      b.result = { baseOffset: base, lastOffset: offset - 1, timestamp: now };
    }
    recStarts.push(p);
    const startSize = seg.size;
    let wrote: boolean;
    try {
      wrote = seg.writeNow(buf, startSize);
    } catch (err) {
      return this.rollBack(seg, startSize, err);
    }
    const written = { seg, group, buf, bytes, startSize, firstOffset, nextOffset: offset, maxTs, recStarts, unitOffsets, blocks, headerless };
    if (!wrote) return this.writeAtEnd(seg, buf, startSize).then(() => this.groupWritten(written));
    this.groupWritten(written);
    return undefined;
  }

  /**
   * writeGroup of one block stamped in the frame's own buffer (append-block.ts stampBlockInPlace): its header
   * from the arena and its records written with one writev, and the frame's buffer is what the tail cache keeps.
   */
  private writeInPlace(seg: Segment, b: PendingAppend, now: number): Promise<void> | undefined {
    const wire = b.wire as ScannedBatch;
    const header = this.arena.take(BLOCK_HEADER_BYTES);
    const firstOffset = seg.nextOffset;
    const records = stampBlockInPlace(wire, header, 0, { baseOffset: firstOffset, now, flags: 0, firstSequence: b.wireSequence ?? -1 });
    if (BLOCK_HEADER_BYTES + records.length !== b.bytes) throw storageError(this.st.dir, 'block encoding size mismatch');
    const nextOffset = firstOffset + wire.count;
    b.result = { baseOffset: firstOffset, lastOffset: nextOffset - 1, timestamp: now };
    // The header's max timestamp (append-block.ts), as stampBlockInPlace stamped it.
    const maxTs = Math.max(seg.maxTimestamp, header.readUInt32BE(30) * 0x100000000 + header.readUInt32BE(34));
    const inPlace = { body: wire.body, starts: wire.starts, flags: header[9] };
    const pieces = [header, records];
    const written: GroupWrite = { seg, group: [b], buf: header, pieces, bytes: b.bytes, startSize: seg.size, firstOffset, nextOffset, maxTs, recStarts: [0, b.bytes], unitOffsets: [firstOffset], blocks: null, headerless: null, inPlace };
    let wrote: boolean;
    try {
      wrote = seg.writeNow(pieces, written.startSize);
    } catch (err) {
      return this.rollBack(seg, written.startSize, err);
    }
    if (!wrote) return this.writeAtEnd(seg, pieces, written.startSize).then(() => this.groupWritten(written));
    this.groupWritten(written);
    return undefined;
  }

  /** A group's bytes are in the file: publishes them (readers never see a partial record) and awaits durability. */
  private groupWritten(w: GroupWrite): void {
    const { seg, group, bytes, startSize, firstOffset, recStarts, unitOffsets } = w;
    // A block's index entry is its first offset: lookups of offsets inside it land on it (offset-index.ts).
    if (unitOffsets === null) for (let i = 0; i < recStarts.length - 1; i++) seg.index.onRecord(firstOffset + i, startSize + recStarts[i]);
    else for (let i = 0; i < recStarts.length - 1; i++) seg.index.onRecord(unitOffsets[i], startSize + recStarts[i]);
    seg.size = startSize + bytes;
    seg.nextOffset = w.nextOffset;
    seg.maxTimestamp = w.maxTs;
    seg.markModified();
    this.st.totalBytes += bytes;
    this.sync.markDirty(seg);
    if (w.inPlace) this.st.cache.append(w.inPlace.body, firstOffset, w.inPlace.starts, w.inPlace.flags, false, !this.sync.journaled);
    else if (unitOffsets === null) this.st.cache.append(w.buf, firstOffset, recStarts);
    else this.st.cache.appendUnits(w.buf, recStarts, unitOffsets, w.blocks ?? new Map(), w.headerless);
    const writtenAt = performance.now();
    for (const b of group) (b.result as AppendResult).writtenAt = writtenAt;
    if (this.st.options.flush === 'always') {
      this.sync.journalWrite(firstOffset, firstOffset, w.nextOffset - 1, w.nextOffset - firstOffset, w.pieces ?? [w.buf]);
      for (const b of group) this.sync.wait(b);
      this.sync.kick();
    } else {
      for (const b of group) b.resolve(b.result as AppendResult);
    }
  }

  /** Writes `buf` at `startSize`; a partial write is rolled back so the file never ends in bytes nobody acknowledged. */
  private async writeAtEnd(seg: Segment, buf: Buffer | readonly Buffer[], startSize: number): Promise<void> {
    try {
      await seg.writeAt(buf, startSize);
    } catch (err) {
      // Out of fds (a file the fd budget closed, under a low fd limit): the file did not open and nothing was
      // written. The append is refused, not the log: a truncation would need the fd it could not get. Nor was
      // anything written when its wait for a slot of the fd budget ended because the log closes.
      if (isFdExhaustion(err)) throw storageError(this.st.dir, 'out of file descriptors', err);
      if (err instanceof TributaryError) throw err;
      await this.rollBack(seg, startSize, err);
    }
  }

  /** After a failed write: cuts what it left, and rejects with the write's error. */
  private async rollBack(seg: Segment, startSize: number, err: unknown): Promise<never> {
    let cut = true;
    await seg.withHandle((fh) => fh.truncate(startSize)).catch((e: unknown) => {
      cut = false;
      this.st.fail(e);
    });
    throw writeFailed(this.st.dir, err, cut);
  }

  /** Writes one appendReplica call (inside the mutex): rolls as for append(), then writes it as encoded. */
  private async writeReplica(b: PendingAppend, rw: ReplicaWrite, now: number): Promise<void> {
    const { buf, starts, offsets, lastOffset: last } = rw;
    const first = offsets[0];
    const from = this.st.logEndOffset;
    // Appends queued before this one may have moved the log end since the call was accepted.
    if (first < this.st.logEndOffset) throw invalidParam('records', `first offset ${first} is below the log end offset ${this.st.logEndOffset}`);
    const { segmentBytes, segmentMs } = this.st.options;
    let seg = this.st.active;
    if (seg.size > 0 && (seg.size + b.bytes > segmentBytes || now - seg.createdMs >= segmentMs)) await this.roll();
    if (last - this.st.active.baseOffset > MAX_RELATIVE_OFFSET) await this.roll(first);
    seg = this.st.active;
    const startSize = seg.size;
    await this.writeAtEnd(seg, buf, startSize);
    // Gaps are fine for the index (greatest entry <= offset, then a scan) and for reads, which step over them.
    // A block's entry is its base offset, as for a block the leader wrote (offset-index.ts).
    for (let i = 0; i < offsets.length; i++) seg.index.onRecord(offsets[i], startSize + starts[i]);
    seg.size = startSize + b.bytes;
    seg.nextOffset = last + 1;
    const maxTs = rw.untimed ? Math.max(rw.maxTimestamp, now) : rw.maxTimestamp;
    if (maxTs > seg.maxTimestamp) seg.maxTimestamp = maxTs;
    seg.markModified();
    this.st.totalBytes += b.bytes;
    this.sync.markDirty(seg);
    // The tail cache holds consecutive offsets ending at the LEO: cache the last run without a gap (a gap before
    // it, from the LEO or inside the call, empties the cache first).
    cacheReplica(this.st.cache, rw);
    b.result = { baseOffset: first, lastOffset: last, timestamp: now, writtenAt: performance.now() };
    if (this.st.options.flush === 'always') {
      this.sync.journalWrite(from, first, last, rw.count, [buf]);
      this.sync.wait(b);
      this.sync.kick();
    } else {
      b.resolve(b.result);
    }
  }

  /**
   * The first append to a dormant log (log-state.ts) creates its directory and first segment, at 0 as an
   * empty log has it. Everything recovery would read in the directory is fresh before the segment exists:
   * a stale HWM checkpoint or clean-shutdown marker goes, and the owner's files (LogState.onCreate, the
   * partition's empty snapshots) are written. With a durable flush mode the new directory entries are
   * synced before the first append is written, so a crash finds the segment with that baseline.
   */
  private async createFiles(): Promise<void> {
    const { dir, options } = this.st;
    const durable = options.flush !== 'os';
    await makeDir(dir, durable);
    for (const f of [HWM_CHECKPOINT_FILE, CLEAN_SHUTDOWN_FILE]) await unlink(join(dir, f)).catch(() => {});
    await this.st.onCreate?.onFilesCreated();
    const seg = await Segment.create(dir, 0, options.indexIntervalBytes, Date.now(), this.st.fdPolicy);
    this.st.segments.push(seg);
    if (durable) await this.syncDirOrFail(seg);
  }

  /**
   * A failed directory fsync leaves the new segment's entry in doubt: the log takes no more appends. Out of
   * fds, the directory did not open and no fsync ran: the new segment (still empty) goes again, as if it had
   * not been created, and the append is refused; the next one creates it again.
   */
  private async syncDirOrFail(seg: Segment): Promise<void> {
    try {
      await fsyncDir(this.st.dir);
    } catch (err) {
      if (isFdExhaustion(err) && this.st.active === seg) {
        this.st.segments.pop();
        await seg.remove().catch((e: unknown) => this.st.fail(e));
        throw storageError(this.st.dir, 'out of file descriptors', err);
      }
      this.st.fail(err);
      throw storageError(this.st.dir, 'directory fsync failed', err);
    }
  }

  /**
   * Closes the active segment and starts a new one at the LEO, or at `base` when given and above it (replica
   * appends past what the index of the active segment can address). Runs inside the mutex.
   */
  async roll(base?: number): Promise<void> {
    const old = this.st.active;
    const durable = this.st.options.flush !== 'os';
    if (durable) {
      // Not beside a pass of the group commit: of two fsyncs of one file, only one may hear of a write-back
      // error, and the other's success would acknowledge appends whose pages were dropped. Nor after one that failed.
      await this.sync.idleUnfailed();
      // Synced here, so no later pass (flush=interval's timer may start one meanwhile) fsyncs it beside this.
      const dirty = this.sync.isDirty(old);
      this.sync.forget(old);
      try {
        await old.datasync();
      } catch (err) {
        // Out of fds (the fd budget closed the file, fsynced): the file did not open and no fsync ran. Nor
        // did one when the wait for a slot of the fd budget ended because the log closes (a TributaryError).
        if (isFdExhaustion(err) || err instanceof TributaryError) {
          if (dirty) this.sync.markDirty(old);
          throw err instanceof TributaryError ? err : storageError(this.st.dir, 'out of file descriptors', err);
        }
        this.st.failSync(err, old);
        throw storageError(this.st.dir, 'fsync failed', err);
      }
    }
    if (base !== undefined && base > old.nextOffset) {
      // The old segment is stretched over the gap and flagged like a compacted one (whose nextOffset may lie
      // past its last record, and which open() lets reach the next segment); the flag has to be on disk before
      // a segment starting at `base` exists, or a reopen would see a hole and drop it.
      const { nextOffset, compacted } = old;
      old.nextOffset = base;
      old.compacted = true;
      try {
        await old.writeIndex(durable);
      } catch (err) {
        old.nextOffset = nextOffset;
        old.compacted = compacted;
        throw storageError(this.st.dir, 'could not write segment index', err);
      }
    } else {
      try {
        await old.writeIndex(durable);
      } catch (err) {
        // Not fatal: recovery rebuilds a missing or stale index.
        this.st.logger.warn({ err, segment: old.baseOffset }, 'could not write segment index');
      }
    }
    const seg = await Segment.create(this.st.dir, old.nextOffset, this.st.options.indexIntervalBytes, Date.now(), this.st.fdPolicy);
    this.st.segments.push(seg);
    if (durable) await this.syncDirOrFail(seg);
    this.st.logger.debug({ segment: seg.baseOffset, previousBytes: old.size }, 'rolled segment');
    // Keep fds for the active and previous segment only.
    const older = this.st.segments[this.st.segments.length - 3];
    if (older) this.fds.releaseLater(older);
  }

  /** Runs `fn` alone in the mutex: queued appends wait for it (drain yields to it). */
  exclusive<T>(fn: () => Promise<T>): Promise<T> {
    this.exclusiveWaiting++;
    return this.mutex.run(async () => {
      this.exclusiveWaiting--;
      this.exclusiveActive = true;
      try {
        return await fn();
      } finally {
        this.exclusiveActive = false;
      }
    });
  }

  /** Runs `fn` inside the mutex, after the writes queued before it (close). */
  run<T>(fn: () => Promise<T>): Promise<T> {
    return this.mutex.run(fn);
  }

  /** Rejects every queued append (the log closed). */
  rejectQueued(): void {
    for (const p of this.pending.splice(0)) p.reject(storageError(this.st.dir, 'log is closed'));
  }
}

/** Fails an append; its guard hears of it first, before any later append is taken. */
function reject(p: PendingAppend, err: Error): void {
  p.guard?.failed();
  p.reject(err);
}

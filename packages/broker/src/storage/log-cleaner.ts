/**
 * The log cleaner of a partition log: retention (whole closed segments deleted by age and size) and
 * compaction (closed segments rewritten keeping the latest record per key, swapped in file by file so a crash
 * leaves the old or the new segment). Kept offsets do not change, so a compacted log may have gaps, which
 * every read path skips (docs/architecture.md, "Storage"). Append blocks are read record by record and their
 * kept records rewritten in the per-record layout, as any others ("Compaction").
 */
import { open, rename, unlink } from 'node:fs/promises';
import { invalidParam, TributaryError } from 'tributary-protocol/errors.js';
import { type LogRecord, RecordAttr } from 'tributary-protocol/record.js';
import type { GroupCommit } from './group-commit.js';
import { fsyncDir, storageError, writeFileSynced } from './log-fs.js';
import { type CompactOptions, type CompactResult, DEFAULT_TOMBSTONE_RETENTION_MS } from './log-options.js';
import type { LogState } from './log-state.js';
import { type CompactionCrashPoint, SimulatedCrash, takeCompactionCrash } from './log-test-hooks.js';
import type { LogWriter } from './log-writer.js';
import { Mutex } from './mutex.js';
import { OffsetIndex, serializeIndex } from './offset-index.js';
import { ageTimestamp, ATTR_END_OF_APPEND, encodedSize, encodeRecordInto, type EncodableRecord, USER_ATTR_MASK } from './record-codec.js';
import type { SegmentFds } from './segment-fds.js';
import { type RecordInfo, type ScanOutcome, Segment } from './segment.js';
import type { TombstoneHorizon } from './tombstone-horizon.js';

/** Suffix of a compacted segment's files before they are swapped in; open() removes leftovers (*.tmp). */
const COMPACT_TMP_SUFFIX = '.compact.tmp';
/** Kept records buffered before a write while rewriting a segment. */
const COMPACT_WRITE_BYTES = 4 * 1024 * 1024;

/** A segment rewritten to temp files, ready to be swapped in. */
interface PreparedCompaction {
  old: Segment;
  version: number;
  tmpLog: string;
  tmpIndex: string;
  index: OffsetIndex;
  size: number;
  maxTimestamp: number;
  removed: number;
}

/** Whether the log's topic limits its records by age or size at all. */
function hasRetention(st: LogState): boolean {
  return st.retention.retentionMs >= 0 || st.retention.retentionBytes >= 0;
}

/** Whether a retention pass rolls the active segment now (it is older than segmentMs and not empty). */
function rollDue(st: LogState, now: number): boolean {
  return st.active.size > 0 && now - st.active.createdMs >= st.options.segmentMs;
}

/**
 * How many of the oldest closed segments are past the age or size limit, and the log's bytes without them.
 * Only segments wholly below the high-water mark go (as in Kafka): a leader's records its followers have
 * not confirmed are not deleted, and the log start never passes the HWM (it raised the HWM, which then
 * answered acks=all for records no follower had).
 */
function pastRetention(st: LogState, now: number, bound = Number.POSITIVE_INFINITY): { count: number; keptBytes: number } {
  const { retentionMs, retentionBytes } = st.retention;
  let total = st.totalBytes;
  let n = 0;
  const end = Math.min(st.hwm, bound);
  for (let i = 0; i < st.segments.length - 1; i++) {
    const s = st.segments[i];
    if (s.nextOffset > end) break;
    const expired = retentionMs >= 0 && s.maxTimestamp < now - retentionMs;
    const oversized = retentionBytes >= 0 && total > retentionBytes;
    if (!expired && !oversized) break;
    total -= s.size;
    n++;
  }
  return { count: n, keptBytes: total };
}

/**
 * Whether a retention pass would change the open log `st` now, decided from its state alone: a log with
 * nothing to do is passed over without making its writer and cleaner (docs/architecture.md, "What an idle
 * partition keeps").
 */
export function retentionDue(st: LogState, now: number): boolean {
  if (!hasRetention(st) || st.dormant) return false;
  return rollDue(st, now) || pastRetention(st, now).count > 0;
}

/** The log closed, was truncated or lost a segment while compacting: give up quietly, the next run retries. */
class CompactionAborted extends Error {}

export class LogCleaner {
  private readonly compactMutex = new Mutex();
  private compactions = 0;
  /** LogState.truncations as the running compaction began (runs are one at a time: compactMutex). */
  private planned = 0;

  constructor(
    private readonly st: LogState,
    private readonly writer: LogWriter,
    private readonly sync: GroupCommit,
    private readonly fds: SegmentFds,
    private readonly horizon: TombstoneHorizon,
    /** The PartitionLog, as armCompactionCrash knows it. */
    private readonly owner: object,
  ) {}

  /** See PartitionLog.applyRetention. */
  async applyRetention(now: number, bound = Number.POSITIVE_INFINITY): Promise<{ deletedSegments: number; deletedBytes: number }> {
    if (!hasRetention(this.st)) return { deletedSegments: 0, deletedBytes: 0 };
    if (this.st.state !== 'open') throw storageError(this.st.dir, 'log is closed');
    return this.writer.exclusive(async () => {
      if (this.st.state === 'closed') throw storageError(this.st.dir, 'log is closed');
      if (this.st.failed) throw storageError(this.st.dir, 'log failed', this.st.failed);
      if (this.st.dormant) return { deletedSegments: 0, deletedBytes: 0 };
      // A roll waits for appends waiting on the journal: not for one that waits for space (which this may free).
      if (rollDue(this.st, now) && !this.sync.waitsForSpace) {
        try {
          await this.writer.roll();
        } catch (err) {
          // A full disk fails the roll; deleting what is past retention needs no space and may free it.
          if (this.st.failed) throw err;
          this.st.logger.warn({ err }, 'could not roll the active segment before retention; deleting the closed segments past it');
        }
      }
      const { count: n, keptBytes: total } = pastRetention(this.st, now, bound);
      if (n === 0) return { deletedSegments: 0, deletedBytes: 0 };
      // No fsync may be in flight on a segment being deleted (appends waiting for the journal are in the active one).
      await this.sync.segmentsIdle();
      const doomed = this.st.segments.splice(0, n);
      const deletedBytes = this.st.totalBytes - total;
      this.st.totalBytes = total;
      this.st.madeCache?.dropBefore(this.st.logStartOffset);
      for (const s of doomed) {
        this.sync.forget(s);
        this.fds.forget(s);
        await s.remove();
      }
      this.st.logger.info({ deletedSegments: n, deletedBytes, logStartOffset: this.st.logStartOffset }, 'retention deleted segments');
      return { deletedSegments: n, deletedBytes };
    });
  }

  /** See PartitionLog.compact. */
  compact(opts: CompactOptions = {}): Promise<CompactResult> {
    const tombstoneMs = opts.tombstoneRetentionMs ?? DEFAULT_TOMBSTONE_RETENTION_MS;
    if (!Number.isSafeInteger(tombstoneMs) || tombstoneMs < 0) return Promise.reject(invalidParam('tombstoneRetentionMs', 'must be a non-negative integer'));
    if (opts.now !== undefined && !Number.isSafeInteger(opts.now)) return Promise.reject(invalidParam('now', 'must be a safe integer'));
    if (this.st.state !== 'open') return Promise.reject(storageError(this.st.dir, 'log is closed'));
    const crashAt = takeCompactionCrash(this.owner);
    this.compactions++;
    const nullOnly = opts.nullTombstonesOnly === true;
    const isTombstone = (rec: LogRecord) => rec.value.length === 0 && (!nullOnly || (rec.attributes & RecordAttr.NULL_VALUE) !== 0);
    return this.compactMutex.run(() => this.runCompaction(opts.now ?? Date.now(), tombstoneMs, isTombstone, crashAt)).finally(() => this.compactions--);
  }

  private async runCompaction(now: number, tombstoneMs: number, isTombstone: (rec: LogRecord) => boolean, crashAt: CompactionCrashPoint | undefined): Promise<CompactResult> {
    const none: CompactResult = { segmentsCompacted: 0, recordsRemoved: 0, bytesBefore: 0, bytesAfter: 0 };
    if (this.st.state !== 'open' || this.st.dormant) return none;
    if (this.st.failed) throw storageError(this.st.dir, 'log failed', this.st.failed);
    // Only closed segments are compacted: an old active segment is rolled first, as retention does.
    if (rollDue(this.st, now) && !this.sync.waitsForSpace) {
      await this.writer.exclusive(async () => {
        if (this.st.state === 'open' && !this.st.failed && !this.st.dormant && rollDue(this.st, now)) await this.writer.roll();
      });
    }
    if (this.st.state !== 'open' || this.st.segments.length < 2) return none;
    // Taken before any segment list or size: a truncation under way may have cut them already, or cut
    // what they describe before it ends (scanForCompaction takes a bad record past such a size for a race).
    const truncations = this.st.truncations;
    this.planned = truncations;
    const closed = this.st.segments.slice(0, -1).map((seg) => ({ seg, version: seg.version }));
    const active = this.st.active;
    const activeEnd = active.size;
    // Kafka's first uncleanable offset: a record at or past the HWM is not acknowledged (its fsync or its
    // replication may still fail, a truncation may take it), so it neither drops an older record of its key
    // nor is dropped itself.
    const cleanableEnd = Math.min(this.st.hwm, this.st.logEndOffset);
    const prepared: PreparedCompaction[] = [];
    try {
      // Pass 1: the newest offset of every key. Records appended later only make us keep more.
      const latest = new Map<string, number>();
      const noteKeys = (r: RecordInfo, rec: LogRecord) => {
        if (r.offset >= cleanableEnd) return false;
        if (rec.key) latest.set(rec.key.toString('latin1'), r.offset);
        return true;
      };
      for (const { seg } of closed) await this.scanForCompaction(seg, 0, seg.size, noteKeys);
      await this.scanForCompaction(active, 0, activeEnd, noteKeys);

      const keep = (r: RecordInfo, rec: LogRecord): boolean => {
        // The record just below the cleanable end stays: dropped, it would leave the log ending in a gap,
        // and a follower fetching from inside that gap gets no record that takes its log end to the leader's.
        if (!rec.key || r.offset >= cleanableEnd - 1) return true;
        if (latest.get(rec.key.toString('latin1')) !== r.offset) return false;
        return !isTombstone(rec) || now - rec.timestamp <= tombstoneMs;
      };
      // Pass 2: rewrite each closed segment that loses records.
      let horizon = 0;
      for (const { seg, version } of closed) {
        let removed = 0;
        await this.scanForCompaction(seg, 0, seg.size, (r, rec) => {
          if (keep(r, rec)) return true;
          removed++;
          // The latest record of its key, so an expired tombstone: a replica that never read it would keep
          // the key's older value. Superseded records take nothing with them (the key's later one stays).
          if (isTombstone(rec) && latest.get(rec.key!.toString('latin1')) === r.offset) horizon = Math.max(horizon, r.offset + 1);
          return true;
        });
        if (removed === 0) continue;
        const p = await this.writeCompacted(seg, version, keep, now);
        prepared.push({ ...p, removed });
        if (this.st.state !== 'open') throw new CompactionAborted();
      }
      if (prepared.length === 0) return none;
      // On disk before a segment without the tombstones is swapped in, and read by replica fetches after
      // their records (docs/architecture.md, "Compaction"): no follower gets a record past a dropped
      // tombstone without hearing of it. A swap that does not happen leaves it higher than needed, which
      // only makes a lagging replica rebuild.
      if (horizon > 0) await this.horizon.raise(horizon);
      if (crashAt === 'temp-written') throw new SimulatedCrash(crashAt);
      return await this.writer.exclusive(() => this.swapCompacted(prepared, truncations, crashAt));
    } catch (err) {
      // The test hook leaves the files exactly as a dead process would.
      if (err instanceof SimulatedCrash) throw err;
      for (const p of prepared) await this.removeTemp(p);
      if (err instanceof CompactionAborted || this.st.state !== 'open') return none;
      throw err instanceof TributaryError ? err : storageError(this.st.dir, 'compaction failed', err);
    } finally {
      for (const { seg } of closed) this.fds.releaseIfIdle(seg);
    }
  }

  /** scanRecords over a segment that compaction reads; a segment removed or cut meanwhile aborts the compaction. */
  private async scanForCompaction(seg: Segment, from: number, end: number, onRecord: (r: RecordInfo, rec: LogRecord) => boolean): Promise<number> {
    const version = seg.version;
    // A truncation under way may have cut the file without its version and size changed yet; `end` may be a
    // size taken when the compaction began (the active segment's), before a truncation since then.
    const raced = () => seg.deleted || seg.version !== version || this.st.state !== 'open' || this.st.truncatedSince(this.planned);
    let out: ScanOutcome;
    try {
      // Stops early once the log starts closing, so close() does not wait for a whole pass.
      out = await seg.scanRecords(from, end, (r, rec) => this.st.state === 'open' && onRecord(r, rec));
    } catch (err) {
      if (raced()) throw new CompactionAborted();
      throw err;
    }
    if (this.st.state !== 'open') throw new CompactionAborted();
    if (out.failure !== null) {
      if (raced()) throw new CompactionAborted();
      throw storageError(this.st.dir, `corrupt record in segment ${seg.baseOffset} at position ${out.position}`);
    }
    return out.position;
  }

  /** Writes the kept records of `seg` (and their index) to temp files, fsynced. */
  private async writeCompacted(seg: Segment, version: number, keep: (r: RecordInfo, rec: LogRecord) => boolean, now: number): Promise<PreparedCompaction> {
    const tmpLog = seg.logPath + COMPACT_TMP_SUFFIX;
    const tmpIndex = seg.indexPath + COMPACT_TMP_SUFFIX;
    const index = new OffsetIndex(seg.baseOffset, this.st.options.indexIntervalBytes);
    let size = 0;
    let maxTs = -1;
    const fh = await open(tmpLog, 'w');
    const result: PreparedCompaction = { old: seg, version, tmpLog, tmpIndex, index, size: 0, maxTimestamp: -1, removed: 0 };
    try {
      let pos = 0;
      const end = seg.size;
      while (pos < end) {
        const bufs: Buffer[] = [];
        let pending = 0;
        // Stops before the unit that would overflow the buffer; the next round starts there. Not inside an
        // append block: the round would start at the block again and write its first records twice.
        let unit = -1;
        pos = await this.scanForCompaction(seg, pos, end, (r, rec) => {
          if (pending >= COMPACT_WRITE_BYTES && r.position !== unit) return false;
          unit = r.position;
          if (!keep(r, rec)) return true;
          const enc: EncodableRecord = {
            offset: r.offset,
            timestamp: rec.timestamp,
            key: rec.key,
            value: rec.value,
            headers: rec.headers,
            producerId: rec.producerId,
            epoch: rec.epoch,
            sequence: rec.sequence,
            // Every kept record is a complete append of its own.
            attributes: (rec.attributes & USER_ATTR_MASK) | ATTR_END_OF_APPEND,
          };
          const b = Buffer.allocUnsafe(encodedSize(enc));
          encodeRecordInto(b, 0, enc);
          index.onRecord(r.offset, size + pending);
          // A record without a timestamp was appended no later than now, nor than the old segment's age
          // (which may come from a dropped record stamped in the future).
          const age = ageTimestamp(rec.timestamp, Math.min(seg.maxTimestamp, now));
          if (age > maxTs) maxTs = age;
          bufs.push(b);
          pending += b.length;
          return true;
        });
        if (pending > 0) {
          const data = Buffer.concat(bufs, pending);
          let done = 0;
          while (done < data.length) {
            const { bytesWritten } = await fh.write(data, done, data.length - done, size + done);
            if (bytesWritten <= 0) throw new Error('short write');
            done += bytesWritten;
          }
          size += pending;
        }
        if (this.st.state !== 'open') throw new CompactionAborted();
      }
      await fh.sync();
    } catch (err) {
      await fh.close().catch(() => {});
      await this.removeTemp(result);
      throw err;
    }
    await fh.close();
    result.size = size;
    result.maxTimestamp = maxTs;
    const meta = {
      baseOffset: seg.baseOffset,
      nextOffset: seg.nextOffset,
      maxTimestamp: maxTs,
      logSize: size,
      createdMs: Math.floor(seg.createdMs),
      synced: true,
      compacted: true,
    };
    try {
      await writeFileSynced(tmpIndex, serializeIndex(meta, index));
    } catch (err) {
      await this.removeTemp(result);
      throw err;
    }
    return result;
  }

  /** Swaps prepared segments in; runs in the exclusive section. */
  private async swapCompacted(prepared: PreparedCompaction[], truncations: number, crashAt: CompactionCrashPoint | undefined): Promise<CompactResult> {
    const res: CompactResult = { segmentsCompacted: 0, recordsRemoved: 0, bytesBefore: 0, bytesAfter: 0 };
    if (this.st.state !== 'open' || this.st.failed || this.st.truncations !== truncations) throw new CompactionAborted();
    // No fsync may be in flight on a segment being replaced; nor wait for a journal that waits for space.
    if (this.sync.waitsForSpace) throw new CompactionAborted();
    await this.sync.idle();
    // The pass waited for may have failed the log: its pages, and whatever pass 1 read, are in doubt.
    if (this.st.failed) throw new CompactionAborted();
    try {
      for (let k = 0; k < prepared.length; k++) {
        const p = prepared[k];
        const old = p.old;
        const i = this.st.segments.indexOf(old);
        if (i < 0 || i === this.st.segments.length - 1 || old.deleted || old.version !== p.version) {
          await this.removeTemp(p);
          continue;
        }
        // Index first: with the old log it is rebuilt yet still says 'compacted'; the range is the same.
        await rename(p.tmpIndex, old.indexPath);
        old.indexState = 'stale';
        await fsyncDir(this.st.dir);
        if (crashAt === 'index-renamed') throw new SimulatedCrash(crashAt);
        // Until `old` is retired, readers still find it in the list and read it by its (old) index. Its fd
        // stays open on the old file meanwhile: a reader reopening the path after the rename would read the
        // compacted file at the old positions, and return nothing, garbage or skip records.
        await old.holdOpen(async () => {
          await rename(p.tmpLog, old.logPath);
          await fsyncDir(this.st.dir);
          if (crashAt === 'log-renamed') throw new SimulatedCrash(crashAt);
          const seg = new Segment(
            this.st.dir,
            old.baseOffset,
            p.index,
            {
              size: p.size,
              nextOffset: old.nextOffset,
              maxTimestamp: p.maxTimestamp,
              createdMs: old.createdMs,
            },
            this.st.fdPolicy,
          );
          seg.compacted = true;
          seg.indexState = 'synced';
          this.st.segments[i] = seg;
          this.sync.forget(old);
          this.fds.forget(old);
          // Readers still on `old` fail their next read and retry in `seg` (Segment.superseded).
          await old.retire();
        });
        res.segmentsCompacted++;
        res.recordsRemoved += p.removed;
        res.bytesBefore += old.size;
        res.bytesAfter += p.size;
        if (p.size === 0) await this.dropEmptied(this.st.segments[i]!, crashAt);
      }
    } finally {
      this.st.totalBytes = this.st.segments.reduce((a, s) => a + s.size, 0);
      // Cached records below the active segment may be ones compaction removed.
      this.st.madeCache?.dropBefore(this.st.active.baseOffset);
    }
    if (res.segmentsCompacted > 0) {
      this.st.logger.debug({ ...res, logStartOffset: this.st.logStartOffset }, 'compacted segments');
    }
    return res;
  }

  /**
   * A closed segment compaction emptied (every key it held was written again later) goes, or a compacted
   * topic would keep one more file per segmentMs for ever: the segment before it is stretched over its
   * offsets first, on disk (compacted, so open() lets it reach the next segment), then the empty files are
   * removed, the log before the index. A crash in between leaves an empty segment inside its predecessor's
   * range, which open() removes. The first segment stays: the log start offset does not move.
   */
  private async dropEmptied(seg: Segment, crashAt: CompactionCrashPoint | undefined): Promise<void> {
    const i = this.st.segments.indexOf(seg);
    if (i < 1 || i === this.st.segments.length - 1 || seg.size !== 0) return;
    const prev = this.st.segments[i - 1]!;
    const { nextOffset, compacted } = prev;
    prev.nextOffset = seg.nextOffset;
    prev.compacted = true;
    try {
      await prev.writeIndex(this.st.options.flush !== 'os');
      await fsyncDir(this.st.dir);
    } catch (err) {
      // The empty segment stays (as it would have before): nothing is lost, only a file is not reclaimed.
      prev.nextOffset = nextOffset;
      prev.compacted = compacted;
      prev.markModified();
      this.st.logger.warn({ err, segment: seg.baseOffset }, 'could not stretch the segment before an emptied one; keeping it');
      return;
    }
    if (crashAt === 'emptied-stretched') throw new SimulatedCrash(crashAt);
    this.st.segments.splice(i, 1);
    this.sync.forget(seg);
    this.fds.forget(seg);
    await seg.remove();
  }

  private async removeTemp(p: { tmpLog: string; tmpIndex: string }): Promise<void> {
    await unlink(p.tmpLog).catch(() => {});
    await unlink(p.tmpIndex).catch(() => {});
  }

  /** A compact() call is queued or running. */
  get compacting(): boolean {
    return this.compactions > 0;
  }

  /** Resolves once the compactions queued so far are done (a running one gives up at its next record once the log is closing). */
  idle(): Promise<void> {
    return this.compactMutex.run(async () => {});
  }
}

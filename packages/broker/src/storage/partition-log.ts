/**
 * The log of one partition: an ordered list of segments, the last one active. Appends are queued and
 * written by a single writer (several queued batches coalesce into one write call); durability follows
 * the flush mode, with group commit for 'always'. The last record of every append carries
 * ATTR_END_OF_APPEND, so recovery (which validates the tail of the log on open) keeps whole appends only.
 * Compaction rewrites closed segments keeping the latest record per key; kept offsets do not change,
 * so the log may have gaps, which every read path skips.
 *
 * PartitionLog is the facade over its parts (docs/architecture.md, "Storage"): log-loader.ts (recovery),
 * log-writer.ts (the write queue and segment rolls), group-commit.ts (fsync), log-reader.ts and
 * tail-cache.ts (reads), segment-fds.ts (the fd LRU), log-cleaner.ts (retention and compaction) and
 * hwm-checkpoint.ts, all over the shared LogState. It keeps the HWM, truncation and the lifecycle (the close
 * in log-shutdown.ts). Its test hooks (a simulated crash, compaction crash points) are in log-test-hooks.ts,
 * out of this API.
 */
import { rm } from 'node:fs/promises';
import { type Logger, pino } from 'pino';
import type { ScannedBatch } from 'tributary-protocol/batch.js';
import { invalidParam } from 'tributary-protocol/errors.js';
import type { LogRecord, RecordInput } from 'tributary-protocol/record.js';
import { GroupCommit } from './group-commit.js';
import { replayJournal } from './journal-replay.js';
import { LogTicker } from './log-ticker.js';
import { HwmCheckpoint } from './hwm-checkpoint.js';
import { LogCleaner, retentionDue } from './log-cleaner.js';
import { makeDir, renameAway, storageError } from './log-fs.js';
import { loadLog } from './log-loader.js';
import {
  type AppendGuard,
  type AppendResult,
  type CompactOptions,
  type CompactResult,
  type LogOptions,
  type ReadOptions,
  resolveOptions,
  type SegmentInfo,
  segmentFdPolicy,
} from './log-options.js';
import type { SegmentFdPolicy } from './fd-budget.js';
import { LogReader, type WireReply } from './log-reader.js';
import { type FilesCreatedListener, LogState } from './log-state.js';
import { registerCrash } from './log-test-hooks.js';
import { shutdownLog } from './log-shutdown.js';
import { truncateSegments } from './log-truncate.js';
import { LogWriter } from './log-writer.js';
import type { Segment } from './segment.js';
import { SegmentFds } from './segment-fds.js';
import type { StoredRead, StoredReadOptions } from './replica-read.js';
import type { StoredAppends } from './stored-appends.js';
import { TombstoneHorizon } from './tombstone-horizon.js';
import type { WireReadRequest } from './tail-cache.js';

export { HWM_CHECKPOINT_FILE } from './hwm-checkpoint.js';
export { CLEAN_SHUTDOWN_FILE } from './log-loader.js';
export { TOMBSTONE_HORIZON_FILE } from './tombstone-horizon.js';
export {
  type AppendGuard,
  type AppendResult,
  type CompactOptions,
  type CompactResult,
  DEFAULT_LOG_OPTIONS,
  DEFAULT_TOMBSTONE_RETENTION_MS,
  type FlushMode,
  type LogOptions,
  type ReadOptions,
  type SegmentInfo,
} from './log-options.js';
export { wholeAppendCount } from './log-reader.js';
export { SimulatedCrash } from './log-test-hooks.js';
export type { WireReadRequest } from './tail-cache.js';

let silent: Logger | null = null;
/** One shared no-op logger, so logs opened without one do not each create a stdout destination. */
function silentLogger(): Logger {
  silent ??= pino({ level: 'silent' });
  return silent;
}

export class PartitionLog {
  readonly dir: string;
  readonly options: Readonly<LogOptions>;
  private readonly st: LogState;
  private readonly checkpoint: HwmCheckpoint;
  private readonly horizon: TombstoneHorizon;
  private closePromise: Promise<void> | null = null;
  /** See onLogStartMoved. */
  private startMoved: ((logStartOffset: number) => void) | null = null;
  private readonly ticker: LogTicker;
  // The parts below are made on first use (the getters after the constructor): a broker with 10,000
  // partitions keeps most of them idle, and their retained heap lengthens every garbage collection
  // (bench/README.md, "scale").
  private syncPart: GroupCommit | null = null;
  private fdsPart: SegmentFds | null = null;
  private writerPart: LogWriter | null = null;
  private readerPart: LogReader | null = null;
  private cleanerPart: LogCleaner | null = null;

  static {
    registerCrash(
      (log) => log instanceof PartitionLog,
      (log) => {
        const pl = log as PartitionLog;
        pl.closePromise ??= pl.shutdown(false);
        return pl.closePromise;
      },
    );
  }

  private constructor(dir: string, opts: Readonly<LogOptions>, logger: Logger, segments: Segment[], fds: SegmentFdPolicy | undefined, horizon: number) {
    this.dir = dir;
    this.horizon = new TombstoneHorizon(dir, horizon);
    this.options = opts;
    this.st = new LogState(dir, this.options, logger, segments, fds);
    this.ticker = opts.ticker ?? new LogTicker(opts.flushIntervalMs);
    this.checkpoint = new HwmCheckpoint(this.st);
    if (fds) fds.log = this;
  }

  private get sync(): GroupCommit {
    // flush=interval, or journaled: each write asks the flush timer for the fsync of its segment.
    const timed = this.options.flush === 'interval' || (this.options.journal !== undefined && this.options.flush === 'always');
    this.syncPart ??= new GroupCommit(this.st, timed ? () => this.ticker.want(this) : null, this.options.journal ?? null);
    return this.syncPart;
  }

  private get fds(): SegmentFds {
    this.fdsPart ??= new SegmentFds(this.st);
    return this.fdsPart;
  }

  private get writer(): LogWriter {
    this.writerPart ??= new LogWriter(this.st, this.sync, this.fds);
    return this.writerPart;
  }

  private get reader(): LogReader {
    this.readerPart ??= new LogReader(this.st, this.fds);
    return this.readerPart;
  }

  private get cleaner(): LogCleaner {
    this.cleanerPart ??= new LogCleaner(this.st, this.writer, this.sync, this.fds, this.horizon, this);
    return this.cleanerPart;
  }

  /**
   * Opens (creating if needed) the log in `dir` and runs recovery. `lazy`: a log with no segment files
   * stays without them (dormant) until its first append; a broker keeps files only for the partitions it
   * hosts (docs/architecture.md, "Hosted partitions").
   */
  static async open(dir: string, opts: Partial<LogOptions> = {}, logger?: Logger, how: { lazy?: boolean } = {}): Promise<PartitionLog> {
    const o = resolveOptions(opts);
    const log = (logger ?? silentLogger()).child({ component: 'partition-log', dir });
    const fds = segmentFdPolicy(o);
    const { segments, clean, checkpointedHwm, tombstoneHorizon } = await loadLog(dir, o, log, how, fds);
    const pl = new PartitionLog(dir, o, log, segments, fds, tombstoneHorizon);
    pl.st.hwm = pl.st.clampHwm(checkpointedHwm);
    pl.checkpoint.checkpointed = pl.st.hwm;
    // After a clean close every segment was fsynced: its entries, all older, have nothing to add.
    const entries = o.journal?.takeRecovered(dir);
    if (entries !== undefined && !clean) {
      await replayJournal(pl, entries, () => pl.st.segments).catch(async (err: unknown) => {
        await pl.shutdown(false).catch(() => {});
        throw err;
      });
    }
    log.debug({ logStartOffset: pl.logStartOffset, logEndOffset: pl.logEndOffset, segments: segments.length, clean }, 'partition log opened');
    return pl;
  }

  get logStartOffset(): number {
    return this.st.logStartOffset;
  }

  get logEndOffset(): number {
    return this.st.logEndOffset;
  }

  get highWatermark(): number {
    return this.st.hwm;
  }

  /**
   * `listener.onFilesCreated` runs whenever the log's files are created (the first append of a dormant
   * log), before its first segment and before that append is written: the owner's files beside the
   * segments (a Partition's empty snapshots) are then part of the baseline a crash recovers from. Synced
   * with the segment's directory entry; an error fails that append and leaves the log dormant.
   */
  onFilesCreated(listener: FilesCreatedListener): void {
    this.st.onCreate = listener;
  }

  /**
   * Where readers parked at the end of what they may read will start (the partition's LSO): the tail cache
   * keeps everything from there on, whatever its readers' lag (tail-cache.ts). Without it, the HWM.
   */
  set readFloor(floor: () => number) {
    this.st.readFloor = floor;
  }

  /** A reader is at `offset` though it read nothing now (a Kafka Fetch whose response was full): see TailReaders. */
  noteRead(offset: number): void {
    this.st.madeCache?.noteRead(offset, this.st.logEndOffset);
  }

  /** `listener` hears the new log start after retention deleted segments (a replica trims its leader epochs, cluster/replica-types.ts). */
  onLogStartMoved(listener: ((logStartOffset: number) => void) | null): void {
    this.startMoved = listener;
  }

  /** No files on disk: never written, or released (see open). Reads as an empty log at 0. */
  get dormant(): boolean {
    return this.st.dormant;
  }

  get sizeBytes(): number {
    return this.st.totalBytes;
  }

  /**
   * 1 + the highest offset of a tombstone compaction dropped from this log, or from a log this one copied
   * (0: none). A replica whose log ends at or below it may still hold a value that tombstone deleted
   * (docs/architecture.md, "Compaction"). Monotonic, and on disk before any segment without the tombstone.
   */
  get tombstoneHorizon(): number {
    return this.horizon.value;
  }

  /**
   * A follower takes its leader's horizon (never lowering its own) before it stores records the leader
   * compacted: this log then holds what the leader's dropped tombstones leave, and if it leads later its
   * followers must hear of them. Resolves once the horizon is on disk.
   */
  raiseTombstoneHorizon(h: number): Promise<void> {
    if (!Number.isSafeInteger(h) || h < 0) return Promise.reject(invalidParam('tombstoneHorizon', 'must be a non-negative safe integer'));
    if (this.st.state !== 'open') return Promise.reject(storageError(this.dir, 'log is closed'));
    // A dormant log (a replica being added) has no directory yet.
    return this.horizon.raise(h, () => (this.st.dormant ? makeDir(this.dir, this.options.flush !== 'os') : Promise.resolve()));
  }

  /** Monotonic; clamped to the LEO. Checkpointed on the flush timer (see checkpointHwmOnTimer) and on close. */
  setHighWatermark(o: number): void {
    if (!Number.isSafeInteger(o)) throw invalidParam('highWatermark', 'must be a safe integer');
    const v = this.st.clampHwm(o);
    if (v > this.st.hwm) {
      this.st.hwm = v;
      this.wantCheckpoint();
    }
  }

  /** The HWM checkpoint is behind: the next tick writes it (unless checkpointHwmOnTimer is false). */
  private wantCheckpoint(): void {
    if (this.options.checkpointHwmOnTimer !== false && this.st.state === 'open' && this.st.hwm !== this.checkpoint.checkpointed) this.ticker.want(this);
  }

  /** Appends are refused for good (a failed fsync or write-back) until the log is opened again. */
  get failed(): boolean {
    return this.st.failed !== null;
  }

  /** The log's logger (its directory bound in): for the states kept beside it (partition-snapshots.ts). */
  get logger(): Logger {
    return this.st.logger;
  }

  segmentInfos(): SegmentInfo[] {
    return this.st.segments.map((s) => ({
      baseOffset: s.baseOffset,
      nextOffset: s.nextOffset,
      sizeBytes: s.size,
      maxTimestamp: s.maxTimestamp,
      createdMs: s.createdMs,
      compacted: s.compacted,
    }));
  }

  // ---------------------------------------------------------------- append (log-writer.ts)

  /** Appends records; `guard` (idempotent producers) is asked again when the append is written. */
  append(records: RecordInput[], guard?: AppendGuard): Promise<AppendResult> {
    return this.writer.append(records, guard);
  }

  /**
   * Appends the records of a produce batch validated by scanBatch (with `request`: header keys valid UTF-8), as append() would
   * append the records produceBatch makes of it (producer id, epoch, sequence and attributes reset), but
   * encoded straight from the wire bytes. `body` must not change until the append settles. With
   * `firstSequence` (an idempotent batch, validated by the caller: one producer id and epoch) the records
   * keep their producer id and epoch and are numbered from it, as append() of the decoded records would.
   */
  appendWire(batch: ScannedBatch, guard?: AppendGuard, firstSequence = -1): Promise<AppendResult> {
    return this.writer.appendWire(batch, guard, firstSequence);
  }

  /**
   * Appends records read from another log (a partition leader's, read with keepAppendMarker), stored exactly
   * as given: offset, timestamp (never re-stamped, 0 included), key, value, headers, producer id, epoch,
   * sequence and attributes, ATTR_END_OF_APPEND included, so this log keeps the leader's append boundaries
   * (producer-state replay and recovery see the same appends as on the leader). Offsets must increase, the
   * first must be >= logEndOffset; gaps are allowed (a compacted leader), but only after a record that ends
   * an append, as the leader has them. Afterwards logEndOffset is the last offset + 1. Durability follows the
   * flush mode, as for append(). Refused with invalid_parameter, appending nothing, when any of this fails.
   *
   * Atomicity: the last record must end an append (ATTR_END_OF_APPEND). A fetch cut inside a leader append is
   * refused rather than stored: marking its last record would give the follower a boundary the leader does not
   * have (an idempotent batch replayed as two after a failover), and storing it unmarked would let a crash cut
   * records the caller was told are durable. Callers append the `wholeAppendCount` prefix, and the leader can
   * serve whole appends (read option wholeAppends). The call is one write of whole leader appends, so recovery
   * after a crash keeps a prefix of them, never part of one, like a write of several coalesced append() calls;
   * once the call has resolved with flush=always, a crash keeps all of it.
   *
   * maxRecordBytes is not applied: the leader accepted the records already.
   *
   * `records` may also be the leader's appends as bytes (StoredAppends, from readStoredAppends on the
   * leader): checked as above without an object per record or header, and written as they are, so this log
   * then holds the leader's bytes exactly.
   */
  appendReplica(records: LogRecord[] | StoredAppends): Promise<AppendResult> {
    return this.writer.appendReplica(records);
  }

  // ---------------------------------------------------------------- durability (group-commit.ts, hwm-checkpoint.ts)

  /** The flush timer (LogTicker): the fsync of flush=interval and the HWM checkpoint this log asked for. */
  onTick(): void {
    if (this.st.state !== 'open' || this.st.dormant) return;
    // An exclusive section (truncation, compaction swap, release) may be moving the files beside: next tick.
    if (this.writerPart?.exclusiveActive) {
      this.ticker.want(this);
      return;
    }
    if ((this.options.flush === 'interval' || this.sync.journaled) && this.sync.dirtyCount > 0) this.sync.syncSegments();
    if (this.options.checkpointHwmOnTimer === false) return;
    this.checkpoint.write().then(
      () => this.wantCheckpoint(),
      (err: unknown) => {
        this.st.logger.warn({ err }, 'could not write HWM checkpoint');
        this.wantCheckpoint();
      },
    );
  }

  /** The fd budget asks for an fsync now (fd-budget.ts requestSync): journaled, segments wait for the timer. */
  requestSegmentSync(): void {
    if (this.st.state === 'open') this.sync.syncSegments();
  }

  /** fsyncs every dirty segment and writes the HWM checkpoint. */
  async flush(): Promise<void> {
    if (this.st.state === 'closed') throw storageError(this.dir, 'log is closed');
    await this.writer.exclusive(async () => {
      if (this.st.state === 'closed') throw storageError(this.dir, 'log is closed');
      this.sync.syncSegments();
      await this.sync.idle();
      if (this.st.failed) throw storageError(this.dir, 'log failed', this.st.failed);
      if (this.st.dormant) return;
      // Closed segments rolled without fsync ('os' mode) are synced now, so their index can say so.
      for (let i = 0; i < this.st.segments.length - 1; i++) {
        const s = this.st.segments[i];
        if (s.indexState !== 'synced') await s.writeIndex(true);
      }
      await this.checkpoint.write();
    });
  }

  // ---------------------------------------------------------------- read (log-reader.ts, tail-cache.ts)

  /**
   * Records from `offset` on, up to maxRecords / maxBytes (encoded size) and below maxOffset, but at least
   * one when one exists. Returned buffers are shared (tail cache): treat them as read-only.
   */
  read(offset: number, opts: ReadOptions): Promise<LogRecord[]> {
    return this.reader.read(offset, opts);
  }

  /**
   * A CONSUME reply batch of the records read() would return (minus control records when
   * `w.skipControl`), written from the tail cache without materialising records; with extensions, the
   * trailer carries this log's high watermark and start offset. Null when the read is not served from the
   * tail cache or returns nothing: the caller then takes read() + encodeBatch.
   */
  readWire(offset: number, opts: ReadOptions, w: WireReadRequest): WireReply | null {
    return this.reader.readWire(offset, opts, w);
  }

  /**
   * readWire from the segment files, for a read the tail cache does not hold: no object per record or
   * header. Null when read() must answer instead (see LogReader.readWireFromDisk).
   */
  readWireFromDisk(offset: number, opts: ReadOptions, w: WireReadRequest): Promise<WireReply | null> {
    return this.reader.readWireFromDisk(offset, opts, w);
  }

  /**
   * The records read(offset, { ...opts, keepAppendMarker: true, wholeAppends: true }) returns, as their
   * stored bytes: what a leader answers a follower's fetch with (replica-read.ts).
   */
  readStoredAppends(offset: number, opts: StoredReadOptions): Promise<StoredRead> {
    return this.reader.readStoredAppends(offset, opts);
  }

  // ---------------------------------------------------------------- queries and maintenance (log-reader.ts, log-cleaner.ts)

  /** First offset whose timestamp is >= ts, or the LEO. */
  offsetForTimestamp(ts: number): Promise<number> {
    return this.reader.offsetForTimestamp(ts);
  }

  /** The time and size retention in effect (the options' at open, unless setRetention changed them). */
  get retention(): Readonly<{ retentionMs: number; retentionBytes: number }> {
    return this.st.retention;
  }

  /** New time and size retention (a topic's, altered), in effect from the next retention pass; -1 = unlimited. */
  setRetention(r: { retentionMs: number; retentionBytes: number }): void {
    for (const [k, v] of Object.entries(r)) if (!Number.isSafeInteger(v) || v < -1) throw invalidParam(k, 'must be an integer of -1 or more');
    this.st.retention = { retentionMs: r.retentionMs, retentionBytes: r.retentionBytes };
  }

  /** Whether applyRetention would change this open log now (decided from its state alone). */
  retentionDue(now: number): boolean {
    return this.st.state === 'open' && !this.st.failed && retentionDue(this.st, now);
  }

  /**
   * Deletes whole closed segments by time and size retention, none reaching past `bound` (offsets the
   * partition's snapshots do not cover yet). Never deletes the active segment.
   */
  applyRetention(now: number = Date.now(), bound = Number.POSITIVE_INFINITY): Promise<{ deletedSegments: number; deletedBytes: number }> {
    // The retention timer asks every partition: an idle one with nothing to delete stays without its parts.
    if (this.cleanerPart === null && this.st.state === 'open' && !this.st.failed && !retentionDue(this.st, now)) {
      return Promise.resolve({ deletedSegments: 0, deletedBytes: 0 });
    }
    return this.applyDueRetention(now, bound);
  }

  /** applyRetention once its caller found retentionDue(now) (a Partition, before writing its snapshots). */
  applyDueRetention(now: number, bound: number): Promise<{ deletedSegments: number; deletedBytes: number }> {
    return this.cleaner.applyRetention(now, bound).then((r) => {
      // Retention may have raised the HWM to the new log start.
      this.wantCheckpoint();
      if (r.deletedSegments > 0) this.startMoved?.(this.st.logStartOffset);
      return r;
    });
  }

  /**
   * Rewrites the closed segments keeping, per key, only the record with the highest offset in the whole
   * log (active segment included); null keys are kept, and a tombstone (an empty value; with
   * `nullTombstonesOnly` a null one only) is kept until it is older than `tombstoneRetentionMs`. Kept records keep their offsets and each becomes a complete append.
   * Each segment is written to a temp file, fsynced and renamed over the old one (index first), so a crash
   * leaves the old or the new segment. Reads and appends continue meanwhile; only the swap is exclusive.
   * Calls run one at a time.
   */
  compact(opts: CompactOptions = {}): Promise<CompactResult> {
    // A dormant log has nothing to compact (the retention timer asks every partition of a compacted topic).
    if (this.cleanerPart === null && this.st.state === 'open' && this.st.dormant) {
      return Promise.resolve({ segmentsCompacted: 0, recordsRemoved: 0, bytesBefore: 0, bytesAfter: 0 });
    }
    return this.cleaner.compact(opts);
  }

  /**
   * Drops every record >= offset. Below the log start, the log becomes empty starting at `offset`. Refused
   * (the retriable storage_error, nothing changed) when a file it needs cannot be opened (log-truncate.ts).
   */
  async truncateTo(offset: number): Promise<void> {
    if (!Number.isSafeInteger(offset) || offset < 0) throw invalidParam('offset', 'must be a non-negative safe integer');
    if (this.st.state !== 'open') throw storageError(this.dir, 'log is closed');
    await this.writer.exclusive(async () => {
      if (this.st.state === 'closed') throw storageError(this.dir, 'log is closed');
      if (offset >= this.st.logEndOffset) return;
      await this.sync.idle();
      // Journaled, before the files change: a replay after a crash must not bring the cut records back.
      await this.sync.journalTruncate(offset);
      const before = this.st.logEndOffset;
      try {
        await truncateSegments(this.st, this.sync, this.fds, offset);
      } finally {
        this.st.totalBytes = this.st.segments.reduce((a, s) => a + s.size, 0);
      }
      // The cut and what it kept are on disk now: no replay needs the entries before it (nor re-applies it).
      await this.sync.journalReset();
      this.fds.prune();
      this.st.madeCache?.truncateFrom(offset);
      this.st.madeCache?.dropBefore(this.st.logStartOffset);
      this.st.hwm = this.st.clampHwm(this.st.hwm);
      // A checkpoint above the new end would, after a crash, let the HWM cover the records appended in place
      // of the cut ones (a follower appending its new leader's records before they are committed).
      if (this.checkpoint.checkpointed > this.st.hwm) {
        try {
          await this.checkpoint.write();
        } catch (err) {
          throw storageError(this.dir, 'could not write HWM checkpoint', err);
        }
      }
      this.st.logger.info({ from: before, to: offset }, 'log truncated');
    });
  }

  // ---------------------------------------------------------------- lifecycle

  /** Flushes, writes indexes, the HWM checkpoint and the clean-shutdown marker, and closes fds. */
  close(): Promise<void> {
    this.closePromise ??= this.shutdown(true);
    return this.closePromise;
  }

  /**
   * Drops every record and the directory with whatever else is in it (this broker stopped being a
   * replica), in one step a crash cannot split: the directory is renamed away and the rename synced
   * before anything in it is deleted (log-fs.ts renameAway; the loader removes a leftover and never
   * adopts it). The log becomes dormant, an empty log at 0 that an append brings back. Refused with
   * storage_error, changing nothing, while appends are queued (they were accepted for this log:
   * Partition.release lets them land first). A compaction under way is waited for first.
   */
  async release(): Promise<void> {
    if (this.st.state !== 'open') throw storageError(this.dir, 'log is closed');
    if (this.cleanerPart?.compacting) await this.cleanerPart.idle();
    await this.writer.exclusive(async () => {
      if (this.st.state === 'closed') throw storageError(this.dir, 'log is closed');
      if (this.writer.queued > 0) throw storageError(this.dir, 'not released: appends are queued');
      await this.sync.idle();
      // A raise landing after the rename would bring the directory back around its file.
      await this.horizon.idle();
      while (this.checkpoint.inFlight) await this.checkpoint.inFlight;
      // Journaled, before the files go: a replay after a crash must not bring the released records back.
      await this.sync.journalReset();
      let doomed: string | null;
      try {
        doomed = await renameAway(this.dir);
      } catch (err) {
        // Journaled, the reset is on disk: appends after it would replay above a log end that lacks them.
        if (this.sync.journaled) this.st.fail(err);
        throw storageError(this.dir, 'could not release the log directory', err);
      }
      // The files are gone (durably, as far as the flush mode syncs anything): the log is empty at 0.
      // Nothing below throws, so the log is never left half released.
      // By two: an odd count says a truncation is under way (LogState.truncatedSince), which this is not now.
      this.st.truncations += 2;
      const segments = this.st.segments.splice(0);
      this.sync.forgetAll();
      for (const s of segments) {
        this.fds.forget(s);
        // Marked deleted, so a read under way retries and finds the empty log.
        await s.discard().catch((err: unknown) => this.st.logger.warn({ err, segment: s.baseOffset }, 'could not close a released segment'));
      }
      this.st.totalBytes = 0;
      this.st.hwm = 0;
      this.st.madeCache?.truncateFrom(0);
      this.checkpoint.checkpointed = -1;
      this.horizon.reset();
      // What failed was the files, and they are gone.
      this.st.endFailure();
      if (doomed) await rm(doomed, { recursive: true, force: true }).catch((err: unknown) => this.st.logger.warn({ err }, 'could not remove a released log directory; its next open will'));
      this.st.logger.info({ segments: segments.length }, 'log released');
    });
  }

  /** Closes and removes the directory. */
  async destroy(): Promise<void> {
    this.closePromise ??= this.shutdown(false);
    await this.closePromise.catch(() => {});
    await this.syncPart?.journalReset();
    this.st.endFailure();
    // Retried: a file written into the directory meanwhile (a replica's leader epoch checkpoint, flushed as
    // its role changes) fails the last rmdir with ENOTEMPTY.
    await rm(this.dir, { recursive: true, force: true, maxRetries: 5, retryDelay: 20 });
  }

  private shutdown(clean: boolean): Promise<void> {
    if (this.st.state !== 'open') return Promise.resolve();
    return shutdownLog({ st: this.st, dir: this.dir, forgetTicks: () => this.ticker.forget(this), cleaner: this.cleanerPart, horizon: this.horizon, writer: this.writer, sync: this.sync, checkpoint: this.checkpoint }, clean);
  }
}

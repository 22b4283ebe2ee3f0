/**
 * The state a partition derives from its log (idempotent producer state, the transaction index), rebuilt
 * at open from a snapshot file plus a scan of the log after it, and snapshotted again so the next rebuild
 * scans little (docs/architecture.md, "Idempotent producers", "Transactions on the log").
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { readSmallFile, writeFileAtomic } from '../storage/atomic-file.js';
import { LogTicker, type Tickable } from '../storage/log-ticker.js';
import type { PartitionLog } from '../storage/partition-log.js';
import { type ProducerSnapshot, ProducerStateReplay, ProducerStateTable } from './producer-state.js';
import { TxnIndex, type TxnSnapshot } from './txn-index.js';
import { SETTLED } from '../common/settled.js';

/** Idempotent producer state of a partition, as of an offset (see loadProducerState). */
export const PRODUCER_SNAPSHOT_FILE = 'producer.snapshot';
/** How often a changed state is written to its snapshot (bounds the replay after a crash). */
export const SNAPSHOT_INTERVAL_MS = 10_000;
/** Producers idle this long are forgotten (their next batch must start a new epoch or sequence 0). */
export const PRODUCER_ID_EXPIRATION_MS = 7 * 24 * 60 * 60 * 1000;

/** Open transactions and aborted ranges of a partition, as of an offset (see loadTxnIndex). */
export const TXN_SNAPSHOT_FILE = 'txn.snapshot';

/** A rebuilt state, the log end it covers, and whether it must be snapshotted at once (it was scanned or had no snapshot). */
export interface Rebuilt<T> {
  state: T;
  end: number;
  /** Where the scan started (the snapshot's offset, or the start the scan fell back to). */
  from: number;
  fresh: boolean;
}

/** A snapshot file written atomically (tmp + fsync + rename), one write at a time. */
export class SnapshotFile {
  private writing: Promise<void> = SETTLED;

  /**
   * The directory and the file name, joined when written: a path joined up front is a tree of string
   * pieces that two files per partition kept alive on a broker with thousands of idle partitions.
   */
  constructor(
    private readonly dir: string,
    private readonly name: string,
  ) {}

  get path(): string {
    return join(this.dir, this.name);
  }

  /** Writes `data` after the writes before it; `done` runs once it is on disk (`syncDir`: its name too). */
  write(data: string, done: () => void, syncDir = false): Promise<void> {
    const run = async () => {
      await writeFileAtomic(this.path, data, { syncDir });
      done();
    };
    const p = this.writing.then(run, run);
    this.writing = p.catch(() => {});
    return p;
  }

  /** Settles once every write begun so far has (never rejects). */
  get settled(): Promise<void> {
    return this.writing;
  }
}

/** What PartitionSnapshots reads of its partition (a Partition: no closures per partition). */
export interface SnapshotOwner {
  /** The idempotent producer state, undefined while it is being rebuilt. */
  producerState(): ProducerStateTable | undefined;
  /** The transaction index, undefined while it is being rebuilt. */
  txnIndex(): TxnIndex | undefined;
  readonly isClosed: boolean;
}

/**
 * Rebuild: the snapshot (state as of an offset), then every append after it up to the current log end.
 * A log with segments but no usable snapshot (missing, empty, not JSON, not a snapshot, unreadable) is
 * replayed from its start, with a warning naming the file: every log this broker creates gets a snapshot
 * before its first append (onFilesCreated), so that is damage, and the producers whose last batches lie
 * in older segments would otherwise be forgotten (a resend of an acknowledged batch answered
 * out_of_order_sequence instead of as a duplicate, which the SDK renumbers and writes a second time).
 */
export async function loadProducerState(log: PartitionLog): Promise<Rebuilt<ProducerStateTable>> {
  const path = join(log.dir, PRODUCER_SNAPSHOT_FILE);
  let table = new ProducerStateTable();
  let from: number;
  let loaded = false;
  let pastEnd = false;
  try {
    const snap = parseJson(await readSmallFile(path, 'utf8')) as ProducerSnapshot;
    table = ProducerStateTable.fromSnapshot(snap);
    from = snap.offset;
    loaded = true;
    // The log ends before the snapshot (a torn tail cut by recovery, a follower's truncation): the state
    // is what the log left says, so it is replayed from its start. The snapshot's window may lie wholly
    // past the cut while the producer's earlier batches are still in the log: keeping only what the
    // snapshot holds below the cut left it expecting sequence 0. Kept from the snapshot: the batches below
    // the log start (retention took their records) and every epoch, which the replay's older batches do
    // not lower (a fence or a bump whose marker or records the cut took). A producer left with no batch
    // at epoch 0 is unknown (docs/architecture.md, "Idempotent producers").
    if (from > log.logEndOffset) {
      table.dropBatchesFrom(log.logStartOffset);
      from = log.logStartOffset;
      pastEnd = true;
      loaded = false;
    } else {
      // The snapshot is taken at the HWM but holds every batch appended by then, above it too; those
      // may have been truncated since (a follower cutting a dead leader's tail). The scan from the
      // snapshot's offset below puts back the ones the log still has.
      table.dropBatchesFrom(from);
    }
  } catch (err) {
    table = new ProducerStateTable();
    from = log.logStartOffset;
    damaged(log, path, err, 'producer state');
  }
  from = Math.max(from, log.logStartOffset);
  const end = log.logEndOffset;
  const replay = new ProducerStateReplay(table);
  let offset = Math.min(from, end);
  const scanned = offset < end;
  while (offset < end) {
    // Retention may have removed the segment being scanned: what it held is gone from the log anyway.
    if (offset < log.logStartOffset) offset = log.logStartOffset;
    const recs = await log.read(offset, { maxRecords: 10_000, maxBytes: 8 * 1024 * 1024, maxOffset: end, keepAppendMarker: true });
    if (recs.length === 0) break;
    for (const r of recs) replay.record(r);
    offset = recs[recs.length - 1]!.offset + 1;
  }
  if (pastEnd) table.forgetUnknown();
  table.expire(Date.now(), PRODUCER_ID_EXPIRATION_MS);
  return { state: table, end, from, fresh: scanned || !loaded };
}

/** JSON.parse, with an empty file said as such (a torn or truncated copy). */
function parseJson(text: string): unknown {
  if (text.trim() === '') throw new Error(`empty (${text.length} bytes)`);
  return JSON.parse(text);
}

/**
 * A snapshot that could not be used for a log that has segments: logged, naming the file and why (the
 * caller replays the whole log). A dormant log has no files, and no snapshot is then expected.
 */
function damaged(log: PartitionLog, file: string, err: unknown, what: string): void {
  if (log.dormant) return;
  const missing = (err as NodeJS.ErrnoException | null)?.code === 'ENOENT';
  // Missing beside a log that holds nothing: nothing was lost (a log emptied, or made before its first append).
  if (missing && log.logEndOffset <= log.logStartOffset) return;
  log.logger.warn(
    { file, reason: missing ? 'missing' : err instanceof Error ? err.message : String(err), from: log.logStartOffset, to: log.logEndOffset },
    `${what} snapshot ${missing ? 'missing' : 'unusable'}; rebuilding it from the whole log`,
  );
}

/**
 * Synchronously, at open: an offset below which no transaction is open, from the snapshot (its offset
 * and open transactions). A dormant log (no files): Infinity, it has no transactions (a log created by
 * its first append gets an empty snapshot before that append, onFilesCreated). A log with segments and
 * no usable snapshot (missing, unreadable, not a snapshot): the log start, so read_committed waits for the
 * rebuild, which scans the whole log.
 */
export function readTxnFloor(log: PartitionLog): number {
  let raw: string;
  try {
    raw = readFileSync(join(log.dir, TXN_SNAPSHOT_FILE), 'utf8');
  } catch (err) {
    if ((err as NodeJS.ErrnoException)?.code === 'ENOENT' && log.dormant) return Infinity;
    return log.logStartOffset;
  }
  try {
    const snap = JSON.parse(raw) as TxnSnapshot;
    // Past the log end (recovery cut a torn tail, a truncation): a commit or abort marker it counted may be
    // gone, its transaction open again from below the end, and loadTxnIndex scans from the start for it.
    if (!(snap.offset <= log.logEndOffset)) return log.logStartOffset;
    let floor = Number.isSafeInteger(snap.offset) ? snap.offset : log.logStartOffset;
    if (Array.isArray(snap.open)) for (const o of snap.open) if (Number.isSafeInteger(o?.firstOffset) && o.firstOffset < floor) floor = o.firstOffset;
    return Math.min(floor, log.logEndOffset);
  } catch {
    return log.logStartOffset;
  }
}

/**
 * Rebuild the transaction index: the snapshot (state as of an offset), then every record after it up to
 * the log end. A log with segments but no usable snapshot (missing, empty, not JSON, not a snapshot,
 * unreadable) is scanned from its start, with a warning naming the file: scanning only its last segment
 * missed aborts in older ones, and read_committed readers got the aborted records. A snapshot past the
 * log end (a torn tail cut, a truncation) is scanned from the start too.
 */
export async function loadTxnIndex(log: PartitionLog): Promise<Rebuilt<TxnIndex>> {
  const path = join(log.dir, TXN_SNAPSHOT_FILE);
  let index = new TxnIndex();
  let from = log.logStartOffset;
  let loaded = false;
  try {
    const snap = parseJson(await readSmallFile(path, 'utf8')) as TxnSnapshot;
    const read = TxnIndex.fromSnapshot(snap);
    if (snap.offset <= log.logEndOffset) {
      index = read;
      from = snap.offset;
      loaded = true;
    }
  } catch (err) {
    damaged(log, path, err, 'transaction index');
  }
  from = Math.max(from, log.logStartOffset);
  const end = log.logEndOffset;
  let offset = Math.min(from, end);
  const scanned = offset < end;
  while (offset < end) {
    if (offset < log.logStartOffset) offset = log.logStartOffset;
    if (offset >= end) break;
    const recs = await log.read(offset, { maxRecords: 10_000, maxBytes: 8 * 1024 * 1024, maxOffset: end });
    if (recs.length === 0) break;
    for (const r of recs) index.replay(r);
    offset = recs[recs.length - 1]!.offset + 1;
  }
  index.prune(log.logStartOffset);
  return { state: index, end, from, fresh: scanned || !loaded };
}

/**
 * A partition's two snapshot files: each state is rebuilt at open (and after a truncation), snapshotted
 * right away when the rebuild scanned the log or had no snapshot, then on a timer whenever it changed.
 * The checks run on the tick after a load and then on the tick after each changed(), until stop(); the
 * ticker does not keep the process alive. An idle partition is not checked: with 10,000 partitions,
 * checking all of them every period held the event loop for 15-24 ms.
 */
export class PartitionSnapshots implements Tickable {
  /** Which states are loaded and checked on the timer (until stop()). */
  private checkProducers = false;
  private checkTxns = false;
  private producerVersion = -1;
  private txnVersion = -1;
  /** The offset of the last transaction snapshot written (the rebuild scan after a crash starts there). */
  private txnOffset = -1;
  /** The offset of the last producer snapshot written (or found at load), -1 before any. */
  private producerOffset = -1;
  /** The two files, made on first write (an idle partition of a big broker writes neither). */
  private producerPart: SnapshotFile | null = null;
  private txnPart: SnapshotFile | null = null;

  constructor(
    private readonly log: PartitionLog,
    /** The partition: its current states (null while rebuilding) and whether it is closed. */
    private readonly owner: SnapshotOwner,
    /** The timer of the snapshot checks, shared by every partition of a broker (period SNAPSHOT_INTERVAL_MS). */
    private readonly ticker: LogTicker = new LogTicker(SNAPSHOT_INTERVAL_MS),
  ) {}

  private get producerFile(): SnapshotFile {
    this.producerPart ??= new SnapshotFile(this.log.dir, PRODUCER_SNAPSHOT_FILE);
    return this.producerPart;
  }

  private get txnFile(): SnapshotFile {
    this.txnPart ??= new SnapshotFile(this.log.dir, TXN_SNAPSHOT_FILE);
    return this.txnPart;
  }

  async loadProducers(): Promise<ProducerStateTable> {
    const { state: table, end, from, fresh } = await loadProducerState(this.log);
    if (!this.owner.isClosed) {
      if (fresh) await this.writeProducers(table, end).catch((err: unknown) => this.writeFailed(PRODUCER_SNAPSHOT_FILE, err));
      else {
        this.producerVersion = table.version;
        this.producerOffset = from;
      }
      this.checkProducers = true;
      this.ticker.want(this);
    }
    return table;
  }

  async loadTxns(): Promise<TxnIndex> {
    const { state: index, end, from, fresh } = await loadTxnIndex(this.log);
    if (!this.owner.isClosed) {
      // As of the high-water mark, as on the timer: writing it pruned the transactions closed below its
      // offset, and a truncation may still cut down to the HWM (a marker above it, unacknowledged, going
      // with the cut must leave its transaction open).
      if (fresh) await this.writeTxns(index, Math.min(end, this.log.highWatermark)).catch((err: unknown) => this.writeFailed(TXN_SNAPSHOT_FILE, err));
      else {
        this.txnVersion = index.version;
        this.txnOffset = from;
      }
      this.checkTxns = true;
      this.ticker.want(this);
    }
    return index;
  }

  /**
   * A snapshot after a rebuild could not be written (a full disk): the state is whole in memory and the
   * timer writes it again; until then a crash only costs a longer rebuild. Failing the load instead left
   * the partition without idempotent or transactional appends until a restart.
   */
  private writeFailed(file: string, err: unknown): void {
    this.log.logger.warn({ err, file }, 'could not write a snapshot after the rebuild; the timer tries again');
  }

  /** The timer: writes each checked state that changed since its last snapshot. */
  onTick(): void {
    const producers = this.checkProducers ? this.owner.producerState() : undefined;
    if (producers && producers.version !== this.producerVersion) {
      producers.expire(Date.now(), PRODUCER_ID_EXPIRATION_MS);
      void this.writeProducers(producers, this.log.highWatermark).catch(() => {});
    }
    const txns = this.checkTxns ? this.owner.txnIndex() : undefined;
    // Also when only the HWM moved: the snapshot's offset bounds the scan after a crash.
    if (txns && (txns.version !== this.txnVersion || this.log.highWatermark !== this.txnOffset)) {
      txns.prune(this.log.logStartOffset);
      void this.writeTxns(txns, this.log.highWatermark).catch(() => {});
    }
  }

  /**
   * Writes both states as of `offset`, their names fsynced (retention, partition-retention.ts); false,
   * writing nothing, while either is being rebuilt. Rejects when a write fails.
   */
  async writeBoth(offset: number): Promise<boolean> {
    const producers = this.checkProducers ? this.owner.producerState() : undefined;
    const txns = this.checkTxns ? this.owner.txnIndex() : undefined;
    if (!producers || !txns) return false;
    producers.expire(Date.now(), PRODUCER_ID_EXPIRATION_MS);
    await this.writeProducers(producers, offset, true);
    txns.prune(this.log.logStartOffset);
    await this.writeTxns(txns, offset, true);
    return true;
  }

  /**
   * The offset up to which both snapshots on disk cover the states, given the HWM `hwm`: a rebuild from
   * them after a crash misses nothing below it. -1 while either state is being rebuilt or before any
   * snapshot of it was written.
   */
  coveredUpTo(hwm: number): number {
    const producers = this.checkProducers ? this.owner.producerState() : undefined;
    const txns = this.checkTxns ? this.owner.txnIndex() : undefined;
    if (!producers || !txns) return -1;
    // A state unchanged since its last snapshot is that snapshot as of any offset: nothing of it was appended since.
    const producersCovered = producers.version === this.producerVersion ? hwm : this.producerOffset;
    const txnsCovered = txns.version === this.txnVersion ? hwm : this.txnOffset;
    return Math.min(hwm, producersCovered, txnsCovered);
  }

  /** Writes the producer state snapshot; writes are serialized. */
  writeProducers(table: ProducerStateTable, offset: number, syncDir = false): Promise<void> {
    const version = table.version;
    // A dormant log has no records and no directory: nothing to keep (docs/architecture.md, "Hosted partitions").
    if (this.log.dormant) {
      this.producerVersion = version;
      this.producerOffset = offset;
      return Promise.resolve();
    }
    return this.producerFile.write(
      JSON.stringify(table.snapshot(offset)),
      () => {
        this.producerVersion = version;
        this.producerOffset = offset;
      },
      syncDir,
    );
  }

  /** Writes the transaction snapshot (writes are serialized); resolves with the offset it is as of. */
  writeTxns(index: TxnIndex, offset: number, syncDir = false): Promise<number> {
    const version = index.version;
    if (this.log.dormant) {
      this.txnVersion = version;
      this.txnOffset = offset;
      return Promise.resolve(offset);
    }
    const snap = index.snapshot(offset);
    // Below the snapshot's own offset, which an append not landed yet may have lowered below `offset`: a
    // transaction closed at or past it is still open as of it, and the rebuild after a crash replays its
    // marker from there (pruned, its abort would be in neither the snapshot nor the replay).
    index.pruneClosed(snap.offset);
    return this.txnFile
      .write(
        JSON.stringify(snap),
        () => {
          this.txnVersion = version;
          this.txnOffset = snap.offset;
        },
        syncDir,
      )
      .then(() => snap.offset);
  }

  /**
   * A dormant log's files are being created (PartitionLog.onFilesCreated): both snapshots, empty as of 0,
   * are written before its first append, so recovery after a crash at any point afterwards finds a
   * baseline (read_committed waits for the rebuild, readTxnFloor) and rebuilds from the whole log beyond
   * it, not from its last segment as without a snapshot. The versions stay: the states are written again
   * on the timer once they changed.
   */
  async onFilesCreated(): Promise<void> {
    await Promise.all([
      this.producerFile.write(JSON.stringify(new ProducerStateTable().snapshot(0)), () => {
        this.producerOffset = Math.max(this.producerOffset, 0);
      }),
      this.txnFile.write(JSON.stringify(new TxnIndex().snapshot(0)), () => {
        this.txnOffset = Math.max(this.txnOffset, 0);
      }),
    ]);
  }

  /**
   * The partition's states or its HWM may have moved (Partition.notify): both checks run on the next
   * tick, at most SNAPSHOT_INTERVAL_MS away.
   */
  changed(): void {
    if (this.checkProducers || this.checkTxns) this.ticker.want(this);
  }

  /** Stops the checks (a truncation reloads both states; close writes them once more). */
  stop(): void {
    this.checkProducers = false;
    this.checkTxns = false;
    this.ticker.forget(this);
  }

  /** Settles once every snapshot write begun so far has. */
  async settled(): Promise<void> {
    await Promise.all([this.producerPart?.settled, this.txnPart?.settled]);
  }
}

/**
 * The broker's journal (docs/architecture.md, "The journal"): under flush=always, every log writes what it
 * appends to its segment also here, and an append is acknowledged once the journal's write covers it: one
 * O_DSYNC write (journal-files.ts) per round for every partition, where without the journal each partition
 * fsyncs its own segment file, and a write and an fdatasync are two thread-pool round trips where this is
 * one. Segments are fsynced later, about once a flush interval (a checkpoint: PartitionLog.onTick), and a
 * journal file is deleted once every log with entries in it has fsynced its segments since.
 *
 * Recovery (journal-replay.ts): open() reads every file; each log, as it opens, appends what its segments
 * lack of its entries, in order, truncations and resets included; endRecovery() then starts a new file and
 * deletes the old ones.
 */
import { closeSync, readdirSync, unlinkSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { join, relative } from 'node:path';
import type { Logger } from 'pino';
import { RateLimitedLog } from '../common/rate-limited-log.js';
import { fsyncDir, makeDir, storageError } from './log-fs.js';
import { COMPACT_TMP_SUFFIX, compactJournalFile } from './journal-compact.js';
import { createGrowing, JOURNAL_SUFFIX, type JournalFile, journalFileName, writeDurably } from './journal-files.js';
import { decodeEntries, encodeReset, encodeTruncate, encodeWrite, type JournalEntry, type JournalKey, journalKey } from './journal-format.js';

export const JOURNAL_DIR = 'journal';
/** The files open() reads (anything else in the directory is left alone, but a compaction's copy a crash left). */
const JOURNAL_FILE = new RegExp(`^\\d{16}\\${JOURNAL_SUFFIX}$`);
const COMPACT_TMP_FILE = new RegExp(`^\\d{16}\\${JOURNAL_SUFFIX}\\${COMPACT_TMP_SUFFIX}$`);
/** After a compaction failed (a full disk), the next waits this long. */
const COMPACT_RETRY_MS = 10_000;
/** Default size of a journal file: a pass that would go past it starts the next one. */
export const DEFAULT_JOURNAL_FILE_BYTES = 64 * 1024 * 1024;
/** The longest wait between two tries of a write that found the disk full. */
const FULL_RETRY_MAX_MS = 1000;

/** What a log's segment fsync covers: the oldest journal file it had entries in (see segmentSyncStarted). */
export type SyncToken = number | undefined;

export class Journal {
  private readonly files: JournalFile[] = [];
  /** Per log (its key), the oldest journal file holding entries its segments may lack on disk. */
  private readonly unsynced = new Map<string, number>();
  /** Journal files that segment fsyncs under way still need, with how many need each. */
  private readonly inFlight = new Map<number, number>();
  /** Logs that failed (appends refused until a restart, whose replay needs their entries): see compactPinned. */
  private readonly failedLogs = new Set<string>();
  /** A compaction of files only failed logs need is under way (compactPinned), on this file now. */
  private compaction: Promise<void> | null = null;
  private compacting: JournalFile | undefined;
  private compactAgain = false;
  private compactFailedAt = Number.NEGATIVE_INFINITY;
  private waiting: Array<(err: Error | null) => void> = [];
  /** Entries queued for the next pass, and their size. */
  private queue: Buffer[] = [];
  private queuedBytes = 0;
  /** A pass (one write) is under way. */
  private writing = false;
  private closed = false;
  /** A write failed: nothing written here since is known to be durable (appends are refused, GroupCommit). */
  failed: Error | null = null;
  /** A write that found the disk full waits for its next try (retryWhenFull). */
  private retryTimer: NodeJS.Timeout | undefined;
  /** Shutting down (giveUpWhenFull): a write that finds the disk full fails the journal, as any failed write. */
  private givingUp = false;
  private retryMs = 0;
  /** The write being tried again may have left part of itself in the current file: the retry writes over it there (the file's size was set back), however full the file. */
  private retryInPlace = false;
  /** Writes that found the disk full and were tried again (for tests). */
  fullRetries = 0;
  private readonly warnings = new RateLimitedLog(() => this.logger);
  /** Recovered entries by log key, until endRecovery (null afterwards: the journal is active). */
  private recovered: Map<string, JournalEntry[]> | null;
  private readonly oldFiles: string[];

  private constructor(
    readonly dir: string,
    private readonly baseDir: string,
    private readonly logger: Logger,
    private readonly fileBytes: number,
    recovered: Map<string, JournalEntry[]>,
    oldFiles: string[],
    /** Told how long each write took, in seconds (the broker's journal histogram). */
    private readonly onWrite?: (seconds: number) => void,
  ) {
    this.recovered = recovered;
    this.oldFiles = oldFiles;
  }

  /**
   * Reads the journal in `<baseDir>/journal`: the entries each log's open replays (takeRecovered). Entries
   * before a log's last reset are dropped: its files went after them.
   */
  static async open(baseDir: string, logger: Logger, opts: { fileBytes?: number; onWrite?: (seconds: number) => void } = {}): Promise<Journal> {
    const dir = join(baseDir, JOURNAL_DIR);
    await makeDir(dir, true);
    const listed = readdirSync(dir);
    for (const n of listed) if (COMPACT_TMP_FILE.test(n)) unlinkSync(join(dir, n));
    const names = listed.filter((n) => JOURNAL_FILE.test(n)).sort();
    const byKey = new Map<string, JournalEntry[]>();
    let count = 0;
    for (const n of names) {
      const buf = await readFile(join(dir, n));
      const { entries, end } = decodeEntries(buf);
      if (end < buf.length) {
        // Only the last file can end in a write that never completed (one write at a time, and a file is
        // full before the next one is written): damage anywhere else is damage to acknowledged entries.
        if (n !== names[names.length - 1]) {
          throw storageError(dir, `journal file ${n} is damaged at byte ${end} of ${buf.length}, and later files follow it: acknowledged records may be lost; move the journal directory aside to start without it, after saving a copy`);
        }
        logger.warn({ file: n, goodBytes: end, bytes: buf.length }, 'journal file ends in an entry that is cut or damaged (never acknowledged); read up to it');
      }
      for (const e of entries) {
        if (e.kind === 'reset') {
          byKey.set(e.key, []);
          continue;
        }
        let list = byKey.get(e.key);
        if (list === undefined) byKey.set(e.key, (list = []));
        list.push(e);
        count++;
      }
    }
    for (const [k, list] of byKey) if (list.length === 0) byKey.delete(k);
    if (names.length > 0) logger.info({ files: names.length, entries: count, logs: byKey.size }, 'journal read');
    return new Journal(dir, baseDir, logger, opts.fileBytes ?? DEFAULT_JOURNAL_FILE_BYTES, byKey, names, opts.onWrite);
  }

  /** Recovery is over and the journal takes writes. */
  get active(): boolean {
    return this.recovered === null && !this.closed;
  }

  /** The key of the log in `logDir`. */
  keyOf(logDir: string): JournalKey {
    return journalKey(relative(this.baseDir, logDir));
  }

  /** The recovered entries of the log in `logDir` (once: the log replays them as it opens). */
  takeRecovered(logDir: string): JournalEntry[] | undefined {
    if (this.recovered === null) return undefined;
    const key = relative(this.baseDir, logDir);
    const list = this.recovered.get(key);
    this.recovered.delete(key);
    return list;
  }

  /**
   * Every log has opened (and replayed and fsynced its entries): the old files go, and a new one takes
   * writes. Entries no log took are of logs that no longer exist (a topic deleted meanwhile).
   */
  async endRecovery(takeWrites = true): Promise<void> {
    if (this.recovered === null) return;
    if (this.recovered.size > 0) this.logger.warn({ logs: [...this.recovered.keys()].slice(0, 10), count: this.recovered.size }, 'journal entries of logs that do not exist: dropped');
    // The old files go (oldest first) before the new one exists: a crash meanwhile must not leave the last
    // old file, which a crash may have cut, with a later file after it (open() would refuse the start).
    for (const n of this.oldFiles) unlinkSync(join(this.dir, n));
    await fsyncDir(this.dir);
    if (takeWrites) {
      const last = this.oldFiles.length > 0 ? Number.parseInt(this.oldFiles[this.oldFiles.length - 1], 10) : 0;
      // Its directory entry is fsynced before its first write (newEntry).
      this.files.push(createGrowing(this.dir, last + 1));
    } else this.closed = true;
    this.recovered = null;
  }

  /** Entries were recovered for some log (until endRecovery). */
  get hasRecovered(): boolean {
    return this.recovered !== null && this.recovered.size > 0;
  }

  private get current(): JournalFile {
    return this.files[this.files.length - 1] as JournalFile;
  }

  /** What a log ending at `from` wrote to its segment: offsets first..last, `count` records, `bytes` as written (kept until written here). */
  write(key: JournalKey, from: number, first: number, last: number, count: number, bytes: readonly Buffer[]): void {
    this.append(key, encodeWrite(key, from, first, last, count, bytes));
  }

  /** A log dropped its records from `offset` on: durable before it does (replay must not bring them back). */
  truncate(key: JournalKey, offset: number): Promise<void> {
    return this.appendDurable(key, encodeTruncate(key, offset));
  }

  /** A log's files go (released, destroyed): durable before they do. Its earlier entries no longer count. */
  async reset(key: JournalKey): Promise<void> {
    await this.appendDurable(key, encodeReset(key));
    this.unsynced.delete(key.name);
    this.collect();
  }

  private appendDurable(key: JournalKey, pieces: Buffer[]): Promise<void> {
    if (!this.active) return Promise.resolve();
    try {
      this.append(key, pieces);
    } catch (err) {
      return Promise.reject(err);
    }
    return new Promise((resolve, reject) => this.whenDurable((err) => (err ? reject(err) : resolve())));
  }

  /** Queues an entry: the next pass writes it, in order with every entry queued before. */
  private append(key: JournalKey, pieces: Buffer[]): void {
    if (this.failed) throw this.failed;
    if (!this.active) throw new Error('journal is not taking writes');
    for (const p of pieces) {
      this.queue.push(p);
      this.queuedBytes += p.length;
    }
    // The file the entry lands in is this one or a later one: keeping from this one is safe.
    if (!this.unsynced.has(key.name)) this.unsynced.set(key.name, this.current.seq);
  }

  private fail(err: unknown): void {
    if (this.failed) return;
    this.failed = err instanceof Error ? err : new Error(String(err));
    this.logger.error({ err: this.failed }, 'journal failed: appends under flush=always are refused until the broker restarts');
  }

  /** `cb` runs once every entry queued before this call is durable (group commit), with the error if not. */
  whenDurable(cb: (err: Error | null) => void): void {
    if (this.failed) {
      cb(this.failed);
      return;
    }
    this.waiting.push(cb);
    if (!this.writing) this.pass();
  }

  /** One write of everything queued (O_DSYNC: durable once it returns), then its waiters; repeated while more waits. */
  private pass(): void {
    const cbs = this.waiting;
    if ((cbs.length === 0 && this.queue.length === 0) || this.failed) {
      this.writing = false;
      this.waiting = [];
      for (const cb of cbs) cb(this.failed);
      this.collect();
      return;
    }
    this.writing = true;
    this.waiting = [];
    if (this.queue.length === 0) {
      // Their entries were written by the pass before (they asked while it ran).
      this.passEnded(cbs, null);
      return;
    }
    const buf = this.queue.length === 1 ? (this.queue[0] as Buffer) : Buffer.concat(this.queue, this.queuedBytes);
    this.queue = [];
    this.queuedBytes = 0;
    let f = this.current;
    // A full file: the next one starts with this pass (its directory entry fsynced before the write). Not
    // for a retry (retryWhenFull): what its failed try left in this file must be written over, or the file
    // would end damaged with a later one after it, which refuses the start.
    if (!this.retryInPlace && f.size > 0 && f.size + buf.length > this.fileBytes) {
      try {
        f = createGrowing(this.dir, f.seq + 1);
      } catch (err) {
        if (!this.retryWhenFull(err, null, 0, buf, cbs)) this.passEnded(cbs, err);
        return;
      }
      this.files.push(f);
    }
    const at = f.size;
    f.size += buf.length;
    const started = performance.now();
    const dirFirst = f.newEntry ? fsyncDir(this.dir).then(() => void (f.newEntry = false)) : Promise.resolve();
    dirFirst
      .then(() => writeDurably(f.fd, buf, at))
      .then(
        () => {
          this.onWrite?.((performance.now() - started) / 1000);
          return null;
        },
        (err: unknown) => err,
      )
      .then((err) => {
        if (err === null || !this.retryWhenFull(err, f, at, buf, cbs)) this.passEnded(cbs, err);
      });
  }

  /**
   * A pass whose write (or new file) found the disk full (ENOSPC) is tried again, whole and at the same
   * place, until space frees: its entries stay first in line and their appends unacknowledged, and appends
   * that find the disk full at their segment write are refused meanwhile (docs/operations.md, "A full
   * disk"). Failing the journal instead failed every journaled log until a restart. What a short write
   * left of it in the file, the retry writes over (its bytes are the same and at least as many, in the
   * same file: retryInPlace). Not once shutting down (giveUpWhenFull).
   */
  private retryWhenFull(err: unknown, f: JournalFile | null, at: number, buf: Buffer, cbs: Array<(err: Error | null) => void>): boolean {
    if ((err as NodeJS.ErrnoException | null)?.code !== 'ENOSPC' || this.givingUp) return false;
    if (f) {
      f.size = at;
      this.retryInPlace = true;
    }
    this.queue.unshift(buf);
    this.queuedBytes += buf.length;
    this.waiting = cbs.concat(this.waiting);
    this.fullRetries++;
    this.retryMs = Math.min(FULL_RETRY_MAX_MS, Math.max(10, this.retryMs * 2));
    this.warnings.warn('full', { err, retryMs: this.retryMs }, 'journal write failed, the disk is full: tried again until space frees');
    this.retryTimer = setTimeout(() => {
      this.retryTimer = undefined;
      this.pass();
    }, this.retryMs);
    this.retryTimer.unref();
    return true;
  }

  private passEnded(cbs: Array<(err: Error | null) => void>, err: unknown): void {
    if (err) this.fail(err);
    else {
      this.retryMs = 0;
      this.retryInPlace = false;
    }
    for (const cb of cbs) cb(this.failed);
    // Between writes, so files go under a load that never lets the journal idle.
    this.collect();
    this.pass();
  }

  /**
   * A log begins to fsync its segments: every write it made so far is covered once that ends
   * (segmentSyncEnded with the token returned here).
   */
  segmentSyncStarted(key: JournalKey): SyncToken {
    const seq = this.unsynced.get(key.name);
    if (seq === undefined) return undefined;
    this.unsynced.delete(key.name);
    this.inFlight.set(seq, (this.inFlight.get(seq) ?? 0) + 1);
    return seq;
  }

  segmentSyncEnded(key: JournalKey, token: SyncToken, ok: boolean): void {
    if (token === undefined) return;
    const n = (this.inFlight.get(token) ?? 1) - 1;
    if (n === 0) this.inFlight.delete(token);
    else this.inFlight.set(token, n);
    if (!ok) {
      const had = this.unsynced.get(key.name);
      this.unsynced.set(key.name, had === undefined ? token : Math.min(had, token));
    }
    this.collect();
  }

  /** The log's segments were all fsynced (a clean close): its entries are no longer needed. */
  forget(key: JournalKey): void {
    if (this.unsynced.delete(key.name)) this.collect();
  }

  /**
   * The log failed: its entries stay for the restart's replay, and the files after them need not
   * (compactPinned). It stays failed through its resets (a truncation's) until logRecovered.
   */
  logFailed(key: JournalKey): void {
    this.failedLogs.add(key.name);
    this.collect();
  }

  /** The log's failure ended with its files (released, destroyed): what it journals next pins files as a live log's. */
  logRecovered(key: JournalKey): void {
    if (this.failedLogs.delete(key.name)) this.collect();
  }

  /**
   * The oldest file a log that can still fsync its segments (or a segment fsync under way) needs, `live`:
   * it and every later file stay. The oldest a failed log needs, `pinned`: below `live`, only the failed
   * logs' entries of a file stay.
   */
  private pins(): { live: number; pinned: number } {
    let live = this.current.seq;
    let pinned = live;
    for (const [k, s] of this.unsynced) {
      if (this.failedLogs.has(k)) pinned = Math.min(pinned, s);
      else live = Math.min(live, s);
    }
    for (const s of this.inFlight.keys()) live = Math.min(live, s);
    return { live, pinned };
  }

  /** Closes and deletes the files no log needs any more (never the current one, which a write may be using). */
  private collect(): void {
    if (this.files.length < 2) return;
    const { live, pinned } = this.pins();
    const gone = Math.min(live, pinned);
    while (this.files.length > 1 && (this.files[0] as JournalFile).seq < gone && this.files[0] !== this.compacting) {
      const f = this.files.shift() as JournalFile;
      try {
        if (f.fd >= 0) closeSync(f.fd);
        unlinkSync(join(this.dir, journalFileName(f.seq)));
      } catch (err) {
        this.logger.warn({ err, file: journalFileName(f.seq) }, 'could not delete a journal file');
      }
    }
    if (pinned < live && performance.now() - this.compactFailedAt >= COMPACT_RETRY_MS && this.nextToCompact(live, pinned) !== undefined) this.compactPinned();
  }

  private nextToCompact(live: number, pinned: number): JournalFile | undefined {
    return this.files.find((f) => f !== this.current && f.compacted !== true && f.seq >= pinned && f.seq < live);
  }

  /**
   * Files only failed logs need (between `pinned` and `live`) keep their entries alone, in order, or go
   * when they hold none (journal-compact.ts): a failed log held every file after its entries until a
   * restart. Every older file that stays is compacted first, so no other log's entries stay behind in a
   * file whose later entries of that log (a truncation, a reset) went: its replay would miss them.
   */
  private compactPinned(): void {
    if (this.compaction !== null) {
      this.compactAgain = true;
      return;
    }
    this.compaction = this.compactFiles()
      .catch((err: unknown) => {
        this.compactFailedAt = performance.now();
        this.warnings.warn('compact', { err, retryMs: COMPACT_RETRY_MS }, 'could not compact a journal file that failed logs hold; it stays whole');
      })
      .finally(() => {
        this.compaction = null;
        this.compacting = undefined;
        if (this.compactAgain && !this.closed) {
          this.compactAgain = false;
          this.collect();
        }
      });
  }

  private async compactFiles(): Promise<void> {
    for (;;) {
      const { live, pinned } = this.pins();
      const f = this.closed ? undefined : this.nextToCompact(live, pinned);
      if (f === undefined) return;
      this.compacting = f;
      const outcome = await compactJournalFile(this.dir, f.seq, new Set(this.failedLogs));
      if (f.fd >= 0) closeSync(f.fd);
      f.fd = -1;
      f.compacted = true;
      this.compacting = undefined;
      if (outcome === 'deleted') this.files.splice(this.files.indexOf(f), 1);
    }
  }

  /**
   * The broker is stopping: a write waiting for space gets its last try now, and fails the journal if the
   * disk is still full (its appends were never acknowledged). Before the logs close, which wait for
   * their appends' journal writes.
   */
  giveUpWhenFull(): void {
    this.givingUp = true;
    if (this.retryTimer === undefined) return;
    clearTimeout(this.retryTimer);
    this.retryTimer = undefined;
    this.pass();
  }

  /** A write found the disk full and none has succeeded since: appends waiting for the journal may wait long. */
  get waitingForSpace(): boolean {
    return this.retryMs > 0;
  }

  /** Files the journal holds now (for tests). */
  get fileCount(): number {
    return this.files.length;
  }

  /**
   * Takes no more entries (logs then fsync their own segments), writes what is queued, then closes the
   * files (they stay: the next open reads them).
   */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    this.giveUpWhenFull();
    await this.compaction;
    while (!this.failed && (this.writing || this.queue.length > 0)) await new Promise<void>((resolve) => this.whenDurable(() => resolve()));
    for (const f of this.files.splice(0)) if (f.fd >= 0) closeSync(f.fd);
  }
}

/**
 * One log segment: `<baseOffset padded to 20 digits>.log` plus its `.index`. The segment holds the
 * metadata the log needs without reading the file (size, next offset, max timestamp, created time).
 * The file handle is opened lazily and can be released while idle, so old segments do not pin fds.
 */
import type { FdHolder, SegmentFdPolicy } from './fd-budget.js';
import { fdatasync, writeSync, writevSync } from 'node:fs';
import { type FileHandle, rename, unlink } from 'node:fs/promises';
import { join } from 'node:path';
import { failpointRefuse } from '../common/failpoints.js';
import type { LogRecord } from 'tributary-protocol/record.js';
import { OffsetIndex, writeIndexFile } from './offset-index.js';
import { INDEX_SUFFIX, LOG_SUFFIX, segmentFileName } from './segment-names.js';
import type { SegmentCut } from './segment-cut.js';
import { openWithinBudget } from './segment-open.js';
import { type RecordInfo, type ScanOutcome, walkRecords } from './segment-scan.js';
import { blockRecords, inspectBlock } from './block-records.js';

export type { RecordInfo, ScanOutcome } from './segment-scan.js';

export class Segment implements FdHolder {
  readonly baseOffset: number;
  readonly logPath: string;
  readonly indexPath: string;
  /** Bytes of complete records; readers never look past it. */
  size: number;
  nextOffset: number;
  /** -1 when empty. */
  maxTimestamp: number;
  createdMs: number;
  readonly index: OffsetIndex;
  /** Bumped by truncate/remove so a concurrent reader can tell its view went stale. */
  version = 0;
  deleted = false;
  /** The on-disk index file matches the segment ('synced': and the log was fsynced first). */
  indexState: 'stale' | 'written' | 'synced';
  /** Rewritten by compaction: may have gaps, also between its last record and nextOffset. */
  compacted = false;
  /** Replaced by a compacted file of the same name; readers should retry with the replacement. */
  superseded = false;

  private fh: Promise<FileHandle> | null = null;
  /** The close of the previous fd while it runs: a reopen waits for it (one budget slot per segment). */
  private closingFh: Promise<void> | null = null;
  /** How the next open opens the file: 'w+' only for the first of a new segment. */
  private openFlags: 'r+' | 'w+' = 'r+';
  /** The handle `fh` resolved to, while it is the open one: writes and fsyncs use it without waiting. */
  private openFh: FileHandle | null = null;
  /** datasyncs in flight on openFh's fd, and who waits for them to end. */
  private rawSyncs = 0;
  private rawSyncsDone: Array<() => void> | null = null;
  private users = 0;
  private releaseWanted = false;
  private closed = false;

  /** Writes not yet covered by a completed datasync (counted only under an fd budget, FdBudget). */
  private writesSinceSync = 0;
  /** Bytes a completed datasync covered (or that were on disk at open): what cutToDurable keeps. */
  private durableSize: number;

  constructor(
    dir: string,
    baseOffset: number,
    index: OffsetIndex,
    meta: { size: number; nextOffset: number; maxTimestamp: number; createdMs: number },
    /** The broker-wide bound on open segment files, when there is one. */
    private readonly fds?: SegmentFdPolicy,
  ) {
    this.baseOffset = baseOffset;
    this.logPath = join(dir, segmentFileName(baseOffset, LOG_SUFFIX));
    this.indexPath = join(dir, segmentFileName(baseOffset, INDEX_SUFFIX));
    this.index = index;
    this.size = meta.size;
    this.durableSize = meta.size;
    this.nextOffset = meta.nextOffset;
    this.maxTimestamp = meta.maxTimestamp;
    this.createdMs = meta.createdMs;
    this.indexState = 'stale';
  }

  /** Offsets covered (an upper bound of the records held once compacted). */
  get recordCount(): number {
    return this.nextOffset - this.baseOffset;
  }

  /** Creates an empty segment (truncating a leftover file of the same name) and its index file. */
  static async create(dir: string, baseOffset: number, intervalBytes: number, nowMs: number, fds?: SegmentFdPolicy): Promise<Segment> {
    const seg = new Segment(
      dir,
      baseOffset,
      new OffsetIndex(baseOffset, intervalBytes),
      {
        size: 0,
        nextOffset: baseOffset,
        maxTimestamp: -1,
        createdMs: nowMs,
      },
      fds,
    );
    // The first open creates the file (or truncates a leftover one), within the fd budget like any other.
    seg.openFlags = 'w+';
    try {
      await seg.withHandle(async () => {});
    } finally {
      seg.openFlags = 'r+';
    }
    try {
      // Written now so the created time survives a crash even before the first roll or close.
      await seg.writeIndex(false);
    } catch (err) {
      // A half-made segment must not stay: appends go on in the old one past its base, and a reopen would
      // see an empty segment below the old one's end (log-loader.ts). Nor must its fd (a full disk fails
      // every roll).
      await seg.remove().catch(() => {});
      throw err;
    }
    return seg;
  }

  /**
   * Validates records in [from, end) in order, calling `onRecord` for each; stops at the first invalid one
   * or when the callback returns false. Reads in chunks, so a segment of any size scans in bounded memory.
   */
  async scan(from: number, end: number, onRecord: (r: RecordInfo) => boolean): Promise<ScanOutcome> {
    return walkRecords((p, n) => this.read(p, n), from, end, onRecord, null);
  }

  /** Like scan, but also decodes each record (buffers are views into a chunk: copy what must outlive the call). */
  async scanRecords(from: number, end: number, onRecord: (r: RecordInfo, rec: LogRecord) => boolean): Promise<ScanOutcome> {
    return walkRecords((p, n) => this.read(p, n), from, end, null, onRecord);
  }

  /**
   * The unit (block-records.ts) holding `offset`, or the first one after it: its file position and size;
   * position size when there is none (nextOffset, or a compacted gap). `inside`: `offset` is past the
   * unit's first offset (inside an append block), so a cut there rewrites that block (segment-cut.ts).
   */
  async unitOf(offset: number): Promise<{ position: number; size: number; inside: boolean }> {
    let found = { position: this.size, size: 0, inside: false };
    if (offset >= this.nextOffset) return found;
    const start = this.index.lookup(offset);
    const out = await this.scan(start.position, this.size, (r) => {
      if (r.lastOffset < offset) return true;
      found = { position: r.position, size: r.size, inside: r.offset < offset };
      return false;
    });
    if (out.failure !== null) throw unreadable(this, out.position);
    return found;
  }

  /** First offset in this segment whose timestamp is >= ts, or null. */
  async firstOffsetAtOrAfter(ts: number): Promise<number | null> {
    let found: number | null = null;
    let block: { position: number; size: number } | null = null;
    const out = await this.scan(0, this.size, (r) => {
      if (r.timestamp >= ts) {
        // A block's timestamp is its largest: the first record to reach `ts` is one of its records.
        if (r.block) block = { position: r.position, size: r.size };
        else found = r.offset;
        return false;
      }
      return true;
    });
    if (block !== null) found = await this.blockOffsetAtOrAfter(block, ts);
    // A bad record before the answer: the rest of the segment cannot be searched (no silent skip to the next).
    if (found === null && out.failure !== null) throw unreadable(this, out.position);
    return found;
  }

  /** The first offset of the block at `b` whose record's timestamp is >= ts (its largest is). */
  private async blockOffsetAtOrAfter(b: { position: number; size: number }, ts: number): Promise<number> {
    const buf = await this.read(b.position, b.size);
    const u = inspectBlock(buf, 0);
    if (!u.ok) throw unreadable(this, b.position);
    for (const r of blockRecords(buf, 0, u.block)) if (r.timestamp >= ts) return r.offset;
    throw unreadable(this, b.position);
  }

  /**
   * What recovery found the file to hold (segment-recovery.ts): records up to `size` (the file was cut there
   * if it was longer), ending at `nextOffset`, the newest counting as of `maxTimestamp`.
   */
  setRecovered(size: number, nextOffset: number, maxTimestamp: number): void {
    this.size = size;
    this.durableSize = Math.min(this.durableSize, size);
    this.nextOffset = nextOffset;
    this.maxTimestamp = maxTimestamp;
  }

  /**
   * Drops records >= cut.offset (within [baseOffset, nextOffset]), where prepareCut found them. `durable`:
   * a cut inside an append has its last kept record's end-of-append mark synced before the cut.
   */
  async truncateTo(cut: SegmentCut, durable: boolean): Promise<void> {
    const { offset, position: pos, endMark } = cut;
    if (offset >= this.nextOffset) return;
    this.version++;
    this.indexState = 'stale';
    // A stale index file must not vouch for bytes that a later append could make the same length. A
    // compacted segment's is replaced instead: it alone keeps the flag (segment-cut.ts).
    if (cut.tmpIndex !== null) await rename(cut.tmpIndex, this.indexPath);
    else await unlink(this.indexPath).catch(ignoreEnoent);
    // The mark before the cut: a crash between them leaves the dropped records as an append of their own
    // (dropped again by the next truncation), never the kept ones without an end (segment-cut.ts). A
    // shortened block's header likewise, once what follows that block is cut (and synced): between the
    // header and the cut lie only the dropped records' bytes, which recovery cuts as a torn tail.
    if (endMark !== null) {
      if (cut.blockEnd !== null && cut.blockEnd < this.size) {
        const end = cut.blockEnd;
        await this.withHandle((fh) => fh.truncate(end));
        this.durableSize = Math.min(this.durableSize, end);
        if (durable) await this.datasync();
      }
      await this.writeAt(endMark.bytes, endMark.position);
      if (durable) await this.datasync();
    }
    await this.withHandle((fh) => fh.truncate(pos));
    this.size = pos;
    this.durableSize = Math.min(this.durableSize, pos);
    this.nextOffset = offset;
    this.index.truncateToOffset(offset);
    this.maxTimestamp = cut.maxTimestamp;
    if (cut.tmpIndex !== null) this.indexState = 'written';
    // Bumped again now the size is cut: a scan or read that began during the cut took the version above
    // with the old size, and may meet the records appended after the cut; it must see a race, not damage.
    this.version++;
  }

  /** Runs `fn` with the open handle; the handle is not released while any caller uses it. */
  async withHandle<T>(fn: (fh: FileHandle) => Promise<T>): Promise<T> {
    if (this.closed) throw segmentClosedError(this);
    this.beginUse();
    try {
      if (this.fh === null) {
        const opening = openWithinBudget(this.logPath, this.openFlags, this, this.fds, this.closingFh, () => (this.closed ? segmentClosedError(this) : null));
        this.fh = opening;
        // Only while it is still this segment's handle: closeHandle may have let it go meanwhile.
        opening.then(
          (fh) => {
            if (this.fh === opening) this.openFh = fh;
          },
          () => {},
        );
      }
      const opening = this.fh;
      let fh: FileHandle;
      try {
        fh = await opening;
      } catch (err) {
        // The open failed (and gave its budget slot back) or its wait for a slot was cancelled.
        if (this.fh === opening) this.fh = null;
        throw err;
      }
      return await fn(fh);
    } finally {
      this.doneUsing();
    }
  }

  /** An operation holds the handle until doneUsing(): the fd budget does not release it meanwhile. */
  private beginUse(): void {
    this.users++;
    this.fds?.budget.used(this);
  }

  private doneUsing(): void {
    this.users--;
    if (this.users === 0 && this.releaseWanted) {
      this.releaseWanted = false;
      void this.closeHandle().catch(() => {});
    } else if (this.users === 0) this.fds?.budget.settled(this);
  }

  /**
   * Runs `fn` with the file open and the handle held (a release meanwhile waits until `fn` ends): reads
   * through this object keep using the file that was open when `fn` started, even after another file is
   * renamed over logPath. Compaction swaps a segment in, and retires this one, inside it.
   */
  async holdOpen<T>(fn: () => Promise<T>): Promise<T> {
    return this.withHandle(() => fn());
  }

  /**
   * Writes all of `buf` at `position` (loops on short writes). Synchronously: an append is a copy into the
   * page cache, far cheaper than a thread-pool round trip, which under flush=always would queue behind the
   * fsyncs of every partition (docs/architecture.md, "Storage"). Durability is still the fsync's job.
   */
  async writeAt(buf: Buffer | readonly Buffer[], position: number): Promise<void> {
    await this.withHandle(async (fh) => this.writeAll(fh, buf, position));
  }

  /** writeAt at once if the file is open (the active segment's usually is); false, writing nothing, if not. */
  writeNow(buf: Buffer | readonly Buffer[], position: number): boolean {
    const fh = this.openFh;
    if (fh === null || this.closed) return false;
    this.beginUse();
    try {
      this.writeAll(fh, buf, position);
    } finally {
      this.doneUsing();
    }
    return true;
  }

  /** `buf` is the bytes to write, or pieces of them written with one writev (a block stamped in place, log-writer.ts). */
  private writeAll(fh: FileHandle, buf: Buffer | readonly Buffer[], position: number): void {
    let done = 0;
    try {
      // A full disk in fault tests, until the test frees it (common/failpoints.ts).
      if (failpointRefuse('disk.full')) throw Object.assign(new Error('ENOSPC: no space left on device, write'), { code: 'ENOSPC' });
      if (!Buffer.isBuffer(buf)) {
        for (let rest = buf; rest.length > 0; ) {
          const n = writevSync(fh.fd, rest, position + done);
          if (n <= 0) throw new Error('short write');
          done += n;
          rest = unwritten(rest, n);
        }
        return;
      }
      while (done < buf.length) {
        const bytesWritten = writeSync(fh.fd, buf, done, buf.length - done, position + done);
        if (bytesWritten <= 0) throw new Error('short write');
        done += bytesWritten;
      }
    } finally {
      // Counted once written (the handle is held until then): only a datasync that starts after this
      // covers it, and datasync captures the count when it starts.
      if (done > 0) this.writesSinceSync++;
    }
  }

  /** Reads up to `length` bytes at `position`; shorter only if the file is shorter. */
  async read(position: number, length: number): Promise<Buffer> {
    return this.withHandle(async (fh) => {
      const buf = Buffer.allocUnsafe(length);
      let done = 0;
      while (done < length) {
        const { bytesRead } = await fh.read(buf, done, length - done, position + done);
        if (bytesRead === 0) break;
        done += bytesRead;
      }
      return done === length ? buf : buf.subarray(0, done);
    });
  }

  datasync(): Promise<void> {
    const covered = this.writesSinceSync;
    const size = this.size;
    const after = () => {
      // Writes that started during the fsync are not covered by it.
      this.writesSinceSync -= covered;
      if (size > this.durableSize && size <= this.size) this.durableSize = size;
      this.fds?.budget.settled(this);
    };
    const failed = (err: unknown) => {
      this.forgetUnsynced();
      throw err;
    };
    const fh = this.openFh;
    if (fh === null || this.closed) return this.withHandle((h) => h.datasync()).then(after, failed);
    // Open: through its fd, held until done (closeHandle waits for it), without the promise API's garbage.
    this.beginUse();
    this.rawSyncs++;
    return new Promise<void>((resolve, reject) => {
      fdatasync(fh.fd, (err) => {
        if (--this.rawSyncs === 0 && this.rawSyncsDone !== null) for (const wake of this.rawSyncsDone.splice(0)) wake();
        this.doneUsing();
        if (err) {
          try {
            failed(err);
          } catch (e) {
            reject(e);
          }
        } else {
          after();
          resolve();
        }
      });
    });
  }

  /**
   * After a failed fsync of the log: cuts the file back to what a datasync covered (docs/architecture.md
   * "Storage", Durability). In-memory state stays: the log is failed and its next open recovers the files.
   */
  async cutToDurable(): Promise<boolean> {
    // Taken now: an fsync ending meanwhile (which proves nothing after a failed one) must not move it.
    const keep = this.durableSize;
    if (this.closed || this.size <= keep) return false;
    this.indexState = 'stale';
    await unlink(this.indexPath).catch(ignoreEnoent);
    // Not above a truncation's cut meanwhile: ftruncate would pad the file with zeros up to `keep`.
    await this.withHandle((fh) => fh.truncate(Math.min(keep, this.durableSize)));
    return true;
  }

  /**
   * The log failed (an fsync failed: it trusts no later one), so its unsynced writes no longer pin the fd:
   * a slot of the budget each failed log would hold until a restart. No fsync runs, and none raises
   * durableSize, which the cut back to it (cutToDurable) keeps to.
   */
  forgetUnsynced(): void {
    this.writesSinceSync = 0;
    this.fds?.budget.settled(this);
  }

  /** FdHolder: the fd may be closed now (see FdBudget). */
  canRelease(): boolean {
    return this.users === 0 && !(this.fds?.syncTracked && this.writesSinceSync > 0);
  }

  /** FdHolder: held only for unsynced writes, so the log's fsync would let it go. */
  requestSync(): boolean {
    if (this.users > 0 || this.closed || !this.fds?.syncTracked || this.writesSinceSync === 0 || !this.fds.log) return false;
    this.fds.log.requestSegmentSync();
    return true;
  }

  /** Persists the index and metadata; `synced` promises the log bytes it covers were fsynced first. */
  async writeIndex(synced: boolean): Promise<void> {
    await writeIndexFile(
      this.indexPath,
      {
        baseOffset: this.baseOffset,
        nextOffset: this.nextOffset,
        maxTimestamp: this.maxTimestamp,
        logSize: this.size,
        createdMs: Math.floor(this.createdMs),
        synced,
        compacted: this.compacted,
      },
      this.index,
      // A torn write would lose the compacted flag, which the log cannot tell.
      this.compacted ? `${this.indexPath}.tmp` : undefined,
    );
    this.indexState = synced ? 'synced' : 'written';
  }

  /** Marks the in-memory index as ahead of the file (after appends). */
  markModified(): void {
    this.indexState = 'stale';
  }

  /** Closes the fd once idle; the next use reopens it. */
  async release(): Promise<void> {
    if (this.users > 0) {
      this.releaseWanted = true;
      return;
    }
    await this.closeHandle();
  }

  get isOpen(): boolean {
    return this.fh !== null;
  }

  private closeHandle(): Promise<void> {
    const p = this.fh;
    this.fh = null;
    this.openFh = null;
    if (p === null) return this.closingFh ?? Promise.resolve();
    const closing = this.finishClose(p);
    this.closingFh = closing;
    void closing.then(() => {
      if (this.closingFh === closing) this.closingFh = null;
    });
    return closing;
  }

  /** Closes the fd `p` opens, after the fsyncs through it; its budget slot is free once it is closed. */
  private async finishClose(p: Promise<FileHandle>): Promise<void> {
    // An fsync through the bare fd must end before the fd is closed (and its number reused).
    if (this.rawSyncs > 0) await new Promise<void>((resolve) => (this.rawSyncsDone ??= []).push(resolve));
    let fh: FileHandle;
    try {
      fh = await p;
    } catch {
      return; // The open failed (it gave its slot back) or never had a slot.
    }
    await fh.close().catch(() => {});
    this.fds?.budget.closed(this);
  }

  /** Closes for good (FileHandle.close waits for in-flight operations). */
  async close(): Promise<void> {
    this.closed = true;
    // An open still waiting for a budget slot gives up.
    this.fds?.budget.cancel(this, segmentClosedError(this));
    await this.closeHandle();
  }

  /** Replaced by a new file under the same name (compaction): closes for good without deleting. */
  async retire(): Promise<void> {
    this.superseded = true;
    this.deleted = true;
    this.version++;
    await this.close();
  }

  /** Its files went with the log directory (PartitionLog.release): closes for good, as deleted to readers. */
  async discard(): Promise<void> {
    this.deleted = true;
    this.version++;
    await this.close();
  }

  /** Closes and deletes the log and index files. */
  async remove(): Promise<void> {
    await this.discard();
    await unlink(this.logPath).catch(ignoreEnoent);
    await unlink(this.indexPath).catch(ignoreEnoent);
  }
}

function ignoreEnoent(err: NodeJS.ErrnoException): void {
  if (err.code !== 'ENOENT') throw err;
}

function segmentClosedError(seg: Segment): Error {
  const err = new Error(`segment ${seg.baseOffset} is ${seg.deleted ? 'deleted' : 'closed'}`) as NodeJS.ErrnoException;
  err.code = 'ESEGMENTCLOSED';
  return err;
}

/** A record of `seg` at `position` failed its checks where a search needed it (callers add the log's directory). */
function unreadable(seg: Segment, position: number): Error {
  return new Error(`unreadable record in segment ${seg.baseOffset} at position ${position}`);
}

/** What is left of `pieces` after the first `n` bytes of them were written. */
export function unwritten(pieces: readonly Buffer[], n: number): readonly Buffer[] {
  let i = 0;
  while (i < pieces.length && n >= pieces[i]!.length) n -= pieces[i++]!.length;
  return i < pieces.length ? [pieces[i]!.subarray(n), ...pieces.slice(i + 1)] : [];
}

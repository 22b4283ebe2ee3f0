/**
 * The log of one partition: an ordered list of segments, the last one active. Appends are queued and
 * written by a single writer (several queued batches coalesce into one write call); durability follows
 * the flush mode, with group commit for 'always'. The last record of every append carries
 * ATTR_END_OF_APPEND, so recovery (which validates the tail of the log on open) keeps whole appends only.
 * Compaction rewrites closed segments keeping the latest record per key; kept offsets do not change,
 * so the log may have gaps, which every read path skips.
 */
import { writeFileAtomic } from './atomic-file.js';
import { mkdir, open, readdir, readFile, rename, rm, unlink } from 'node:fs/promises';
import { join } from 'node:path';
import { type Logger, pino } from 'pino';
import { invalidParam, TributaryError } from 'tributary-protocol/errors.js';
import { type ScannedBatch, replyHeaderSize, setReplyCount, writeReplyHeader, writeTrailer } from 'tributary-protocol/batch.js';
import { type LogRecord, type RecordInput, RecordAttr } from 'tributary-protocol/record.js';
import { DEFAULT_INDEX_INTERVAL_BYTES, OffsetIndex, serializeIndex } from './offset-index.js';
import {
  ATTR_END_OF_APPEND,
  decodeOwnRecord,
  decodeRecord,
  encodedSize,
  encodeRecordInto,
  type EncodableRecord,
  USER_ATTR_MASK,
  lastWireTimestamp,
  storedSizeOfWire,
  validateEncodable,
  writeStoredFromWire,
  writeWireRecord,
} from './record-codec.js';
import { INDEX_SUFFIX, LOG_SUFFIX, parseSegmentFileName, type RecordInfo, type ScanOutcome, Segment, segmentFileName } from './segment.js';

export type FlushMode = 'always' | 'interval' | 'os';

export interface LogOptions {
  /** Roll when the active segment would exceed this (default 128 MiB). */
  segmentBytes: number;
  /** Roll when the active segment is older than this (default 7 days). */
  segmentMs: number;
  /** -1 = unlimited; delete whole closed segments whose max timestamp is older. */
  retentionMs: number;
  /** -1 = unlimited; delete oldest closed segments while the total size exceeds it. */
  retentionBytes: number;
  /** 'always': append resolves after fsync (group commit); 'interval': fsync on a timer; 'os': only on close. */
  flush: FlushMode;
  /** fsync period for 'interval'; also the HWM checkpoint period in every mode. */
  flushIntervalMs: number;
  indexIntervalBytes: number;
  maxRecordBytes?: number;
  /** Bytes of recently appended records kept in memory for tail readers (default 4 MiB; 0 disables). */
  tailCacheBytes?: number;
}

export const DEFAULT_LOG_OPTIONS: Readonly<LogOptions> = Object.freeze({
  segmentBytes: 128 * 1024 * 1024,
  segmentMs: 7 * 24 * 60 * 60 * 1000,
  retentionMs: -1,
  retentionBytes: -1,
  flush: 'always' as FlushMode,
  flushIntervalMs: 1000,
  indexIntervalBytes: DEFAULT_INDEX_INTERVAL_BYTES,
  tailCacheBytes: 4 * 1024 * 1024,
});

export interface AppendResult {
  baseOffset: number;
  lastOffset: number;
  /** The append time used for records given timestamp 0. */
  timestamp: number;
}

export interface ReadOptions {
  maxRecords: number;
  maxBytes: number;
  /** Exclusive upper bound, e.g. the high watermark. */
  maxOffset?: number;
  /**
   * Read from disk and keep ATTR_END_OF_APPEND in `attributes` (the last record of each append), e.g. to
   * rebuild per-append state such as idempotent producer batches. Not for serving consumers.
   */
  keepAppendMarker?: boolean;
  /**
   * With keepAppendMarker: end at an append boundary. maxRecords and maxBytes are only checked after a record
   * that ends an append, so the first append is returned whole however large it is, and records of an append
   * cut by maxOffset are left out (which can make the result empty). For a follower fetching from its leader
   * (PartitionLog.appendReplica takes whole appends only).
   */
  wholeAppends?: boolean;
}

export interface SegmentInfo {
  baseOffset: number;
  nextOffset: number;
  sizeBytes: number;
  maxTimestamp: number;
  createdMs: number;
  /** Rewritten by compaction (may hold fewer records than offsets). */
  compacted: boolean;
}

export interface CompactOptions {
  /** How long a tombstone (empty value) stays as its key's latest record before it is dropped (default 24 h). */
  tombstoneRetentionMs?: number;
  /** The clock used for tombstone expiry and the age roll (default Date.now()). */
  now?: number;
  /** Test hook: stop as if the process died at this point of the first swap, leaving the files as they are. */
  crashAt?: 'temp-written' | 'index-renamed' | 'log-renamed';
}

export interface CompactResult {
  segmentsCompacted: number;
  recordsRemoved: number;
  /** Size of the rewritten segments before and after. */
  bytesBefore: number;
  bytesAfter: number;
}

export const DEFAULT_TOMBSTONE_RETENTION_MS = 24 * 60 * 60 * 1000;
/** Suffix of a compacted segment's files before they are swapped in; open() removes leftovers (*.tmp). */
const COMPACT_TMP_SUFFIX = '.compact.tmp';
/** Kept records buffered before a write while rewriting a segment. */
const COMPACT_WRITE_BYTES = 4 * 1024 * 1024;

export const CLEAN_SHUTDOWN_FILE = 'clean-shutdown';
export const HWM_CHECKPOINT_FILE = 'hwm.checkpoint';

/** Segment positions are u32 in the index; keep segments well inside that. */
const MAX_SEGMENT_BYTES = 0x7fffffff;
/** Upper bound of one append batch and of one coalesced write. */
const MAX_BATCH_BYTES = 1024 * 1024 * 1024;
const MAX_GROUP_BYTES = 4 * 1024 * 1024;
const NO_RECORDS: RecordInput[] = [];
const READ_CHUNK_MIN = 16 * 1024;
const READ_CHUNK_MAX = 8 * 1024 * 1024;
/** Closed segments whose fds stay open after a read (active and previous are kept anyway). */
const MAX_OPEN_CLOSED_SEGMENTS = 4;

interface PendingAppend {
  records: RecordInput[];
  /** Instead of `records`: the records of a produce batch, encoded straight from its wire bytes. */
  wire?: ScannedBatch;
  /** Instead of `records`: an appendReplica call, already encoded with its own offsets. */
  replica?: ReplicaWrite;
  sizes: number[];
  bytes: number;
  resolve: (r: AppendResult) => void;
  reject: (e: Error) => void;
  result?: AppendResult;
}

/** The records of an appendReplica call, encoded when the call is accepted (the caller's objects may change later). */
interface ReplicaWrite {
  buf: Buffer;
  /** Position of record i in `buf`, then the end. */
  starts: number[];
  /** Offset of record i (increasing, maybe with gaps). */
  offsets: number[];
  maxTimestamp: number;
}

/** Largest offset distance from a segment's base that its index can hold (u32 relative offsets). */
const MAX_RELATIVE_OFFSET = 0xffffffff;

/**
 * How many leading records of `records` (read with keepAppendMarker) form whole appends: up to and including
 * the last one carrying ATTR_END_OF_APPEND. A follower passes that prefix to appendReplica and fetches the
 * rest again.
 */
export function wholeAppendCount(records: readonly LogRecord[]): number {
  for (let i = records.length - 1; i >= 0; i--) if ((records[i].attributes & ATTR_END_OF_APPEND) !== 0) return i + 1;
  return 0;
}

/** Promise-chain mutex: runs callbacks one at a time in call order. */
class Mutex {
  private tail: Promise<unknown> = Promise.resolve();
  run<T>(fn: () => Promise<T>): Promise<T> {
    const r = this.tail.then(fn);
    this.tail = r.then(
      () => undefined,
      () => undefined,
    );
    return r;
  }
}

/** One write's worth of cached records: `buf` as written, record i at starts[i] .. starts[i + 1]. */
interface CacheChunk {
  buf: Buffer;
  /** Offset of record 0. */
  base: number;
  /** Records cached (truncateFrom may lower it). */
  count: number;
  /** count + 1 positions in `buf` (plain numbers: no per-chunk backing store). */
  starts: number[];
}

/**
 * Recently appended records, contiguous and ending at the LEO, bounded by bytes. Holds the encoded bytes of
 * each write (the log's own buffer, never the caller's records): two small objects per write rather than
 * several per record, so a full cache costs the garbage collector next to nothing. Records are decoded
 * when read, as views into those bytes. A write's buffer stays alive while any of its records is cached.
 */
export interface WireReadRequest {
  topic: string;
  partition: number;
  extensions: boolean;
  /** Leave out control records (read_committed). */
  skipControl: boolean;
  /**
   * Also leave out the TRANSACTIONAL (non-control) records this says are of an aborted transaction
   * (read_committed; the producer id is decoded only for transactional records).
   */
  skipAborted?: ((offset: number, producerId: string, attributes: number) => boolean) | null;
}

interface WireRead {
  /** The batch so far: header and records up to `at` (room for a trailer after it). */
  buf: Buffer;
  at: number;
  count: number;
  valueBytes: number;
  nextOffset: number;
}

/** Value length of the wire record at `at` (producer id and key lengths walked from the start). */
function wireValueLength(buf: Buffer, at: number): number {
  let p = at + 16;
  p += 2 + ((buf[p] << 8) | buf[p + 1]);
  p += 2 + ((buf[p] << 8) | buf[p + 1]) + 8;
  return buf[p] * 0x1000000 + ((buf[p + 1] << 16) | (buf[p + 2] << 8) | buf[p + 3]);
}

class TailCache {
  private chunks: CacheChunk[] = [];
  /** First live chunk, and first live record in it. */
  private head = 0;
  private first = 0;
  private bytes = 0;
  constructor(private readonly maxBytes: number) {}

  private get empty(): boolean {
    return this.head >= this.chunks.length;
  }
  private get start(): number {
    return this.chunks[this.head].base + this.first;
  }
  private get end(): number {
    const c = this.chunks[this.chunks.length - 1];
    return c.base + c.count;
  }

  /** Caches the records of one write: `starts` holds each record's position in `buf`, then the end. */
  append(buf: Buffer, base: number, starts: number[]): void {
    const count = starts.length - 1;
    if (this.maxBytes <= 0 || count <= 0) return;
    if (!this.empty && base !== this.end) this.clear();
    this.chunks.push({ buf, base, count, starts });
    this.bytes += starts[count] - starts[0];
    while (this.bytes > this.maxBytes && !this.empty) this.evictOne();
    this.compact();
  }

  /** Drops the oldest cached record (a whole chunk when that is all it has left). */
  private evictOne(): void {
    const c = this.chunks[this.head];
    const s = c.starts;
    // A whole chunk goes at once when every record of it would be evicted one by one anyway.
    const rest = s[c.count] - s[this.first];
    if (this.bytes - rest + (s[c.count] - s[c.count - 1]) > this.maxBytes) {
      this.bytes -= rest;
      this.head++;
      this.first = 0;
      return;
    }
    this.bytes -= s[this.first + 1] - s[this.first];
    if (++this.first >= c.count) {
      this.head++;
      this.first = 0;
    }
  }

  /** Index of the live chunk holding `offset` (which lies in [start, end)). */
  private chunkFor(offset: number): number {
    let lo = this.head;
    let hi = this.chunks.length - 1;
    while (lo < hi) {
      const mid = (lo + hi + 1) >>> 1;
      if (this.chunks[mid].base <= offset) lo = mid;
      else hi = mid - 1;
    }
    return lo;
  }

  /** Records from `offset`, or null when the cache does not start at or before it. */
  read(offset: number, limit: number, maxRecords: number, maxBytes: number): LogRecord[] | null {
    if (this.empty || offset < this.start || offset >= this.end) return null;
    const out: LogRecord[] = [];
    let bytes = 0;
    let k = this.chunkFor(offset);
    let c = this.chunks[k];
    let i = offset - c.base;
    while (out.length < maxRecords) {
      if (i >= c.count) {
        if (++k >= this.chunks.length) break;
        c = this.chunks[k];
        i = 0;
      }
      if (c.base + i >= limit) break;
      const size = c.starts[i + 1] - c.starts[i];
      if (out.length > 0 && bytes + size > maxBytes) break;
      const r = decodeOwnRecord(c.buf, c.starts[i]);
      r.attributes &= USER_ATTR_MASK;
      out.push(r);
      bytes += size;
      i++;
    }
    return out;
  }

  /**
   * Like read(), but writes the records straight into a CONSUME reply batch (wire layout, no LogRecord per
   * record): the same records read() would return, minus control records when `w.skipControl`. Null when
   * the cache does not hold `offset` or a record cannot go on the wire (the caller takes the slow path).
   */
  readWire(offset: number, limit: number, maxRecords: number, maxBytes: number, w: WireReadRequest): WireRead | null {
    if (this.empty || offset < this.start || offset >= this.end) return null;
    // Pass 1: which records, by the same rules as read() (stored sizes only, no parsing).
    const k0 = this.chunkFor(offset);
    let k = k0;
    let c = this.chunks[k];
    let i = offset - c.base;
    let n = 0;
    let bytes = 0;
    while (n < maxRecords) {
      if (i >= c.count) {
        if (++k >= this.chunks.length) break;
        c = this.chunks[k];
        i = 0;
      }
      if (c.base + i >= limit) break;
      const size = c.starts[i + 1] - c.starts[i];
      if (n > 0 && bytes + size > maxBytes) break;
      bytes += size;
      n++;
      i++;
    }
    if (n === 0) return null;
    const topicLen = Buffer.byteLength(w.topic, 'utf8');
    if (topicLen > 0xffff) return null;
    // A wire record is never larger than its stored form, so this bounds the frame.
    const buf = Buffer.allocUnsafe(replyHeaderSize(topicLen) + bytes + (w.extensions ? 24 : 0));
    const recordsAt = writeReplyHeader(buf, w.topic, topicLen, w.partition, 0);
    let at = recordsAt;
    let count = 0;
    let valueBytes = 0;
    const ext = w.extensions;
    const skipControl = w.skipControl;
    const skipAborted = w.skipAborted ?? null;
    k = k0;
    c = this.chunks[k];
    i = offset - c.base;
    for (let j = 0; j < n; j++, i++) {
      if (i >= c.count) {
        c = this.chunks[++k];
        i = 0;
      }
      const src = c.buf;
      const pos = c.starts[i];
      if (skipControl && (src[pos + 24] & USER_ATTR_MASK & RecordAttr.CONTROL) !== 0) continue;
      if (skipAborted !== null && (src[pos + 24] & RecordAttr.TRANSACTIONAL) !== 0) {
        const attributes = src[pos + 24] & USER_ATTR_MASK;
        const producerId = src.toString('utf8', pos + 27, pos + 27 + ((src[pos + 25] << 8) | src[pos + 26]));
        if (skipAborted(c.base + i, producerId, attributes)) continue;
      }
      const end = writeWireRecord(src, pos, buf, at, ext);
      if (end < 0) return null;
      // The value length field sits 4 bytes before the value, which ends the record (plus, with extensions,
      // timestamp, attributes and headers): recover it from the wire bytes just written.
      valueBytes += wireValueLength(buf, at);
      at = end;
      count++;
    }
    setReplyCount(buf, recordsAt, count);
    const nextOffset = offset + n;
    return { buf, at, count, valueBytes, nextOffset };
  }

  truncateFrom(offset: number): void {
    while (!this.empty && this.end > offset) {
      const last = this.chunks.length - 1;
      const c = this.chunks[last];
      const from = last === this.head ? this.first : 0;
      const keep = Math.max(from, offset - c.base);
      this.bytes -= c.starts[c.count] - c.starts[keep];
      c.count = keep;
      if (keep === from) {
        this.chunks.pop();
        if (last === this.head) this.first = 0;
      }
    }
  }

  dropBefore(offset: number): void {
    while (!this.empty && this.start < offset) {
      const c = this.chunks[this.head];
      const to = Math.min(c.count, offset - c.base);
      this.bytes -= c.starts[to] - c.starts[this.first];
      if (to >= c.count) {
        this.head++;
        this.first = 0;
      } else {
        this.first = to;
      }
    }
    this.compact();
  }

  clear(): void {
    this.chunks = [];
    this.head = 0;
    this.first = 0;
    this.bytes = 0;
  }

  private compact(): void {
    if (this.empty) {
      this.clear();
    } else if (this.head > 1024 && this.head * 2 > this.chunks.length) {
      this.chunks = this.chunks.slice(this.head);
      this.head = 0;
    }
  }
}

function resolveOptions(o: Partial<LogOptions>): LogOptions {
  const opts: LogOptions = { ...DEFAULT_LOG_OPTIONS };
  for (const [k, v] of Object.entries(o)) if (v !== undefined) (opts as unknown as Record<string, unknown>)[k] = v;
  const posInt = (name: keyof LogOptions, min: number, max = Number.MAX_SAFE_INTEGER) => {
    const v = opts[name];
    if (typeof v !== 'number' || !Number.isSafeInteger(v) || v < min || v > max) throw invalidParam(name, `must be an integer in [${min}, ${max}]`);
  };
  posInt('segmentBytes', 1, MAX_SEGMENT_BYTES);
  posInt('segmentMs', 1);
  posInt('retentionMs', -1);
  posInt('retentionBytes', -1);
  posInt('flushIntervalMs', 1, 0x7fffffff);
  posInt('indexIntervalBytes', 1, MAX_SEGMENT_BYTES);
  if (opts.maxRecordBytes !== undefined) posInt('maxRecordBytes', 1);
  if (opts.tailCacheBytes !== undefined) posInt('tailCacheBytes', 0);
  if (opts.flush !== 'always' && opts.flush !== 'interval' && opts.flush !== 'os') throw invalidParam('flush', "must be 'always', 'interval' or 'os'");
  return opts;
}

function storageError(dir: string, reason: string, cause?: unknown): TributaryError {
  const detail = cause instanceof Error ? `: ${cause.message}` : '';
  const err = new TributaryError('storage_error', { dir, reason: reason + detail });
  if (cause !== undefined) (err as Error & { cause?: unknown }).cause = cause;
  return err;
}

async function fsyncDir(dir: string): Promise<void> {
  let fh: Awaited<ReturnType<typeof open>> | null = null;
  try {
    fh = await open(dir, 'r');
    await fh.sync();
  } catch {
    // Not every platform/filesystem can fsync a directory; the data files are synced regardless.
  } finally {
    await fh?.close().catch(() => {});
  }
}

/** Writes a new file and fsyncs it. */
async function writeFileSynced(path: string, data: Buffer): Promise<void> {
  const fh = await open(path, 'w');
  try {
    await fh.writeFile(data);
    await fh.sync();
  } finally {
    await fh.close();
  }
}

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

/** The log closed, was truncated or lost a segment while compacting: give up quietly, the next run retries. */
class CompactionAborted extends Error {}

/** Thrown by the compaction test hook (CompactOptions.crashAt). */
export class SimulatedCrash extends Error {
  constructor(at: string | undefined) {
    super(`simulated crash during compaction (${at})`);
  }
}

const HWM_RE = /^tributary-hwm 1 (\d+)\n$/;

let silent: Logger | null = null;
/** One shared no-op logger, so logs opened without one do not each create a stdout destination. */
function silentLogger(): Logger {
  silent ??= pino({ level: 'silent' });
  return silent;
}

export class PartitionLog {
  readonly dir: string;
  readonly options: Readonly<LogOptions>;
  private readonly logger: Logger;
  private segments: Segment[];
  private hwm = 0;
  private checkpointedHwm = -1;
  private checkpointing: Promise<void> | null = null;
  private totalBytes = 0;
  private readonly cache: TailCache;
  private readonly mutex = new Mutex();
  private pending: PendingAppend[] = [];
  private drainScheduled = false;
  private exclusiveWaiting = 0;
  private exclusiveActive = false;
  private readonly dirty = new Set<Segment>();
  private syncWaiters: PendingAppend[] = [];
  private syncRequested = false;
  private syncing = false;
  private syncDone: Promise<void> = Promise.resolve();
  private failed: Error | null = null;
  private state: 'open' | 'closing' | 'closed' = 'open';
  private closePromise: Promise<void> | null = null;
  private timer: NodeJS.Timeout | null = null;
  /** Closed segments with an open fd, least recently read first. */
  private openClosed: Segment[] = [];
  /** Bumped by truncateTo: a compaction planned before it may drop what became the latest record. */
  private truncations = 0;
  private readonly compactMutex = new Mutex();
  private compactions = 0;

  private constructor(dir: string, opts: LogOptions, logger: Logger, segments: Segment[]) {
    this.dir = dir;
    this.options = Object.freeze(opts);
    this.logger = logger;
    this.segments = segments;
    this.cache = new TailCache(opts.tailCacheBytes ?? 0);
    for (const s of segments) this.totalBytes += s.size;
  }

  /** Opens (creating if needed) the log in `dir` and runs recovery. */
  static async open(dir: string, opts: Partial<LogOptions> = {}, logger?: Logger): Promise<PartitionLog> {
    const o = resolveOptions(opts);
    const log = (logger ?? silentLogger()).child({ component: 'partition-log', dir });
    await mkdir(dir, { recursive: true });
    const names = await readdir(dir);
    const clean = names.includes(CLEAN_SHUTDOWN_FILE);
    const logBases = new Set<number>();
    for (const n of names) {
      const p = parseSegmentFileName(n);
      if (p?.kind === 'log') logBases.add(p.baseOffset);
    }
    for (const n of names) {
      const p = parseSegmentFileName(n);
      // Leftovers of interrupted writes/deletions.
      if (n.endsWith('.tmp') || (p?.kind === 'index' && !logBases.has(p.baseOffset))) await unlink(join(dir, n)).catch(() => {});
    }
    const bases = [...logBases].sort((a, b) => a - b);

    const segments: Segment[] = [];
    try {
      for (let i = 0; i < bases.length; i++) {
        const isLast = i === bases.length - 1;
        const info = await Segment.recover(dir, bases[i], { intervalBytes: o.indexIntervalBytes, fullScan: !clean && isLast });
        const seg = info.segment;
        if (info.truncatedBytes > 0) {
          log.warn(
            {
              segment: seg.baseOffset,
              truncatedBytes: info.truncatedBytes,
              atOffset: info.truncatedAtOffset,
              reason: info.reason,
              droppedRecords: info.droppedRecords,
            },
            `recovery cut ${info.truncatedBytes} bytes of torn/corrupt log at offset ${info.truncatedAtOffset}` +
              (info.droppedRecords > 0 ? ` (including ${info.droppedRecords} valid records of an incomplete append)` : ''),
          );
        } else if (info.rebuiltIndex && !isLast) {
          log.info({ segment: seg.baseOffset }, 'rebuilt segment index');
        }
        const prev = segments[segments.length - 1];
        // A compacted segment may end in a gap (its newest records were superseded): it reaches the next one.
        if (prev?.compacted && seg.baseOffset > prev.nextOffset) {
          prev.nextOffset = seg.baseOffset;
          prev.markModified();
        }
        if (prev && seg.baseOffset !== prev.nextOffset) {
          // A gap (e.g. a closed segment lost its tail): only a contiguous prefix is a valid log.
          log.warn(
            { expected: prev.nextOffset, found: seg.baseOffset, droppedSegments: bases.length - i },
            `offsets not contiguous at segment ${seg.baseOffset}; dropping it and all later segments`,
          );
          await seg.remove();
          for (let j = i + 1; j < bases.length; j++) {
            for (const suffix of [LOG_SUFFIX, INDEX_SUFFIX]) await unlink(join(dir, segmentFileName(bases[j], suffix))).catch(() => {});
          }
          break;
        }
        segments.push(seg);
      }
      if (segments.length === 0) {
        segments.push(await Segment.create(dir, 0, o.indexIntervalBytes, Date.now()));
      }
      // Release fds of old segments; reads reopen them on demand.
      for (let i = 0; i < segments.length - 2; i++) await segments[i].release();
    } catch (err) {
      for (const s of segments) await s.close().catch(() => {});
      throw storageError(dir, 'recovery failed', err);
    }

    const pl = new PartitionLog(dir, o, log, segments);
    // The marker must be gone (durably) before any append, or a later crash would skip recovery.
    if (clean) await unlink(join(dir, CLEAN_SHUTDOWN_FILE)).catch(() => {});
    await fsyncDir(dir);
    pl.hwm = pl.clampHwm(await pl.readCheckpoint());
    pl.checkpointedHwm = pl.hwm;
    pl.timer = setInterval(() => pl.onTimer(), o.flushIntervalMs);
    pl.timer.unref();
    log.debug({ logStartOffset: pl.logStartOffset, logEndOffset: pl.logEndOffset, segments: segments.length, clean }, 'partition log opened');
    return pl;
  }

  get logStartOffset(): number {
    return this.segments[0].baseOffset;
  }

  get logEndOffset(): number {
    return this.active.nextOffset;
  }

  get highWatermark(): number {
    return this.hwm;
  }

  get sizeBytes(): number {
    return this.totalBytes;
  }

  /** Monotonic; clamped to the LEO. Checkpointed on the flush timer and on close. */
  setHighWatermark(o: number): void {
    if (!Number.isSafeInteger(o)) throw invalidParam('highWatermark', 'must be a safe integer');
    const v = this.clampHwm(o);
    if (v > this.hwm) this.hwm = v;
  }

  segmentInfos(): SegmentInfo[] {
    return this.segments.map((s) => ({
      baseOffset: s.baseOffset,
      nextOffset: s.nextOffset,
      sizeBytes: s.size,
      maxTimestamp: s.maxTimestamp,
      createdMs: s.createdMs,
      compacted: s.compacted,
    }));
  }

  private get active(): Segment {
    return this.segments[this.segments.length - 1];
  }

  private clampHwm(v: number): number {
    return Math.max(this.logStartOffset, Math.min(v, this.logEndOffset));
  }

  // ---------------------------------------------------------------- append

  append(records: RecordInput[]): Promise<AppendResult> {
    if (this.state !== 'open') return Promise.reject(storageError(this.dir, 'log is closed'));
    if (this.failed) return Promise.reject(storageError(this.dir, 'log failed', this.failed));
    if (!Array.isArray(records) || records.length === 0) return Promise.reject(invalidParam('records', 'must be a non-empty array'));
    const sizes = new Array<number>(records.length);
    let bytes = 0;
    const max = this.options.maxRecordBytes;
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
      this.pending.push({ records, sizes, bytes, resolve, reject });
      this.scheduleDrain();
    });
  }

  /**
   * Appends the records of a produce batch validated by scanBatch (and `verbatim`), as append() would
   * append the records produceBatch makes of it (producer id, epoch, sequence and attributes reset), but
   * encoded straight from the wire bytes. `body` must not change until the append settles.
   */
  appendWire(batch: ScannedBatch): Promise<AppendResult> {
    if (this.state !== 'open') return Promise.reject(storageError(this.dir, 'log is closed'));
    if (this.failed) return Promise.reject(storageError(this.dir, 'log failed', this.failed));
    const n = batch.count;
    if (n === 0) return Promise.reject(invalidParam('records', 'must be a non-empty array'));
    const sizes = new Array<number>(n);
    let bytes = 0;
    const max = this.options.maxRecordBytes;
    const { body, starts, extensions } = batch;
    for (let i = 0; i < n; i++) {
      const size = storedSizeOfWire(body, starts[i], starts[i + 1], extensions);
      if (max !== undefined && size > max) return Promise.reject(new TributaryError('record_too_large', { size, max }));
      sizes[i] = size;
      bytes += size;
    }
    if (bytes > MAX_BATCH_BYTES) return Promise.reject(new TributaryError('record_too_large', { size: bytes, max: MAX_BATCH_BYTES }));
    return new Promise<AppendResult>((resolve, reject) => {
      this.pending.push({ records: NO_RECORDS, wire: batch, sizes, bytes, resolve, reject });
      this.scheduleDrain();
    });
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
   */
  appendReplica(records: LogRecord[]): Promise<AppendResult> {
    if (this.state !== 'open') return Promise.reject(storageError(this.dir, 'log is closed'));
    if (this.failed) return Promise.reject(storageError(this.dir, 'log failed', this.failed));
    if (!Array.isArray(records) || records.length === 0) return Promise.reject(invalidParam('records', 'must be a non-empty array'));
    const n = records.length;
    const sizes = new Array<number>(n);
    const offsets = new Array<number>(n);
    let bytes = 0;
    for (let i = 0; i < n; i++) {
      const r = records[i];
      const offset = r?.offset;
      if (!Number.isSafeInteger(offset) || offset < 0) return Promise.reject(invalidParam('records', `record ${i}: bad offset ${offset}`));
      if (typeof r.timestamp !== 'number') return Promise.reject(invalidParam('records', `record ${i}: timestamp must be a non-negative safe integer`));
      const reason = validateEncodable(r);
      if (reason) return Promise.reject(invalidParam('records', `record ${i}: ${reason}`));
      if (i > 0) {
        const prev = offsets[i - 1];
        if (offset <= prev) return Promise.reject(invalidParam('records', `record ${i}: offsets must be strictly increasing (${offset} after ${prev})`));
        if (offset !== prev + 1 && ((records[i - 1].attributes ?? 0) & ATTR_END_OF_APPEND) === 0) {
          return Promise.reject(invalidParam('records', `record ${i}: offset gap (${prev} to ${offset}) inside an append`));
        }
      }
      offsets[i] = offset;
      sizes[i] = encodedSize(r);
      bytes += sizes[i];
    }
    if (((records[n - 1].attributes ?? 0) & ATTR_END_OF_APPEND) === 0) {
      return Promise.reject(invalidParam('records', 'the last record does not end an append (ATTR_END_OF_APPEND): pass whole appends only'));
    }
    const first = offsets[0];
    const last = offsets[n - 1];
    if (first < this.logEndOffset) return Promise.reject(invalidParam('records', `first offset ${first} is below the log end offset ${this.logEndOffset}`));
    if (last - first > MAX_RELATIVE_OFFSET) return Promise.reject(invalidParam('records', 'offsets span more than 2^32: split the call at an append boundary'));
    if (bytes > MAX_BATCH_BYTES) return Promise.reject(new TributaryError('record_too_large', { size: bytes, max: MAX_BATCH_BYTES }));
    const buf = Buffer.allocUnsafe(bytes);
    const starts = new Array<number>(n + 1);
    let maxTimestamp = -1;
    let p = 0;
    for (let i = 0; i < n; i++) {
      const r = records[i];
      const end = encodeRecordInto(buf, p, r);
      if (end - p !== sizes[i]) return Promise.reject(storageError(this.dir, 'record encoding size mismatch'));
      starts[i] = p;
      if (r.timestamp > maxTimestamp) maxTimestamp = r.timestamp;
      p = end;
    }
    starts[n] = p;
    const replica: ReplicaWrite = { buf, starts, offsets, maxTimestamp };
    return new Promise<AppendResult>((resolve, reject) => {
      this.pending.push({ records: NO_RECORDS, replica, sizes, bytes, resolve, reject });
      this.scheduleDrain();
    });
  }

  private scheduleDrain(): void {
    if (this.drainScheduled) return;
    this.drainScheduled = true;
    void this.mutex.run(async () => {
      this.drainScheduled = false;
      await this.drain();
    });
  }

  /** Writes queued appends; must run inside the mutex. Yields to queued exclusive operations unless `force`. */
  private async drain(force = false): Promise<void> {
    while (this.pending.length > 0) {
      if (this.exclusiveWaiting > 0 && !force) {
        this.scheduleDrain();
        return;
      }
      if (this.failed || this.state === 'closed') {
        const err = this.failed ? storageError(this.dir, 'log failed', this.failed) : storageError(this.dir, 'log is closed');
        for (const p of this.pending.splice(0)) p.reject(err);
        return;
      }
      const { segmentBytes, segmentMs } = this.options;
      let group: PendingAppend[] = [];
      try {
        const now = Date.now();
        const first = this.pending[0];
        if (first.replica) {
          // A replica append is a write of its own: it carries its offsets, checked against the log end it lands on.
          group = this.pending.splice(0, 1);
          await this.writeReplica(first, first.replica, now);
          continue;
        }
        let seg = this.active;
        if (seg.size > 0 && (seg.size + first.bytes > segmentBytes || now - seg.createdMs >= segmentMs)) {
          await this.roll();
          seg = this.active;
        }
        // A batch never spans segments; several batches share one write while they fit.
        let n = 1;
        let bytes = first.bytes;
        while (n < this.pending.length && !this.pending[n].replica) {
          const b = this.pending[n].bytes;
          if (bytes + b > MAX_GROUP_BYTES || seg.size + bytes + b > segmentBytes) break;
          bytes += b;
          n++;
        }
        group = this.pending.splice(0, n);
        await this.writeGroup(seg, group, bytes, now);
      } catch (err) {
        // roll() failed before the group was taken: fail the first append rather than retry forever.
        if (group.length === 0) group = this.pending.splice(0, 1);
        const e = err instanceof TributaryError ? err : storageError(this.dir, 'append failed', err);
        for (const p of group) p.reject(e);
      }
    }
  }

  private async writeGroup(seg: Segment, group: PendingAppend[], bytes: number, now: number): Promise<void> {
    const buf = Buffer.allocUnsafe(bytes);
    // Where each record starts in `buf`, then the end: for the index and the tail cache.
    const recStarts: number[] = [];
    const firstOffset = seg.nextOffset;
    let offset = firstOffset;
    let maxTs = seg.maxTimestamp;
    let p = 0;
    for (const b of group) {
      const base = offset;
      const wire = b.wire;
      if (wire) {
        const { body, starts, extensions, count } = wire;
        const sizes = b.sizes;
        for (let i = 0; i < count; i++) {
          const end = writeStoredFromWire(body, starts[i], starts[i + 1], extensions, buf, p, offset, now, i === count - 1 ? ATTR_END_OF_APPEND : 0);
          if (end - p !== sizes[i]) throw storageError(this.dir, 'record encoding size mismatch');
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
        const timestamp = r.timestamp ? r.timestamp : now;
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
        if (end - p !== b.sizes[i]) throw storageError(this.dir, 'record encoding size mismatch');
        recStarts.push(p);
        if (timestamp > maxTs) maxTs = timestamp;
        p = end;
        offset++;
      }
      b.result = { baseOffset: base, lastOffset: offset - 1, timestamp: now };
    }
    recStarts.push(p);
    const startSize = seg.size;
    try {
      await seg.writeAt(buf, startSize);
    } catch (err) {
      // Roll back a partial write so the file never ends in bytes nobody acknowledged.
      await seg.withHandle((fh) => fh.truncate(startSize)).catch((e: unknown) => this.fail(e));
      throw storageError(this.dir, 'write failed', err);
    }
    // Publish only after the bytes are in the file: readers never see a partial record.
    for (let i = 0; i < recStarts.length - 1; i++) seg.index.onRecord(firstOffset + i, startSize + recStarts[i]);
    seg.size = startSize + bytes;
    seg.nextOffset = offset;
    seg.maxTimestamp = maxTs;
    seg.markModified();
    this.totalBytes += bytes;
    this.dirty.add(seg);
    this.cache.append(buf, firstOffset, recStarts);
    if (this.options.flush === 'always') {
      for (const b of group) this.syncWaiters.push(b);
      this.kickSync();
    } else {
      for (const b of group) b.resolve(b.result as AppendResult);
    }
  }

  /** Writes one appendReplica call (inside the mutex): rolls as for append(), then writes it as encoded. */
  private async writeReplica(b: PendingAppend, rw: ReplicaWrite, now: number): Promise<void> {
    const { buf, starts, offsets } = rw;
    const first = offsets[0];
    const last = offsets[offsets.length - 1];
    // Appends queued before this one may have moved the log end since the call was accepted.
    if (first < this.logEndOffset) throw invalidParam('records', `first offset ${first} is below the log end offset ${this.logEndOffset}`);
    const { segmentBytes, segmentMs } = this.options;
    let seg = this.active;
    if (seg.size > 0 && (seg.size + b.bytes > segmentBytes || now - seg.createdMs >= segmentMs)) await this.roll();
    if (last - this.active.baseOffset > MAX_RELATIVE_OFFSET) await this.roll(first);
    seg = this.active;
    const startSize = seg.size;
    try {
      await seg.writeAt(buf, startSize);
    } catch (err) {
      await seg.withHandle((fh) => fh.truncate(startSize)).catch((e: unknown) => this.fail(e));
      throw storageError(this.dir, 'write failed', err);
    }
    // Gaps are fine for the index (greatest entry <= offset, then a scan) and for reads, which step over them.
    for (let i = 0; i < offsets.length; i++) seg.index.onRecord(offsets[i], startSize + starts[i]);
    seg.size = startSize + b.bytes;
    seg.nextOffset = last + 1;
    if (rw.maxTimestamp > seg.maxTimestamp) seg.maxTimestamp = rw.maxTimestamp;
    seg.markModified();
    this.totalBytes += b.bytes;
    this.dirty.add(seg);
    // The tail cache holds consecutive offsets ending at the LEO: cache the last run without a gap (a gap before
    // it, from the LEO or inside the call, empties the cache first).
    let run = offsets.length - 1;
    while (run > 0 && offsets[run - 1] === offsets[run] - 1) run--;
    this.cache.append(buf, offsets[run], run === 0 ? starts : starts.slice(run));
    b.result = { baseOffset: first, lastOffset: last, timestamp: now };
    if (this.options.flush === 'always') {
      this.syncWaiters.push(b);
      this.kickSync();
    } else {
      b.resolve(b.result);
    }
  }

  /**
   * Closes the active segment and starts a new one at the LEO, or at `base` when given and above it (replica
   * appends past what the index of the active segment can address). Runs inside the mutex.
   */
  private async roll(base?: number): Promise<void> {
    const old = this.active;
    const durable = this.options.flush !== 'os';
    if (durable) {
      try {
        await old.datasync();
      } catch (err) {
        this.fail(err);
        throw storageError(this.dir, 'fsync failed', err);
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
        throw storageError(this.dir, 'could not write segment index', err);
      }
    } else {
      try {
        await old.writeIndex(durable);
      } catch (err) {
        // Not fatal: recovery rebuilds a missing or stale index.
        this.logger.warn({ err, segment: old.baseOffset }, 'could not write segment index');
      }
    }
    const seg = await Segment.create(this.dir, old.nextOffset, this.options.indexIntervalBytes, Date.now());
    this.segments.push(seg);
    if (durable) await fsyncDir(this.dir);
    this.logger.debug({ segment: seg.baseOffset, previousBytes: old.size }, 'rolled segment');
    // Keep fds for the active and previous segment only.
    const older = this.segments[this.segments.length - 3];
    if (older) this.releaseLater(older);
  }

  // ---------------------------------------------------------------- durability

  private kickSync(): void {
    this.syncRequested = true;
    if (this.syncing) return;
    this.syncing = true;
    this.syncDone = this.syncLoop();
  }

  /**
   * Group commit: every waiter taken at the start of a pass had its write completed before the fsync
   * starts, so one datasync covers all of them; appends finishing meanwhile wait for the next pass.
   */
  private async syncLoop(): Promise<void> {
    try {
      while (this.syncRequested) {
        this.syncRequested = false;
        const waiters = this.syncWaiters;
        this.syncWaiters = [];
        const segs = [...this.dirty];
        this.dirty.clear();
        let error: Error | null = null;
        try {
          for (const s of segs) if (!s.deleted) await s.datasync();
        } catch (err) {
          this.fail(err);
          error = storageError(this.dir, 'fsync failed', err);
        }
        for (const w of waiters) {
          if (error) w.reject(error);
          else w.resolve(w.result as AppendResult);
        }
      }
    } finally {
      this.syncing = false;
    }
  }

  private async syncIdle(): Promise<void> {
    while (this.syncing) await this.syncDone;
  }

  /** After a failed fsync the page cache state is unknown: refuse further appends (reads still work). */
  private fail(err: unknown): void {
    if (this.failed) return;
    this.failed = err instanceof Error ? err : new Error(String(err));
    this.logger.error({ err: this.failed }, 'partition log failed; appends are refused until reopen');
  }

  private onTimer(): void {
    if (this.state !== 'open') return;
    if (this.options.flush === 'interval' && this.dirty.size > 0 && !this.exclusiveActive) this.kickSync();
    this.checkpointHwm().catch((err: unknown) => this.logger.warn({ err }, 'could not write HWM checkpoint'));
  }

  /** fsyncs every dirty segment and writes the HWM checkpoint. */
  async flush(): Promise<void> {
    if (this.state === 'closed') throw storageError(this.dir, 'log is closed');
    await this.exclusive(async () => {
      if (this.state === 'closed') throw storageError(this.dir, 'log is closed');
      this.kickSync();
      await this.syncIdle();
      if (this.failed) throw storageError(this.dir, 'log failed', this.failed);
      // Closed segments rolled without fsync ('os' mode) are synced now, so their index can say so.
      for (let i = 0; i < this.segments.length - 1; i++) {
        const s = this.segments[i];
        if (s.indexState !== 'synced') await s.writeIndex(true);
      }
      await this.checkpointHwm();
    });
  }

  private async readCheckpoint(): Promise<number> {
    try {
      const m = HWM_RE.exec(await readFile(join(this.dir, HWM_CHECKPOINT_FILE), 'utf8'));
      if (m) return Number(m[1]);
      this.logger.warn('ignoring malformed HWM checkpoint');
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'ENOENT') this.logger.warn({ err }, 'could not read HWM checkpoint');
    }
    return 0;
  }

  private async checkpointHwm(): Promise<void> {
    while (this.checkpointing) await this.checkpointing;
    const v = this.hwm;
    if (v === this.checkpointedHwm) return;
    const p = writeFileAtomic(join(this.dir, HWM_CHECKPOINT_FILE), `tributary-hwm 1 ${v}\n`, { syncDir: false }).then(() => {
      this.checkpointedHwm = v;
    });
    this.checkpointing = p.then(
      () => undefined,
      () => undefined,
    );
    try {
      await p;
    } finally {
      this.checkpointing = null;
    }
  }

  private exclusive<T>(fn: () => Promise<T>): Promise<T> {
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

  // ---------------------------------------------------------------- read

  /**
   * Records from `offset` on, up to maxRecords / maxBytes (encoded size) and below maxOffset, but at least
   * one when one exists. Returned buffers are shared (tail cache): treat them as read-only.
   */
  async read(offset: number, opts: ReadOptions): Promise<LogRecord[]> {
    if (this.state === 'closed') throw storageError(this.dir, 'log is closed');
    if (!Number.isSafeInteger(offset)) throw invalidParam('offset', 'must be a safe integer');
    const start = this.logStartOffset;
    const leo = this.logEndOffset;
    if (offset < start || offset > leo) {
      throw new TributaryError('OFFSET_OUT_OF_RANGE', { requested: offset, earliest: start, latest: leo });
    }
    const limit = opts.maxOffset === undefined ? leo : Math.min(leo, opts.maxOffset);
    const maxRecords = opts.maxRecords;
    const maxBytes = opts.maxBytes;
    if (offset >= limit || !(maxRecords >= 1)) return [];
    if (opts.keepAppendMarker) {
      if (!opts.wholeAppends) return this.readFromDisk(offset, limit, maxRecords, maxBytes, true);
      const recs = await this.readFromDisk(offset, limit, maxRecords, maxBytes, true, true);
      recs.length = wholeAppendCount(recs);
      return recs;
    }
    const cached = this.cache.read(offset, limit, maxRecords, maxBytes);
    if (cached) return cached;
    return this.readFromDisk(offset, limit, maxRecords, maxBytes);
  }

  /**
   * A CONSUME reply batch of the records read() would return (minus control records when
   * `w.skipControl`), written from the tail cache without materialising records; with extensions, the
   * trailer carries this log's high watermark and start offset. Null when the read is not served from the
   * tail cache or returns nothing: the caller then takes read() + encodeBatch.
   */
  readWire(offset: number, opts: ReadOptions, w: WireReadRequest): { frame: Buffer; count: number; valueBytes: number; nextOffset: number } | null {
    if (this.state === 'closed' || !Number.isSafeInteger(offset)) return null;
    const leo = this.logEndOffset;
    if (offset < this.logStartOffset || offset > leo) return null;
    const limit = opts.maxOffset === undefined ? leo : Math.min(leo, opts.maxOffset);
    if (offset >= limit || !(opts.maxRecords >= 1)) return null;
    const r = this.cache.readWire(offset, limit, opts.maxRecords, opts.maxBytes, w);
    if (!r) return null;
    let at = r.at;
    if (w.extensions) at = writeTrailer(r.buf, at, { nextOffset: r.nextOffset, highWatermark: this.highWatermark, logStartOffset: this.logStartOffset });
    return { frame: at === r.buf.length ? r.buf : r.buf.subarray(0, at), count: r.count, valueBytes: r.valueBytes, nextOffset: r.nextOffset };
  }

  private segmentFor(offset: number): Segment | null {
    const segs = this.segments;
    let lo = 0;
    let hi = segs.length - 1;
    let found = -1;
    while (lo <= hi) {
      const mid = (lo + hi) >>> 1;
      if (segs[mid].baseOffset <= offset) {
        found = mid;
        lo = mid + 1;
      } else {
        hi = mid - 1;
      }
    }
    return found < 0 ? null : segs[found];
  }

  private async readFromDisk(offset: number, limit: number, maxRecords: number, maxBytes: number, keepMarker = false, whole = false): Promise<LogRecord[]> {
    const out: LogRecord[] = [];
    let bytes = 0;
    let next = offset;
    let done = false;
    let retries = 0;
    // `whole`: the last record returned does not end its append, so the limits do not apply yet.
    let inAppend = false;
    while (!done && next < limit && (out.length < maxRecords || inAppend)) {
      const seg = this.segmentFor(next);
      if (!seg || seg.deleted) return this.raced(out, offset);
      const version = seg.version;
      // Read together (appends update both at once): the records below segNext all lie before `end`.
      const end = seg.size;
      const segNext = seg.nextOffset;
      let pos = seg.index.lookup(next).position;
      const startNext = next;
      let need = 0;
      let stale = false;
      this.touchClosed(seg);
      while (!done && !stale && pos < end) {
        // Size the read to what the caller can take, plus the skip from the index entry.
        const avg = seg.recordCount > 0 ? Math.ceil(end / seg.recordCount) : READ_CHUNK_MIN;
        const wanted = Math.min(maxBytes - bytes, (maxRecords - out.length) * avg, READ_CHUNK_MAX);
        const chunk = Math.min(end - pos, Math.max(need, READ_CHUNK_MIN, wanted + seg.index.intervalBytes));
        let buf: Buffer;
        try {
          buf = await seg.read(pos, chunk);
        } catch (err) {
          if (seg.deleted || seg.version !== version) {
            stale = true;
            break;
          }
          throw storageError(this.dir, 'read failed', err);
        }
        if (buf.length === 0) {
          stale = true;
          break;
        }
        need = 0;
        let p = 0;
        while (p < buf.length) {
          const r = decodeRecord(buf, p);
          if (!r.ok) {
            const needed = r.needed ?? 4;
            if (r.reason === 'incomplete' && buf.length === chunk && pos + p + needed <= end) {
              need = needed;
              break;
            }
            if (seg.deleted || seg.version !== version) {
              stale = true;
              break;
            }
            throw storageError(this.dir, `corrupt record in segment ${seg.baseOffset} at position ${pos + p}`);
          }
          const rec = r.record;
          // Below `next`: the skip from the index entry. Above it: a gap left by compaction.
          if (rec.offset < next) {
            p += r.size;
            continue;
          }
          if (rec.offset >= limit || (out.length > 0 && bytes + r.size > maxBytes && !inAppend)) {
            done = true;
            break;
          }
          if (whole) inAppend = (rec.attributes & ATTR_END_OF_APPEND) === 0;
          if (!keepMarker) rec.attributes &= USER_ATTR_MASK;
          out.push(rec);
          bytes += r.size;
          next = rec.offset + 1;
          p += r.size;
          if (out.length >= maxRecords && !inAppend) {
            done = true;
            break;
          }
        }
        pos += p;
      }
      if (stale) {
        // Compaction swapped the file in: the replacement holds the same offsets, so carry on from `next`.
        if (seg.superseded && retries++ < 8) continue;
        return this.raced(out, offset);
      }
      // Past the segment's last record but not its end (a compacted tail): the rest is in later segments.
      if (!done && next < segNext) next = segNext;
      // No progress means the segment view went stale (truncation); never spin.
      if (next === startNext) break;
    }
    return out;
  }

  /** A read raced with retention/truncation: return what was read, or report the now-missing offset. */
  private raced(out: LogRecord[], offset: number): LogRecord[] {
    if (out.length > 0) return out;
    const start = this.logStartOffset;
    const leo = this.logEndOffset;
    if (offset < start || offset > leo) throw new TributaryError('OFFSET_OUT_OF_RANGE', { requested: offset, earliest: start, latest: leo });
    return out;
  }

  /** Bounds fds held by closed segments that readers touched (LRU). */
  private touchClosed(seg: Segment): void {
    const n = this.segments.length;
    if (seg === this.segments[n - 1] || seg === this.segments[n - 2]) return;
    const i = this.openClosed.indexOf(seg);
    if (i >= 0) this.openClosed.splice(i, 1);
    this.openClosed.push(seg);
    while (this.openClosed.length > MAX_OPEN_CLOSED_SEGMENTS) this.releaseLater(this.openClosed.shift() as Segment);
  }

  private releaseLater(seg: Segment): void {
    seg.release().catch((err: unknown) => this.logger.debug({ err }, 'could not release segment fd'));
  }

  // ---------------------------------------------------------------- queries and maintenance

  /** First offset whose timestamp is >= ts, or the LEO. */
  async offsetForTimestamp(ts: number): Promise<number> {
    for (let attempt = 0; ; attempt++) {
      let retry = false;
      for (const seg of [...this.segments]) {
        if (seg.superseded) {
          retry = true;
          break;
        }
        if (seg.deleted || seg.maxTimestamp < ts) continue;
        try {
          const o = await seg.firstOffsetAtOrAfter(ts);
          if (o !== null) return o;
        } catch (err) {
          if (seg.superseded) {
            retry = true;
            break;
          }
          if (!seg.deleted) throw storageError(this.dir, 'read failed', err);
        }
      }
      // A compaction swap replaced a segment mid-scan: the new list has it under the same offsets.
      if (!retry || attempt >= 8) return this.logEndOffset;
    }
  }

  /** Deletes whole closed segments by time and size retention. Never deletes the active segment. */
  async applyRetention(now: number = Date.now()): Promise<{ deletedSegments: number; deletedBytes: number }> {
    const { retentionMs, retentionBytes, segmentMs } = this.options;
    if (retentionMs < 0 && retentionBytes < 0) return { deletedSegments: 0, deletedBytes: 0 };
    if (this.state !== 'open') throw storageError(this.dir, 'log is closed');
    return this.exclusive(async () => {
      if (this.state === 'closed') throw storageError(this.dir, 'log is closed');
      if (this.failed) throw storageError(this.dir, 'log failed', this.failed);
      if (this.active.size > 0 && now - this.active.createdMs >= segmentMs) await this.roll();
      let total = this.totalBytes;
      let n = 0;
      for (let i = 0; i < this.segments.length - 1; i++) {
        const s = this.segments[i];
        const expired = retentionMs >= 0 && s.maxTimestamp < now - retentionMs;
        const oversized = retentionBytes >= 0 && total > retentionBytes;
        if (!expired && !oversized) break;
        total -= s.size;
        n++;
      }
      if (n === 0) return { deletedSegments: 0, deletedBytes: 0 };
      // No fsync may be in flight on a segment being deleted.
      await this.syncIdle();
      const doomed = this.segments.splice(0, n);
      const deletedBytes = this.totalBytes - total;
      this.totalBytes = total;
      this.cache.dropBefore(this.logStartOffset);
      if (this.hwm < this.logStartOffset) this.hwm = this.logStartOffset;
      for (const s of doomed) {
        this.dirty.delete(s);
        const i = this.openClosed.indexOf(s);
        if (i >= 0) this.openClosed.splice(i, 1);
        await s.remove();
      }
      this.logger.info({ deletedSegments: n, deletedBytes, logStartOffset: this.logStartOffset }, 'retention deleted segments');
      return { deletedSegments: n, deletedBytes };
    });
  }

  /**
   * Rewrites the closed segments keeping, per key, only the record with the highest offset in the whole
   * log (active segment included); null keys are kept, and a tombstone (empty value) is kept until it is
   * older than `tombstoneRetentionMs`. Kept records keep their offsets and each becomes a complete append.
   * Each segment is written to a temp file, fsynced and renamed over the old one (index first), so a crash
   * leaves the old or the new segment. Reads and appends continue meanwhile; only the swap is exclusive.
   * Calls run one at a time.
   */
  compact(opts: CompactOptions = {}): Promise<CompactResult> {
    const tombstoneMs = opts.tombstoneRetentionMs ?? DEFAULT_TOMBSTONE_RETENTION_MS;
    if (!Number.isSafeInteger(tombstoneMs) || tombstoneMs < 0) return Promise.reject(invalidParam('tombstoneRetentionMs', 'must be a non-negative integer'));
    if (opts.now !== undefined && !Number.isSafeInteger(opts.now)) return Promise.reject(invalidParam('now', 'must be a safe integer'));
    if (this.state !== 'open') return Promise.reject(storageError(this.dir, 'log is closed'));
    this.compactions++;
    return this.compactMutex.run(() => this.runCompaction(opts.now ?? Date.now(), tombstoneMs, opts.crashAt)).finally(() => this.compactions--);
  }

  private async runCompaction(now: number, tombstoneMs: number, crashAt: CompactOptions['crashAt']): Promise<CompactResult> {
    const none: CompactResult = { segmentsCompacted: 0, recordsRemoved: 0, bytesBefore: 0, bytesAfter: 0 };
    if (this.state !== 'open') return none;
    if (this.failed) throw storageError(this.dir, 'log failed', this.failed);
    // Only closed segments are compacted: an old active segment is rolled first, as retention does.
    if (this.active.size > 0 && now - this.active.createdMs >= this.options.segmentMs) {
      await this.exclusive(async () => {
        if (this.state === 'open' && !this.failed && this.active.size > 0 && now - this.active.createdMs >= this.options.segmentMs) await this.roll();
      });
    }
    if (this.state !== 'open' || this.segments.length < 2) return none;
    const closed = this.segments.slice(0, -1).map((seg) => ({ seg, version: seg.version }));
    const active = this.active;
    const activeEnd = active.size;
    const truncations = this.truncations;
    const prepared: PreparedCompaction[] = [];
    try {
      // Pass 1: the newest offset of every key. Records appended later only make us keep more.
      const latest = new Map<string, number>();
      const noteKeys = (r: RecordInfo, rec: LogRecord) => {
        if (rec.key) latest.set(rec.key.toString('latin1'), r.offset);
        return true;
      };
      for (const { seg } of closed) await this.scanForCompaction(seg, 0, seg.size, noteKeys);
      await this.scanForCompaction(active, 0, activeEnd, noteKeys);

      const keep = (r: RecordInfo, rec: LogRecord): boolean => {
        if (!rec.key) return true;
        if (latest.get(rec.key.toString('latin1')) !== r.offset) return false;
        return rec.value.length > 0 || now - rec.timestamp <= tombstoneMs;
      };
      // Pass 2: rewrite each closed segment that loses records.
      for (const { seg, version } of closed) {
        let removed = 0;
        await this.scanForCompaction(seg, 0, seg.size, (r, rec) => {
          if (!keep(r, rec)) removed++;
          return true;
        });
        if (removed === 0) continue;
        const p = await this.writeCompacted(seg, version, keep);
        prepared.push({ ...p, removed });
        if (this.state !== 'open') throw new CompactionAborted();
      }
      if (prepared.length === 0) return none;
      if (crashAt === 'temp-written') throw new SimulatedCrash(crashAt);
      return await this.exclusive(() => this.swapCompacted(prepared, truncations, crashAt));
    } catch (err) {
      // The test hook leaves the files exactly as a dead process would.
      if (err instanceof SimulatedCrash) throw err;
      for (const p of prepared) await this.removeTemp(p);
      if (err instanceof CompactionAborted || this.state !== 'open') return none;
      throw err instanceof TributaryError ? err : storageError(this.dir, 'compaction failed', err);
    } finally {
      for (const { seg } of closed) this.releaseIfIdle(seg);
    }
  }

  /** scanRecords over a segment that compaction reads; a segment removed or cut meanwhile aborts the compaction. */
  private async scanForCompaction(seg: Segment, from: number, end: number, onRecord: (r: RecordInfo, rec: LogRecord) => boolean): Promise<number> {
    const version = seg.version;
    let out: ScanOutcome;
    try {
      // Stops early once the log starts closing, so close() does not wait for a whole pass.
      out = await seg.scanRecords(from, end, (r, rec) => this.state === 'open' && onRecord(r, rec));
    } catch (err) {
      if (seg.deleted || seg.version !== version || this.state !== 'open') throw new CompactionAborted();
      throw err;
    }
    if (this.state !== 'open') throw new CompactionAborted();
    if (out.failure !== null) {
      if (seg.deleted || seg.version !== version || this.state !== 'open') throw new CompactionAborted();
      throw storageError(this.dir, `corrupt record in segment ${seg.baseOffset} at position ${out.position}`);
    }
    return out.position;
  }

  /** Writes the kept records of `seg` (and their index) to temp files, fsynced. */
  private async writeCompacted(seg: Segment, version: number, keep: (r: RecordInfo, rec: LogRecord) => boolean): Promise<PreparedCompaction> {
    const tmpLog = seg.logPath + COMPACT_TMP_SUFFIX;
    const tmpIndex = seg.indexPath + COMPACT_TMP_SUFFIX;
    const index = new OffsetIndex(seg.baseOffset, this.options.indexIntervalBytes);
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
        // Stops before the record that would overflow the buffer; the next round starts there.
        pos = await this.scanForCompaction(seg, pos, end, (r, rec) => {
          if (pending >= COMPACT_WRITE_BYTES) return false;
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
          if (rec.timestamp > maxTs) maxTs = rec.timestamp;
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
        if (this.state !== 'open') throw new CompactionAborted();
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
  private async swapCompacted(prepared: PreparedCompaction[], truncations: number, crashAt: CompactOptions['crashAt']): Promise<CompactResult> {
    const res: CompactResult = { segmentsCompacted: 0, recordsRemoved: 0, bytesBefore: 0, bytesAfter: 0 };
    if (this.state !== 'open' || this.failed || this.truncations !== truncations) throw new CompactionAborted();
    // No fsync may be in flight on a segment being replaced.
    await this.syncIdle();
    try {
      for (let k = 0; k < prepared.length; k++) {
        const p = prepared[k];
        const old = p.old;
        const i = this.segments.indexOf(old);
        if (i < 0 || i === this.segments.length - 1 || old.deleted || old.version !== p.version) {
          await this.removeTemp(p);
          continue;
        }
        // Index first: with the old log it is rebuilt yet still says 'compacted'; the range is the same.
        await rename(p.tmpIndex, old.indexPath);
        old.indexState = 'stale';
        await fsyncDir(this.dir);
        if (crashAt === 'index-renamed') throw new SimulatedCrash(crashAt);
        // Until `old` is retired, readers still find it in the list and read it by its (old) index. Its fd
        // stays open on the old file meanwhile: a reader reopening the path after the rename would read the
        // compacted file at the old positions, and return nothing, garbage or skip records.
        await old.holdOpen(async () => {
          await rename(p.tmpLog, old.logPath);
          await fsyncDir(this.dir);
          if (crashAt === 'log-renamed') throw new SimulatedCrash(crashAt);
          const seg = new Segment(this.dir, old.baseOffset, p.index, {
            size: p.size,
            nextOffset: old.nextOffset,
            maxTimestamp: p.maxTimestamp,
            createdMs: old.createdMs,
          });
          seg.compacted = true;
          seg.indexState = 'synced';
          this.segments[i] = seg;
          this.dirty.delete(old);
          const j = this.openClosed.indexOf(old);
          if (j >= 0) this.openClosed.splice(j, 1);
          // Readers still on `old` fail their next read and retry in `seg` (Segment.superseded).
          await old.retire();
        });
        res.segmentsCompacted++;
        res.recordsRemoved += p.removed;
        res.bytesBefore += old.size;
        res.bytesAfter += p.size;
      }
    } finally {
      this.totalBytes = this.segments.reduce((a, s) => a + s.size, 0);
      // Cached records below the active segment may be ones compaction removed.
      this.cache.dropBefore(this.active.baseOffset);
    }
    if (res.segmentsCompacted > 0) {
      this.logger.debug({ ...res, logStartOffset: this.logStartOffset }, 'compacted segments');
    }
    return res;
  }

  private async removeTemp(p: { tmpLog: string; tmpIndex: string }): Promise<void> {
    await unlink(p.tmpLog).catch(() => {});
    await unlink(p.tmpIndex).catch(() => {});
  }

  /** Compaction reads reopen fds of old segments; give them back unless readers hold them. */
  private releaseIfIdle(seg: Segment): void {
    const n = this.segments.length;
    if (seg.deleted || seg === this.segments[n - 1] || seg === this.segments[n - 2] || this.openClosed.includes(seg)) return;
    this.releaseLater(seg);
  }

  /** Drops every record >= offset. Below the log start, the log becomes empty starting at `offset`. */
  async truncateTo(offset: number): Promise<void> {
    if (!Number.isSafeInteger(offset) || offset < 0) throw invalidParam('offset', 'must be a non-negative safe integer');
    if (this.state !== 'open') throw storageError(this.dir, 'log is closed');
    await this.exclusive(async () => {
      if (this.state === 'closed') throw storageError(this.dir, 'log is closed');
      if (offset >= this.logEndOffset) return;
      await this.syncIdle();
      this.truncations++;
      const before = this.logEndOffset;
      try {
        let keep: number;
        if (offset < this.logStartOffset) {
          keep = 0;
        } else {
          keep = this.segments.indexOf(this.segmentFor(offset) as Segment) + 1;
          // An empty segment starting exactly at offset is dropped too, so the name can be reused.
          if (this.segments[keep - 1].baseOffset === offset && keep > 1) keep--;
        }
        const doomed = this.segments.splice(keep);
        for (const s of doomed) {
          this.dirty.delete(s);
          const i = this.openClosed.indexOf(s);
          if (i >= 0) this.openClosed.splice(i, 1);
          await s.remove();
        }
        if (this.segments.length === 0) {
          this.segments.push(await Segment.create(this.dir, offset, this.options.indexIntervalBytes, Date.now()));
        } else {
          await this.active.truncateTo(offset);
        }
        if (this.options.flush !== 'os') {
          await this.active.datasync();
          await fsyncDir(this.dir);
        } else {
          this.dirty.add(this.active);
        }
      } catch (err) {
        this.fail(err);
        throw storageError(this.dir, 'truncate failed', err);
      } finally {
        this.totalBytes = this.segments.reduce((a, s) => a + s.size, 0);
      }
      this.openClosed = this.openClosed.filter((s) => !s.deleted && s !== this.active);
      this.cache.truncateFrom(offset);
      this.cache.dropBefore(this.logStartOffset);
      this.hwm = this.clampHwm(this.hwm);
      // A checkpoint above the new end would, after a crash, let the HWM cover the records appended in place
      // of the cut ones (a follower appending its new leader's records before they are committed).
      if (this.checkpointedHwm > this.hwm) {
        try {
          await this.checkpointHwm();
        } catch (err) {
          throw storageError(this.dir, 'could not write HWM checkpoint', err);
        }
      }
      this.logger.info({ from: before, to: offset }, 'log truncated');
    });
  }

  // ---------------------------------------------------------------- lifecycle

  /** Flushes, writes indexes, the HWM checkpoint and the clean-shutdown marker, and closes fds. */
  close(): Promise<void> {
    this.closePromise ??= this.shutdown(true);
    return this.closePromise;
  }

  /**
   * Test hook simulating a crash: drops the fds without fsync, index files or clean-shutdown marker,
   * so the next open runs recovery. Queued appends are written first (as if the process died after).
   */
  simulateCrash(): Promise<void> {
    this.closePromise ??= this.shutdown(false);
    return this.closePromise;
  }

  /** Closes and removes the directory. */
  async destroy(): Promise<void> {
    this.closePromise ??= this.shutdown(false);
    await this.closePromise.catch(() => {});
    await rm(this.dir, { recursive: true, force: true });
  }

  private async shutdown(clean: boolean): Promise<void> {
    if (this.state !== 'open') return;
    this.state = 'closing';
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
    // A running compaction sees the state and gives up at its next record; let it clean up first.
    if (this.compactions > 0) await this.compactMutex.run(async () => {});
    await this.mutex.run(async () => {
      // Appends accepted before close still get written.
      await this.drain(true);
      await this.syncIdle();
      let error: unknown = null;
      if (clean && !this.failed) {
        try {
          for (const s of this.segments) if (this.dirty.has(s) || s.indexState !== 'synced') await s.datasync();
          this.dirty.clear();
          for (const s of this.segments) if (s.indexState !== 'synced') await s.writeIndex(true);
          await this.checkpointHwm();
          await writeFileAtomic(join(this.dir, CLEAN_SHUTDOWN_FILE), `${Date.now()}\n`, { syncDir: false });
          await fsyncDir(this.dir);
        } catch (err) {
          error = err;
          this.logger.error({ err }, 'clean shutdown failed; the next open will run recovery');
        }
      }
      while (this.checkpointing) await this.checkpointing;
      for (const s of this.segments) await s.close().catch(() => {});
      this.state = 'closed';
      for (const p of this.pending.splice(0)) p.reject(storageError(this.dir, 'log is closed'));
      if (error) throw storageError(this.dir, 'close failed', error);
    });
  }
}

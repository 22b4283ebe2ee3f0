/**
 * The tail cache of a partition log: recently appended records served to tail readers without a disk read,
 * and written straight into CONSUME reply batches (docs/protocol.md) by readWire.
 */
import { type LogRecord, RecordAttr } from 'tributary-protocol/record.js';
import { BLOCK_RECORD_EXTRA, blockLeftOut, blockRecordAt, blockRecordCostAt, decodeBlockRecord } from './block-records.js';
import { decodeOwnRecord, READ_HEADER_COST, storedHeaderCount, USER_ATTR_MASK } from './record-codec.js';
import type { ReplyWriter, WireFormat } from './reply-writer.js';
import type { FramePool } from './frame-pool.js';
import type { BudgetedCache, TailCacheBudget } from './tail-cache-budget.js';
import { TailReaders } from './tail-readers.js';

/**
 * What a cache keeps however little its readers lag: a consumer that starts or takes over a partition a
 * little behind the others still reads from memory.
 */
export const MIN_KEPT_BYTES = 1024 * 1024;
/** A cache keeps this many times the largest lag its readers read at lately (TailReaders). */
const READER_MARGIN = 2;

/**
 * What a chunk costs besides the memory its buffer pins, as charged to the broker-wide budget: its Buffer
 * and ArrayBuffer objects, the chunk and its `starts` array (measured in a heap snapshot of 330,000 cached
 * one-record writes, a chunk each: 96 + 88 + 56 + 32 bytes, about 270 in all, more than a 100-byte record
 * itself); the `starts` entries are charged 8 bytes each on top.
 */
export const CHUNK_COST = 288;

/**
 * Memory a chunk holds while any of its records is cached: the whole ArrayBuffer under its buffer (a
 * write's own buffer, or the write-arena block its writes share, whatever is evicted or not yet written
 * of it; two chunks of one block are both charged the block), plus its objects.
 */
function chunkCost(c: CacheChunk): number {
  return c.buf.buffer.byteLength + CHUNK_COST + 8 * c.starts.length;
}

/** What an evicted chunk's slot holds until `compact` drops it. */
const EVICTED: CacheChunk = { buf: Buffer.alloc(0), base: -1, count: 0, starts: [0], flags: -1, headerless: false, pooled: false };

/**
 * A run of cached writes: `buf` as written, record i at starts[i] .. starts[i + 1]. Writes that follow
 * each other in one write-arena block (and in offsets) share a chunk, `buf` then a view over all of them.
 */
interface CacheChunk {
  buf: Buffer;
  /** Offset of record 0. */
  base: number;
  /** Records cached (truncateFrom may lower it). */
  count: number;
  /** count + 1 positions in `buf` (plain numbers: no per-chunk backing store). */
  starts: number[];
  /**
   * -1: records in the per-record layout (record-codec.ts). Else the chunk is (part of) one append block,
   * `starts` its wire records (block-records.ts), and this the block's flags.
   */
  flags: number;
  /**
   * A block chunk whose records carry no headers (an append without record_extensions_v1): a read charges
   * each record without reading its bytes.
   */
  headerless: boolean;
  /** `buf` is frame-pool memory this chunk holds (the frame's hold, handed over), let go when the chunk leaves. */
  pooled: boolean;
}

/** Record i of the block chunk `c`, as block-records.ts reads it. */
function blockRecordOf(c: CacheChunk, i: number) {
  return blockRecordAt(c.buf, c.starts[i], c.starts[i + 1], c.base + i, false);
}

/** What a CONSUME reply batch is written for: the partition, the batch format and the records to leave out. */
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
  /**
   * A read from the segment files (LogReader.readWireFromDisk) asks for skipAborted once it knows the
   * offsets it read, [from, to): compaction may leave gaps.
   */
  abortedFor?: ((from: number, to: number) => WireReadRequest['skipAborted']) | null;
  /** Where the reply's memory comes from (the broker's ReplyBuffers); Buffer.allocUnsafe without it. */
  alloc?: (bytes: number) => Buffer;
  /** What the reply is (reply-writer.ts): a CONSUME reply batch unless said otherwise. */
  format?: WireFormat;
  /**
   * The caller writes the reply as pieces (WireRead.parts): runs of block records the reply takes as they
   * are go out as views of the cached memory, not copied (docs/architecture.md, "Broker", reply buffers).
   */
  views?: boolean;
}

export interface WireRead {
  /** The reply so far: what the writer's begin() wrote and the records, up to `at` (its finish() completes it). */
  buf: Buffer;
  at: number;
  count: number;
  valueBytes: number;
  nextOffset: number;
  /**
   * With `views`, when a run went out as a view: the reply's pieces before the rest of `buf`, which starts
   * at `from` (buf's pieces and views of cached writes, to be written in order).
   */
  parts?: Buffer[];
  from?: number;
}

/** The pieces of the reply readWire wrote, completed up to `at` (its writer's finish()): one without views. */
export function wireParts(r: WireRead, at: number): Buffer[] {
  if (r.parts === undefined) return [r.buf.subarray(0, at)];
  const from = r.from ?? 0;
  if (at > from) r.parts.push(r.buf.subarray(from, at));
  return r.parts;
}

/**
 * Below this a run of block records is copied into the reply even with `views`: a view costs a Buffer, a
 * writev entry and, while queued, pins the whole cached buffer it is a view of.
 */
export const MIN_VIEW_BYTES = 2048;

/**
 * Whether a CONSUME reply leaves out the stored record at `pos` of `src` (of offset `offset`): a control
 * record under `skipControl`, a transactional one `skipAborted` says was aborted.
 */
export function leftOut(src: Buffer, pos: number, offset: number, skipControl: boolean, skipAborted: WireReadRequest['skipAborted']): boolean {
  if (skipControl && (src[pos + 24] & USER_ATTR_MASK & RecordAttr.CONTROL) !== 0) return true;
  if (skipAborted && (src[pos + 24] & RecordAttr.TRANSACTIONAL) !== 0) {
    const producerId = src.toString('utf8', pos + 27, pos + 27 + ((src[pos + 25] << 8) | src[pos + 26]));
    return skipAborted(offset, producerId, src[pos + 24] & USER_ATTR_MASK);
  }
  return false;
}

/**
 * What a read charges record i of `c` against its byte limit: its stored size, plus READ_HEADER_COST per
 * header, as every read path does (LogReader), so each returns the same records.
 */
function readCost(c: CacheChunk, i: number): number {
  if (c.headerless) return c.starts[i + 1] - c.starts[i] + BLOCK_RECORD_EXTRA;
  if (c.flags >= 0) return blockRecordCostAt(c.buf, c.starts[i], c.starts[i + 1]);
  const pos = c.starts[i];
  return c.starts[i + 1] - pos + storedHeaderCount(c.buf, pos) * READ_HEADER_COST;
}

/**
 * Recently appended records, contiguous and ending at the LEO, bounded by bytes. Holds the encoded bytes of
 * each write (the log's own buffer, never the caller's records): two small objects per write rather than
 * several per record, so a full cache costs the garbage collector next to nothing. Records are decoded
 * when read, as views into those bytes. A write's buffer stays alive while any of its records is cached.
 */
export class TailCache implements BudgetedCache {
  private chunks: CacheChunk[] = [];
  /** First live chunk, and first live record in it. */
  private head = 0;
  private first = 0;
  private bytes = 0;
  /** chunkCost of every live chunk: the memory this cache keeps alive. */
  private held = 0;
  /** What the budget was last told this cache holds. */
  private charged = 0;
  /** `maxBytes` bounds this cache's record bytes; `budget`, shared by every partition's cache, bounds them all. */
  constructor(
    private readonly maxBytes: number,
    private readonly budget?: TailCacheBudget,
    private readonly frames?: FramePool,
    private readonly readers = new TailReaders(),
    /** Where readers parked at the end of what they may read start (PartitionLog.readFloor): kept. */
    private readonly floor: () => number = () => Number.POSITIVE_INFINITY,
  ) {}

  /** A read from `offset` of a log ending at `leo` (cached or not): it decides what the cache keeps. */
  noteRead(offset: number, leo: number): void {
    this.readers.note(leo - offset);
  }

  /** A chunk leaves the cache: its hold on frame-pool memory ends (queued replies pinned their own). */
  private letGo(c: CacheChunk): void {
    if (c.pooled) this.frames!.release(c.buf);
  }

  /**
   * What the broker-wide budget is charged: every buffer a cached record keeps alive, whole (a frame-pool
   * buffer holds one frame, any other is the writer's own, so a buffer is all it pins), plus chunkCost's
   * overhead per write.
   */
  get cost(): number {
    return this.empty ? 0 : this.held;
  }

  /** Tells the budget what this cache holds now; after an append it also enforces the budget's bound. */
  private report(appended: boolean): void {
    if (!this.budget) return;
    const cost = this.cost;
    if (cost === this.charged && !appended) return;
    this.charged = cost;
    this.budget.charge(this, cost, appended);
  }

  /** The budget's eviction: the oldest cached write (what is left of it) goes. */
  evictOldest(): void {
    if (this.empty) {
      this.report(false);
      return;
    }
    const c = this.chunks[this.head];
    this.bytes -= c.starts[c.count] - c.starts[this.first];
    this.dropHead();
    this.compact();
    this.report(false);
  }

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

  /**
   * Caches the records of one write: `starts` holds each record's position in `buf`, then the end. With
   * `flags` (>= 0), the records of one append block (their wire records' positions, then the block's end).
   * `handOver`: `buf` is a frame the pool lent (a block stamped in place) whose hold the caller hands to
   * the cache: the new chunk keeps it, or it is let go at once when nothing is cached. The caller must not
   * release it too.
   */
  append(buf: Buffer, base: number, starts: number[], flags = -1, headerless = false, handOver = false): void {
    const count = starts.length - 1;
    const pooled = handOver && this.frames?.lent(buf) === true;
    if (this.maxBytes <= 0 || count <= 0) {
      if (pooled) this.frames!.release(buf);
      return;
    }
    if (!this.empty && base !== this.end) this.clear();
    const last = this.empty ? undefined : this.chunks[this.chunks.length - 1];
    if (
      last !== undefined &&
      flags < 0 &&
      !pooled &&
      last.flags < 0 &&
      !last.pooled &&
      last.buf.buffer === buf.buffer &&
      last.buf.byteOffset + last.starts[last.count] === buf.byteOffset + starts[0]
    ) {
      // The write follows the last chunk's in the same block: it joins that chunk (no objects of its own).
      this.held -= chunkCost(last);
      const shift = buf.byteOffset - last.buf.byteOffset;
      for (let i = 1; i <= count; i++) last.starts.push(starts[i] + shift);
      last.count += count;
      last.buf = Buffer.from(buf.buffer, last.buf.byteOffset, last.starts[last.count]);
      this.held += chunkCost(last);
    } else {
      // The frame's hold passes to the chunk (handOver): nothing between them to let go of.
      const chunk = { buf, base, count, starts, flags, headerless: headerless && flags >= 0, pooled };
      this.chunks.push(chunk);
      this.held += chunkCost(chunk);
    }
    this.bytes += starts[count] - starts[0];
    while (this.bytes > this.maxBytes && !this.empty) this.evictOne();
    this.trimBehindReaders();
    this.compact();
    this.report(true);
  }

  /**
   * Drops whole chunks no recent reader will read (behind twice the largest lag read at lately, and
   * before the floor, where parked readers start: an open transaction's records wait there for its
   * commit), keeping at least MIN_KEPT_BYTES; without a read lately the cache keeps up to its bound.
   */
  private trimBehindReaders(): void {
    const lag = this.readers.lag;
    if (lag < 0 || this.empty) return;
    let keepFrom = this.end - READER_MARGIN * lag;
    let floored = false;
    while (!this.empty) {
      const c = this.chunks[this.head];
      if (c.base + c.count > keepFrom) return;
      const rest = c.starts[c.count] - c.starts[this.first];
      if (this.bytes - rest < MIN_KEPT_BYTES) return;
      // Asked only when a chunk would go (the LSO walks the open transactions).
      if (!floored) {
        floored = true;
        keepFrom = Math.min(keepFrom, this.floor());
        if (c.base + c.count > keepFrom) return;
      }
      this.bytes -= rest;
      this.dropHead();
    }
  }

  /**
   * Caches a write of units (block-records.ts): `starts` holds each unit's position in `buf`, then the end,
   * `offsets` each unit's first offset; `blocks` the blocks among them (unit index: their records' positions,
   * then the block's end), `headerless` those whose records carry no headers. Runs of per-record layout
   * records share a chunk; a block has one of its own.
   */
  appendUnits(buf: Buffer, starts: number[], offsets: number[], blocks: Map<number, number[]>, headerless?: Set<number> | null): void {
    const n = starts.length - 1;
    let from = 0;
    for (let u = 0; u < n; u++) {
      const rs = blocks.get(u);
      if (rs === undefined) continue;
      if (u > from) this.append(buf, offsets[from], starts.slice(from, u + 1));
      // The block header's flags byte (append-block.ts).
      this.append(buf, offsets[u], rs, buf[starts[u] + 9], headerless?.has(u) === true);
      from = u + 1;
    }
    if (n > from) this.append(buf, offsets[from], starts.slice(from, n + 1));
  }

  /** Drops the oldest cached record (a whole chunk when that is all it has left). */
  private evictOne(): void {
    const c = this.chunks[this.head];
    const s = c.starts;
    // A whole chunk goes at once when every record of it would be evicted one by one anyway.
    const rest = s[c.count] - s[this.first];
    if (this.bytes - rest + (s[c.count] - s[c.count - 1]) > this.maxBytes) {
      this.bytes -= rest;
      this.dropHead();
      return;
    }
    this.bytes -= s[this.first + 1] - s[this.first];
    if (++this.first >= c.count) this.dropHead();
  }

  /**
   * The head chunk leaves the cache. Its slot is emptied at once: `chunks` is only sliced now and then
   * (compact), and a slot left holding its chunk kept the buffer alive after it was no longer counted, so
   * a cache held far more than the budget allowed (1,024 evicted writes per partition).
   */
  private dropHead(): void {
    this.letGo(this.chunks[this.head]);
    this.held -= chunkCost(this.chunks[this.head]);
    this.chunks[this.head] = EVICTED;
    this.head++;
    this.first = 0;
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
      // Records decoded here are views its callers may keep: frame-pool memory is read from the files instead.
      if (c.pooled) return null;
      const size = readCost(c, i);
      if (out.length > 0 && bytes + size > maxBytes) break;
      const r = c.flags < 0 ? decodeOwnRecord(c.buf, c.starts[i]) : decodeBlockRecord(c.buf, blockRecordOf(c, i), c.flags);
      r.attributes &= USER_ATTR_MASK;
      out.push(r);
      bytes += size;
      i++;
    }
    return out;
  }

  /**
   * Like read(), but writes the records straight into a reply with `writer` (reply-writer.ts: a CONSUME reply
   * batch, or a RecordBatch v2; no LogRecord per record): the same records read() would return, minus control
   * records when `w.skipControl`. Null when the cache does not hold `offset` or a record cannot go out (the
   * caller takes the slow path).
   */
  readWire(offset: number, limit: number, maxRecords: number, maxBytes: number, w: WireReadRequest, writer: ReplyWriter): WireRead | null {
    if (this.empty || offset < this.start || offset >= this.end) return null;
    // Pass 1: which records, by the same rules as read() (stored sizes only, no parsing), and the bytes of
    // them that go out as views (whole runs of a plain or idempotent block, as pass 2 takes them).
    const views = w.views === true && writer.viewRun !== undefined;
    const k0 = this.chunkFor(offset);
    let k = k0;
    let c = this.chunks[k];
    let i = offset - c.base;
    let n = 0;
    let bytes = 0;
    let stored = 0;
    let viewed = 0;
    let runFrom = views && c.flags >= 0 && c.flags <= 1 ? c.starts[i] : -1;
    while (n < maxRecords) {
      if (i >= c.count) {
        if (runFrom >= 0 && c.starts[i] - runFrom >= MIN_VIEW_BYTES) viewed += c.starts[i] - runFrom;
        runFrom = -1;
        if (++k >= this.chunks.length) break;
        c = this.chunks[k];
        i = 0;
        if (views && c.flags >= 0 && c.flags <= 1) runFrom = c.starts[0];
      }
      if (c.base + i >= limit) break;
      const cost = readCost(c, i);
      if (n > 0 && bytes + cost > maxBytes) break;
      bytes += cost;
      stored += c.starts[i + 1] - c.starts[i];
      n++;
      i++;
    }
    if (n === 0) return null;
    if (runFrom >= 0 && c.starts[i] - runFrom >= MIN_VIEW_BYTES) viewed += c.starts[i] - runFrom;
    const size = writer.bound(stored - viewed, bytes);
    const buf = w.alloc ? w.alloc(size) : Buffer.allocUnsafe(size);
    let at = writer.begin(buf);
    let count = 0;
    let valueBytes = 0;
    const skipControl = w.skipControl;
    const skipAborted = w.skipAborted ?? null;
    const parts: Buffer[] | undefined = viewed > 0 ? [] : undefined;
    let from = 0;
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
      let end: number;
      if (c.flags < 0) {
        if (leftOut(src, pos, c.base + i, skipControl, skipAborted)) continue;
        end = writer.record(src, pos, c.base + i, buf, at);
      } else if (c.flags <= 1 && writer.blockRun !== undefined) {
        // A plain or idempotent block (flags 0 or 1) is never left out: the records of it this read takes
        // go out in one copy, or with `views` as a view, as the block holds them (docs/architecture.md
        // "Stored batches"); without extensions one copy too, each record then moved down after the cut.
        const run = Math.min(n - j, c.count - i);
        const e = c.starts[i + run];
        if (parts !== undefined && e - pos >= MIN_VIEW_BYTES) {
          // Not copied: the reply refers to the cached bytes. They do not change while the socket holds the
          // view: the write arena never hands out bytes twice, truncateFrom, dropBefore, eviction and clear
          // change only which bytes are served, and frame-pool memory is held for the reply until its socket
          // wrote it (writeReplyBody unpins it; docs/architecture.md, "Broker", reply buffers, frame memory).
          writer.viewRun!(src, pos, e);
          if (at > from) parts.push(buf.subarray(from, at));
          parts.push(c.pooled ? this.frames!.pin(src, pos, e) : src.subarray(pos, e));
          from = at;
        } else at = writer.blockRun(src, pos, e, buf, at);
        valueBytes += writer.valueLength;
        count += run;
        j += run - 1;
        i += run - 1;
        continue;
      } else {
        if (c.flags > 1 && blockLeftOut(src, blockRecordOf(c, i), c.flags, skipControl, skipAborted)) continue;
        end = writer.blockRecord(src, pos, c.starts[i + 1], c.base + i, buf, at);
      }
      if (end < 0) return null;
      valueBytes += writer.valueLength;
      at = end;
      count++;
    }
    const nextOffset = offset + n;
    return parts ? { buf, at, count, valueBytes, nextOffset, parts, from } : { buf, at, count, valueBytes, nextOffset };
  }

  /** Like dropBefore, eviction and clear: never writes into a chunk's bytes, which queued replies may still view. */
  truncateFrom(offset: number): void {
    while (!this.empty && this.end > offset) {
      const last = this.chunks.length - 1;
      const c = this.chunks[last];
      const from = last === this.head ? this.first : 0;
      const keep = Math.max(from, offset - c.base);
      this.bytes -= c.starts[c.count] - c.starts[keep];
      if (keep === from) {
        this.letGo(c);
        this.chunks.pop();
        this.held -= chunkCost(c);
        if (last === this.head) this.first = 0;
      } else {
        // starts keeps count + 1 entries: a later write joining this chunk appends after its new end.
        this.held -= chunkCost(c);
        c.count = keep;
        c.starts.length = keep + 1;
        this.held += chunkCost(c);
      }
    }
    this.compact();
    this.report(false);
  }

  dropBefore(offset: number): void {
    while (!this.empty && this.start < offset) {
      const c = this.chunks[this.head];
      const to = Math.min(c.count, offset - c.base);
      this.bytes -= c.starts[to] - c.starts[this.first];
      if (to >= c.count) {
        this.dropHead();
      } else {
        this.first = to;
      }
    }
    this.compact();
    this.report(false);
  }

  clear(): void {
    for (let k = this.head; k < this.chunks.length; k++) this.letGo(this.chunks[k]);
    this.chunks = [];
    this.head = 0;
    this.first = 0;
    this.bytes = 0;
    this.held = 0;
    this.report(false);
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

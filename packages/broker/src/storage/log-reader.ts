/**
 * The read paths of a partition log: from the tail cache when it holds the offset, else from the segment
 * files, stepping over the gaps compaction leaves and retrying in the replacement when a compaction swap
 * races with the read; and the timestamp lookup.
 */
import { TributaryError, invalidParam } from 'tributary-protocol/errors.js';
import type { LogRecord } from 'tributary-protocol/record.js';
import { type BlockInfo, recordEnd } from './append-block.js';
import { type BlockRecord, blockLeftOut, blockRecordCost } from './block-records.js';
import { storageError } from './log-fs.js';
import type { ReadOptions } from './log-options.js';
import type { LogState } from './log-state.js';
import { ATTR_END_OF_APPEND, READ_HEADER_COST, storedHeaderCount, USER_ATTR_MASK } from './record-codec.js';
import { type StoredRead, type StoredReadOptions, type StoredRun, readStoredAppends } from './replica-read.js';
import type { SegmentFds } from './segment-fds.js';
import { DECODE, INSPECT, walkLog } from './segment-walk.js';
import { replyWriter } from './reply-writer.js';
import { leftOut, type WireReadRequest, wireParts } from './tail-cache.js';

/** Whole wire records [from, to) of a plain or idempotent append block, which a read never leaves out: they go out as they are. */
interface BlockRun {
  buf: Buffer;
  blockRun: true;
  from: number;
  to: number;
  /** Offset of the first, and how many. */
  offset: number;
  count: number;
}

/**
 * What readWireFromDisk takes: runs of per-record layout records, one record of an append block a read may
 * leave records of out (transactional or control), or a run of a block's records (BlockRun).
 */
type WirePiece = StoredRun | { buf: Buffer; rec: BlockRecord; flags: number } | BlockRun;

function isBlockRun(p: WirePiece | undefined): p is BlockRun {
  return p !== undefined && 'blockRun' in p;
}

/** A CONSUME reply batch written from stored bytes (LogReader.readWire, readWireFromDisk). */
export interface WireReply {
  /** The reply; with `parts`, only its first piece. */
  frame: Buffer;
  /**
   * Only when the request asked for `views` (WireReadRequest) and a run went out as one: the whole reply as
   * pieces to write one after another (buffers of the reply's own and views of the tail cache's memory).
   */
  parts?: Buffer[];
  count: number;
  valueBytes: number;
  nextOffset: number;
}

/**
 * How many leading records of `records` (read with keepAppendMarker) form whole appends: up to and including
 * the last one carrying ATTR_END_OF_APPEND. A follower passes that prefix to appendReplica and fetches the
 * rest again.
 */
export function wholeAppendCount(records: readonly LogRecord[]): number {
  for (let i = records.length - 1; i >= 0; i--) if ((records[i].attributes & ATTR_END_OF_APPEND) !== 0) return i + 1;
  return 0;
}

export class LogReader {
  constructor(
    private readonly st: LogState,
    private readonly fds: SegmentFds,
  ) {}

  /** See PartitionLog.read. */
  async read(offset: number, opts: ReadOptions): Promise<LogRecord[]> {
    if (this.st.state === 'closed') throw storageError(this.st.dir, 'log is closed');
    if (!Number.isSafeInteger(offset)) throw invalidParam('offset', 'must be a safe integer');
    const start = this.st.logStartOffset;
    const leo = this.st.logEndOffset;
    if (offset < start || offset > leo) {
      throw new TributaryError('OFFSET_OUT_OF_RANGE', { requested: offset, earliest: start, latest: leo });
    }
    this.st.madeCache?.noteRead(offset, leo);
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
    const cached = this.st.madeCache?.read(offset, limit, maxRecords, maxBytes);
    if (cached) return cached;
    return this.readFromDisk(offset, limit, maxRecords, maxBytes);
  }

  /** See PartitionLog.readWire. */
  readWire(offset: number, opts: ReadOptions, w: WireReadRequest): WireReply | null {
    if (this.st.state === 'closed' || !Number.isSafeInteger(offset)) return null;
    const leo = this.st.logEndOffset;
    if (offset < this.st.logStartOffset || offset > leo) return null;
    // A read from the main port or the Kafka port comes here first (a miss then reads the files).
    this.st.madeCache?.noteRead(offset, leo);
    const limit = opts.maxOffset === undefined ? leo : Math.min(leo, opts.maxOffset);
    if (offset >= limit || !(opts.maxRecords >= 1)) return null;
    const writer = replyWriter(w.format, w.topic, w.partition, w.extensions);
    if (!writer) return null;
    const r = this.st.madeCache?.readWire(offset, limit, opts.maxRecords, opts.maxBytes, w, writer);
    if (!r) return null;
    const at = writer.finish(r.buf, r.at, r.count, { nextOffset: r.nextOffset, highWatermark: this.st.hwm, logStartOffset: this.st.logStartOffset });
    if (r.parts) {
      const parts = wireParts(r, at);
      return { frame: parts[0]!, parts, count: r.count, valueBytes: r.valueBytes, nextOffset: r.nextOffset };
    }
    return { frame: at === r.buf.length ? r.buf : r.buf.subarray(0, at), count: r.count, valueBytes: r.valueBytes, nextOffset: r.nextOffset };
  }

  /**
   * readWire from the segment files: the records read() would return, validated (frame, CRC, structure) but
   * not decoded, written straight into the reply batch, so a read builds no object per record or header.
   * Null where read() has more to say (a race with retention, compaction or truncation, a corrupt record, a
   * key too long for the wire, nothing to read): the caller then takes read().
   */
  async readWireFromDisk(offset: number, opts: ReadOptions, w: WireReadRequest): Promise<WireReply | null> {
    if (this.st.state === 'closed' || !Number.isSafeInteger(offset)) return null;
    const leo = this.st.logEndOffset;
    if (offset < this.st.logStartOffset || offset > leo) return null;
    const limit = opts.maxOffset === undefined ? leo : Math.min(leo, opts.maxOffset);
    const { maxRecords, maxBytes } = opts;
    if (offset >= limit || !(maxRecords >= 1)) return null;
    // Pass 1, by readFromDisk's rules: which records, as runs of whole records in the chunks read, and the
    // records of append blocks one by one (block-records.ts).
    const runs: WirePiece[] = [];
    let n = 0;
    let bytes = 0;
    let stored = 0;
    let first = -1;
    // One past the last record taken: the reply's nextOffset, as read()'s (the walk may jump a compacted segment tail).
    let taken = offset;
    // Where the records taken of the current chunk begin: they are contiguous up to where its walk stopped.
    let from = -1;
    const end = await walkLog(
      this.st,
      this.fds,
      offset,
      limit,
      INSPECT,
      {
        wanted: (avg) => Math.min(maxBytes - bytes, (maxRecords - n) * avg),
        record: (buf, p, r) => {
          const rec = r.rec;
          const cost = rec ? blockRecordCost(rec) : r.size + storedHeaderCount(buf, p) * READ_HEADER_COST;
          if (n > 0 && bytes + cost > maxBytes) return 'stop';
          if (rec) {
            // The per-record run before the block ends at it.
            if (from >= 0) runs.push({ buf, from, to: p });
            from = -1;
            const flags = (r.block as BlockInfo).flags;
            const last = runs.length > 0 ? runs[runs.length - 1]! : undefined;
            if (flags > 1) runs.push({ buf, rec, flags });
            else if (isBlockRun(last) && last.buf === buf && last.to === rec.at) {
              last.to = rec.end;
              last.count++;
            } else runs.push({ buf, blockRun: true, from: rec.at, to: rec.end, offset: rec.offset, count: 1 });
          } else if (from < 0) from = p;
          if (first < 0) first = r.offset;
          n++;
          bytes += cost;
          stored += r.size;
          taken = r.offset + 1;
          return n >= maxRecords ? 'last' : 'next';
        },
        chunkEnd: (buf, to) => {
          if (from >= 0) runs.push({ buf, from, to });
          from = -1;
        },
      },
      'lenient',
    );
    if (end === 'failed' || n === 0) return null;
    return this.writeWireReply(runs, stored, bytes, first, taken, w);
  }

  /** See PartitionLog.readStoredAppends. */
  readStoredAppends(offset: number, opts: StoredReadOptions): Promise<StoredRead> {
    return readStoredAppends(this.st, this.fds, offset, opts);
  }

  /** Pass 2 of readWireFromDisk: the reply of the records in `runs` (validated; `stored` bytes, charged `charged`). */
  private writeWireReply(runs: WirePiece[], stored: number, charged: number, first: number, next: number, w: WireReadRequest): WireReply | null {
    const writer = replyWriter(w.format, w.topic, w.partition, w.extensions);
    if (!writer) return null;
    const size = writer.bound(stored, charged);
    const buf = w.alloc ? w.alloc(size) : Buffer.allocUnsafe(size);
    let at = writer.begin(buf);
    const skipAborted = w.abortedFor ? w.abortedFor(first, next) : null;
    let count = 0;
    let valueBytes = 0;
    for (const run of runs) {
      const src = run.buf;
      if (isBlockRun(run)) {
        if (writer.blockRun !== undefined) {
          at = writer.blockRun(src, run.from, run.to, buf, at);
          valueBytes += writer.valueLength;
          count += run.count;
          continue;
        }
        for (let p = run.from, o = run.offset; p < run.to; o++) {
          const e = recordEnd(src, p);
          const end = writer.blockRecord(src, p, e, o, buf, at);
          if (end < 0) return null;
          valueBytes += writer.valueLength;
          at = end;
          count++;
          p = e;
        }
        continue;
      }
      if ('rec' in run) {
        const rec = run.rec;
        if (blockLeftOut(src, rec, run.flags, w.skipControl, skipAborted)) continue;
        const end = writer.blockRecord(src, rec.at, rec.end, rec.offset, buf, at);
        if (end < 0) return null;
        valueBytes += writer.valueLength;
        at = end;
        count++;
        continue;
      }
      for (let p = run.from; p < run.to; p += 4 + src.readUInt32BE(p)) {
        const offset = src.readUInt32BE(p + 8) * 0x100000000 + src.readUInt32BE(p + 12);
        if (leftOut(src, p, offset, w.skipControl, skipAborted)) continue;
        const end = writer.record(src, p, offset, buf, at);
        if (end < 0) return null;
        valueBytes += writer.valueLength;
        at = end;
        count++;
      }
    }
    at = writer.finish(buf, at, count, { nextOffset: next, highWatermark: this.st.hwm, logStartOffset: this.st.logStartOffset });
    return { frame: at === buf.length ? buf : buf.subarray(0, at), count, valueBytes, nextOffset: next };
  }

  private async readFromDisk(offset: number, limit: number, maxRecords: number, maxBytes: number, keepMarker = false, whole = false): Promise<LogRecord[]> {
    const out: LogRecord[] = [];
    let bytes = 0;
    // `whole`: the last record returned does not end its append, so the limits do not apply yet.
    let inAppend = false;
    /** `whole`: where in `out` the append being read begins, and the bytes before it. */
    let appendFrom = 0;
    let appendBytes = 0;
    const end = await walkLog(
      this.st,
      this.fds,
      offset,
      limit,
      DECODE,
      {
        wanted: (avg) => Math.min(maxBytes - bytes, (maxRecords - out.length) * avg),
        record: (_buf, _p, r) => {
          const rec = r.record;
          // Headers are charged as the objects they became (READ_HEADER_COST), not only their bytes.
          const cost = r.size + rec.headers.length * READ_HEADER_COST;
          if (out.length > 0 && bytes + cost > maxBytes && !inAppend) return 'stop';
          if (whole) {
            if (!inAppend) {
              appendFrom = out.length;
              appendBytes = bytes;
            }
            inAppend = (rec.attributes & ATTR_END_OF_APPEND) === 0;
          }
          if (!keepMarker) rec.attributes &= USER_ATTR_MASK;
          out.push(rec);
          bytes += cost;
          return out.length >= maxRecords && !inAppend ? 'last' : 'next';
        },
        // A compaction swap: an append read in part starts over (its records may be gone from the
        // replacement, each kept one an append of its own: the rest read on would leave a gap inside it).
        rewind: (next) => {
          if (!inAppend) return next;
          const restart = out[appendFrom]!.offset;
          out.length = appendFrom;
          bytes = appendBytes;
          inAppend = false;
          return restart;
        },
      },
      'strict',
    );
    return end === 'raced' ? this.raced(out, offset) : out;
  }

  /** A read raced with retention/truncation: return what was read, or report the now-missing offset. */
  private raced(out: LogRecord[], offset: number): LogRecord[] {
    if (out.length > 0) return out;
    const start = this.st.logStartOffset;
    const leo = this.st.logEndOffset;
    if (offset < start || offset > leo) throw new TributaryError('OFFSET_OUT_OF_RANGE', { requested: offset, earliest: start, latest: leo });
    return out;
  }

  /** First offset whose timestamp is >= ts, or the LEO. */
  async offsetForTimestamp(ts: number): Promise<number> {
    for (let attempt = 0; ; attempt++) {
      let retry = false;
      for (const seg of [...this.st.segments]) {
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
          if (!seg.deleted) throw this.st.reported('read', storageError(this.st.dir, 'read failed', err));
        }
      }
      // A compaction swap replaced a segment mid-scan: the new list has it under the same offsets.
      if (!retry || attempt >= 8) return this.st.logEndOffset;
    }
  }
}

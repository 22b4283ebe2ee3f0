/**
 * The one walk over stored records (docs/architecture.md "Storage"): a segment file is read in chunks and
 * cut into whole units, each one's length, CRC and layout checked: a per-record layout record, or an append
 * block (block-records.ts; walkLog hands its visitors a block's records one by one). `walkSegment` walks a byte range of one
 * segment (Segment.scan: recovery, cuts, compaction); `walkLog` walks the log from an offset across its
 * segments as reads do (LogReader, replica-read.ts). What a caller does with each record, how large its reads
 * are, and what a bad record means to it are parameters.
 */
import type { LogRecord } from 'tributary-protocol/record.js';
import { BLOCK_HEADER_BYTES, type BlockInfo, recordEnd } from './append-block.js';
import { type BlockRecord, blockRecordAt, decodeBlockRecord, inspectBlock, isBlockAt, BLOCK_RECORD_EXTRA } from './block-records.js';
import { storageError } from './log-fs.js';
import type { LogState } from './log-state.js';
import { type DecodeFailure, type DecodeResult, decodeRecord, type InspectResult, inspectRecord } from './record-codec.js';
import type { SegmentFds } from './segment-fds.js';

/** A visitor's answer to a record: go on past it, stop before it, or stop after it. */
export type Verdict = 'next' | 'stop' | 'last';

/**
 * What the walks see of a unit (a per-record layout record, or an append block: block-records.ts) and, for
 * walkLog's visitors, of each record of a block: `block` set (the block's header fields) and `rec` (where
 * the record lies in the chunk); `size` is then what the per-record layout would store it in.
 */
interface UnitFields {
  block?: BlockInfo;
  rec?: BlockRecord;
}
export type Inspected = Extract<InspectResult, { ok: true }> & UnitFields;
export type Decoded = Extract<DecodeResult, { ok: true }> & UnitFields;

/** How each unit is checked: validated only, or decoded as well (one pass over its bytes either way). */
export interface RecordCheck<T extends { ok: true; size: number; block?: BlockInfo }> {
  check(buf: Buffer, pos: number): T | DecodeFailure;
  /** The offset of a record, or the first offset of a block. */
  offsetOf(r: T): number;
  /** What a visitor sees of the record `rec` of the block unit `unit` (in `buf`). */
  blockRecord(buf: Buffer, unit: T, rec: BlockRecord): T;
}

/** Placeholder record of a DECODE block unit (walkers decode its records one by one: blockRecord). */
const BLOCK_UNIT_RECORD: LogRecord = Object.freeze({
  offset: -1,
  timestamp: -1,
  key: null,
  value: Buffer.alloc(0),
  headers: [],
  producerId: '',
  epoch: -1,
  sequence: -1,
  attributes: 0,
}) as LogRecord;

// A per-record unit costs one byte test more than before (isBlockAt): its path is otherwise unchanged.
export const INSPECT: RecordCheck<Inspected> = {
  check: (buf, pos) => (isBlockAt(buf, pos) ? inspectBlock(buf, pos) : inspectRecord(buf, pos)),
  offsetOf: (r) => r.offset,
  blockRecord: (_buf, unit, rec) => ({
    ok: true,
    size: rec.end - rec.at + BLOCK_RECORD_EXTRA,
    offset: rec.offset,
    timestamp: rec.timestamp,
    attributes: rec.attributes,
    block: unit.block,
    rec,
  }),
};
export const DECODE: RecordCheck<Decoded> = {
  check: (buf, pos) => {
    if (!isBlockAt(buf, pos)) return decodeRecord(buf, pos);
    const u = inspectBlock(buf, pos);
    return u.ok ? { ok: true, size: u.size, record: BLOCK_UNIT_RECORD, block: u.block } : u;
  },
  offsetOf: (r) => (r.record === BLOCK_UNIT_RECORD ? (r.block as BlockInfo).baseOffset : r.record.offset),
  blockRecord: (buf, unit, rec) => ({
    ok: true,
    size: rec.end - rec.at + BLOCK_RECORD_EXTRA,
    record: decodeBlockRecord(buf, rec, (unit.block as BlockInfo).flags),
    block: unit.block,
    rec,
  }),
};

/** Where walkSegment ended, and why. */
export interface SegmentWalkEnd {
  /** `end`; or the start of the record it stopped before or found bad; or the end of the one it stopped after. */
  position: number;
  /**
   * Null: it reached `end` or the visitor stopped it. A bad record ('incomplete': it runs past `end`, or
   * past the bytes the file gave), a file with no bytes at `position` ('short'), a read that threw
   * ('unreadable', with `error`).
   */
  failure: DecodeFailure['reason'] | 'short' | 'unreadable' | null;
  error?: unknown;
}

/**
 * Checks the records in [from, end) in order, `read` at most max(chunkSize(), one record) bytes at a time,
 * and calls `onRecord` (chunk, position in it, record, file position) for each; `onChunkEnd` once a chunk's
 * records are walked, with where the walk stopped in it (also before a bad record).
 */
export async function walkSegment<T extends { ok: true; size: number; block?: BlockInfo }>(
  read: (position: number, length: number) => Promise<Buffer>,
  from: number,
  end: number,
  chunkSize: () => number,
  check: RecordCheck<T>,
  onRecord: (buf: Buffer, p: number, r: T, position: number) => Verdict,
  onChunkEnd?: (buf: Buffer, to: number) => void,
): Promise<SegmentWalkEnd> {
  let pos = from;
  // A record that runs past the chunk: the next read starts at it and takes all of it.
  let need = 0;
  while (pos < end) {
    const want = Math.min(end - pos, Math.max(need, chunkSize()));
    let buf: Buffer;
    try {
      buf = await read(pos, want);
    } catch (error) {
      return { position: pos, failure: 'unreadable', error };
    }
    if (buf.length === 0) return { position: pos, failure: 'short' };
    need = 0;
    let p = 0;
    let verdict: Verdict = 'next';
    let failure: DecodeFailure['reason'] | null = null;
    while (p < buf.length) {
      const r = check.check(buf, p);
      if (!r.ok) {
        const needed = r.needed ?? 4;
        // Read again from its start, unless the file came up short (that would loop for ever) or the
        // record claims bytes past `end`.
        if (r.reason === 'incomplete' && buf.length === want && pos + p + needed <= end) {
          need = needed;
          break;
        }
        failure = r.reason;
        break;
      }
      verdict = onRecord(buf, p, r, pos + p);
      if (verdict === 'stop') break;
      p += r.size;
      if (verdict === 'last') break;
    }
    onChunkEnd?.(buf, p);
    if (failure !== null || verdict !== 'next') return { position: pos + p, failure };
    pos += p;
  }
  return { position: pos, failure: null };
}

/** A caller of walkLog: what it takes of the records at and past the walk's offset. */
export interface LogVisitor<T> {
  /** Bytes it can still take, given the segment's average record size: sizes the next read. */
  wanted(avgRecordSize: number): number;
  /** A record at or past the walk's offset and below its limit: 'next' and 'last' take it ('last' ends the walk). */
  record(buf: Buffer, p: number, r: T): Verdict;
  /** A chunk's records are walked, up to `to` (the records taken of it lie before `to`). */
  chunkEnd?(buf: Buffer, to: number): void;
  /** A compaction swap ('strict'): the offset to go on from in the replacement, given the walk's next one. */
  rewind?(next: number): number;
}

/**
 * What a bad record or a failed read means. 'strict' (read(), a replica fetch): a storage_error, unless the
 * segment was removed, cut or replaced meanwhile; then the walk retries in a compaction's replacement or
 * ends 'raced'. 'lenient' (a wire read, which read() backs): any of it ends the walk 'failed'.
 */
export type BadRecordPolicy = 'strict' | 'lenient';

/** 'end': the visitor stopped, the limit or the log end was reached. */
export type LogWalkEnd = 'end' | 'raced' | 'failed';

const READ_CHUNK_MIN = 16 * 1024;
const READ_CHUNK_MAX = 8 * 1024 * 1024;
const MAX_SWAP_RETRIES = 8;

/**
 * Walks the records of offsets [offset, limit) in order from the segment files, starting each segment at
 * its index entry, skipping the records below the offset reached and stepping over compaction's gaps.
 */
export async function walkLog<T extends { ok: true; size: number; block?: BlockInfo }>(
  st: LogState,
  fds: SegmentFds,
  offset: number,
  limit: number,
  check: RecordCheck<T>,
  v: LogVisitor<T>,
  policy: BadRecordPolicy,
): Promise<LogWalkEnd> {
  let next = offset;
  let done = false;
  let retries = 0;
  // A block: its records one by one, those below `next` skipped (an index entry or a read's offset may lie
  // below the offset asked for, inside the block); a verdict other than 'next' ends the walk there.
  const onUnit = (buf: Buffer, p: number, r: T): Verdict => {
    const block = r.block;
    if (block === undefined) return onRecord(buf, p, r);
    if (block.baseOffset + block.count <= next) return 'next';
    // Walked in place: a BlockRecord only for the records taken, no array of them all.
    for (let i = 0, at = p + BLOCK_HEADER_BYTES; i < block.count; i++) {
      const end = recordEnd(buf, at);
      const offset = block.baseOffset + i;
      if (offset >= next) {
        const verdict = onRecord(buf, p, check.blockRecord(buf, r, blockRecordAt(buf, at, end, offset, i === block.count - 1)));
        if (verdict !== 'next') return verdict;
      }
      at = end;
    }
    return 'next';
  };
  const onRecord = (buf: Buffer, p: number, r: T): Verdict => {
    const o = check.offsetOf(r);
    // Below `next`: the skip from the index entry. Above it: a gap left by compaction.
    if (o < next) return 'next';
    if (o >= limit) {
      done = true;
      return 'stop';
    }
    const verdict = v.record(buf, p, r);
    if (verdict !== 'stop') next = o + 1;
    if (verdict !== 'next') done = true;
    return verdict;
  };
  const chunkEnd = v.chunkEnd?.bind(v);
  while (!done && next < limit) {
    const seg = st.segmentFor(next);
    if (!seg || seg.deleted) return policy === 'strict' ? 'raced' : 'failed';
    const version = seg.version;
    const truncations = st.truncations;
    // Read together (appends update both at once): the records below segNext all lie before `end`.
    const end = seg.size;
    const segNext = seg.nextOffset;
    const from = seg.index.lookup(next).position;
    const startNext = next;
    fds.touch(seg);
    // Sized to what the caller can take, plus the skip from the index entry.
    const chunkSize = () => {
      const avg = seg.recordCount > 0 ? Math.ceil(end / seg.recordCount) : READ_CHUNK_MIN;
      return Math.max(READ_CHUNK_MIN, Math.min(v.wanted(avg), READ_CHUNK_MAX) + seg.index.intervalBytes);
    };
    const out = await walkSegment((p, n) => seg.read(p, n), from, end, chunkSize, check, onUnit, chunkEnd);
    if (out.failure !== null) {
      if (policy === 'lenient') return 'failed';
      // A file the walk met short, or one removed, cut or replaced meanwhile, is a race, not damage.
      if (out.failure !== 'short' && !seg.deleted && seg.version === version && !st.truncatedSince(truncations)) {
        if (out.failure === 'unreadable') throw st.reported('read', storageError(st.dir, 'read failed', out.error));
        throw st.reported('read', storageError(st.dir, `corrupt record in segment ${seg.baseOffset} at position ${out.position}`));
      }
      // Compaction swapped the file in: the replacement holds the same offsets.
      if (seg.superseded && retries++ < MAX_SWAP_RETRIES) {
        next = v.rewind ? v.rewind(next) : next;
        continue;
      }
      return 'raced';
    }
    // Past the segment's last record but not its end (a compacted tail): the rest is in later segments.
    if (!done && next < segNext) next = segNext;
    // No progress means the segment view went stale (truncation); never spin.
    if (next === startNext) break;
  }
  return 'end';
}

/**
 * Reading a segment's records in order (Segment.scan, Segment.scanRecords: segment-walk.ts's walk), and the
 * search for a valid record at any byte after a bad one (recovery).
 */
import type { LogRecord } from 'tributary-protocol/record.js';
import { BLOCK_FLAG, BLOCK_HEADER_BYTES } from './append-block.js';
import { blockRecords, decodeBlockRecord, inspectBlock } from './block-records.js';
import { type DecodeFailure, inspectRecord, MIN_RECORD_BODY } from './record-codec.js';
import { DECODE, INSPECT, walkSegment } from './segment-walk.js';

/** Bytes read at a time (more when one record is larger). */
const SCAN_CHUNK = 1024 * 1024;

/**
 * A unit of a segment (block-records.ts): one per-record layout record, or an append block. A decoding scan
 * (Segment.scanRecords) hands a block's records one by one instead, each with its block's position and size.
 */
export interface RecordInfo {
  /** The record's offset; a block's first. */
  offset: number;
  /** A block's last offset (offset + count - 1); the record's offset. */
  lastOffset: number;
  /** A block's largest timestamp. */
  timestamp: number;
  /** Raw stored attributes, storage-internal bits included (a block: ATTR_END_OF_APPEND, one whole append). */
  attributes: number;
  position: number;
  size: number;
  /** An append block (the walkers that need its records read them: block-records.ts). */
  block: boolean;
}

export interface ScanOutcome {
  /** End of the last record accepted (or the start of the record where the callback stopped). */
  position: number;
  /** Why the scan stopped before `end`; null when it reached `end` or the callback stopped it. */
  failure: DecodeFailure['reason'] | null;
}

/**
 * Validates records in [from, end) in order, read through `read` (segment-walk.ts), calling `onInfo` (or,
 * decoding each record, `onRecord`) for each; stops at the first invalid one or when the callback returns
 * false. A file shorter than `end` is an 'incomplete' record at its end; a failed read throws.
 */
export async function walkRecords(
  read: (position: number, length: number) => Promise<Buffer>,
  from: number,
  end: number,
  onInfo: ((r: RecordInfo) => boolean) | null,
  onRecord: ((r: RecordInfo, rec: LogRecord) => boolean) | null,
): Promise<ScanOutcome> {
  const chunk = () => SCAN_CHUNK;
  const out = onRecord
    ? await walkSegment(read, from, end, chunk, DECODE, (buf, p, d, position) => {
        const block = d.block;
        if (block === undefined) {
          const rec = d.record;
          const info = { offset: rec.offset, lastOffset: rec.offset, timestamp: rec.timestamp, attributes: rec.attributes, position, size: d.size, block: false };
          return onRecord(info, rec) ? 'next' : 'stop';
        }
        // A block's records one by one, as the per-record layout gives them (block-records.ts). A stop inside
        // the block ends the scan at the block's start, so the next scan from there sees its records again.
        for (const br of blockRecords(buf, p, block)) {
          const rec = decodeBlockRecord(buf, br, block.flags);
          const info = { offset: rec.offset, lastOffset: rec.offset, timestamp: rec.timestamp, attributes: rec.attributes, position, size: d.size, block: true };
          if (!onRecord(info, rec)) return 'stop';
        }
        return 'next';
      })
    : await walkSegment(read, from, end, chunk, INSPECT, (_buf, _p, r, position) => {
        const last = r.block ? r.block.baseOffset + r.block.count - 1 : r.offset;
        const info = { offset: r.offset, lastOffset: last, timestamp: r.timestamp, attributes: r.attributes, position, size: r.size, block: r.block !== undefined };
        return (onInfo as (r: RecordInfo) => boolean)(info) ? 'next' : 'stop';
      });
  if (out.failure === 'unreadable') throw out.error;
  return { position: out.position, failure: out.failure === 'short' ? 'incomplete' : out.failure };
}

/** Bytes of a record's start read before its CRC is checked: length, CRC, offset. */
const PEEK = 16;
const TWO_32 = 4294967296;

/**
 * The first position in [from, end) where a whole record or append block starts, valid in length, CRC and
 * layout, whose (last) offset is at least `minOffset`, tried at every byte: whether anything valid follows a bad record, which
 * then is no torn tail (segment-recovery.ts). Null when there is none. Only a candidate whose length fits
 * and whose offset is in range is CRC-checked, so garbage and zeros cost about one comparison per byte.
 */
export async function findValidRecord(
  read: (position: number, length: number) => Promise<Buffer>,
  from: number,
  end: number,
  minOffset: number,
): Promise<{ position: number; offset: number } | null> {
  let base = from;
  while (end - base >= PEEK) {
    const buf = await read(base, Math.min(end - base, SCAN_CHUNK));
    if (buf.length < PEEK) return null;
    // A candidate whose first PEEK bytes run past this chunk is tried again at the start of the next.
    const stop = buf.length - PEEK + 1;
    for (let p = 0; p < stop; p++) {
      const len = buf.readUInt32BE(p);
      if (len >= BLOCK_FLAG) {
        // Most garbage fails the header test without a read or a promise.
        const size = 4 + (len - BLOCK_FLAG);
        if (size < BLOCK_HEADER_BYTES || base + p + size > end) continue;
        if (p + BLOCK_HEADER_BYTES <= buf.length && !blockHeaderFits(buf, p, minOffset)) continue;
        const b = await blockCandidate(read, buf, base, p, size, minOffset);
        if (b !== null) return b;
        continue;
      }
      if (len < MIN_RECORD_BODY || base + p + 4 + len > end) continue;
      const hi = buf.readUInt32BE(p + 8);
      // Past 2^53 (a record's offset is a safe integer) or below minOffset.
      if (hi >= 0x200000) continue;
      const offset = hi * TWO_32 + buf.readUInt32BE(p + 12);
      if (offset < minOffset) continue;
      const bytes = p + 4 + len <= buf.length ? buf.subarray(p, p + 4 + len) : await read(base + p, 4 + len);
      const r = inspectRecord(bytes, 0);
      if (r.ok) return { position: base + p, offset: r.offset };
    }
    if (base + buf.length >= end) return null;
    base += stop;
  }
  return null;
}

/** Whether the block header at `p` of `buf` has safe offsets whose last reaches `minOffset`. */
function blockHeaderFits(head: Buffer, h: number, minOffset: number): boolean {
  const hi = head.readUInt32BE(h + 10);
  if (hi >= 0x200000) return false;
  const first = hi * TWO_32 + head.readUInt32BE(h + 14);
  return first + head.readUInt32BE(h + 18) - 1 >= minOffset;
}

/** findValidRecord's test of a candidate block of `size` bytes at `p` of `buf` (read from `base`): its header, then checkBlock. */
async function blockCandidate(
  read: (position: number, length: number) => Promise<Buffer>,
  buf: Buffer,
  base: number,
  p: number,
  size: number,
  minOffset: number,
): Promise<{ position: number; offset: number } | null> {
  const bytes = p + size <= buf.length ? buf.subarray(p, p + size) : await read(base + p, size);
  if (bytes.length < BLOCK_HEADER_BYTES || !blockHeaderFits(bytes, 0, minOffset)) return null;
  const r = inspectBlock(bytes, 0);
  return r.ok ? { position: base + p, offset: r.offset } : null;
}

/** Reading a segment's records in order, in bounded chunks (Segment.scan, Segment.scanRecords). */
import type { LogRecord } from 'tributary-protocol/record.js';
import { type DecodeFailure, decodeRecord, inspectRecord, MIN_RECORD_BODY } from './record-codec.js';

/** Bytes read at a time (more when one record is larger). */
const SCAN_CHUNK = 1024 * 1024;

export interface RecordInfo {
  offset: number;
  timestamp: number;
  /** Raw stored attributes, storage-internal bits included. */
  attributes: number;
  position: number;
  size: number;
}

export interface ScanOutcome {
  /** End of the last record accepted (or the start of the record where the callback stopped). */
  position: number;
  /** Why the scan stopped before `end`; null when it reached `end` or the callback stopped it. */
  failure: DecodeFailure['reason'] | null;
}

/**
 * Validates records in [from, end) in order, read through `read`, calling `onInfo` (or, decoding each record,
 * `onRecord`) for each; stops at the first invalid one or when the callback returns false.
 */
export async function walkRecords(
  read: (position: number, length: number) => Promise<Buffer>,
  from: number,
  end: number,
  onInfo: ((r: RecordInfo) => boolean) | null,
  onRecord: ((r: RecordInfo, rec: LogRecord) => boolean) | null,
): Promise<ScanOutcome> {
  let pos = from;
  let need = 0;
  while (pos < end) {
    const want = Math.min(end - pos, Math.max(SCAN_CHUNK, need));
    const buf = await read(pos, want);
    if (buf.length === 0) return { position: pos, failure: 'incomplete' };
    need = 0;
    let p = 0;
    while (p < buf.length) {
      const d = onRecord ? decodeRecord(buf, p) : null;
      const r = d ? (d.ok ? { ok: true as const, size: d.size, ...d.record } : d) : inspectRecord(buf, p);
      if (!r.ok) {
        const needed = r.needed ?? 4;
        // Record continues past this chunk but within the file: re-read from its start
        // (unless the file itself came up short, which would loop forever).
        if (r.reason === 'incomplete' && buf.length === want && pos + p + needed <= end && needed > buf.length - p) {
          need = needed;
          break;
        }
        return { position: pos + p, failure: r.reason };
      }
      const info: RecordInfo = { offset: r.offset, timestamp: r.timestamp, attributes: r.attributes, position: pos + p, size: r.size };
      const more = onRecord && d?.ok ? onRecord(info, d.record) : (onInfo as (r: RecordInfo) => boolean)(info);
      if (!more) return { position: pos + p, failure: null };
      p += r.size;
    }
    pos += p;
  }
  return { position: pos, failure: null };
}

/** Bytes of a record's start read before its CRC is checked: length, CRC, offset. */
const PEEK = 16;
const TWO_32 = 4294967296;

/**
 * The first position in [from, end) where a whole record starts, valid in length, CRC and layout, whose
 * offset is at least `minOffset`, tried at every byte: whether anything valid follows a bad record, which
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

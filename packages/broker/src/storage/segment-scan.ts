/** Reading a segment's records in order, in bounded chunks (Segment.scan, Segment.scanRecords). */
import type { LogRecord } from 'tributary-protocol/record.js';
import { type DecodeFailure, decodeRecord, inspectRecord } from './record-codec.js';

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

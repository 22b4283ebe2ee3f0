/**
 * The one walk over stored records (docs/architecture.md "Storage"): a segment file is read in chunks and
 * cut into whole records, each one's length, CRC and layout checked. `walkSegment` walks a byte range of one
 * segment (Segment.scan: recovery, cuts, compaction). What a caller does with each record, how large its
 * reads are, and what a bad record means to it are parameters.
 */
import { type DecodeFailure, type DecodeResult, decodeRecord, type InspectResult, inspectRecord } from './record-codec.js';

/** A visitor's answer to a record: go on past it, stop before it, or stop after it. */
export type Verdict = 'next' | 'stop' | 'last';

export type Inspected = Extract<InspectResult, { ok: true }>;
export type Decoded = Extract<DecodeResult, { ok: true }>;

/** How each record is checked: validated only, or decoded as well (one pass over its bytes either way). */
export interface RecordCheck<T extends { ok: true; size: number }> {
  check(buf: Buffer, pos: number): T | DecodeFailure;
  offsetOf(r: T): number;
}

export const INSPECT: RecordCheck<Inspected> = { check: (buf, pos) => inspectRecord(buf, pos), offsetOf: (r) => r.offset };
export const DECODE: RecordCheck<Decoded> = { check: (buf, pos) => decodeRecord(buf, pos), offsetOf: (r) => r.record.offset };

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
export async function walkSegment<T extends { ok: true; size: number }>(
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

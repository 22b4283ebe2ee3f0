/**
 * Walking the records of a batch's (uncompressed) record bytes with one reusable cursor: the storage and
 * fetch paths read offsets, timestamps and slices without an object per record, and every length is
 * checked against the record's own bounds as it goes.
 */
import { RecordBatchError } from './errors.js';
import type { RecordHeaderV2 } from './types.js';
import { readVarint, readVarlong, varEnd } from './varint.js';

/** Smallest record body: attributes, then one byte each for timestampDelta, offsetDelta, key, value, header count. */
export const MIN_RECORD_BODY = 6;

function badRecord(index: number, at: number, detail: string): RecordBatchError {
  return new RecordBatchError('bad_record', `record ${index} at byte ${at}: ${detail}`, { record: index, at });
}

/**
 * The record under the cursor. One instance serves a whole iteration: read its fields inside the callback,
 * and copy what must outlive it. Positions index `data` (the batch's bytes, or its decompressed records).
 */
export class RecordCursor {
  data: Buffer = Buffer.alloc(0);
  index = 0;
  /** Where the record (its length varint) starts and where it ends. */
  start = 0;
  end = 0;
  attributes = 0;
  offsetDelta = 0;
  /** baseOffset + offsetDelta. */
  offset = 0;
  timestampDelta: number | bigint = 0;
  /** The record's timestamp (maxTimestamp for every record of a log-append-time batch). */
  timestamp = 0;
  /** -1 for a null key or value. */
  keyStart = 0;
  keyLength = -1;
  valueStart = 0;
  valueLength = -1;
  headerCount = 0;
  /** Where the first header starts. */
  headersStart = 0;

  /** The key as a view into the data (no copy), or null. */
  key(): Buffer | null {
    return this.keyLength < 0 ? null : this.data.subarray(this.keyStart, this.keyStart + this.keyLength);
  }

  /** The value as a view into the data (no copy), or null. */
  value(): Buffer | null {
    return this.valueLength < 0 ? null : this.data.subarray(this.valueStart, this.valueStart + this.valueLength);
  }

  /** The headers as objects (values are views into the data). */
  headers(): RecordHeaderV2[] {
    const out: RecordHeaderV2[] = [];
    const d = this.data;
    let p = this.headersStart;
    for (let h = 0; h < this.headerCount; h++) {
      const kl = readVarint(d, p, this.end);
      p = varEnd.pos;
      const key = d.toString('utf8', p, p + kl);
      p += kl;
      const vl = readVarint(d, p, this.end);
      p = varEnd.pos;
      out.push({ key, value: vl < 0 ? null : d.subarray(p, p + vl) });
      if (vl > 0) p += vl;
    }
    return out;
  }

  /** The whole record (length varint included) as a view. */
  bytes(): Buffer {
    return this.data.subarray(this.start, this.end);
  }
}

/** Called per record; returning false stops the walk (anything else goes on). */
export type RecordVisitor = (r: RecordCursor) => unknown;

export interface WalkContext {
  baseOffset: number;
  /** Any int64: a bigint when it is not a safe integer (only the records' sums must be). */
  baseTimestamp: number | bigint;
  /** Set for a log-append-time batch: every record's timestamp. */
  logAppendTime: number | undefined;
  recordCount: number;
}

/** Timestamp of a record from the batch's base and the record's delta; refused (timestamp_out_of_range) past 2^53. */
function timestampOf(base: number | bigint, delta: number | bigint, index: number, at: number): number {
  if (typeof delta === 'number' && typeof base === 'number') {
    const t = base + delta;
    if (Number.isSafeInteger(t) && Math.abs(delta) <= 2 ** 52) return t;
  }
  const big = BigInt(base) + BigInt(delta);
  if (big < BigInt(Number.MIN_SAFE_INTEGER) || big > BigInt(Number.MAX_SAFE_INTEGER)) {
    throw new RecordBatchError('timestamp_out_of_range', `record ${index} timestamp ${big} is beyond 2^53`, { record: index, at, field: 'timestamp' });
  }
  return Number(big);
}

/**
 * Calls `fn` for each record of data[from, to), the cursor filled in; `fn` returning false stops the walk.
 * Checks each record against its own length, and, when the walk is not stopped, that exactly
 * `recordCount` records fill the range. Returns the number of records visited.
 */
export function walkRecords(data: Buffer, from: number, to: number, ctx: WalkContext, cur: RecordCursor, fn: RecordVisitor): number {
  cur.data = data;
  let p = from;
  const count = ctx.recordCount;
  for (let i = 0; i < count; i++) {
    if (p >= to) throw new RecordBatchError('bad_record_count', `${count} records declared, ${i} found`, { at: p, recordCount: count });
    const start = p;
    const len = readVarint(data, p, to);
    p = varEnd.pos;
    if (len < MIN_RECORD_BODY || len > to - p) throw badRecord(i, start, `length ${len} does not fit the ${to - p} bytes left`);
    const end = p + len;
    cur.index = i;
    cur.start = start;
    cur.end = end;
    cur.attributes = data[p++]!;
    const td = readVarlong(data, p, end);
    p = varEnd.pos;
    cur.timestampDelta = td;
    cur.timestamp = ctx.logAppendTime ?? timestampOf(ctx.baseTimestamp, td, i, start);
    const od = readVarint(data, p, end);
    p = varEnd.pos;
    cur.offsetDelta = od;
    cur.offset = ctx.baseOffset + od;
    const kl = readVarint(data, p, end);
    p = varEnd.pos;
    if (kl < -1 || kl > end - p) throw badRecord(i, start, `key length ${kl}`);
    cur.keyStart = p;
    cur.keyLength = kl;
    if (kl > 0) p += kl;
    const vl = readVarint(data, p, end);
    p = varEnd.pos;
    if (vl < -1 || vl > end - p) throw badRecord(i, start, `value length ${vl}`);
    cur.valueStart = p;
    cur.valueLength = vl;
    if (vl > 0) p += vl;
    const hc = readVarint(data, p, end);
    p = varEnd.pos;
    if (hc < 0) throw badRecord(i, start, `header count ${hc}`);
    cur.headerCount = hc;
    cur.headersStart = p;
    for (let h = 0; h < hc; h++) {
      const hkl = readVarint(data, p, end);
      p = varEnd.pos;
      // A header key is a non-null string.
      if (hkl < 0 || hkl > end - p) throw badRecord(i, start, `header ${h} key length ${hkl}`);
      p += hkl;
      const hvl = readVarint(data, p, end);
      p = varEnd.pos;
      if (hvl < -1 || hvl > end - p) throw badRecord(i, start, `header ${h} value length ${hvl}`);
      if (hvl > 0) p += hvl;
    }
    if (p !== end) throw badRecord(i, start, `fields end at ${p}, the length says ${end}`);
    if (fn(cur) === false) return i + 1;
  }
  if (p !== to) throw new RecordBatchError('bad_record_count', `${to - p} bytes after the ${count} declared records`, { at: p, recordCount: count });
  return count;
}

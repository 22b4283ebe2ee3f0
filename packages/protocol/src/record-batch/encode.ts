/**
 * Encoding a RecordBatch v2: one pass measures every record (and validates the input), a second writes
 * into one buffer of exactly that size; the CRC-32C is computed last over attributes..end.
 */
import { compressionCodec } from './compression.js';
import { crc32cRange } from './crc32c.js';
import { RecordBatchError } from './errors.js';
import {
  ATTRIBUTES,
  BASE_OFFSET,
  BASE_SEQUENCE,
  BASE_TIMESTAMP,
  BATCH_LENGTH,
  CONTROL_BIT,
  CRC,
  checkInt,
  Compression,
  DELETE_HORIZON_BIT,
  INT16_MAX,
  INT16_MIN,
  INT32_MAX,
  INT32_MIN,
  LAST_OFFSET_DELTA,
  LOG_OVERHEAD,
  MAGIC,
  MAGIC_V2,
  MAX_TIMESTAMP,
  NO_PARTITION_LEADER_EPOCH,
  NO_PRODUCER_EPOCH,
  NO_PRODUCER_ID,
  NO_SEQUENCE,
  PARTITION_LEADER_EPOCH,
  PRODUCER_EPOCH,
  PRODUCER_ID,
  RECORD_COUNT,
  RECORDS,
  SAFE_MAX,
  SAFE_MIN,
  TIMESTAMP_TYPE_BIT,
  TRANSACTIONAL_BIT,
  w16,
  w32,
  w64,
} from './layout.js';
import type { RecordBatchInput } from './types.js';
import { sizeOfVarint, sizeOfVarlong, writeVarint, writeVarlong } from './varint.js';

const TWO_52 = 2 ** 52;

/** What the measuring pass found; the writing pass follows it. */
interface Plan {
  /** Per record: the size of the body (what its length varint says). */
  bodySizes: Int32Array;
  /** Per record: its timestamp delta, or NaN when the delta needs a bigint (beyond 2^52). */
  deltas: Float64Array;
  recordsSize: number;
  baseTimestamp: number;
  maxTimestamp: number;
  lastOffsetDelta: number;
}

function exactDelta(ts: number, base: number): bigint {
  return BigInt(ts) - BigInt(base);
}

function plan(input: RecordBatchInput): Plan {
  const records = input.records;
  const n = records.length;
  if (n > INT32_MAX) throw new RecordBatchError('invalid_input', 'too many records', { field: 'records' });
  const now = input.now ?? Date.now();
  const baseTimestamp = input.baseTimestamp ?? (n > 0 ? (records[0]!.timestamp ?? now) : -1);
  checkInt('baseTimestamp', baseTimestamp, SAFE_MIN, SAFE_MAX);
  let maxTs = n > 0 ? SAFE_MIN : baseTimestamp;
  const bodySizes = new Int32Array(n);
  const deltas = new Float64Array(n);
  let size = 0;
  let prevOffsetDelta = -1;
  for (let i = 0; i < n; i++) {
    const r = records[i]!;
    const ts = r.timestamp ?? now;
    checkInt('timestamp', ts, SAFE_MIN, SAFE_MAX);
    if (ts > maxTs) maxTs = ts;
    const od = r.offsetDelta ?? i;
    checkInt('offsetDelta', od, 0, INT32_MAX);
    if (od <= prevOffsetDelta)
      throw new RecordBatchError('invalid_input', `offsetDelta ${od} after ${prevOffsetDelta}: offsets must increase`, { field: 'offsetDelta' });
    prevOffsetDelta = od;
    const d = ts - baseTimestamp;
    let body = 1 + sizeOfVarint(od);
    if (d >= -TWO_52 && d <= TWO_52) {
      deltas[i] = d;
      body += sizeOfVarlong(d);
    } else {
      deltas[i] = Number.NaN;
      body += sizeOfVarlong(exactDelta(ts, baseTimestamp));
    }
    const key = r.key;
    body += key === null ? 1 : sizeOfVarint(key.length) + key.length;
    const value = r.value;
    body += value === null ? 1 : sizeOfVarint(value.length) + value.length;
    const hs = r.headers;
    const hc = hs === undefined ? 0 : hs.length;
    body += sizeOfVarint(hc);
    for (let h = 0; h < hc; h++) {
      const hdr = hs![h]!;
      const kl = Buffer.byteLength(hdr.key, 'utf8');
      body += sizeOfVarint(kl) + kl;
      body += hdr.value === null ? 1 : sizeOfVarint(hdr.value.length) + hdr.value.length;
    }
    if (body > INT32_MAX) throw new RecordBatchError('invalid_input', 'record larger than 2^31 bytes', { field: 'records' });
    bodySizes[i] = body;
    size += sizeOfVarint(body) + body;
  }
  const lastOffsetDelta = input.lastOffsetDelta ?? (n > 0 ? prevOffsetDelta : 0);
  checkInt('lastOffsetDelta', lastOffsetDelta, Math.max(0, prevOffsetDelta), INT32_MAX);
  const maxTimestamp = input.maxTimestamp ?? maxTs;
  checkInt('maxTimestamp', maxTimestamp, SAFE_MIN, SAFE_MAX);
  return { bodySizes, deltas, recordsSize: size, baseTimestamp, maxTimestamp, lastOffsetDelta };
}

function writeBytes(buf: Buffer, at: number, b: Buffer | null): number {
  if (b === null) return writeVarint(buf, at, -1);
  at = writeVarint(buf, at, b.length);
  buf.set(b, at);
  return at + b.length;
}

/** Writes the records as `p` planned them at `at`; returns the end. */
function writeRecords(buf: Buffer, at: number, input: RecordBatchInput, p: Plan): number {
  const records = input.records;
  const now = input.now ?? Date.now();
  for (let i = 0; i < records.length; i++) {
    const r = records[i]!;
    at = writeVarint(buf, at, p.bodySizes[i]!);
    buf[at++] = 0; // record attributes: unused in v2
    const d = p.deltas[i]!;
    at = writeVarlong(buf, at, Number.isNaN(d) ? exactDelta(r.timestamp ?? now, p.baseTimestamp) : d);
    at = writeVarint(buf, at, r.offsetDelta ?? i);
    at = writeBytes(buf, at, r.key);
    at = writeBytes(buf, at, r.value);
    const hs = r.headers;
    const hc = hs === undefined ? 0 : hs.length;
    at = writeVarint(buf, at, hc);
    for (let h = 0; h < hc; h++) {
      const hdr = hs![h]!;
      at = writeVarint(buf, at, Buffer.byteLength(hdr.key, 'utf8'));
      at += hdr.key.length === 0 ? 0 : buf.write(hdr.key, at, 'utf8');
      at = writeBytes(buf, at, hdr.value);
    }
  }
  return at;
}

function attributesOf(input: RecordBatchInput): number {
  let a = Compression[input.compression ?? 'none'];
  if (a === undefined) throw new RecordBatchError('invalid_input', `unknown compression ${String(input.compression)}`, { field: 'compression' });
  if (input.timestampType === 1) a |= TIMESTAMP_TYPE_BIT;
  if (input.transactional === true || input.control === true) a |= TRANSACTIONAL_BIT;
  if (input.control === true) a |= CONTROL_BIT;
  if (input.hasDeleteHorizon === true) a |= DELETE_HORIZON_BIT;
  return a;
}

/** Fills the header of a batch whose records end at `end`, then its CRC. */
function finish(buf: Buffer, end: number, input: RecordBatchInput, p: Plan, attributes: number): Buffer {
  const baseOffset = input.baseOffset ?? 0;
  const leaderEpoch = input.partitionLeaderEpoch ?? NO_PARTITION_LEADER_EPOCH;
  const producerId = input.producerId ?? NO_PRODUCER_ID;
  const producerEpoch = input.producerEpoch ?? NO_PRODUCER_EPOCH;
  const baseSequence = input.baseSequence ?? NO_SEQUENCE;
  checkInt('baseOffset', baseOffset, SAFE_MIN, SAFE_MAX);
  checkInt('partitionLeaderEpoch', leaderEpoch, INT32_MIN, INT32_MAX);
  checkInt('producerId', producerId, SAFE_MIN, SAFE_MAX);
  checkInt('producerEpoch', producerEpoch, INT16_MIN, INT16_MAX);
  checkInt('baseSequence', baseSequence, INT32_MIN, INT32_MAX);
  if (end !== buf.length) throw new Error(`record batch size mismatch: ${end} != ${buf.length}`);
  w64(buf, BASE_OFFSET, baseOffset);
  w32(buf, BATCH_LENGTH, end - LOG_OVERHEAD);
  w32(buf, PARTITION_LEADER_EPOCH, leaderEpoch);
  buf[MAGIC] = MAGIC_V2;
  w16(buf, ATTRIBUTES, attributes);
  w32(buf, LAST_OFFSET_DELTA, p.lastOffsetDelta);
  w64(buf, BASE_TIMESTAMP, p.baseTimestamp);
  w64(buf, MAX_TIMESTAMP, p.maxTimestamp);
  w64(buf, PRODUCER_ID, producerId);
  w16(buf, PRODUCER_EPOCH, producerEpoch);
  w32(buf, BASE_SEQUENCE, baseSequence);
  w32(buf, RECORD_COUNT, input.records.length);
  w32(buf, CRC, crc32cRange(buf, ATTRIBUTES, end));
  return buf;
}

/** Encodes a batch; compression runs synchronously (encodeRecordBatchAsync keeps it off the event loop). */
export function encodeRecordBatch(input: RecordBatchInput): Buffer {
  const attributes = attributesOf(input);
  const p = plan(input);
  const type = attributes & 0x07;
  if (type === 0) {
    const buf = Buffer.allocUnsafe(RECORDS + p.recordsSize);
    return finish(buf, writeRecords(buf, RECORDS, input, p), input, p, attributes);
  }
  const codec = compressionCodec(type);
  const raw = Buffer.allocUnsafe(p.recordsSize);
  writeRecords(raw, 0, input, p);
  return assemble(codec.compress(raw), input, p, attributes);
}

/** encodeRecordBatch with the codec's asynchronous compression when it has one. */
export async function encodeRecordBatchAsync(input: RecordBatchInput): Promise<Buffer> {
  const attributes = attributesOf(input);
  const type = attributes & 0x07;
  if (type === 0) return encodeRecordBatch(input);
  const codec = compressionCodec(type);
  const p = plan(input);
  const raw = Buffer.allocUnsafe(p.recordsSize);
  writeRecords(raw, 0, input, p);
  return assemble(codec.compressAsync ? await codec.compressAsync(raw) : codec.compress(raw), input, p, attributes);
}

function assemble(compressed: Buffer, input: RecordBatchInput, p: Plan, attributes: number): Buffer {
  const buf = Buffer.allocUnsafe(RECORDS + compressed.length);
  buf.set(compressed, RECORDS);
  return finish(buf, buf.length, input, p, attributes);
}

/**
 * Stored batches: Kafka's RecordBatch v2 (uncompressed) as the layout storage moves to (issue 14;
 * docs/architecture.md, "Stored batches"). This module converts between the wire records of a produce
 * batch frame (docs/protocol.md section 5) and one stored batch per append, and back to the wire records of
 * a CONSUME reply, without a record object. Segments do not use it yet: it is the converter the segment
 * format builds on, tested byte for byte against the current record codec (record-codec.ts) so that a
 * consumer cannot tell which layout its records came from.
 *
 * Mapping (the current stored record -> the batch):
 * - offset -> baseOffset + offsetDelta; timestamp -> baseTimestamp (the first record's) + timestampDelta,
 *   maxTimestamp; the timestamp type stays CreateTime.
 * - producer id (a decimal string handed out by INIT_PRODUCER_ID, docs/protocol.md) -> producerId int64,
 *   empty -> -1; epoch -> producerEpoch (16-bit, as PUBLISH already requires); sequence -> baseSequence +
 *   offsetDelta, -1 for a plain append. One batch holds one append, so the end-of-append bit of the current
 *   layout has no counterpart: a batch is whole or torn, and its CRC-32C covers it.
 * - attributes (control, transactional: the same for every record of an append) -> the batch's bits.
 * - key: an empty wire key is no key (-1), as the current layout stores it.
 */
import type { ScannedBatch } from 'tributary-protocol/batch.js';
import { RecordAttr } from 'tributary-protocol/record.js';
import { crc32cRange } from 'tributary-protocol/record-batch/crc32c.js';
import {
  ATTRIBUTES,
  BASE_SEQUENCE,
  BASE_TIMESTAMP,
  BATCH_LENGTH,
  CONTROL_BIT,
  CRC,
  LAST_OFFSET_DELTA,
  LOG_OVERHEAD,
  MAGIC,
  MAGIC_V2,
  MAX_TIMESTAMP,
  PARTITION_LEADER_EPOCH,
  PRODUCER_EPOCH,
  PRODUCER_ID,
  RECORD_COUNT,
  RECORDS,
  r16s,
  r32s,
  r32u,
  r64n,
  TRANSACTIONAL_BIT,
  w32,
  w64,
} from 'tributary-protocol/record-batch/layout.js';
import { readVarint, readVarlong, sizeOfVarlong, varEnd, writeVarint, writeVarlong } from 'tributary-protocol/record-batch/varint.js';
import { copyRun, NULL_HEADER_VALUE } from './record-codec.js';


/** The wire record attributes (docs/protocol.md 5.2) the batch bits stand for. */
const WIRE_CONTROL = 1;
const WIRE_TRANSACTIONAL = 2;

/** What an append stamps on its batch besides its records. */
export interface StoredBatchStamp {
  baseOffset: number;
  /** Timestamp of records sent without one (0 or negative): the append's time. */
  now: number;
  /** The leader epoch the batch was appended in (-1 standalone). */
  leaderEpoch: number;
  /** An idempotent or transactional append's producer (its decimal id as a number), else -1 for each. */
  producerId: number;
  producerEpoch: number;
  /** The first record's sequence, -1 for a plain append. */
  firstSequence: number;
  /** The wire attribute bits every record of the append has (control 1, transactional 2). */
  wireAttributes: number;
}

/**
 * An upper bound on the bytes of the stored batch of `batch`'s records (record i, exact size unknown until
 * its timestamp delta is): the header, and per record its key, value and header bytes plus the largest
 * varints they can take.
 */
export function storedBatchBound(batch: ScannedBatch): number {
  const { body, starts, extensions, count } = batch;
  let n = RECORDS;
  for (let i = 0; i < count; i++) {
    const s = starts[i]!;
    const pidLen = (body[s + 16]! << 8) | body[s + 17]!;
    const k = s + 18 + pidLen;
    const keyLen = (body[k]! << 8) | body[k + 1]!;
    const v = k + 10 + keyLen;
    const valueLen = body[v]! * 0x1000000 + ((body[v + 1]! << 16) | (body[v + 2]! << 8) | body[v + 3]!);
    // length 5, attributes 1, timestamp delta 10, offset delta 5, key length 5, value length 5, header count 5
    n += 36 + keyLen + valueLen;
    // A wire header takes 6 bytes besides its key and value, a stored one at most 10: twice the wire's bounds it.
    if (extensions) n += 2 * (starts[i + 1]! - (v + 4 + valueLen + 11));
  }
  return n;
}

/** Bytes of a non-negative int32 `v` as a zigzag varint. */
function sizeOfLength(v: number): number {
  return v < 64 ? 1 : v < 8192 ? 2 : v < 1048576 ? 3 : v < 134217728 ? 4 : 5;
}

/** The record's timestamp as stored: the wire's when positive, else `now`. */
function wireTimestamp(body: Buffer, ve: number, ext: boolean, now: number): number {
  if (!ext) return now;
  const ts = r64n(body, ve);
  return ts > 0 ? ts : now;
}

/** Where the headers writeV2Record read ended in its source. */
let headersEnd = 0;

/**
 * Writes one RecordBatch v2 record at `p` of `dst` from bytes of `src`: the key at `keyAt` (`keyLen`, -1 for
 * none), the value at `valueAt` (`valueLen`, -1 for null), and `hc` headers in Tributary's layout (key u16 length + UTF-8, value u32
 * length + bytes, as both the wire and the stored records carry them; a stored null value's length is
 * NULL_HEADER_VALUE, written as -1) from `headersAt`. Returns the end.
 */
function writeV2Record(
  src: Buffer,
  keyAt: number,
  keyLen: number,
  valueAt: number,
  valueLen: number,
  headersAt: number,
  hc: number,
  tsDelta: number,
  offsetDelta: number,
  dst: Buffer,
  p: number,
): number {
  let headerBytes = 0;
  let h = headersAt;
  for (let j = 0; j < hc; j++) {
    const hk = (src[h]! << 8) | src[h + 1]!;
    const hv = r32u(src, h + 2 + hk);
    if (hv === NULL_HEADER_VALUE) {
      h += 6 + hk;
      headerBytes += sizeOfLength(hk) + hk + 1;
      continue;
    }
    h += 6 + hk + hv;
    headerBytes += sizeOfLength(hk) + hk + sizeOfLength(hv) + hv;
  }
  const bodyLen =
    1 +
    sizeOfVarlong(tsDelta) +
    sizeOfLength(offsetDelta) +
    (keyLen < 0 ? 1 : sizeOfLength(keyLen) + keyLen) +
    (valueLen < 0 ? 1 : sizeOfLength(valueLen) + valueLen) +
    sizeOfLength(hc) +
    headerBytes;
  p = writeVarint(dst, p, bodyLen);
  dst[p++] = 0;
  p = writeVarlong(dst, p, tsDelta);
  p = writeVarint(dst, p, offsetDelta);
  if (keyLen < 0) dst[p++] = 1; // zigzag -1: no key
  else {
    p = writeVarint(dst, p, keyLen);
    copyRun(src, keyAt, keyAt + keyLen, dst, p);
    p += keyLen;
  }
  if (valueLen < 0) dst[p++] = 1; // zigzag -1: a null value
  else {
    p = writeVarint(dst, p, valueLen);
    copyRun(src, valueAt, valueAt + valueLen, dst, p);
    p += valueLen;
  }
  p = writeVarint(dst, p, hc);
  h = headersAt;
  for (let j = 0; j < hc; j++) {
    const hk = (src[h]! << 8) | src[h + 1]!;
    p = writeVarint(dst, p, hk);
    copyRun(src, h + 2, h + 2 + hk, dst, p);
    p += hk;
    h += 2 + hk;
    const hv = r32u(src, h);
    if (hv === NULL_HEADER_VALUE) {
      dst[p++] = 1; // zigzag -1: a null value
      h += 4;
      continue;
    }
    p = writeVarint(dst, p, hv);
    copyRun(src, h + 4, h + 4 + hv, dst, p);
    p += hv;
    h += 4 + hv;
  }
  headersEnd = h;
  return p;
}

/**
 * Writes the records of a validated produce batch (scanBatch) as one stored batch at `pos` of `buf` (room for
 * storedBatchBound), offsets from `stamp.baseOffset`, with one CRC-32C over the batch. Returns the end.
 */
export function writeStoredBatchFromWire(batch: ScannedBatch, buf: Buffer, pos: number, stamp: StoredBatchStamp): number {
  const { body, starts, extensions: ext, count } = batch;
  let baseTs = 0;
  let maxTs = -1;
  let p = pos + RECORDS;
  for (let i = 0; i < count; i++) {
    const s = starts[i]!;
    const pidLen = (body[s + 16]! << 8) | body[s + 17]!;
    const k = s + 18 + pidLen;
    const keyLen = (body[k]! << 8) | body[k + 1]!;
    const v = k + 10 + keyLen;
    const valueLen = body[v]! * 0x1000000 + ((body[v + 1]! << 16) | (body[v + 2]! << 8) | body[v + 3]!);
    const ve = v + 4 + valueLen;
    const ts = wireTimestamp(body, ve, ext, stamp.now);
    if (i === 0) baseTs = ts;
    if (ts > maxTs) maxTs = ts;
    const tsDelta = ts - baseTs;
    const hc = ext ? (body[ve + 9]! << 8) | body[ve + 10]! : 0;
    p = writeV2Record(body, k + 2, keyLen === 0 ? -1 : keyLen, v + 4, valueLen, ve + 11, hc, tsDelta, i, buf, p);
    if (ext && headersEnd !== starts[i + 1]!) throw new Error('stored batch: wire headers do not end their record');
  }
  w64(buf, pos, stamp.baseOffset);
  w32(buf, pos + BATCH_LENGTH, p - pos - LOG_OVERHEAD);
  w32(buf, pos + PARTITION_LEADER_EPOCH, stamp.leaderEpoch);
  buf[pos + MAGIC] = MAGIC_V2;
  const attrs = (stamp.wireAttributes & WIRE_CONTROL ? CONTROL_BIT : 0) | (stamp.wireAttributes & WIRE_TRANSACTIONAL ? TRANSACTIONAL_BIT : 0);
  buf[pos + ATTRIBUTES] = 0;
  buf[pos + ATTRIBUTES + 1] = attrs;
  w32(buf, pos + LAST_OFFSET_DELTA, count - 1);
  w64(buf, pos + BASE_TIMESTAMP, baseTs);
  w64(buf, pos + MAX_TIMESTAMP, maxTs);
  w64(buf, pos + PRODUCER_ID, stamp.producerId);
  buf[pos + PRODUCER_EPOCH] = stamp.producerEpoch >> 8;
  buf[pos + PRODUCER_EPOCH + 1] = stamp.producerEpoch;
  w32(buf, pos + BASE_SEQUENCE, stamp.firstSequence);
  w32(buf, pos + RECORD_COUNT, count);
  w32(buf, pos + CRC, crc32cRange(buf, pos + ATTRIBUTES, p));
  return p;
}

/** After writeWireFromStoredBatch: records written, and the offset after the last record read. */
export const wireOut = { records: 0, nextOffset: 0 };

const EMPTY = Buffer.alloc(0);

/** A producer id's decimal bytes, cached for the last id seen (a batch, then its neighbours, share one). */
let pidCacheId = -1;
let pidCacheBytes = Buffer.alloc(0);

function producerIdBytes(id: number): Buffer {
  if (id !== pidCacheId) {
    pidCacheId = id;
    pidCacheBytes = Buffer.from(String(id), 'latin1');
  }
  return pidCacheBytes;
}

/** A varint at `at` (one byte inline, the rest through readVarint, which checks `end`); sets varEnd.pos. */
function varint(b: Uint8Array, at: number, end: number): number {
  const x = b[at]!;
  if (x < 0x80 && at < end) {
    varEnd.pos = at + 1;
    return (x >>> 1) ^ -(x & 1);
  }
  return readVarint(b, at, end);
}


/**
 * Writes the records of the stored batch at `pos` of `src` (written by this process, or validated: its
 * varints are checked against the batch's end, nothing else is) from offset `from` on as wire records of a
 * CONSUME reply (with record_extensions_v1 when `ext`), at `at` of `dst`: the bytes writeWireRecord writes
 * for the same record in the current layout. `dst` needs room for the batch's size plus, per record, 43
 * bytes and the producer id's digits. Returns the end, or -1 when a record cannot go on the wire (a key
 * longer than 65535 bytes); wireOut tells how many records were written and the offset after the batch.
 */
export function writeWireFromStoredBatch(src: Buffer, pos: number, from: number, dst: Buffer, at: number, ext: boolean): number {
  const end = pos + LOG_OVERHEAD + r32s(src, pos + BATCH_LENGTH);
  const base = r64n(src, pos);
  const baseTs = r64n(src, pos + BASE_TIMESTAMP);
  const producerId = r64n(src, pos + PRODUCER_ID);
  const epoch = r16s(src, pos + PRODUCER_EPOCH);
  const baseSeq = r32s(src, pos + BASE_SEQUENCE);
  const bits = src[pos + ATTRIBUTES + 1]!;
  const wireAttrs = (bits & CONTROL_BIT ? WIRE_CONTROL : 0) | (bits & TRANSACTIONAL_BIT ? WIRE_TRANSACTIONAL : 0);
  const pid = producerId >= 0 ? producerIdBytes(producerId) : EMPTY;
  const pidLen = pid.length;
  const count = r32s(src, pos + RECORD_COUNT);
  let p = pos + RECORDS;
  let written = 0;
  for (let i = 0; i < count; i++) {
    const len = varint(src, p, end);
    const recEnd = varEnd.pos + len;
    p = varEnd.pos + 1; // attributes: unused
    const tsDelta = src[p]! < 0x80 ? (src[p]! >>> 1) ^ -(src[p]! & 1) : (readVarlong(src, p, recEnd) as number);
    p = src[p]! < 0x80 ? p + 1 : varEnd.pos;
    const offsetDelta = varint(src, p, recEnd);
    p = varEnd.pos;
    const offset = base + offsetDelta;
    if (offset < from) {
      p = recEnd;
      continue;
    }
    const keyLen = varint(src, p, recEnd);
    const keyAt = varEnd.pos;
    if (keyLen > 0xffff) return -1;
    p = keyAt + Math.max(keyLen, 0);
    const valueLen = varint(src, p, recEnd);
    const valueAt = varEnd.pos;
    p = valueAt + Math.max(valueLen, 0);
    // offset u64, sequence u64 (0 for a plain record, as the current layout's -1 goes out), producer id
    w64(dst, at, offset);
    w64(dst, at + 8, baseSeq >= 0 ? baseSeq + offsetDelta : 0);
    dst[at + 16] = pidLen >>> 8;
    dst[at + 17] = pidLen;
    at += 18;
    for (let j = 0; j < pidLen; j++) dst[at + j] = pid[j]!;
    at += pidLen;
    const kl = Math.max(keyLen, 0);
    dst[at] = kl >>> 8;
    dst[at + 1] = kl;
    copyRun(src, keyAt, keyAt + kl, dst, at + 2);
    at += 2 + kl;
    // epoch i64: the sign-extended 16-bit epoch
    w32(dst, at, epoch < 0 ? -1 : 0);
    w32(dst, at + 4, epoch);
    const vl = Math.max(valueLen, 0);
    w32(dst, at + 8, vl);
    copyRun(src, valueAt, valueAt + vl, dst, at + 12);
    at += 12 + vl;
    const hc = varint(src, p, recEnd);
    p = varEnd.pos;
    if (ext) {
      w64(dst, at, baseTs + tsDelta);
      // A null value (length -1) is the current layout's empty value with NULL_VALUE.
      dst[at + 8] = valueLen < 0 ? wireAttrs | RecordAttr.NULL_VALUE : wireAttrs;
      dst[at + 9] = hc >>> 8;
      dst[at + 10] = hc;
      at += 11;
    }
    for (let j = 0; j < hc; j++) {
      const hk = varint(src, p, recEnd);
      const hkAt = varEnd.pos;
      const hv = varint(src, hkAt + hk, recEnd);
      const hvAt = varEnd.pos;
      const hvl = Math.max(hv, 0);
      if (ext) {
        dst[at] = hk >>> 8;
        dst[at + 1] = hk;
        copyRun(src, hkAt, hkAt + hk, dst, at + 2);
        at += 2 + hk;
        w32(dst, at, hvl);
        copyRun(src, hvAt, hvAt + hvl, dst, at + 4);
        at += 4 + hvl;
      }
      p = hvAt + hvl;
    }
    if (p !== recEnd) throw new Error(`stored batch at ${pos}: record ${i} ends at ${p}, its length says ${recEnd}`);
    written++;
  }
  wireOut.records = written;
  wireOut.nextOffset = base + r32s(src, pos + LAST_OFFSET_DELTA) + 1;
  return at;
}

/** After writeV2RecordFromStored: the value bytes of the record written. */
export const v2Out = { valueLength: 0 };

/**
 * Writes the record stored at `pos` of `src` in the current layout (record-codec.ts; written by this
 * process or validated) as a RecordBatch v2 record at `at` of `dst`, with the given deltas from its batch's
 * base offset and base timestamp: the reading side of the migration (segments of the current layout
 * served as RecordBatch v2). Attributes stay with the batch, but for NULL_VALUE: the (empty) value goes out
 * as null (length -1), as the Kafka producer sent it, and so does a null header value. A record takes at
 * most its stored size plus 2 bytes per header. Returns the end.
 */
export function writeV2RecordFromStored(src: Buffer, pos: number, dst: Buffer, at: number, offsetDelta: number, tsDelta: number): number {
  const recEnd = pos + 4 + (src[pos]! * 0x1000000 + ((src[pos + 1]! << 16) | (src[pos + 2]! << 8) | src[pos + 3]!));
  // Past the producer id, epoch and sequence: the key (i32 length, -1 = null), the value (u32 length).
  const k = pos + 27 + ((src[pos + 25]! << 8) | src[pos + 26]!) + 16;
  const keyLen = r32s(src, k);
  const v = k + 4 + Math.max(keyLen, 0);
  const valueLen = r32u(src, v);
  const h0 = v + 4 + valueLen;
  const hc = (src[h0]! << 8) | src[h0 + 1]!;
  const nullValue = (src[pos + 24]! & RecordAttr.NULL_VALUE) !== 0 && valueLen === 0;
  const p = writeV2Record(src, k + 4, keyLen, v + 4, nullValue ? -1 : valueLen, h0 + 2, hc, tsDelta, offsetDelta, dst, at);
  if (headersEnd !== recEnd) throw new Error(`stored record at ${pos}: headers end at ${headersEnd}, the record at ${recEnd}`);
  v2Out.valueLength = valueLen;
  return p;
}

/**
 * Writes the wire record [s, e) of an append block (append-block.ts: the main port's layout with extensions,
 * stamped) as a RecordBatch v2 record at `at` of `dst`, as writeV2RecordFromStored writes the same record of
 * the per-record layout: an empty key goes out as no key. Returns the end; v2Out.valueLength is its value's.
 */
export function writeV2RecordFromBlock(src: Buffer, s: number, e: number, dst: Buffer, at: number, offsetDelta: number, tsDelta: number): number {
  const k = s + 18 + ((src[s + 16]! << 8) | src[s + 17]!);
  const keyLen = (src[k]! << 8) | src[k + 1]!;
  const v = k + 2 + keyLen + 8;
  const valueLen = r32u(src, v);
  const ve = v + 4 + valueLen;
  const hc = (src[ve + 9]! << 8) | src[ve + 10]!;
  const p = writeV2Record(src, k + 2, keyLen === 0 ? -1 : keyLen, v + 4, valueLen, ve + 11, hc, tsDelta, offsetDelta, dst, at);
  if (headersEnd !== e) throw new Error(`block record at ${s}: headers end at ${headersEnd}, the record at ${e}`);
  v2Out.valueLength = valueLen;
  return p;
}


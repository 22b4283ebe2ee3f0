/**
 * On-disk record format (big-endian):
 *
 *   length u32          bytes after this field
 *   crc32c u32          over every byte after this field
 *   offset u64
 *   timestamp i64       ms since the epoch
 *   attributes u8
 *   producerId          u16 length + utf8
 *   epoch i64           -1 = none
 *   sequence i64        -1 = none
 *   key                 i32 length (-1 = null) + bytes
 *   value               u32 length + bytes
 *   header count u16, each: key (u16 length + utf8), value (u32 length, 0xffffffff = null, + bytes)
 */
import type { LogRecord, RecordHeader, RecordInput } from 'tributary-protocol/record.js';
import { crc32cRange } from './crc32c.js';
import { r32u, r64n, w16, w32, w64 } from 'tributary-protocol/record-batch/layout.js';

/** Size of a record with empty producer id, null key, empty value and no headers. */
export const RECORD_OVERHEAD = 4 + 4 + 8 + 8 + 1 + 2 + 8 + 8 + 4 + 4 + 2;
/** The smallest legal value of the length field. */
export const MIN_RECORD_BODY = RECORD_OVERHEAD - 4;
/** Hard cap on one record's length field; anything larger is treated as corruption. */
export const MAX_RECORD_BODY = 0x7fffffff;
/** The stored length of a null header value: never a real one, which fits in a record body (MAX_RECORD_BODY). */
export const NULL_HEADER_VALUE = 0xffffffff;

/**
 * A header as storage holds it. `nullValue`: a Kafka producer's header whose value is null (length -1),
 * stored with length NULL_HEADER_VALUE and read back with an empty `value`; only the Kafka port gives it
 * as null, the main port's wire as empty (docs/architecture.md, "Storage"; docs/protocol.md 5.2).
 */
export interface StoredHeader extends RecordHeader {
  nullValue?: true;
}

/**
 * What a read charges each header against its byte limit on top of the header's stored bytes (6 and up):
 * read as an object, a header costs about 190 bytes, so a limit on bytes alone let one read of 1 MiB of
 * records build 175,000 header objects, and a CONSUME of 64 MiB 11M (1.9 GB).
 */
export const READ_HEADER_COST = 100;

/**
 * Storage-internal attribute bit on the last record of every append: recovery keeps only whole appends.
 * Never shown to readers; inputs cannot set it.
 */
export const ATTR_END_OF_APPEND = 0x80;
/** The attribute bits that belong to users (everything but the storage-internal ones). */
export const USER_ATTR_MASK = 0xff & ~ATTR_END_OF_APPEND;
/** Where the attributes byte lies in a stored record (after length, crc32c, offset and timestamp). */
export const ATTRIBUTES_AT = 4 + 4 + 8 + 8;

/**
 * Sets ATTR_END_OF_APPEND on the whole stored record buf[pos, pos + size) and recomputes its CRC, in place:
 * a truncation inside an append makes the last record it keeps end one (log-truncate.ts).
 */
export function markEndOfAppend(buf: Buffer, pos: number, size: number): void {
  buf[pos + ATTRIBUTES_AT] |= ATTR_END_OF_APPEND;
  w32(buf, pos + 4, crc32cRange(buf, pos + 8, pos + size));
}

const TWO_32 = 4294967296;

/** What the encoder needs: a RecordInput with its assigned offset and final timestamp. */
export interface EncodableRecord {
  offset: number;
  timestamp: number;
  key: Buffer | null;
  value: Buffer;
  headers?: StoredHeader[];
  producerId?: string;
  epoch?: number;
  sequence?: number;
  attributes?: number;
}

export type DecodeFailure = {
  ok: false;
  /** 'incomplete': the record runs past the available bytes (a torn write); 'corrupt': bad length/CRC/structure. */
  reason: 'incomplete' | 'corrupt';
  /** For 'incomplete' with a readable length field: total bytes the record claims. */
  needed?: number;
};
export type DecodeResult = { ok: true; record: LogRecord; size: number } | DecodeFailure;
export type InspectResult = { ok: true; size: number; offset: number; timestamp: number; attributes: number } | DecodeFailure;

/**
 * The time a record counts as in its segment's age (retention by time, the segment's maxTimestamp): its
 * timestamp, or `appendedAt` for one without (negative: a Kafka producer's -1, "no timestamp"), the time
 * it was appended as near as the caller knows it. So such a record neither makes its segment look
 * infinitely old (deleted at once) nor keeps it for ever (docs/architecture.md, "Retention").
 */
export function ageTimestamp(timestamp: number, appendedAt: number): number {
  return timestamp < 0 ? appendedAt : timestamp;
}

/** Encoded size of one record (offset/timestamp do not affect it). */
export function encodedSize(r: RecordInput | EncodableRecord): number {
  let n = RECORD_OVERHEAD + r.value.length;
  if (r.key) n += r.key.length;
  if (r.producerId) n += Buffer.byteLength(r.producerId, 'utf8');
  const headers = r.headers;
  if (headers) {
    for (let i = 0; i < headers.length; i++) {
      const h = headers[i];
      n += 2 + Buffer.byteLength(h.key, 'utf8') + 4 + h.value.length;
    }
  }
  return n;
}

/**
 * Checks limits the format imposes (u16 lengths, safe integers, attribute byte).
 * Returns a reason string, or null when the record can be encoded. A timestamp may be negative only when
 * kept as given (`keepTimestamp`, or `anyTimestamp` for a record as stored: a replica's).
 */
export function validateEncodable(r: RecordInput, anyTimestamp = r.keepTimestamp === true): string | null {
  if (!Buffer.isBuffer(r.value)) return 'value must be a Buffer';
  if (r.key !== null && !Buffer.isBuffer(r.key)) return 'key must be a Buffer or null';
  if (r.timestamp !== undefined && !(Number.isSafeInteger(r.timestamp) && (anyTimestamp || r.timestamp >= 0))) {
    return anyTimestamp ? 'timestamp must be a safe integer' : 'timestamp must be a non-negative safe integer';
  }
  if (r.epoch !== undefined && !(Number.isSafeInteger(r.epoch) && r.epoch >= -1)) return 'epoch must be a safe integer >= -1';
  if (r.sequence !== undefined && !(Number.isSafeInteger(r.sequence) && r.sequence >= -1)) return 'sequence must be a safe integer >= -1';
  if (r.attributes !== undefined && !(Number.isInteger(r.attributes) && r.attributes >= 0 && r.attributes <= 0xff)) return 'attributes must fit in a byte';
  if (r.producerId !== undefined) {
    if (typeof r.producerId !== 'string') return 'producerId must be a string';
    if (Buffer.byteLength(r.producerId, 'utf8') > 0xffff) return 'producerId too long';
  }
  if (r.key && r.key.length > 0x7fffffff) return 'key too long';
  if (r.headers !== undefined) {
    if (!Array.isArray(r.headers)) return 'headers must be an array';
    if (r.headers.length > 0xffff) return 'too many headers';
    for (const h of r.headers) {
      if (typeof h?.key !== 'string' || !Buffer.isBuffer(h.value)) return 'header must have a string key and Buffer value';
      const nullValue = (h as StoredHeader).nullValue;
      if (nullValue !== undefined && (nullValue !== true || h.value.length > 0)) return 'a null header value must be empty with nullValue true';
      if (Buffer.byteLength(h.key, 'utf8') > 0xffff) return 'header key too long';
    }
  }
  return null;
}

// The CRC-32C range function moved to the protocol package with crc32c; re-exported for the existing callers.
export { crc32cRange };

// Byte-level writers: the buffer is pre-sized, so Buffer's per-call range checks are redundant.
function w8(b: Buffer, p: number, v: number): void {
  b[p] = v;
}

function writeRecord(buf: Buffer, pos: number, r: EncodableRecord, view: LogRecord | null): number {
  let p = pos + 8;
  w64(buf, p, r.offset);
  p += 8;
  w64(buf, p, r.timestamp);
  p += 8;
  w8(buf, p, r.attributes ?? 0);
  p += 1;
  const pid = r.producerId ?? '';
  const pidLen = pid.length === 0 ? 0 : buf.write(pid, p + 2, 'utf8');
  w16(buf, p, pidLen);
  p += 2 + pidLen;
  w64(buf, p, r.epoch ?? -1);
  p += 8;
  w64(buf, p, r.sequence ?? -1);
  p += 8;
  const key = r.key;
  if (key === null) {
    w32(buf, p, 0xffffffff);
    p += 4;
  } else {
    w32(buf, p, key.length);
    p += 4;
    // TypedArray#set: the bytes of Buffer#copy without its argument handling (a hot path).
    buf.set(key, p);
    if (view) view.key = buf.subarray(p, p + key.length);
    p += key.length;
  }
  const value = r.value;
  w32(buf, p, value.length);
  p += 4;
  buf.set(value, p);
  if (view) view.value = buf.subarray(p, p + value.length);
  p += value.length;
  const headers = r.headers ?? [];
  w16(buf, p, headers.length);
  p += 2;
  for (let i = 0; i < headers.length; i++) {
    const h = headers[i];
    const kLen = h.key.length === 0 ? 0 : buf.write(h.key, p + 2, 'utf8');
    w16(buf, p, kLen);
    p += 2 + kLen;
    if (h.nullValue) {
      w32(buf, p, NULL_HEADER_VALUE);
      p += 4;
      if (view) (view.headers as StoredHeader[]).push({ key: h.key, value: EMPTY, nullValue: true });
      continue;
    }
    w32(buf, p, h.value.length);
    p += 4;
    buf.set(h.value, p);
    if (view) view.headers.push({ key: h.key, value: buf.subarray(p, p + h.value.length) });
    p += h.value.length;
  }
  w32(buf, pos, p - pos - 4);
  w32(buf, pos + 4, crc32cRange(buf, pos + 8, p));
  return p;
}

/**
 * Encodes one record at `pos`; `buf` must have room for `encodedSize(r)` bytes. Returns the end position.
 */
export function encodeRecordInto(buf: Buffer, pos: number, r: EncodableRecord): number {
  return writeRecord(buf, pos, r, null);
}

/**
 * Like encodeRecordInto, and also returns a LogRecord whose key/value/header buffers are views into `buf`
 * (so a cache of it pins only our own copy, not the caller's buffers).
 */
export function encodeRecordView(buf: Buffer, pos: number, r: EncodableRecord): { end: number; record: LogRecord } {
  const record: LogRecord = {
    offset: r.offset,
    timestamp: r.timestamp,
    key: null,
    value: EMPTY,
    headers: [],
    producerId: r.producerId ?? '',
    epoch: r.epoch ?? -1,
    sequence: r.sequence ?? -1,
    attributes: r.attributes ?? 0,
  };
  const end = writeRecord(buf, pos, r, record);
  return { end, record };
}

const EMPTY = Buffer.alloc(0);

/** Encodes many records into one freshly allocated Buffer. */
export function encodeRecords(records: readonly EncodableRecord[]): Buffer {
  let total = 0;
  for (const r of records) total += encodedSize(r);
  const buf = Buffer.allocUnsafe(total);
  let p = 0;
  for (const r of records) p = writeRecord(buf, p, r, null);
  // Every byte is written by writeRecord; this guards the allocUnsafe assumption.
  if (p !== total) throw new Error(`record encoding size mismatch: ${p} != ${total}`);
  return buf;
}

/** Reads the frame (length + CRC) at pos; returns the record end, or a failure. */
function checkFrame(buf: Buffer, pos: number, end: number): number | DecodeFailure {
  if (pos < 0 || pos > end) return { ok: false, reason: 'corrupt' };
  if (end - pos < 4) return { ok: false, reason: 'incomplete' };
  const len = buf.readUInt32BE(pos);
  if (len < MIN_RECORD_BODY || len > MAX_RECORD_BODY) return { ok: false, reason: 'corrupt' };
  const recEnd = pos + 4 + len;
  if (recEnd > end) return { ok: false, reason: 'incomplete', needed: 4 + len };
  if (buf.readUInt32BE(pos + 4) !== crc32cRange(buf, pos + 8, recEnd)) return { ok: false, reason: 'corrupt' };
  return recEnd;
}

const CORRUPT: DecodeFailure = { ok: false, reason: 'corrupt' };

/**
 * Walks the record body between pos and recEnd, checking every length against the remaining bytes.
 * With `out` it fills a LogRecord (buffers are views into `buf`); without it only validates.
 */
function walk(buf: Buffer, pos: number, recEnd: number, out: LogRecord | null): { offset: number; timestamp: number; attributes: number } | null {
  let p = pos + 8;
  const offHi = buf.readUInt32BE(p);
  const offset = offHi * TWO_32 + buf.readUInt32BE(p + 4);
  if (!Number.isSafeInteger(offset)) return null;
  p += 8;
  const timestamp = r64n(buf, p);
  if (!Number.isSafeInteger(timestamp)) return null;
  p += 8;
  const attributes = buf[p];
  p += 1;
  // Fixed fields after the producer id need 8+8+4 bytes before the key; checked incrementally.
  const pidLen = buf.readUInt16BE(p);
  p += 2;
  if (recEnd - p < pidLen + 20) return null;
  const pidStart = p;
  p += pidLen;
  const epoch = r64n(buf, p);
  p += 8;
  const sequence = r64n(buf, p);
  p += 8;
  if (!Number.isSafeInteger(epoch) || !Number.isSafeInteger(sequence)) return null;
  const keyLen = buf.readInt32BE(p);
  p += 4;
  if (keyLen < -1) return null;
  let keyStart = -1;
  if (keyLen >= 0) {
    if (recEnd - p < keyLen) return null;
    keyStart = p;
    p += keyLen;
  }
  if (recEnd - p < 4) return null;
  const valueLen = buf.readUInt32BE(p);
  p += 4;
  if (recEnd - p < valueLen) return null;
  const valueStart = p;
  p += valueLen;
  if (recEnd - p < 2) return null;
  const headerCount = buf.readUInt16BE(p);
  p += 2;
  const headers: StoredHeader[] | null = out ? [] : null;
  for (let i = 0; i < headerCount; i++) {
    if (recEnd - p < 2) return null;
    const hkLen = buf.readUInt16BE(p);
    p += 2;
    if (recEnd - p < hkLen + 4) return null;
    const hkStart = p;
    p += hkLen;
    const hvLen = buf.readUInt32BE(p);
    p += 4;
    if (hvLen === NULL_HEADER_VALUE) {
      if (headers) headers.push({ key: buf.toString('utf8', hkStart, hkStart + hkLen), value: EMPTY, nullValue: true });
      continue;
    }
    if (recEnd - p < hvLen) return null;
    if (headers) headers.push({ key: buf.toString('utf8', hkStart, hkStart + hkLen), value: buf.subarray(p, p + hvLen) });
    p += hvLen;
  }
  if (p !== recEnd) return null;
  if (out) {
    out.offset = offset;
    out.timestamp = timestamp;
    out.attributes = attributes;
    out.producerId = pidLen === 0 ? '' : buf.toString('utf8', pidStart, pidStart + pidLen);
    out.epoch = epoch;
    out.sequence = sequence;
    out.key = keyStart < 0 ? null : buf.subarray(keyStart, keyStart + keyLen);
    out.value = buf.subarray(valueStart, valueStart + valueLen);
    out.headers = headers ?? [];
  }
  return { offset, timestamp, attributes };
}

/**
 * Decodes the record at `pos`, using bytes only up to `end` (default buf.length). Never throws:
 * a short buffer gives 'incomplete', a bad length/CRC/structure gives 'corrupt'.
 * Returned buffers are views into `buf`.
 */
/** A record to be filled in by `walk`. */
function blankRecord(): LogRecord {
  return { offset: 0, timestamp: 0, key: null, value: EMPTY, headers: [], producerId: '', epoch: -1, sequence: -1, attributes: 0 };
}

export function decodeRecord(buf: Buffer, pos: number, end: number = buf.length): DecodeResult {
  try {
    const recEnd = checkFrame(buf, pos, Math.min(end, buf.length));
    if (typeof recEnd !== 'number') return recEnd;
    const record = blankRecord();
    if (!walk(buf, pos, recEnd, record)) return CORRUPT;
    return { ok: true, record, size: recEnd - pos };
  } catch {
    return CORRUPT;
  }
}

/**
 * Decodes a record this process encoded and still holds in memory (the tail cache of PartitionLog): the
 * frame and CRC are not checked again. Buffers are views into `buf`; attributes are as stored.
 */
export function decodeOwnRecord(buf: Buffer, pos: number): LogRecord {
  const record = blankRecord();
  if (!walk(buf, pos, pos + 4 + buf.readUInt32BE(pos), record)) throw new Error(`corrupt cached record at position ${pos}`);
  return record;
}

/** Validates the record at `pos` (frame, CRC and structure) without materialising it. Never throws. */
export function inspectRecord(buf: Buffer, pos: number, end: number = buf.length): InspectResult {
  try {
    const recEnd = checkFrame(buf, pos, Math.min(end, buf.length));
    if (typeof recEnd !== 'number') return recEnd;
    const r = walk(buf, pos, recEnd, null);
    if (!r) return CORRUPT;
    return { ok: true, size: recEnd - pos, offset: r.offset, timestamp: r.timestamp, attributes: r.attributes };
  } catch {
    return CORRUPT;
  }
}

/** Decodes consecutive records until the bytes run out or one fails; `failure` tells why it stopped early. */
export function decodeRecords(buf: Buffer): { records: LogRecord[]; bytesRead: number; failure: DecodeFailure | null } {
  const records: LogRecord[] = [];
  let p = 0;
  while (p < buf.length) {
    const r = decodeRecord(buf, p);
    if (!r.ok) return { records, bytesRead: p, failure: r };
    records.push(r.record);
    p += r.size;
  }
  return { records, bytesRead: p, failure: null };
}

/** Header count of the record this process encoded, or validated, at `pos` of `buf` (no checks). */
export function storedHeaderCount(buf: Buffer, pos: number): number {
  // Past the producer id, epoch and sequence: the key (i32 length, -1 = null), the value (u32 length).
  let p = pos + 27 + ((buf[pos + 25]! << 8) | buf[pos + 26]!) + 16;
  const keyLen = (buf[p]! << 24) | (buf[p + 1]! << 16) | (buf[p + 2]! << 8) | buf[p + 3]!;
  p += 4 + Math.max(keyLen, 0);
  p += 4 + (buf[p]! * 0x1000000 + ((buf[p + 1]! << 16) | (buf[p + 2]! << 8) | buf[p + 3]!));
  return (buf[p]! << 8) | buf[p + 1]!;
}

/** Copies src[s, e) to dst at `at`: short runs byte by byte (cheaper than a view), longer ones with set. */
export function copyRun(src: Buffer, s: number, e: number, dst: Buffer, at: number): void {
  const n = e - s;
  if (n <= 32) {
    for (let i = 0; i < n; i++) dst[at + i] = src[s + i]!;
  } else {
    dst.set(new Uint8Array(src.buffer, src.byteOffset + s, n), at);
  }
}

/**
 * Writes the record this process encoded at `pos` of `src` (trusted: no frame/CRC check, as decodeOwnRecord)
 * in the wire record layout of a binary batch (docs/protocol.md section 5), at `at` of `dst`: the bytes
 * encodeBatch writes for the LogRecord decodeOwnRecord would return (attributes masked to the user bits).
 * `dst` needs room for the stored size of the record (the wire record is never larger). Returns the end
 * position, or -1 when the record cannot go on the wire (a key longer than 65535 bytes), writing nothing
 * the caller may use. `attrMask` 0xff keeps ATTR_END_OF_APPEND (a REPLICA_FETCH batch frame, whose records
 * are read with keepAppendMarker).
 */
export function writeWireRecord(src: Buffer, pos: number, dst: Buffer, at: number, ext: boolean, attrMask = USER_ATTR_MASK): number {
  const recEnd = pos + 4 + (src[pos]! * 0x1000000 + ((src[pos + 1]! << 16) | (src[pos + 2]! << 8) | src[pos + 3]!));
  // offset u64: stored as a non-negative 64-bit big-endian value, the same bytes.
  for (let i = 0; i < 8; i++) dst[at + i] = src[pos + 8 + i]!;
  const pidLen = (src[pos + 25]! << 8) | src[pos + 26]!;
  const pidEnd = pos + 27 + pidLen;
  // sequence u64: max(0, sequence); the stored value is a signed 64-bit two's complement.
  const seqAt = pidEnd + 8;
  if (src[seqAt]! & 0x80) {
    for (let i = 0; i < 8; i++) dst[at + 8 + i] = 0;
  } else {
    for (let i = 0; i < 8; i++) dst[at + 8 + i] = src[seqAt + i]!;
  }
  at += 16;
  // producer id: u16 length + utf8, as stored.
  copyRun(src, pos + 25, pidEnd, dst, at);
  at += 2 + pidLen;
  // key: stored i32 length (-1 = null), wire u16 length (null -> 0).
  const klAt = seqAt + 8;
  const keyLen = (src[klAt]! << 24) | (src[klAt + 1]! << 16) | (src[klAt + 2]! << 8) | src[klAt + 3]!;
  let p = klAt + 4;
  if (keyLen > 0) {
    if (keyLen > 0xffff) return -1;
    dst[at] = keyLen >>> 8;
    dst[at + 1] = keyLen;
    copyRun(src, p, p + keyLen, dst, at + 2);
    at += 2 + keyLen;
    p += keyLen;
  } else {
    dst[at] = 0;
    dst[at + 1] = 0;
    at += 2;
  }
  // epoch i64, as stored.
  for (let i = 0; i < 8; i++) dst[at + i] = src[pidEnd + i]!;
  at += 8;
  // value: u32 length + bytes, as stored.
  const valueLen = src[p]! * 0x1000000 + ((src[p + 1]! << 16) | (src[p + 2]! << 8) | src[p + 3]!);
  const valueEnd = p + 4 + valueLen;
  copyRun(src, p, valueEnd, dst, at);
  at += valueEnd - p;
  if (ext) {
    // timestamp i64, attributes u8 (user bits), then header count and headers as stored, but for a null
    // header value, which goes out empty: the wire's u32 lengths have no null (docs/protocol.md 5.2).
    for (let i = 0; i < 8; i++) dst[at + i] = src[pos + 16 + i]!;
    dst[at + 8] = src[pos + 24]! & attrMask;
    at += 9;
    copyRun(src, valueEnd, recEnd, dst, at);
    let h = at + 2;
    for (let i = (dst[at]! << 8) | dst[at + 1]!; i > 0; i--) {
      h += 2 + ((dst[h]! << 8) | dst[h + 1]!);
      const hvLen = dst[h]! * 0x1000000 + ((dst[h + 1]! << 16) | (dst[h + 2]! << 8) | dst[h + 3]!);
      if (hvLen === NULL_HEADER_VALUE) dst.fill(0, h, h + 4);
      h += hvLen === NULL_HEADER_VALUE ? 4 : 4 + hvLen;
    }
    at += recEnd - valueEnd;
  }
  return at;
}

/**
 * Stored size (encodedSize) of the record a produce batch carries at `s` of `body` (validated by scanBatch;
 * `recEnd` is where it ends) once the broker resets its attributes and, unless `idempotent` (its producer
 * id, epoch and a sequence are then stored), its producer id, epoch and sequence.
 */
export function storedSizeOfWire(body: Buffer, s: number, recEnd: number, ext: boolean, idempotent = false): number {
  const pidLen = (body[s + 16]! << 8) | body[s + 17]!;
  const k = s + 18 + pidLen;
  const keyLen = (body[k]! << 8) | body[k + 1]!;
  const v = k + 10 + keyLen;
  const valueLen = body[v]! * 0x1000000 + ((body[v + 1]! << 16) | (body[v + 2]! << 8) | body[v + 3]!);
  return RECORD_OVERHEAD + (idempotent ? pidLen : 0) + keyLen + valueLen + (ext ? recEnd - (v + 4 + valueLen + 11) : 0);
}

/** Timestamp the last writeStoredFromWire call stored. */
export let lastWireTimestamp = 0;

/**
 * Encodes the wire record at `s` of a validated produce batch (scanBatch) at `pos` of `buf`, the bytes
 * encodeRecordInto writes for the record produceBatch hands to the log: an empty key as null, the
 * timestamp when positive (else `now`), the given attributes, headers only with extensions (their bytes as
 * on the wire); with `sequence` -1 an empty producer id and epoch and sequence -1, else (an idempotent
 * batch) the record's producer id and epoch as sent, and `sequence`. Returns the end position.
 */
export function writeStoredFromWire(
  body: Buffer,
  s: number,
  recEnd: number,
  ext: boolean,
  buf: Buffer,
  pos: number,
  offset: number,
  now: number,
  attributes: number,
  sequence = -1,
): number {
  const pidLen = (body[s + 16]! << 8) | body[s + 17]!;
  const k = s + 18 + pidLen;
  const keyLen = (body[k]! << 8) | body[k + 1]!;
  const v = k + 10 + keyLen;
  const valueLen = r32u(body, v);
  const ve = v + 4 + valueLen;
  let timestamp = now;
  if (ext) {
    const ts = r64n(body, ve);
    if (ts > 0) timestamp = ts;
  }
  lastWireTimestamp = timestamp;
  w64(buf, pos + 8, offset);
  w64(buf, pos + 16, timestamp);
  buf[pos + 24] = attributes;
  let p: number;
  if (sequence < 0) {
    buf[pos + 25] = 0;
    buf[pos + 26] = 0;
    // epoch and sequence -1.
    for (let i = 27; i < 43; i++) buf[pos + i] = 0xff;
    p = pos + 43;
  } else {
    // producer id (u16 length + utf8, the wire's bytes), epoch i64 (the wire's bytes), then the sequence.
    copyRun(body, s + 16, k, buf, pos + 25);
    p = pos + 27 + pidLen;
    for (let i = 0; i < 8; i++) buf[p + i] = body[k + 2 + keyLen + i]!;
    w64(buf, p + 8, sequence);
    p += 16;
  }
  if (keyLen === 0) {
    w32(buf, p, 0xffffffff);
    p += 4;
  } else {
    w32(buf, p, keyLen);
    copyRun(body, k + 2, k + 2 + keyLen, buf, p + 4);
    p += 4 + keyLen;
  }
  copyRun(body, v, ve, buf, p);
  p += ve - v;
  if (ext) {
    copyRun(body, ve + 9, recEnd, buf, p);
    p += recEnd - (ve + 9);
  } else {
    buf[p] = 0;
    buf[p + 1] = 0;
    p += 2;
  }
  w32(buf, pos, p - pos - 4);
  w32(buf, pos + 4, crc32cRange(buf, pos + 8, p));
  return p;
}

import { isUtf8 } from 'node:buffer';
import { TributaryError } from './errors.js';
import type { LogRecord, RecordHeader } from './record.js';

/** First two bytes of a binary batch body. */
export const BATCH_MAGIC = 0xba7c;

export type Acks = '0' | '1' | '-1' | 'all';

export interface BatchRecord {
  offset: number;
  sequence: number;
  producerId: string;
  key: Buffer | null;
  epoch: number;
  value: Buffer;
  /** Only carried when the connection negotiated record_extensions_v1. */
  timestamp: number;
  attributes: number;
  headers: RecordHeader[];
}

/**
 * The transaction a batch belongs to (flags 2, docs/protocol.md section 5.3). A producer's frame goes to
 * the transactional id's coordinator (`coordinatorPartition` -1); a coordinator's frame to a data leader
 * names its `__transaction_state` partition and its leader epoch there (broker to broker, TXN_APPEND).
 */
export interface BatchTxn {
  transactionalId: string;
  producerId: string;
  epoch: number;
  coordinatorPartition: number;
  coordinatorEpoch: number;
}

export interface Batch {
  topic: string;
  partition: number;
  acks: Acks;
  idempotent: boolean;
  firstSequence: number;
  lastSequence: number;
  records: BatchRecord[];
  /** A transactional batch (then `idempotent` is false: the sequences are the transaction's). */
  txn?: BatchTxn;
  /** Trailer of CONSUME replies under record_extensions_v1. */
  trailer?: BatchTrailer;
}

export interface BatchTrailer {
  /** Where the next read should start (past any records filtered out). */
  nextOffset: number;
  highWatermark: number;
  logStartOffset: number;
}

export function isBatchBody(body: Buffer): boolean {
  return body.length >= 2 && body[0] === 0xba && body[1] === 0x7c;
}

/** The header's flags byte: 0 plain, 1 idempotent, 2 transactional (a transaction section follows the count). */
const FLAG_IDEMPOTENT = 1;
const FLAG_TRANSACTIONAL = 2;

/**
 * The transaction section of a batch body that isBatchBody accepted, read from its header only: undefined
 * for a plain or idempotent batch or a header too short to say (decodeBatch then refuses it).
 */
export function batchTxnKind(body: Buffer): 'producer' | 'coordinator' | undefined {
  if (body.length < 4) return undefined;
  const topicLen = (body[2]! << 8) | body[3]!;
  const acksAt = 4 + topicLen + 4;
  if (body.length <= acksAt) return undefined;
  const flagsAt = acksAt + 1 + body[acksAt]!;
  if (body.length <= flagsAt || body[flagsAt] !== FLAG_TRANSACTIONAL) return undefined;
  // Transaction section after flags, sequences and count: id, producer id (u16 + UTF-8 each), epoch i32, coordinator partition i32.
  let at = flagsAt + 1 + 16 + 4;
  for (let i = 0; i < 2; i++) {
    if (body.length < at + 2) return undefined;
    at += 2 + ((body[at]! << 8) | body[at + 1]!);
  }
  if (body.length < at + 8) return undefined;
  return r32s(body, at + 4) >= 0 ? 'coordinator' : 'producer';
}

function bad(reason: string): TributaryError {
  return new TributaryError('invalid_batch', { reason });
}

const TWO_32 = 0x100000000;

// Byte-level big-endian writers for the pre-sized buffer of encodeBatch. `v >>> n` is ToUint32 of v, so
// w32 writes the same bytes as writeUInt32BE(v >>> 0), and a negative int32 comes out in two's complement.
function w16(buf: Buffer, at: number, v: number): void {
  buf[at] = v >>> 8;
  buf[at + 1] = v;
}

function w32(buf: Buffer, at: number, v: number): void {
  buf[at] = v >>> 24;
  buf[at + 1] = v >>> 16;
  buf[at + 2] = v >>> 8;
  buf[at + 3] = v;
}

/** Signed 32-bit big-endian read; the caller has checked the bounds. */
function r32s(buf: Buffer, at: number): number {
  return (buf[at]! << 24) | (buf[at + 1]! << 16) | (buf[at + 2]! << 8) | buf[at + 3]!;
}

/** Unsigned 32-bit big-endian read; the caller has checked the bounds. */
function r32u(buf: Buffer, at: number): number {
  return buf[at]! * 0x1000000 + ((buf[at + 1]! << 16) | (buf[at + 2]! << 8) | buf[at + 3]!);
}

function writeU64(buf: Buffer, v: number, at: number): void {
  // Two halves avoid BigInt on the hot path; values are validated safe integers.
  w32(buf, at, Math.floor(v / TWO_32));
  w32(buf, at + 4, v);
}

function readU64(buf: Buffer, at: number): number {
  const hi = r32u(buf, at);
  if (hi > 0x1fffff) throw bad('64-bit value beyond 2^53');
  return hi * TWO_32 + r32u(buf, at + 4);
}

function writeI64(buf: Buffer, v: number, at: number): void {
  if (Number.isSafeInteger(v)) {
    // Two's complement in two 32-bit halves: hi = floor(v / 2^32) is the signed high word, and
    // v - hi * 2^32 (exact for safe integers) is the unsigned low word.
    const hi = Math.floor(v / TWO_32);
    w32(buf, at, hi);
    w32(buf, at + 4, v - hi * TWO_32);
  } else {
    // Beyond the safe range (or not an integer): BigInt gives the exact bytes, or throws as before.
    buf.writeBigInt64BE(BigInt(v), at);
  }
}

function readI64(buf: Buffer, at: number): number {
  const hi = r32s(buf, at);
  const lo = r32u(buf, at + 4);
  // The safe range is [-(2^53 - 1), 2^53 - 1]: a high word in [-2^21, 2^21 - 1], except -2^53 itself
  // (high word -2^21 with a zero low word). Inside it, hi * 2^32 + lo is exact.
  if (hi > 0x1fffff || hi < -0x200000 || (hi === -0x200000 && lo === 0)) throw bad('64-bit value beyond 2^53');
  return hi * TWO_32 + lo;
}

function truncated(): TributaryError {
  return bad('truncated batch');
}

export interface EncodeOptions {
  /** Write timestamps, attributes and headers per record (record_extensions_v1). */
  extensions?: boolean;
}

/** Writes a string's UTF-8 bytes at `at` (its length was measured with Buffer.byteLength); returns the byte count. */
function writeUtf8(buf: Buffer, s: string, at: number): number {
  return s.length === 0 ? 0 : buf.write(s, at, 'utf8');
}

/**
 * One pass measures (validating every length), a second writes into one buffer of exactly that size.
 * Records are only read, so stored records (LogRecord) can be passed as they are.
 */
export function encodeBatch(batch: Batch, opts: EncodeOptions = {}): Buffer {
  const ext = opts.extensions === true;
  const records = batch.records;
  const n = records.length;
  const topicLen = Buffer.byteLength(batch.topic, 'utf8');
  const acksLen = Buffer.byteLength(batch.acks, 'ascii');
  if (topicLen > 0xffff) throw bad('topic longer than 65535 bytes');
  let size = 2 + 2 + topicLen + 4 + 1 + acksLen + 1 + 8 + 8 + 4;
  const txn = batch.txn;
  let txnIdLen = 0;
  let txnPidLen = 0;
  if (txn) {
    txnIdLen = Buffer.byteLength(txn.transactionalId, 'utf8');
    txnPidLen = Buffer.byteLength(txn.producerId, 'utf8');
    if (txnIdLen > 0xffff || txnPidLen > 0xffff) throw bad('transactional id or producer id longer than 65535 bytes');
    size += 2 + txnIdLen + 2 + txnPidLen + 4 + 4 + 4;
  }
  for (let i = 0; i < n; i++) {
    const r = records[i]!;
    const pidLen = r.producerId.length === 0 ? 0 : Buffer.byteLength(r.producerId, 'utf8');
    const keyLen = r.key ? r.key.length : 0;
    if (keyLen > 0xffff) throw bad('key longer than 65535 bytes');
    if (pidLen > 0xffff) throw bad('producer id too long');
    size += 8 + 8 + 2 + pidLen + 2 + keyLen + 8 + 4 + r.value.length;
    if (ext) {
      const hs = r.headers;
      if (hs.length > 0xffff) throw bad('more than 65535 headers');
      size += 8 + 1 + 2;
      for (let h = 0; h < hs.length; h++) {
        const kl = Buffer.byteLength(hs[h]!.key, 'utf8');
        if (kl > 0xffff) throw bad('header key longer than 65535 bytes');
        size += 2 + kl + 4 + hs[h]!.value.length;
      }
    }
  }
  if (ext && batch.trailer) size += 24;
  const buf = Buffer.allocUnsafe(size);
  w16(buf, 0, BATCH_MAGIC);
  w16(buf, 2, topicLen);
  let at = 4 + writeUtf8(buf, batch.topic, 4);
  at = buf.writeInt32BE(batch.partition, at);
  at = buf.writeUInt8(acksLen, at);
  at += buf.write(batch.acks, at, 'ascii');
  buf[at] = txn ? FLAG_TRANSACTIONAL : batch.idempotent ? FLAG_IDEMPOTENT : 0;
  writeU64(buf, batch.firstSequence, at + 1);
  writeU64(buf, batch.lastSequence, at + 9);
  w32(buf, at + 17, n);
  at += 21;
  if (txn) {
    w16(buf, at, txnIdLen);
    at += 2 + writeUtf8(buf, txn.transactionalId, at + 2);
    w16(buf, at, txnPidLen);
    at += 2 + writeUtf8(buf, txn.producerId, at + 2);
    w32(buf, at, txn.epoch);
    w32(buf, at + 4, txn.coordinatorPartition);
    w32(buf, at + 8, txn.coordinatorEpoch);
    at += 12;
  }
  for (let i = 0; i < n; i++) {
    const r = records[i]!;
    writeU64(buf, r.offset, at);
    writeU64(buf, Math.max(0, r.sequence), at + 8);
    at += 16;
    const pidLen = writeUtf8(buf, r.producerId, at + 2);
    w16(buf, at, pidLen);
    at += 2 + pidLen;
    const key = r.key;
    if (key) {
      w16(buf, at, key.length);
      buf.set(key, at + 2);
      at += 2 + key.length;
    } else {
      w16(buf, at, 0);
      at += 2;
    }
    writeI64(buf, r.epoch, at);
    const value = r.value;
    w32(buf, at + 8, value.length);
    buf.set(value, at + 12);
    at += 12 + value.length;
    if (ext) {
      writeI64(buf, r.timestamp, at);
      buf[at + 8] = r.attributes & 0xff;
      const hs = r.headers;
      w16(buf, at + 9, hs.length);
      at += 11;
      for (let h = 0; h < hs.length; h++) {
        const hdr = hs[h]!;
        const kl = writeUtf8(buf, hdr.key, at + 2);
        w16(buf, at, kl);
        at += 2 + kl;
        w32(buf, at, hdr.value.length);
        buf.set(hdr.value, at + 4);
        at += 4 + hdr.value.length;
      }
    }
  }
  if (ext && batch.trailer) {
    writeU64(buf, batch.trailer.nextOffset, at);
    writeU64(buf, batch.trailer.highWatermark, at + 8);
    writeU64(buf, batch.trailer.logStartOffset, at + 16);
    at += 24;
  }
  // Every byte of the allocUnsafe buffer must have been written.
  if (at !== size) throw new Error(`batch encoding size mismatch: ${at} != ${size}`);
  return buf;
}

/** Bytes of a record_extensions_v1 record besides its producer id, key, value and headers (offset, sequence, lengths, epoch, timestamp, attributes). */
export const RECORD_FIXED_BYTES = 8 + 8 + 2 + 2 + 8 + 4 + 8 + 1 + 2;

/**
 * A produce batch frame built in place while records are appended (the SDK producer's accumulator,
 * docs/sdk.md "Producer"): one growing buffer holds the frame's 4-byte length, the batch header and the
 * records in exactly the bytes encodeBatch writes with record_extensions_v1, so a send costs no
 * per-record work and the batch keeps no record objects. Offsets are 0; sequence 0 and epoch -1 until
 * setNumbers() (idempotent batches, renumbered in place on a retry). Not for transactional batches.
 */
export class BatchFrameBuilder {
  private buf: Buffer;
  /** Where the records start (after the 4-byte frame length and the header). */
  readonly recordsAt: number;
  private end: number;
  private readonly flagsAt: number;
  count = 0;
  /** Some record carries headers or a timestamp: a connection without record_extensions_v1 cannot take it. */
  extended = false;

  /**
   * `producerId`: the UTF-8 bytes stamped on every record (empty for a plain producer). `capacity`: the
   * expected frame size; the buffer grows past it by doubling, though not past `limit` while the frame
   * fits in it (the largest frame expected, so a full batch does not end in a buffer twice its size).
   * `reuse`: a spare buffer to write into, taken when it holds `capacity`.
   */
  constructor(
    topic: string,
    partition: number,
    acks: Acks,
    private readonly producerId: Uint8Array,
    capacity: number,
    reuse?: Buffer,
    private readonly limit = Number.POSITIVE_INFINITY,
  ) {
    const topicLen = Buffer.byteLength(topic, 'utf8');
    if (topicLen > 0xffff) throw bad('topic longer than 65535 bytes');
    if (producerId.length > 0xffff) throw bad('producer id too long');
    const acksLen = acks.length;
    this.flagsAt = 4 + 2 + 2 + topicLen + 4 + 1 + acksLen;
    this.recordsAt = this.flagsAt + 1 + 16 + 4;
    const buf = reuse && reuse.length >= Math.max(capacity, this.recordsAt) ? reuse : Buffer.allocUnsafe(Math.max(capacity, this.recordsAt));
    this.buf = buf;
    w16(buf, 4, BATCH_MAGIC);
    w16(buf, 6, topicLen);
    const at = 8 + writeUtf8(buf, topic, 8);
    w32(buf, at, partition);
    buf[at + 4] = acksLen;
    buf.write(acks, at + 5, 'ascii');
    this.end = this.recordsAt;
  }

  /** Bytes the buffer holds before it must grow. */
  get capacity(): number {
    return this.buf.length;
  }

  /** Frame bytes written so far (length prefix, header and records). */
  get length(): number {
    return this.end;
  }

  /** Gives up the buffer (for a later builder to reuse) once the frame is no longer needed; the builder is empty after. */
  detach(): Buffer {
    const buf = this.buf;
    this.buf = EMPTY;
    this.end = 0;
    this.count = 0;
    return buf;
  }

  /** Encoded bytes of a record with this builder's producer id: RECORD_FIXED_BYTES + id + key + value + headers. */
  recordBytes(keyLen: number, valueLen: number, headers: readonly RecordHeader[] | undefined): number {
    let n = RECORD_FIXED_BYTES + this.producerId.length + keyLen + valueLen;
    if (headers) for (let h = 0; h < headers.length; h++) n += 2 + Buffer.byteLength(headers[h]!.key, 'utf8') + 4 + headers[h]!.value.length;
    return n;
  }

  private reserve(n: number): Buffer {
    const need = this.end + n;
    if (need <= this.buf.length) return this.buf;
    let size = Math.max(need, this.buf.length * 2);
    if (need <= this.limit && size > this.limit) size = this.limit;
    const grown = Buffer.allocUnsafe(size);
    this.buf.copy(grown, 0, 0, this.end);
    this.buf = grown;
    return grown;
  }

  /**
   * Appends one record. `value` is bytes, or a string written as UTF-8 whose byte length `valueLen` the
   * caller measured (Buffer.byteLength); for bytes `valueLen` is their length. The caller checked the
   * limits (key and header keys <= 65535 bytes, at most 65535 headers) and that `timestamp` is a safe
   * non-negative integer.
   */
  append(key: Uint8Array | null, value: Uint8Array | string, valueLen: number, timestamp: number, headers: readonly RecordHeader[] | undefined): void {
    const pid = this.producerId;
    const keyLen = key === null ? 0 : key.length;
    const hc = headers === undefined ? 0 : headers.length;
    const size = hc === 0 ? RECORD_FIXED_BYTES + pid.length + keyLen + valueLen : this.recordBytes(keyLen, valueLen, headers);
    const buf = this.reserve(size);
    let at = this.end;
    // offset and sequence: 0 (setNumbers stamps sequences)
    w32(buf, at, 0);
    w32(buf, at + 4, 0);
    w32(buf, at + 8, 0);
    w32(buf, at + 12, 0);
    w16(buf, at + 16, pid.length);
    at += 18;
    if (pid.length > 0) {
      buf.set(pid, at);
      at += pid.length;
    }
    w16(buf, at, keyLen);
    at += 2;
    if (keyLen > 0) {
      buf.set(key!, at);
      at += keyLen;
    }
    // epoch -1 (setNumbers stamps the idempotent epoch)
    w32(buf, at, -1);
    w32(buf, at + 4, -1);
    w32(buf, at + 8, valueLen);
    at += 12;
    if (typeof value === 'string') {
      if (valueLen > 0 && buf.write(value, at, valueLen, 'utf8') !== valueLen) throw new Error('record value: UTF-8 length mismatch');
    } else if (valueLen > 0) buf.set(value, at);
    at += valueLen;
    if (timestamp === 0) {
      w32(buf, at, 0);
      w32(buf, at + 4, 0);
    } else writeI64(buf, timestamp, at);
    buf[at + 8] = 0;
    w16(buf, at + 9, hc);
    at += 11;
    if (timestamp > 0 || hc > 0) this.extended = true;
    for (let h = 0; h < hc; h++) {
      const hdr = headers![h]!;
      const kl = writeUtf8(buf, hdr.key, at + 2);
      w16(buf, at, kl);
      at += 2 + kl;
      w32(buf, at, hdr.value.length);
      buf.set(hdr.value, at + 4);
      at += 4 + hdr.value.length;
    }
    this.end = at;
    this.count++;
  }

  /** Stamps record i with epoch `epoch` and sequence `firstSequence + i` (an idempotent batch; again on renumbering). */
  setNumbers(epoch: number, firstSequence: number): void {
    const buf = this.buf;
    let at = this.recordsAt;
    for (let i = 0; i < this.count; i++) {
      writeU64(buf, firstSequence + i, at + 8);
      at += 18 + ((buf[at + 16]! << 8) | buf[at + 17]!);
      at += 2 + ((buf[at]! << 8) | buf[at + 1]!);
      writeI64(buf, epoch, at);
      at += 12 + r32u(buf, at + 8);
      at = skipExtensions(buf, at);
    }
  }

  /**
   * The frame, length prefix included, with the header completed: encodeFrame(encodeBatch(...)) of these
   * records with `extensions`. Without extensions (a broker that did not negotiate them) it is a copy
   * whose records lack their timestamp, attributes and header count; the caller refuses an `extended`
   * batch there. With extensions the frame is this builder's buffer: valid until the next append,
   * setNumbers or detach.
   */
  frame(idempotent: boolean, firstSequence: number, lastSequence: number, extensions: boolean): Buffer {
    const buf = this.buf;
    const at = this.flagsAt;
    buf[at] = idempotent ? FLAG_IDEMPOTENT : 0;
    writeU64(buf, firstSequence, at + 1);
    writeU64(buf, lastSequence, at + 9);
    w32(buf, at + 17, this.count);
    if (extensions) {
      w32(buf, 0, this.end - 4);
      return buf.subarray(0, this.end);
    }
    // Each record loses its last 11 bytes (timestamp, attributes, header count 0).
    const out = Buffer.allocUnsafe(this.end - 11 * this.count);
    w32(out, 0, out.length - 4);
    buf.copy(out, 4, 4, this.recordsAt);
    let to = this.recordsAt;
    let from = this.recordsAt;
    for (let i = 0; i < this.count; i++) {
      const start = from;
      from += 18 + ((buf[from + 16]! << 8) | buf[from + 17]!);
      from += 2 + ((buf[from]! << 8) | buf[from + 1]!);
      from += 12 + r32u(buf, from + 8);
      to += buf.copy(out, to, start, from);
      from = skipExtensions(buf, from);
    }
    return out;
  }
}

const EMPTY = Buffer.alloc(0);

/** Past a record's extension fields (timestamp, attributes, headers) starting at `at`. */
function skipExtensions(buf: Buffer, at: number): number {
  const hc = (buf[at + 9]! << 8) | buf[at + 10]!;
  at += 11;
  for (let h = 0; h < hc; h++) {
    at += 2 + ((buf[at]! << 8) | buf[at + 1]!);
    at += 4 + r32u(buf, at);
  }
  return at;
}

export interface DecodeOptions extends EncodeOptions {
  /** Upper bound on the record count, checked before any per-record work. */
  maxRecords?: number;
}

interface BatchHeader {
  topic: string;
  partition: number;
  acks: Acks;
  idempotent: boolean;
  firstSequence: number;
  lastSequence: number;
  count: number;
  txn: BatchTxn | undefined;
  /** Where the first record starts. */
  recordsAt: number;
}

function readString16(buf: Buffer, at: number): [string, number] {
  if (at + 2 > buf.length) throw truncated();
  const n = (buf[at]! << 8) | buf[at + 1]!;
  if (at + 2 + n > buf.length) throw truncated();
  return [buf.toString('utf8', at + 2, at + 2 + n), at + 2 + n];
}

/** The header checks decodeBatch and scanBatch share, in order: every length against the bytes left. */
function decodeHeader(buf: Buffer, opts: DecodeOptions): BatchHeader {
  const len = buf.length;
  if (len < 2) throw truncated();
  if (((buf[0]! << 8) | buf[1]!) !== BATCH_MAGIC) throw bad('bad magic');
  let at = 2;
  if (at + 2 > len) throw truncated();
  const topicLen = (buf[at]! << 8) | buf[at + 1]!;
  at += 2;
  if (at + topicLen > len) throw truncated();
  const topic = buf.toString('utf8', at, at + topicLen);
  at += topicLen;
  if (at + 4 + 1 > len) throw truncated();
  const partition = r32s(buf, at);
  at += 4;
  const acksLen = buf[at]!;
  at += 1;
  if (at + acksLen > len) throw truncated();
  const acks = buf.toString('ascii', at, at + acksLen);
  at += acksLen;
  if (acks !== '0' && acks !== '1' && acks !== '-1' && acks !== 'all') throw bad('acks must be 0, 1, -1 or all');
  if (at + 1 + 16 + 4 > len) throw truncated();
  const flags = buf[at]!;
  if (flags > FLAG_TRANSACTIONAL) throw bad(`unknown flags ${flags}`);
  const idempotent = flags === FLAG_IDEMPOTENT;
  at += 1;
  const firstSequence = readU64(buf, at);
  const lastSequence = readU64(buf, at + 8);
  at += 16;
  const count = r32s(buf, at);
  at += 4;
  let txn: BatchTxn | undefined;
  if (flags === FLAG_TRANSACTIONAL) {
    const [transactionalId, afterId] = readString16(buf, at);
    const [producerId, afterPid] = readString16(buf, afterId);
    if (afterPid + 12 > len) throw truncated();
    txn = { transactionalId, producerId, epoch: r32s(buf, afterPid), coordinatorPartition: r32s(buf, afterPid + 4), coordinatorEpoch: r32s(buf, afterPid + 8) };
    at = afterPid + 12;
  }
  if (count < 0) throw bad('negative record count');
  if (opts.maxRecords !== undefined && count > opts.maxRecords) throw bad(`more than ${opts.maxRecords} records`);
  // Each record takes at least 32 bytes: refuse counts the body cannot hold before allocating.
  if (count * 32 > len - at) throw bad('record count exceeds batch size');
  return { topic, partition, acks: acks as Acks, idempotent, firstSequence, lastSequence, count, txn, recordsAt: at };
}

/** Strict decoder: every length is checked against the bytes left; trailing garbage is refused. */
export function decodeBatch(buf: Buffer, opts: DecodeOptions = {}): Batch {
  const ext = opts.extensions === true;
  const len = buf.length;
  const { topic, partition, acks, idempotent, firstSequence, lastSequence, count, txn, recordsAt } = decodeHeader(buf, opts);
  let at = recordsAt;
  const records: BatchRecord[] = new Array(count);
  for (let i = 0; i < count; i++) {
    if (at + 16 + 2 > len) throw truncated();
    const offset = readU64(buf, at);
    const sequence = readU64(buf, at + 8);
    at += 16;
    const pidLen = (buf[at]! << 8) | buf[at + 1]!;
    at += 2;
    if (at + pidLen + 2 > len) throw truncated();
    const producerId = pidLen === 0 ? '' : buf.toString('utf8', at, at + pidLen);
    at += pidLen;
    const keyLen = (buf[at]! << 8) | buf[at + 1]!;
    at += 2;
    if (at + keyLen + 8 + 4 > len) throw truncated();
    const key = keyLen > 0 ? buf.subarray(at, at + keyLen) : null;
    at += keyLen;
    const epoch = readI64(buf, at);
    const valueLen = r32u(buf, at + 8);
    at += 12;
    if (at + valueLen > len) throw truncated();
    const value = buf.subarray(at, at + valueLen);
    at += valueLen;
    let timestamp = 0;
    let attributes = 0;
    const headers: RecordHeader[] = [];
    if (ext) {
      if (at + 8 + 1 + 2 > len) throw truncated();
      timestamp = readI64(buf, at);
      attributes = buf[at + 8]!;
      const hc = (buf[at + 9]! << 8) | buf[at + 10]!;
      at += 11;
      for (let h = 0; h < hc; h++) {
        if (at + 2 > len) throw truncated();
        const kl = (buf[at]! << 8) | buf[at + 1]!;
        at += 2;
        if (at + kl + 4 > len) throw truncated();
        const hk = buf.toString('utf8', at, at + kl);
        at += kl;
        const vl = r32u(buf, at);
        at += 4;
        if (at + vl > len) throw truncated();
        headers.push({ key: hk, value: buf.subarray(at, at + vl) });
        at += vl;
      }
    }
    records[i] = { offset, sequence, producerId, key, epoch, value, timestamp, attributes, headers };
  }
  let trailer: BatchTrailer | undefined;
  if (ext && at + 24 === len) {
    trailer = { nextOffset: readU64(buf, at), highWatermark: readU64(buf, at + 8), logStartOffset: readU64(buf, at + 16) };
    at += 24;
  }
  if (at !== len) throw bad('trailing bytes after records');
  const batch: Batch = { topic, partition, acks, idempotent, firstSequence, lastSequence, records, trailer };
  if (txn) batch.txn = txn;
  return batch;
}

/**
 * Stored records to the wire shape of a CONSUME reply. A LogRecord has exactly the fields of a BatchRecord,
 * so the records are passed through as they are (no per-record copy); encodeBatch only reads them.
 */
export function logRecordsToBatch(topic: string, partition: number, records: LogRecord[], trailer?: BatchTrailer): Batch {
  return { topic, partition, acks: '1', idempotent: false, firstSequence: 0, lastSequence: 0, records, trailer };
}

/**
 * Size of the header of a CONSUME reply batch (what encodeBatch(logRecordsToBatch(...)) writes before the
 * first record) for a topic of `topicLen` UTF-8 bytes.
 */
export function replyHeaderSize(topicLen: number): number {
  return 2 + 2 + topicLen + 4 + 1 + 1 + 1 + 8 + 8 + 4;
}

/**
 * Writes the header of a CONSUME reply batch at 0 (acks '1', not idempotent, sequences 0, record count
 * `count`), the same bytes as encodeBatch(logRecordsToBatch(...)). `topicLen` is Buffer.byteLength(topic)
 * and must be at most 65535. Returns the position of the first record.
 */
export function writeReplyHeader(buf: Buffer, topic: string, topicLen: number, partition: number, count: number): number {
  w16(buf, 0, BATCH_MAGIC);
  w16(buf, 2, topicLen);
  let at = 4 + writeUtf8(buf, topic, 4);
  at = buf.writeInt32BE(partition, at);
  buf[at] = 1;
  buf[at + 1] = 0x31; // '1'
  buf[at + 2] = 0;
  for (let i = 3; i < 19; i++) buf[at + i] = 0;
  w32(buf, at + 19, count);
  return at + 23;
}

/** Overwrites the record count of a reply batch whose header writeReplyHeader wrote (first record at `recordsAt`). */
export function setReplyCount(buf: Buffer, recordsAt: number, count: number): void {
  w32(buf, recordsAt - 4, count);
}

/** Writes a record_extensions_v1 trailer (24 bytes) at `at`; returns the end. */
export function writeTrailer(buf: Buffer, at: number, trailer: BatchTrailer): number {
  writeU64(buf, trailer.nextOffset, at);
  writeU64(buf, trailer.highWatermark, at + 8);
  writeU64(buf, trailer.logStartOffset, at + 16);
  return at + 24;
}

/** A batch validated by scanBatch: its header fields, and where each record starts in `body`. */
export interface ScannedBatch {
  topic: string;
  partition: number;
  acks: Acks;
  idempotent: boolean;
  /** A transactional batch: the produce path refuses it (it goes to the transaction commands). */
  transactional: boolean;
  body: Buffer;
  extensions: boolean;
  count: number;
  /** count + 1 positions: record i spans starts[i] .. starts[i + 1]. */
  starts: number[];
  /**
   * False when a header key is not valid UTF-8: decoding it to a string (as decodeBatch does) would change
   * its bytes, so the caller must take decodeBatch for the exact stored form.
   */
  verbatim: boolean;
}

/**
 * Validates `buf` exactly as decodeBatch does (the same checks, in the same order, with the same errors) but
 * without creating a record object per record: it returns each record's start position instead.
 */
export function scanBatch(buf: Buffer, opts: DecodeOptions = {}): ScannedBatch {
  const ext = opts.extensions === true;
  const len = buf.length;
  const { topic, partition, acks, idempotent, count, txn, recordsAt } = decodeHeader(buf, opts);
  let at = recordsAt;
  const starts: number[] = new Array(count + 1);
  let verbatim = true;
  for (let i = 0; i < count; i++) {
    starts[i] = at;
    if (at + 16 + 2 > len) throw truncated();
    readU64(buf, at);
    readU64(buf, at + 8);
    at += 16;
    const pidLen = (buf[at]! << 8) | buf[at + 1]!;
    at += 2;
    if (at + pidLen + 2 > len) throw truncated();
    at += pidLen;
    const keyLen = (buf[at]! << 8) | buf[at + 1]!;
    at += 2;
    if (at + keyLen + 8 + 4 > len) throw truncated();
    at += keyLen;
    readI64(buf, at);
    const valueLen = r32u(buf, at + 8);
    at += 12;
    if (at + valueLen > len) throw truncated();
    at += valueLen;
    if (ext) {
      if (at + 8 + 1 + 2 > len) throw truncated();
      readI64(buf, at);
      const hc = (buf[at + 9]! << 8) | buf[at + 10]!;
      at += 11;
      for (let h = 0; h < hc; h++) {
        if (at + 2 > len) throw truncated();
        const kl = (buf[at]! << 8) | buf[at + 1]!;
        at += 2;
        if (at + kl + 4 > len) throw truncated();
        if (verbatim && kl > 0 && !isUtf8(buf.subarray(at, at + kl))) verbatim = false;
        at += kl;
        const vl = r32u(buf, at);
        at += 4;
        if (at + vl > len) throw truncated();
        at += vl;
      }
    }
  }
  starts[count] = at;
  if (ext && at + 24 === len) {
    readU64(buf, at);
    readU64(buf, at + 8);
    readU64(buf, at + 16);
    at += 24;
  }
  if (at !== len) throw bad('trailing bytes after records');
  return { topic, partition, acks, idempotent, transactional: txn !== undefined, body: buf, extensions: ext, count, starts, verbatim };
}

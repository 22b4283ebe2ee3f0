import { isUtf8 } from 'node:buffer';
import { FLAG_IDEMPOTENT, FLAG_TRANSACTIONAL, bad, r32s, r32u, readI64, readU64, truncated, w16, w32, writeHeaders, writeI64, writeU64, writeUtf8 } from './batch-bytes.js';
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

export interface Batch<R = BatchRecord> {
  topic: string;
  partition: number;
  acks: Acks;
  idempotent: boolean;
  firstSequence: number;
  lastSequence: number;
  records: R[];
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

export interface EncodeOptions {
  /** Write timestamps, attributes and headers per record (record_extensions_v1). */
  extensions?: boolean;
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
      at = writeHeaders(buf, at + 11, hs, hs.length);
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


export interface DecodeOptions extends EncodeOptions {
  /** Upper bound on the record count, checked before any per-record work. */
  maxRecords?: number;
  /**
   * decodeBatch: upper bound on the objects built, records and headers together (a header is 6 bytes of a
   * frame and about 190 as an object). The count is charged before any record is built, each record's
   * headers when its header count is read, before they are built; past it the batch is invalid_batch.
   */
  maxObjects?: number;
  /**
   * A produce request: no consume trailer may follow the records (24 bytes more are trailing bytes), and a
   * header key must be valid UTF-8 (the protocol's header keys are text; decoded, other bytes would change).
   */
  request?: boolean;
}

/**
 * Makes the object decodeBatch stores for one record, in place of a BatchRecord: a reader that hands
 * records on in its own shape (the SDK consumer's messages) builds one object per record, not two.
 * Called in record order, with each record's fields as decoded (key and value are views of the frame).
 */
export type RecordMaker<R> = (
  offset: number,
  key: Buffer | null,
  value: Buffer,
  timestamp: number,
  attributes: number,
  headers: RecordHeader[],
  sequence: number,
  producerId: string,
  epoch: number,
) => R;

/** A batch body's header (decodeBatchHeader): the fields before the records, and where they start. */
export interface BatchHeader {
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

/**
 * The header checks decodeBatch and scanBatch share, in order: every length against the bytes left. A
 * batch whose records need not be read for a refusal is refused from this alone (txn-commands.ts).
 */
export function decodeBatchHeader(buf: Buffer, opts: DecodeOptions): BatchHeader {
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
  if (partition < -1) throw bad('partition must be -1 (the broker chooses) or a partition number');
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

function tooManyObjects(max: number): Error {
  return bad(`more than ${max} records and headers`);
}

/**
 * Strict decoder: every length is checked against the bytes left; trailing garbage is refused. With
 * `makeRecord`, each record is what it returns instead of a BatchRecord.
 */
export function decodeBatch(buf: Buffer, opts?: DecodeOptions): Batch;
export function decodeBatch<R>(buf: Buffer, opts: DecodeOptions, makeRecord: RecordMaker<R>): Batch<R>;
export function decodeBatch<R>(buf: Buffer, opts: DecodeOptions = {}, makeRecord?: RecordMaker<R>): Batch<R | BatchRecord> {
  const ext = opts.extensions === true;
  const req = opts.request === true;
  const len = buf.length;
  const { topic, partition, acks, idempotent, firstSequence, lastSequence, count, txn, recordsAt } = decodeBatchHeader(buf, opts);
  let at = recordsAt;
  let objectsLeft = (opts.maxObjects ?? Number.POSITIVE_INFINITY) - count;
  if (objectsLeft < 0) throw tooManyObjects(opts.maxObjects!);
  const records: Array<R | BatchRecord> = new Array(count);
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
      if ((objectsLeft -= hc) < 0) throw tooManyObjects(opts.maxObjects!);
      for (let h = 0; h < hc; h++) {
        if (at + 2 > len) throw truncated();
        const kl = (buf[at]! << 8) | buf[at + 1]!;
        at += 2;
        if (at + kl + 4 > len) throw truncated();
        if (req && kl > 0 && !isUtf8(buf.subarray(at, at + kl))) throw notUtf8Key();
        const hk = buf.toString('utf8', at, at + kl);
        at += kl;
        const vl = r32u(buf, at);
        at += 4;
        if (at + vl > len) throw truncated();
        headers.push({ key: hk, value: buf.subarray(at, at + vl) });
        at += vl;
      }
    }
    records[i] = makeRecord
      ? makeRecord(offset, key, value, timestamp, attributes, headers, sequence, producerId, epoch)
      : { offset, sequence, producerId, key, epoch, value, timestamp, attributes, headers };
  }
  let trailer: BatchTrailer | undefined;
  if (ext && !opts.request && at + 24 === len) {
    trailer = { nextOffset: readU64(buf, at), highWatermark: readU64(buf, at + 8), logStartOffset: readU64(buf, at + 16) };
    at += 24;
  }
  if (at !== len) throw bad('trailing bytes after records');
  const batch: Batch<R | BatchRecord> = { topic, partition, acks, idempotent, firstSequence, lastSequence, records, trailer };
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
  /** The header's sequences (an idempotent batch's: its records are numbered from firstSequence). */
  firstSequence: number;
  lastSequence: number;
  body: Buffer;
  extensions: boolean;
  count: number;
  /** count + 1 positions: record i spans starts[i] .. starts[i + 1]. */
  starts: number[];
}

/** A produce request's header key that is not valid UTF-8 (DecodeOptions.request). */
function notUtf8Key(): Error {
  return bad('header key is not valid UTF-8');
}

/**
 * Validates `buf` exactly as decodeBatch does (the same checks, in the same order, with the same errors) but
 * without creating a record object per record: it returns each record's start position instead. A caller
 * that stores the records' bytes as they are passes `request`, so every header key is valid UTF-8 and its
 * bytes are what decoding and encoding it would give.
 */
export function scanBatch(buf: Buffer, opts: DecodeOptions = {}): ScannedBatch {
  const ext = opts.extensions === true;
  const req = opts.request === true;
  const len = buf.length;
  const { topic, partition, acks, idempotent, firstSequence, lastSequence, count, txn, recordsAt } = decodeBatchHeader(buf, opts);
  let at = recordsAt;
  const starts: number[] = new Array(count + 1);
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
        if (req && kl > 0 && !isUtf8(buf.subarray(at, at + kl))) throw notUtf8Key();
        at += kl;
        const vl = r32u(buf, at);
        at += 4;
        if (at + vl > len) throw truncated();
        at += vl;
      }
    }
  }
  starts[count] = at;
  if (ext && !opts.request && at + 24 === len) {
    readU64(buf, at);
    readU64(buf, at + 8);
    readU64(buf, at + 16);
    at += 24;
  }
  if (at !== len) throw bad('trailing bytes after records');
  return { topic, partition, acks, idempotent, transactional: txn !== undefined, firstSequence, lastSequence, body: buf, extensions: ext, count, starts };
}

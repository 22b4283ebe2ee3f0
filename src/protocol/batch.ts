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

export interface Batch {
  topic: string;
  partition: number;
  acks: Acks;
  idempotent: boolean;
  firstSequence: number;
  lastSequence: number;
  records: BatchRecord[];
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

function bad(reason: string): TributaryError {
  return new TributaryError('invalid_batch', { reason });
}

function writeU64(buf: Buffer, v: number, at: number): void {
  // Two halves avoid BigInt on the hot path; values are validated safe integers.
  const hi = Math.floor(v / 0x100000000);
  buf.writeUInt32BE(hi >>> 0, at);
  buf.writeUInt32BE(v >>> 0, at + 4);
}

function readU64(buf: Buffer, at: number): number {
  const hi = buf.readUInt32BE(at);
  const lo = buf.readUInt32BE(at + 4);
  if (hi > 0x1fffff) throw bad('64-bit value beyond 2^53');
  return hi * 0x100000000 + lo;
}

function writeI64(buf: Buffer, v: number, at: number): void {
  buf.writeBigInt64BE(BigInt(v), at);
}

function readI64(buf: Buffer, at: number): number {
  const v = buf.readBigInt64BE(at);
  if (v > BigInt(Number.MAX_SAFE_INTEGER) || v < BigInt(Number.MIN_SAFE_INTEGER)) throw bad('64-bit value beyond 2^53');
  return Number(v);
}

export interface EncodeOptions {
  /** Write timestamps, attributes and headers per record (record_extensions_v1). */
  extensions?: boolean;
}

export function encodeBatch(batch: Batch, opts: EncodeOptions = {}): Buffer {
  const ext = opts.extensions === true;
  const topic = Buffer.from(batch.topic, 'utf8');
  const acks = Buffer.from(batch.acks, 'ascii');
  if (topic.length > 0xffff) throw bad('topic longer than 65535 bytes');
  let size = 2 + 2 + topic.length + 4 + 1 + acks.length + 1 + 8 + 8 + 4;
  const pids: Buffer[] = [];
  const hdrs: Array<Array<[Buffer, Buffer]>> = [];
  for (const r of batch.records) {
    const pid = Buffer.from(r.producerId, 'utf8');
    pids.push(pid);
    const keyLen = r.key ? r.key.length : 0;
    if (keyLen > 0xffff) throw bad('key longer than 65535 bytes');
    if (pid.length > 0xffff) throw bad('producer id too long');
    size += 8 + 8 + 2 + pid.length + 2 + keyLen + 8 + 4 + r.value.length;
    if (ext) {
      const hs: Array<[Buffer, Buffer]> = r.headers.map((h) => [Buffer.from(h.key, 'utf8'), h.value]);
      if (hs.length > 0xffff) throw bad('more than 65535 headers');
      if (hs.some(([k]) => k.length > 0xffff)) throw bad('header key longer than 65535 bytes');
      hdrs.push(hs);
      size += 8 + 1 + 2;
      for (const [k, v] of hs) size += 2 + k.length + 4 + v.length;
    }
  }
  if (ext && batch.trailer) size += 24;
  const buf = Buffer.allocUnsafe(size);
  let at = buf.writeUInt16BE(BATCH_MAGIC, 0);
  at = buf.writeUInt16BE(topic.length, at);
  at += topic.copy(buf, at);
  at = buf.writeInt32BE(batch.partition, at);
  at = buf.writeUInt8(acks.length, at);
  at += acks.copy(buf, at);
  at = buf.writeUInt8(batch.idempotent ? 1 : 0, at);
  writeU64(buf, batch.firstSequence, at);
  writeU64(buf, batch.lastSequence, at + 8);
  at += 16;
  at = buf.writeInt32BE(batch.records.length, at);
  for (let i = 0; i < batch.records.length; i++) {
    const r = batch.records[i]!;
    writeU64(buf, r.offset, at);
    writeU64(buf, Math.max(0, r.sequence), at + 8);
    at += 16;
    const pid = pids[i]!;
    at = buf.writeUInt16BE(pid.length, at);
    at += pid.copy(buf, at);
    if (r.key) {
      at = buf.writeUInt16BE(r.key.length, at);
      at += r.key.copy(buf, at);
    } else {
      at = buf.writeUInt16BE(0, at);
    }
    writeI64(buf, r.epoch, at);
    at += 8;
    at = buf.writeUInt32BE(r.value.length, at);
    at += r.value.copy(buf, at);
    if (ext) {
      writeI64(buf, r.timestamp, at);
      at += 8;
      at = buf.writeUInt8(r.attributes & 0xff, at);
      const hs = hdrs[i]!;
      at = buf.writeUInt16BE(hs.length, at);
      for (const [k, v] of hs) {
        at = buf.writeUInt16BE(k.length, at);
        at += k.copy(buf, at);
        at = buf.writeUInt32BE(v.length, at);
        at += v.copy(buf, at);
      }
    }
  }
  if (ext && batch.trailer) {
    writeU64(buf, batch.trailer.nextOffset, at);
    writeU64(buf, batch.trailer.highWatermark, at + 8);
    writeU64(buf, batch.trailer.logStartOffset, at + 16);
    at += 24;
  }
  return buf;
}

export interface DecodeOptions extends EncodeOptions {
  /** Upper bound on the record count, checked before any per-record work. */
  maxRecords?: number;
}

/** Strict decoder: every length is checked against the bytes left; trailing garbage is refused. */
export function decodeBatch(buf: Buffer, opts: DecodeOptions = {}): Batch {
  const ext = opts.extensions === true;
  let at = 0;
  const need = (n: number) => {
    if (at + n > buf.length) throw bad('truncated batch');
  };
  need(2);
  if (buf.readUInt16BE(0) !== BATCH_MAGIC) throw bad('bad magic');
  at = 2;
  need(2);
  const topicLen = buf.readUInt16BE(at);
  at += 2;
  need(topicLen);
  const topic = buf.toString('utf8', at, at + topicLen);
  at += topicLen;
  need(4 + 1);
  const partition = buf.readInt32BE(at);
  at += 4;
  const acksLen = buf.readUInt8(at);
  at += 1;
  need(acksLen);
  const acks = buf.toString('ascii', at, at + acksLen);
  at += acksLen;
  if (acks !== '0' && acks !== '1' && acks !== '-1' && acks !== 'all') throw bad('acks must be 0, 1, -1 or all');
  need(1 + 16 + 4);
  const idempotent = buf.readUInt8(at) === 1;
  at += 1;
  const firstSequence = readU64(buf, at);
  const lastSequence = readU64(buf, at + 8);
  at += 16;
  const count = buf.readInt32BE(at);
  at += 4;
  if (count < 0) throw bad('negative record count');
  if (opts.maxRecords !== undefined && count > opts.maxRecords) throw bad(`more than ${opts.maxRecords} records`);
  // Each record takes at least 32 bytes: refuse counts the body cannot hold before allocating.
  if (count * 32 > buf.length - at) throw bad('record count exceeds batch size');
  const records: BatchRecord[] = new Array(count);
  for (let i = 0; i < count; i++) {
    need(16 + 2);
    const offset = readU64(buf, at);
    const sequence = readU64(buf, at + 8);
    at += 16;
    const pidLen = buf.readUInt16BE(at);
    at += 2;
    need(pidLen + 2);
    const producerId = buf.toString('utf8', at, at + pidLen);
    at += pidLen;
    const keyLen = buf.readUInt16BE(at);
    at += 2;
    need(keyLen + 8 + 4);
    const key = keyLen > 0 ? buf.subarray(at, at + keyLen) : null;
    at += keyLen;
    const epoch = readI64(buf, at);
    at += 8;
    const valueLen = buf.readUInt32BE(at);
    at += 4;
    need(valueLen);
    const value = buf.subarray(at, at + valueLen);
    at += valueLen;
    let timestamp = 0;
    let attributes = 0;
    const headers: RecordHeader[] = [];
    if (ext) {
      need(8 + 1 + 2);
      timestamp = readI64(buf, at);
      at += 8;
      attributes = buf.readUInt8(at);
      at += 1;
      const hc = buf.readUInt16BE(at);
      at += 2;
      for (let h = 0; h < hc; h++) {
        need(2);
        const kl = buf.readUInt16BE(at);
        at += 2;
        need(kl + 4);
        const hk = buf.toString('utf8', at, at + kl);
        at += kl;
        const vl = buf.readUInt32BE(at);
        at += 4;
        need(vl);
        headers.push({ key: hk, value: buf.subarray(at, at + vl) });
        at += vl;
      }
    }
    records[i] = { offset, sequence, producerId, key, epoch, value, timestamp, attributes, headers };
  }
  let trailer: BatchTrailer | undefined;
  if (ext && at + 24 === buf.length) {
    trailer = { nextOffset: readU64(buf, at), highWatermark: readU64(buf, at + 8), logStartOffset: readU64(buf, at + 16) };
    at += 24;
  }
  if (at !== buf.length) throw bad('trailing bytes after records');
  return { topic, partition, acks: acks as Acks, idempotent, firstSequence, lastSequence, records, trailer };
}

/** Stored records to the wire shape of a CONSUME reply. */
export function logRecordsToBatch(topic: string, partition: number, records: LogRecord[], trailer?: BatchTrailer): Batch {
  return {
    topic,
    partition,
    acks: '1',
    idempotent: false,
    firstSequence: 0,
    lastSequence: 0,
    records: records.map((r) => ({
      offset: r.offset,
      sequence: r.sequence,
      producerId: r.producerId,
      key: r.key,
      epoch: r.epoch,
      value: r.value,
      timestamp: r.timestamp,
      attributes: r.attributes,
      headers: r.headers,
    })),
    trailer,
  };
}

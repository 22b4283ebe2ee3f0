/**
 * The two answers a leader gives a follower's REPLICA_FETCH (docs/protocol.md, "Cluster mode (broker to
 * broker)"), both written from the stored bytes of whole appends (storage/replica-read.ts), never from
 * record objects:
 *
 * - `format=stored` (a follower of this version, to a leader that offered it in LEADER_EPOCHS): the records
 *   in the stored layout, as the segment files hold them, which the follower checks and stores as they are
 *   (StoredAppends): no object per record or header on either side, and the follower's log holds the
 *   leader's bytes exactly;
 *   Append blocks go whole (from inside one, its rest as a block of its own: replica-read.ts blockFrom);
 * - otherwise the batch frame followers of older versions read (record_extensions_v1 fields, attribute bit 7
 *   ending an append, a trailer with the HWM), the bytes encodeBatch wrote for the records read as objects.
 */
import { type BatchTrailer, replyHeaderSize, writeReplyHeader, writeTrailer } from 'tributary-protocol/batch.js';
import type { Connection } from 'tributary-protocol/connection.js';
import { TributaryError } from 'tributary-protocol/errors.js';
import type { LogRecord } from 'tributary-protocol/record.js';
import { BLOCK_HEADER_BYTES, recordEnd } from '../storage/append-block.js';
import { isBlockAt } from '../storage/block-records.js';
import { ATTR_END_OF_APPEND, encodedSize, writeWireRecord } from '../storage/record-codec.js';
import type { StoredRead } from '../storage/replica-read.js';
import { StoredAppends } from '../storage/stored-appends.js';

/** First two bytes of a `format=stored` answer (a batch frame's are 0xba7c; a text reply's are ASCII). */
export const STORED_REPLY_MAGIC = 0xba7d;
/** magic u16, nextOffset u64, highWatermark u64, logStartOffset u64, record count u32. */
const STORED_HEADER_BYTES = 2 + 8 + 8 + 8 + 4;
/** What LEADER_EPOCHS offers (`formats=`) and a follower then asks for (`format=`). */
export const STORED_FORMAT = 'stored';

/**
 * What a follower adds to REPLICA_FETCH, from its leader's LEADER_EPOCHS reply `p`: `format=stored` when
 * offered, and `blocks=true` (it stores append blocks as they are) when the leader says it takes it (`blocks=true`;
 * the previous version refuses it as an unknown parameter). '' for the batch frame.
 */
export function storedFetchParams(p: ReadonlyMap<string, string>): string {
  if (!(p.get('formats') ?? '').split(',').includes(STORED_FORMAT)) return '';
  return p.get('blocks') === 'true' ? ` format=${STORED_FORMAT} blocks=true` : ` format=${STORED_FORMAT}`;
}

/**
 * The largest frame a follower's connections to its leader take. An answer holds the appends that began
 * within the fetch's `maxBytes` and the last of them whole, however large: up to a produce frame's records
 * (the leader's --max-frame-bytes, which it registers: the larger of its and the follower's is passed),
 * whose stored form is larger than their wire form (53 bytes for a record of 32 without
 * record_extensions_v1, 43 with), so at most 53/32 of the frame. The connections' default, 64 MiB whatever
 * --max-frame-bytes said, refused a fetch of a large append of small records for ever; the follower's own
 * setting alone, an append of a leader that takes larger frames.
 */
export function replicaFrameBytes(maxFrameBytes: number, fetchMaxBytes: number): number {
  return 2 * maxFrameBytes + fetchMaxBytes;
}

function writeU64(buf: Buffer, v: number, at: number): void {
  buf.writeUInt32BE(Math.floor(v / 0x100000000), at);
  buf.writeUInt32BE(v % 0x100000000, at + 4);
}

function readU64(buf: Buffer, at: number): number {
  const v = buf.readUInt32BE(at) * 0x100000000 + buf.readUInt32BE(at + 4);
  if (!Number.isSafeInteger(v)) throw badReply('an offset beyond 2^53');
  return v;
}

function badReply(reason: string): TributaryError {
  return new TributaryError('invalid_batch', { reason: `REPLICA_FETCH answer: ${reason}` });
}

/** The `format=stored` answer: its header, then the records' stored bytes. */
export function encodeStoredReply(read: StoredRead, trailer: BatchTrailer): Buffer {
  const buf = Buffer.allocUnsafe(STORED_HEADER_BYTES + read.bytes);
  buf.writeUInt16BE(STORED_REPLY_MAGIC, 0);
  writeU64(buf, trailer.nextOffset, 2);
  writeU64(buf, trailer.highWatermark, 10);
  writeU64(buf, trailer.logStartOffset, 18);
  buf.writeUInt32BE(read.count, 26);
  let at = STORED_HEADER_BYTES;
  for (const r of read.runs) at += r.buf.copy(buf, at, r.from, r.to);
  if (at !== buf.length) throw new Error(`stored reply size mismatch: ${at} != ${buf.length}`);
  return buf;
}

/**
 * The batch frame of followers of older versions: encodeBatch(logRecordsToBatch(topic, partition, records,
 * trailer), { extensions: true }) of the records read as objects with keepAppendMarker, byte for byte.
 */
export function encodeBatchReply(topic: string, partition: number, read: StoredRead, trailer: BatchTrailer): Buffer {
  const topicLen = Buffer.byteLength(topic, 'utf8');
  if (topicLen > 0xffff) throw new TributaryError('invalid_batch', { reason: 'topic longer than 65535 bytes' });
  // A wire record is never larger than its stored form, so this bounds the frame.
  const buf = Buffer.allocUnsafe(replyHeaderSize(topicLen) + read.bytes + 24);
  const recordsAt = writeReplyHeader(buf, topic, topicLen, partition, read.count);
  let at = recordsAt;
  for (const r of read.runs) {
    for (let p = r.from; p < r.to; p += 4 + (r.buf.readUInt32BE(p) & 0x7fffffff)) {
      if (isBlockAt(r.buf, p)) {
        at = writeBlockRecords(r.buf, p, buf, at);
        continue;
      }
      at = writeWireRecord(r.buf, p, buf, at, true, 0xff);
      if (at < 0) throw new TributaryError('invalid_batch', { reason: 'key longer than 65535 bytes' });
    }
  }
  at = writeTrailer(buf, at, trailer);
  return at === buf.length ? buf : buf.subarray(0, at);
}

/**
 * A block's records in the batch frame: its wire records as they are (a block holds the main port's
 * layout with extensions, append-block.ts), the last one's attributes with bit 7, the end of the append.
 */
function writeBlockRecords(src: Buffer, pos: number, dst: Buffer, at: number): number {
  const end = pos + 4 + (src.readUInt32BE(pos) & 0x7fffffff);
  const count = src.readUInt32BE(pos + 18);
  let last = pos + BLOCK_HEADER_BYTES;
  for (let i = 1; i < count; i++) last = recordEnd(src, last);
  src.copy(dst, at, pos + BLOCK_HEADER_BYTES, end);
  // The last record's attributes byte: after its offset, sequence, producer id, key, epoch, value and timestamp.
  const k = last + 18 + src.readUInt16BE(last + 16);
  const v = k + 10 + src.readUInt16BE(k);
  const attrAt = v + 4 + src.readUInt32BE(v) + 8;
  dst[at + attrAt - (pos + BLOCK_HEADER_BYTES)] = src[attrAt]! | ATTR_END_OF_APPEND;
  return at + end - pos - BLOCK_HEADER_BYTES;
}

/** What one REPLICA_FETCH brought: a text line (an error, the leader's tombstone horizon), or records to store. */
export type FetchAnswer =
  | { kind: 'text'; text: string }
  | { kind: 'records'; records: LogRecord[] | StoredAppends; count: number; bytes: number; highWatermark: number | undefined };

/**
 * Sends a REPLICA_FETCH line and reads the answer: with `stored` (the line asks for format=stored) the
 * records arrive and stay as bytes, checked (StoredAppends.parse); else as the batch frame, decoded.
 */
export async function fetchFromLeader(conn: Connection, line: string, stored: boolean): Promise<FetchAnswer> {
  if (!stored) {
    const reply = await conn.request(line);
    if (reply.kind === 'text') return { kind: 'text', text: reply.text };
    const records = reply.batch.records as unknown as LogRecord[];
    return {
      kind: 'records',
      records,
      count: records.length,
      bytes: records.reduce((n, x) => n + encodedSize(x), 0),
      highWatermark: reply.batch.trailer?.highWatermark,
    };
  }
  const body = await conn.requestBytes(line);
  if (body.length < 2 || body.readUInt16BE(0) !== STORED_REPLY_MAGIC) return { kind: 'text', text: body.toString('utf8') };
  if (body.length < STORED_HEADER_BYTES) throw badReply('truncated header');
  const highWatermark = readU64(body, 10);
  const count = body.readUInt32BE(26);
  // In turns: a large append's records take a second or more to check.
  const records = await StoredAppends.parseInTurns(body, STORED_HEADER_BYTES, body.length, count);
  if (typeof records === 'string') throw badReply(records);
  return { kind: 'records', records, count, bytes: records.buf.length, highWatermark };
}

/**
 * How a wire read (TailCache.readWire, LogReader.readWireFromDisk) writes the stored records it picked,
 * without an object per record: as a CONSUME reply batch (docs/protocol.md section 5), or as one
 * RecordBatch v2 (the Kafka listener's Fetch, docs/kafka.md). Both read the current record layout
 * (record-codec.ts).
 */
import { replyHeaderSize, setReplyCount, writeReplyHeader, writeTrailer } from 'tributary-protocol/batch.js';
import { crc32cRange } from 'tributary-protocol/record-batch/crc32c.js';
import {
  ATTRIBUTES,
  BASE_SEQUENCE,
  BASE_TIMESTAMP,
  BATCH_LENGTH,
  CRC,
  INT32_MAX,
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
  r32s,
  r32u,
  w32,
  w64,
} from 'tributary-protocol/record-batch/layout.js';
import { blockOut, recordEnd, valueEndOf, writeRunCutAtValues } from './append-block.js';
import { writeWireRecord } from './record-codec.js';
import { blockRecordTimestamp } from './block-records.js';
import { v2Out, writeV2RecordFromBlock, writeV2RecordFromStored } from './stored-batch.js';

/** The formats a wire read writes: a CONSUME reply (the default) or one RecordBatch v2. */
export type WireFormat = 'consume' | 'record_batch_v2';

export interface ReplyWriter {
  /**
   * Bytes the reply takes at most for records of `stored` stored bytes, `charged` as the read charged them
   * (READ_HEADER_COST per header on top of the stored bytes, record-codec.ts).
   */
  bound(stored: number, charged: number): number;
  /** Writes what comes before the records at 0; returns where they start. */
  begin(buf: Buffer): number;
  /** Writes the stored record at `pos` of `src` (of offset `offset`) at `at`; the end, or -1 when it cannot go out. */
  record(src: Buffer, pos: number, offset: number, buf: Buffer, at: number): number;
  /**
   * Writes the wire record [s, e) of an append block (block-records.ts) of offset `offset` at `at`; the end,
   * or -1 when it cannot go out (the caller then takes read()).
   */
  blockRecord(src: Buffer, s: number, e: number, offset: number, buf: Buffer, at: number): number;
  /**
   * A CONSUME reply: writes the run of whole wire records [s, e) of a plain or idempotent block at `at`, with
   * extensions in one copy (the block's bytes as they are), without them each record cut after its value;
   * the end (needs e - s bytes of room). valueLength is then the run's.
   */
  blockRun?(src: Buffer, s: number, e: number, buf: Buffer, at: number): number;
  /**
   * Where the reply's records are the block's bytes as they are (a CONSUME reply with extensions): the run
   * [s, e) goes out as a view of `src` beside the reply (TailCache.readWire with `views`), nothing written;
   * sets valueLength as blockRun would.
   */
  viewRun?(src: Buffer, s: number, e: number): void;
  /** Value bytes of the last record written. */
  valueLength: number;
  /** Completes the reply ending at `at`; returns its end. */
  finish(buf: Buffer, at: number, count: number, end: { nextOffset: number; highWatermark: number; logStartOffset: number }): number;
}

/** Value length of the wire record at `at` (producer id and key lengths walked from the start). */
export function wireValueLength(buf: Buffer, at: number): number {
  let p = at + 16;
  p += 2 + ((buf[p]! << 8) | buf[p + 1]!);
  p += 2 + ((buf[p]! << 8) | buf[p + 1]!) + 8;
  return buf[p]! * 0x1000000 + ((buf[p + 1]! << 16) | (buf[p + 2]! << 8) | buf[p + 3]!);
}

/** A CONSUME reply batch: header, wire records, and with record_extensions_v1 the trailer. */
class ConsumeReplyWriter implements ReplyWriter {
  valueLength = 0;
  private recordsAt = 0;

  constructor(
    private readonly topic: string,
    private readonly topicLen: number,
    private readonly partition: number,
    private readonly ext: boolean,
  ) {
    // Without extensions each record goes out cut after its value: the run in one copy, then moved together.
    this.blockRun = ext ? (src, s, e, buf, at) => this.copyRun(src, s, e, buf, at) : (src, s, e, buf, at) => this.cutRun(src, s, e, buf, at);
    this.viewRun = ext ? (src, s, e) => this.runValues(src, s, e) : undefined;
  }

  readonly blockRun: ReplyWriter['blockRun'];
  readonly viewRun: ReplyWriter['viewRun'];

  bound(stored: number): number {
    // A wire record is never larger than its stored form.
    return replyHeaderSize(this.topicLen) + stored + (this.ext ? 24 : 0);
  }

  begin(buf: Buffer): number {
    this.recordsAt = writeReplyHeader(buf, this.topic, this.topicLen, this.partition, 0);
    return this.recordsAt;
  }

  record(src: Buffer, pos: number, _offset: number, buf: Buffer, at: number): number {
    const end = writeWireRecord(src, pos, buf, at, this.ext);
    if (end >= 0) this.valueLength = wireValueLength(buf, at);
    return end;
  }

  blockRecord(src: Buffer, s: number, e: number, _offset: number, buf: Buffer, at: number): number {
    // A block holds its records in this very layout, stamped (append-block.ts): with extensions they are
    // copied as they are; without them, up to the value's end.
    this.valueLength = wireValueLength(src, s);
    const to = this.ext ? e : valueEndOf(src, s);
    buf.set(new Uint8Array(src.buffer, src.byteOffset + s, to - s), at);
    return at + to - s;
  }

  private runValues(src: Buffer, s: number, e: number): void {
    let values = 0;
    for (let p = s; p < e; p = recordEnd(src, p)) values += wireValueLength(src, p);
    this.valueLength = values;
  }

  private copyRun(src: Buffer, s: number, e: number, buf: Buffer, at: number): number {
    this.runValues(src, s, e);
    buf.set(new Uint8Array(src.buffer, src.byteOffset + s, e - s), at);
    return at + e - s;
  }

  private cutRun(src: Buffer, s: number, e: number, buf: Buffer, at: number): number {
    const end = writeRunCutAtValues(src, s, e, buf, at);
    this.valueLength = blockOut.values;
    return end;
  }

  finish(buf: Buffer, at: number, count: number, end: { nextOffset: number; highWatermark: number; logStartOffset: number }): number {
    setReplyCount(buf, this.recordsAt, count);
    return this.ext ? writeTrailer(buf, at, end) : at;
  }
}

/**
 * One RecordBatch v2 of the records, as the Kafka listener's Fetch answers them (docs/kafka.md): offsets
 * keep their gaps as offset deltas, the batch ends at nextOffset - 1 (past records the read left out after
 * the last one written), producer fields -1 and partition leader epoch 0. A reply of no record is empty
 * (the caller decides what an empty read answers).
 */
class RecordBatchReplyWriter implements ReplyWriter {
  valueLength = 0;
  private base = -1;
  private baseTs = 0;
  private maxTs = 0;
  private last = -1;

  bound(_stored: number, charged: number): number {
    // A v2 record takes at most its stored size plus 2 bytes per header, which the charge covers.
    return RECORDS + charged;
  }

  begin(): number {
    return RECORDS;
  }

  record(src: Buffer, pos: number, offset: number, buf: Buffer, at: number): number {
    const ts = this.start(offset, r32s(src, pos + 16) * 0x100000000 + r32u(src, pos + 20));
    if (ts === null) return -1;
    const end = writeV2RecordFromStored(src, pos, buf, at, offset - this.base, ts - this.baseTs);
    this.valueLength = v2Out.valueLength;
    return end;
  }

  blockRecord(src: Buffer, s: number, e: number, offset: number, buf: Buffer, at: number): number {
    const ts = this.start(offset, blockRecordTimestamp(src, s));
    if (ts === null) return -1;
    const end = writeV2RecordFromBlock(src, s, e, buf, at, offset - this.base, ts - this.baseTs);
    this.valueLength = v2Out.valueLength;
    return end;
  }

  /** Takes record `offset` of timestamp `ts` into the batch: its timestamp, or null when its delta cannot be written. */
  private start(offset: number, ts: number): number | null {
    if (this.base < 0) {
      this.base = offset;
      this.baseTs = ts;
      this.maxTs = ts;
    } else if (ts > this.maxTs) this.maxTs = ts;
    if (offset - this.base > INT32_MAX) return null;
    this.last = offset;
    return ts;
  }

  finish(buf: Buffer, at: number, count: number, end: { nextOffset: number }): number {
    if (count === 0) return 0;
    const lastDelta = Math.max(end.nextOffset - 1, this.last) - this.base;
    if (lastDelta > INT32_MAX) return 0;
    w64(buf, 0, this.base);
    w32(buf, BATCH_LENGTH, at - LOG_OVERHEAD);
    w32(buf, PARTITION_LEADER_EPOCH, 0);
    buf[MAGIC] = MAGIC_V2;
    buf[ATTRIBUTES] = 0;
    buf[ATTRIBUTES + 1] = 0;
    w32(buf, LAST_OFFSET_DELTA, lastDelta);
    w64(buf, BASE_TIMESTAMP, this.baseTs);
    w64(buf, MAX_TIMESTAMP, this.maxTs);
    w64(buf, PRODUCER_ID, -1);
    buf[PRODUCER_EPOCH] = 0xff;
    buf[PRODUCER_EPOCH + 1] = 0xff;
    w32(buf, BASE_SEQUENCE, -1);
    w32(buf, RECORD_COUNT, count);
    w32(buf, CRC, crc32cRange(buf, ATTRIBUTES, at));
    return at;
  }
}

/** The writer of one read's reply; null when the reply cannot be written (a topic name longer than 65535 bytes). */
export function replyWriter(format: WireFormat | undefined, topic: string, partition: number, ext: boolean): ReplyWriter | null {
  if (format === 'record_batch_v2') return new RecordBatchReplyWriter();
  const topicLen = Buffer.byteLength(topic, 'utf8');
  if (topicLen > 0xffff) return null;
  return new ConsumeReplyWriter(topic, topicLen, partition, ext);
}

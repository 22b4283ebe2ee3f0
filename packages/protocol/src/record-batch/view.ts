/**
 * A RecordBatch v2 read in place: header fields straight from the bytes, validation with a precise
 * reason, in-place stamping of the fields outside the CRC, and record access without decoding the batch.
 */
import { compressionCodec, DEFAULT_MAX_DECOMPRESSED_BYTES, decompressWith, decompressWithAsync } from './compression.js';
import { type ControlRecord, parseControlRecord } from './control.js';
import { crc32cRange } from './crc32c.js';
import { RecordBatchError } from './errors.js';
import {
  ATTRIBUTES,
  BASE_OFFSET,
  BASE_SEQUENCE,
  BASE_TIMESTAMP,
  BATCH_LENGTH,
  COMPRESSION_MASK,
  COMPRESSION_NAMES,
  CONTROL_BIT,
  CRC,
  type CompressionName,
  checkInt,
  DELETE_HORIZON_BIT,
  INT32_MAX,
  INT32_MIN,
  LAST_OFFSET_DELTA,
  LOG_OVERHEAD,
  MAGIC,
  MAGIC_V2,
  MAX_TIMESTAMP,
  MIN_BATCH_LENGTH,
  NO_SEQUENCE,
  PARTITION_LEADER_EPOCH,
  PRODUCER_EPOCH,
  PRODUCER_ID,
  RECORD_COUNT,
  RECORDS,
  r16s,
  r32s,
  r32u,
  r64,
  r64OrBig,
  SAFE_MAX,
  SAFE_MIN,
  TIMESTAMP_TYPE_BIT,
  type TimestampType,
  TRANSACTIONAL_BIT,
  w32,
  w64,
} from './layout.js';
import { MIN_RECORD_BODY, RecordCursor, type RecordVisitor, walkRecords } from './records.js';
import type { DecodedRecordBatch, DecodedRecordV2, RecordBatchHeader } from './types.js';

export interface ValidateOptions {
  /** Check the CRC-32C (default true); a caller that just computed it may skip it. */
  verifyCrc?: boolean;
}

/**
 * A view over the batch starting at `start` in `buf`. Constructing one reads nothing; validate() checks the
 * framing, magic and CRC, and the getters read the header at call time (so they see in-place stamps).
 */
export class RecordBatchView {
  readonly buf: Buffer;
  readonly start: number;

  constructor(buf: Buffer, start = 0) {
    this.buf = buf;
    this.start = start;
  }

  /**
   * Checks, in order: the header is there, batchLength covers at least the header, the whole batch is
   * there, magic is 2, the record count is not negative (nor, uncompressed, more than the bytes can hold),
   * and the CRC. Throws a RecordBatchError naming the first failure; returns the view.
   */
  validate(opts: ValidateOptions = {}): this {
    const err = this.check(opts);
    if (err !== null) throw err;
    return this;
  }

  /** validate() without the throw: the error, or null for a valid batch (for loops that expect bad input). */
  check(opts: ValidateOptions = {}): RecordBatchError | null {
    const b = this.buf;
    const s = this.start;
    const have = b.length - s;
    if (have < RECORDS) return new RecordBatchError('truncated', `${have} bytes, a batch header needs ${RECORDS}`, { at: s, need: RECORDS, have });
    const batchLength = r32s(b, s + BATCH_LENGTH);
    if (batchLength < MIN_BATCH_LENGTH)
      return new RecordBatchError('bad_length', `batchLength ${batchLength} is below ${MIN_BATCH_LENGTH}`, { at: s, batchLength });
    const size = batchLength + LOG_OVERHEAD;
    if (have < size) return new RecordBatchError('truncated', `${have} bytes of a ${size}-byte batch`, { at: s, need: size, have });
    const magic = b[s + MAGIC]!;
    if (magic !== MAGIC_V2) return new RecordBatchError('bad_magic', `magic ${magic}, expected 2`, { at: s, magic });
    const count = r32s(b, s + RECORD_COUNT);
    if (count < 0) return new RecordBatchError('bad_record_count', `negative record count ${count}`, { at: s, recordCount: count });
    if ((b[s + ATTRIBUTES + 1]! & COMPRESSION_MASK) === 0 && count > (size - RECORDS) / (MIN_RECORD_BODY + 1)) {
      return new RecordBatchError('bad_record_count', `${count} records cannot fit ${size - RECORDS} bytes`, { at: s, recordCount: count });
    }
    if (opts.verifyCrc !== false) {
      const stored = r32u(b, s + CRC);
      const actual = crc32cRange(b, s + ATTRIBUTES, s + size);
      if (stored !== actual)
        return new RecordBatchError('crc_mismatch', `CRC-32C ${hex(actual)} over the batch, ${hex(stored)} stored`, { at: s, stored, actual });
    }
    return null;
  }

  /** CRC-32C of attributes..end, as the crc field should hold it. */
  computeCrc(): number {
    return crc32cRange(this.buf, this.start + ATTRIBUTES, this.end);
  }

  /**
   * Stamps baseOffset in place. It lies before the CRC's range, so the CRC stays valid: the broker assigns
   * offsets to a producer's bytes without re-checksumming them.
   */
  setBaseOffset(v: number): void {
    checkInt('baseOffset', v, SAFE_MIN, SAFE_MAX);
    w64(this.buf, this.start + BASE_OFFSET, v);
  }

  /** Stamps partitionLeaderEpoch in place; outside the CRC's range like baseOffset. */
  setPartitionLeaderEpoch(v: number): void {
    checkInt('partitionLeaderEpoch', v, INT32_MIN, INT32_MAX);
    w32(this.buf, this.start + PARTITION_LEADER_EPOCH, v);
  }

  get baseOffset(): number {
    return r64(this.buf, this.start + BASE_OFFSET, 'baseOffset');
  }
  get batchLength(): number {
    return r32s(this.buf, this.start + BATCH_LENGTH);
  }
  /** Bytes of the whole batch: batchLength + 12. */
  get size(): number {
    return this.batchLength + LOG_OVERHEAD;
  }
  get end(): number {
    return this.start + this.size;
  }
  get partitionLeaderEpoch(): number {
    return r32s(this.buf, this.start + PARTITION_LEADER_EPOCH);
  }
  get magic(): number {
    return this.buf[this.start + MAGIC]!;
  }
  get crc(): number {
    return r32u(this.buf, this.start + CRC);
  }
  get attributes(): number {
    return r16s(this.buf, this.start + ATTRIBUTES);
  }
  /** The compression attribute (0-7); see compression for its name. */
  get compressionType(): number {
    return this.attributes & COMPRESSION_MASK;
  }
  get compression(): CompressionName {
    const t = this.compressionType;
    if (t > 4) throw new RecordBatchError('unknown_compression', `compression type ${t} is not defined`, { compression: t });
    return COMPRESSION_NAMES[t] as CompressionName;
  }
  get timestampType(): TimestampType {
    return this.attributes & TIMESTAMP_TYPE_BIT ? 1 : 0;
  }
  get isTransactional(): boolean {
    return (this.attributes & TRANSACTIONAL_BIT) !== 0;
  }
  get isControl(): boolean {
    return (this.attributes & CONTROL_BIT) !== 0;
  }
  get hasDeleteHorizon(): boolean {
    return (this.attributes & DELETE_HORIZON_BIT) !== 0;
  }
  get lastOffsetDelta(): number {
    return r32s(this.buf, this.start + LAST_OFFSET_DELTA);
  }
  /**
   * The last record's sequence: baseSequence + lastOffsetDelta, wrapping past 2^31 - 1 to 0 as producer
   * sequences do; -1 when the batch has no sequence.
   */
  get lastSequence(): number {
    const base = this.baseSequence;
    if (base === NO_SEQUENCE) return NO_SEQUENCE;
    const next = base + this.lastOffsetDelta;
    return next > INT32_MAX ? next - INT32_MAX - 1 : next;
  }
  /** The offset after this batch: where the next batch's baseOffset starts. */
  get nextOffset(): number {
    return this.baseOffset + this.lastOffsetDelta + 1;
  }
  get baseTimestamp(): number {
    return r64(this.buf, this.start + BASE_TIMESTAMP, 'baseTimestamp');
  }
  get maxTimestamp(): number {
    return r64(this.buf, this.start + MAX_TIMESTAMP, 'maxTimestamp');
  }
  get producerId(): number {
    return r64(this.buf, this.start + PRODUCER_ID, 'producerId');
  }
  get producerEpoch(): number {
    return r16s(this.buf, this.start + PRODUCER_EPOCH);
  }
  get baseSequence(): number {
    return r32s(this.buf, this.start + BASE_SEQUENCE);
  }
  get recordCount(): number {
    return r32s(this.buf, this.start + RECORD_COUNT);
  }

  /** Every header field as a plain object (tools, tests, logs). */
  header(): RecordBatchHeader {
    return {
      baseOffset: this.baseOffset,
      batchLength: this.batchLength,
      partitionLeaderEpoch: this.partitionLeaderEpoch,
      magic: this.magic,
      crc: this.crc,
      attributes: this.attributes,
      compression: this.compression,
      timestampType: this.timestampType,
      isTransactional: this.isTransactional,
      isControl: this.isControl,
      hasDeleteHorizon: this.hasDeleteHorizon,
      lastOffsetDelta: this.lastOffsetDelta,
      baseTimestamp: this.baseTimestamp,
      maxTimestamp: this.maxTimestamp,
      producerId: this.producerId,
      producerEpoch: this.producerEpoch,
      baseSequence: this.baseSequence,
      recordCount: this.recordCount,
    };
  }

  /** The batch's bytes (a view, no copy). */
  bytes(): Buffer {
    return this.buf.subarray(this.start, this.end);
  }

  /** The records' bytes: a view into the batch, or the decompressed records (synchronously). */
  recordsData(maxBytes = DEFAULT_MAX_DECOMPRESSED_BYTES): Buffer {
    const raw = this.buf.subarray(this.start + RECORDS, this.end);
    const type = this.compressionType;
    return type === 0 ? raw : decompressWith(compressionCodec(type), type, raw, maxBytes);
  }

  /** recordsData with the codec's asynchronous decompression (off the event loop for gzip). */
  async recordsDataAsync(maxBytes = DEFAULT_MAX_DECOMPRESSED_BYTES): Promise<Buffer> {
    const raw = this.buf.subarray(this.start + RECORDS, this.end);
    const type = this.compressionType;
    return type === 0 ? raw : decompressWithAsync(compressionCodec(type), type, raw, maxBytes);
  }

  /**
   * Calls `fn` with one reused cursor per record, in order; `fn` returning false stops. `data` is what
   * recordsData(Async) returned, for a compressed batch decompressed ahead; by default recordsData().
   * Validates each record's structure as it goes. Returns the number of records visited. baseTimestamp may
   * be any int64 (a record's is it plus its delta); a record timestamp beyond 2^53 is timestamp_out_of_range.
   */
  forEachRecord(fn: RecordVisitor, data?: Buffer, cursor: RecordCursor = new RecordCursor()): number {
    let d = data;
    let from = 0;
    let to = 0;
    if (d === undefined && this.compressionType === 0) {
      // Uncompressed: walk the batch's own bytes, no view needed.
      d = this.buf;
      from = this.start + RECORDS;
      to = this.end;
    } else {
      d ??= this.recordsData();
      to = d.length;
    }
    // Any int64 is a legal timestamp on the wire: only the records' own timestamps must fit a number.
    let logAppend: number | undefined;
    let baseTimestamp: number | bigint = 0;
    if (this.timestampType === 1) {
      const max = r64OrBig(this.buf, this.start + MAX_TIMESTAMP);
      if (typeof max === 'bigint') throw new RecordBatchError('timestamp_out_of_range', `maxTimestamp ${max} is beyond 2^53`, { at: this.start, field: 'maxTimestamp' });
      logAppend = max;
    } else baseTimestamp = r64OrBig(this.buf, this.start + BASE_TIMESTAMP);
    return walkRecords(d, from, to, { baseOffset: this.baseOffset, baseTimestamp, logAppendTime: logAppend, recordCount: this.recordCount }, cursor, fn);
  }

  /** Every record as an object (tests and tools; the hot paths use forEachRecord). */
  decode(data?: Buffer): DecodedRecordBatch {
    const records: DecodedRecordV2[] = [];
    this.forEachRecord((r) => {
      records.push({
        offset: r.offset,
        offsetDelta: r.offsetDelta,
        timestamp: r.timestamp,
        attributes: r.attributes,
        key: r.key(),
        value: r.value(),
        headers: r.headers(),
      });
    }, data);
    return { ...this.header(), records };
  }

  /** The transaction marker of a control batch. */
  controlRecord(): ControlRecord {
    if (!this.isControl) throw new RecordBatchError('bad_control_record', 'not a control batch', { at: this.start });
    if (this.recordCount !== 1) throw new RecordBatchError('bad_control_record', `a control batch holds ${this.recordCount} records`, { at: this.start });
    let out: ControlRecord | undefined;
    this.forEachRecord((r) => {
      out = parseControlRecord(r.key(), r.value());
    });
    return out!;
  }
}

function hex(v: number): string {
  return `0x${v.toString(16).padStart(8, '0')}`;
}

import type { CompressionName, TimestampType } from './layout.js';

/** A record header: Kafka's key is a string, its value bytes or null. */
export interface RecordHeaderV2 {
  key: string;
  value: Buffer | null;
}

/** A record to encode. */
export interface RecordV2Input {
  key: Buffer | null;
  value: Buffer | null;
  headers?: readonly RecordHeaderV2[];
  /** Milliseconds since the epoch; the batch's `now` when absent. */
  timestamp?: number;
  /** Offset from baseOffset; the record's index when absent (gaps are legal, as compaction leaves them). */
  offsetDelta?: number;
}

/** A batch to encode: records plus the header fields a producer (or the broker) sets. */
export interface RecordBatchInput {
  records: readonly RecordV2Input[];
  /** 0 from a producer; the broker stamps the real one (RecordBatchView.setBaseOffset). */
  baseOffset?: number;
  /** -1 from a producer; the leader stamps its epoch. */
  partitionLeaderEpoch?: number;
  /** -1, -1, -1 unless idempotent or transactional. */
  producerId?: number;
  producerEpoch?: number;
  baseSequence?: number;
  transactional?: boolean;
  /** A transaction marker batch: use encodeControlBatch, which builds the control record. */
  control?: boolean;
  compression?: CompressionName;
  timestampType?: TimestampType;
  /** The first record's timestamp when absent (-1 for an empty batch). */
  baseTimestamp?: number;
  /** The largest record timestamp when absent (with log-append time: the append time). */
  maxTimestamp?: number;
  /** The last record's offsetDelta when absent (0 for an empty batch); may be larger after compaction. */
  lastOffsetDelta?: number;
  /** baseTimestamp is the compaction delete horizon (attribute bit 6). */
  hasDeleteHorizon?: boolean;
  /** Timestamp for records that have none; Date.now() when absent. */
  now?: number;
}

/** A record of RecordBatchView.decode(): key, value and header values are views into the batch's bytes. */
export interface DecodedRecordV2 {
  offset: number;
  offsetDelta: number;
  timestamp: number;
  attributes: number;
  key: Buffer | null;
  value: Buffer | null;
  headers: RecordHeaderV2[];
}

/** The header fields of a batch, as RecordBatchView reads them. */
export interface RecordBatchHeader {
  baseOffset: number;
  batchLength: number;
  partitionLeaderEpoch: number;
  magic: number;
  crc: number;
  attributes: number;
  compression: CompressionName;
  timestampType: TimestampType;
  isTransactional: boolean;
  isControl: boolean;
  hasDeleteHorizon: boolean;
  lastOffsetDelta: number;
  baseTimestamp: number;
  maxTimestamp: number;
  producerId: number;
  producerEpoch: number;
  baseSequence: number;
  recordCount: number;
}

export interface DecodedRecordBatch extends RecordBatchHeader {
  records: DecodedRecordV2[];
}

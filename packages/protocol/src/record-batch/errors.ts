import { TributaryError } from '../errors.js';

/**
 * Why a RecordBatch v2 was refused. Stable: storage recovery, the produce path and a Kafka listener branch
 * on it (a torn tail is cut, a CRC mismatch is corruption, an unsupported codec maps to its own Kafka error).
 */
export type RecordBatchErrorReason =
  /** Fewer bytes than the header or the declared batchLength need. */
  | 'truncated'
  /** batchLength smaller than the fixed header. */
  | 'bad_length'
  /** magic is not 2. */
  | 'bad_magic'
  /** The CRC-32C over attributes..end does not match. */
  | 'crc_mismatch'
  /** Negative record count, or one the bytes cannot hold. */
  | 'bad_record_count'
  /** A record's own length, varints or fields do not fit its bytes, or the records do not fill the batch. */
  | 'bad_record'
  /** An int64 field outside the safe integer range where a number is returned. */
  | 'int64_out_of_range'
  /**
   * A record's timestamp (baseTimestamp plus its delta, or a log-append-time batch's maxTimestamp) outside
   * the safe integer range a timestamp is read as: a well-formed batch (any int64 is a legal timestamp on
   * the wire) whose timestamps cannot be held as numbers.
   */
  | 'timestamp_out_of_range'
  /** zstd (refused on Node 20), or snappy/lz4 with no codec registered. */
  | 'unsupported_compression'
  /** Compression type 5-7, which no Kafka version defines. */
  | 'unknown_compression'
  /** The codec failed, or the output passed the size limit. */
  | 'decompression_failed'
  /** A control batch whose record is not a known control record. */
  | 'bad_control_record'
  /** Encoder input out of range (an int32 field, too many records, a negative delta). */
  | 'invalid_input';

/**
 * A refused RecordBatch v2, with the wire code `invalid_batch` (the class and retryability of the shared
 * error table) and the precise `reason` in its fields; `at` is the byte position the check failed at.
 */
export class RecordBatchError extends TributaryError {
  readonly reason: RecordBatchErrorReason;

  constructor(reason: RecordBatchErrorReason, detail: string, fields: Record<string, string | number | boolean | bigint> = {}) {
    super('invalid_batch', { reason, ...fields }, `invalid_batch ${reason}: ${detail}`);
    this.name = 'RecordBatchError';
    this.reason = reason;
  }
}

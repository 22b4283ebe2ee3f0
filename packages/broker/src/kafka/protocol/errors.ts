import { TributaryError } from 'tributary-protocol/errors.js';

/**
 * Why Kafka bytes were refused. Stable: the listener maps them (truncated/negative/oversized lengths are
 * CORRUPT_MESSAGE or a closed connection, an unknown version is UNSUPPORTED_VERSION) and tests match on them.
 */
export type KafkaCodecReason =
  /** A read needed more bytes than the frame (or the enclosing tagged field) has left. */
  | 'truncated'
  /** A length or count below zero that is not the legal null (-1 on a nullable field). */
  | 'negative_length'
  /** A length or count larger than the bytes left in the frame: refused before anything is allocated. */
  | 'length_beyond_frame'
  /** More array elements and tagged fields than one decode may declare (MAX_DECODED_ENTRIES in reader.ts). */
  | 'too_many_entries'
  /** An unsigned varint longer than 5 bytes or above the int32 range. */
  | 'bad_varint'
  /** A null where the field is not nullable in this version (compact 0 length, or -1). */
  | 'unexpected_null'
  /** An int64 outside the safe integer range on a field decoded as a number. */
  | 'int64_out_of_range'
  /** A known tagged field whose declared size does not match what its type consumed. */
  | 'bad_tagged_field'
  /** Bytes left over after the message was decoded. */
  | 'trailing_bytes'
  /** Encoder input of the wrong type or out of range for the field. */
  | 'invalid_value'
  /** An API key the table does not know. */
  | 'unknown_api'
  /** A version outside the schema's range. */
  | 'unsupported_version'
  /** A frame shorter than the smallest request header. */
  | 'frame_too_small';

/**
 * Malformed Kafka wire data or encoder input. The shared code is invalid_parameter (validation, not
 * retriable); `reason` is the precise cause, `at` the byte offset in the message and `field` the schema path.
 */
export class KafkaCodecError extends TributaryError {
  readonly reason: KafkaCodecReason;

  constructor(reason: KafkaCodecReason, detail: string, fields: Record<string, string | number | boolean | bigint> = {}) {
    super('invalid_parameter', { param: 'kafka', reason, ...fields }, `kafka ${reason}: ${detail}`);
    this.name = 'KafkaCodecError';
    this.reason = reason;
  }
}

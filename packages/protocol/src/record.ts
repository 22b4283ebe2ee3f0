/** The record model shared by the wire codec, the storage layer, the broker and the SDK. */

export interface RecordHeader {
  key: string;
  value: Buffer;
}

/** Attribute bits carried with every stored record. */
export const RecordAttr = {
  /** A transaction marker (commit/abort), not user data. */
  CONTROL: 0x01,
  /** Written inside a transaction. */
  TRANSACTIONAL: 0x02,
  /**
   * The value is null, not empty: a Kafka record's value of length -1 (a tombstone), stored as an empty
   * value. Without it an empty value is just empty (docs/kafka.md, "Produce"; docs/protocol.md 5.2).
   */
  NULL_VALUE: 0x04,
} as const;

/** A record as a producer hands it over: the log assigns offset (and timestamp when 0, unless keepTimestamp). */
export interface RecordInput {
  key: Buffer | null;
  value: Buffer;
  /** Milliseconds since the epoch; 0 means "stamp on append" (unless keepTimestamp). */
  timestamp?: number;
  /**
   * Store `timestamp` as given, 0 and negative values included: a Kafka producer's CreateTime, -1 its "no
   * timestamp" (docs/kafka.md, "Produce"). Without it 0 is stamped on append and a negative one refused.
   */
  keepTimestamp?: boolean;
  headers?: RecordHeader[];
  /** '' when the producer is not idempotent. */
  producerId?: string;
  /** -1 when none. */
  epoch?: number;
  /** -1 when none. */
  sequence?: number;
  attributes?: number;
}

/** A record as stored and read back. Offsets are safe integers (< 2^53). */
export interface LogRecord {
  offset: number;
  timestamp: number;
  key: Buffer | null;
  value: Buffer;
  headers: RecordHeader[];
  producerId: string;
  epoch: number;
  sequence: number;
  attributes: number;
}

/**
 * The largest producer epoch. Epochs are 16-bit, as in a Kafka RecordBatch v2 header: a transactional id
 * whose epoch would pass it gets a new producer id at epoch 0 instead (docs/protocol.md, "Transactions").
 */
export const MAX_PRODUCER_EPOCH = 32_767;

/** Control record (transaction marker) value: [version u8 = CONTROL_RECORD_VERSION, type u8 (ControlType)]. */
export const CONTROL_RECORD_VERSION = 0;

/** The type byte of a transaction marker's value. */
export const ControlType = {
  ABORT: 0,
  COMMIT: 1,
} as const;

/**
 * Kafka's RecordBatch v2 (magic 2): the codec for the stored record layout and the Kafka listener to come
 * (issues 14 and 15). Not yet wired into storage; see docs/architecture.md.
 */
export * from './compression.js';
export * from './control.js';
export * from './crc32c.js';
export * from './encode.js';
export * from './errors.js';
export {
  Compression,
  COMPRESSION_NAMES,
  type CompressionName,
  LOG_OVERHEAD,
  MAGIC_V2,
  NO_PARTITION_LEADER_EPOCH,
  NO_PRODUCER_EPOCH,
  NO_PRODUCER_ID,
  NO_SEQUENCE,
  RECORDS as RECORD_BATCH_HEADER_SIZE,
  type TimestampType,
} from './layout.js';
export * from './records.js';
export * from './split.js';
export * from './types.js';
export * from './varint.js';
export * from './view.js';

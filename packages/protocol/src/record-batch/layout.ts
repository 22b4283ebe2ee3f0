/**
 * The fixed layout of a RecordBatch v2 header (Kafka's message format, magic 2) and the big-endian
 * readers and writers the codec shares. Every int64 is read as a number and refused outside the safe
 * integer range, like the rest of Tributary's protocol (offsets and timestamps are numbers everywhere);
 * only the record walk takes any baseTimestamp (r64OrBig), since a record's timestamp is it plus a delta.
 */
import { RecordBatchError } from './errors.js';

export const MAGIC_V2 = 2;

// Byte positions in a batch.
export const BASE_OFFSET = 0;
export const BATCH_LENGTH = 8;
export const PARTITION_LEADER_EPOCH = 12;
export const MAGIC = 16;
export const CRC = 17;
export const ATTRIBUTES = 21;
export const LAST_OFFSET_DELTA = 23;
export const BASE_TIMESTAMP = 27;
export const MAX_TIMESTAMP = 35;
export const PRODUCER_ID = 43;
export const PRODUCER_EPOCH = 51;
export const BASE_SEQUENCE = 53;
export const RECORD_COUNT = 57;
/** Size of the header; the records (or their compressed form) follow. */
export const RECORDS = 61;
/** baseOffset and batchLength: the bytes batchLength does not count. */
export const LOG_OVERHEAD = 12;
/** The smallest legal batchLength: the header after the log overhead, with no records. */
export const MIN_BATCH_LENGTH = RECORDS - LOG_OVERHEAD;

// Attribute bits.
export const COMPRESSION_MASK = 0x07;
export const TIMESTAMP_TYPE_BIT = 0x08;
export const TRANSACTIONAL_BIT = 0x10;
export const CONTROL_BIT = 0x20;
export const DELETE_HORIZON_BIT = 0x40;

export const Compression = { none: 0, gzip: 1, snappy: 2, lz4: 3, zstd: 4 } as const;
export type CompressionName = keyof typeof Compression;
export const COMPRESSION_NAMES: readonly string[] = ['none', 'gzip', 'snappy', 'lz4', 'zstd'];

/** 0: the producer's create time; 1: the broker's log-append time (maxTimestamp then holds it). */
export type TimestampType = 0 | 1;

/** The "none" value of producerId, producerEpoch, baseSequence and partitionLeaderEpoch. */
export const NO_PRODUCER_ID = -1;
export const NO_PRODUCER_EPOCH = -1;
export const NO_SEQUENCE = -1;
export const NO_PARTITION_LEADER_EPOCH = -1;

const TWO_32 = 0x100000000;

export function r16s(b: Uint8Array, at: number): number {
  return (((b[at]! << 8) | b[at + 1]!) << 16) >> 16;
}

export function r32s(b: Uint8Array, at: number): number {
  return (b[at]! << 24) | (b[at + 1]! << 16) | (b[at + 2]! << 8) | b[at + 3]!;
}

export function r32u(b: Uint8Array, at: number): number {
  return r32s(b, at) >>> 0;
}

export function w16(b: Uint8Array, at: number, v: number): void {
  b[at] = v >>> 8;
  b[at + 1] = v;
}

export function w32(b: Uint8Array, at: number, v: number): void {
  b[at] = v >>> 24;
  b[at + 1] = v >>> 16;
  b[at + 2] = v >>> 8;
  b[at + 3] = v;
}

/** Signed int64 at `at` as a number; refused outside the safe range (`field` names it in the error). */
export function r64(b: Uint8Array, at: number, field: string): number {
  const hi = r32s(b, at);
  const lo = r32u(b, at + 4);
  // Safe range [-(2^53 - 1), 2^53 - 1]: high word in [-2^21, 2^21 - 1], except -2^53 itself.
  if (hi > 0x1fffff || hi < -0x200000 || (hi === -0x200000 && lo === 0)) {
    throw new RecordBatchError('int64_out_of_range', `${field} is beyond 2^53`, { field, at });
  }
  return hi * TWO_32 + lo;
}

/**
 * Signed int64 at `at` as a number, unchecked: exact for safe integers (the stored formats' callers check
 * Number.isSafeInteger where a value may be beyond them).
 */
export function r64n(b: Uint8Array, at: number): number {
  return r32s(b, at) * TWO_32 + r32u(b, at + 4);
}

/** Signed int64 at `at`: a number when it is a safe integer, else the exact bigint. */
export function r64OrBig(b: Uint8Array, at: number): number | bigint {
  const hi = r32s(b, at);
  const lo = r32u(b, at + 4);
  if (hi > 0x1fffff || hi < -0x200000 || (hi === -0x200000 && lo === 0)) return r64Big(b, at);
  return hi * TWO_32 + lo;
}

/** Signed int64 at `at`, exact. */
export function r64Big(b: Uint8Array, at: number): bigint {
  return (BigInt(r32s(b, at)) << 32n) | BigInt(r32u(b, at + 4));
}

/** Writes a safe integer as a signed int64 in two 32-bit halves (no bigint on this path). */
export function w64(b: Uint8Array, at: number, v: number): void {
  const hi = Math.floor(v / TWO_32);
  w32(b, at, hi);
  w32(b, at + 4, v - hi * TWO_32);
}

/** Refuses a value that is not an integer in [min, max]; the encoder's one input check. */
export function checkInt(field: string, v: number, min: number, max: number): void {
  if (!Number.isInteger(v) || v < min || v > max) {
    throw new RecordBatchError('invalid_input', `${field} must be an integer in [${min}, ${max}], got ${v}`, { field });
  }
}

export const INT16_MIN = -0x8000;
export const INT16_MAX = 0x7fff;
export const INT32_MIN = -0x80000000;
export const INT32_MAX = 0x7fffffff;
export const SAFE_MIN = Number.MIN_SAFE_INTEGER;
export const SAFE_MAX = Number.MAX_SAFE_INTEGER;

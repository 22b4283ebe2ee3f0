/**
 * Byte-level pieces of the binary batch frame (docs/protocol.md section 5) shared by its encoder and decoder
 * (batch.ts) and the in-place frame builder of the SDK producer (batch-frame-builder.ts).
 */
import { TributaryError } from './errors.js';
import type { RecordHeader } from './record.js';

/** The header's flags byte: 0 plain, 1 idempotent, 2 transactional (a transaction section follows the count). */
export const FLAG_IDEMPOTENT = 1;
export const FLAG_TRANSACTIONAL = 2;

export function bad(reason: string): TributaryError {
  return new TributaryError('invalid_batch', { reason });
}

export const TWO_32 = 0x100000000;

// Byte-level big-endian writers for the pre-sized buffer of encodeBatch. `v >>> n` is ToUint32 of v, so
// w32 writes the same bytes as writeUInt32BE(v >>> 0), and a negative int32 comes out in two's complement.
export function w16(buf: Buffer, at: number, v: number): void {
  buf[at] = v >>> 8;
  buf[at + 1] = v;
}

export function w32(buf: Buffer, at: number, v: number): void {
  buf[at] = v >>> 24;
  buf[at + 1] = v >>> 16;
  buf[at + 2] = v >>> 8;
  buf[at + 3] = v;
}

/** Signed 32-bit big-endian read; the caller has checked the bounds. */
export function r32s(buf: Buffer, at: number): number {
  return (buf[at]! << 24) | (buf[at + 1]! << 16) | (buf[at + 2]! << 8) | buf[at + 3]!;
}

/** Unsigned 32-bit big-endian read; the caller has checked the bounds. */
export function r32u(buf: Buffer, at: number): number {
  return buf[at]! * 0x1000000 + ((buf[at + 1]! << 16) | (buf[at + 2]! << 8) | buf[at + 3]!);
}

export function writeU64(buf: Buffer, v: number, at: number): void {
  // Two halves avoid BigInt on the hot path; values are validated safe integers.
  w32(buf, at, Math.floor(v / TWO_32));
  w32(buf, at + 4, v);
}

export function readU64(buf: Buffer, at: number): number {
  const hi = r32u(buf, at);
  if (hi > 0x1fffff) throw bad('64-bit value beyond 2^53');
  return hi * TWO_32 + r32u(buf, at + 4);
}

export function writeI64(buf: Buffer, v: number, at: number): void {
  if (Number.isSafeInteger(v)) {
    // Two's complement in two 32-bit halves: hi = floor(v / 2^32) is the signed high word, and
    // v - hi * 2^32 (exact for safe integers) is the unsigned low word.
    const hi = Math.floor(v / TWO_32);
    w32(buf, at, hi);
    w32(buf, at + 4, v - hi * TWO_32);
  } else {
    // Beyond the safe range (or not an integer): BigInt gives the exact bytes, or throws as before.
    buf.writeBigInt64BE(BigInt(v), at);
  }
}

export function readI64(buf: Buffer, at: number): number {
  const hi = r32s(buf, at);
  const lo = r32u(buf, at + 4);
  // The safe range is [-(2^53 - 1), 2^53 - 1]: a high word in [-2^21, 2^21 - 1], except -2^53 itself
  // (high word -2^21 with a zero low word). Inside it, hi * 2^32 + lo is exact.
  if (hi > 0x1fffff || hi < -0x200000 || (hi === -0x200000 && lo === 0)) throw bad('64-bit value beyond 2^53');
  return hi * TWO_32 + lo;
}

export function truncated(): TributaryError {
  return bad('truncated batch');
}

/** Writes a string's UTF-8 bytes at `at` (its length was measured with Buffer.byteLength); returns the byte count. */
export function writeUtf8(buf: Buffer, s: string, at: number): number {
  return s.length === 0 ? 0 : buf.write(s, at, 'utf8');
}

/** Past a record's extension fields (timestamp, attributes, headers) starting at `at`. */
export function skipExtensions(buf: Buffer, at: number): number {
  const hc = (buf[at + 9]! << 8) | buf[at + 10]!;
  at += 11;
  for (let h = 0; h < hc; h++) {
    at += 2 + ((buf[at]! << 8) | buf[at + 1]!);
    at += 4 + r32u(buf, at);
  }
  return at;
}

/** Writes `count` headers (key: u16 length + UTF-8, value: u32 length + bytes) at `at`; returns the end. */
export function writeHeaders(buf: Buffer, at: number, headers: readonly RecordHeader[], count: number): number {
  for (let h = 0; h < count; h++) {
    const hdr = headers[h]!;
    const kl = writeUtf8(buf, hdr.key, at + 2);
    w16(buf, at, kl);
    at += 2 + kl;
    w32(buf, at, hdr.value.length);
    buf.set(hdr.value, at + 4);
    at += 4 + hdr.value.length;
  }
  return at;
}

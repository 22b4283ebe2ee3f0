/**
 * Kafka's zigzag varints (int32, up to 5 bytes) and varlongs (int64, up to 10 bytes). The common path stays
 * on numbers; a varlong outside the safe integer range goes through bigint. Readers report where they
 * stopped in `varEnd.pos` instead of returning a tuple, so reading a record allocates nothing.
 */
import { RecordBatchError } from './errors.js';

/** Position just past the last varint or varlong read. */
export const varEnd = { pos: 0 };

function badVarint(at: number, what: string): RecordBatchError {
  return new RecordBatchError('bad_record', `${what} at byte ${at}`, { at });
}

/** Bytes a zigzag varint takes for an int32 `v`. */
export function sizeOfVarint(v: number): number {
  let u = ((v << 1) ^ (v >> 31)) >>> 0;
  let n = 1;
  while (u >= 0x80) {
    u >>>= 7;
    n++;
  }
  return n;
}

/** Writes int32 `v` as a zigzag varint at `at`; returns the position after it. */
export function writeVarint(buf: Uint8Array, at: number, v: number): number {
  let u = ((v << 1) ^ (v >> 31)) >>> 0;
  while (u >= 0x80) {
    buf[at++] = (u & 0x7f) | 0x80;
    u >>>= 7;
  }
  buf[at++] = u;
  return at;
}

/** Reads a zigzag varint (int32) at `at`, never past `end`; sets varEnd.pos. */
export function readVarint(buf: Uint8Array, at: number, end: number): number {
  let u = 0;
  let shift = 0;
  const start = at;
  for (;;) {
    if (at >= end) throw badVarint(start, 'varint runs past its record');
    const b = buf[at++]!;
    if (shift === 28) {
      // Fifth byte: only the low 4 bits fit an int32, and it must end the varint.
      if (b > 0x0f) throw badVarint(start, 'varint longer than 32 bits');
      u |= b << 28;
      break;
    }
    u |= (b & 0x7f) << shift;
    if (b < 0x80) break;
    shift += 7;
  }
  varEnd.pos = at;
  return (u >>> 1) ^ -(u & 1);
}

const TWO_52 = 2 ** 52;

/** The zigzag form of a safe integer with |v| <= 2^52 (exact in doubles), else undefined. */
function zigzagNumber(v: number): number | undefined {
  if (v >= 0) return v <= TWO_52 ? v * 2 : undefined;
  return v >= -TWO_52 ? -v * 2 - 1 : undefined;
}

function zigzagBig(v: bigint): bigint {
  const x = BigInt.asIntN(64, v);
  return BigInt.asUintN(64, (x << 1n) ^ (x >> 63n));
}

/** Bytes a zigzag varlong takes for `v` (a safe integer, or a bigint for the full int64 range). */
export function sizeOfVarlong(v: number | bigint): number {
  if (typeof v === 'number') {
    if (v >= -0x40000000 && v < 0x40000000) return sizeOfVarint(v);
    const u = zigzagNumber(v);
    if (u !== undefined) {
      let n = 1;
      for (let x = u; x >= 0x80; x = Math.floor(x / 0x80)) n++;
      return n;
    }
    v = BigInt(v);
  }
  let u = zigzagBig(v);
  let n = 1;
  while (u >= 0x80n) {
    u >>= 7n;
    n++;
  }
  return n;
}

/** Writes `v` as a zigzag varlong at `at`; returns the position after it. */
export function writeVarlong(buf: Uint8Array, at: number, v: number | bigint): number {
  if (typeof v === 'number') {
    if (v >= -0x40000000 && v < 0x40000000) return writeVarint(buf, at, v);
    const u = zigzagNumber(v);
    if (u !== undefined) {
      let x = u;
      while (x >= 0x80) {
        buf[at++] = (x % 0x80) | 0x80;
        x = Math.floor(x / 0x80);
      }
      buf[at++] = x;
      return at;
    }
    if (!Number.isInteger(v)) throw new RecordBatchError('invalid_input', `varlong of a non-integer ${v}`);
    v = BigInt(v);
  }
  let u = zigzagBig(v);
  while (u >= 0x80n) {
    buf[at++] = Number(u & 0x7fn) | 0x80;
    u >>= 7n;
  }
  buf[at++] = Number(u);
  return at;
}

/**
 * Reads a zigzag varlong at `at`, never past `end`; sets varEnd.pos. Returns a number when the value is a
 * safe integer, else a bigint (rare: an int64 timestamp delta beyond 2^53).
 */
export function readVarlong(buf: Uint8Array, at: number, end: number): number | bigint {
  const start = at;
  // Up to 7 bytes (49 bits) accumulate exactly in a double.
  let u = 0;
  let mul = 1;
  for (let i = 0; i < 7; i++) {
    if (at >= end) throw badVarint(start, 'varlong runs past its record');
    const b = buf[at++]!;
    u += (b & 0x7f) * mul;
    if (b < 0x80) {
      varEnd.pos = at;
      return u % 2 === 0 ? u / 2 : -(u + 1) / 2;
    }
    mul *= 0x80;
  }
  const big = readVarlongBig(buf, start, end);
  return big >= MIN_SAFE && big <= MAX_SAFE ? Number(big) : big;
}

const MIN_SAFE = BigInt(Number.MIN_SAFE_INTEGER);
const MAX_SAFE = BigInt(Number.MAX_SAFE_INTEGER);

/** readVarlong for the full int64 range, always as a bigint. */
export function readVarlongBig(buf: Uint8Array, at: number, end: number): bigint {
  const start = at;
  let u = 0n;
  let shift = 0n;
  for (let i = 0; ; i++) {
    if (at >= end) throw badVarint(start, 'varlong runs past its record');
    const b = buf[at++]!;
    if (i === 9 && b > 0x01) throw badVarint(start, 'varlong longer than 64 bits');
    u |= BigInt(b & 0x7f) << shift;
    if (b < 0x80) break;
    if (i === 9) throw badVarint(start, 'varlong longer than 64 bits');
    shift += 7n;
  }
  varEnd.pos = at;
  return (u >> 1n) ^ -(u & 1n);
}

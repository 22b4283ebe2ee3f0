/**
 * CRC-32C (Castagnoli), the checksum of RecordBatch v2 and of the broker's storage files. It lives in the
 * protocol package so that clients can validate batches without server dependencies: @node-rs/crc32 is
 * used when it can be loaded (the broker depends on it), otherwise a pure-TS slicing-by-8 fallback, so no
 * native module is forced on SDK users.
 */
import { createRequire } from 'node:module';

/** CRC-32C. `initial` chains a previous result: crc32c(b, crc32c(a)) === crc32c(a ‖ b). */
export type Crc32cFn = (buf: Uint8Array, initial?: number) => number;

/** Slicing-by-8 tables: table t at [t * 256, t * 256 + 256); table 0 is the classic byte-at-a-time table. */
const T: Uint32Array = (() => {
  const t = new Uint32Array(256 * 8);
  for (let n = 0; n < 256; n++) {
    let c = n;
    for (let k = 0; k < 8; k++) c = c & 1 ? (c >>> 1) ^ 0x82f63b78 : c >>> 1;
    t[n] = c >>> 0;
  }
  for (let n = 0; n < 256; n++) {
    for (let k = 1; k < 8; k++) {
      const prev = t[(k - 1) * 256 + n]!;
      t[k * 256 + n] = (prev >>> 8) ^ t[prev & 0xff]!;
    }
  }
  return t;
})();

/** Byte-at-a-time reference: the simplest correct form, what the faster paths are tested against. */
export function crc32cPure(buf: Uint8Array, initial = 0): number {
  let crc = ~initial;
  for (let i = 0; i < buf.length; i++) crc = T[(crc ^ buf[i]!) & 0xff]! ^ (crc >>> 8);
  return ~crc >>> 0;
}

/** Slicing-by-8 over buf[s, e), continuing from `initial`. */
function sliced(buf: Uint8Array, s: number, e: number, initial: number): number {
  let crc = ~initial;
  let i = s;
  const e8 = e - 7;
  for (; i < e8; i += 8) {
    const a = crc ^ (buf[i]! | (buf[i + 1]! << 8) | (buf[i + 2]! << 16) | (buf[i + 3]! << 24));
    crc =
      T[1792 + (a & 0xff)]! ^
      T[1536 + ((a >>> 8) & 0xff)]! ^
      T[1280 + ((a >>> 16) & 0xff)]! ^
      T[1024 + (a >>> 24)]! ^
      T[768 + buf[i + 4]!]! ^
      T[512 + buf[i + 5]!]! ^
      T[256 + buf[i + 6]!]! ^
      T[buf[i + 7]!]!;
  }
  for (; i < e; i++) crc = T[(crc ^ buf[i]!) & 0xff]! ^ (crc >>> 8);
  return ~crc >>> 0;
}

/** The pure-TS implementation used when the native binding is absent (slicing-by-8, ~4x the reference). */
export function crc32cSliced(buf: Uint8Array, initial = 0): number {
  return sliced(buf, 0, buf.length, initial);
}

function loadNative(): Crc32cFn | null {
  try {
    // Synchronous load keeps crc32c() callable at import time; a missing package or prebuilt binary falls back.
    const req = createRequire(import.meta.url);
    const mod = req('@node-rs/crc32') as { crc32c?: (input: Uint8Array, initial?: number | null) => number };
    if (typeof mod.crc32c !== 'function') return null;
    const fn = mod.crc32c;
    // Guard against a binding with different chaining semantics.
    if (fn(Buffer.from('123456789')) !== 0xe3069283) return null;
    return (buf, initial = 0) => fn(buf, initial) >>> 0;
  } catch {
    return null;
  }
}

const native = loadNative();

/** Which implementation `crc32c` uses. */
export const crc32cImpl: 'native' | 'pure' = native ? 'native' : 'pure';

/** The native crc32c, or null when @node-rs/crc32 did not load (exported for tests). */
export const crc32cNative: Crc32cFn | null = native;

export const crc32c: Crc32cFn = native ?? crc32cSliced;

/** Up to this many bytes the JS CRC beats a call into the native one (whose fixed cost dominates small inputs). */
const JS_CRC_MAX = 256;

/**
 * CRC-32C of buf[s, e): the value crc32c gives for those bytes. Small ranges in JS (no view allocation, no
 * native call), larger ones with crc32c.
 */
export function crc32cRange(buf: Uint8Array, s: number, e: number): number {
  if (native !== null && e - s > JS_CRC_MAX) return native(new Uint8Array(buf.buffer, buf.byteOffset + s, e - s));
  return sliced(buf, s, e, 0);
}

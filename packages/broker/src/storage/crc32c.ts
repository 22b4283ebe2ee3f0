import { createRequire } from 'node:module';

/** CRC-32C (Castagnoli). `initial` chains a previous result: crc32c(b, crc32c(a)) === crc32c(a ‖ b). */
export type Crc32cFn = (buf: Uint8Array, initial?: number) => number;

const TABLE: Uint32Array = (() => {
  const t = new Uint32Array(256);
  for (let n = 0; n < 256; n++) {
    let c = n;
    for (let k = 0; k < 8; k++) c = c & 1 ? (c >>> 1) ^ 0x82f63b78 : c >>> 1;
    t[n] = c >>> 0;
  }
  return t;
})();

/** Pure-TS table-driven fallback; also the reference the native binding is tested against. */
export function crc32cPure(buf: Uint8Array, initial = 0): number {
  let crc = ~initial;
  for (let i = 0; i < buf.length; i++) crc = TABLE[(crc ^ buf[i]) & 0xff] ^ (crc >>> 8);
  return ~crc >>> 0;
}

function loadNative(): Crc32cFn | null {
  try {
    // Synchronous load keeps crc32c() callable at import time; a missing prebuilt binary falls back.
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

export const crc32c: Crc32cFn = native ?? crc32cPure;

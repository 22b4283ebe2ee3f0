import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { crc32cPure } from 'tributary-broker/storage/crc32c.js';
import { crc32cRange } from 'tributary-broker/storage/record-codec.js';

describe('crc32cRange', () => {
  it('matches the reference CRC-32C for any range, small (JS) and large (native)', () => {
    fc.assert(
      fc.property(fc.uint8Array({ maxLength: 700 }), fc.nat(), fc.nat(), (a, x, y) => {
        const buf = Buffer.from(a);
        const s = buf.length === 0 ? 0 : x % (buf.length + 1);
        const e = s + (y % (buf.length - s + 1));
        expect(crc32cRange(buf, s, e)).toBe(crc32cPure(buf.subarray(s, e)));
      }),
      { numRuns: 2000 },
    );
  });

  it('gives the check value and works on a Buffer at a pool offset', () => {
    expect(crc32cRange(Buffer.from('123456789'), 0, 9)).toBe(0xe3069283);
    const pooled = Buffer.from('xx123456789yy');
    expect(pooled.byteOffset).toBeGreaterThanOrEqual(0);
    expect(crc32cRange(pooled, 2, 11)).toBe(0xe3069283);
    const big = Buffer.alloc(1000, 0xab);
    expect(crc32cRange(big, 3, 999)).toBe(crc32cPure(big.subarray(3, 999)));
  });
});

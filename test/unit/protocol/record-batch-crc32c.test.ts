import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { crc32c, crc32cPure, crc32cRange, crc32cSliced } from 'tributary-protocol/record-batch/crc32c.js';

describe('protocol crc32c (the fallback SDK users get without @node-rs/crc32)', () => {
  it('the slicing-by-8 fallback agrees with the reference, chained too', () => {
    expect(crc32cSliced(Buffer.from('123456789'))).toBe(0xe3069283);
    fc.assert(
      fc.property(fc.uint8Array({ maxLength: 600 }), fc.uint8Array({ maxLength: 100 }), (a, b) => {
        const whole = Buffer.concat([a, b]);
        const ref = crc32cPure(whole);
        expect(crc32cSliced(whole)).toBe(ref);
        expect(crc32cSliced(b, crc32cSliced(a))).toBe(ref);
        expect(crc32c(whole)).toBe(ref);
        expect(crc32cRange(whole, a.length, whole.length)).toBe(crc32cPure(b));
      }),
      { numRuns: 500 },
    );
  });
});

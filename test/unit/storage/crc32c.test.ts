import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { crc32c, crc32cImpl, crc32cNative, crc32cPure } from 'tributary-broker/storage/crc32c.js';

describe('crc32c', () => {
  it('matches the known check vector', () => {
    const v = Buffer.from('123456789');
    expect(crc32cPure(v)).toBe(0xe3069283);
    expect(crc32c(v)).toBe(0xe3069283);
    expect(crc32cPure(Buffer.alloc(0))).toBe(0);
  });

  it('uses the native binding in this environment', () => {
    expect(crc32cImpl).toBe('native');
    expect(crc32cNative).not.toBeNull();
  });

  it('native and pure agree, including chained computation', () => {
    const native = crc32cNative;
    if (!native) throw new Error('native crc32c not loaded');
    fc.assert(
      fc.property(fc.uint8Array({ maxLength: 2048 }), fc.uint8Array({ maxLength: 512 }), (a, b) => {
        const whole = Buffer.concat([a, b]);
        const pure = crc32cPure(whole);
        expect(native(whole)).toBe(pure);
        expect(crc32cPure(b, crc32cPure(a))).toBe(pure);
        expect(native(b, native(a))).toBe(pure);
      }),
      { numRuns: 300 },
    );
  });
});

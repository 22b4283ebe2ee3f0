import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { fnv1a64, partitionForKey } from 'tributary-protocol/partitioner.js';

function reference(data: Uint8Array): bigint {
  let h = 0xcbf29ce484222325n;
  for (const b of data) {
    h ^= BigInt(b);
    h = (h * 0x100000001b3n) & 0xffffffffffffffffn;
  }
  return h;
}

describe('FNV-1a 64 partitioner', () => {
  it('matches the published test vectors', () => {
    const hex = (s: string) => {
      const { hi, lo } = fnv1a64(Buffer.from(s));
      return ((BigInt(hi) << 32n) | BigInt(lo)).toString(16).padStart(16, '0');
    };
    expect(hex('')).toBe('cbf29ce484222325');
    expect(hex('a')).toBe('af63dc4c8601ec8c');
    expect(hex('foobar')).toBe('85944171f73967e8');
  });

  it('agrees with a BigInt reference for any key and partition count', () => {
    fc.assert(
      fc.property(fc.uint8Array({ maxLength: 300 }), fc.integer({ min: 1, max: 100_000 }), (key, n) => {
        const ref = reference(key);
        const { hi, lo } = fnv1a64(key);
        expect((BigInt(hi) << 32n) | BigInt(lo)).toBe(ref);
        expect(partitionForKey(key, n)).toBe(Number(ref % BigInt(n)));
      }),
      { numRuns: 500 },
    );
  });
});

/**
 * FNV-1a 64-bit over the key bytes, then modulo the partition count. The broker and the SDK share this
 * so a keyed record lands on the same partition whichever side picks it.
 */
export function fnv1a64(data: Uint8Array): { hi: number; lo: number } {
  // 64-bit state in four 16-bit limbs: exact arithmetic without BigInt on the hot path.
  let h0 = 0x2325;
  let h1 = 0x8422;
  let h2 = 0x9ce4;
  let h3 = 0xcbf2;
  for (let i = 0; i < data.length; i++) {
    h0 ^= data[i]!;
    // multiply by the FNV prime 0x00000100000001b3 = 2^40 + 0x1b3
    const t0 = h0 * 0x1b3;
    const t1 = h1 * 0x1b3;
    const t2 = h2 * 0x1b3 + (h0 << 8);
    const t3 = h3 * 0x1b3 + (h1 << 8);
    h0 = t0 & 0xffff;
    const c1 = t1 + (t0 >>> 16);
    h1 = c1 & 0xffff;
    const c2 = t2 + Math.floor(c1 / 0x10000);
    h2 = c2 & 0xffff;
    h3 = (t3 + Math.floor(c2 / 0x10000)) & 0xffff;
  }
  return { hi: ((h3 << 16) | h2) >>> 0, lo: ((h1 << 16) | h0) >>> 0 };
}

export function partitionForKey(key: Uint8Array, partitions: number): number {
  const { hi, lo } = fnv1a64(key);
  // (hi * 2^32 + lo) mod n without leaving safe-integer range: every factor is below n.
  const twoTo32 = 0x100000000 % partitions;
  return (((hi % partitions) * twoTo32) % partitions + (lo % partitions)) % partitions;
}

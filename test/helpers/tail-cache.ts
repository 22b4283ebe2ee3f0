/**
 * Writes as the log writer hands them to its tail cache (storage/tail-cache.ts), and what a cache still
 * serves: shared by the tail cache tests.
 */
import { encodedSize, encodeRecords } from 'tributary-broker/storage/record-codec.js';
import type { TailCache } from 'tributary-broker/storage/tail-cache.js';

/**
 * One write of records at `base` with values of `sizes[i]` bytes (each filled with its offset's low byte),
 * encoded into memory from `alloc`: unpooled by default, as the writer's buffers are (a slice of Node's
 * pool would pin, and be charged, its slab); a write arena's `take` to share its blocks.
 */
export function encodedWrite(
  base: number,
  sizes: number[],
  alloc: (bytes: number) => Buffer = Buffer.allocUnsafeSlow,
): { buf: Buffer; starts: number[]; bytes: number } {
  const records = sizes.map((size, i) => ({ offset: base + i, timestamp: 1, key: null, value: Buffer.alloc(size, (base + i) & 0xff) }));
  const encoded = encodeRecords(records);
  const buf = alloc(encoded.length);
  encoded.copy(buf);
  const starts = [0];
  for (const r of records) starts.push(starts[starts.length - 1]! + encodedSize(r));
  return { buf, starts, bytes: buf.length };
}

/** The first offset below `end` the cache serves (it serves a suffix of what it was given), or `end`. */
export function firstCached(cache: TailCache, end: number): number {
  let lo = 0;
  while (lo < end && cache.read(lo, end, 1, 1 << 30) === null) lo++;
  return lo;
}

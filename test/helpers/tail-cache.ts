/**
 * Writes as the log writer hands them to its tail cache (storage/tail-cache.ts), and what a cache still
 * serves: shared by the tail cache tests.
 */
import { encodeBatch, scanBatch } from 'tributary-protocol/batch.js';
import { BLOCK_HEADER_BYTES, blockSize, recordEnd, writeBlockFromWire } from 'tributary-broker/storage/append-block.js';
import type { FramePool } from 'tributary-broker/storage/frame-pool.js';
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

/** A plain append block of `sizes` 1-byte-filled values written into frame memory from `pool`, as a block stamped in place lies in its frame. */
export function pooledBlock(pool: FramePool, base: number, sizes: number[], fill: number) {
  const records = sizes.map((size) => ({ key: null, value: Buffer.alloc(size, fill), timestamp: 1, headers: [], offset: 0, attributes: 0, producerId: '', epoch: 0, sequence: 0 }));
  const batch = scanBatch(encodeBatch({ topic: 't', partition: 0, acks: '1', idempotent: false, firstSequence: 0, lastSequence: 0, records }, { extensions: true }), { extensions: true, request: true });
  const buf = pool.take(blockSize(batch));
  const end = writeBlockFromWire(batch, buf, 0, { baseOffset: base, now: 1_700_000_000_000, flags: 0, firstSequence: -1 });
  const starts: number[] = [];
  for (let p = BLOCK_HEADER_BYTES, j = 0; j < sizes.length; j++, p = recordEnd(buf, p)) starts.push(p);
  starts.push(end);
  return { buf, starts };
}

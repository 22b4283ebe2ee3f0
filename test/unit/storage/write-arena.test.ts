/**
 * The write arena (storage/write-arena.ts) and the tail cache's runs of writes that share one of its blocks:
 * small writes are adjacent views of one unpooled block, blocks grow for a partition that fills them quickly
 * and shrink for one that does not, and the cache keeps such writes as one chunk (one set of objects, the
 * block charged once) while serving exactly the records it was given through appends, truncations and
 * evictions.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { CHUNK_COST, TailCache } from 'tributary-broker/storage/tail-cache.js';
import { MAX_BLOCK_BYTES, MAX_SHARED_BYTES, MIN_BLOCK_BYTES, WriteArena } from 'tributary-broker/storage/write-arena.js';
import { FakeClock } from '../../helpers/fake-clock.js';
import { encodedWrite, firstCached } from '../../helpers/tail-cache.js';

/** `n` records at `base` with values of `sizes[i]` bytes, encoded into arena memory as the log writer does. */
function writeThrough(arena: WriteArena, base: number, sizes: number[]): { buf: Buffer; starts: number[] } {
  return encodedWrite(base, sizes, (bytes) => arena.take(bytes));
}

describe('WriteArena', () => {
  it('carves consecutive small writes out of one unpooled block, and gives a large write a buffer of its own', () => {
    const arena = new WriteArena(new FakeClock());
    const a = arena.take(100);
    const b = arena.take(200);
    expect(a.buffer).toBe(b.buffer);
    expect(a.buffer.byteLength).toBe(MIN_BLOCK_BYTES);
    expect(b.byteOffset).toBe(a.byteOffset + 100);
    const big = arena.take(MAX_SHARED_BYTES + 1);
    expect(big.buffer).not.toBe(a.buffer);
    expect(big.buffer.byteLength).toBe(MAX_SHARED_BYTES + 1);
    // The next small write still continues the block.
    expect(arena.take(10).byteOffset).toBe(b.byteOffset + 200);
  });

  it('starts a new block when the rest of this one is too small; never hands out the same bytes twice', () => {
    const arena = new WriteArena(new FakeClock());
    const first = arena.take(MIN_BLOCK_BYTES - 10);
    const next = arena.take(20);
    expect(next.buffer).not.toBe(first.buffer);
    expect(next.byteOffset).toBe(0);
    // A write larger than the block size (but shareable) gets a block as large as itself.
    const large = arena.take(MAX_SHARED_BYTES);
    expect(large.buffer.byteLength).toBeGreaterThanOrEqual(MAX_SHARED_BYTES);
  });

  it('grows the blocks of a partition that fills them within a second, up to the maximum, and shrinks them after slow ones', async () => {
    const c = new FakeClock();
    const arena = new WriteArena(c);
    // Writes of 1,000 bytes until one lands in a new block: the block before it is full.
    const fillBlock = () => {
      const block = arena.take(1000).buffer;
      while (arena.take(1000).buffer === block) {}
    };
    const sizes: number[] = [];
    for (let i = 0; i < 6; i++) {
      fillBlock();
      sizes.push(arena.nextBlockBytes);
    }
    expect(sizes).toEqual([...sizes].sort((x, y) => x - y));
    expect(sizes[0]).toBeGreaterThan(MIN_BLOCK_BYTES);
    expect(sizes[sizes.length - 1]).toBe(MAX_BLOCK_BYTES);
    // Blocks that took more than 10 s to fill: each halves the next, down to the minimum.
    for (let i = 0; i < 6; i++) {
      const before = arena.nextBlockBytes;
      await c.advance(11_000);
      fillBlock();
      expect(arena.nextBlockBytes).toBe(Math.max(MIN_BLOCK_BYTES, before / 2));
    }
    expect(arena.nextBlockBytes).toBe(MIN_BLOCK_BYTES);
  });
});

describe('TailCache over arena writes', () => {
  it('keeps writes that follow each other in a block as one chunk: the block and one set of objects are charged once', () => {
    const arena = new WriteArena(new FakeClock());
    const cache = new TailCache(1 << 20);
    let offset = 0;
    let starts = 0;
    let block: ArrayBufferLike | undefined;
    for (let i = 0; i < 20; i++) {
      const w = writeThrough(arena, offset, [100]);
      block ??= w.buf.buffer;
      expect(w.buf.buffer).toBe(block); // all in the first block
      cache.append(w.buf, offset, w.starts);
      offset++;
      starts = offset + 1;
    }
    expect(cache.cost).toBe(MIN_BLOCK_BYTES + CHUNK_COST + 8 * starts);
    const all = cache.read(0, offset, 1000, 1 << 30)!;
    expect(all.map((r) => r.offset)).toEqual(Array.from({ length: 20 }, (_, i) => i));
    expect(all.every((r) => r.value.length === 100 && r.value[0] === (r.offset & 0xff))).toBe(true);
  });

  it('property: through appends, truncations and drops, it serves exactly a suffix of what it was given', async () => {
    type Op = { kind: 'append'; sizes: number[] } | { kind: 'truncate'; back: number } | { kind: 'drop'; ahead: number };
    const op: fc.Arbitrary<Op> = fc.oneof(
      { weight: 6, arbitrary: fc.record({ kind: fc.constant('append' as const), sizes: fc.array(fc.integer({ min: 0, max: 3000 }), { minLength: 1, maxLength: 4 }) }) },
      { weight: 1, arbitrary: fc.record({ kind: fc.constant('truncate' as const), back: fc.integer({ min: 0, max: 6 }) }) },
      { weight: 1, arbitrary: fc.record({ kind: fc.constant('drop' as const), ahead: fc.integer({ min: 0, max: 6 }) }) },
    );
    await fc.assert(
      fc.asyncProperty(fc.array(op, { maxLength: 60 }), fc.integer({ min: 2_000, max: 40_000 }), async (ops, maxBytes) => {
        const c = new FakeClock();
        const arena = new WriteArena(c);
        const cache = new TailCache(maxBytes);
        // The model: value length of every offset appended since the last truncation below it.
        const sizes: number[] = [];
        for (const o of ops) {
          await c.advance(100);
          if (o.kind === 'append') {
            const w = writeThrough(arena, sizes.length, o.sizes);
            cache.append(w.buf, sizes.length, w.starts);
            sizes.push(...o.sizes);
          } else if (o.kind === 'truncate') {
            const to = Math.max(0, sizes.length - o.back);
            cache.truncateFrom(to);
            sizes.length = to;
          } else {
            const first = firstCached(cache, sizes.length);
            cache.dropBefore(Math.min(sizes.length, first + o.ahead));
          }
          const first = firstCached(cache, sizes.length);
          for (let off = first; off < sizes.length; off++) {
            const r = cache.read(off, sizes.length, 1, 1 << 30);
            expect(r).not.toBeNull();
            expect(r![0]!.offset).toBe(off);
            expect(r![0]!.value.length).toBe(sizes[off]);
            if (sizes[off]! > 0) expect(r![0]!.value[sizes[off]! - 1]).toBe(off & 0xff);
          }
          expect(cache.read(sizes.length, sizes.length + 1, 1, 1 << 30)).toBeNull();
        }
      }),
      { numRuns: 200 },
    );
  });
});

/**
 * storage/frame-pool.ts, and the tail cache's holds on its memory (docs/architecture.md, "Broker", frame
 * memory): a buffer is lent again only once every holder let go (the frame until its append is cached,
 * the cache while a chunk of it is cached, each reply view until written), and reads that hand out views
 * callers may keep never see it.
 */
import { describe, expect, it } from 'vitest';
import { FramePool, MAX_POOLED_FRAME, MIN_POOLED_FRAME } from 'tributary-broker/storage/frame-pool.js';
import { replyWriter } from 'tributary-broker/storage/reply-writer.js';
import { TailCache } from 'tributary-broker/storage/tail-cache.js';
import { pooledBlock } from '../../helpers/tail-cache.js';

describe('FramePool', () => {
  it('lends only frame sizes a block can be cached in place from, and lends a buffer again once its last holder lets go', () => {
    const pool = new FramePool();
    expect(pool.lent(pool.take(MIN_POOLED_FRAME - 1))).toBe(false);
    expect(pool.lent(pool.take(MAX_POOLED_FRAME + 1))).toBe(false);
    const a = pool.take(40_000);
    expect(a.length).toBe(40_000);
    expect(a.buffer.byteLength - a.length).toBeLessThan(1024);
    pool.retain(a);
    pool.release(a);
    expect(pool.lent(a)).toBe(true);
    // Another frame of the same size while `a` is held: new memory.
    const b = pool.take(40_000);
    expect(b.buffer).not.toBe(a.buffer);
    pool.release(a);
    expect(pool.lent(a)).toBe(false);
    expect(pool.pooledBytes).toBe(a.buffer.byteLength);
    // A release of memory already free is ignored (it would otherwise free it twice).
    pool.release(a);
    expect(pool.pooledBytes).toBe(a.buffer.byteLength);
    expect(() => pool.retain(a)).toThrow(/not lent/);
    const c = pool.take(39_950);
    expect(c.buffer).toBe(a.buffer);
    expect(pool.reused).toBe(1);
    expect(pool.pooledBytes).toBe(0);
  });

  it('keeps at most maxFreeBytes for later frames, starting again when full, and serves a frame a grain smaller', () => {
    const pool = new FramePool(100_000);
    const frames = [pool.take(40_000), pool.take(40_000), pool.take(40_000)];
    pool.release(frames[0]!);
    pool.release(frames[1]!);
    expect(pool.pooledBytes).toBe(2 * 40_960);
    // A third would pass the bound: what was kept goes (it may be sizes nobody asks for any more).
    pool.release(frames[2]!);
    expect(pool.pooledBytes).toBe(40_960);
    expect(pool.take(40_000).buffer).toBe(frames[2]!.buffer);
    const larger = pool.take(41_000);
    expect(larger.buffer.byteLength).toBe(41_984);
    pool.release(larger);
    const again = pool.take(40_000);
    expect(again.buffer).toBe(larger.buffer);
    // Two grains smaller is not served from it: the frame's buffer would be too large to cache in place.
    pool.release(again);
    expect(pool.take(39_000).buffer).not.toBe(larger.buffer);
    expect(pool.pooledBytes).toBe(41_984);
    // Memory above the bound is never kept.
    const small = new FramePool(20_000);
    const f = small.take(30_000);
    small.release(f);
    expect(small.pooledBytes).toBe(0);
  });

  it('pins views for replies: each lets go once, only what pin made', () => {
    const pool = new FramePool();
    const f = pool.take(20_000);
    const v1 = pool.pin(f, 0, 100);
    const v2 = pool.pin(f, 100, 200);
    const plain = f.subarray(200, 300);
    expect(pool.pins([plain])).toBe(false);
    expect(pool.pins([plain, v2])).toBe(true);
    pool.release(f);
    pool.unpin([v1, plain, v1]);
    expect(pool.lent(f)).toBe(true);
    pool.unpin([v2]);
    expect(pool.lent(f)).toBe(false);
    expect(pool.pins([v1, v2])).toBe(false);
  });
});


const W = { topic: 't', partition: 0, extensions: true, skipControl: false, views: true };
const END = { nextOffset: 0, highWatermark: 0, logStartOffset: 0 };

describe('the tail cache holding frame memory', () => {
  it("takes over the frame's hold, lets go when the chunk is evicted, and a reply's view keeps it until unpinned", () => {
    const pool = new FramePool();
    const cache = new TailCache(20_000, undefined, pool);
    const a = pooledBlock(pool, 0, [6000, 6000, 6000], 0x41);
    cache.append(a.buf, 0, a.starts, a.buf[9], false, true);
    expect(pool.lent(a.buf)).toBe(true);
    const writer = replyWriter(undefined, 't', 0, true)!;
    const r = cache.readWire(0, 3, 10, 1 << 20, W, writer)!;
    writer.finish(r.buf, r.at, r.count, END);
    const view = r.parts!.find((p) => p.buffer === a.buf.buffer)!;
    expect(pool.pins([view])).toBe(true);
    const bytes = Buffer.from(view);
    // The next block pushes the first out of the cache: the reply's view still holds its memory.
    const b = pooledBlock(pool, 3, [6000, 6000, 6000], 0x42);
    cache.append(b.buf, 3, b.starts, b.buf[9], false, true);
    expect(cache.readWire(0, 6, 10, 1 << 20, W, writer)).toBeNull();
    expect(pool.lent(a.buf)).toBe(true);
    // A new frame of the same size does not get the memory the queued reply views, nor overwrite its bytes.
    expect(pooledBlock(pool, 6, [6000, 6000, 6000], 0).buf.buffer).not.toBe(a.buf.buffer);
    expect(view.equals(bytes)).toBe(true);
    pool.unpin(r.parts!);
    expect(pool.lent(a.buf)).toBe(false);
    expect(pooledBlock(pool, 6, [6000, 6000, 6000], 0).buf.buffer).toBe(a.buf.buffer);
    expect(view.equals(bytes)).toBe(false);
  });

  it('lets go on truncation and clear, at once when the cache is off, and never without the hand-over (a journaled append)', () => {
    const pool = new FramePool();
    const cache = new TailCache(1 << 20, undefined, pool);
    const a = pooledBlock(pool, 0, [6000, 6000, 6000], 1);
    const b = pooledBlock(pool, 3, [6000, 6000, 6000], 2);
    cache.append(a.buf, 0, a.starts, a.buf[9], false, true);
    cache.append(b.buf, 3, b.starts, b.buf[9], false, true);
    const writer = replyWriter(undefined, 't', 0, true)!;
    const r = cache.readWire(3, 6, 10, 1 << 20, W, writer)!;
    cache.truncateFrom(4);
    expect(pool.lent(b.buf)).toBe(true);
    cache.truncateFrom(3);
    // The shortened chunk let go once, when it left: the reply's view still holds the memory.
    expect(pool.lent(b.buf)).toBe(true);
    pool.unpin(r.parts!);
    expect(pool.lent(b.buf)).toBe(false);
    expect(pool.lent(a.buf)).toBe(true);
    cache.clear();
    expect(pool.lent(a.buf)).toBe(false);

    // dropBefore (retention) lets go of the chunks it drops, and of none it keeps part of.
    const c1 = pooledBlock(pool, 0, [6000, 6000, 6000], 5);
    const c2 = pooledBlock(pool, 3, [6000, 6000, 6000], 6);
    cache.append(c1.buf, 0, c1.starts, c1.buf[9], false, true);
    cache.append(c2.buf, 3, c2.starts, c2.buf[9], false, true);
    cache.dropBefore(4);
    expect(pool.lent(c1.buf)).toBe(false);
    expect(pool.lent(c2.buf)).toBe(true);
    cache.clear();

    const off = new TailCache(0, undefined, pool);
    const c = pooledBlock(pool, 0, [6000, 6000, 6000], 3);
    off.append(c.buf, 0, c.starts, c.buf[9], false, true);
    expect(pool.lent(c.buf)).toBe(false);

    const d = pooledBlock(pool, 0, [6000, 6000, 6000], 4);
    cache.append(d.buf, 0, d.starts, d.buf[9], false, false);
    cache.clear();
    expect(pool.lent(d.buf)).toBe(true);
  });

  it('read() leaves frame memory to the files: its records are views a caller may keep', () => {
    const pool = new FramePool();
    const cache = new TailCache(1 << 20, undefined, pool);
    const a = pooledBlock(pool, 0, [6000, 6000, 6000], 1);
    cache.append(a.buf, 0, a.starts, a.buf[9], false, true);
    expect(cache.read(1, 3, 10, 1 << 20)).toBeNull();
    expect(cache.readWire(1, 3, 10, 1 << 20, W, replyWriter(undefined, 't', 0, true)!)?.count).toBe(2);
    // The same block in memory of its own is read from the cache.
    const own = new TailCache(1 << 20);
    own.append(a.buf, 0, a.starts, a.buf[9]);
    expect(own.read(0, 3, 10, 1 << 20)?.map((r) => r.value.length)).toEqual([6000, 6000, 6000]);
  });
});

/**
 * storage/tail-readers.ts and what the tail cache keeps for its readers (docs/architecture.md, "Storage",
 * tail cache): twice the largest lag read at within the last one to two windows, at least MIN_KEPT_BYTES,
 * everything from its floor (the LSO) on, its whole bound while nobody reads or a reader is further
 * behind; evicted frames go back to the pool.
 */
import { describe, expect, it } from 'vitest';
import { FramePool } from 'tributary-broker/storage/frame-pool.js';
import { MIN_KEPT_BYTES, TailCache } from 'tributary-broker/storage/tail-cache.js';
import { READ_WINDOW_MS, TailReaders } from 'tributary-broker/storage/tail-readers.js';
import { FakeClock } from '../../helpers/fake-clock.js';
import { encodedWrite, firstCached, pooledBlock } from '../../helpers/tail-cache.js';

/** 64 KiB values, one record per write: MIN_KEPT_BYTES is PER_MIN writes. */
const VALUE = 64 * 1024;
const WRITE = encodedWrite(0, [VALUE]).bytes;
const PER_MIN = Math.ceil(MIN_KEPT_BYTES / WRITE);

function fill(cache: TailCache, from: number, to: number): void {
  for (let o = from; o < to; o++) {
    const w = encodedWrite(o, [VALUE]);
    cache.append(w.buf, o, w.starts);
  }
}

describe('TailReaders', () => {
  it('reports the largest lag of the current and the previous window, and forgets after two', async () => {
    const clock = new FakeClock();
    const readers = new TailReaders(clock);
    expect(readers.lag).toBe(-1);
    readers.note(10);
    await clock.advance(500);
    readers.note(5);
    expect(readers.lag).toBe(10);
    await clock.advance(READ_WINDOW_MS);
    // A new window: the last one's 10 still counts, a smaller lag now does not hide it.
    readers.note(3);
    expect(readers.lag).toBe(10);
    await clock.advance(READ_WINDOW_MS);
    expect(readers.lag).toBe(3);
    await clock.advance(2 * READ_WINDOW_MS);
    expect(readers.lag).toBe(-1);
  });
});

describe('the tail cache sized by its readers', () => {
  const bound = 64 * WRITE;

  it('keeps its whole bound while nobody reads, and when a reader is further behind than that', () => {
    const clock = new FakeClock();
    const cache = new TailCache(bound, undefined, undefined, new TailReaders(clock));
    fill(cache, 0, 100);
    expect(firstCached(cache, 100)).toBe(100 - 64);
    cache.noteRead(0, 100);
    fill(cache, 100, 120);
    expect(firstCached(cache, 120)).toBe(120 - 64);
  });

  it('keeps twice the lag its readers read at, at least MIN_KEPT_BYTES, and its bound again once they stop', async () => {
    const clock = new FakeClock();
    const cache = new TailCache(bound, undefined, undefined, new TailReaders(clock));
    fill(cache, 0, 50);
    // A reader 20 records behind: 40 are kept (each record's write is a chunk of its own).
    cache.noteRead(30, 50);
    fill(cache, 50, 51);
    expect(firstCached(cache, 51)).toBe(51 - 40);
    // Two windows later a reader at the end: MIN_KEPT_BYTES still.
    await clock.advance(2 * READ_WINDOW_MS);
    cache.noteRead(51, 51);
    fill(cache, 51, 52);
    expect(firstCached(cache, 52)).toBe(52 - PER_MIN);
    // Readers gone for two windows: the cache fills up to its bound again.
    await clock.advance(2 * READ_WINDOW_MS);
    fill(cache, 52, 200);
    expect(firstCached(cache, 200)).toBe(200 - 64);
  });

  it('keeps the range of a reader polling every 5 s while another reads at the end', async () => {
    const clock = new FakeClock();
    const cache = new TailCache(bound, undefined, undefined, new TailReaders(clock));
    let slow = 0;
    let misses = 0;
    // A write every 100 ms for a minute; the fast reader reads each at once, the slow one every 5 s.
    for (let o = 0; o < 600; o++) {
      await clock.advance(100);
      fill(cache, o, o + 1);
      cache.noteRead(o + 1, o + 1);
      if ((o + 1) % 50 !== 0) continue;
      // Its first poll finds the cache at the fast reader's size: its lag was not known yet.
      if (slow > 0 && cache.read(slow, o + 1, 1, 1 << 30) === null) misses++;
      cache.noteRead(slow, o + 1);
      slow = o + 1;
    }
    expect(misses).toBe(0);
  });

  it("keeps everything from its floor on: an open transaction's records, where read_committed readers wait", () => {
    const clock = new FakeClock();
    let floor = 10;
    const cache = new TailCache(bound, undefined, undefined, new TailReaders(clock), () => floor);
    fill(cache, 0, 50);
    // A reader at the end of the log: the floor holds, not its lag.
    cache.noteRead(50, 50);
    fill(cache, 50, 51);
    expect(firstCached(cache, 51)).toBe(10);
    // The transaction committed (the floor moved): down to MIN_KEPT_BYTES.
    floor = 51;
    fill(cache, 51, 52);
    expect(firstCached(cache, 52)).toBe(52 - PER_MIN);
  });

  it('gives frames it no longer keeps back to the pool at once, where the next frame takes them', async () => {
    const clock = new FakeClock();
    const pool = new FramePool();
    const cache = new TailCache(1 << 30, undefined, pool, new TailReaders(clock));
    const sizes = [16_000, 16_000, 16_000, 16_000];
    const blocks = [];
    for (let i = 0; i < 40; i++) {
      const b = pooledBlock(pool, i * 4, sizes, i);
      cache.append(b.buf, i * 4, b.starts, b.buf[9], false, true);
      blocks.push(b);
      // A reader a block behind.
      cache.noteRead(i * 4, i * 4 + 4);
    }
    // 40 blocks of about 64 KB in the memory of PER_MIN + 1 or 2: each block the cache no longer keeps
    // (past MIN_KEPT_BYTES and twice the lag) went back to the pool, and a later block was written into it.
    const buffers = new Set(blocks.map((b) => b.buf.buffer));
    expect(buffers.size).toBeGreaterThanOrEqual(PER_MIN);
    expect(buffers.size).toBeLessThanOrEqual(PER_MIN + 2);
    expect(pool.reused).toBe(40 - buffers.size);
    expect(pool.lent(blocks[39]!.buf)).toBe(true);
    // Without readers the same blocks each take new memory.
    const alone = new FramePool();
    const quiet = new TailCache(1 << 30, undefined, alone, new TailReaders(clock));
    for (let i = 0; i < 40; i++) {
      const b = pooledBlock(alone, i * 4, sizes, i);
      quiet.append(b.buf, i * 4, b.starts, b.buf[9], false, true);
    }
    expect(alone.reused).toBe(0);
  });
});

/**
 * The broker-wide tail cache budget (TailCacheBudget): every partition's tail cache is charged the buffers
 * its cached writes keep alive plus CHUNK_COST and their offsets per write; the total never stays above the
 * bound after an append; the least recently appended caches lose their oldest writes first; and real
 * partition logs sharing a small budget still read every record back (from their segments once evicted).
 */
import v8 from 'node:v8';
import vm from 'node:vm';
import fc from 'fast-check';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { PartitionLog } from 'tributary-broker/storage/partition-log.js';
import { CHUNK_COST, TailCache } from 'tributary-broker/storage/tail-cache.js';
import { TailCacheBudget } from 'tributary-broker/storage/tail-cache-budget.js';
import { encodedWrite, firstCached } from '../../helpers/tail-cache.js';
import { removeDir, tempDir } from '../../helpers/util.js';

/** One write of `n` records of `size` value bytes at `base`, as the log writer hands it to its cache. */
function write(base: number, n: number, size: number): { buf: Buffer; starts: number[]; bytes: number } {
  return encodedWrite(base, new Array<number>(n).fill(size));
}

/** A cache under test with the offsets it was given, to check what it still serves. */
class Tracked {
  readonly cache: TailCache;
  end = 0;
  constructor(maxBytes: number, budget: TailCacheBudget) {
    this.cache = new TailCache(maxBytes, budget);
  }
  append(n: number, size: number): number {
    const w = write(this.end, n, size);
    this.cache.append(w.buf, this.end, w.starts);
    this.end += n;
    return w.bytes;
  }
  /** The first offset the cache serves (it serves a suffix of what was appended), or `end` when none. */
  firstCached(): number {
    return firstCached(this.cache, this.end);
  }
}

describe('TailCacheBudget', () => {
  it('charges record bytes plus a cost per write, and evicts the least recently appended cache first', () => {
    // A one-record write: its buffer, the fixed cost and its two `starts` entries.
    const one = write(0, 1, 100).bytes + CHUNK_COST + 16;
    const budget = new TailCacheBudget(4 * one);
    const a = new Tracked(1 << 20, budget);
    const b = new Tracked(1 << 20, budget);
    a.append(1, 100);
    a.append(1, 100);
    b.append(1, 100);
    a.append(1, 100);
    expect(budget.bytes).toBe(4 * one);
    expect(a.cache.cost).toBe(3 * one);
    // Past the bound: a was appended to last, so b is the least recent, and it loses its only write.
    a.append(1, 100);
    expect(b.cache.cost).toBe(0);
    expect(b.firstCached()).toBe(b.end);
    expect(a.firstCached()).toBe(0);
    expect(budget.bytes).toBe(4 * one);
    expect(budget.size).toBe(1);
    // Now b is appended to: a is the least recent and gives its oldest write.
    b.append(1, 100);
    expect(a.firstCached()).toBe(1);
    expect(b.firstCached()).toBe(1);
    expect(budget.bytes).toBe(4 * one);
  });

  it('a write larger than the budget is not kept, and nothing else is evicted for it beyond the bound', () => {
    const budget = new TailCacheBudget(1000);
    const a = new Tracked(1 << 20, budget);
    a.append(2, 100);
    const small = a.cache.cost;
    const b = new Tracked(1 << 20, budget);
    b.append(1, 2000);
    expect(b.cache.cost).toBe(0);
    expect(a.cache.cost).toBe(0); // a was the least recent: evicted first, before b's own write went
    expect(budget.bytes).toBe(0);
    expect(small).toBeGreaterThan(0);
  });

  it('a write partly evicted by its own cap is still charged whole: its buffer stays alive', () => {
    const budget = new TailCacheBudget(1 << 20);
    const w = write(0, 4, 100);
    const cache = new TailCache(w.bytes - 10, budget);
    cache.append(w.buf, 0, w.starts);
    // The cache's own cap dropped the first record, but the other three keep the whole buffer.
    expect(cache.read(0, 4, 10, 1 << 20)).toBeNull();
    expect(cache.read(1, 4, 10, 1 << 20)?.length).toBe(3);
    expect(cache.cost).toBe(w.bytes + CHUNK_COST + 8 * 5);
    expect(budget.bytes).toBe(cache.cost);
  });

  it('a write the budget or the cap evicts is no longer held: its buffer can be collected', async () => {
    v8.setFlagsFromString('--expose-gc');
    const gc = vm.runInNewContext('gc') as () => void;
    const one = write(0, 1, 1000).bytes + CHUNK_COST + 16;
    const budget = new TailCacheBudget(10 * one);
    const byBudget = new TailCache(1 << 30, budget);
    const byCap = new TailCache(5 * 1000, budget);
    // Each cache's first writes, known only through weak references from here on.
    const firsts = (cache: TailCache, base: number): WeakRef<Buffer>[] =>
      Array.from({ length: 3 }, (_, i) => {
        const w = write(base + i, 1, 1000);
        cache.append(w.buf, base + i, w.starts);
        return new WeakRef(w.buf);
      });
    const evictedByBudget = firsts(byBudget, 0);
    const evictedByCap = firsts(byCap, 0);
    for (let i = 3; i < 20; i++) {
      for (const cache of [byBudget, byCap]) {
        const w = write(i, 1, 1000);
        cache.append(w.buf, i, w.starts);
      }
    }
    expect(budget.bytes).toBeLessThanOrEqual(10 * one);
    expect(byBudget.read(0, 20, 1, 1 << 20)).toBeNull();
    expect(byCap.read(0, 20, 1, 1 << 20)).toBeNull();
    // Collected once nothing but the evicted slots pointed at them (a slot kept them alive until up to
    // 1,024 writes later, far past the budget).
    await new Promise((r) => setImmediate(r));
    gc();
    expect([...evictedByBudget, ...evictedByCap].map((r) => r.deref() === undefined)).toEqual(Array(6).fill(true));
    expect(byCap.read(19, 20, 1, 1 << 20)?.[0]?.offset).toBe(19);
  });

  it('clear, truncateFrom and dropBefore give their bytes back; a cleared cache leaves the budget', () => {
    const budget = new TailCacheBudget(1 << 20);
    const a = new Tracked(1 << 20, budget);
    const b = new Tracked(1 << 20, budget);
    for (let i = 0; i < 5; i++) {
      a.append(3, 50);
      b.append(2, 70);
    }
    expect(budget.bytes).toBe(a.cache.cost + b.cache.cost);
    a.cache.truncateFrom(7);
    a.end = 7;
    expect(budget.bytes).toBe(a.cache.cost + b.cache.cost);
    b.cache.dropBefore(3);
    expect(b.firstCached()).toBe(3);
    expect(budget.bytes).toBe(a.cache.cost + b.cache.cost);
    a.cache.clear();
    expect(budget.bytes).toBe(b.cache.cost);
    expect(budget.size).toBe(1);
    b.cache.truncateFrom(0);
    expect(budget.bytes).toBe(0);
    expect(budget.size).toBe(0);
  });

  it('property: the charge is the sum of the caches, within the bound after every append, and each cache serves a suffix of its records', () => {
    const op = fc.oneof(
      fc.record({ kind: fc.constant('append' as const), cache: fc.nat(3), n: fc.integer({ min: 1, max: 4 }), size: fc.integer({ min: 0, max: 300 }) }),
      fc.record({ kind: fc.constant('truncate' as const), cache: fc.nat(3), back: fc.nat(5) }),
      fc.record({ kind: fc.constant('drop' as const), cache: fc.nat(3), ahead: fc.nat(5) }),
      fc.record({ kind: fc.constant('clear' as const), cache: fc.nat(3) }),
    );
    fc.assert(
      fc.property(fc.integer({ min: 0, max: 3000 }), fc.integer({ min: 0, max: 2000 }), fc.array(op, { maxLength: 60 }), (max, perCache, ops) => {
        const budget = new TailCacheBudget(max);
        const cs = Array.from({ length: 4 }, () => new Tracked(perCache, budget));
        for (const o of ops) {
          const t = cs[o.cache]!;
          if (o.kind === 'append') t.append(o.n, o.size);
          else if (o.kind === 'truncate') {
            t.end = Math.max(0, t.end - o.back);
            t.cache.truncateFrom(t.end);
          } else if (o.kind === 'drop') t.cache.dropBefore(t.firstCached() + o.ahead);
          else t.cache.clear();
          const sum = cs.reduce((s, c) => s + c.cache.cost, 0);
          expect(budget.bytes).toBe(sum);
          expect(budget.size).toBe(cs.filter((c) => c.cache.cost > 0).length);
          if (o.kind === 'append') expect(budget.bytes).toBeLessThanOrEqual(max);
          for (const c of cs) {
            // Whatever is cached is contiguous up to the end and holds the right records.
            const first = c.firstCached();
            if (first < c.end) {
              const got = c.cache.read(first, c.end, 1 << 20, 1 << 30)!;
              expect(got.map((r) => r.offset)).toEqual(Array.from({ length: c.end - first }, (_, i) => first + i));
              for (const r of got) expect(r.value.every((x) => x === (r.offset & 0xff))).toBe(true);
            }
          }
        }
      }),
      { numRuns: 200 },
    );
  });
});

describe('partition logs sharing a tail cache budget', () => {
  let dir: string;
  beforeEach(async () => {
    dir = await tempDir('trib-tcb-');
  });
  afterEach(async () => {
    await removeDir(dir);
  });

  it('read every record back, hold at most the bound, and give their charge back on close', async () => {
    const budget = new TailCacheBudget(16 * 1024);
    const logs = await Promise.all(Array.from({ length: 8 }, (_, i) => PartitionLog.open(`${dir}/p${i}`, { flush: 'os', tailCacheBudget: budget })));
    try {
      for (let round = 0; round < 20; round++) {
        for (const [i, log] of logs.entries()) {
          await log.append(Array.from({ length: 3 }, (_, k) => ({ key: null, value: Buffer.from(`p${i}-r${round}-${k}-${'x'.repeat(200)}`) })));
          expect(budget.bytes).toBeLessThanOrEqual(16 * 1024);
        }
      }
      expect(budget.bytes).toBeGreaterThan(0);
      for (const [i, log] of logs.entries()) {
        log.setHighWatermark(60);
        const got = await log.read(0, { maxRecords: 100, maxBytes: 1 << 20 });
        expect(got.map((r) => r.value.toString().split('-').slice(0, 3).join('-'))).toEqual(
          Array.from({ length: 60 }, (_, j) => `p${i}-r${Math.floor(j / 3)}-${j % 3}`),
        );
      }
      // The last log appended to still serves its tail from memory; the first ones' oldest writes went.
      const before = budget.bytes;
      await logs[7]!.close();
      expect(budget.bytes).toBeLessThan(before);
    } finally {
      for (const log of logs) await log.close().catch(() => {});
    }
    expect(budget.bytes).toBe(0);
    expect(budget.size).toBe(0);
  });
});

/**
 * The broker-wide bound on open segment files (FdBudget): an LRU over segments that closes the least
 * recently used fds that may close (no I/O in progress; under a fsyncing log, no write since the last
 * fsync), and many real partition logs sharing one small budget read and write correctly through it.
 */
import { join } from 'node:path';
import fc from 'fast-check';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { MAX_CONCURRENT_ATOMIC_WRITES } from 'tributary-broker/storage/atomic-file.js';
import { FdBudget, type FdHolder } from 'tributary-broker/storage/fd-budget.js';
import { PartitionLog } from 'tributary-broker/storage/partition-log.js';
import { removeDir, tempDir } from '../../helpers/util.js';

/**
 * Segment files (.log) open right now, and the most at once, and the same of the other files (directories
 * for their fsync, indexes): counted at the file system, not by the budget.
 */
const logFiles = vi.hoisted(() => ({ open: 0, peak: 0 }));
const otherFiles = vi.hoisted(() => ({ open: 0, peak: 0 }));
vi.mock('node:fs/promises', async (importOriginal) => {
  const fs = await importOriginal<typeof import('node:fs/promises')>();
  return {
    ...fs,
    open: async (...args: Parameters<typeof fs.open>) => {
      const fh = await fs.open(...args);
      const count = String(args[0]).endsWith('.log') ? logFiles : otherFiles;
      count.open++;
      count.peak = Math.max(count.peak, count.open);
      const close = fh.close.bind(fh);
      let closed = false;
      fh.close = async () => {
        if (!closed) {
          closed = true;
          count.open--;
        }
        return close();
      };
      return fh;
    },
  };
});

class FakeHolder implements FdHolder {
  open = false;
  waiting = false;
  pinned = false;
  constructor(
    readonly id: number,
    private readonly budget: FdBudget,
  ) {}
  canRelease(): boolean {
    return !this.pinned;
  }
  /** Opens once it has a slot (the budget's acquire), and uses the file: the budget hears when that use ends. */
  take(owner?: object): Promise<void> {
    const wait = this.budget.acquire(this, owner);
    if (wait === undefined) {
      this.open = true;
      this.budget.settled(this);
      return Promise.resolve();
    }
    this.waiting = true;
    return wait.then(
      () => {
        this.waiting = false;
        this.open = true;
        this.budget.settled(this);
      },
      (err: unknown) => {
        this.waiting = false;
        throw err;
      },
    );
  }
  async release(): Promise<void> {
    await Promise.resolve();
    this.open = false;
    this.budget.closed(this);
  }
}

/** Lets every settled promise run its callbacks. */
const settle = () => new Promise<void>((resolve) => setImmediate(resolve));

describe('FdBudget', () => {
  it('past the bound an open waits, first come first served, while the least recent holders that may close give their slots back', async () => {
    const budget = new FdBudget(3);
    const h = [0, 1, 2, 3, 4, 5].map((i) => new FakeHolder(i, budget));
    for (const x of h.slice(0, 3)) await x.take();
    budget.used(h[0]!); // 0 is now the most recent: 1 is the least recent
    h[1]!.pinned = true; // in use: it must stay open
    const t3 = h[3]!.take();
    // Never more than the bound: 3 waits for 2 (the least recent that may close) to be closed.
    expect(h[3]!.open).toBe(false);
    expect(budget.open).toBe(3);
    await t3;
    expect(h.map((x) => x.open)).toEqual([true, true, false, true, false, false]);
    expect(budget.open).toBe(3);
    // None may close: 4 and 5 wait, in that order (each to use its file longer than the wait).
    for (const i of [0, 3, 4, 5]) h[i]!.pinned = true;
    const order: number[] = [];
    const t4 = h[4]!.take().then(() => order.push(4));
    const t5 = h[5]!.take().then(() => order.push(5));
    await settle();
    expect(budget.waiting).toBe(2);
    expect(order).toEqual([]);
    // 1's I/O ended: it is closed for the first waiting open.
    h[1]!.pinned = false;
    budget.settled(h[1]!);
    await t4;
    expect(h[1]!.open).toBe(false);
    expect(budget.waiting).toBe(1);
    // 4 closes its file itself: its slot goes to 5.
    await h[4]!.release();
    await t5;
    expect(order).toEqual([4, 5]);
    expect(budget.open).toBe(3);
    expect(budget.waiting).toBe(0);
  });

  it("ends a closing log's waits (and refuses new ones until admitted) and a closing holder's wait", async () => {
    const budget = new FdBudget(1);
    const [h0, h1, h2, h3] = [0, 1, 2, 3].map((i) => new FakeHolder(i, budget)) as [FakeHolder, FakeHolder, FakeHolder, FakeHolder];
    const logA = {};
    const logB = {};
    h0.pinned = true;
    await h0.take();
    const t1 = h1.take(logA);
    const t2 = h2.take(logB);
    const closedA = new Error('log A is closed');
    budget.refuseWaits(logA, closedA);
    await expect(t1).rejects.toBe(closedA);
    await expect(h3.take(logA)).rejects.toBe(closedA);
    budget.admitWaits(logA);
    const t3 = h3.take(logA);
    const closedH2 = new Error('segment 2 is closed');
    budget.cancel(h2, closedH2);
    await expect(t2).rejects.toBe(closedH2);
    expect(budget.waiting).toBe(1);
    h0.pinned = false;
    budget.settled(h0);
    await t3;
    expect([h0.open, h1.open, h2.open, h3.open]).toEqual([false, false, false, true]);
  });

  it('property: never more open than the bound, only holders that may close are closed, and every wait ends once the holders may close', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.integer({ min: 1, max: 5 }),
        fc.array(fc.tuple(fc.constantFrom('open', 'close', 'pin', 'unpin'), fc.integer({ min: 0, max: 9 })), { maxLength: 60 }),
        async (max, ops) => {
          const budget = new FdBudget(max);
          const hs = Array.from({ length: 10 }, (_, i) => new FakeHolder(i, budget));
          const takes: Promise<void>[] = [];
          const check = () => {
            expect(hs.filter((x) => x.open).length).toBeLessThanOrEqual(max);
            expect(budget.open).toBeLessThanOrEqual(max);
          };
          for (const [op, i] of ops) {
            const x = hs[i]!;
            const wasOpen = x.open;
            if (op === 'open' && !x.open && !x.waiting) takes.push(x.take());
            else if (op === 'close' && x.open) takes.push(x.release());
            else if (op === 'pin') x.pinned = true;
            else if (op === 'unpin') {
              x.pinned = false;
              budget.settled(x);
            }
            await settle();
            // A pinned holder is never closed by the budget.
            if (wasOpen && x.pinned && op !== 'close') expect(x.open).toBe(true);
            check();
          }
          for (const x of hs) {
            x.pinned = false;
            budget.settled(x);
          }
          await Promise.all(takes);
          check();
          expect(budget.waiting).toBe(0);
          expect(hs.some((x) => x.waiting)).toBe(false);
        },
      ),
      { numRuns: 200 },
    );
  });

  it('refuses a bound below 1', () => {
    expect(() => new FdBudget(0)).toThrow(RangeError);
  });
});

describe('partition logs sharing a budget', () => {
  let dir: string;
  const logs: PartitionLog[] = [];
  beforeEach(async () => {
    dir = await tempDir('trib-fdbudget-');
  });
  afterEach(async () => {
    for (const l of logs.splice(0)) await l.close().catch(() => {});
    await removeDir(dir);
  });

  for (const flush of ['always', 'os'] as const) {
    it(`40 logs under a budget of 8 (flush=${flush}): appends and reads are right, and no more than 8 segment fds stay open`, async () => {
      const budget = new FdBudget(8);
      const open = (i: number) => PartitionLog.open(join(dir, String(i)), { flush, fdBudget: budget });
      for (let i = 0; i < 40; i++) logs.push(await open(i));
      for (let round = 0; round < 3; round++) {
        for (let i = 0; i < 40; i++) await logs[i]!.append([{ key: null, value: Buffer.from(`p${i}-r${round}`) }]);
      }
      // Appends under flush=always resolve after their fsync: nothing is left unsynced to keep fds open.
      if (flush === 'always') expect(budget.open).toBeLessThanOrEqual(8);
      for (let i = 0; i < 40; i++) {
        const rs = await logs[i]!.read(0, { maxRecords: 10, maxBytes: 1 << 20 });
        expect(rs.map((r) => r.value.toString())).toEqual([0, 1, 2].map((r) => `p${i}-r${r}`));
      }
      if (flush === 'os') expect(budget.open).toBeLessThanOrEqual(8);
      // Closed and reopened: every record survived the fds coming and going.
      for (const l of logs.splice(0)) await l.close();
      for (let i = 0; i < 40; i++) logs.push(await open(i));
      for (let i = 0; i < 40; i++) expect((await logs[i]!.read(0, { maxRecords: 10, maxBytes: 1 << 20 })).length).toBe(3);
      expect(budget.open).toBeLessThanOrEqual(8);
    });
  }

  it('a burst of appends, rolls and reads to 40 logs at once under a budget of 8 never has more than 8 segment files open', async () => {
    const budget = new FdBudget(8);
    for (let i = 0; i < 40; i++) logs.push(await PartitionLog.open(join(dir, String(i)), { flush: 'always', fdBudget: budget, segmentBytes: 120 }));
    logFiles.peak = logFiles.open;
    // Every append at once: each needs its log's file while it is written and until it is fsynced; a few roll.
    for (let round = 0; round < 4; round++) {
      await Promise.all(logs.map((l, i) => l.append([{ key: null, value: Buffer.from(`p${i}-r${round}-${'x'.repeat(40)}`) }])));
    }
    const all = await Promise.all(logs.map((l) => l.read(0, { maxRecords: 10, maxBytes: 1 << 20 })));
    const head = (v: Buffer) => v.toString().split('-').slice(0, 2).join('-');
    for (let i = 0; i < 40; i++) expect(all[i]!.map((r) => head(r.value))).toEqual([0, 1, 2, 3].map((r) => `p${i}-r${r}`));
    expect(logs[0]!.segmentInfos().length).toBeGreaterThan(1);
    expect(logFiles.peak).toBeLessThanOrEqual(8);
    expect(budget.open).toBeLessThanOrEqual(8);
    expect(budget.open).toBe(logFiles.open);
  });

  it('under a fsyncing log (flush=interval), a segment written since its last fsync keeps its fd and an open waits until an fsync lets one go', async () => {
    const budget = new FdBudget(2);
    for (let i = 0; i < 6; i++) logs.push(await PartitionLog.open(join(dir, String(i)), { flush: 'interval', flushIntervalMs: 3_600_000, fdBudget: budget }));
    const written: number[] = [];
    const appends = logs.map((l, i) => l.append([{ key: null, value: Buffer.from(`unsynced ${i}`) }]).then(() => written.push(i)));
    const pending = new Set(appends);
    for (const p of appends) void p.then(() => pending.delete(p));
    logFiles.peak = logFiles.open;
    let flushed = 0;
    // Two files fit: two appends are written, the others wait for a slot; none may close before its fsync.
    // Each flush lets written segments close, and as many waiting appends are written.
    while (pending.size > 0) {
      await Promise.race(pending);
      expect(budget.open).toBeLessThanOrEqual(2);
      expect(written.length).toBeLessThanOrEqual(flushed + 2);
      const toFlush = written.slice(flushed);
      flushed = written.length;
      await Promise.all(toFlush.map((i) => logs[i]!.flush()));
    }
    expect(written.sort()).toEqual([0, 1, 2, 3, 4, 5]);
    for (const l of logs) await l.flush();
    for (let i = 0; i < 6; i++) expect((await logs[i]!.read(0, { maxRecords: 1, maxBytes: 1024 }))[0]!.value.toString()).toBe(`unsynced ${i}`);
    expect(logFiles.peak).toBeLessThanOrEqual(2);
  });

  it('an append waiting for a slot is refused with the retriable storage_error when its log closes', async () => {
    const budget = new FdBudget(1);
    const a = await PartitionLog.open(join(dir, 'a'), { flush: 'interval', flushIntervalMs: 3_600_000, fdBudget: budget });
    const b = await PartitionLog.open(join(dir, 'b'), { flush: 'interval', flushIntervalMs: 3_600_000, fdBudget: budget });
    logs.push(a, b);
    // a's segment holds the one slot until it is fsynced: b's append waits.
    await a.append([{ key: null, value: Buffer.from('a0') }]);
    let refused = false;
    const waiting = b.append([{ key: null, value: Buffer.from('b0') }]).catch((err: unknown) => {
      refused = true;
      throw err;
    });
    while (budget.waiting === 0) await new Promise<void>((resolve) => setImmediate(resolve));
    const closing = b.close();
    await expect(waiting).rejects.toMatchObject({ code: 'storage_error', retriable: true });
    expect(refused).toBe(true);
    expect(b.failed).toBe(false);
    // The close itself fsyncs b's segment: it gets the slot once a's fsync lets it go.
    await a.flush();
    await closing;
    logs.splice(logs.indexOf(b), 1);
    const again = await PartitionLog.open(join(dir, 'b'), { flush: 'interval', fdBudget: budget });
    logs.push(again);
    expect(again.logEndOffset).toBe(0);
  });
  it('the directory fsyncs and index writes of many dormant logs written at once, and of many rolls at once, stay within the bound of small-file operations', async () => {
    const budget = new FdBudget(8);
    const opts = { flush: 'always' as const, fdBudget: budget, segmentBytes: 100 };
    for (let i = 0; i < 60; i++) logs.push(await PartitionLog.open(join(dir, 'd', String(i)), opts, undefined, { lazy: true }));
    otherFiles.peak = otherFiles.open;
    // The first append of each creates its directory (synced in its parent), its segment and index, and syncs it.
    await Promise.all(logs.map((l, i) => l.append([{ key: null, value: Buffer.from(`first ${i} ${'x'.repeat(60)}`) }])));
    // Each rolls: the old segment's index is written and the new segment's directory entry synced.
    await Promise.all(logs.map((l, i) => l.append([{ key: null, value: Buffer.from(`second ${i} ${'x'.repeat(60)}`) }])));
    for (const l of logs) expect(l.segmentInfos().length).toBe(2);
    expect(otherFiles.peak).toBeGreaterThan(0);
    expect(otherFiles.peak).toBeLessThanOrEqual(2 * MAX_CONCURRENT_ATOMIC_WRITES);
    expect(logFiles.peak).toBeLessThanOrEqual(8);
  });

  it('with overflowHeadroom, opens past the bound stop at the headroom and wait for a file to close, however long overdue', async () => {
    const budget = new FdBudget(1, 20, 1);
    const [a, b, c] = [0, 1, 2].map((i) => new FakeHolder(i, budget)) as [FakeHolder, FakeHolder, FakeHolder];
    a.pinned = true;
    b.pinned = true;
    c.pinned = true;
    await a.take();
    await b.take();
    expect([budget.open, budget.overflows]).toEqual([2, 1]);
    // c is overdue long before anything closes: it waits (uncapped it opened, a third file past a bound of 1).
    let opened = false;
    const tc = c.take().then(() => {
      opened = true;
    });
    await new Promise((r) => setTimeout(r, 80));
    expect([opened, budget.open, budget.waiting]).toEqual([false, 2, 1]);
    // b may let go: it closes for the overdue open, which then opens within the headroom.
    b.pinned = false;
    budget.settled(b);
    await tc;
    expect([b.open, c.open, budget.open, budget.overflows]).toEqual([false, true, 2, 2]);
  });

  it('with overflowAfterMs, an open no holder can make room for goes past the bound once it has waited that long; past it, a holder that may close is closed', async () => {
    const budget = new FdBudget(1, 20);
    const [a, b, c] = [0, 1, 2].map((i) => new FakeHolder(i, budget)) as [FakeHolder, FakeHolder, FakeHolder];
    await a.take();
    // Written without pause: their writes always await an fsync, so neither may close.
    a.pinned = true;
    b.pinned = true;
    await b.take();
    expect([a.open, b.open, budget.open, budget.overflows]).toEqual([true, true, 2, 1]);
    // Past the bound, the next open waits again (it may still get a slot), then goes past it too.
    c.pinned = true;
    const tc = c.take();
    await settle();
    expect(budget.waiting).toBe(1);
    await tc;
    expect([budget.open, budget.overflows]).toEqual([3, 2]);
    // b's I/O ends: it is closed, back towards the bound.
    b.pinned = false;
    budget.settled(b);
    await settle();
    expect([b.open, budget.open]).toEqual([false, 2]);
  });
});

/**
 * The broker-wide bound on open segment files (FdBudget): an LRU over segments that closes the least
 * recently used fds that may close (no I/O in progress; under a fsyncing log, no write since the last
 * fsync), and many real partition logs sharing one small budget read and write correctly through it.
 */
import { join } from 'node:path';
import fc from 'fast-check';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { FdBudget, type FdHolder } from 'tributary-broker/storage/fd-budget.js';
import { PartitionLog } from 'tributary-broker/storage/partition-log.js';
import { removeDir, tempDir } from '../../helpers/util.js';

class FakeHolder implements FdHolder {
  open = true;
  pinned = false;
  constructor(readonly id: number) {}
  canRelease(): boolean {
    return !this.pinned;
  }
  async release(): Promise<void> {
    this.open = false;
  }
}

describe('FdBudget', () => {
  it('closes the least recently used holders past the bound, skipping those that may not close', () => {
    const budget = new FdBudget(3);
    const h = [0, 1, 2, 3, 4].map((i) => new FakeHolder(i));
    for (const x of h.slice(0, 3)) budget.used(x);
    budget.used(h[0]!); // 0 is now the most recent: 1 is the least recent
    h[1]!.pinned = true; // in use: it must stay open
    budget.used(h[3]!);
    expect(h.map((x) => x.open)).toEqual([true, true, false, true, true]);
    expect(budget.open).toBe(3);
    budget.used(h[4]!);
    expect(h[0]!.open).toBe(false); // next least recent that may close
    expect(h[1]!.open).toBe(true);
    expect(budget.open).toBe(3);
  });

  it('property: never more open than the bound plus the holders that could not close; only releasable ones are closed', () => {
    fc.assert(
      fc.property(fc.integer({ min: 1, max: 6 }), fc.array(fc.tuple(fc.integer({ min: 0, max: 14 }), fc.boolean()), { maxLength: 80 }), (max, ops) => {
        const budget = new FdBudget(max);
        const hs = Array.from({ length: 15 }, (_, i) => new FakeHolder(i));
        for (const x of hs) x.open = false; // none has opened its fd yet
        for (const [i, pin] of ops) {
          const x = hs[i]!;
          if (!x.open) x.open = true; // a closed holder reopens on use
          budget.used(x);
          x.pinned = pin;
          const open = hs.filter((y) => y.open);
          const pinned = open.filter((y) => y.pinned).length;
          expect(budget.open).toBe(open.length);
          expect(open.length).toBeLessThanOrEqual(Math.max(max, pinned + 1));
        }
      }),
      { numRuns: 300 },
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

  it('a segment written since its last fsync keeps its fd under a fsyncing log (flush=interval)', async () => {
    const budget = new FdBudget(2);
    for (let i = 0; i < 6; i++) logs.push(await PartitionLog.open(join(dir, String(i)), { flush: 'interval', flushIntervalMs: 3_600_000, fdBudget: budget }));
    for (const l of logs) await l.append([{ key: null, value: Buffer.from('unsynced') }]);
    // None of the six may close before its fsync: the bound is exceeded rather than an fd dropped.
    expect(budget.open).toBe(6);
    for (const l of logs) await l.flush();
    for (const l of logs) await l.read(0, { maxRecords: 1, maxBytes: 1024 });
    expect(budget.open).toBeLessThanOrEqual(2);
  });
});

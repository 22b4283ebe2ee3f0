/**
 * A process out of file descriptors (EMFILE, ENFILE) while a log opens a file: the one append that needed
 * the file is refused with a retriable storage_error and the log goes on once fds are free again. No fsync
 * or write ran, so nothing is in doubt: the log must not fail (a failed log refuses every append until the
 * broker restarts). Covered: the reopen of an active segment the fd budget closed, the first append of a
 * dormant log and a segment roll (their directory fsync, the old segment's fsync).
 */
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { FdBudget } from 'tributary-broker/storage/fd-budget.js';
import { PartitionLog } from 'tributary-broker/storage/partition-log.js';
import { Segment } from 'tributary-broker/storage/segment.js';
import { removeDir, tempDir } from '../../helpers/util.js';

/** Opens of these paths fail as if the process were out of fds (the code), while set. */
const exhausted = vi.hoisted(() => ({ paths: new Set<string>(), code: 'EMFILE', refused: 0 }));
vi.mock('node:fs/promises', async (importOriginal) => {
  const fs = await importOriginal<typeof import('node:fs/promises')>();
  return {
    ...fs,
    open: async (...args: Parameters<typeof fs.open>) => {
      if (exhausted.paths.has(String(args[0]))) {
        exhausted.refused++;
        throw Object.assign(new Error(`${exhausted.code}: too many open files, open '${String(args[0])}'`), { code: exhausted.code, syscall: 'open' });
      }
      return fs.open(...args);
    },
  };
});

const rec = (v: string) => ({ key: null, value: Buffer.from(v) });

let dir: string;
const logs: PartitionLog[] = [];
beforeEach(async () => {
  dir = await tempDir('trib-fd-exhaustion-');
});
afterEach(async () => {
  exhausted.paths.clear();
  exhausted.refused = 0;
  for (const l of logs.splice(0)) await l.close().catch(() => {});
  await removeDir(dir);
});

async function open(name: string, opts: Parameters<typeof PartitionLog.open>[1], lazy = false): Promise<PartitionLog> {
  const log = await PartitionLog.open(join(dir, name), opts, undefined, { lazy });
  logs.push(log);
  return log;
}

async function values(log: PartitionLog): Promise<string[]> {
  const out = await log.read(0, { maxRecords: 1000, maxBytes: 1 << 20, maxOffset: log.logEndOffset });
  return out.map((r) => r.value.toString());
}

const segmentFile = (log: PartitionLog, base: number) => join(log.dir, `${String(base).padStart(20, '0')}.log`);

describe.each(['EMFILE', 'ENFILE'])('out of fds (%s)', (code) => {
  beforeEach(() => {
    exhausted.code = code;
  });

  it('an append whose segment file the fd budget closed is refused, and the log takes the next one', async () => {
    const budget = new FdBudget(1);
    const a = await open('a', { flush: 'always', fdBudget: budget });
    const b = await open('b', { flush: 'always', fdBudget: budget });
    await a.append([rec('a0')]);
    // b's segment takes the only fd: a's (fsynced, idle) is closed.
    await b.append([rec('b0')]);
    exhausted.paths.add(segmentFile(a, 0));
    await expect(a.append([rec('a1')])).rejects.toMatchObject({ code: 'storage_error', retriable: true });
    expect(exhausted.refused).toBeGreaterThan(0);
    exhausted.paths.clear();
    expect(a.failed).toBe(false);
    expect(await a.append([rec('a2')])).toMatchObject({ baseOffset: 1 });
    expect(await values(a)).toEqual(['a0', 'a2']);
  });

  it("a dormant log's first append is refused when its directory cannot be opened for the fsync, and the next one creates the log", async () => {
    const log = await open('d', { flush: 'always' }, true);
    expect(log.dormant).toBe(true);
    exhausted.paths.add(log.dir);
    await expect(log.append([rec('x')])).rejects.toMatchObject({ code: 'storage_error', retriable: true });
    expect(exhausted.refused).toBeGreaterThan(0);
    exhausted.paths.clear();
    expect(log.failed).toBe(false);
    expect(await log.append([rec('y')])).toMatchObject({ baseOffset: 0 });
    expect(await values(log)).toEqual(['y']);
    await log.close();
    logs.splice(0);
    // Nothing of the refused append is on disk: a reopen finds the one record.
    const again = await open('d', { flush: 'always' });
    expect(await values(again)).toEqual(['y']);
  });

  it("a roll is refused when the new segment's directory cannot be opened for the fsync, and the next append rolls", async () => {
    const log = await open('r', { flush: 'always', segmentBytes: 200 });
    await log.append([rec('x'.repeat(100))]);
    exhausted.paths.add(log.dir);
    await expect(log.append([rec('y'.repeat(100))])).rejects.toMatchObject({ code: 'storage_error', retriable: true });
    exhausted.paths.clear();
    expect(log.failed).toBe(false);
    expect(await log.append([rec('z'.repeat(100))])).toMatchObject({ baseOffset: 1 });
    expect((await values(log)).map((v) => v[0])).toEqual(['x', 'z']);
    await log.close();
    logs.splice(0);
    const again = await open('r', { flush: 'always', segmentBytes: 200 });
    expect((await values(again)).map((v) => v[0])).toEqual(['x', 'z']);
  });

  it('a roll of a segment whose fd the budget closed is refused when the file cannot be reopened for its fsync, and the next append rolls', async () => {
    const budget = new FdBudget(1);
    const a = await open('a', { flush: 'always', fdBudget: budget, segmentBytes: 200 });
    const b = await open('b', { flush: 'always', fdBudget: budget });
    await a.append([rec('x'.repeat(100))]);
    await b.append([rec('b0')]);
    exhausted.paths.add(segmentFile(a, 0));
    await expect(a.append([rec('y'.repeat(100))])).rejects.toMatchObject({ code: 'storage_error', retriable: true });
    exhausted.paths.clear();
    expect(a.failed).toBe(false);
    expect(await a.append([rec('z'.repeat(100))])).toMatchObject({ baseOffset: 1 });
    expect((await values(a)).map((v) => v[0])).toEqual(['x', 'z']);
    expect(a.segmentInfos().map((s) => s.baseOffset)).toEqual([0, 1]);
  });
});

describe('a segment whose file could not be opened', () => {
  it('is not counted in the fd budget, so the budget closes no real fd for it', async () => {
    const budget = new FdBudget(2);
    const fds = { budget, syncTracked: true };
    const a = await Segment.create(dir, 0, 4096, Date.now(), fds);
    const b = await Segment.create(dir, 100, 4096, Date.now(), fds);
    const c = await Segment.create(dir, 200, 4096, Date.now(), fds);
    try {
      // c took b's place (the least recently used); a reads again: it is the most recent, b is closed.
      await c.read(0, 1);
      await a.read(0, 1);
      expect([a.isOpen, b.isOpen, c.isOpen]).toEqual([true, false, true]);
      await c.release();
      expect(budget.open).toBe(1);
      exhausted.code = 'EMFILE';
      exhausted.paths.add(b.logPath);
      await expect(b.read(0, 1)).rejects.toMatchObject({ code: 'EMFILE' });
      exhausted.paths.clear();
      // Only a holds an fd, and is counted alone.
      expect(budget.open).toBe(1);
      // c reopens: two files, within the bound of two, so a keeps its fd.
      await c.read(0, 1);
      expect(budget.open).toBe(2);
      expect(a.isOpen).toBe(true);
    } finally {
      for (const s of [a, b, c]) await s.close();
    }
  });
});

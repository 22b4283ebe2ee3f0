/**
 * A log truncation (a follower cutting its log to its leader's) that cannot get a file it needs: its wait
 * for a slot of the fd budget ends because the log closes, or the process is out of fds (EMFILE). Nothing
 * was written or fsynced, so nothing is in doubt: the truncation is refused (the retriable storage_error)
 * and changes nothing, and the log is not failed (a failed log refuses every append until it is opened
 * again). It failed the log, after it had already removed the segments past the truncation point.
 */
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { FdBudget } from 'tributary-broker/storage/fd-budget.js';
import { PartitionLog } from 'tributary-broker/storage/partition-log.js';
import { removeDir, tempDir } from '../../helpers/util.js';

/** Opens of these paths fail as if the process were out of fds, while set. */
const exhausted = vi.hoisted(() => ({ paths: new Set<string>(), refused: 0 }));
vi.mock('node:fs/promises', async (importOriginal) => {
  const fs = await importOriginal<typeof import('node:fs/promises')>();
  return {
    ...fs,
    open: async (...args: Parameters<typeof fs.open>) => {
      if (exhausted.paths.has(String(args[0]))) {
        exhausted.refused++;
        throw Object.assign(new Error(`EMFILE: too many open files, open '${String(args[0])}'`), { code: 'EMFILE', syscall: 'open' });
      }
      return fs.open(...args);
    },
  };
});

/** Two records of this size fill a segment of SEGMENT_BYTES: a third rolls. */
const SEGMENT_BYTES = 200;
const rec = (i: number) => ({ key: null, value: Buffer.from(`r${i}-${'x'.repeat(20)}`) });

let dir: string;
const logs: PartitionLog[] = [];
beforeEach(async () => {
  dir = await tempDir('trib-truncate-fds-');
});
afterEach(async () => {
  exhausted.paths.clear();
  exhausted.refused = 0;
  for (const l of logs.splice(0)) await l.close().catch(() => {});
  await removeDir(dir);
});

async function open(name: string, opts: Parameters<typeof PartitionLog.open>[1]): Promise<PartitionLog> {
  const log = await PartitionLog.open(join(dir, name), opts);
  logs.push(log);
  return log;
}

/** A log of records 0-4 in three segments (0-1, 2-3, 4). */
async function fiveRecords(name: string, opts: Parameters<typeof PartitionLog.open>[1]): Promise<PartitionLog> {
  const log = await open(name, { flush: 'always', segmentBytes: SEGMENT_BYTES, ...opts });
  for (let i = 0; i < 5; i++) await log.append([rec(i)]);
  expect(log.segmentInfos().map((s) => s.baseOffset)).toEqual([0, 2, 4]);
  return log;
}

async function values(log: PartitionLog): Promise<string[]> {
  const out = await log.read(log.logStartOffset, { maxRecords: 1000, maxBytes: 1 << 20, maxOffset: log.logEndOffset });
  return out.map((r) => r.value.toString().split('-')[0]!);
}

const segmentFile = (log: PartitionLog, base: number) => join(log.dir, `${String(base).padStart(20, '0')}.log`);

describe('a truncation that cannot get a file', () => {
  it('waiting for a slot of the fd budget when its log closes: refused, the log not failed, and the reopened log whole', async () => {
    const budget = new FdBudget(1);
    const b = await fiveRecords('b', { fdBudget: budget });
    // a's segment takes the one slot and keeps it until its next fsync: b's segments have no fd.
    const a = await open('a', { flush: 'interval', flushIntervalMs: 3_600_000, fdBudget: budget });
    await a.append([rec(0)]);
    const truncation = b.truncateTo(1);
    truncation.catch(() => {});
    while (budget.waiting === 0) await new Promise<void>((resolve) => setImmediate(resolve));
    const closing = b.close();
    await expect(truncation).rejects.toMatchObject({ code: 'storage_error', retriable: true });
    expect(b.failed).toBe(false);
    // The close fsyncs b's segments: they get the slot once a's fsync lets it go.
    await a.flush();
    await closing;
    logs.splice(logs.indexOf(b), 1);
    const again = await open('b', { flush: 'always', segmentBytes: SEGMENT_BYTES, fdBudget: budget });
    expect(await values(again)).toEqual(['r0', 'r1', 'r2', 'r3', 'r4']);
    expect(again.segmentInfos().map((s) => s.baseOffset)).toEqual([0, 2, 4]);
  });

  it('out of fds reopening the segment it keeps (the fd budget closed it): refused, nothing changed, and the next truncation goes through', async () => {
    const budget = new FdBudget(1);
    const log = await fiveRecords('t', { fdBudget: budget });
    const other = await open('o', { flush: 'always', fdBudget: budget });
    await other.append([rec(0)]);
    exhausted.paths.add(segmentFile(log, 0));
    await expect(log.truncateTo(1)).rejects.toMatchObject({ code: 'storage_error', retriable: true });
    expect(exhausted.refused).toBeGreaterThan(0);
    exhausted.paths.clear();
    expect(log.failed).toBe(false);
    expect(log.segmentInfos().map((s) => s.baseOffset)).toEqual([0, 2, 4]);
    expect(await values(log)).toEqual(['r0', 'r1', 'r2', 'r3', 'r4']);
    await log.truncateTo(1);
    expect(await log.append([rec(9)])).toMatchObject({ baseOffset: 1 });
    expect(await values(log)).toEqual(['r0', 'r9']);
  });

  it('out of fds opening its directory for the fsync: refused, nothing changed, and the next truncation goes through', async () => {
    const log = await fiveRecords('d', {});
    exhausted.paths.add(log.dir);
    await expect(log.truncateTo(3)).rejects.toMatchObject({ code: 'storage_error', retriable: true });
    expect(exhausted.refused).toBeGreaterThan(0);
    exhausted.paths.clear();
    expect(log.failed).toBe(false);
    expect(log.segmentInfos().map((s) => s.baseOffset)).toEqual([0, 2, 4]);
    expect(await values(log)).toEqual(['r0', 'r1', 'r2', 'r3', 'r4']);
    await log.truncateTo(3);
    expect(await log.append([rec(9)])).toMatchObject({ baseOffset: 3 });
    await log.close();
    logs.splice(0);
    const again = await open('d', { flush: 'always', segmentBytes: SEGMENT_BYTES });
    expect(await values(again)).toEqual(['r0', 'r1', 'r2', 'r9']);
  });

  it('out of fds creating the segment that starts an emptied log below its start: refused, nothing changed, and the next truncation goes through', async () => {
    const log = await fiveRecords('s', { retentionBytes: 0 });
    log.setHighWatermark(5);
    await log.applyRetention();
    expect(log.logStartOffset).toBe(4);
    exhausted.paths.add(segmentFile(log, 1));
    await expect(log.truncateTo(1)).rejects.toMatchObject({ code: 'storage_error', retriable: true });
    expect(exhausted.refused).toBeGreaterThan(0);
    exhausted.paths.clear();
    expect(log.failed).toBe(false);
    expect([log.logStartOffset, log.logEndOffset]).toEqual([4, 5]);
    expect(await values(log)).toEqual(['r4']);
    await log.truncateTo(1);
    expect([log.logStartOffset, log.logEndOffset]).toEqual([1, 1]);
    expect(await log.append([rec(9)])).toMatchObject({ baseOffset: 1 });
    expect(await values(log)).toEqual(['r9']);
  });

  it('out of fds writing the next index file of the compacted segment it keeps: refused, nothing changed, and the next truncation goes through', async () => {
    const log = await open('c', { flush: 'always', segmentBytes: SEGMENT_BYTES });
    for (const [i, key] of ['a', 'b', 'a', 'c', 'x'].entries()) await log.append([{ ...rec(i), key: Buffer.from(key) }]);
    log.setHighWatermark(5);
    await log.compact();
    const compacted = log.segmentInfos().filter((s) => s.compacted);
    expect(compacted.map((s) => s.baseOffset)).toEqual([0]);
    const tmp = `${segmentFile(log, 0).replace(/\.log$/, '.index')}.cut.tmp`;
    exhausted.paths.add(tmp);
    await expect(log.truncateTo(1)).rejects.toMatchObject({ code: 'storage_error', retriable: true });
    expect(exhausted.refused).toBeGreaterThan(0);
    exhausted.paths.clear();
    expect(log.failed).toBe(false);
    expect(log.segmentInfos().map((s) => s.baseOffset)).toEqual([0, 2, 4]);
    expect(await values(log)).toEqual(['r1', 'r2', 'r3', 'r4']);
    await log.truncateTo(1);
    expect(log.segmentInfos().map((s) => s.baseOffset)).toEqual([0, 1]);
    expect(await log.append([rec(9)])).toMatchObject({ baseOffset: 1 });
    expect(await values(log)).toEqual(['r9']);
  });
});

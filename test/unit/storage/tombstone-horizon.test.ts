/**
 * The tombstone horizon of a compacted log (docs/architecture.md, "Compaction"): 1 + the highest offset of a
 * tombstone compaction dropped, monotonic, on disk before the segment without the tombstone is swapped in,
 * read back on open; a log without its file (written before it existed) reads as 0.
 */
import { readFile, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { type LogOptions, PartitionLog, SimulatedCrash, TOMBSTONE_HORIZON_FILE } from 'tributary-broker/storage/partition-log.js';
import { armCompactionCrash, simulateCrash } from 'tributary-broker/storage/log-test-hooks.js';
import { removeDir, tempDir } from '../../helpers/util.js';
import { readAll } from './compacted-logs.js';

let dir: string;
const opened: PartitionLog[] = [];
beforeEach(async () => {
  dir = await tempDir('trib-horizon-');
});
afterEach(async () => {
  for (const l of opened.splice(0)) await l.close().catch(() => {});
  await removeDir(dir);
});

const OPTS: Partial<LogOptions> = { flush: 'os', segmentBytes: 600, indexIntervalBytes: 64 };
const T0 = 1_700_000_000_000;
const HOUR = 3600_000;

async function openLog(opts: Partial<LogOptions> = {}, how: { lazy?: boolean } = {}): Promise<PartitionLog> {
  const l = await PartitionLog.open(dir, { ...OPTS, ...opts }, undefined, how);
  opened.push(l);
  return l;
}

/** Appends one record and moves the HWM past it, as an acknowledged write does. */
async function put(l: PartitionLog, key: string, value: string, ts = T0): Promise<number> {
  const r = await l.append([{ key: Buffer.from(key), value: Buffer.from(value), timestamp: ts }]);
  l.setHighWatermark(r.lastOffset + 1);
  return r.baseOffset;
}

/** k=v1, then a tombstone of k, then enough other records to close the tombstone's segment. Returns the tombstone's offset. */
async function tombstoneLog(l: PartitionLog, key = 'k'): Promise<number> {
  await put(l, key, 'v1');
  const at = await put(l, key, '');
  for (let i = 0; i < 40; i++) await put(l, `other-${i}`, `x${i}`.padEnd(20, '.'));
  return at;
}

const fileText = () => readFile(join(dir, TOMBSTONE_HORIZON_FILE), 'utf8');

describe('tombstone horizon', () => {
  it('a compaction that drops an expired tombstone records 1 + its offset, on disk', async () => {
    const l = await openLog();
    const at = await tombstoneLog(l);
    expect(l.tombstoneHorizon).toBe(0);
    // Not expired yet: the tombstone stays, and so does the horizon.
    await l.compact({ now: T0 + HOUR, tombstoneRetentionMs: 2 * HOUR });
    expect((await readAll(l)).some((r) => r.key?.toString() === 'k')).toBe(true);
    expect(l.tombstoneHorizon).toBe(0);
    await l.compact({ now: T0 + 3 * HOUR, tombstoneRetentionMs: 2 * HOUR });
    expect((await readAll(l)).some((r) => r.key?.toString() === 'k')).toBe(false);
    expect(l.tombstoneHorizon).toBe(at + 1);
    expect(await fileText()).toBe(`tributary-tombstone-horizon 1 ${at + 1}\n`);
  });

  it('superseded records (values and tombstones) dropped leave it at 0', async () => {
    const l = await openLog();
    await put(l, 'k', 'v1');
    await put(l, 'k', '');
    await put(l, 'k', 'v2'); // the tombstone is superseded, not expired
    for (let i = 0; i < 40; i++) await put(l, `other-${i % 3}`, `x${i}`.padEnd(20, '.'));
    const res = await l.compact({ now: T0 + 3 * HOUR, tombstoneRetentionMs: 0 });
    expect(res.recordsRemoved).toBeGreaterThan(0);
    expect(l.tombstoneHorizon).toBe(0);
  });

  it('is monotonic: a later drop raises it, a lower raise does not lower it', async () => {
    const l = await openLog();
    const first = await tombstoneLog(l, 'a');
    await l.compact({ now: T0 + 3 * HOUR, tombstoneRetentionMs: 0 });
    expect(l.tombstoneHorizon).toBe(first + 1);
    const second = await tombstoneLog(l, 'b');
    await l.compact({ now: T0 + 3 * HOUR, tombstoneRetentionMs: 0 });
    expect(second).toBeGreaterThan(first);
    expect(l.tombstoneHorizon).toBe(second + 1);
    await l.raiseTombstoneHorizon(first);
    expect(l.tombstoneHorizon).toBe(second + 1);
    expect(await fileText()).toBe(`tributary-tombstone-horizon 1 ${second + 1}\n`);
    await l.raiseTombstoneHorizon(second + 10);
    expect(l.tombstoneHorizon).toBe(second + 10);
    await expect(l.raiseTombstoneHorizon(-1)).rejects.toMatchObject({ code: 'invalid_parameter' });
  });

  it('survives reopening the log, after a clean close and after a crash', async () => {
    let l = await openLog();
    const at = await tombstoneLog(l);
    await l.compact({ now: T0 + 3 * HOUR, tombstoneRetentionMs: 0 });
    await l.close();
    l = await openLog();
    expect(l.tombstoneHorizon).toBe(at + 1);
    await simulateCrash(l);
    l = await openLog();
    expect(l.tombstoneHorizon).toBe(at + 1);
  });

  it('is on disk before the segment without the tombstone is: a crash at the swap finds it', async () => {
    let l = await openLog();
    const at = await tombstoneLog(l);
    armCompactionCrash(l, 'index-renamed');
    await expect(l.compact({ now: T0 + 3 * HOUR, tombstoneRetentionMs: 0 })).rejects.toBeInstanceOf(SimulatedCrash);
    await simulateCrash(l);
    l = await openLog();
    expect(l.tombstoneHorizon).toBe(at + 1);
  });

  it('a log without the file (written before the horizon existed) reads as 0; a malformed one as the log end', async () => {
    let l = await openLog();
    const at = await tombstoneLog(l);
    await l.compact({ now: T0 + 3 * HOUR, tombstoneRetentionMs: 0 });
    expect(l.tombstoneHorizon).toBe(at + 1);
    await l.close();
    await rm(join(dir, TOMBSTONE_HORIZON_FILE));
    l = await openLog();
    expect(l.tombstoneHorizon).toBe(0);
    await l.close();
    await writeFile(join(dir, TOMBSTONE_HORIZON_FILE), 'tributary-tombstone-horizon 1 x\n');
    l = await openLog();
    expect(l.tombstoneHorizon).toBe(l.logEndOffset);
  });

  it("a dormant log (a replica being added) keeps its leader's horizon before its first record; a release resets it", async () => {
    let l = await openLog({}, { lazy: true });
    expect(l.dormant).toBe(true);
    await l.raiseTombstoneHorizon(7);
    expect(l.dormant).toBe(true);
    await l.close();
    l = await openLog({}, { lazy: true });
    expect(l.dormant).toBe(true);
    expect(l.tombstoneHorizon).toBe(7);
    await put(l, 'k', 'v');
    await l.release();
    expect(l.tombstoneHorizon).toBe(0);
    await l.close();
    l = await openLog({}, { lazy: true });
    expect(l.tombstoneHorizon).toBe(0);
  });
});

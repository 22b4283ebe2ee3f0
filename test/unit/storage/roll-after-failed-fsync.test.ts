/**
 * A roll waits for the group commit's pass in flight (storage/log-writer.ts roll): when that pass's fsync
 * fails, the log fails and its segments are cut back to their last good fsync, and the roll must stop
 * there. It went on: fsynced the old segment again (Linux reports a write-back error to one fsync only),
 * wrote its index at its full size and started the next segment at its end, past the cut, and the
 * restart refused the gap. docs/architecture.md, "Storage".
 */
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { simulateCrash } from 'tributary-broker/storage/log-test-hooks.js';
import { PartitionLog } from 'tributary-broker/storage/partition-log.js';
import { removeDir, tempDir, until } from '../../helpers/util.js';
import { resetFailing } from '../../helpers/failing-fdatasync.js';

const failing = vi.hoisted(() => ({ on: false, hold: false, held: [] as Array<() => void> }));
vi.mock('node:fs', async (importOriginal) => (await import('../../helpers/failing-fdatasync.js')).withFailingFdatasync(await importOriginal(), failing));

let dir: string;
beforeEach(async () => {
  dir = join(await tempDir('trib-roll-failed-'), 'log');
  resetFailing(failing);
});
afterEach(async () => {
  resetFailing(failing);
  await removeDir(join(dir, '..'));
});

const rec = (v: string) => [{ key: null, value: Buffer.from(v.padEnd(120, '.')) }];

describe('a roll waiting for a pass whose fsync fails', () => {
  it('stops with the log failed, and the restart opens the log with what was durable', async () => {
    const log = await PartitionLog.open(dir, { flush: 'always', segmentBytes: 400, tailCacheBytes: 0 });
    await log.append(rec('r0'));
    // The pass of this append is held; the next appends fill the segment, so one of them rolls it and waits.
    failing.hold = true;
    const a = log.append(rec('a'));
    a.catch(() => {});
    await until(() => failing.held.length > 0, 5_000, 'the held pass');
    const more = [log.append(rec('b')), log.append(rec('c')), log.append(rec('d'))];
    for (const m of more) m.catch(() => {});
    failing.hold = false;
    failing.on = true;
    for (const run of failing.held.splice(0)) run();
    // Only that fsync fails: a later one "succeeds".
    failing.on = false;
    await expect(a).rejects.toMatchObject({ code: 'storage_error' });
    for (const m of more) await expect(m).rejects.toMatchObject({ code: 'storage_error' });
    expect(log.failed).toBe(true);
    expect(log.segmentInfos().length).toBe(1);
    await simulateCrash(log);
    const again = await PartitionLog.open(dir, { flush: 'always', segmentBytes: 400, tailCacheBytes: 0 });
    try {
      const recs = await again.read(0, { maxRecords: 100, maxBytes: 1 << 20 });
      expect(recs.map((r) => r.value!.toString().replace(/\.+$/, ''))).toEqual(['r0']);
    } finally {
      await again.close();
    }
  });
});

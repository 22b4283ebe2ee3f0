/**
 * A segment whose fsync failed lets go of its slot in the open-file budget (FdBudget): its log is failed
 * and trusts no later fsync, so its unsynced writes no longer need the fd. It held the slot until the
 * broker restarted, and with as many failed logs as the bound every other open waited for good.
 */
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { FdBudget } from 'tributary-broker/storage/fd-budget.js';
import { PartitionLog } from 'tributary-broker/storage/partition-log.js';
import { removeDir, tempDir } from '../../helpers/util.js';

/** While set, fdatasync fails with EIO (a disk that lost the pages it could not write). */
const failing = vi.hoisted(() => ({ on: false }));
vi.mock('node:fs', async (importOriginal) => (await import('../../helpers/failing-fdatasync.js')).withFailingFdatasync(await importOriginal(), failing));

let dir: string;
const logs: PartitionLog[] = [];
beforeEach(async () => {
  dir = await tempDir('trib-fd-failed-sync-');
  failing.on = false;
});
afterEach(async () => {
  failing.on = false;
  for (const l of logs.splice(0)) await l.close().catch(() => {});
  await removeDir(dir);
});

describe('a failed fsync and the open-file budget', () => {
  it("frees the failed log's slot: another log's append under a budget of 1 goes through", async () => {
    const budget = new FdBudget(1);
    const a = await PartitionLog.open(join(dir, 'a'), { flush: 'always', fdBudget: budget });
    logs.push(a);
    await a.append([{ key: null, value: Buffer.from('ok') }]);
    failing.on = true;
    await expect(a.append([{ key: null, value: Buffer.from('lost') }])).rejects.toMatchObject({ code: 'storage_error' });
    expect(a.failed).toBe(true);
    failing.on = false;
    const b = await PartitionLog.open(join(dir, 'b'), { flush: 'always', fdBudget: budget });
    logs.push(b);
    expect(await b.append([{ key: null, value: Buffer.from('b') }])).toMatchObject({ baseOffset: 0 });
    expect(budget.open).toBeLessThanOrEqual(1);
  });
});

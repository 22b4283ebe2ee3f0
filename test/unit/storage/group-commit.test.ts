/**
 * Group commit after a failed fsync (docs/architecture.md, "Storage"): the log fails, and no append waiting
 * for a later pass is acknowledged. On Linux a failed fdatasync may drop the dirty pages it could not
 * write, and the next fdatasync can then succeed without them, so an append written while the failing
 * fsync ran must not be answered OK by the pass after it.
 */
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { PartitionLog } from 'tributary-broker/storage/partition-log.js';
import { Segment } from 'tributary-broker/storage/segment.js';
import { removeDir, tempDir } from '../../helpers/util.js';

let dir: string;
beforeEach(async () => {
  dir = await tempDir('trib-group-commit-');
});
afterEach(async () => {
  vi.restoreAllMocks();
  await removeDir(dir);
});

const rec = (i: number) => ({ key: null, value: Buffer.from(`v${i}`) });

describe('group commit', () => {
  it('acknowledges nothing after an fsync failed, also appends that wait for the next pass', async () => {
    const log = await PartitionLog.open(dir, { flush: 'always' });
    await log.append([rec(0)]); // files created, one good fsync
    const real = Segment.prototype.datasync;
    let fail!: (e: Error) => void;
    const first = new Promise<void>((_, reject) => {
      fail = reject;
    });
    // The first fsync hangs until told to fail; later ones succeed, as Linux may report after a write-back error.
    const spy = vi.spyOn(Segment.prototype, 'datasync').mockImplementationOnce(() => first);
    const a = log.append([rec(1)]).then(
      () => 'acknowledged',
      (e: Error) => `rejected: ${e.message}`,
    );
    await vi.waitFor(() => expect(spy).toHaveBeenCalledTimes(1));
    // Written while that fsync runs: it waits for the next pass.
    const b = log.append([rec(2)]).then(
      () => 'acknowledged',
      (e: Error) => `rejected: ${e.message}`,
    );
    await vi.waitFor(() => expect(log.logEndOffset).toBe(3));
    fail(Object.assign(new Error('EIO: i/o error, fdatasync'), { code: 'EIO' }));
    expect(await a).toMatch(/^rejected: .*fsync failed/);
    expect(await b).toMatch(/^rejected: .*log failed/);
    // Nothing later is accepted either.
    await expect(log.append([rec(3)])).rejects.toThrow(/log failed/);
    spy.mockImplementation(real);
    await log.close().catch(() => {});
  });
});

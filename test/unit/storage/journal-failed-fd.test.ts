/**
 * A journaled log failed by a failed journal write still lets go of its segment's slot in the fd budget
 * (docs/architecture.md "The journal"): the budget asks it for the fsync that frees the slot, and a failed
 * log's segments let it go without one (no fsync of a failed log proves anything). Once its segment passes
 * simply stopped, its dirty segment kept the slot until a restart, and an open on a full budget waited.
 */
import { join } from 'node:path';
import pino from 'pino';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { FdBudget } from 'tributary-broker/storage/fd-budget.js';
import { Journal } from 'tributary-broker/storage/journal.js';
import { LogTicker } from 'tributary-broker/storage/log-ticker.js';
import { PartitionLog } from 'tributary-broker/storage/partition-log.js';
import { removeDir, tempDir } from '../../helpers/util.js';

/** While set, fs.write (the journal's O_DSYNC write, promisified; segments use writeSync) fails with EIO. */
const failing = vi.hoisted(() => ({ on: false }));
vi.mock('node:fs', async (importOriginal) => {
  const fs = await importOriginal<typeof import('node:fs')>();
  const util = await import('node:util');
  const real = util.promisify(fs.write) as (...a: unknown[]) => Promise<unknown>;
  const write = (...args: unknown[]) => (fs.write as unknown as (...a: unknown[]) => void)(...args);
  (write as unknown as Record<symbol, unknown>)[util.promisify.custom] = (...args: unknown[]) =>
    failing.on ? Promise.reject(Object.assign(new Error('EIO: i/o error, write'), { code: 'EIO' })) : real(...args);
  return { ...fs, default: { ...fs, write }, write };
});

const quiet = pino({ level: 'silent' });
let base: string;
beforeEach(async () => {
  base = await tempDir('trib-journal-failed-fd-');
  failing.on = false;
});
afterEach(async () => {
  failing.on = false;
  await removeDir(base);
});

describe('a journaled log failed by a journal write, on a full fd budget', () => {
  it("lets go of its dirty segment's slot when another log needs it", { timeout: 10_000 }, async () => {
    const journal = await Journal.open(base, quiet);
    await journal.endRecovery();
    const budget = new FdBudget(1);
    // No flush tick in the test: only the budget's request can start the fsync that frees the slot.
    const ticker = new LogTicker(3_600_000);
    const a = await PartitionLog.open(join(base, 'logs', 'a~1', '0'), { flush: 'always', journal, fdBudget: budget, ticker });
    const b = await PartitionLog.open(join(base, 'other', 'b'), { flush: 'always', fdBudget: budget });
    try {
      await a.append([{ key: null, value: Buffer.from('ok') }]);
      failing.on = true;
      await expect(a.append([{ key: null, value: Buffer.from('lost') }])).rejects.toMatchObject({ code: 'storage_error' });
      failing.on = false;
      expect(a.failed).toBe(true);
      // A log that is not journaled (its own fsyncs) on the same budget of one file.
      expect((await b.append([{ key: null, value: Buffer.from('b') }])).baseOffset).toBe(0);
    } finally {
      await a.close().catch(() => {});
      await b.close().catch(() => {});
      await journal.close().catch(() => {});
    }
  });
});

/**
 * The cut back to the last good fsync (LogState.failSync) of a journaled log whose segment fd the budget
 * closed, waiting for a slot when the log closes (docs/architecture.md "Storage", Open files): the close
 * refuses the log's waits for a slot, which refused the cut's open too; the file kept the pages the disk
 * may have lost, which a restart on this machine reads as there (and then skips their journal entries).
 * The close runs the cut again once its own opens wait.
 */
import { readdir, stat } from 'node:fs/promises';
import { join } from 'node:path';
import pino from 'pino';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { FdBudget } from 'tributary-broker/storage/fd-budget.js';
import { Journal } from 'tributary-broker/storage/journal.js';
import { LogTicker } from 'tributary-broker/storage/log-ticker.js';
import { PartitionLog } from 'tributary-broker/storage/partition-log.js';
import { removeDir, tempDir, until } from '../../helpers/util.js';
import { resetFailing } from '../../helpers/failing-fdatasync.js';

const failing = vi.hoisted(() => ({ on: false, hold: false, held: [] as Array<() => void> }));
vi.mock('node:fs', async (importOriginal) => (await import('../../helpers/failing-fdatasync.js')).withFailingFdatasync(await importOriginal(), failing));

const quiet = pino({ level: 'silent' });
let base: string;
beforeEach(async () => {
  base = await tempDir('trib-journal-cut-close-');
  resetFailing(failing);
});
afterEach(async () => {
  resetFailing(failing);
  await removeDir(base);
});

describe('a journaled log that fails on a full fd budget and closes while its cut waits for a slot', () => {
  it('is cut back to its last good fsync by the close', { timeout: 20_000 }, async () => {
    const journal = await Journal.open(base, quiet);
    await journal.endRecovery();
    const budget = new FdBudget(1);
    const dirA = join(base, 'logs', 'a~1', '0');
    // a's log lines, to wait for its cut's refusal.
    const lines: string[] = [];
    const logger = pino({ level: 'warn' }, { write: (line: string) => void lines.push(line) });
    const a = await PartitionLog.open(dirA, { flush: 'always', journal, fdBudget: budget, ticker: new LogTicker(3_600_000), tailCacheBytes: 0 }, logger);
    const b = await PartitionLog.open(join(base, 'other', 'b'), { flush: 'always', fdBudget: budget });
    try {
      await a.append([{ key: null, value: Buffer.from('durable') }]);
      await a.flush();
      const file = join(dirA, (await readdir(dirA)).find((n) => n.endsWith('.log')) as string);
      const durable = (await stat(file)).size;
      // Acknowledged through the journal, in the segment unsynced.
      await a.append([{ key: null, value: Buffer.from('journaled') }]);
      // a's segment pass holds the slot (its fdatasync held); b's append waits for it.
      failing.hold = true;
      a.requestSegmentSync();
      await until(() => failing.held.length === 1, 5_000, "a's segment pass");
      const bAppend = b.append([{ key: null, value: Buffer.from('b') }]);
      // a's fdatasync fails: a fails, lets go of its slot (b takes it) and its cut waits for one, as b's
      // fdatasync is held.
      failing.on = true;
      failing.held.shift()!();
      failing.on = false;
      await until(() => a.failed && failing.held.length === 1, 5_000, "b's fdatasync");
      const closing = a.close();
      // Once a's close refused its waits (the cut's among them), b's fsync goes and frees the slot.
      await until(() => lines.some((l) => l.includes('could not cut')), 5_000, "the cut's refusal");
      failing.hold = false;
      for (const run of failing.held.splice(0)) run();
      await bAppend;
      await closing;
      expect((await stat(file)).size).toBe(durable);
    } finally {
      await a.close().catch(() => {});
      await b.close().catch(() => {});
      await journal.close().catch(() => {});
    }
  });
});

/**
 * A journal write that finds the disk full (storage/journal.ts retryWhenFull; docs/operations.md "A full
 * disk"): tried again, whole and at the same place, until space frees, its waiters answered then; a close
 * meanwhile gives up with the error. The failpoint `journal.full?<file>` (armed before the modules load)
 * writes half of each write, then fails it with ENOSPC, while the file exists.
 */
import { readFile, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import pino from 'pino';
import { afterAll, afterEach, beforeEach, describe, expect, it, vi } from 'vitest';

const { full, before } = vi.hoisted(() => {
  const file = `${process.env.TMPDIR ?? '/tmp'}/tributary-journal-full-${process.pid}`;
  const was = process.env.TRIBUTARY_FAILPOINTS;
  process.env.TRIBUTARY_FAILPOINTS = `journal.full?${file}`;
  return { full: file, before: was };
});

import { decodeEntries, journalKey } from 'tributary-broker/storage/journal-format.js';
import { JOURNAL_DIR, Journal } from 'tributary-broker/storage/journal.js';
import { PartitionLog } from 'tributary-broker/storage/partition-log.js';
import { removeDir, tempDir, until } from '../../helpers/util.js';

const quiet = pino({ level: 'silent' });
const key = journalKey('logs/t~1/0');
let base: string;
beforeEach(async () => {
  base = await tempDir('trib-journal-full-');
});
afterEach(async () => {
  await rm(full, { force: true });
  await removeDir(base);
});
// The worker process may run other files next (and hand its environment to brokers they start).
afterAll(() => {
  if (before === undefined) delete process.env.TRIBUTARY_FAILPOINTS;
  else process.env.TRIBUTARY_FAILPOINTS = before;
});

function durable(j: Journal): { done: () => boolean; result: Promise<Error | null> } {
  let settled = false;
  const result = new Promise<Error | null>((resolve) => j.whenDurable((err) => resolve(err))).finally(() => {
    settled = true;
  });
  return { done: () => settled, result };
}

/** Every entry the journal's files hold, in order, and whether any file ends in a cut or damaged entry. */
async function readBack(files: string[]): Promise<{ firsts: number[]; damaged: boolean }> {
  const firsts: number[] = [];
  let damaged = false;
  for (const f of files) {
    const buf = await readFile(join(base, JOURNAL_DIR, f));
    const { entries, end } = decodeEntries(buf);
    if (end < buf.length) damaged = true;
    for (const e of entries) if (e.kind === 'write') firsts.push(e.first);
  }
  return { firsts, damaged };
}

/** A journal with one durable entry (0), then the disk full and entry 1 (300 bytes) waiting; after `tries` tries. */
async function fullAfterOne(tries: number): Promise<{ j: Journal; first: ReturnType<typeof durable> }> {
  const j = await Journal.open(base, quiet, { fileBytes: 4096 });
  await j.endRecovery();
  j.write(key, 0, 0, 0, 1, [Buffer.alloc(100, 1)]);
  expect(await durable(j).result).toBeNull();
  await writeFile(full, '');
  j.write(key, 1, 1, 1, 1, [Buffer.alloc(300, 2)]);
  const first = durable(j);
  await until(() => j.fullRetries >= tries, 10_000, `${tries} tries`);
  return { j, first };
}

/** Closes `j`; its files hold entries 0..n-1 in order, none cut or damaged. */
async function readsWhole(j: Journal, n: number): Promise<string[]> {
  await j.close();
  const files = (await import('node:fs')).readdirSync(join(base, JOURNAL_DIR)).sort();
  const { firsts, damaged } = await readBack(files);
  expect(damaged).toBe(false);
  expect(firsts).toEqual(Array.from({ length: n }, (_, i) => i));
  return files;
}

describe('a journal write on a full disk', () => {
  it('is tried again until space frees, then its waiters and the later ones are answered; the file reads whole', async () => {
    // A few tries fail meanwhile (the failpoint writes half of each); entries queued meanwhile wait behind.
    const { j, first } = await fullAfterOne(3);
    j.write(key, 2, 2, 2, 1, [Buffer.alloc(200, 3)]);
    const second = durable(j);
    expect(first.done()).toBe(false);
    expect(second.done()).toBe(false);
    expect(j.failed).toBeNull();

    await rm(full);
    expect(await first.result).toBeNull();
    expect(await second.result).toBeNull();
    // Past the file's size: the next entries roll over to a new file, written while space is short too.
    await writeFile(full, '');
    for (let i = 3; i < 40; i++) j.write(key, i, i, i, 1, [Buffer.alloc(100, i)]);
    const third = durable(j);
    await until(() => j.fullRetries >= 5, 10_000, 'more tries');
    await rm(full);
    expect(await third.result).toBeNull();
    expect((await readsWhole(j, 40)).length).toBeGreaterThan(1);
  });

  it('a retry that no longer fits in its file writes over its failed try there, not in a new file: the journal reads whole', async () => {
    const { j, first } = await fullAfterOne(1);
    // Queued behind it: together past the file's size.
    for (let i = 2; i < 40; i++) j.write(key, i, i, i, 1, [Buffer.alloc(100, i)]);
    const second = durable(j);
    await until(() => j.fullRetries >= 3, 10_000, 'more tries');
    await rm(full);
    expect(await first.result).toBeNull();
    expect(await second.result).toBeNull();
    await readsWhole(j, 40);
    const again = await Journal.open(base, quiet);
    await again.endRecovery(false);
  });

  it('retention of a log whose append waits for space deletes its closed segments without the roll that would wait for it', async () => {
    const j = await Journal.open(base, quiet);
    const log = await PartitionLog.open(join(base, 'logs', 'a~1', '0'), { flush: 'always', segmentBytes: 1024, segmentMs: 60_000, retentionBytes: 1500, journal: j });
    await j.endRecovery();
    for (let i = 0; i < 30; i++) await log.append([{ key: null, value: Buffer.alloc(200, 1) }]);
    // Retention deletes below the high-water mark (a Partition moves it; a bare log is told).
    log.setHighWatermark(log.logEndOffset);
    const segments = log.segmentInfos().length;
    await writeFile(full, '');
    let settled = false;
    const pending = log.append([{ key: null, value: Buffer.alloc(200, 2) }]).finally(() => {
      settled = true;
    });
    await until(() => j.fullRetries >= 1, 10_000, 'a try');
    // Past segmentMs: the active segment is due to roll, which would wait for the pending append.
    const r = await log.applyRetention(Date.now() + 120_000);
    expect(r.deletedSegments).toBeGreaterThan(0);
    expect(log.segmentInfos().length).toBeLessThan(segments);
    expect(settled).toBe(false);
    await rm(full);
    expect((await pending).baseOffset).toBe(30);
    await log.close();
    await j.close();
  });

  it('a close while the disk is still full gives up: the waiters get the error and the journal is failed', async () => {
    const j = await Journal.open(base, quiet);
    await j.endRecovery();
    await writeFile(full, '');
    j.write(key, 0, 0, 0, 1, [Buffer.alloc(100, 1)]);
    const w = durable(j);
    await until(() => j.fullRetries >= 1, 10_000, 'a try');
    await j.close();
    expect((await w.result)?.message).toMatch(/ENOSPC/);
    expect(j.failed?.message).toMatch(/ENOSPC/);
  });
});

/**
 * A journaled log that failed (a segment fsync failed: appends refused until a restart) keeps the journal
 * entries its restart replays (storage/journal.ts logFailed, journal-compact.ts), and only those: the files
 * written after them, full of other logs' entries their segment fsyncs cover, go as before. It held every
 * later file until the restart, so the journal grew by a file size again and again.
 */
import { mkdir, readdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import pino from 'pino';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { JOURNAL_DIR, Journal } from 'tributary-broker/storage/journal.js';
import { simulateCrash } from 'tributary-broker/storage/log-test-hooks.js';
import { type LogOptions, PartitionLog } from 'tributary-broker/storage/partition-log.js';
import { removeDir, tempDir, until } from '../../helpers/util.js';

/** While set, fdatasync fails with EIO (the journal's own writes are O_DSYNC writes, not fdatasyncs). */
const failing = vi.hoisted(() => ({ on: false, hold: false, held: [] as Array<() => void> }));
vi.mock('node:fs', async (importOriginal) => (await import('../../helpers/failing-fdatasync.js')).withFailingFdatasync(await importOriginal(), failing));
/** While set, renames fail (a log's release cannot move its directory away). */
const renames = vi.hoisted(() => ({ fail: false }));
vi.mock('node:fs/promises', async (importOriginal) => {
  const fsp = await importOriginal<typeof import('node:fs/promises')>();
  const rename = (from: string, to: string) => (renames.fail ? Promise.reject(Object.assign(new Error('EIO: i/o error, rename'), { code: 'EIO' })) : fsp.rename(from, to));
  return { ...fsp, default: { ...fsp, rename }, rename };
});

const quiet = pino({ level: 'silent' });
const OPTS: Partial<LogOptions> = { flush: 'always', segmentBytes: 1 << 20, indexIntervalBytes: 512, tailCacheBytes: 0 };
let base: string;
beforeEach(async () => {
  base = await tempDir('trib-journal-failed-');
  Object.assign(failing, { on: false, hold: false, held: [] });
});
afterEach(async () => {
  Object.assign(failing, { on: false, hold: false, held: [] });
  renames.fail = false;
  await removeDir(base);
});

const value = (tag: string, i: number) => Buffer.from(`${tag}-${i}-${'x'.repeat(60)}`);

async function values(log: PartitionLog): Promise<string[]> {
  const recs = await log.read(log.logStartOffset, { maxRecords: 100_000, maxBytes: 1 << 26 });
  return recs.map((r) => r.value!.toString().split('-x')[0]!);
}

/** A crash of every log and the journal, then a restart of the journal and of the logs named `names`, checked by `check`. */
async function afterCrashOf(logs: PartitionLog[], journal: Journal, names: string[], check: (reopened: PartitionLog[]) => Promise<void>): Promise<void> {
  for (const l of logs) await simulateCrash(l);
  await journal.close();
  const again = await Journal.open(base, quiet, { fileBytes: 4096 });
  const reopened: PartitionLog[] = [];
  for (const name of names) reopened.push(await PartitionLog.open(join(base, 'logs', `${name}~1`, '0'), { ...OPTS, journal: again }));
  await again.endRecovery();
  try {
    await check(reopened);
  } finally {
    for (const l of reopened) await l.close();
    await again.close();
  }
}

describe('a journaled log that failed', () => {
  it('keeps its own entries for the restart, not every journal file written after them', async () => {
    const journal = await Journal.open(base, quiet, { fileBytes: 4096 });
    const a = await PartitionLog.open(join(base, 'logs', 'a~1', '0'), { ...OPTS, journal });
    const b = await PartitionLog.open(join(base, 'logs', 'b~1', '0'), { ...OPTS, journal });
    const c = await PartitionLog.open(join(base, 'logs', 'c~1', '0'), { ...OPTS, journal });
    await journal.endRecovery();
    // Entries of both in the first file.
    for (let i = 0; i < 10; i++) await a.append([{ key: null, value: value('a', i) }]);
    for (let i = 0; i < 5; i++) await b.append([{ key: null, value: value('b', i) }]);
    // b's segment fsync fails: b refuses appends until a restart, its segment cut back to its last fsync.
    failing.on = true;
    await b.flush().catch(() => {});
    failing.on = false;
    expect(b.failed).toBe(true);
    await expect(b.append([{ key: null, value: value('b', 99) }])).rejects.toThrow();

    // a goes on writing many files' worth and fsyncs its segments now and then.
    for (let i = 10; i < 200; i++) {
      await a.append([{ key: null, value: value('a', i) }]);
      if (i % 20 === 19) await a.flush();
    }
    // A truncation far below a's entries in the first file: were they left there (and its truncation
    // deleted with a later file), a replay would bring the truncated records back.
    await a.truncateTo(2);
    for (let i = 0; i < 3; i++) await a.append([{ key: null, value: value('c', i) }]);
    await a.flush();
    // Another log's writes roll the journal past a's truncation.
    for (let i = 0; i < 100; i++) await c.append([{ key: null, value: value('d', i) }]);
    await c.flush();
    // Every full file went but the ones holding b's entries, which hold only those.
    await until(() => journal.fileCount <= 3, 10_000, 'the files a no longer needs to go');
    const files = (await readdir(join(base, JOURNAL_DIR))).filter((n) => n.endsWith('.journal'));
    expect(files.length).toBeLessThanOrEqual(3);

    // A crash: b's acknowledged records come back from the journal; a's are all in its segments.
    await simulateCrash(b);
    await simulateCrash(a);
    await simulateCrash(c);
    await journal.close();
    const again = await Journal.open(base, quiet, { fileBytes: 4096 });
    const a2 = await PartitionLog.open(join(base, 'logs', 'a~1', '0'), { ...OPTS, journal: again });
    const b2 = await PartitionLog.open(join(base, 'logs', 'b~1', '0'), { ...OPTS, journal: again });
    const c2 = await PartitionLog.open(join(base, 'logs', 'c~1', '0'), { ...OPTS, journal: again });
    await again.endRecovery();
    try {
      expect(await values(b2)).toEqual(Array.from({ length: 5 }, (_, i) => `b-${i}`));
      expect(await values(a2)).toEqual(['a-0', 'a-1', 'c-0', 'c-1', 'c-2']);
      expect(await values(c2)).toEqual(Array.from({ length: 100 }, (_, i) => `d-${i}`));
    } finally {
      await a2.close();
      await b2.close();
      await c2.close();
      await again.close();
    }
  });

  /** Two failed logs b and e, their entries compacted into the first file, while a writes on. */
  async function twoFailed(): Promise<{ journal: Journal; a: PartitionLog; b: PartitionLog; e: PartitionLog; roll: () => Promise<void> }> {
    const journal = await Journal.open(base, quiet, { fileBytes: 4096 });
    const a = await PartitionLog.open(join(base, 'logs', 'a~1', '0'), { ...OPTS, journal });
    const b = await PartitionLog.open(join(base, 'logs', 'b~1', '0'), { ...OPTS, journal });
    const e = await PartitionLog.open(join(base, 'logs', 'e~1', '0'), { ...OPTS, journal });
    await journal.endRecovery();
    for (let i = 0; i < 5; i++) await b.append([{ key: null, value: value('b', i) }]);
    await b.flush();
    for (let i = 5; i < 10; i++) await b.append([{ key: null, value: value('b', i) }]);
    for (let i = 0; i < 5; i++) await e.append([{ key: null, value: value('e', i) }]);
    failing.on = true;
    await b.flush().catch(() => {});
    await e.flush().catch(() => {});
    failing.on = false;
    expect(b.failed && e.failed).toBe(true);
    let n = 0;
    const roll = async () => {
      for (let i = 0; i < 200; i++, n++) {
        await a.append([{ key: null, value: value('a', n) }]);
        if (i % 20 === 19) await a.flush();
      }
      await a.flush();
      await until(() => journal.fileCount <= 3, 10_000, 'the files a no longer needs to go');
    };
    await roll();
    return { journal, a, b, e, roll };
  }

  const afterCrash = (logs: PartitionLog[], journal: Journal, check: (b: PartitionLog, e: PartitionLog) => Promise<void>) =>
    afterCrashOf(logs, journal, ['a', 'b', 'e'], ([, b2, e2]) => check(b2!, e2!));

  it('one of two failed logs released after their entries were compacted: its reset stays, its old records do not come back', async () => {
    const { journal, a, b, e, roll } = await twoFailed();
    // No longer a replica here: a reset, its failure cleared; then written again.
    await b.release();
    expect(b.failed).toBe(false);
    for (let i = 0; i < 2; i++) await b.append([{ key: null, value: value('n', i) }]);
    await b.flush();
    await roll();
    await afterCrash([a, b, e], journal, async (b2, e2) => {
      expect(await values(b2)).toEqual(['n-0', 'n-1']);
      expect(await values(e2)).toEqual(Array.from({ length: 5 }, (_, i) => `e-${i}`));
    });
  });

  it('one of two failed logs truncated after their entries were compacted: the truncated records stay gone', async () => {
    const { journal, a, b, e, roll } = await twoFailed();
    await b.truncateTo(3);
    await roll();
    await afterCrash([a, b, e], journal, async (b2, e2) => {
      expect(await values(b2)).toEqual(['b-0', 'b-1', 'b-2']);
      expect(await values(e2)).toEqual(Array.from({ length: 5 }, (_, i) => `e-${i}`));
    });
  });

  it("a compaction's copy that a crash left behind is deleted at open; the journal files beside it are read", async () => {
    const jdir = join(base, JOURNAL_DIR);
    await mkdir(jdir, { recursive: true });
    await writeFile(join(jdir, '0000000000000003.journal.tmp'), 'half a copy');
    await writeFile(join(jdir, 'notes.txt'), 'not the journal');
    const j = await Journal.open(base, quiet);
    expect((await readdir(jdir)).sort()).toEqual(['notes.txt']);
    await j.endRecovery(false);
  });

  it('a later segment pass of the failed log that succeeds lets go of none of its entries (Linux reports a write-back error once)', async () => {
    const journal = await Journal.open(base, quiet, { fileBytes: 4096 });
    const a = await PartitionLog.open(join(base, 'logs', 'a~1', '0'), { ...OPTS, journal });
    const b = await PartitionLog.open(join(base, 'logs', 'b~1', '0'), { ...OPTS, journal });
    await journal.endRecovery();
    for (let i = 0; i < 5; i++) await b.append([{ key: null, value: value('b', i) }]);
    // A segment pass whose fdatasync is held, then fails; an append is acknowledged meanwhile (the journal's write).
    failing.hold = true;
    failing.on = true;
    b.requestSegmentSync();
    await until(() => failing.held.length > 0, 5_000, 'the segment pass');
    await b.append([{ key: null, value: value('b', 5) }]);
    failing.hold = false;
    for (const run of failing.held.splice(0)) run();
    await until(() => b.failed, 5_000, 'b failed');
    failing.on = false;
    // b's segment is dirty (that append): the next pass would succeed, and it released the journal's entries.
    b.requestSegmentSync();
    for (let i = 0; i < 200; i++) {
      await a.append([{ key: null, value: value('a', i) }]);
      if (i % 20 === 19) await a.flush();
    }
    await a.flush();
    await afterCrashOf([a, b], journal, ['a', 'b'], async ([a2, b2]) => {
      expect(await values(b2!)).toEqual(Array.from({ length: 6 }, (_, i) => `b-${i}`));
      expect((await values(a2!)).length).toBe(200);
    });
  });

  it('a failed log truncated, then truncated again and failing at it, does not hold every later file', async () => {
    const journal = await Journal.open(base, quiet, { fileBytes: 4096 });
    const a = await PartitionLog.open(join(base, 'logs', 'a~1', '0'), { ...OPTS, journal });
    const b = await PartitionLog.open(join(base, 'logs', 'b~1', '0'), { ...OPTS, journal });
    await journal.endRecovery();
    for (let i = 0; i < 5; i++) await b.append([{ key: null, value: value('b', i) }]);
    await b.flush();
    for (let i = 5; i < 10; i++) await b.append([{ key: null, value: value('b', i) }]);
    failing.on = true;
    await b.flush().catch(() => {});
    failing.on = false;
    expect(b.failed).toBe(true);
    await b.truncateTo(4);
    // This one's truncate entry is durable, then its fsync fails: no reset follows it.
    failing.on = true;
    await expect(b.truncateTo(2)).rejects.toThrow();
    failing.on = false;
    for (let i = 0; i < 200; i++) {
      await a.append([{ key: null, value: value('a', i) }]);
      if (i % 20 === 19) await a.flush();
    }
    await a.flush();
    await until(() => journal.fileCount <= 3, 10_000, 'the files a no longer needs to go');
    await afterCrashOf([a, b], journal, ['a', 'b'], async ([a2, b2]) => {
      expect(await values(b2!)).toEqual(['b-0', 'b-1']);
      expect((await values(a2!)).length).toBe(200);
    });
  });

  it('a failed log whose release cannot move its files away stays failed for the journal', async () => {
    const journal = await Journal.open(base, quiet, { fileBytes: 4096 });
    const a = await PartitionLog.open(join(base, 'logs', 'a~1', '0'), { ...OPTS, journal });
    const b = await PartitionLog.open(join(base, 'logs', 'b~1', '0'), { ...OPTS, journal });
    await journal.endRecovery();
    for (let i = 0; i < 5; i++) await b.append([{ key: null, value: value('b', i) }]);
    failing.on = true;
    await b.flush().catch(() => {});
    failing.on = false;
    expect(b.failed).toBe(true);
    // The release's reset is durable, then its directory cannot be moved: still failed.
    renames.fail = true;
    await expect(b.release()).rejects.toThrow(/could not release/);
    renames.fail = false;
    expect(b.failed).toBe(true);
    // A truncation whose entry is durable, then failing: no reset after it.
    failing.on = true;
    await expect(b.truncateTo(2)).rejects.toThrow();
    failing.on = false;
    for (let i = 0; i < 200; i++) {
      await a.append([{ key: null, value: value('a', i) }]);
      if (i % 20 === 19) await a.flush();
    }
    await a.flush();
    await until(() => journal.fileCount <= 3, 10_000, 'the files a no longer needs to go');
    await a.close();
    await b.close().catch(() => {});
    await journal.close();
  });
});

/**
 * A journaled log that failed (a segment fsync failed: appends refused until a restart) keeps the journal
 * entries its restart replays (storage/journal.ts logFailed, journal-compact.ts), and only those: the files
 * written after them, full of other logs' entries their segment fsyncs cover, go as before. It held every
 * later file until the restart, so the journal grew by a file size again and again.
 */
import { mkdir, readdir, stat, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import pino from 'pino';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { JOURNAL_DIR, Journal } from 'tributary-broker/storage/journal.js';
import { simulateCrash } from 'tributary-broker/storage/log-test-hooks.js';
import { LogTicker } from 'tributary-broker/storage/log-ticker.js';
import { type LogOptions, PartitionLog } from 'tributary-broker/storage/partition-log.js';
import { removeDir, tempDir, until } from '../../helpers/util.js';
import { resetFailing } from '../../helpers/failing-fdatasync.js';

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
  resetFailing(failing);
});
afterEach(async () => {
  resetFailing(failing);
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

/** A journal (files of 4 KiB) and journaled logs named `names`, opened as a broker starts. */
async function openJournaled(...names: string[]): Promise<{ journal: Journal; logs: PartitionLog[] }> {
  const journal = await Journal.open(base, quiet, { fileBytes: 4096 });
  const logs: PartitionLog[] = [];
  for (const name of names) logs.push(await PartitionLog.open(join(base, 'logs', `${name}~1`, '0'), { ...OPTS, journal }));
  await journal.endRecovery();
  return { journal, logs };
}

/** `log`'s segment fsync fails: it refuses appends until a restart, its segment cut back to its last fsync. */
async function failFsync(log: PartitionLog): Promise<void> {
  failing.on = true;
  await log.flush().catch(() => {});
  failing.on = false;
  expect(log.failed).toBe(true);
}

/** `log` writes 200 records (several journal files' worth), fsyncing now and then; then the files it no longer needs go. */
async function writeFiles(journal: Journal, log: PartitionLog, tag = 'a', from = 0): Promise<void> {
  for (let i = from; i < from + 200; i++) {
    await log.append([{ key: null, value: value(tag, i) }]);
    if (i % 20 === 19) await log.flush();
  }
  await log.flush();
  await until(() => journal.fileCount <= 3, 10_000, 'the files no healthy log needs to go');
}

describe('a journaled log that failed', () => {
  it('keeps its own entries for the restart, not every journal file written after them', async () => {
    const { journal, logs } = await openJournaled('a', 'b', 'c');
    const [a, b, c] = logs as [PartitionLog, PartitionLog, PartitionLog];
    // Entries of both in the first file.
    for (let i = 0; i < 10; i++) await a.append([{ key: null, value: value('a', i) }]);
    for (let i = 0; i < 5; i++) await b.append([{ key: null, value: value('b', i) }]);
    await failFsync(b);
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
    // Another log's writes roll the journal past a's truncation; every full file goes but the ones holding
    // b's entries, which hold only those.
    await writeFiles(journal, c, 'd');
    expect((await readdir(join(base, JOURNAL_DIR))).filter((n) => n.endsWith('.journal')).length).toBeLessThanOrEqual(3);
    // A crash: b's acknowledged records come back from the journal; a's are all in its segments.
    await afterCrashOf(logs, journal, ['a', 'b', 'c'], async ([a2, b2, c2]) => {
      expect(await values(b2!)).toEqual(Array.from({ length: 5 }, (_, i) => `b-${i}`));
      expect(await values(a2!)).toEqual(['a-0', 'a-1', 'c-0', 'c-1', 'c-2']);
      expect(await values(c2!)).toEqual(Array.from({ length: 200 }, (_, i) => `d-${i}`));
    });
  });

  /** Two failed logs b and e, their entries compacted into the first file, while a writes on. */
  async function twoFailed(): Promise<{ journal: Journal; logs: PartitionLog[]; b: PartitionLog; roll: () => Promise<void> }> {
    const { journal, logs } = await openJournaled('a', 'b', 'e');
    const [a, b, e] = logs as [PartitionLog, PartitionLog, PartitionLog];
    for (let i = 0; i < 5; i++) await b.append([{ key: null, value: value('b', i) }]);
    await b.flush();
    for (let i = 5; i < 10; i++) await b.append([{ key: null, value: value('b', i) }]);
    for (let i = 0; i < 5; i++) await e.append([{ key: null, value: value('e', i) }]);
    await failFsync(b);
    await failFsync(e);
    let n = 0;
    const roll = async () => {
      await writeFiles(journal, a, 'a', n);
      n += 200;
    };
    await roll();
    return { journal, logs, b, roll };
  }

  const eIntact = async (e2: PartitionLog) => expect(await values(e2)).toEqual(Array.from({ length: 5 }, (_, i) => `e-${i}`));

  it('one of two failed logs released after their entries were compacted: its reset stays, its old records do not come back', async () => {
    const { journal, logs, b, roll } = await twoFailed();
    // No longer a replica here: a reset, its failure cleared; then written again.
    await b.release();
    expect(b.failed).toBe(false);
    for (let i = 0; i < 2; i++) await b.append([{ key: null, value: value('n', i) }]);
    await b.flush();
    await roll();
    await afterCrashOf(logs, journal, ['a', 'b', 'e'], async ([, b2, e2]) => {
      expect(await values(b2!)).toEqual(['n-0', 'n-1']);
      await eIntact(e2!);
    });
  });

  it('one of two failed logs truncated after their entries were compacted: the truncated records stay gone', async () => {
    const { journal, logs, b, roll } = await twoFailed();
    await b.truncateTo(3);
    await roll();
    await afterCrashOf(logs, journal, ['a', 'b', 'e'], async ([, b2, e2]) => {
      expect(await values(b2!)).toEqual(['b-0', 'b-1', 'b-2']);
      await eIntact(e2!);
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
    const { journal, logs } = await openJournaled('a', 'b');
    const [a, b] = logs as [PartitionLog, PartitionLog];
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
    // b's segment is dirty (that append): the next pass succeeds, and released the journal's entries.
    b.requestSegmentSync();
    await writeFiles(journal, a);
    await afterCrashOf(logs, journal, ['a', 'b'], async ([a2, b2]) => {
      expect(await values(b2!)).toEqual(Array.from({ length: 6 }, (_, i) => `b-${i}`));
      expect((await values(a2!)).length).toBe(200);
    });
  });

  /** A journaled log b with 10 acknowledged records, 5 of them fsynced: `durable` is its segment file's size then. */
  async function withUnsyncedRecords(): Promise<{ journal: Journal; b: PartitionLog; file: string; durable: number }> {
    const { journal, logs } = await openJournaled('b');
    const b = logs[0]!;
    for (let i = 0; i < 5; i++) await b.append([{ key: null, value: value('b', i) }]);
    await b.flush();
    const dir = join(base, 'logs', 'b~1', '0');
    const file = join(dir, (await readdir(dir)).find((n) => n.endsWith('.log')) as string);
    const durable = (await stat(file)).size;
    // Acknowledged through the journal; the segment holds them unsynced.
    for (let i = 5; i < 10; i++) await b.append([{ key: null, value: value('b', i) }]);
    return { journal, b, file, durable };
  }

  it('a truncation whose fsync fails cuts the log back to its last good fsync, and the restart replays the rest', async () => {
    const { journal, b, file, durable } = await withUnsyncedRecords();
    failing.on = true;
    await expect(b.truncateTo(7)).rejects.toThrow();
    failing.on = false;
    expect(b.failed).toBe(true);
    // Records 5 and 6 were in pages the disk may have lost: a restart on this machine would read them as
    // there and skip their journal entries.
    await until(async () => (await stat(file)).size === durable, 5_000, 'the cut back to the last good fsync');
    await afterCrashOf([b], journal, ['b'], async ([b2]) => {
      const got = await values(b2!);
      expect(got.slice(0, 7)).toEqual(Array.from({ length: 7 }, (_, i) => `b-${i}`));
    });
  });

  it("a segment pass asked for during a truncation does not fsync the kept segment beside the truncation's own fsync", async () => {
    const { journal, b } = await withUnsyncedRecords();
    failing.hold = true;
    const truncating = b.truncateTo(7);
    await until(() => failing.held.length === 1, 5_000, "the truncation's fsync");
    // The flush timer or the fd budget asks for a segment pass meanwhile.
    b.requestSegmentSync();
    failing.hold = false;
    if (failing.held.length === 2) {
      // The pass fsyncs the same file: it hears of the write-back error, the truncation's fsync "succeeds"
      // (Linux reports an error to one fsync only), and the truncation's journal reset drops records 5 and 6.
      failing.on = true;
      failing.held.pop()!();
      failing.on = false;
    }
    failing.held.shift()!();
    await truncating.catch(() => {});
    await afterCrashOf([b], journal, ['b'], async ([b2]) => {
      expect(await values(b2!)).toEqual(Array.from({ length: 7 }, (_, i) => `b-${i}`));
    });
  });

  it('a close whose fsync fails cuts the log back to its last good fsync, and the restart replays the rest', async () => {
    const { journal, b, file, durable } = await withUnsyncedRecords();
    failing.on = true;
    await expect(b.close()).rejects.toThrow(/close failed/);
    failing.on = false;
    expect((await stat(file)).size).toBe(durable);
    // Closed already: the journal's crash and the restart.
    await afterCrashOf([], journal, ['b'], async ([b2]) => {
      expect(await values(b2!)).toEqual(Array.from({ length: 10 }, (_, i) => `b-${i}`));
    });
  });

  /** b failed with 10 records (5 fsynced), then `before` (a truncation, a release), then a truncation of b to 2 whose entry is durable and whose fsync fails: no reset after it. */
  async function failedTruncation(before: (b: PartitionLog) => Promise<void>): Promise<{ journal: Journal; logs: PartitionLog[] }> {
    const { journal, logs } = await openJournaled('a', 'b');
    const [a, b] = logs as [PartitionLog, PartitionLog];
    for (let i = 0; i < 5; i++) await b.append([{ key: null, value: value('b', i) }]);
    await b.flush();
    for (let i = 5; i < 10; i++) await b.append([{ key: null, value: value('b', i) }]);
    await failFsync(b);
    await before(b);
    expect(b.failed).toBe(true);
    failing.on = true;
    await expect(b.truncateTo(2)).rejects.toThrow();
    failing.on = false;
    // Without b counting as failed, its truncation's entry held every later file.
    await writeFiles(journal, a);
    return { journal, logs };
  }

  it('a failed log truncated, then truncated again and failing at it, does not hold every later file', async () => {
    const { journal, logs } = await failedTruncation((b) => b.truncateTo(4));
    await afterCrashOf(logs, journal, ['a', 'b'], async ([a2, b2]) => {
      expect(await values(b2!)).toEqual(['b-0', 'b-1']);
      expect((await values(a2!)).length).toBe(200);
    });
  });

  it('a failed log whose release cannot move its files away stays failed for the journal', async () => {
    const { journal, logs } = await failedTruncation(async (b) => {
      // The release's reset is durable, then its directory cannot be moved: still failed.
      renames.fail = true;
      await expect(b.release()).rejects.toThrow(/could not release/);
      renames.fail = false;
    });
    for (const l of logs) await l.close().catch(() => {});
    await journal.close();
  });

  it('a segment pass asked for while the failing one ran does not stop the cut back to the last good fsync', async () => {
    const journal = await Journal.open(base, quiet, { fileBytes: 4096 });
    const dir = join(base, 'logs', 'a~1', '0');
    // No flush tick: the test asks for each pass.
    const a = await PartitionLog.open(dir, { ...OPTS, journal, ticker: new LogTicker(3_600_000) });
    await journal.endRecovery();
    await a.append([{ key: null, value: value('r', 0) }]);
    await a.flush();
    const file = join(dir, (await readdir(dir)).find((n) => n.endsWith('.log')) as string);
    const durable = (await stat(file)).size;
    await a.append([{ key: null, value: value('r', 1) }]);
    failing.hold = true;
    a.requestSegmentSync();
    await until(() => failing.held.length > 0, 5_000, 'the segment pass');
    // Acknowledged through the journal while the pass runs, and another pass asked for.
    await a.append([{ key: null, value: value('r', 2) }]);
    a.requestSegmentSync();
    failing.hold = false;
    failing.on = true;
    for (const run of failing.held.splice(0)) run();
    // Only the held fsync fails: a later one "succeeds" (Linux reports a write-back error once).
    failing.on = false;
    await until(() => a.failed, 5_000, 'a failed');
    // A second pass's fsync raised what the cut keeps to, and the file kept pages the disk lost.
    await until(async () => (await stat(file)).size === durable, 5_000, 'the cut back to the last good fsync');
    await afterCrashOf([a], journal, ['a'], async ([a2]) => {
      expect(await values(a2!)).toEqual(['r-0', 'r-1', 'r-2']);
    });
  });
});

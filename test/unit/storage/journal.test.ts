/**
 * The broker's journal (storage/journal.ts, journal-replay.ts; docs/architecture.md "The journal"): under
 * flush=always an append is acknowledged once the journal's fdatasync covers it, and the segments are
 * fsynced later. A power loss may then take any unsynced tail of the active segment: the log must still
 * hold every acknowledged record, in order, after the journal is replayed, truncations and releases
 * included; and journal files go once every log has fsynced its segments since.
 */
import { readdir, readFile, stat, truncate, unlink, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import fc from 'fast-check';
import pino from 'pino';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { encodeBatch, scanBatch } from 'tributary-protocol/batch.js';
import { decodeEntries, encodeReset, encodeTruncate, encodeWrite, journalKey } from 'tributary-broker/storage/journal-format.js';
import { FdBudget } from 'tributary-broker/storage/fd-budget.js';
import { JOURNAL_DIR, Journal } from 'tributary-broker/storage/journal.js';
import { LogTicker } from 'tributary-broker/storage/log-ticker.js';
import { type LogOptions, PartitionLog } from 'tributary-broker/storage/partition-log.js';
import { simulateCrash } from 'tributary-broker/storage/log-test-hooks.js';
import { ATTR_END_OF_APPEND } from 'tributary-broker/storage/record-codec.js';
import { INDEX_SUFFIX, LOG_SUFFIX, segmentFileName } from 'tributary-broker/storage/segment-names.js';
import { removeDir, tempDir } from '../../helpers/util.js';

const quiet = pino({ level: 'silent' });
let base: string;
let dir: string;
beforeEach(async () => {
  base = await tempDir('trib-journal-');
  dir = join(base, 'logs', 't~1', '0');
});
afterEach(async () => {
  await removeDir(base);
});

const concat = (pieces: Buffer[]) => Buffer.concat(pieces);

describe('journal entries', () => {
  const entries = () =>
    concat([
      ...encodeWrite(journalKey('logs/a~1/0'), 0, 0, 2, 3, [Buffer.from('abc'), Buffer.from('defgh')]),
      ...encodeTruncate(journalKey('logs/a~1/0'), 1),
      ...encodeReset(journalKey('logs/b~2/3')),
      ...encodeWrite(journalKey('logs/a~1/0'), 1, 1, 1, 1, [Buffer.from('x'.repeat(40))]),
    ]);

  it('decode what was encoded', () => {
    const { entries: got, end } = decodeEntries(entries());
    expect(end).toBe(entries().length);
    expect(got.map((e) => ({ ...e, bytes: 'bytes' in e ? e.bytes.toString() : undefined }))).toEqual([
      { kind: 'write', key: 'logs/a~1/0', from: 0, first: 0, last: 2, count: 3, bytes: 'abcdefgh' },
      { kind: 'truncate', key: 'logs/a~1/0', offset: 1, bytes: undefined },
      { kind: 'reset', key: 'logs/b~2/3', bytes: undefined },
      { kind: 'write', key: 'logs/a~1/0', from: 1, first: 1, last: 1, count: 1, bytes: 'x'.repeat(40) },
    ]);
  });

  it('read up to an entry cut anywhere, or with any byte of the last two flipped', () => {
    const all = entries();
    const ends = [0];
    for (let p = 0; p < all.length; p += 8 + all.readUInt32BE(p)) ends.push(p + 8 + all.readUInt32BE(p));
    const whole = (n: number) => ends.filter((e) => e <= n).length - 1;
    for (let cut = 0; cut <= all.length; cut++) {
      const { entries: got, end } = decodeEntries(all.subarray(0, cut));
      expect(got.length).toBe(whole(cut));
      expect(end).toBe(ends[whole(cut)]);
    }
    const firstOfLastTwo = ends[ends.length - 3] as number;
    for (let i = firstOfLastTwo; i < all.length; i++) {
      const bad = Buffer.from(all);
      bad[i] ^= 0x5a;
      const { entries: got } = decodeEntries(bad);
      // The flipped entry and everything after it are dropped.
      expect(got.length).toBe(i < (ends[ends.length - 2] as number) ? ends.length - 3 : ends.length - 2);
    }
  });
});

const OPTS: Partial<LogOptions> = { flush: 'always', segmentBytes: 4096, indexIntervalBytes: 512, tailCacheBytes: 0 };

/** Opens a journal and the log over it, as a broker starts: the log replays, then the journal takes writes. */
async function start(opts: Partial<LogOptions> = {}, jopts: { fileBytes?: number } = {}): Promise<{ journal: Journal; log: PartitionLog }> {
  const journal = await Journal.open(base, quiet, jopts);
  const log = await PartitionLog.open(dir, { ...OPTS, ...opts, journal });
  await journal.endRecovery();
  return { journal, log };
}

/** start() again after a crash or close, runs `check` on it, and closes both however `check` ends. */
async function restarted(opts: Partial<LogOptions>, check: (again: { journal: Journal; log: PartitionLog }) => Promise<void>): Promise<void> {
  const again = await start(opts);
  try {
    await check(again);
  } finally {
    await again.log.close();
    await again.journal.close();
  }
}

/** A crash of the machine: the process stops, then the active segment keeps `keep` (0..1) of what no segment fsync covered. */
async function powerLoss(journal: Journal, log: PartitionLog, keep: number, durableSizes: Map<string, number>): Promise<void> {
  await simulateCrash(log);
  await journal.close();
  const names = (await readdir(dir)).filter((n) => n.endsWith(LOG_SUFFIX)).sort();
  for (const n of names) {
    const size = (await stat(join(dir, n))).size;
    const durable = durableSizes.get(n) ?? 0;
    if (size > durable) await truncate(join(dir, n), durable + Math.floor((size - durable) * keep));
  }
  for (const n of await readdir(dir)) if (n.endsWith(INDEX_SUFFIX)) await unlink(join(dir, n));
}

async function readAll(log: PartitionLog): Promise<string[]> {
  const recs = await log.read(log.logStartOffset, { maxRecords: 100_000, maxBytes: 1 << 26 });
  return recs.map((r) => `${r.offset}:${r.value?.toString()}`);
}

const value = (i: number, gen = 0) => Buffer.from(`v${gen}-${i}-${'x'.repeat(i % 50)}`);

describe('replay after a power loss', () => {
  it('the log holds every acknowledged append, however much of the unsynced tail the disk kept', async () => {
    await fc.assert(
      fc.asyncProperty(fc.array(fc.integer({ min: 1, max: 9 }), { minLength: 1, maxLength: 40 }), fc.double({ min: 0, max: 1, noNaN: true }), async (sizes, keep) => {
        await removeDir(base);
        const { journal, log } = await start();
        const expected: string[] = [];
        let i = 0;
        for (const n of sizes) {
          const r = await log.append(Array.from({ length: n }, (_, j) => ({ key: null, value: value(i + j) })));
          for (let j = 0; j < n; j++) expected.push(`${r.baseOffset + j}:${value(i + j).toString()}`);
          i += n;
        }
        // Closed segments were fsynced at their roll; the active one never was.
        const active = log.segmentInfos().at(-1)?.baseOffset ?? 0;
        const durable = new Map<string, number>();
        for (const s of log.segmentInfos()) if (s.baseOffset !== active) durable.set(segmentFileName(s.baseOffset, LOG_SUFFIX), s.sizeBytes);
        await powerLoss(journal, log, keep, durable);
        await restarted({}, async (again) => {
        expect(await readAll(again.log)).toEqual(expected);
        expect(again.log.logEndOffset).toBe(i);
        });
      }),
      { numRuns: 25 },
    );
  });

  it('replays blocks written in place and truncations, so the truncated records stay gone', async () => {
    const { journal, log } = await start({ storedLayout: 'blocks', segmentBytes: 1 << 20 });
    const frame = (from: number, n: number, gen: number) => {
      const records = Array.from({ length: n }, (_, j) => ({
        key: null,
        value: Buffer.from(`${value(from + j, gen).toString()}${'p'.repeat(300)}`),
        timestamp: 0,
        headers: [],
        offset: 0,
        sequence: 0,
        producerId: '',
        epoch: 0,
        attributes: 0,
      }));
      const frame = encodeBatch({ topic: 't', partition: 0, acks: '1', idempotent: false, firstSequence: 0, lastSequence: 0, records }, { extensions: true });
      const own = Buffer.allocUnsafeSlow(frame.length);
      frame.copy(own);
      return scanBatch(own, { extensions: true, request: true });
    };
    await log.appendWire(frame(0, 20, 0));
    await log.appendWire(frame(20, 20, 0));
    await log.truncateTo(25);
    // A truncation fsyncs what it keeps: only what came after it may be lost.
    const kept = new Map(log.segmentInfos().map((i) => [segmentFileName(i.baseOffset, LOG_SUFFIX), i.sizeBytes]));
    await log.appendWire(frame(25, 10, 1));
    await powerLoss(journal, log, 0, kept);
    await restarted({ storedLayout: 'blocks', segmentBytes: 1 << 20 }, async (again) => {
    const got = await readAll(again.log);
    expect(got.length).toBe(35);
    expect(got.slice(0, 25).every((s, k) => s.startsWith(`${k}:v0-${k}-`))).toBe(true);
    expect(got.slice(25).every((s, k) => s.startsWith(`${25 + k}:v1-${25 + k}-`))).toBe(true);
    });
  });

  it('does not bring back the records of a released log', async () => {
    const { journal, log } = await start();
    await log.append([{ key: null, value: value(1) }, { key: null, value: value(2) }]);
    await log.release();
    await log.append([{ key: null, value: value(3, 1) }]);
    await powerLoss(journal, log, 0, new Map());
    await restarted({}, async (again) => {
    expect(await readAll(again.log)).toEqual([`0:${value(3, 1).toString()}`]);
    });
  });

  it('an entry cut short at the end of the journal was never acknowledged: replay stops before it', async () => {
    const { journal, log } = await start();
    await log.append([{ key: null, value: value(1) }]);
    await log.append([{ key: null, value: value(2) }]);
    await powerLoss(journal, log, 0, new Map());
    const jdir = join(base, JOURNAL_DIR);
    const [file] = (await readdir(jdir)).sort();
    const bytes = await readFile(join(jdir, file as string));
    await writeFile(join(jdir, file as string), bytes.subarray(0, bytes.length - 3));
    await restarted({}, async (again) => {
    expect(await readAll(again.log)).toEqual([`0:${value(1).toString()}`]);
    });
  });
});

describe('replay refuses, or keeps out, what it must not apply', () => {
  it('a damaged journal file with later files after it refuses the open (acknowledged entries lost), naming it', async () => {
    const { journal, log } = await start({}, { fileBytes: 600 });
    for (let i = 0; i < 20; i++) await log.append([{ key: null, value: value(i) }]);
    await powerLoss(journal, log, 1, new Map());
    const jdir = join(base, JOURNAL_DIR);
    const files = (await readdir(jdir)).sort();
    expect(files.length).toBeGreaterThan(2);
    const first = join(jdir, files[0] as string);
    const bytes = await readFile(first);
    bytes[bytes.length - 5] ^= 0xff;
    await writeFile(first, bytes);
    await expect(Journal.open(base, quiet)).rejects.toThrow(new RegExp(`journal file ${files[0]} is damaged`));
  });

  it('a write made on a longer log than recovery found refuses the open instead of leaving a gap', async () => {
    const { journal, log } = await start({}, { fileBytes: 300 });
    for (let i = 0; i < 10; i++) await log.append([{ key: null, value: value(i) }]);
    // The segments are fsynced, and the journal files with the first entries go.
    await log.flush();
    // Segments fsynced up to 10; what follows is journaled only.
    await log.append([{ key: null, value: value(10) }]);
    await simulateCrash(log);
    await journal.close();
    // Damage the fsynced part: recovery now cuts the log below 10.
    const [seg] = (await readdir(dir)).filter((n) => n.endsWith(LOG_SUFFIX));
    await truncate(join(dir, seg as string), 40);
    const j = await Journal.open(base, quiet);
    await expect(PartitionLog.open(dir, { ...OPTS, journal: j })).rejects.toThrow(/records \d+\.\.\d+ are missing/);
  });

  it('after a truncation, retention and a clean restart, the records retention removed stay removed', async () => {
    const { journal, log } = await start({ segmentBytes: 300 });
    for (let i = 0; i < 30; i++) await log.append([{ key: null, value: value(i) }]);
    await log.truncateTo(3);
    for (let i = 3; i < 40; i++) await log.append([{ key: null, value: value(i, 1) }]);
    // Retention deletes only below the HWM.
    log.setHighWatermark(log.logEndOffset);
    log.setRetention({ retentionMs: -1, retentionBytes: 600 });
    await log.applyRetention(Date.now());
    const start0 = log.logStartOffset;
    expect(start0).toBeGreaterThan(3);
    const expected = await readAll(log);
    await log.close();
    await journal.close();
    await restarted({ segmentBytes: 300 }, async (again) => {
    expect(again.log.logStartOffset).toBe(start0);
    expect(await readAll(again.log)).toEqual(expected);
    });
  });

  it("replays a compacted leader's appends with gaps between them, from the first the log lacks", async () => {
    const { journal, log } = await start();
    const rec = (offset: number) => ({ offset, timestamp: 1_700_000_000_000 + offset, key: null, value: value(offset), headers: [], producerId: '', epoch: -1, sequence: -1, attributes: ATTR_END_OF_APPEND });
    await log.appendReplica([rec(0), rec(5), rec(10)]);
    const size = (await stat(join(dir, segmentFileName(0, LOG_SUFFIX)))).size;
    await simulateCrash(log);
    await journal.close();
    // The disk kept the first record only (a cut inside the second).
    const firstLen = (await readFile(join(dir, segmentFileName(0, LOG_SUFFIX)))).readUInt32BE(0) + 4;
    expect(firstLen).toBeLessThan(size);
    await truncate(join(dir, segmentFileName(0, LOG_SUFFIX)), firstLen + 7);
    await restarted({}, async (again) => {
    expect((await readAll(again.log)).map((r) => Number(r.split(':')[0]))).toEqual([0, 5, 10]);
    });
  });
});

describe('journal files', () => {
  it('go once every log with entries in them fsynced its segments', async () => {
    const { journal, log } = await start({}, { fileBytes: 2048 });
    for (let i = 0; i < 40; i++) await log.append([{ key: null, value: value(i) }]);
    const jdir = join(base, JOURNAL_DIR);
    const before = (await readdir(jdir)).length;
    expect(before).toBeGreaterThan(2);
    expect(journal.fileCount).toBe(before);
    await log.flush();
    // The current file stays; every full one went.
    expect(journal.fileCount).toBe(1);
    expect((await readdir(jdir)).length).toBe(1);
    await log.close();
    await journal.close();
  });

  it('journaled logs sharing a small fd budget all take appends: the budget asks for the fsync that frees a file', async () => {
    const journal = await Journal.open(base, quiet);
    await journal.endRecovery();
    // No overflow past the bound, and a flush timer that never fires within the test.
    const fdBudget = new FdBudget(4);
    const ticker = new LogTicker(3_600_000);
    const logs: PartitionLog[] = [];
    try {
      for (let i = 0; i < 12; i++) logs.push(await PartitionLog.open(join(base, 'logs', 't~1', String(i)), { ...OPTS, journal, fdBudget, ticker }));
      for (let round = 0; round < 3; round++) await Promise.all(logs.map((l, i) => l.append([{ key: null, value: value(round * 100 + i) }])));
      expect(logs.map((l) => l.logEndOffset)).toEqual(logs.map(() => 3));
      expect(fdBudget.open).toBeLessThanOrEqual(4);
    } finally {
      for (const l of logs) await l.close();
      await journal.close();
    }
  }, 20_000);

  it('a clean restart finds nothing to replay and keeps every record', async () => {
    const { journal, log } = await start();
    for (let i = 0; i < 30; i++) await log.append([{ key: null, value: value(i) }]);
    const expected = await readAll(log);
    await log.close();
    await journal.close();
    await restarted({}, async (again) => {
    expect(await readAll(again.log)).toEqual(expected);
    expect((await readdir(join(base, JOURNAL_DIR))).length).toBe(1);
    });
  });
});

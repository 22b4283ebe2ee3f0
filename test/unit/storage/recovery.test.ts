import { appendFile, mkdir, readdir, readFile, rmdir, stat, unlink, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { pino } from 'pino';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { RecordInput } from 'tributary-protocol/record.js';
import { CLEAN_SHUTDOWN_FILE, type LogOptions, PartitionLog } from 'tributary-broker/storage/partition-log.js';
import { simulateCrash } from 'tributary-broker/storage/log-test-hooks.js';
import { decodeRecords } from 'tributary-broker/storage/record-codec.js';
import { INDEX_SUFFIX, LOG_SUFFIX, segmentFileName } from 'tributary-broker/storage/segment-names.js';
import { removeDir, tempDir } from '../../helpers/util.js';

let dir: string;

beforeEach(async () => {
  dir = await tempDir('trib-recovery-');
});
afterEach(async () => {
  await removeDir(dir);
});

const OPTS: Partial<LogOptions> = { flush: 'os', segmentBytes: 700, indexIntervalBytes: 64, tailCacheBytes: 0 };

function rec(i: number): RecordInput {
  return {
    key: i % 4 === 0 ? null : Buffer.from(`k${i}`),
    value: Buffer.from(`payload-${i}-${'z'.repeat((i * 7) % 23)}`),
    headers: i % 3 === 0 ? [{ key: 'trace', value: Buffer.from(`t${i}`) }] : [],
    producerId: i % 2 ? 'p-1' : '',
    epoch: i % 2 ? 4 : -1,
    sequence: i % 2 ? i : -1,
  };
}

async function checkLog(log: PartitionLog, count: number): Promise<void> {
  expect(log.logEndOffset).toBe(count);
  const got = count ? await log.read(0, { maxRecords: 1000, maxBytes: 1 << 20 }) : [];
  expect(got).toHaveLength(count);
  got.forEach((r, i) => {
    expect(r.offset).toBe(i);
    expect(r.value.toString()).toBe(`payload-${i}-${'z'.repeat((i * 7) % 23)}`);
    expect(r.key?.toString() ?? null).toBe(i % 4 === 0 ? null : `k${i}`);
    expect(r.sequence).toBe(i % 2 ? i : -1);
  });
}

function captureLogger() {
  const lines: Array<Record<string, unknown>> = [];
  const logger = pino({ level: 'warn' }, { write: (s: string) => lines.push(JSON.parse(s)) });
  return { logger, lines };
}

describe('recovery', () => {
  it('restores exactly the valid prefix for every cut in the last two records and every flip in the last; a flip in the one before refuses', async () => {
    const N = 40;
    const log = await PartitionLog.open(dir, OPTS);
    for (let i = 0; i < N; i++) await log.append([rec(i)]);
    const segs = log.segmentInfos();
    const active = segs[segs.length - 1];
    expect(segs.length).toBeGreaterThan(2);
    expect(active.nextOffset - active.baseOffset).toBeGreaterThanOrEqual(3);
    await log.close();
    await unlink(join(dir, CLEAN_SHUTDOWN_FILE)); // as if the process had died

    const logName = `${String(active.baseOffset).padStart(20, '0')}.log`;
    const indexName = logName.replace('.log', '.index');
    const logPath = join(dir, logName);
    const indexPath = join(dir, indexName);
    const original = await readFile(logPath);
    const originalIndex = await readFile(indexPath);
    const decoded = decodeRecords(original);
    expect(decoded.failure).toBeNull();
    expect(decoded.records.map((r) => r.offset).at(-1)).toBe(N - 1);
    // End position of each record of the active segment.
    const ends: number[] = [];
    {
      let p = 0;
      for (const r of decoded.records) {
        p += original.readUInt32BE(p) + 4;
        ends.push(p);
        expect(r.offset).toBe(active.baseOffset + ends.length - 1);
      }
    }
    const k = ends.length;
    const secondLastStart = ends[k - 3];

    const restore = async (bytes: Buffer) => {
      await writeFile(logPath, bytes);
      await writeFile(indexPath, originalIndex);
      for (const n of await readdir(dir)) if (n === CLEAN_SHUTDOWN_FILE) await unlink(join(dir, n));
    };
    const verify = async (validInSegment: number, what: string) => {
      const expected = active.baseOffset + validInSegment;
      const l = await PartitionLog.open(dir, OPTS);
      try {
        // The file itself is cut back to the end of the last valid record.
        expect((await stat(logPath)).size, what).toBe(validInSegment ? ends[validInSegment - 1] : 0);
        await checkLog(l, expected);
        const res = await l.append([rec(expected)]);
        expect(res.baseOffset, what).toBe(expected);
        await checkLog(l, expected + 1);
      } finally {
        await simulateCrash(l);
      }
    };
    const validBefore = (pos: number) => ends.filter((e) => e <= pos).length;
    // A valid record follows the damaged one: no torn tail, so the open is refused and the file kept.
    const refused = async (bytes: Buffer, what: string) => {
      const err = await PartitionLog.open(dir, OPTS).then(
        (l) => simulateCrash(l).then(() => null),
        (e: Error & { code?: string }) => e,
      );
      expect(err?.code, what).toBe('storage_error');
      expect(err?.message, what).toContain(`${logPath} at byte ${secondLastStart}`);
      expect(await readFile(logPath)).toEqual(bytes);
    };

    let cases = 0;
    for (let pos = secondLastStart; pos < original.length; pos++) {
      // Flip one byte: in the last record it is cut with everything after it; before it, refused.
      const flipped = Buffer.from(original);
      flipped[pos] ^= 0xff;
      await restore(flipped);
      if (pos < ends[k - 2]) await refused(flipped, `flip at ${pos}`);
      else await verify(validBefore(pos), `flip at ${pos}`);
      // Cut the file at pos: only records ending at or before pos survive.
      await restore(original.subarray(0, pos));
      await verify(validBefore(pos), `truncate at ${pos}`);
      cases += 2;
    }
    expect(cases).toBe(2 * (original.length - secondLastStart));
  }, 120_000);

  it('cuts garbage appended after valid records and logs how much and where', async () => {
    let log = await PartitionLog.open(dir, OPTS);
    for (let i = 0; i < 25; i++) await log.append([rec(i)]);
    await simulateCrash(log);
    expect((await readdir(dir)).includes(CLEAN_SHUTDOWN_FILE)).toBe(false);
    const last = (await readdir(dir)).filter((n) => n.endsWith('.log')).sort().at(-1) as string;
    const garbage = Buffer.from('this is definitely not a record, but it is 64 bytes long.......');
    await appendFile(join(dir, last), garbage);
    const { logger, lines } = captureLogger();
    const sizeBefore = (await stat(join(dir, last))).size;
    log = await PartitionLog.open(dir, OPTS, logger);
    await checkLog(log, 25);
    expect((await stat(join(dir, last))).size).toBe(sizeBefore - garbage.length);
    const warn = lines.find((l) => l.truncatedBytes !== undefined);
    expect(warn?.truncatedBytes).toBe(garbage.length);
    expect(warn?.atOffset).toBe(25);
    expect((await log.append([rec(25)])).baseOffset).toBe(25);
    await log.close();
    log = await PartitionLog.open(dir, OPTS);
    await checkLog(log, 26);
    await log.close();
  });

  it('detects a damaged tail even when the clean-shutdown marker is present', async () => {
    let log = await PartitionLog.open(dir, OPTS);
    for (let i = 0; i < 20; i++) await log.append([rec(i)]);
    await log.close();
    const last = (await readdir(dir)).filter((n) => n.endsWith('.log')).sort().at(-1) as string;
    // Garbage with a plausible length prefix, and separately a torn partial record.
    await appendFile(join(dir, last), Buffer.from([0, 0, 0, 60, 1, 2, 3]));
    log = await PartitionLog.open(dir, OPTS);
    await checkLog(log, 20);
    await log.close();
  });

  it("acknowledged appends survive a crash in 'always' mode and the marker is removed on open", async () => {
    let log = await PartitionLog.open(dir, { ...OPTS, flush: 'always' });
    await Promise.all(Array.from({ length: 50 }, (_, i) => log.append([rec(i)])));
    await log.close();
    log = await PartitionLog.open(dir, { ...OPTS, flush: 'always' });
    expect((await readdir(dir)).includes(CLEAN_SHUTDOWN_FILE)).toBe(false);
    await Promise.all(Array.from({ length: 10 }, (_, i) => log.append([rec(50 + i)])));
    await simulateCrash(log);
    log = await PartitionLog.open(dir, { ...OPTS, flush: 'always' });
    await checkLog(log, 60);
    await log.close();
  });

  it('a clean-shutdown marker that cannot be removed fails the open: no append may come while a later crash would pass for a clean stop', async () => {
    const log = await PartitionLog.open(dir, OPTS);
    await log.append([rec(0)]);
    await log.close();
    // Where the marker was, a directory: unlink fails (EISDIR), as it would on a read-only or failing disk.
    await unlink(join(dir, CLEAN_SHUTDOWN_FILE));
    await mkdir(join(dir, CLEAN_SHUTDOWN_FILE));
    const err = await PartitionLog.open(dir, OPTS).then(
      async (l) => {
        await l.close().catch(() => {});
        return 'opened';
      },
      (e: unknown) => e,
    );
    expect(err).toMatchObject({ code: 'storage_error' });
    await rmdir(join(dir, CLEAN_SHUTDOWN_FILE));
    const reopened = await PartitionLog.open(dir, OPTS);
    await checkLog(reopened, 1);
    await reopened.close();
  });

  it('a roll that fails after making its log file leaves no file: later appends, rolls and a reopen keep every acknowledged record', async () => {
    const log = await PartitionLog.open(dir, { ...OPTS, flush: 'always' });
    let n = 0;
    while (log.segmentInfos().at(-1)!.sizeBytes < 450) await log.append([rec(n++)]);
    // The roll's index file cannot be written (as on a full disk): a directory stands at its name.
    const blocker = join(dir, segmentFileName(n, INDEX_SUFFIX));
    await mkdir(blocker);
    const big: RecordInput = { key: null, value: Buffer.alloc(400, 0x62) };
    await expect(log.append([big])).rejects.toMatchObject({ code: 'storage_error' });
    expect(await readdir(dir)).not.toContain(segmentFileName(n, LOG_SUFFIX));
    await rmdir(blocker);
    // Small records still fit the old segment (past the failed roll's base), then rolls go on.
    const before = log.segmentInfos().length;
    while (log.segmentInfos().length < before + 2) await log.append([rec(n++)]);
    await simulateCrash(log);
    const reopened = await PartitionLog.open(dir, OPTS);
    try {
      await checkLog(reopened, n);
    } finally {
      await reopened.close();
    }
  });

  it('an empty segment a failed roll left below the log end is removed on open, and nothing after it is dropped', async () => {
    const log = await PartitionLog.open(dir, OPTS);
    const N = 30;
    for (let i = 0; i < N; i++) await log.append([rec(i)]);
    const segs = log.segmentInfos();
    expect(segs.length).toBeGreaterThan(3);
    await log.close();
    // Inside the first segment's offsets: where an old segment went on past a roll that failed.
    const stray = segs[0]!.baseOffset + 1;
    await writeFile(join(dir, segmentFileName(stray, LOG_SUFFIX)), '');
    const { logger, lines } = captureLogger();
    const reopened = await PartitionLog.open(dir, OPTS, logger);
    try {
      await checkLog(reopened, N);
      expect(lines.some((l) => String(l.msg).includes('empty segment left by a failed roll'))).toBe(true);
      expect(await readdir(dir)).not.toContain(segmentFileName(stray, LOG_SUFFIX));
    } finally {
      await reopened.close();
    }
  });

  it('retention deletes what is past it even when rolling the old active segment fails (a full disk)', async () => {
    const log = await PartitionLog.open(dir, { ...OPTS, retentionBytes: 0, segmentMs: 3_600_000 });
    try {
      for (let i = 0; i < 30; i++) await log.append([rec(i)]);
      log.setHighWatermark(log.logEndOffset);
      const closed = log.segmentInfos().length - 1;
      expect(closed).toBeGreaterThan(1);
      // The roll that a pass far in the future wants cannot make its index file.
      await mkdir(join(dir, segmentFileName(log.logEndOffset, INDEX_SUFFIX)));
      const res = await log.applyRetention(Date.now() + 10 * 3_600_000);
      expect(res.deletedSegments).toBe(closed);
      expect(log.segmentInfos()).toHaveLength(1);
    } finally {
      await log.close();
    }
  });

  it('recovers an empty trailing segment and an empty log', async () => {
    let log = await PartitionLog.open(dir, OPTS);
    await simulateCrash(log);
    log = await PartitionLog.open(dir, OPTS);
    await checkLog(log, 0);
    for (let i = 0; i < 3; i++) await log.append([rec(i)]);
    await log.truncateTo(0);
    await simulateCrash(log);
    log = await PartitionLog.open(dir, OPTS);
    await checkLog(log, 0);
    await log.close();
  });
});

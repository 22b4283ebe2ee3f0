/**
 * A cut by recovery after a crash under --flush interval or os (log-loader.ts) must survive a second crash
 * during that recovery: the cut segment may not vouch for itself (its index says "fsynced at this size")
 * while segments past the cut can still be on disk, or the next open takes them for missing data and refuses.
 * And a cut never takes what an fsync covered: under interval, closed segments (fsynced at their rolls).
 */
import { copyFile, mkdir, readdir, readFile, rm, truncate, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { type LogOptions, PartitionLog } from 'tributary-broker/storage/partition-log.js';
import { simulateCrash } from 'tributary-broker/storage/log-test-hooks.js';
import { INDEX_SUFFIX, LOG_SUFFIX, segmentFileName } from 'tributary-broker/storage/segment-names.js';
import { removeDir, tempDir } from '../../helpers/util.js';

let dir: string;
let saved: string;
beforeEach(async () => {
  dir = await tempDir('trib-cut-again-');
  saved = await tempDir('trib-cut-saved-');
});
afterEach(async () => {
  await removeDir(dir);
  await removeDir(saved);
});

const BASE: Partial<LogOptions> = { segmentBytes: 900, indexIntervalBytes: 1 << 16, tailCacheBytes: 0 };
const PER = 3;
const value = (i: number) => Buffer.from(`record-${i}-${'v'.repeat(10 + (i % 7))}`);
const logFile = (base: number) => join(dir, segmentFileName(base, LOG_SUFFIX));

async function writeLog(flush: LogOptions['flush']): Promise<Array<{ baseOffset: number; nextOffset: number }>> {
  const log = await PartitionLog.open(dir, { ...BASE, flush });
  for (let a = 0; a < 30; a++) await log.append(Array.from({ length: PER }, (_, j) => ({ key: null, value: value(a * PER + j) })));
  const segs = log.segmentInfos();
  expect(segs.length).toBeGreaterThan(4);
  await simulateCrash(log);
  return segs;
}

function recordStarts(buf: Buffer): number[] {
  const out: number[] = [];
  for (let p = 0; p < buf.length; p += 4 + buf.readUInt32BE(p)) out.push(p);
  return out;
}

describe('a recovery cut interrupted by a second crash', () => {
  // Under interval only the last segment is ever cut (a roll fsyncs the segment it closes): nothing follows it.
  for (const flush of ['os'] as const) {
    it(`flush=${flush}: later segments still on disk after the cut (their unlinks lost) go again at the next open`, async () => {
      const segs = await writeLog(flush);
      const mid = segs[2]!;
      const file = logFile(mid.baseOffset);
      const starts = recordStarts(await readFile(file));
      // A torn record in a closed segment whose index does not vouch for it.
      await truncate(file, starts[4]! + 9);
      await readdir(dir).then((ns) => Promise.all(ns.filter((n) => n.endsWith(INDEX_SUFFIX) && Number.parseInt(n, 10) === mid.baseOffset).map((n) => truncate(join(dir, n), 0))));
      const later = segs.filter((s) => s.baseOffset > mid.baseOffset);
      const names = later.flatMap((s) => [segmentFileName(s.baseOffset, LOG_SUFFIX), segmentFileName(s.baseOffset, INDEX_SUFFIX)]);
      for (const n of names) await copyFile(join(dir, n), join(saved, n)).catch(() => {});
      const kept = mid.baseOffset + 4 - ((mid.baseOffset + 4) % PER);
      // The recovery stops while it removes the later segments (the last one cannot be removed: a
      // directory in its place), as a crash there would; the removals before it may not be on disk either.
      const lastLog = logFile(later.at(-1)!.baseOffset);
      await rm(lastLog);
      await mkdir(lastLog);
      await expect(PartitionLog.open(dir, { ...BASE, flush })).rejects.toThrow();
      await rm(lastLog, { recursive: true });
      for (const n of names) await copyFile(join(saved, n), join(dir, n)).catch(() => {});
      const log = await PartitionLog.open(dir, { ...BASE, flush });
      try {
        expect(log.logEndOffset).toBe(kept);
        const got = await log.read(0, { maxRecords: 10_000, maxBytes: 1 << 20 });
        expect(got.map((r) => r.value.toString())).toEqual(Array.from({ length: kept }, (_, i) => value(i).toString()));
      } finally {
        await log.close();
      }
    });
  }
});

const logFiles = async () => Promise.all((await readdir(dir)).filter((n) => n.endsWith(LOG_SUFFIX)).sort().map(async (n) => [n, await readFile(join(dir, n))] as const));

describe('flush=interval: a closed segment was fsynced at its roll, whatever became of its index', () => {
  it('a closed segment whose index was lost and that ends short of the next one is refused, not cut with the segments after it', async () => {
    const segs = await writeLog('interval');
    const mid = segs[1]!;
    const file = logFile(mid.baseOffset);
    const starts = recordStarts(await readFile(file));
    await truncate(file, starts[PER]!);
    await writeFile(join(dir, segmentFileName(mid.baseOffset, INDEX_SUFFIX)), '');
    const before = await logFiles();
    await expect(PartitionLog.open(dir, { ...BASE, flush: 'interval' })).rejects.toThrow('missing');
    expect(await logFiles()).toEqual(before);
  });

  it('damage in a closed segment whose index was lost is refused, not cut with the segments after it', async () => {
    const segs = await writeLog('interval');
    const mid = segs[1]!;
    const file = logFile(mid.baseOffset);
    const bytes = await readFile(file);
    const starts = recordStarts(bytes);
    bytes[starts[2]! + 12] ^= 0x40;
    await writeFile(file, bytes);
    // Its index lost (written in place, never fsynced): nothing vouches for this segment any more, but
    // the segments after it were fsynced at their rolls and their indexes say so.
    await writeFile(join(dir, segmentFileName(mid.baseOffset, INDEX_SUFFIX)), '');
    const before = await logFiles();
    await expect(PartitionLog.open(dir, { ...BASE, flush: 'interval' })).rejects.toThrow(file);
    expect(await logFiles()).toEqual(before);
  });
});

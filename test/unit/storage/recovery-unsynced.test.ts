/**
 * Recovery after a crash under --flush interval or os (docs/architecture.md "Storage", Recovery): bytes no
 * fsync covered may have reached the disk in any order or not at all, so a bad record or a gap in them
 * ends the log there and later segments go, while a segment an fsync vouched for (its index says so), and
 * any damage under --flush always or after a clean shutdown, still refuses the open.
 */
import { readdir, readFile, truncate, unlink, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import pino from 'pino';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { type LogOptions, PartitionLog } from 'tributary-broker/storage/partition-log.js';
import { simulateCrash } from 'tributary-broker/storage/log-test-hooks.js';
import { parseIndex, serializeIndex } from 'tributary-broker/storage/offset-index.js';
import { INDEX_SUFFIX, LOG_SUFFIX, segmentFileName } from 'tributary-broker/storage/segment-names.js';
import { removeDir, tempDir } from '../../helpers/util.js';
import { expectOpenRefused } from './refused-open.js';

let dir: string;
beforeEach(async () => {
  dir = await tempDir('trib-unsynced-');
});
afterEach(async () => {
  await removeDir(dir);
});

const BASE: Partial<LogOptions> = { segmentBytes: 900, indexIntervalBytes: 1 << 16, tailCacheBytes: 0 };
const APPENDS = 30;
const PER = 3;
const value = (i: number) => Buffer.from(`record-${i}-${'v'.repeat(10 + (i % 7))}`);

/** APPENDS appends of PER records each, then a crash (no clean-shutdown marker, nothing fsynced at the end). */
async function writeLog(flush: LogOptions['flush']): Promise<Array<{ baseOffset: number; nextOffset: number }>> {
  const log = await PartitionLog.open(dir, { ...BASE, flush });
  for (let a = 0; a < APPENDS; a++) await log.append(Array.from({ length: PER }, (_, j) => ({ key: null, value: value(a * PER + j) })));
  const segs = log.segmentInfos();
  expect(segs.length).toBeGreaterThan(4);
  await simulateCrash(log);
  return segs;
}

const logFile = (base: number) => join(dir, segmentFileName(base, LOG_SUFFIX));
const segmentFiles = async () => (await readdir(dir)).filter((n) => n.endsWith(LOG_SUFFIX)).sort();

function recordStarts(buf: Buffer): number[] {
  const out: number[] = [];
  for (let p = 0; p < buf.length; p += 4 + buf.readUInt32BE(p)) out.push(p);
  return out;
}

function captureLogger() {
  const lines: Array<Record<string, unknown>> = [];
  return { logger: pino({ level: 'warn' }, { write: (s: string) => lines.push(JSON.parse(s)) }), lines };
}

/** Opens with `flush`: the log holds exactly offsets 0..end-1 as written, and the next append gets `end`. */
async function expectLog(flush: LogOptions['flush'], end: number, logger?: pino.Logger): Promise<void> {
  const log = await PartitionLog.open(dir, { ...BASE, flush }, logger);
  try {
    expect(log.logEndOffset).toBe(end);
    const got = await log.read(0, { maxRecords: 10_000, maxBytes: 1 << 20 });
    expect(got.map((r) => r.value.toString())).toEqual(Array.from({ length: end }, (_, i) => value(i).toString()));
    expect((await log.append([{ key: null, value: value(end) }])).baseOffset).toBe(end);
  } finally {
    await log.close();
  }
}

async function expectRefused(flush: LogOptions['flush'], ...words: string[]): Promise<void> {
  await expectOpenRefused(dir, { ...BASE, flush }, async () => Promise.all((await segmentFiles()).map((n) => readFile(join(dir, n)))), ...words);
}

describe('recovery of what no fsync covered (flush os and interval)', () => {
  it('flush=os: a closed segment that lost its tail ends the log at its last whole append; later segments go', async () => {
    const segs = await writeLog('os');
    const mid = segs[2]!;
    const file = logFile(mid.baseOffset);
    const starts = recordStarts(await readFile(file));
    // Torn inside the second record of the segment's second append (or whichever record that is).
    const victim = starts[4]!;
    await truncate(file, victim + 9);
    // With flush=always a closed segment was fsynced at its roll: this is damage, and nothing changes.
    await expectRefused('always', file, 'in a closed segment');
    const { logger, lines } = captureLogger();
    // The records before the victim's append stay: whole appends only.
    const kept = mid.baseOffset + 4 - ((mid.baseOffset + 4) % PER);
    await expectLog('os', kept, logger);
    expect((await segmentFiles()).map((n) => Number.parseInt(n, 10))).toEqual(segs.filter((s) => s.baseOffset <= mid.baseOffset).map((s) => s.baseOffset));
    const warn = lines.find((l) => Array.isArray(l.removedSegments));
    expect(warn).toMatchObject({ flush: 'os', cutAt: kept, removedSegments: segs.filter((s) => s.baseOffset > mid.baseOffset).map((s) => s.baseOffset) });
  });

  it('flush=os: a closed segment cut at a record boundary inside an append leaves a gap: the append goes whole, and later segments', async () => {
    const segs = await writeLog('os');
    // A segment whose second record is not the first of an append, so the cut lands inside one.
    const mid = segs.slice(1, -1).find((s) => (s.baseOffset + 1) % PER !== 0)!;
    const file = logFile(mid.baseOffset);
    const starts = recordStarts(await readFile(file));
    await truncate(file, starts[1]!);
    await expectRefused('always', 'missing');
    const { logger, lines } = captureLogger();
    const kept = mid.baseOffset + 1 - ((mid.baseOffset + 1) % PER);
    await expectLog('os', kept, logger);
    // The log ends where the incomplete append before the gap began, and the warning says so.
    expect(lines.find((l) => Array.isArray(l.removedSegments))).toMatchObject({ cutAt: kept, droppedRecords: (mid.baseOffset + 1) % PER });
  });

  it('flush=os: an open refused for a gap (under --flush always) leaves no index vouching for the segment before it', async () => {
    const segs = await writeLog('os');
    // A segment that lost its tail at an append boundary: its rebuilt index matches it.
    const mid = segs.slice(1, -1).find((s) => s.nextOffset - s.baseOffset > PER)!;
    const k = (PER - (mid.baseOffset % PER)) % PER || PER;
    const file = logFile(mid.baseOffset);
    await truncate(file, recordStarts(await readFile(file))[k]!);
    await expectRefused('always', 'missing');
    // Had the refused open written the rebuilt index as vouching, this open would refuse the gap too.
    await expectLog('os', mid.baseOffset + k);
  });

  it('flush=os and interval: zeros inside the last segment with valid records after them end the log there', async () => {
    for (const flush of ['os', 'interval'] as const) {
      await removeDir(dir);
      dir = await tempDir('trib-unsynced-');
      const segs = await writeLog(flush);
      const last = segs.at(-1)!;
      const file = logFile(last.baseOffset);
      const bytes = await readFile(file);
      const starts = recordStarts(bytes);
      expect(starts.length).toBeGreaterThan(PER + 1);
      // A page the disk never got (zeros) before one it did: the record at starts[PER] is the victim.
      const from = starts[PER]!;
      bytes.fill(0, from, from + 16);
      await writeFile(file, bytes);
      await expectRefused('always', file, 'not a torn tail');
      await expectLog(flush, last.baseOffset + PER);
    }
  });

  it('flush=interval: a closed segment its index vouches for (fsynced at its roll) is still refused when damaged', async () => {
    const segs = await writeLog('interval');
    const mid = segs[1]!;
    const file = logFile(mid.baseOffset);
    const bytes = await readFile(file);
    const starts = recordStarts(bytes);
    bytes[starts[2]! + 12] ^= 0x40;
    await writeFile(file, bytes);
    await expectRefused('interval', file, `at byte ${starts[2]}`);
  });

  it('flush=os: a closed segment its index vouches for is refused a gap after it also when its index is rebuilt', async () => {
    // Written, shut down cleanly (every index vouches for its segment: fsynced whole), then a crash.
    const log = await PartitionLog.open(dir, { ...BASE, flush: 'os' });
    for (let a = 0; a < APPENDS; a++) await log.append(Array.from({ length: PER }, (_, j) => ({ key: null, value: value(a * PER + j) })));
    const segs = log.segmentInfos();
    await log.close();
    await simulateCrash(await PartitionLog.open(dir, { ...BASE, flush: 'os' }));
    // Segment 1's index still vouches for its size, but its newest timestamp disagrees with the records: it
    // is scanned whole and rebuilt. Segment 2 is gone: offsets are missing after segment 1, which lost
    // nothing (it was fsynced whole at its size), so the gap is damage, not a lost tail.
    const indexFile = join(dir, segmentFileName(segs[1]!.baseOffset, INDEX_SUFFIX));
    const parsed = parseIndex(await readFile(indexFile))!;
    expect(parsed.meta.synced).toBe(true);
    await writeFile(indexFile, serializeIndex({ ...parsed.meta, maxTimestamp: 0 }, parsed.index));
    await unlink(logFile(segs[2]!.baseOffset));
    await unlink(join(dir, segmentFileName(segs[2]!.baseOffset, INDEX_SUFFIX)));
    await expectRefused('os', `offsets ${segs[2]!.baseOffset}..${segs[3]!.baseOffset - 1} are missing`);
  });

  it('flush=os after a clean shutdown: nothing was left unsynced, so damage is refused', async () => {
    const log = await PartitionLog.open(dir, { ...BASE, flush: 'os' });
    for (let a = 0; a < APPENDS; a++) await log.append(Array.from({ length: PER }, (_, j) => ({ key: null, value: value(a * PER + j) })));
    const segs = log.segmentInfos();
    await log.close();
    const mid = segs[1]!;
    const file = logFile(mid.baseOffset);
    const starts = recordStarts(await readFile(file));
    await truncate(file, starts[2]! + 5);
    await expectRefused('os', file);
  });
});

import { readdir, readFile, stat, unlink, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { TributaryError } from 'tributary-protocol/errors.js';
import type { LogRecord, RecordInput } from 'tributary-protocol/record.js';
import { type FlushMode, HWM_CHECKPOINT_FILE, type LogOptions, PartitionLog } from 'tributary-broker/storage/partition-log.js';
import { simulateCrash } from 'tributary-broker/storage/log-test-hooks.js';
import { Segment } from 'tributary-broker/storage/segment.js';
import { removeDir, sleep, tempDir, until } from '../../helpers/util.js';

let dir: string;
const open: PartitionLog[] = [];

beforeEach(async () => {
  dir = await tempDir('trib-plog-');
});
afterEach(async () => {
  vi.restoreAllMocks();
  for (const l of open.splice(0)) await l.close().catch(() => {});
  await removeDir(dir);
});

async function openLog(opts: Partial<LogOptions> = {}): Promise<PartitionLog> {
  const l = await PartitionLog.open(dir, { flush: 'os', ...opts });
  open.push(l);
  return l;
}

function rec(i: number, extra: Partial<RecordInput> = {}): RecordInput {
  return {
    key: i % 3 === 0 ? null : Buffer.from(`key-${i}`),
    value: Buffer.from(`value-${i}-${'x'.repeat(i % 17)}`),
    headers: i % 2 ? [{ key: 'h', value: Buffer.from(String(i)) }] : [],
    producerId: i % 5 === 0 ? `producer-ü-${i}` : '',
    ...extra,
  };
}

function expectRecord(r: LogRecord, i: number): void {
  expect(r.offset).toBe(i);
  expect(r.value.toString()).toBe(`value-${i}-${'x'.repeat(i % 17)}`);
  expect(r.key === null ? null : r.key.toString()).toBe(i % 3 === 0 ? null : `key-${i}`);
  expect(r.headers.map((h) => [h.key, h.value.toString()])).toEqual(i % 2 ? [['h', String(i)]] : []);
  expect(r.producerId).toBe(i % 5 === 0 ? `producer-ü-${i}` : '');
}

function expectRecords(list: LogRecord[]): void {
  for (let i = 0; i < list.length; i++) expectRecord(list[i], i);
}

async function appendN(log: PartitionLog, from: number, n: number, perBatch = 1): Promise<void> {
  for (let i = from; i < from + n; i += perBatch) {
    const batch: RecordInput[] = [];
    for (let j = i; j < Math.min(i + perBatch, from + n); j++) batch.push(rec(j));
    await log.append(batch);
  }
}

async function readAll(log: PartitionLog, from: number, maxRecords = 7, maxBytes = 1 << 20): Promise<LogRecord[]> {
  const out: LogRecord[] = [];
  let next = from;
  for (;;) {
    const got = await log.read(next, { maxRecords, maxBytes });
    if (got.length === 0) return out;
    out.push(...got);
    next = got[got.length - 1].offset + 1;
  }
}

async function expectOutOfRange(p: Promise<unknown>, requested: number, earliest: number, latest: number): Promise<void> {
  const err = await p.then(
    () => null,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(TributaryError);
  expect((err as TributaryError).code).toBe('OFFSET_OUT_OF_RANGE');
  expect((err as TributaryError).fields).toEqual({ requested, earliest, latest });
}

async function segmentFiles(): Promise<string[]> {
  return (await readdir(dir)).filter((n) => n.endsWith('.log')).sort();
}

describe('PartitionLog', () => {
  it('appends and reads across several segment rolls (from disk)', async () => {
    const log = await openLog({ segmentBytes: 1000, indexIntervalBytes: 128, tailCacheBytes: 0 });
    expect(log.logStartOffset).toBe(0);
    expect(log.logEndOffset).toBe(0);
    const r1 = await log.append([rec(0), rec(1), rec(2)]);
    expect(r1.baseOffset).toBe(0);
    expect(r1.lastOffset).toBe(2);
    await appendN(log, 3, 197, 3);
    expect(log.logEndOffset).toBe(200);
    const files = await segmentFiles();
    expect(files.length).toBeGreaterThan(5);
    expect(files[0]).toBe('00000000000000000000.log');
    const infos = log.segmentInfos();
    for (let i = 1; i < infos.length; i++) expect(infos[i].baseOffset).toBe(infos[i - 1].nextOffset);
    for (const s of infos.slice(0, -1)) expect(s.sizeBytes).toBeLessThanOrEqual(1000);
    expect(log.sizeBytes).toBe(infos.reduce((a, s) => a + s.sizeBytes, 0));
    const all = await readAll(log, 0);
    expect(all.length).toBe(200);
    expectRecords(all);
    // Every start offset, including ones in the middle of segments and at segment boundaries.
    for (let o = 0; o < 200; o += 1) {
      const got = await log.read(o, { maxRecords: 3, maxBytes: 1 << 20 });
      expect(got.map((r) => r.offset)).toEqual([o, o + 1, o + 2].filter((x) => x < 200));
      for (const r of got) expectRecord(r, r.offset);
    }
  });

  it('respects maxRecords, maxBytes and maxOffset, and always returns one record', async () => {
    for (const tailCacheBytes of [0, 1 << 20]) {
      await removeDir(dir);
      const log = await openLog({ segmentBytes: 4000, indexIntervalBytes: 64, tailCacheBytes });
      await appendN(log, 0, 50, 5);
      const big = await log.append([{ key: null, value: Buffer.alloc(10_000, 7) }]);
      expect(big.baseOffset).toBe(50);
      await appendN(log, 51, 10);
      expect((await log.read(10, { maxRecords: 4, maxBytes: 1 << 20 })).map((r) => r.offset)).toEqual([10, 11, 12, 13]);
      const one = await log.read(10, { maxRecords: 100, maxBytes: 1 });
      expect(one.map((r) => r.offset)).toEqual([10]);
      const some = await log.read(10, { maxRecords: 100, maxBytes: 300 });
      expect(some.length).toBeGreaterThan(1);
      expect(some.length).toBeLessThan(10);
      const huge = await log.read(50, { maxRecords: 10, maxBytes: 100 });
      expect(huge.length).toBe(1);
      expect(huge[0].value.length).toBe(10_000);
      expect(huge[0].value.every((b) => b === 7)).toBe(true);
      expect((await log.read(45, { maxRecords: 100, maxBytes: 1 << 20, maxOffset: 48 })).map((r) => r.offset)).toEqual([45, 46, 47]);
      expect(await log.read(48, { maxRecords: 100, maxBytes: 1 << 20, maxOffset: 48 })).toEqual([]);
      expect(await log.read(61, { maxRecords: 100, maxBytes: 1 << 20 })).toEqual([]);
      await log.close();
    }
  });

  it('throws OFFSET_OUT_OF_RANGE below the start and above the LEO', async () => {
    const log = await openLog({ segmentBytes: 500, retentionBytes: 0 });
    await appendN(log, 0, 30);
    expect(await log.read(30, { maxRecords: 1, maxBytes: 100 })).toEqual([]);
    await expectOutOfRange(log.read(31, { maxRecords: 1, maxBytes: 100 }), 31, 0, 30);
    log.setHighWatermark(log.logEndOffset); // all committed: retention deletes only below the HWM
    await log.applyRetention();
    const start = log.logStartOffset;
    expect(start).toBeGreaterThan(0);
    // retentionBytes 0 deletes every closed segment but never the active one.
    expect(log.segmentInfos()).toHaveLength(1);
    expect(start).toBe(log.segmentInfos()[0].baseOffset);
    await expectOutOfRange(log.read(start - 1, { maxRecords: 1, maxBytes: 100 }), start - 1, start, 30);
    await expectOutOfRange(log.read(-1, { maxRecords: 1, maxBytes: 100 }), -1, start, 30);
  });

  it('keeps data across close and reopen', async () => {
    let log = await openLog({ segmentBytes: 700, indexIntervalBytes: 100 });
    await appendN(log, 0, 100, 4);
    log.setHighWatermark(60);
    await log.close();
    expect((await readdir(dir)).includes('clean-shutdown')).toBe(true);
    log = await openLog({ segmentBytes: 700, indexIntervalBytes: 100 });
    expect((await readdir(dir)).includes('clean-shutdown')).toBe(false);
    expect(log.logEndOffset).toBe(100);
    expect(log.highWatermark).toBe(60);
    expectRecords(await readAll(log, 0));
    const res = await log.append([rec(100)]);
    expect(res.baseOffset).toBe(100);
    await log.close();
    log = await openLog({ segmentBytes: 700, indexIntervalBytes: 100 });
    const all = await readAll(log, 0);
    expect(all.length).toBe(101);
    expectRecords(all);
  });

  it('rebuilds a missing or corrupt index', async () => {
    let log = await openLog({ segmentBytes: 2000, indexIntervalBytes: 100, tailCacheBytes: 0 });
    await appendN(log, 0, 120);
    await log.close();
    const indexes = (await readdir(dir)).filter((n) => n.endsWith('.index')).sort();
    expect(indexes.length).toBeGreaterThan(2);
    await unlink(join(dir, indexes[0]));
    const raw = await readFile(join(dir, indexes[1]));
    raw[raw.length - 6] ^= 0xff;
    await writeFile(join(dir, indexes[1]), raw);
    log = await openLog({ segmentBytes: 2000, indexIntervalBytes: 100, tailCacheBytes: 0 });
    expect(log.logEndOffset).toBe(120);
    expectRecords(await readAll(log, 0, 3));
    expect((await readdir(dir)).filter((n) => n.endsWith('.index')).length).toBe(indexes.length);
  });

  it('retention by bytes deletes whole oldest segments and moves logStartOffset', async () => {
    const log = await openLog({ segmentBytes: 1000, retentionBytes: 2500, tailCacheBytes: 0 });
    await appendN(log, 0, 200, 2);
    const before = log.segmentInfos();
    const total = log.sizeBytes;
    log.setHighWatermark(log.logEndOffset); // all committed: retention deletes only below the HWM
    const res = await log.applyRetention();
    expect(res.deletedSegments).toBeGreaterThan(0);
    const after = log.segmentInfos();
    expect(after.length).toBe(before.length - res.deletedSegments);
    expect(res.deletedBytes).toBe(before.slice(0, res.deletedSegments).reduce((a, s) => a + s.sizeBytes, 0));
    expect(log.sizeBytes).toBe(total - res.deletedBytes);
    expect(log.sizeBytes).toBeLessThanOrEqual(2500);
    // Deleting one segment fewer would have left the log above the limit.
    expect(log.sizeBytes + before[res.deletedSegments - 1].sizeBytes).toBeGreaterThan(2500);
    expect(log.logStartOffset).toBe(after[0].baseOffset);
    expect(log.logStartOffset).toBe(before[res.deletedSegments].baseOffset);
    const files = await segmentFiles();
    expect(files.length).toBe(after.length);
    const all = await readAll(log, log.logStartOffset);
    expect(all[0].offset).toBe(log.logStartOffset);
    for (const r of all) expectRecord(r, r.offset);
    expect(all[all.length - 1].offset).toBe(199);
  });

  it('retention deletes only segments wholly below the high-water mark, and leaves the HWM where it is', async () => {
    const log = await openLog({ segmentBytes: 1000, retentionBytes: 0, tailCacheBytes: 0 });
    await appendN(log, 0, 200, 2);
    // A leader whose followers confirmed only the first 30 records.
    log.setHighWatermark(30);
    await log.applyRetention();
    expect(log.logStartOffset).toBeLessThanOrEqual(30);
    expect(log.highWatermark).toBe(30);
    const first = log.segmentInfos()[0]!;
    expect(first.nextOffset).toBeGreaterThan(30);
    // Once the rest is confirmed, the rest may go.
    log.setHighWatermark(log.logEndOffset);
    await log.applyRetention();
    expect(log.segmentInfos()).toHaveLength(1);
  });

  it('retention by time deletes expired closed segments, rolling an old active segment first', async () => {
    const log = await openLog({ segmentBytes: 1000, retentionMs: 60_000, segmentMs: 3_600_000 });
    const t0 = 1_700_000_000_000;
    for (let i = 0; i < 60; i++) await log.append([rec(i, { timestamp: t0 + i * 1000 })]);
    const infos = log.segmentInfos();
    expect(infos.length).toBeGreaterThan(3);
    // Cut-off just above the max timestamp of the second segment.
    const cut = infos[1].maxTimestamp + 1;
    log.setHighWatermark(log.logEndOffset); // all committed: retention deletes only below the HWM
    const res = await log.applyRetention(cut + 60_000);
    expect(res.deletedSegments).toBe(2);
    expect(log.logStartOffset).toBe(infos[2].baseOffset);
    expect((await readAll(log, log.logStartOffset)).length).toBe(60 - infos[2].baseOffset);
    // Far in the future: everything but the active segment goes; the old active one is rolled first.
    const leo = log.logEndOffset;
    log.setHighWatermark(log.logEndOffset); // all committed: retention deletes only below the HWM
    const res2 = await log.applyRetention(Date.now() + 10 * 3_600_000);
    expect(res2.deletedSegments).toBe(infos.length - 2);
    expect(log.logStartOffset).toBe(leo);
    expect(log.sizeBytes).toBe(0);
    expect(await log.read(leo, { maxRecords: 10, maxBytes: 1000 })).toEqual([]);
    expect((await log.append([rec(leo)])).baseOffset).toBe(leo);
    expect(log.highWatermark).toBe(leo);
  });

  it('truncateTo drops everything from an offset, across segments', async () => {
    let log = await openLog({ segmentBytes: 800, indexIntervalBytes: 64 });
    await appendN(log, 0, 100);
    log.setHighWatermark(90);
    const segsBefore = log.segmentInfos().length;
    await log.truncateTo(37);
    expect(log.logEndOffset).toBe(37);
    expect(log.highWatermark).toBe(37);
    expect(log.segmentInfos().length).toBeLessThan(segsBefore);
    expect(await readAll(log, 0)).toHaveLength(37);
    await expectOutOfRange(log.read(38, { maxRecords: 1, maxBytes: 100 }), 38, 0, 37);
    expect((await log.append([rec(37), rec(38)])).baseOffset).toBe(37);
    await log.truncateTo(1000); // no-op past the LEO
    expect(log.logEndOffset).toBe(39);
    // Truncate at an exact segment boundary.
    const boundary = log.segmentInfos()[1].baseOffset;
    await log.truncateTo(boundary);
    expect(log.logEndOffset).toBe(boundary);
    await appendN(log, boundary, 20);
    await log.close();
    log = await openLog({ segmentBytes: 800, indexIntervalBytes: 64 });
    const all = await readAll(log, 0);
    expect(all).toHaveLength(boundary + 20);
    expectRecords(all);
    // Everything.
    await log.truncateTo(0);
    expect(log.logEndOffset).toBe(0);
    expect(log.sizeBytes).toBe(0);
    expect((await log.append([rec(0)])).baseOffset).toBe(0);
  });

  it('offsetForTimestamp finds the first offset at or after a timestamp', async () => {
    const log = await openLog({ segmentBytes: 600, tailCacheBytes: 0 });
    const t0 = 1_600_000_000_000;
    for (let i = 0; i < 50; i++) await log.append([rec(i, { timestamp: t0 + i * 10 })]);
    expect(await log.offsetForTimestamp(0)).toBe(0);
    expect(await log.offsetForTimestamp(t0)).toBe(0);
    expect(await log.offsetForTimestamp(t0 + 1)).toBe(1);
    expect(await log.offsetForTimestamp(t0 + 250)).toBe(25);
    expect(await log.offsetForTimestamp(t0 + 491)).toBe(50);
    expect(await log.offsetForTimestamp(t0 + 10_000)).toBe(50);
    // Timestamp 0 is stamped with the append time.
    const before = Date.now();
    const r = await log.append([rec(50, { timestamp: 0 })]);
    const [got] = await log.read(50, { maxRecords: 1, maxBytes: 1000 });
    expect(got.timestamp).toBe(r.timestamp);
    expect(got.timestamp).toBeGreaterThanOrEqual(before);
  });

  it('offsetForTimestamp over a segment with a bad record is a storage_error, not an answer from the next segment', async () => {
    const log = await openLog({ segmentBytes: 600, tailCacheBytes: 0 });
    const t0 = 1_600_000_000_000;
    for (let i = 0; i < 50; i++) await log.append([rec(i, { timestamp: t0 + i * 10 })]);
    expect(await log.offsetForTimestamp(t0 + 30)).toBe(3);
    // The first record's CRC: the first segment can no longer be searched from its start.
    const first = join(dir, '00000000000000000000.log');
    const bytes = await readFile(first);
    bytes[4] = (bytes[4] ?? 0) ^ 0xff;
    await writeFile(first, bytes);
    // Before: the segment's search ended at the bad record and the answer came from the next segment.
    const err = await log.offsetForTimestamp(t0 + 30).then(
      (o) => o,
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(TributaryError);
    expect((err as TributaryError).code).toBe('storage_error');
    expect((err as TributaryError).message).toContain('unreadable record in segment 0 at position 0');
  });

  it('HWM is monotonic, clamped to the LEO and checkpointed atomically', async () => {
    let log = await openLog({ flushIntervalMs: 20 });
    await appendN(log, 0, 10);
    log.setHighWatermark(5);
    log.setHighWatermark(3);
    expect(log.highWatermark).toBe(5);
    log.setHighWatermark(50);
    expect(log.highWatermark).toBe(10);
    await sleep(100);
    expect(await readFile(join(dir, HWM_CHECKPOINT_FILE), 'utf8')).toContain('10');
    await simulateCrash(log);
    log = await openLog({ flushIntervalMs: 20 });
    expect(log.highWatermark).toBe(10);
    await log.close();
    log = await openLog();
    expect(log.highWatermark).toBe(10);
  });

  it('checkpointHwmOnTimer false: the flush timer leaves the HWM checkpoint alone; close still writes it', async () => {
    const quiet = await PartitionLog.open(join(dir, 'quiet'), { flush: 'os', flushIntervalMs: 20, checkpointHwmOnTimer: false });
    open.push(quiet);
    const ticking = await PartitionLog.open(join(dir, 'ticking'), { flush: 'os', flushIntervalMs: 20 });
    open.push(ticking);
    for (const log of [quiet, ticking]) {
      await appendN(log, 0, 10);
      log.setHighWatermark(7);
    }
    const checkpointOf = (log: PartitionLog) => readFile(join(log.dir, HWM_CHECKPOINT_FILE), 'utf8').catch(() => '');
    // Three values written by three ticks of the other log, each at least a period after the one before:
    // the quiet log, on the same period, has had a tick since its HWM became 7.
    for (const hwm of [7, 8, 9]) {
      ticking.setHighWatermark(hwm);
      await until(async () => (await checkpointOf(ticking)).includes(` ${hwm}\n`), 10_000, `the timer checkpoint of ${hwm}`);
    }
    expect(await checkpointOf(quiet)).not.toContain(' 7\n');
    await quiet.close();
    expect(await checkpointOf(quiet)).toContain(' 7\n');
  });

  for (const flush of ['always', 'interval', 'os'] as FlushMode[]) {
    it(`flush mode '${flush}' returns correct data, also after reopen`, async () => {
      let log = await openLog({ flush, flushIntervalMs: 10, segmentBytes: 5000 });
      const results = await Promise.all(Array.from({ length: 200 }, (_, i) => log.append([rec(2 * i), rec(2 * i + 1)])));
      results.forEach((r, i) => {
        expect(r.baseOffset).toBe(2 * i);
        expect(r.lastOffset).toBe(2 * i + 1);
      });
      await log.flush();
      expectRecords(await readAll(log, 0, 50));
      await sleep(30);
      await log.close();
      log = await openLog({ flush });
      expect(log.logEndOffset).toBe(400);
      expectRecords(await readAll(log, 0, 50));
    });
  }

  it("'always' uses group commit: one fsync covers many concurrent appends", async () => {
    const log = await openLog({ flush: 'always' });
    const spy = vi.spyOn(Segment.prototype, 'datasync');
    try {
      const results = await Promise.all(Array.from({ length: 500 }, (_, i) => log.append([rec(i)])));
      expect(results.map((r) => r.baseOffset)).toEqual(Array.from({ length: 500 }, (_, i) => i));
      expect(spy.mock.calls.length).toBeGreaterThan(0);
      expect(spy.mock.calls.length).toBeLessThan(100);
      // A single append still waits for its own fsync.
      const before = spy.mock.calls.length;
      await log.append([rec(500)]);
      expect(spy.mock.calls.length).toBe(before + 1);
    } finally {
      spy.mockRestore();
    }
  });

  it("'interval' fsyncs on the timer, 'os' only on flush/close", async () => {
    // The dirty-segment set lives in the log's group-commit part (group-commit.ts).
    const dirtyCount = (l: PartitionLog) => (l as unknown as { sync: { dirtyCount: number } }).sync.dirtyCount;
    const a = await openLog({ flush: 'interval', flushIntervalMs: 10 });
    await a.append([rec(0)]);
    expect(dirtyCount(a)).toBe(1);
    for (let i = 0; i < 200 && dirtyCount(a) > 0; i++) await sleep(10);
    expect(dirtyCount(a)).toBe(0);
    await a.close();
    await removeDir(dir);
    const b = await openLog({ flush: 'os', flushIntervalMs: 10 });
    await b.append([rec(0)]);
    await sleep(60);
    expect(dirtyCount(b)).toBe(1);
    await b.flush();
    expect(dirtyCount(b)).toBe(0);
  });

  it('concurrent appends get contiguous, non-overlapping offsets in call order', async () => {
    const log = await openLog({ flush: 'always', segmentBytes: 3000 });
    const sizes = Array.from({ length: 300 }, (_, i) => 1 + (i % 4));
    let n = 0;
    const batches = sizes.map((s) => {
      const b: RecordInput[] = [];
      for (let j = 0; j < s; j++) b.push(rec(n++));
      return b;
    });
    const results = await Promise.all(batches.map((b) => log.append(b)));
    let expected = 0;
    for (let i = 0; i < results.length; i++) {
      expect(results[i].baseOffset).toBe(expected);
      expect(results[i].lastOffset).toBe(expected + sizes[i] - 1);
      expected += sizes[i];
    }
    expect(log.logEndOffset).toBe(n);
    const all = await readAll(log, 0, 100);
    expect(all).toHaveLength(n);
    expectRecords(all);
    // A batch never spans segments.
    const bases = new Set(log.segmentInfos().map((s) => s.baseOffset));
    for (const r of results) for (let o = r.baseOffset + 1; o <= r.lastOffset; o++) expect(bases.has(o)).toBe(false);
  });

  it('rolls the active segment by age', async () => {
    // The age is the writer's wall clock (Date.now()): held still, then moved past segmentMs, so a slow
    // machine's appends cannot roll early.
    let now = 1_800_000_000_000;
    vi.spyOn(Date, 'now').mockImplementation(() => now);
    const log = await openLog({ segmentMs: 30 });
    await log.append([rec(0)]);
    now += 29;
    await log.append([rec(1)]);
    expect(log.segmentInfos()).toHaveLength(1);
    now += 1;
    await log.append([rec(2)]);
    expect(log.segmentInfos().map((s) => s.baseOffset)).toEqual([0, 2]);
  });

  it('rejects invalid and oversized input without consuming offsets', async () => {
    const log = await openLog({ maxRecordBytes: 200 });
    await expect(log.append([])).rejects.toMatchObject({ code: 'invalid_parameter' });
    await expect(log.append([{ key: null, value: Buffer.alloc(500) }])).rejects.toMatchObject({ code: 'record_too_large' });
    await expect(log.append([{ key: null, value: 'str' as unknown as Buffer }])).rejects.toMatchObject({ code: 'invalid_parameter' });
    await expect(log.append([{ key: null, value: Buffer.alloc(1), attributes: 300 }])).rejects.toMatchObject({ code: 'invalid_parameter' });
    expect((await log.append([rec(0)])).baseOffset).toBe(0);
    await log.close();
    await expect(log.append([rec(1)])).rejects.toMatchObject({ code: 'storage_error' });
    await expect(log.read(0, { maxRecords: 1, maxBytes: 1 })).rejects.toMatchObject({ code: 'storage_error' });
  });

  it('serves tail readers from the cache with the same content as disk', async () => {
    const log = await openLog({ tailCacheBytes: 1 << 20 });
    await appendN(log, 0, 50, 5);
    const cached = await readAll(log, 0, 9);
    await log.close();
    const reopened = await openLog({ tailCacheBytes: 1 << 20 });
    const disk = await readAll(reopened, 0, 9);
    expect(cached.length).toBe(50);
    cached.forEach((r, i) => {
      expectRecord(r, i);
      expect(r).toEqual(disk[i]);
    });
  });

  it('destroy removes the directory', async () => {
    const log = await openLog();
    await appendN(log, 0, 3);
    await log.destroy();
    await expect(stat(dir)).rejects.toMatchObject({ code: 'ENOENT' });
  });
});

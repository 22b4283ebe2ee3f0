import { readdir, readFile, stat, unlink, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { pino } from 'pino';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import type { LogRecord, RecordInput } from 'tributary-protocol/record.js';
import { CLEAN_SHUTDOWN_FILE, type LogOptions, PartitionLog } from 'tributary-broker/storage/partition-log.js';
import { simulateCrash } from 'tributary-broker/storage/log-test-hooks.js';
import { ATTR_END_OF_APPEND, decodeRecords } from 'tributary-broker/storage/record-codec.js';
import { Segment } from 'tributary-broker/storage/segment.js';
import { removeDir, tempDir } from '../../helpers/util.js';

let dir: string;

beforeEach(async () => {
  dir = await tempDir('trib-atomic-');
});
afterEach(async () => {
  vi.restoreAllMocks();
  await removeDir(dir);
});

const OPTS: Partial<LogOptions> = { flush: 'os', indexIntervalBytes: 64 };

function rec(i: number, extra: Partial<RecordInput> = {}): RecordInput {
  return { key: i % 3 === 0 ? null : Buffer.from(`k${i}`), value: Buffer.from(`value-${i}-${'q'.repeat(i % 11)}`), ...extra };
}

async function readAll(log: PartitionLog, maxRecords = 1000): Promise<LogRecord[]> {
  const out: LogRecord[] = [];
  let next = log.logStartOffset;
  while (next < log.logEndOffset) {
    const got = await log.read(next, { maxRecords, maxBytes: 1 << 20 });
    if (got.length === 0) break;
    out.push(...got);
    next = got[got.length - 1].offset + 1;
  }
  return out;
}

function expectPrefix(got: LogRecord[], n: number): void {
  expect(got.map((r) => r.offset)).toEqual(Array.from({ length: n }, (_, i) => i));
  for (const [i, r] of got.entries()) expect(r.value.toString()).toBe(`value-${i}-${'q'.repeat(i % 11)}`);
}

function captureLogger() {
  const lines: Array<Record<string, unknown>> = [];
  const logger = pino({ level: 'warn' }, { write: (s: string) => lines.push(JSON.parse(s)) });
  return { logger, lines };
}

async function onlyLogFile(): Promise<string> {
  const logs = (await readdir(dir)).filter((n) => n.endsWith('.log'));
  expect(logs).toHaveLength(1);
  return join(dir, logs[0]);
}

describe('atomic appends', () => {
  it('a 5-record append torn at any byte position keeps none of its records and every earlier append', async () => {
    const log = await PartitionLog.open(dir, OPTS);
    // Earlier appends of 1, 3 and 2 records.
    await log.append([rec(0)]);
    await log.append([rec(1), rec(2), rec(3)]);
    await log.append([rec(4), rec(5)]);
    const before = log.sizeBytes;
    await log.append([rec(6), rec(7), rec(8), rec(9), rec(10)]);
    await simulateCrash(log);

    const logPath = await onlyLogFile();
    const indexPath = logPath.replace(/\.log$/, '.index');
    const original = await readFile(logPath);
    const originalIndex = await readFile(indexPath);
    expect(original.length).toBeGreaterThan(before);
    // Only the last record of each append carries the marker.
    const raw = decodeRecords(original).records;
    expect(raw.map((r) => (r.attributes & ATTR_END_OF_APPEND) !== 0)).toEqual([true, false, false, true, false, true, false, false, false, false, true]);
    const recordEnds: number[] = [];
    for (let p = 0; p < original.length; p += original.readUInt32BE(p) + 4) recordEnds.push(p);

    const reopen = async (bytes: Buffer, what: string, expected: number) => {
      await writeFile(logPath, bytes);
      await writeFile(indexPath, originalIndex);
      await unlink(join(dir, CLEAN_SHUTDOWN_FILE)).catch(() => {});
      const { logger, lines } = captureLogger();
      const l = await PartitionLog.open(dir, OPTS, logger);
      try {
        expect(l.logEndOffset, what).toBe(expected);
        expectPrefix(await readAll(l), expected);
        expect((await stat(logPath)).size, what).toBe(expected === 11 ? original.length : before);
        if (expected === 6 && recordEnds.includes(bytes.length) && bytes.length > before) {
          // Cut exactly between records of the append: whole records were dropped, and the log says so.
          const warn = lines.find((x) => x.truncatedBytes !== undefined);
          expect(warn?.droppedRecords, what).toBeGreaterThan(0);
          expect(warn?.reason, what).toBe('incomplete_append');
        }
        expect((await l.append([rec(expected)])).baseOffset, what).toBe(expected);
      } finally {
        await simulateCrash(l);
      }
    };

    let cases = 0;
    for (let pos = before; pos < original.length; pos++) {
      await reopen(original.subarray(0, pos), `cut at ${pos}`, 6);
      cases++;
    }
    expect(cases).toBe(original.length - before);
    // A flipped byte in the append's last record drops all of it. In an earlier record, valid records of
    // the append follow it: no torn tail (a torn write keeps a prefix), so with flush=always the open is
    // refused; with flush=os the append is cut all the same.
    for (let pos = before; pos < original.length; pos += 7) {
      const flipped = Buffer.from(original);
      flipped[pos] ^= 0x5a;
      if (pos >= recordEnds.at(-1)!) {
        await reopen(flipped, `flip at ${pos}`, 6);
      } else {
        await writeFile(logPath, flipped);
        await expect(PartitionLog.open(dir, { ...OPTS, flush: 'always' }), `flip at ${pos}`).rejects.toMatchObject({ code: 'storage_error' });
        // flush=os: nothing says the append reached the disk, so it goes whole (docs/architecture.md "Recovery").
        await reopen(flipped, `flip at ${pos}, flush=os`, 6);
      }
    }
    await reopen(original, 'intact', 11);
  }, 120_000);

  it('appends coalesced into one write each carry their own marker', async () => {
    const log = await PartitionLog.open(dir, OPTS);
    await log.append([rec(0)]);
    // Every write of a segment, at once (writeNow) or after opening the file (writeAt), goes through writeAll.
    const writes = vi.spyOn(Segment.prototype as unknown as { writeAll: () => void }, 'writeAll');
    const before = log.sizeBytes;
    // Queued together, these three appends go out in one write call.
    const res = await Promise.all([log.append([rec(1), rec(2)]), log.append([rec(3), rec(4), rec(5)]), log.append([rec(6), rec(7)])]);
    expect(writes).toHaveBeenCalledTimes(1);
    expect(res.map((r) => [r.baseOffset, r.lastOffset])).toEqual([
      [1, 2],
      [3, 5],
      [6, 7],
    ]);
    await simulateCrash(log);
    const logPath = await onlyLogFile();
    const original = await readFile(logPath);
    const raw = decodeRecords(original).records;
    expect(raw.filter((r) => (r.attributes & ATTR_END_OF_APPEND) !== 0).map((r) => r.offset)).toEqual([0, 2, 5, 7]);
    // Tear the coalesced write inside its last append: the first two appends of the group survive.
    const ends: number[] = [];
    for (let p = 0; p < original.length; ) {
      p += original.readUInt32BE(p) + 4;
      ends.push(p);
    }
    expect(ends[0]).toBe(before);
    for (const cut of [ends[6] + 3, ends[6], ends[7] - 1]) {
      await writeFile(logPath, original.subarray(0, cut));
      const l = await PartitionLog.open(dir, OPTS);
      expect(l.logEndOffset).toBe(6);
      expectPrefix(await readAll(l), 6);
      await simulateCrash(l);
    }
    // Inside the second append: only the first one survives.
    await writeFile(logPath, original.subarray(0, ends[4]));
    const l = await PartitionLog.open(dir, OPTS);
    expect(l.logEndOffset).toBe(3);
    expectPrefix(await readAll(l), 3);
    await l.close();
  });

  it('readers never see the marker bit; user attribute bits are kept', async () => {
    for (const tailCacheBytes of [0, 1 << 20]) {
      const sub = join(dir, `cache-${tailCacheBytes}`);
      let log = await PartitionLog.open(sub, { ...OPTS, tailCacheBytes });
      const attrs = [0, 1, 2, 3, 0x7f, 0x80, 0xff];
      await log.append(attrs.map((a, i) => rec(i, { attributes: a })));
      await log.append([rec(7, { attributes: 0x81 })]);
      const expected = [...attrs.map((a) => a & 0x7f), 0x01];
      const check = (got: LogRecord[]) => {
        expect(got.map((r) => r.attributes)).toEqual(expected);
        for (const r of got) expect(r.attributes & ATTR_END_OF_APPEND).toBe(0);
      };
      check(await readAll(log));
      check(await readAll(log, 1));
      await log.close();
      log = await PartitionLog.open(sub, { ...OPTS, tailCacheBytes });
      check(await readAll(log));
      await log.close();
    }
  });

  it('a closed segment ends with a complete append, and multi-record appends survive a clean reopen and a crash', async () => {
    let log = await PartitionLog.open(dir, { ...OPTS, segmentBytes: 300 });
    let n = 0;
    for (let a = 0; a < 30; a++) {
      const batch: RecordInput[] = [];
      for (let k = 0; k <= a % 4; k++) batch.push(rec(n++));
      await log.append(batch);
    }
    expect(log.segmentInfos().length).toBeGreaterThan(3);
    await log.close();
    log = await PartitionLog.open(dir, OPTS);
    expectPrefix(await readAll(log), n);
    await simulateCrash(log);
    for (const f of await readdir(dir)) if (f.endsWith('.index')) await unlink(join(dir, f));
    log = await PartitionLog.open(dir, OPTS);
    expectPrefix(await readAll(log), n);
    await log.close();
  });
});

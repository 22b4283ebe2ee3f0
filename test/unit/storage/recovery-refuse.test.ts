/**
 * Damage recovery must not repair (docs/architecture.md "Storage", Recovery): only a torn tail of the last
 * segment is cut. Anything else refuses the open with a storage_error naming the file and position, and
 * leaves every file as it was, so an operator can restore or remove it deliberately.
 */
import { readdir, readFile, truncate, unlink, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { TributaryError } from 'tributary-protocol/errors.js';
import { type LogOptions, PartitionLog } from 'tributary-broker/storage/partition-log.js';
import { simulateCrash } from 'tributary-broker/storage/log-test-hooks.js';
import { INDEX_SUFFIX, LOG_SUFFIX, segmentFileName } from 'tributary-broker/storage/segment-names.js';
import { removeDir, tempDir } from '../../helpers/util.js';
import { expectOpenRefused } from './refused-open.js';

let dir: string;

beforeEach(async () => {
  dir = await tempDir('trib-refuse-');
});
afterEach(async () => {
  await removeDir(dir);
});

/** Segments of a few records; an index entry only past 4 KiB, so a segment's tail check covers all of it. */
const OPTS: Partial<LogOptions> = { flush: 'always', segmentBytes: 700, indexIntervalBytes: 4096, tailCacheBytes: 0 };
const N = 40;

const value = (i: number) => Buffer.from(`record-${i}-${'v'.repeat(20 + (i % 11))}`);

/** N one-record appends, closed cleanly (the clean-shutdown marker is there, as after SIGTERM). */
async function writeLog(): Promise<Array<{ baseOffset: number; nextOffset: number }>> {
  const log = await PartitionLog.open(dir, OPTS);
  for (let i = 0; i < N; i++) await log.append([{ key: null, value: value(i) }]);
  const segs = log.segmentInfos();
  expect(segs.length).toBeGreaterThan(4);
  await log.close();
  return segs;
}

const logFile = (base: number) => join(dir, segmentFileName(base, LOG_SUFFIX));
const indexFile = (base: number) => join(dir, segmentFileName(base, INDEX_SUFFIX));

/** Names and bytes of every segment file. */
async function logFiles(): Promise<Map<string, Buffer>> {
  const out = new Map<string, Buffer>();
  for (const n of (await readdir(dir)).sort()) if (n.endsWith(LOG_SUFFIX)) out.set(n, await readFile(join(dir, n)));
  return out;
}

/** Start positions of the records of a segment file. */
function recordStarts(buf: Buffer): number[] {
  const out: number[] = [];
  for (let p = 0; p < buf.length; p += 4 + buf.readUInt32BE(p)) out.push(p);
  return out;
}

/** The open is refused with a storage_error whose message has every one of `names`, and no file changed. */
async function expectRefused(...names: string[]): Promise<TributaryError> {
  return expectRefusedWith(OPTS, ...names);
}

function expectRefusedWith(opts: Partial<LogOptions>, ...names: string[]): Promise<TributaryError> {
  return expectOpenRefused(dir, opts, logFiles, ...names);
}

/** Every record, offsets 0..N-1, and the next append at N. */
async function expectWhole(): Promise<void> {
  const log = await PartitionLog.open(dir, OPTS);
  try {
    expect(log.logEndOffset).toBe(N);
    const got = await log.read(0, { maxRecords: 1000, maxBytes: 1 << 20 });
    expect(got.map((r) => r.value.toString())).toEqual(Array.from({ length: N }, (_, i) => value(i).toString()));
    expect((await log.append([{ key: null, value: Buffer.from('next') }])).baseOffset).toBe(N);
  } finally {
    await log.close();
  }
}

describe('recovery refuses damage it may not cut', () => {
  it('a flipped byte in a closed segment without its index: refused at the bad record, later segments kept', async () => {
    const segs = await writeLog();
    const mid = segs[1]!;
    const file = logFile(mid.baseOffset);
    const original = await readFile(file);
    const second = recordStarts(original)[1]!;
    const bytes = Buffer.from(original);
    bytes[second + 10] ^= 0x55;
    await writeFile(file, bytes);
    await unlink(indexFile(mid.baseOffset)); // a full scan of this closed segment
    await expectRefused(file, `at byte ${second}`);
    await expectRefused(file, `at byte ${second}`); // and again: nothing was repaired meanwhile
    await writeFile(file, original); // the operator restores the file
    await expectWhole();
  });

  it('a flipped byte in the tail a closed segment index vouches for (the clean start of the report)', async () => {
    const segs = await writeLog();
    const mid = segs[2]!;
    const file = logFile(mid.baseOffset);
    const original = await readFile(file);
    const starts = recordStarts(original);
    const victim = starts[Math.floor(starts.length / 2)]!;
    const bytes = Buffer.from(original);
    bytes[victim + 20] ^= 0x01;
    await writeFile(file, bytes);
    await expectRefused(file, `at byte ${victim}`);
    await writeFile(file, original);
    await expectWhole();
  });

  it('a removed middle segment: refused naming the gap, nothing after it deleted', async () => {
    const segs = await writeLog();
    const gone = segs[2]!;
    const saved = await readFile(logFile(gone.baseOffset));
    await unlink(logFile(gone.baseOffset));
    await expectRefused(logFile(segs[3]!.baseOffset), logFile(segs[1]!.baseOffset), `${gone.baseOffset}..${gone.nextOffset - 1} are missing`);
    await writeFile(logFile(gone.baseOffset), saved);
    await expectWhole();
  });

  it('a closed segment cut short at a record boundary: refused, not taken as the log end', async () => {
    const segs = await writeLog();
    const mid = segs[1]!;
    const file = logFile(mid.baseOffset);
    const original = await readFile(file);
    await truncate(file, recordStarts(original).at(-1)!);
    await unlink(indexFile(mid.baseOffset));
    await expectRefused(logFile(segs[2]!.baseOffset), file, `${mid.nextOffset - 1}..${mid.nextOffset - 1} are missing`);
    await writeFile(file, original);
    await expectWhole();
  });

  it('a closed segment torn mid-record: refused (a closed segment never has a torn tail)', async () => {
    const segs = await writeLog();
    const mid = segs[3]!;
    const file = logFile(mid.baseOffset);
    const original = await readFile(file);
    const last = recordStarts(original).at(-1)!;
    await truncate(file, last + 7);
    await unlink(indexFile(mid.baseOffset));
    await expectRefused(file, `at byte ${last}`, 'runs past the end of the file');
    await writeFile(file, original);
    await expectWhole();
  });
});

/** Deterministic bytes that are no record. */
function noise(n: number, seed: number): Buffer {
  const b = Buffer.alloc(n);
  for (let i = 0, x = seed; i < n; i++) {
    x = (x * 1103515245 + 12345) >>> 0;
    b[i] = x >>> 24;
  }
  return b;
}

describe('the last segment: a torn tail is cut, damage followed by valid records refuses', () => {
  const ONE_SEGMENT: Partial<LogOptions> = { ...OPTS, flush: 'os', segmentBytes: 1 << 20 };
  const APPENDS = 6;
  const PER = 3;

  it('appends of 3 records: any cut in the last two appends and a flip in the last record are cut to whole appends; a flip before refuses (flush=always) or is cut (flush=os)', async () => {
    const log = await PartitionLog.open(dir, ONE_SEGMENT);
    for (let a = 0; a < APPENDS; a++) await log.append(Array.from({ length: PER }, (_, j) => ({ key: null, value: value(a * PER + j) })));
    await simulateCrash(log);
    const file = logFile(0);
    const original = await readFile(file);
    const starts = recordStarts(original);
    expect(starts).toHaveLength(APPENDS * PER);
    // End of the last whole append at or before `pos`, and how many records that keeps.
    const appendEnds = Array.from({ length: APPENDS }, (_, a) => starts[(a + 1) * PER] ?? original.length);
    const keptAt = (pos: number) => appendEnds.filter((e) => e <= pos).length;
    const expectCut = async (bytes: Buffer, appends: number, what: string) => {
      await writeFile(file, bytes);
      await unlink(indexFile(0)).catch(() => {});
      const l = await PartitionLog.open(dir, ONE_SEGMENT);
      try {
        expect(l.logEndOffset, what).toBe(appends * PER);
        expect((await readFile(file)).length, what).toBe(appends ? appendEnds[appends - 1]! : 0);
      } finally {
        await simulateCrash(l);
      }
    };
    for (let pos = appendEnds[APPENDS - 3]!; pos < original.length; pos++) {
      await expectCut(original.subarray(0, pos), keptAt(pos), `cut at ${pos}`);
      const flipped = Buffer.from(original);
      flipped[pos] ^= 0xff;
      if (pos < starts.at(-1)!) {
        await writeFile(file, flipped);
        const victim = starts.filter((s) => s <= pos).at(-1)!;
        // With flush=always its appends were fsynced before they were acknowledged: damage, refused.
        await expectRefusedWith({ ...ONE_SEGMENT, flush: 'always' }, file, `at byte ${victim}`, 'followed by a valid record', 'not a torn tail');
        // With flush=os nothing says they reached the disk: the log ends before the damaged append.
        await expectCut(flipped, keptAt(victim), `flip at ${pos}, flush=os`);
      } else {
        await expectCut(flipped, APPENDS - 1, `flip at ${pos}`);
      }
    }
  }, 120_000);

  it('a torn tail of zeros, garbage lengths or a stale record below the log end is cut, not refused', async () => {
    const log = await PartitionLog.open(dir, ONE_SEGMENT);
    for (let i = 0; i < 20; i++) await log.append([{ key: null, value: value(i) }]);
    await simulateCrash(log);
    const file = logFile(0);
    const original = await readFile(file);
    const firstRecord = original.subarray(0, recordStarts(original)[1]);
    const header = (len: number) => Buffer.from([len >>> 24, (len >>> 16) & 0xff, (len >>> 8) & 0xff, len & 0xff]);
    const tails: Array<[string, Buffer]> = [
      ['a hole of zeros', Buffer.alloc(4096)],
      ['a length past the end of the file', Buffer.concat([header(0x0fff_fff0), noise(300, 1)])],
      ['a length below any record', Buffer.concat([header(10), noise(300, 2)])],
      ['a plausible length over noise', Buffer.concat([header(120), noise(300, 3)])],
      ['noise', noise(5000, 4)],
      ['a stale record (offset 0) after a hole', Buffer.concat([Buffer.alloc(64), firstRecord, Buffer.alloc(64)])],
    ];
    for (const [what, tail] of tails) {
      await writeFile(file, Buffer.concat([original, tail]));
      const l = await PartitionLog.open(dir, ONE_SEGMENT);
      try {
        expect(l.logEndOffset, what).toBe(20);
        expect(await readFile(file), what).toEqual(original);
        expect((await l.append([{ key: null, value: Buffer.from('next') }])).baseOffset, what).toBe(20);
      } finally {
        await simulateCrash(l);
      }
      await writeFile(file, original);
    }
  });
});

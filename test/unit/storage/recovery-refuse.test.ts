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
import { INDEX_SUFFIX, LOG_SUFFIX, segmentFileName } from 'tributary-broker/storage/segment-names.js';
import { removeDir, tempDir } from '../../helpers/util.js';

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
  const before = await logFiles();
  const err = (await PartitionLog.open(dir, OPTS).then(
    async (l) => {
      await l.close();
      throw new Error('the damaged log opened');
    },
    (e: unknown) => e,
  )) as TributaryError;
  expect(err.code).toBe('storage_error');
  for (const n of names) expect(err.message).toContain(n);
  expect(await logFiles()).toEqual(before);
  return err;
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

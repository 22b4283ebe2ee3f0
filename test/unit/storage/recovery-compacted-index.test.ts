/**
 * A compacted segment's index file is the only record of its compacted flag (docs/architecture.md "Storage",
 * Compaction). Lost or unreadable, the segment ends at its last record + 1 and the next segment seems to
 * start after a gap: on a compacted topic (the cleanupPolicy the log is opened with) that gap is what
 * compaction leaves, and nothing may be dropped; on any other topic it refuses the open.
 */
import { readdir, readFile, truncate, unlink, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { LogRecord } from 'tributary-protocol/record.js';
import { type LogOptions, PartitionLog } from 'tributary-broker/storage/partition-log.js';
import { INDEX_SUFFIX, LOG_SUFFIX, segmentFileName } from 'tributary-broker/storage/segment-names.js';
import { removeDir, tempDir } from '../../helpers/util.js';
import { fillCompacted, readAll } from './compacted-logs.js';

let dir: string;

beforeEach(async () => {
  dir = await tempDir('trib-compacted-index-');
});
afterEach(async () => {
  await removeDir(dir);
});

const OPTS: Partial<LogOptions> = { flush: 'always', segmentBytes: 600, indexIntervalBytes: 64, tailCacheBytes: 0, cleanupPolicy: 'compact' };

/** A compacted log, closed cleanly; what it held, and a closed compacted segment that ends in a gap. */
async function compactedLog(): Promise<{ records: LogRecord[]; end: number; base: number; next: number }> {
  const log = await fillCompacted(await PartitionLog.open(dir, OPTS));
  const records = await readAll(log);
  const segs = log.segmentInfos();
  const end = log.logEndOffset;
  await log.close();
  const seg = segs.slice(0, -1).find((s) => {
    const inSeg = records.filter((r) => r.offset >= s.baseOffset && r.offset < s.nextOffset);
    return s.compacted && inSeg.length > 0 && inSeg.at(-1)!.offset + 1 < s.nextOffset;
  });
  expect(seg).toBeDefined();
  return { records, end, base: seg!.baseOffset, next: seg!.nextOffset };
}

const indexFile = (base: number) => join(dir, segmentFileName(base, INDEX_SUFFIX));

const damages: Array<[string, (path: string) => Promise<void>]> = [
  ['missing', (p) => unlink(p)],
  ['truncated', (p) => truncate(p, 20)],
  ['garbage', async (p) => writeFile(p, Buffer.alloc((await readFile(p)).length, 0x5a))],
];

describe('a compacted segment whose index file is lost', () => {
  for (const [what, damage] of damages) {
    it(`(${what}) on a compacted topic: every record and the log end stay, and the flag is written again`, async () => {
      const { records, end, base, next } = await compactedLog();
      const names = (await readdir(dir)).filter((n) => n.endsWith(LOG_SUFFIX)).sort();
      await damage(indexFile(base));
      let log = await PartitionLog.open(dir, OPTS);
      try {
        expect(log.logEndOffset).toBe(end);
        expect(await readAll(log)).toEqual(records);
        expect(log.segmentInfos().find((s) => s.baseOffset === base)).toMatchObject({ compacted: true, nextOffset: next });
        expect((await log.append([{ key: Buffer.from('k'), value: Buffer.from('after') }])).baseOffset).toBe(end);
      } finally {
        await log.close();
      }
      expect((await readdir(dir)).filter((n) => n.endsWith(LOG_SUFFIX)).sort()).toEqual(names);
      // The flag is back in the index: a reopen, even as a topic of another policy, finds the same log.
      log = await PartitionLog.open(dir, { ...OPTS, cleanupPolicy: 'delete' });
      try {
        expect(log.logEndOffset).toBe(end + 1);
        expect((await readAll(log)).slice(0, -1)).toEqual(records);
      } finally {
        await log.close();
      }
    });
  }

  it('on a topic that is not compacted the gap refuses the open, naming both files, and removes nothing', async () => {
    const { base } = await compactedLog();
    await unlink(indexFile(base));
    const before = (await readdir(dir)).filter((n) => n.endsWith(LOG_SUFFIX)).sort();
    const after = before[before.indexOf(segmentFileName(base, LOG_SUFFIX)) + 1]!;
    const err = await PartitionLog.open(dir, { ...OPTS, cleanupPolicy: 'delete' }).then(
      async (l) => {
        await l.close();
        throw new Error('opened');
      },
      (e: Error & { code?: string }) => e,
    );
    expect(err.code).toBe('storage_error');
    expect(err.message).toContain(join(dir, after));
    expect(err.message).toContain(join(dir, segmentFileName(base, LOG_SUFFIX)));
    expect(err.message).toContain('are missing');
    expect((await readdir(dir)).filter((n) => n.endsWith(LOG_SUFFIX)).sort()).toEqual(before);
  });
});

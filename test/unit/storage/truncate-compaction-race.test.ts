/**
 * A compaction planned while a truncation changes the files (docs/architecture.md "Storage", Compaction).
 * It may read segments the truncation has yet to cut, and count records the cut takes as the latest of
 * their keys: its swap, which waits for the truncation, must then swap nothing in, or the older record of
 * such a key goes and the key disappears.
 */
import { join } from 'node:path';
import { afterEach, beforeEach, expect, it, vi } from 'vitest';
import { LogWriter } from 'tributary-broker/storage/log-writer.js';
import { PartitionLog } from 'tributary-broker/storage/partition-log.js';
import { Segment } from 'tributary-broker/storage/segment.js';
import { removeDir, tempDir } from '../../helpers/util.js';

const T0 = 1_700_000_000_000;
let dir: string;
let log: PartitionLog | undefined;
beforeEach(async () => {
  dir = await tempDir('trib-truncate-compaction-');
});
afterEach(async () => {
  vi.restoreAllMocks();
  await log?.close().catch(() => {});
  await removeDir(dir);
});

/** The test's log, small segments and no tail cache, and `put`, which appends one record of ~35 bytes. */
async function openLog() {
  const l = await PartitionLog.open(join(dir, 'l'), { flush: 'always', segmentBytes: 600, indexIntervalBytes: 64, tailCacheBytes: 0 });
  log = l;
  const put = (key: string | null, v: string) =>
    l.append([{ key: key === null ? null : Buffer.from(key), value: Buffer.from(`${v}-${'x'.repeat(30)}`), timestamp: T0 }]);
  return { l, put };
}

/** The first Segment.remove waits for release(); `inRemove` resolves once it is waiting. */
function holdFirstRemove(): { inRemove: Promise<void>; release: () => void } {
  let entered!: () => void;
  const inRemove = new Promise<void>((r) => (entered = r));
  let release!: () => void;
  const gate = new Promise<void>((r) => (release = r));
  const remove = Segment.prototype.remove;
  let first = true;
  vi.spyOn(Segment.prototype, 'remove').mockImplementation(async function (this: Segment) {
    if (first) {
      first = false;
      entered();
      await gate;
    }
    return remove.call(this);
  });
  return { inRemove, release };
}

it('a compaction planned while a truncation removes segments keeps the record of a key whose later record the cut takes', async () => {
  const { l, put } = await openLog();
  await put('K', 'old');
  while (l.segmentInfos().length < 3) await put(null, 'f');
  const cut = l.logEndOffset + 1;
  await put(null, 'f');
  await put(null, 'f');
  await put('K', 'new'); // in the segment the truncation keeps, past the cut
  while (l.segmentInfos().length < 4) await put(null, 'f');
  await put(null, 'f');
  l.setHighWatermark(l.logEndOffset);
  expect(cut).toBeGreaterThan(l.segmentInfos()[2].baseOffset);

  // The truncation stops in its removal of the last segment, after it began to change the files.
  const { inRemove, release } = holdFirstRemove();
  const truncation = l.truncateTo(cut);
  await inRemove;
  // The compaction plans and writes its temp files meanwhile; its swap then waits for the truncation.
  let swapQueued!: () => void;
  const queued = new Promise<void>((r) => (swapQueued = r));
  const exclusive = LogWriter.prototype.exclusive;
  vi.spyOn(LogWriter.prototype, 'exclusive').mockImplementation(function <T>(this: LogWriter, fn: () => Promise<T>) {
    swapQueued();
    return exclusive.call(this, fn) as Promise<T>;
  });
  const compaction = l.compact({ now: T0 });
  await queued;
  release();
  await truncation;
  await compaction;
  const out = await l.read(l.logStartOffset, { maxRecords: 1000, maxBytes: 1 << 20 });
  const k = out.filter((r) => r.key?.toString() === 'K').map((r) => r.value.toString().split('-')[0]);
  expect(k).toEqual(['old']);
});

it('a compaction planned while a truncation cuts the segment it then reads as the active one gives up quietly, not with a corrupt record', async () => {
  const { l, put } = await openLog();
  for (let i = 0; l.segmentInfos().length < 3; i++) await put(`k${i % 4}`, `v${i}`);
  // Inside the second segment, which the cut leaves the last, so the active one.
  const cut = l.segmentInfos()[1].baseOffset + 2;
  await put(null, 'f');
  l.setHighWatermark(l.logEndOffset);
  const before = await l.read(0, { maxRecords: 1000, maxBytes: 1 << 20 });

  // The truncation stops in its removal of the last segment: the segment list is cut, the files not yet.
  const { inRemove, release } = holdFirstRemove();
  // The compaction takes the sizes it scans to now, then waits in its first scan until the cut is done.
  let truncated!: () => void;
  const cutDone = new Promise<void>((r) => (truncated = r));
  const scan = Segment.prototype.scanRecords;
  let firstScan = true;
  vi.spyOn(Segment.prototype, 'scanRecords').mockImplementation(async function (this: Segment, ...args: Parameters<Segment['scanRecords']>) {
    if (firstScan) {
      firstScan = false;
      await cutDone;
    }
    return scan.apply(this, args);
  });
  const truncation = l.truncateTo(cut);
  await inRemove;
  const compaction = l.compact({ now: T0 });
  release();
  await truncation;
  truncated();
  expect(await compaction).toMatchObject({ segmentsCompacted: 0, recordsRemoved: 0 });
  expect(await l.read(0, { maxRecords: 1000, maxBytes: 1 << 20 })).toEqual(before.filter((r) => r.offset < cut));
});

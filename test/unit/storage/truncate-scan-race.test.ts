/**
 * A compaction whose scan of a segment starts while a truncation is cutting that segment (docs/architecture.md
 * "Storage", Compaction): the scan takes the segment's version after the cut began but its size from before
 * the cut, and reads the records appended after the cut where the cut ones were. That is a race, not damage:
 * the compaction gives up quietly (the next run retries), it does not fail with "corrupt record".
 * Found by test/unit/storage/compaction-properties.test.ts (a compaction racing a truncation and appends).
 */
import { join } from 'node:path';
import { afterEach, beforeEach, expect, it, vi } from 'vitest';
import { PartitionLog } from 'tributary-broker/storage/partition-log.js';
import { Segment } from 'tributary-broker/storage/segment.js';
import { removeDir, tempDir } from '../../helpers/util.js';

const T0 = 1_700_000_000_000;
let dir: string;
let log: PartitionLog | undefined;
beforeEach(async () => {
  dir = await tempDir('trib-truncate-scan-');
});
afterEach(async () => {
  vi.restoreAllMocks();
  await log?.close().catch(() => {});
  await removeDir(dir);
});

/**
 * Holds a compaction's scan of the segment a truncation cuts until the truncation has taken that segment's
 * version and not yet its size. `duringCut`: the scan then runs while the cut is under way (the file cut, its
 * size not yet); else after the cut and the appends that follow it.
 */
async function scanDuringCut(duringCut: boolean): Promise<void> {
  const l = await PartitionLog.open(join(dir, 'l'), { flush: 'always', segmentBytes: 600, indexIntervalBytes: 64, tailCacheBytes: 0, cleanupPolicy: 'compact' });
  log = l;
  for (let i = 0; i < 60; i++) await l.append([{ key: Buffer.from(`k${i % 5}`), value: Buffer.from(`v${i}-${'x'.repeat(i % 7)}`), timestamp: T0 + i }]);
  const infos = l.segmentInfos();
  expect(infos.length).toBeGreaterThanOrEqual(4);
  // The cut falls inside the second segment, which becomes the last; the HWM is just below it.
  const first = infos[0]!;
  const kept = infos[1]!;
  const cutAt = kept.baseOffset + 3;
  l.setHighWatermark(kept.baseOffset + 2);

  const signal = () => {
    let resolve: () => void = () => {};
    const p = new Promise<void>((r) => {
      resolve = r;
    });
    return { p, resolve };
  };
  const pass2Started = signal();
  const pass2Go = signal();
  const keptScanStarted = signal();
  const keptScanGo = signal();
  let firstScans = 0;
  let inCut = false;
  const withHandle = Segment.prototype.withHandle;
  const scanRecords = Segment.prototype.scanRecords;
  vi.spyOn(Segment.prototype, 'scanRecords').mockImplementation(async function (this: Segment, ...args) {
    // The compaction's second pass starts (its first scan of the first segment was its first pass): held
    // until the truncation is under way.
    if (this.baseOffset === first.baseOffset && ++firstScans === 2) {
      pass2Started.resolve();
      await pass2Go.p;
    }
    // Its scan of the segment being cut, with the end it read mid-cut: held until the cut and the appends
    // after it are written.
    if (inCut && this.baseOffset === kept.baseOffset) {
      inCut = false;
      keptScanStarted.resolve();
      await keptScanGo.p;
    }
    return scanRecords.apply(this, args);
  });
  vi.spyOn(Segment.prototype, 'withHandle').mockImplementation(async function (this: Segment, fn) {
    // Segment.truncateTo's file cut: the segment's version has moved, its size not yet.
    if (!inCut && firstScans === 2 && this.baseOffset === kept.baseOffset && l.segmentInfos().length === 2 && this.size === kept.sizeBytes) {
      inCut = true;
      pass2Go.resolve();
      await keptScanStarted.p;
      if (duringCut) {
        // The file is cut; the compaction's scan runs to its end before the truncation goes on.
        const cut = async (fh: Parameters<typeof fn>[0]) => {
          const r = await fn(fh);
          keptScanGo.resolve();
          await compacting;
          return r;
        };
        return withHandle.call(this, cut as never) as never;
      }
    }
    return withHandle.call(this, fn as never) as never;
  });

  const compacting = l.compact({ now: T0 + 1000, tombstoneRetentionMs: 0 }).then(
    (r) => r,
    (err: unknown) => err,
  );
  await pass2Started.p;
  await l.truncateTo(cutAt);
  // Other records where the cut ones were, and past their end.
  for (let i = 0; i < 12; i++) await l.append([{ key: Buffer.from(`n${i}`), value: Buffer.from(`new-${i}-${'y'.repeat(20 + i)}`), timestamp: T0 + 500 }]);
  keptScanGo.resolve();
  const res = await compacting;
  expect(res).toEqual({ segmentsCompacted: 0, recordsRemoved: 0, bytesBefore: 0, bytesAfter: 0 });
  // The next compaction goes through, and the log reads whole.
  l.setHighWatermark(l.logEndOffset);
  await l.compact({ now: T0 + 1000, tombstoneRetentionMs: 0 });
  const got = await l.read(cutAt, { maxRecords: 100, maxBytes: 1 << 20 });
  expect(got.map((r) => r.key?.toString())).toEqual(Array.from({ length: 12 }, (_, i) => `n${i}`));
}

it('a compaction that scans a segment while a truncation cuts it and appends follow gives up quietly', async () => {
  await scanDuringCut(false);
});

it('a compaction that scans a segment while a truncation is cutting its file gives up quietly', async () => {
  await scanDuringCut(true);
});

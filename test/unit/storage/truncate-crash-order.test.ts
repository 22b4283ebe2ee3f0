/**
 * The order of a log truncation's steps (docs/architecture.md "Storage", Compaction) as a crash or a power
 * loss sees it: the segments past the cut go newest first, so a crash part-way leaves a prefix of the old
 * log (never a hole that a compacted segment's stretch would bridge), and the new segment at the cut has
 * its directory entry fsynced before anything changes, so a power loss cannot keep the cut without it.
 */
import { cp } from 'node:fs/promises';
import { join } from 'node:path';
import { beforeEach, expect, it, vi } from 'vitest';
import type { LogRecord } from 'tributary-protocol/record.js';
import { Segment } from 'tributary-broker/storage/segment.js';
import { cutAfterRecord, fillCompacted, readAll, useLogDir } from './compacted-logs.js';

/** Steps seen, in order: fsyncs of the log directory and segment cuts and removals. */
const seen = vi.hoisted(() => ({ events: [] as string[], dir: '' }));
vi.mock('node:fs/promises', async (importOriginal) => {
  const fs = await importOriginal<typeof import('node:fs/promises')>();
  return {
    ...fs,
    open: async (...args: Parameters<typeof fs.open>) => {
      const fh = await fs.open(...args);
      if (seen.dir !== '' && String(args[0]) === seen.dir) {
        const sync = fh.sync.bind(fh);
        fh.sync = async () => {
          seen.events.push('dirsync');
          return sync();
        };
      }
      return fh;
    },
  };
});

const { dir: tmp, openLog } = useLogDir('trib-truncate-order-');
beforeEach(() => {
  seen.events = [];
  seen.dir = '';
});

const ids = (records: LogRecord[]) => records.map((r) => `${r.offset}:${r.value.toString()}`);

it('a crash while the segments past the cut are removed leaves a prefix of the old log, never a hole', async () => {
  const log = await fillCompacted(await openLog('l'));
  const all = await readAll(log);
  const { cut } = await cutAfterRecord(log, 3);
  const images: string[] = [];
  const remove = Segment.prototype.remove;
  vi.spyOn(Segment.prototype, 'remove').mockImplementation(async function (this: Segment) {
    const image = join(tmp(), `image-${images.length}`);
    await cp(join(tmp(), 'l'), image, { recursive: true });
    images.push(image);
    return remove.call(this);
  });
  await log.truncateTo(cut);
  vi.restoreAllMocks();
  expect(images.length).toBeGreaterThan(1);
  for (const image of images) {
    const got = await readAll(await openLog(image.slice(tmp().length + 1)));
    const above = ids(got.filter((r) => r.offset >= cut));
    // What a crash keeps is the old log up to some offset: below the cut all of it, above it a prefix.
    expect(ids(got.filter((r) => r.offset < cut))).toEqual(ids(all.filter((r) => r.offset < cut)));
    expect(above).toEqual(ids(all.filter((r) => r.offset >= cut)).slice(0, above.length));
  }
});

it("the new segment at a compacted segment's cut is fsynced into the directory before anything changes", async () => {
  const log = await fillCompacted(await openLog('l'));
  const { cut } = await cutAfterRecord(log, 3);
  seen.dir = join(tmp(), 'l');
  const truncate = Segment.prototype.truncateTo;
  vi.spyOn(Segment.prototype, 'truncateTo').mockImplementation(async function (this: Segment, c, durable) {
    seen.events.push('cut');
    return truncate.call(this, c, durable);
  });
  const remove = Segment.prototype.remove;
  vi.spyOn(Segment.prototype, 'remove').mockImplementation(async function (this: Segment) {
    seen.events.push('remove');
    return remove.call(this);
  });
  await log.truncateTo(cut);
  expect(seen.events[0]).toBe('dirsync');
  expect(seen.events).toContain('cut');
  expect(log.logEndOffset).toBe(cut);
});

it('the segments past the cut are fsynced away before the segment kept is cut', async () => {
  // A power loss between the two brought removed segments back after a kept segment that then ended short
  // of them: recovery refuses that gap (offsets missing) and the partition stayed down.
  const log = await openLog('l');
  for (let a = 0; a < 60; a++) await log.append([{ key: null, value: Buffer.from(`record-${a}-${'v'.repeat(20)}`) }]);
  const segs = log.segmentInfos();
  expect(segs.length).toBeGreaterThan(2);
  seen.dir = join(tmp(), 'l');
  const truncate = Segment.prototype.truncateTo;
  vi.spyOn(Segment.prototype, 'truncateTo').mockImplementation(async function (this: Segment, c, durable) {
    seen.events.push('cut');
    return truncate.call(this, c, durable);
  });
  const remove = Segment.prototype.remove;
  vi.spyOn(Segment.prototype, 'remove').mockImplementation(async function (this: Segment) {
    seen.events.push('remove');
    return remove.call(this);
  });
  // Into the first segment, past its first record: every later segment goes, the first is cut.
  await log.truncateTo(segs[0]!.baseOffset + 1);
  expect(log.logEndOffset).toBe(segs[0]!.baseOffset + 1);
  const cut = seen.events.indexOf('cut');
  const lastRemove = seen.events.lastIndexOf('remove', cut);
  expect(lastRemove).toBeGreaterThanOrEqual(0);
  expect(seen.events.slice(lastRemove, cut)).toContain('dirsync');
});

import { readdir, readFile, stat, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import type { LogRecord, RecordInput } from 'tributary-protocol/record.js';
import { type CompactOptions, type LogOptions, PartitionLog, type SegmentInfo, SimulatedCrash } from 'tributary-broker/storage/partition-log.js';
import { armCompactionCrash, simulateCrash } from 'tributary-broker/storage/log-test-hooks.js';
import { GroupCommit } from 'tributary-broker/storage/group-commit.js';
import { Segment } from 'tributary-broker/storage/segment.js';
import { parseIndex, serializeIndex } from 'tributary-broker/storage/offset-index.js';
import { removeDir, tempDir } from '../../helpers/util.js';

/** Runs after every real rename (the log's and the test's): lets a test act right after compaction swaps a file in. */
const fsHooks = vi.hoisted(() => ({ afterRename: null as ((from: string, to: string) => Promise<void>) | null }));
vi.mock('node:fs/promises', async (importOriginal) => {
  const fs = await importOriginal<typeof import('node:fs/promises')>();
  return {
    ...fs,
    rename: async (from: Parameters<typeof fs.rename>[0], to: Parameters<typeof fs.rename>[1]) => {
      await fs.rename(from, to);
      if (fsHooks.afterRename) await fsHooks.afterRename(String(from), String(to));
    },
  };
});

let dir: string;
const opened: PartitionLog[] = [];

beforeEach(async () => {
  dir = await tempDir('trib-compact-');
});
afterEach(async () => {
  fsHooks.afterRename = null;
  vi.restoreAllMocks();
  for (const l of opened.splice(0)) await l.close().catch(() => {});
  await removeDir(dir);
});

const OPTS: Partial<LogOptions> = { flush: 'os', segmentBytes: 600, indexIntervalBytes: 64 };
const T0 = 1_700_000_000_000;
const HOUR = 3600 * 1000;

async function openLog(opts: Partial<LogOptions> = {}): Promise<PartitionLog> {
  const l = followEnd(await PartitionLog.open(dir, { ...OPTS, ...opts }));
  opened.push(l);
  return l;
}

/**
 * The HWM as a standalone broker's partition layer moves it: to the log end on open and past each append
 * once it is acknowledged. Compaction stops at the HWM (its first uncleanable offset).
 */
function followEnd(l: PartitionLog): PartitionLog {
  l.setHighWatermark(l.logEndOffset);
  const append = l.append.bind(l);
  l.append = async (records) => {
    const res = await append(records);
    l.setHighWatermark(res.lastOffset + 1);
    return res;
  };
  return l;
}

interface Rec {
  offset: number;
  key: string | null;
  value: string;
  ts: number;
}

/** The log's content as the test expects it, in offset order. */
class Model {
  recs: Rec[] = [];
  async append(log: PartitionLog, batch: Array<{ key: string | null; value: string; ts?: number }>): Promise<void> {
    const input: RecordInput[] = batch.map((b) => ({ key: b.key === null ? null : Buffer.from(b.key), value: Buffer.from(b.value), timestamp: b.ts ?? T0 }));
    const res = await log.append(input);
    for (const [i, b] of batch.entries()) this.recs.push({ offset: res.baseOffset + i, key: b.key, value: b.value, ts: b.ts ?? T0 });
  }
  /** What compaction keeps: the active segment, null keys, and each key's latest record (tombstones while young). */
  compacted(activeBase: number, now = T0, tombstoneMs = 24 * HOUR, upTo = Infinity): Rec[] {
    const latest = new Map<string, number>();
    for (const r of this.recs) if (r.key !== null && r.offset < upTo) latest.set(r.key, r.offset);
    return this.recs.filter(
      (r) => r.offset >= activeBase || r.key === null || (latest.get(r.key) === r.offset && (r.value !== '' || now - r.ts <= tombstoneMs)),
    );
  }
}

function plain(list: LogRecord[]): Rec[] {
  return list.map((r) => ({ offset: r.offset, key: r.key === null ? null : r.key.toString(), value: r.value.toString(), ts: r.timestamp }));
}

async function readAll(log: PartitionLog, maxRecords = 1000, from = log.logStartOffset): Promise<Rec[]> {
  const out: LogRecord[] = [];
  let next = from;
  while (next < log.logEndOffset) {
    const got = await log.read(next, { maxRecords, maxBytes: 1 << 20 });
    if (got.length === 0) break;
    out.push(...got);
    next = got[got.length - 1].offset + 1;
  }
  return plain(out);
}

function activeBase(log: PartitionLog): number {
  const infos = log.segmentInfos();
  return infos[infos.length - 1].baseOffset;
}

/** Keys overwritten many times, some null keys, batches of 1-4 records, across several segments. */
async function fill(log: PartitionLog, model: Model, n: number, keys = 13, from = 0): Promise<void> {
  for (let i = from; i < from + n; ) {
    const batch: Array<{ key: string | null; value: string; ts: number }> = [];
    for (let k = 0; k <= i % 4 && i < from + n; k++, i++) {
      batch.push({ key: i % 7 === 0 ? null : `key-${i % keys}`, value: `v${i}-${'p'.repeat(i % 9)}`, ts: T0 + i });
    }
    await model.append(log, batch);
  }
}

function expectSegmentsContiguous(log: PartitionLog): void {
  const infos = log.segmentInfos();
  expect(infos[0].baseOffset).toBe(log.logStartOffset);
  for (let i = 1; i < infos.length; i++) expect(infos[i].baseOffset).toBe(infos[i - 1].nextOffset);
}

async function tmpFiles(): Promise<string[]> {
  return (await readdir(dir)).filter((n) => n.endsWith('.tmp'));
}

describe('log compaction', () => {
  it('keeps only the latest record per key in closed segments; reads, index and timestamps work over the gaps', async () => {
    const log = await openLog();
    const model = new Model();
    await fill(log, model, 300);
    expect(log.segmentInfos().length).toBeGreaterThan(5);
    const base = activeBase(log);
    const expected = model.compacted(base);
    const sizeBefore = log.sizeBytes;

    const res = await log.compact({ now: T0 });
    expect(res.recordsRemoved).toBe(model.recs.length - expected.length);
    expect(res.segmentsCompacted).toBeGreaterThan(0);
    expect(res.bytesAfter).toBeLessThan(res.bytesBefore);
    expect(log.sizeBytes).toBe(sizeBefore - (res.bytesBefore - res.bytesAfter));
    expect(log.logStartOffset).toBe(0);
    expect(log.logEndOffset).toBe(300);
    expectSegmentsContiguous(log);
    expect(
      log
        .segmentInfos()
        .slice(0, -1)
        .some((s) => s.compacted),
    ).toBe(true);
    expect(log.segmentInfos().at(-1)?.compacted).toBe(false);

    for (const max of [1, 3, 1000]) expect(await readAll(log, max)).toEqual(expected);
    // Closed segments hold each non-null key at most once.
    const closedKeys = expected.filter((r) => r.offset < base && r.key !== null).map((r) => r.key);
    expect(new Set(closedKeys).size).toBe(closedKeys.length);
    // A read from any offset, in a gap or not, starts at the next kept record.
    for (let o = 0; o < 300; o++) {
      const got = await log.read(o, { maxRecords: 1, maxBytes: 1 });
      expect(got[0]?.offset, `read from ${o}`).toBe(expected.find((r) => r.offset >= o)?.offset);
    }
    for (const i of [0, 1, 5, 50, 149, 150, 200, base - 1, base, 299, 300]) {
      expect(await log.offsetForTimestamp(T0 + i), `ts ${i}`).toBe(expected.find((r) => r.ts >= T0 + i)?.offset ?? 300);
    }

    // Idempotent.
    expect((await log.compact({ now: T0 })).recordsRemoved).toBe(0);
    expect(await readAll(log)).toEqual(expected);
  });

  it('keeps the result across a clean reopen and a crash, and compacts again after more appends', async () => {
    let log = await openLog({ tailCacheBytes: 0 });
    const model = new Model();
    await fill(log, model, 200);
    await log.compact({ now: T0 });
    let expected = model.compacted(activeBase(log));
    await log.close();
    log = await openLog();
    expect(await readAll(log)).toEqual(expected);
    expectSegmentsContiguous(log);
    await simulateCrash(log);
    log = await openLog();
    expect(await readAll(log)).toEqual(expected);
    expectSegmentsContiguous(log);

    // The log keeps working: appends land after the LEO and a second round compacts old and new segments.
    await fill(log, model, 150, 13, 200);
    await log.compact({ now: T0 });
    expected = model.compacted(activeBase(log));
    expect(await readAll(log)).toEqual(expected);
    await simulateCrash(log);
    log = await openLog();
    expect(await readAll(log)).toEqual(expected);
    expect(log.logEndOffset).toBe(350);
    expect((await log.append([{ key: Buffer.from('x'), value: Buffer.from('y') }])).baseOffset).toBe(350);
  });

  it('keeps null keys and an emptied first segment (the log start does not move)', async () => {
    const log = await openLog({ tailCacheBytes: 0 });
    const model = new Model();
    // First segment: keys that all get overwritten later.
    for (let i = 0; i < 20; i++) await model.append(log, [{ key: `early-${i % 5}`, value: `e${i}` }]);
    for (let i = 0; i < 30; i++) await model.append(log, [{ key: null, value: `n${i}` }]);
    for (let i = 0; i < 5; i++) await model.append(log, [{ key: `early-${i}`, value: `late-${i}` }]);
    for (let i = 0; i < 30; i++) await model.append(log, [{ key: `other-${i % 3}`, value: `o${i}` }]);
    const first = log.segmentInfos()[0];
    expect(first.nextOffset).toBeLessThanOrEqual(20);
    expect(activeBase(log)).toBeGreaterThan(55);

    await log.compact({ now: T0 });
    const expected = model.compacted(activeBase(log));
    expect(expected.filter((r) => r.key === null)).toHaveLength(30);
    // Emptied segments after it are gone: the first one reaches the next segment left.
    const infos = log.segmentInfos();
    expect(infos[0]).toMatchObject({ baseOffset: 0, sizeBytes: 0, nextOffset: infos[1]!.baseOffset, compacted: true });
    expect(infos[0]!.nextOffset).toBeGreaterThanOrEqual(first.nextOffset);
    expect(log.logStartOffset).toBe(0);
    expect(await readAll(log)).toEqual(expected);
    expect((await log.read(0, { maxRecords: 1, maxBytes: 1 }))[0].offset).toBe(20);
    await simulateCrash(log);
    const again = await openLog();
    expect(again.logStartOffset).toBe(0);
    expect(again.segmentInfos()).toEqual(infos);
    expect(await readAll(again)).toEqual(expected);
  });

  it('removes the segments compaction empties: keys written again and again keep a bounded number of files, across a crash', async () => {
    let log = await openLog({ tailCacheBytes: 0 });
    const model = new Model();
    const logFiles = async () => (await readdir(dir)).filter((n) => n.endsWith('.log')).length;
    for (let round = 0; round < 8; round++) {
      for (let i = 0; i < 40; i++) await model.append(log, [{ key: `k-${i % 5}`, value: `r${round}-${i}` }]);
      await log.compact({ now: T0 });
      expect(await readAll(log)).toEqual(model.compacted(activeBase(log)));
      expectSegmentsContiguous(log);
    }
    // 320 records of about 40 bytes in 600-byte segments: about 20 segments without the removal. Left: the
    // first (the log start stays), the closed ones holding the keys' latest records, and the active one.
    expect(log.segmentInfos()[0]!.baseOffset).toBe(0);
    expect(await logFiles()).toBeLessThanOrEqual(4);
    const infos = log.segmentInfos();
    const expected = model.compacted(activeBase(log));
    await simulateCrash(log);
    log = await openLog({ tailCacheBytes: 0 });
    expect(log.segmentInfos()).toEqual(infos);
    expect(await readAll(log)).toEqual(expected);
    expect((await log.append([{ key: null, value: Buffer.from('z') }])).baseOffset).toBe(320);
  });

  it('a crash after the segment before an emptied one was stretched over it, before its files went: open removes it, nothing else changes', async () => {
    // flush=always: the stretched index is trusted on open (with flush=os it is rebuilt from its records and
    // the empty segment stays, contiguous, until the next compaction).
    let log = await openLog({ tailCacheBytes: 0, flush: 'always' });
    const model = new Model();
    // Segment 0 keeps a key no one writes again; the next ones hold only keys written again later.
    await model.append(log, [{ key: 'kept', value: 'x'.repeat(500) }]);
    for (let i = 0; i < 60; i++) await model.append(log, [{ key: `k-${i % 3}`, value: `v${i}` }]);
    const before = log.segmentInfos();
    expect(before.length).toBeGreaterThan(3);
    const expected = model.compacted(activeBase(log));

    armCompactionCrash(log, 'emptied-stretched');
    await expect(log.compact({ now: T0 })).rejects.toBeInstanceOf(SimulatedCrash);
    await simulateCrash(log);
    log = await openLog({ tailCacheBytes: 0, flush: 'always' });
    expectSegmentsContiguous(log);
    expect(log.logEndOffset).toBe(61);
    // Per old segment: its records as before, or as compacted (an emptied one: none).
    const got = await readAll(log);
    for (const s of before) {
      const inSeg = (r: Rec) => r.offset >= s.baseOffset && r.offset < s.nextOffset;
      const now = got.filter(inSeg);
      if (JSON.stringify(now) !== JSON.stringify(model.recs.filter(inSeg))) expect(now).toEqual(expected.filter(inSeg));
    }
    // No empty segment is left inside another one's range.
    expect(log.segmentInfos().slice(1, -1).every((s) => s.sizeBytes > 0)).toBe(true);
    await log.compact({ now: T0 });
    expect(await readAll(log)).toEqual(expected);
    await simulateCrash(log);
    log = await openLog();
    expect(await readAll(log)).toEqual(expected);
    expectSegmentsContiguous(log);
  });

  it('keeps a tombstone as the latest record until it is older than tombstoneRetentionMs', async () => {
    const log = await openLog();
    const model = new Model();
    await model.append(log, [{ key: 'gone', value: 'v1', ts: T0 }]);
    await model.append(log, [{ key: 'stays', value: 's1', ts: T0 }]);
    await model.append(log, [{ key: 'gone', value: 'v2', ts: T0 + 1 }]);
    await model.append(log, [{ key: 'gone', value: '', ts: T0 + 2 }]);
    await model.append(log, [{ key: 'revived', value: '', ts: T0 + 3 }]);
    await model.append(log, [{ key: 'revived', value: 'back', ts: T0 + 4 }]);
    await fill(log, model, 60, 5, 100);
    expect(activeBase(log)).toBeGreaterThan(6);
    const keysOf = async () => (await readAll(log)).filter((r) => r.offset < 6).map((r) => [r.key, r.value]);

    // Young tombstone: kept (and the values it deletes are gone).
    let res = await log.compact({ now: T0 + 1000, tombstoneRetentionMs: 5000 });
    expect(res.recordsRemoved).toBeGreaterThan(0);
    expect(await keysOf()).toEqual([
      ['stays', 's1'],
      ['gone', ''],
      ['revived', 'back'],
    ]);
    expect(await readAll(log)).toEqual(model.compacted(activeBase(log), T0 + 1000, 5000));
    // Default retention (24 h).
    res = await log.compact({ now: T0 + 23 * HOUR });
    expect(await keysOf()).toEqual([
      ['stays', 's1'],
      ['gone', ''],
      ['revived', 'back'],
    ]);
    res = await log.compact({ now: T0 + 25 * HOUR });
    expect(res.recordsRemoved).toBe(1);
    expect(await keysOf()).toEqual([
      ['stays', 's1'],
      ['revived', 'back'],
    ]);
    await log.close();
    const again = await openLog();
    expect((await readAll(again)).filter((r) => r.key === 'gone')).toEqual([]);
  });

  it('never touches the active segment and drops keys whose latest record is in it', async () => {
    const log = await openLog();
    const model = new Model();
    await fill(log, model, 100, 4);
    const base = activeBase(log);
    // Tombstones and values in the active segment are newer than everything closed.
    await model.append(log, [
      { key: 'key-1', value: '' },
      { key: 'key-2', value: 'latest' },
    ]);
    expect(activeBase(log)).toBe(base);
    const activeBefore = (await readAll(log, 1000, base)).length;
    await log.compact({ now: T0 + 100 * HOUR, tombstoneRetentionMs: 0 });
    const after = await readAll(log);
    expect(after).toEqual(model.compacted(base, T0 + 100 * HOUR, 0));
    expect(after.filter((r) => r.offset >= base)).toHaveLength(activeBefore);
    expect(after.filter((r) => r.offset < base && (r.key === 'key-1' || r.key === 'key-2'))).toEqual([]);
  });

  for (const crashAt of ['temp-written', 'index-renamed', 'log-renamed'] as const) {
    it(`a crash during compaction (${crashAt}) recovers to the old or the new content of each segment`, async () => {
      let log = await openLog({ tailCacheBytes: 0 });
      const model = new Model();
      await fill(log, model, 200);
      const base = activeBase(log);
      const expected = model.compacted(base);
      const segs = log.segmentInfos();

      armCompactionCrash(log, crashAt);
      await expect(log.compact({ now: T0 } satisfies CompactOptions)).rejects.toBeInstanceOf(SimulatedCrash);
      if (crashAt === 'temp-written') expect((await tmpFiles()).length).toBeGreaterThan(0);
      await simulateCrash(log);
      log = await openLog({ tailCacheBytes: 0 });
      expect(await tmpFiles()).toEqual([]);
      expect(log.logEndOffset).toBe(200);
      expectSegmentsContiguous(log);
      const got = await readAll(log);
      // Per segment: all of the old records, or exactly the compacted ones.
      let swapped = 0;
      for (const s of segs) {
        const inSeg = (r: Rec) => r.offset >= s.baseOffset && r.offset < s.nextOffset;
        const now = got.filter(inSeg);
        const oldRecs = model.recs.filter(inSeg);
        const newRecs = expected.filter(inSeg);
        if (JSON.stringify(now) !== JSON.stringify(oldRecs)) {
          expect(now).toEqual(newRecs);
          swapped++;
        }
      }
      expect(swapped).toBe(crashAt === 'log-renamed' ? 1 : 0);
      // The next compaction finishes the job.
      await log.compact({ now: T0 });
      expect(await readAll(log)).toEqual(expected);
      await simulateCrash(log);
      log = await openLog();
      expect(await readAll(log)).toEqual(expected);
      expect((await log.append([{ key: null, value: Buffer.from('z') }])).baseOffset).toBe(200);
    });
  }

  it('appends and reads during compaction get correct offsets and consistent data', async () => {
    const log = await openLog({ tailCacheBytes: 0 });
    const model = new Model();
    await fill(log, model, 200);
    const base = activeBase(log);
    const leo = log.logEndOffset;

    // Hold compaction inside its first scan while the log is used.
    const scan = Segment.prototype.scanRecords;
    let entered!: () => void;
    const inScan = new Promise<void>((r) => (entered = r));
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    let first = true;
    vi.spyOn(Segment.prototype, 'scanRecords').mockImplementation(async function (this: Segment, ...args: Parameters<Segment['scanRecords']>) {
      if (first) {
        first = false;
        entered();
        await gate;
      }
      return scan.apply(this, args);
    });
    const compaction = log.compact({ now: T0 });
    await inScan;
    const before = model.compacted(base, T0, 24 * HOUR, leo);
    await fill(log, model, 120, 13, leo);
    expect(model.recs.map((r) => r.offset)).toEqual(Array.from({ length: leo + 120 }, (_, i) => i));
    expect(activeBase(log)).toBeGreaterThan(base);
    release();

    // Concurrent readers and appenders while the rewrite and the swap run.
    const readers = Array.from({ length: 3 }, async (_, k) => {
      for (let round = 0; round < 5; round++) {
        const got = await readAll(log, 1 + k * 7);
        for (let i = 1; i < got.length; i++) expect(got[i].offset).toBeGreaterThan(got[i - 1].offset);
        for (const r of got) expect(r).toEqual(model.recs[r.offset]);
        const have = new Set(got.map((r) => r.offset));
        for (const r of before) expect(have.has(r.offset)).toBe(true);
      }
    });
    const appends = (async () => {
      for (let i = 0; i < 20; i++) await model.append(log, [{ key: `late-${i % 3}`, value: `L${i}`, ts: T0 }]);
    })();
    const res = await compaction;
    await Promise.all([...readers, appends]);
    expect(res.segmentsCompacted).toBeGreaterThan(0);
    expect(log.logEndOffset).toBe(leo + 140);
    expect(model.recs.map((r) => r.offset)).toEqual(Array.from({ length: leo + 140 }, (_, i) => i));
    // Segments closed during the run were not part of it; records written meanwhile only make it keep more.
    const got = await readAll(log);
    expect(got.filter((r) => r.offset < base)).toEqual(before.filter((r) => r.offset < base));
    expect(got.filter((r) => r.offset >= base)).toEqual(model.recs.filter((r) => r.offset >= base));
    vi.restoreAllMocks();
    await log.compact({ now: T0 });
    expect(await readAll(log)).toEqual(model.compacted(activeBase(log)));
  });

  it('a read that races with the swap continues in the compacted segment', async () => {
    const log = await openLog({ tailCacheBytes: 0 });
    const model = new Model();
    await fill(log, model, 200);
    const expected = model.compacted(activeBase(log));
    const read = Segment.prototype.read;
    let armed = true;
    let entered!: () => void;
    const inRead = new Promise<void>((r) => (entered = r));
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    vi.spyOn(Segment.prototype, 'read').mockImplementation(async function (this: Segment, ...args: Parameters<Segment['read']>) {
      if (armed) {
        armed = false;
        entered();
        await gate;
      }
      return read.apply(this, args);
    });
    const reading = readAll(log);
    await inRead;
    await log.compact({ now: T0 });
    release();
    expect(await reading).toEqual(expected);
  });

  it('a read between the rename of a compacted log and its swap-in never reopens the new file under the old index', async () => {
    const log = await openLog({ tailCacheBytes: 0 });
    const model = new Model();
    await fill(log, model, 200);
    const expected = model.compacted(activeBase(log));
    const leo = log.logEndOffset;
    let swaps = 0;
    // Right after each compacted log is renamed over its segment (which readers still find in the list), read
    // everything twice in small steps: the first pass evicts the early segments' fds (bounded LRU), so the
    // second reopens them, and must still get the file their index describes (or retry in the new segment).
    fsHooks.afterRename = async (from, to) => {
      if (!from.endsWith('.compact.tmp') || !to.endsWith('.log')) return;
      swaps++;
      for (let pass = 0; pass < 2; pass++) {
        const got = await readAll(log, 3);
        for (let i = 1; i < got.length; i++) expect(got[i].offset).toBeGreaterThan(got[i - 1].offset);
        for (const r of got) expect(r).toEqual(model.recs[r.offset]);
        const have = new Set(got.map((r) => r.offset));
        expect(expected.filter((r) => !have.has(r.offset))).toEqual([]);
        expect(got.at(-1)?.offset).toBe(leo - 1);
      }
    };
    const res = await log.compact({ now: T0 });
    fsHooks.afterRename = null;
    expect(swaps).toBe(res.segmentsCompacted);
    expect(swaps).toBeGreaterThan(4);
    expect(await readAll(log)).toEqual(expected);
  });

  it('a truncation during compaction aborts it without damage', async () => {
    const log = await openLog({ tailCacheBytes: 0 });
    const model = new Model();
    await fill(log, model, 200);
    const scan = Segment.prototype.scanRecords;
    let entered!: () => void;
    const inScan = new Promise<void>((r) => (entered = r));
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    let first = true;
    vi.spyOn(Segment.prototype, 'scanRecords').mockImplementation(async function (this: Segment, ...args: Parameters<Segment['scanRecords']>) {
      if (first) {
        first = false;
        entered();
        await gate;
      }
      return scan.apply(this, args);
    });
    const compaction = log.compact({ now: T0 });
    await inScan;
    // Cut the newest records: older values of their keys become the latest.
    await log.truncateTo(190);
    model.recs.splice(190);
    release();
    expect(await compaction).toMatchObject({ segmentsCompacted: 0, recordsRemoved: 0 });
    expect(await tmpFiles()).toEqual([]);
    expect(await readAll(log)).toEqual(model.recs);
    vi.restoreAllMocks();
    await log.compact({ now: T0 });
    expect(await readAll(log)).toEqual(model.compacted(activeBase(log)));
  });

  it('truncating into a compacted segment and appending there survives a crash', async () => {
    let log = await openLog({ tailCacheBytes: 0 });
    const model = new Model();
    await fill(log, model, 200);
    await log.compact({ now: T0 });
    let expected = model.compacted(activeBase(log));
    const seg = log.segmentInfos().find((s) => s.compacted && s.sizeBytes > 0 && s.baseOffset > 0) as SegmentInfo;
    const kept = expected.filter((r) => r.offset >= seg.baseOffset && r.offset < seg.nextOffset);
    expect(kept.length).toBeGreaterThan(0);
    // Cut just after the segment's first kept record (maybe inside a gap).
    const cut = kept[0].offset + 1;
    await log.truncateTo(cut);
    expected = expected.filter((r) => r.offset < cut);
    expect(await readAll(log)).toEqual(expected);
    model.recs = expected;
    await model.append(log, [
      { key: 'after', value: 'cut' },
      { key: null, value: 'x' },
    ]);
    expect(model.recs.at(-1)?.offset).toBe(cut + 1);
    await simulateCrash(log);
    log = await openLog();
    expect(await readAll(log)).toEqual(model.recs);
    expect(log.logEndOffset).toBe(cut + 2);
    expectSegmentsContiguous(log);
  });

  it('a compacted segment whose index does not vouch for its log is rebuilt and still reaches the next segment', async () => {
    let log = await openLog({ tailCacheBytes: 0 });
    const model = new Model();
    await fill(log, model, 200);
    await log.compact({ now: T0 });
    const expected = model.compacted(activeBase(log));
    // A compacted segment whose newest offsets were all removed (it ends in a gap).
    const seg = log.segmentInfos().find((s) => {
      const kept = expected.filter((r) => r.offset >= s.baseOffset && r.offset < s.nextOffset);
      return s.compacted && kept.length > 0 && kept[kept.length - 1].offset + 1 < s.nextOffset;
    }) as SegmentInfo;
    expect(seg).toBeDefined();
    await simulateCrash(log);
    // Its index unsynced (as a truncation's cut writes one): the log is scanned, the compacted flag kept.
    const idx = join(dir, `${String(seg.baseOffset).padStart(20, '0')}.index`);
    const { meta, index } = parseIndex(await readFile(idx))!;
    await writeFile(idx, serializeIndex({ ...meta, synced: false }, index));
    log = await openLog();
    expect(log.segmentInfos().find((s) => s.baseOffset === seg.baseOffset)).toMatchObject({
      nextOffset: seg.nextOffset,
      sizeBytes: seg.sizeBytes,
      compacted: true,
    });
    expectSegmentsContiguous(log);
    expect(log.logEndOffset).toBe(200);
    expect(await readAll(log)).toEqual(expected);
    await log.close();
    log = await openLog();
    expect(await readAll(log)).toEqual(expected);
  });

  it('close during compaction stops it, leaves no temp files, and a closed log refuses to compact', async () => {
    const log = await openLog({ tailCacheBytes: 0 });
    const model = new Model();
    await fill(log, model, 200);
    const scan = Segment.prototype.scanRecords;
    let calls = 0;
    let entered!: () => void;
    const inScan = new Promise<void>((r) => (entered = r));
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    // Hold it inside pass 2 (after the key map and at least one count).
    const closedCount = log.segmentInfos().length - 1;
    vi.spyOn(Segment.prototype, 'scanRecords').mockImplementation(async function (this: Segment, ...args: Parameters<Segment['scanRecords']>) {
      if (++calls === closedCount + 3) {
        entered();
        await gate;
      }
      return scan.apply(this, args);
    });
    const compaction = log.compact({ now: T0 });
    await inScan;
    const closing = log.close();
    release();
    expect(await compaction).toMatchObject({ segmentsCompacted: 0 });
    await closing;
    expect(await tmpFiles()).toEqual([]);
    await expect(log.compact()).rejects.toMatchObject({ code: 'storage_error' });
    const again = await openLog();
    expect(await readAll(again)).toEqual(model.recs);
  });

  it('files on disk: compacted segments are smaller and no temp files remain', async () => {
    const log = await openLog();
    const model = new Model();
    await fill(log, model, 200, 3);
    const infos = log.segmentInfos();
    const sizes = await Promise.all(infos.map((s) => stat(join(dir, `${String(s.baseOffset).padStart(20, '0')}.log`)).then((x) => x.size)));
    expect(sizes).toEqual(infos.map((s) => s.sizeBytes));
    await log.compact({ now: T0 });
    const after = log.segmentInfos();
    const sizesAfter = await Promise.all(after.map((s) => stat(join(dir, `${String(s.baseOffset).padStart(20, '0')}.log`)).then((x) => x.size)));
    expect(sizesAfter).toEqual(after.map((s) => s.sizeBytes));
    expect(sizesAfter.reduce((a, b) => a + b, 0)).toBeLessThan(sizes.reduce((a, b) => a + b, 0));
    expect(await tmpFiles()).toEqual([]);
  });

  it('stops at the HWM: a record at or past it neither drops an older record of its key nor is dropped', async () => {
    // No followEnd: the HWM moves only where the test says, as on a leader whose followers lag.
    const log = await PartitionLog.open(dir, { ...OPTS, segmentBytes: 300 });
    opened.push(log);
    const put = (key: string, value: string) => log.append([{ key: Buffer.from(key), value: Buffer.from(value), timestamp: T0 }]);
    await put('K', 'acknowledged');
    await put('L', 'l1');
    let i = 0;
    while (log.segmentInfos().length < 2) await put(`k${i++}`, 'x'.repeat(30));
    log.setHighWatermark(log.logEndOffset);
    const hwm = log.highWatermark;
    // Past the HWM: a newer K, and two of L that would drop each other, then enough to close their segment.
    await put('K', 'not yet acknowledged');
    await put('L', 'l2');
    await put('L', 'l3');
    while (log.segmentInfos().length < 3) await put(`m${i++}`, 'y'.repeat(30));
    const before = await readAll(log);
    const res = await log.compact({ now: T0 });
    expect(res.recordsRemoved).toBe(0);
    expect(await readAll(log)).toEqual(before);
    // The leader dies before its followers have them; as a follower it cuts back to the HWM: K's value survives.
    await log.truncateTo(hwm);
    const k = (await readAll(log)).filter((r) => r.key === 'K').map((r) => r.value);
    expect(k).toEqual(['acknowledged']);
    // Once everything is acknowledged, the older records go.
    await put('K', 'latest');
    while (log.segmentInfos().length < 4) await put(`n${i++}`, 'z'.repeat(30));
    log.setHighWatermark(log.logEndOffset);
    expect((await log.compact({ now: T0 })).recordsRemoved).toBeGreaterThan(0);
    expect((await readAll(log)).filter((r) => r.key === 'K').map((r) => r.value)).toEqual(['latest']);
  });

  it('a compaction whose swap waited for an fsync that failed swaps nothing in', async () => {
    const log = await openLog({ flush: 'always', segmentBytes: 300 });
    const model = new Model();
    await model.append(log, [{ key: 'K', value: 'old' }]);
    let i = 0;
    while (log.segmentInfos().length < 2) await model.append(log, [{ key: `k${i++}`, value: 'x'.repeat(30) }]);
    await model.append(log, [{ key: 'K', value: 'new' }]);
    while (log.segmentInfos().length < 3) await model.append(log, [{ key: `m${i++}`, value: 'y'.repeat(30) }]);
    // The next fsync pass is held, then fails.
    let fail!: () => void;
    vi.spyOn(Segment.prototype, 'datasync').mockImplementationOnce(
      () =>
        new Promise<void>((_, reject) => {
          fail = () => reject(Object.assign(new Error('EIO: i/o error, fdatasync'), { code: 'EIO' }));
        }),
    );
    const idle = vi.spyOn(GroupCommit.prototype, 'idle');
    const late = log.append([{ key: Buffer.from('z'), value: Buffer.from('z') }]).catch((e: Error) => e);
    await vi.waitFor(() => expect(fail).toBeDefined());
    const compaction = log.compact({ now: T0 });
    // The swap waits for the pass (no fsync may run on a segment being replaced): fail it then.
    await vi.waitFor(() => expect(idle).toHaveBeenCalled());
    fail();
    expect(await late).toMatchObject({ code: 'storage_error' });
    expect((await compaction).segmentsCompacted).toBe(0);
    expect(await tmpFiles()).toEqual([]);
    expect((await readAll(log)).filter((r) => r.key === 'K').map((r) => r.value)).toEqual(['old', 'new']);
  });
});

describe('truncating into the gap a compaction left at the end of a segment', () => {
  const rec = (i: number, key: string | null) => ({
    key: key === null ? null : Buffer.from(key),
    value: Buffer.from(`value-${i}-${'x'.repeat(40)}`),
    timestamp: T0 + i,
  });

  it('recovers the same log end after a crash as after a clean close', async () => {
    const ends: number[] = [];
    for (const crash of [false, true]) {
      const d = join(dir, crash ? 'crash' : 'clean');
      let log = await PartitionLog.open(d, { flush: 'os', segmentBytes: 600, tailCacheBytes: 0 });
      let i = 0;
      while (log.segmentInfos().length < 2) await log.append([rec(i, `k${i++ % 10}`)]);
      const seg1 = log.segmentInfos()[1]!.baseOffset;
      // The last records of the first segment repeat keys: compacted, it ends before its next offset.
      for (let j = seg1 - 3; j < seg1; j++) await log.append([rec(i++, `k${j % 10}`)]);
      while (log.segmentInfos().length < 3) await log.append([rec(i++, null)]);
      log.setHighWatermark(log.logEndOffset);
      expect((await log.compact({ now: T0 })).segmentsCompacted).toBeGreaterThan(0);
      await log.truncateTo(seg1);
      expect(log.logEndOffset).toBe(seg1);
      if (crash) await simulateCrash(log);
      else await log.close();
      log = await PartitionLog.open(d, { flush: 'os', segmentBytes: 600, tailCacheBytes: 0 });
      ends.push(log.logEndOffset);
      await log.close();
    }
    expect(ends).toEqual([ends[0], ends[0]]);
    expect(ends[0]).toBeGreaterThan(0);
  });
});

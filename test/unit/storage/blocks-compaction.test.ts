/**
 * Compaction of a log written with storedLayout 'blocks' (docs/architecture.md "Stored batches"): the cleaner
 * reads a block's records as the per-record layout gives them and rewrites the kept ones in that layout, so
 * a blocks log and a per-record log given the same appends, rolled at the same points and compacted alike,
 * read the same (LogRecords and wire, every offset, before and after a clean and a crashed restart) and keep
 * the same producer state.
 */
import { readdir, unlink } from 'node:fs/promises';
import { join } from 'node:path';
import fc from 'fast-check';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { encodeBatch, type ScannedBatch, scanBatch } from 'tributary-protocol/batch.js';
import { Partition } from 'tributary-broker/partition/partition.js';
import { PRODUCER_SNAPSHOT_FILE } from 'tributary-broker/partition/partition-snapshots.js';
import { type LogOptions, PartitionLog } from 'tributary-broker/storage/partition-log.js';
import { armCompactionCrash, SimulatedCrash, simulateCrash } from 'tributary-broker/storage/log-test-hooks.js';
import { Segment } from 'tributary-broker/storage/segment.js';
import { removeDir, tempDir } from '../../helpers/util.js';
import { countUnits } from '../../helpers/stored-units.js';

let dir: string;
let clock: number;
beforeEach(async () => {
  dir = await tempDir('trib-blocks-compact-');
  clock = 1_700_000_000_000;
  vi.spyOn(Date, 'now').mockImplementation(() => clock);
});
afterEach(async () => {
  vi.restoreAllMocks();
  await removeDir(dir);
});

/** Rolls by time only: a group of appends per segment, at the same offsets in both layouts. */
const SEGMENT_MS = 1000;
const KEYS = ['a', 'b', 'c', 'd'];

interface Rec {
  key: string | null;
  /** Empty: a tombstone. */
  value: string;
  timestamp: number;
  header: boolean;
}
/** plain and idem are stored as blocks; pid (a plain frame whose records carry a producer id) and objects (append()) are not. */
interface Frame {
  kind: 'plain' | 'idem' | 'pid' | 'objects';
  records: Rec[];
}

const recArb: fc.Arbitrary<Rec> = fc.record({
  key: fc.oneof({ weight: 1, arbitrary: fc.constant(null) }, { weight: 5, arbitrary: fc.constantFrom(...KEYS) }),
  value: fc.oneof(fc.constant(''), fc.string({ minLength: 1, maxLength: 30 })),
  timestamp: fc.oneof(fc.constant(0), fc.integer({ min: 1_699_999_990_000, max: 1_700_000_010_000 })),
  header: fc.boolean(),
});
const frameArb: fc.Arbitrary<Frame> = fc.record({
  kind: fc.constantFrom('plain', 'plain', 'idem', 'idem', 'pid', 'objects'),
  records: fc.array(recArb, { minLength: 1, maxLength: 5 }),
});

function wireFrame(f: Frame, firstSeq: number): ScannedBatch {
  const idem = f.kind === 'idem';
  const records = f.records.map((r, i) => ({
    offset: 0,
    sequence: idem ? firstSeq + i : 0,
    producerId: f.kind === 'plain' ? '' : '9',
    key: r.key === null ? null : Buffer.from(r.key),
    epoch: idem ? 4 : 0,
    value: Buffer.from(r.value),
    timestamp: r.timestamp,
    attributes: 0,
    headers: r.header ? [{ key: 'h', value: Buffer.from(r.value) }] : [],
  }));
  const n = records.length;
  const body = encodeBatch(
    { topic: 't', partition: 0, acks: '1', idempotent: idem, firstSequence: idem ? firstSeq : 0, lastSequence: idem ? firstSeq + n - 1 : 0, records },
    { extensions: true },
  );
  return scanBatch(body, { extensions: true, request: true });
}

/** Appends `frames` to `log`, queued together; `seq` carries the idempotent producer's next sequence. */
function appendAll(log: PartitionLog, frames: Frame[], seq: { next: number }): Promise<unknown[]> {
  return Promise.all(
    frames.map((f) => {
      if (f.kind === 'objects') {
        return log.append(
          f.records.map((r) => ({
            key: r.key === null ? null : Buffer.from(r.key),
            value: Buffer.from(r.value),
            timestamp: r.timestamp,
            headers: r.header ? [{ key: 'h', value: Buffer.from(r.value) }] : [],
          })),
        );
      }
      const first = seq.next;
      if (f.kind === 'idem') seq.next += f.records.length;
      return log.appendWire(wireFrame(f, first), undefined, f.kind === 'idem' ? first : -1);
    }),
  );
}


const EXT = { topic: 't', partition: 0, extensions: true, skipControl: false };
const NOEXT = { ...EXT, extensions: false };

/** Every read of every offset: read() and the wire reads (tail cache, else disk), with a few limits. */
async function reads(log: PartitionLog): Promise<unknown[]> {
  const out: unknown[] = [log.logStartOffset, log.logEndOffset, log.tombstoneHorizon];
  for (let o = 0; o < log.logEndOffset; o++) {
    for (const [maxRecords, maxBytes] of [
      [1000, 1 << 20],
      [2, 1 << 20],
      [1000, 200],
      [1, 1],
    ] as const) {
      const opts = { maxRecords, maxBytes };
      out.push(await log.read(o, opts));
      for (const w of [EXT, NOEXT]) {
        const wire = log.readWire(o, opts, w) ?? (await log.readWireFromDisk(o, opts, w));
        out.push(wire && { frame: wire.frame.toString('hex'), count: wire.count, valueBytes: wire.valueBytes, nextOffset: wire.nextOffset });
      }
    }
  }
  for (const ts of [0, clock - 5000, clock, clock + 5000, 2 ** 46]) out.push(await log.offsetForTimestamp(ts));
  return out;
}

describe("compaction of a log written with storedLayout 'blocks'", () => {
  it('leaves it reading as a per-record log given the same appends and compactions, before and after a restart', async () => {
    let removedSeen = 0;
    let blocksCompacted = 0;
    await fc.assert(
      fc.asyncProperty(
        fc.array(fc.array(frameArb, { minLength: 1, maxLength: 3 }), { minLength: 2, maxLength: 5 }),
        fc.array(fc.array(frameArb, { minLength: 1, maxLength: 3 }), { maxLength: 3 }),
        fc.constantFrom(0, 2000, 1 << 20),
        fc.oneof(fc.constant(1), fc.constant(1), fc.double({ min: 0, max: 1, noNaN: true })),
        fc.constantFrom(0, 3000, 24 * 3600 * 1000),
        async (groups, later, tailCacheBytes, hwmFrac, tombstoneRetentionMs) => {
          const opts: Partial<LogOptions> = {
            flush: 'os',
            indexIntervalBytes: 64,
            tailCacheBytes,
            segmentBytes: 1 << 20,
            segmentMs: SEGMENT_MS,
            cleanupPolicy: 'compact',
            checkpointHwmOnTimer: false,
          };
          const bopts: Partial<LogOptions> = { ...opts, storedLayout: 'blocks' };
          const r = await tempDir('r-', dir);
          const b = await tempDir('b-', dir);
          const lr = await PartitionLog.open(r, opts);
          let lb = await PartitionLog.open(b, bopts);
          const sr = { next: 0 };
          const sb = { next: 0 };
          const strip = (xs: unknown) => (xs as object[]).map((x) => ({ ...x, writtenAt: undefined }));
          const compactBoth = async (ahead: number) => {
            const hwm = Math.floor(hwmFrac * lr.logEndOffset);
            lr.setHighWatermark(hwm);
            lb.setHighWatermark(hwm);
            const c = { now: clock + ahead, tombstoneRetentionMs };
            const [cr, cb] = await Promise.all([lr.compact(c), lb.compact(c)]);
            expect({ ...cb, bytesBefore: 0 }).toEqual({ ...cr, bytesBefore: 0 });
            removedSeen += cr.recordsRemoved;
          };
          try {
            for (const g of [...groups, ...later]) {
              // Each group in a segment of its own: the time roll comes before its first append.
              clock += SEGMENT_MS;
              const [ra, rb] = await Promise.all([appendAll(lr, g, sr), appendAll(lb, g, sb)]);
              expect(strip(rb)).toEqual(strip(ra));
              if (g === groups.at(-1)) {
                blocksCompacted += (await countUnits(b))[1];
                await compactBoth(SEGMENT_MS + 1);
                blocksCompacted -= (await countUnits(b))[1];
              }
            }
            // Compacting again, now over compacted segments and the blocks appended since.
            await compactBoth(SEGMENT_MS + 10_000);
            const expected = await reads(lr);
            expect(await reads(lb)).toEqual(expected);
            await lb.close();
            lb = await PartitionLog.open(b, bopts);
            lb.setHighWatermark(lr.highWatermark);
            expect(await reads(lb)).toEqual(expected);
            // A crash, with every index lost: recovery scans the compacted segments (gaps and all).
            await simulateCrash(lb);
            for (const f of await readdir(b)) if (f.endsWith('.index')) await unlink(join(b, f));
            lb = await PartitionLog.open(b, bopts);
            lb.setHighWatermark(lr.highWatermark);
            expect(await reads(lb)).toEqual(expected);
            // Appends go on alike after it.
            clock += 1;
            const [ra, rb] = await Promise.all([appendAll(lr, groups[0]!, sr), appendAll(lb, groups[0]!, sb)]);
            expect(strip(rb)).toEqual(strip(ra));
            expect(await reads(lb)).toEqual(await reads(lr));
          } finally {
            await lr.close();
            await lb.close();
          }
        },
      ),
      { numRuns: 30 },
    );
    // The property removed records, and rewrote blocks (the HWM mostly at the log end: about 100 a run).
    expect(removedSeen).toBeGreaterThan(30);
    expect(blocksCompacted).toBeGreaterThan(20);
  }, 300_000);

  it('a rewrite that fills its write buffer inside a block goes on after the block, each record written once', async () => {
    // The cleaner writes at about 4 MiB: blocks of 1.6 MB put that limit inside the third block.
    const value = (o: number) => Buffer.alloc(200_000, o % 251);
    const log = await PartitionLog.open(dir, { flush: 'os', segmentMs: SEGMENT_MS, segmentBytes: 64 << 20, tailCacheBytes: 0, storedLayout: 'blocks', maxBlockBytes: 4 << 20, cleanupPolicy: 'compact' });
    try {
      for (let from = 0; from < 32; from += 8) {
        const records = Array.from({ length: 8 }, (_, i) => ({
          offset: 0,
          sequence: 0,
          producerId: '',
          key: Buffer.from(`k${from + i}`),
          epoch: 0,
          value: value(from + i),
          timestamp: 5,
          attributes: 0,
          headers: [],
        }));
        const body = encodeBatch({ topic: 't', partition: 0, acks: '1', idempotent: false, firstSequence: 0, lastSequence: 0, records }, { extensions: true });
        await log.appendWire(scanBatch(body, { extensions: true, request: true }));
      }
      expect(await countUnits(dir)).toEqual([0, 4]);
      // k0 again, in the next segment: the first segment loses one record and is rewritten.
      clock += SEGMENT_MS;
      await log.append([{ key: Buffer.from('k0'), value: Buffer.from('new') }]);
      clock += SEGMENT_MS;
      await log.append([{ key: null, value: Buffer.from('last') }]);
      log.setHighWatermark(log.logEndOffset);
      const res = await log.compact({ now: clock });
      expect(res).toMatchObject({ segmentsCompacted: 1, recordsRemoved: 1 });
      const got: number[] = [];
      for (let o = 0; o < log.logEndOffset; ) {
        const recs = await log.read(o, { maxRecords: 4, maxBytes: 64 << 20 });
        if (recs.length === 0) break;
        for (const r of recs) {
          got.push(r.offset);
          if (r.offset < 32) expect(r.value.equals(value(r.offset)), `value at ${r.offset}`).toBe(true);
        }
        o = recs.at(-1)!.offset + 1;
      }
      expect(got).toEqual([...Array.from({ length: 31 }, (_, i) => i + 1), 32, 33]);
    } finally {
      await log.close();
    }
  }, 120_000);

  it('keeps the idempotent producer state as the per-record layout does: a resent retained batch is a duplicate, also rebuilt from the compacted log', async () => {
    const batch = (seq: number, n: number) => ({ producerId: '7', epoch: 2, firstSequence: seq, lastSequence: seq + n - 1 });
    const frame = (seq: number, keys: Array<string | null>): ScannedBatch => {
      const records = keys.map((k, i) => ({
        offset: 0,
        sequence: seq + i,
        producerId: '7',
        key: k === null ? null : Buffer.from(k),
        epoch: 2,
        value: Buffer.from(`v${seq + i}`),
        timestamp: 0,
        attributes: 0,
        headers: [],
      }));
      const n = keys.length;
      const body = encodeBatch({ topic: 't', partition: 0, acks: '1', idempotent: true, firstSequence: seq, lastSequence: seq + n - 1, records }, { extensions: true });
      return scanBatch(body, { extensions: true, request: true });
    };
    // [first sequence, keys, whether a new segment starts with it]: the first segment loses offset 0 and is
    // rewritten, its second batch kept whole.
    const appends: Array<[number, Array<string | null>, boolean]> = [
      [0, ['a', 'b', 'c'], false],
      [3, ['d', null, 'e'], false],
      [6, ['a', 'f'], true],
      [8, ['g'], false],
      [9, ['h', 'b'], true],
    ];
    const run = async (layout: 'records' | 'blocks') => {
      clock = 1_700_000_000_000;
      const d = await tempDir(`${layout}-`, dir);
      const opts: Partial<LogOptions> = { flush: 'os', segmentMs: SEGMENT_MS, cleanupPolicy: 'compact', storedLayout: layout };
      const out: unknown[] = [];
      let p = new Partition('t', 0, await PartitionLog.open(d, opts));
      try {
        await p.whenProducerStateReady();
        for (const [seq, keys, roll] of appends) {
          if (roll) clock += SEGMENT_MS;
          out.push(await p.appendIdempotent(frame(seq, keys), batch(seq, keys.length)));
        }
        if (layout === 'blocks') expect((await countUnits(d))[1]).toBe(appends.length);
        p.log.setHighWatermark(p.log.logEndOffset);
        // The bytes compacted differ (a block's header against per-record prefixes); what is kept does not.
        out.push({ ...(await p.log.compact({ now: clock + SEGMENT_MS, tombstoneRetentionMs: 0 })), bytesBefore: 0 });
        if (layout === 'blocks') expect((await countUnits(d))[1]).toBeLessThan(appends.length);
        const resend = async () => {
          for (const [seq, keys] of appends.slice(1)) {
            out.push(await p.appendIdempotent(frame(seq, keys), batch(seq, keys.length)).then((r) => ({ ...r, writtenAt: undefined }), (e: { code?: string }) => e.code));
          }
        };
        await resend();
        // Without its snapshot the state is rebuilt from the compacted log.
        await p.close();
        await unlink(join(d, PRODUCER_SNAPSHOT_FILE));
        p = new Partition('t', 0, await PartitionLog.open(d, opts));
        await p.whenProducerStateReady();
        await resend();
        out.push(await p.appendIdempotent(frame(11, ['i']), batch(11, 1)).then((r) => ({ ...r, writtenAt: undefined })));
        out.push(await p.log.read(0, { maxRecords: 100, maxBytes: 1 << 20 }));
      } finally {
        await p.close();
      }
      return out;
    };
    const expected = await run('records');
    const got = await run('blocks');
    expect(got).toEqual(expected);
    // The batch kept whole in the rewritten segment, resent, is a duplicate. (Rebuilt from the compacted log
    // without a snapshot, both layouts answer out_of_order_sequence for it: the rewrite makes each kept record
    // an append of its own, log-cleaner.ts writeCompacted.)
    expect(expected.slice(appends.length + 1)).toContainEqual(expect.objectContaining({ baseOffset: 3, duplicate: true }));
  }, 60_000);
});

describe("compaction of a log written with storedLayout 'blocks', racing reads, a truncation and crashes", () => {
  const OPTS: Partial<LogOptions> = { flush: 'os', segmentBytes: 600, indexIntervalBytes: 64, tailCacheBytes: 0, storedLayout: 'blocks' };
  interface Plain {
    offset: number;
    key: string | null;
    value: string;
  }
  /** 60 plain appends of 1 to 3 records (blocks), keys reused; returns the records and each append's first offset. */
  async function fill(log: PartitionLog): Promise<{ recs: Plain[]; starts: number[] }> {
    const recs: Plain[] = [];
    const starts: number[] = [];
    for (let i = 0; i < 60; i++) {
      const n = (i % 3) + 1;
      const o = recs.length;
      const batch = Array.from({ length: n }, (_, j): Plain => ({ offset: o + j, key: (o + j) % 5 === 0 ? null : `key-${((o + j) * 7) % 11}`, value: `v${o + j}-${'x'.repeat(20)}` }));
      const records = batch.map((r) => ({
        offset: 0,
        sequence: 0,
        producerId: '',
        key: r.key === null ? null : Buffer.from(r.key),
        epoch: 0,
        value: Buffer.from(r.value),
        timestamp: 5,
        attributes: 0,
        headers: [],
      }));
      const body = encodeBatch({ topic: 't', partition: 0, acks: '1', idempotent: false, firstSequence: 0, lastSequence: 0, records }, { extensions: true });
      expect((await log.appendWire(scanBatch(body, { extensions: true, request: true }))).baseOffset).toBe(o);
      starts.push(o);
      recs.push(...batch);
    }
    log.setHighWatermark(log.logEndOffset);
    expect((await countUnits(log.dir))[1]).toBe(60);
    return { recs, starts };
  }
  /** What compaction keeps: every record of the active segment, null keys, each key's latest, and the record before the end. */
  function compacted(recs: Plain[], activeBase: number): Plain[] {
    const latest = new Map<string, number>();
    for (const r of recs) if (r.key !== null) latest.set(r.key, r.offset);
    return recs.filter((r) => r.offset >= activeBase || r.key === null || latest.get(r.key) === r.offset || r.offset >= recs.length - 1);
  }
  async function readAll(log: PartitionLog, maxRecords = 1000): Promise<Plain[]> {
    const out: Plain[] = [];
    for (let o = log.logStartOffset; o < log.logEndOffset; ) {
      const got = await log.read(o, { maxRecords, maxBytes: 1 << 20 });
      if (got.length === 0) break;
      out.push(...got.map((r) => ({ offset: r.offset, key: r.key === null ? null : r.key.toString(), value: r.value.toString() })));
      o = got.at(-1)!.offset + 1;
    }
    return out;
  }
  const activeBase = (log: PartitionLog) => log.segmentInfos().at(-1)!.baseOffset;
  /** Holds the first call of `method` of every Segment until released. */
  function gateFirst(method: 'read' | 'scanRecords' | 'remove'): { entered: Promise<void>; release: () => void } {
    const orig = Segment.prototype[method] as (...a: unknown[]) => Promise<unknown>;
    let enter!: () => void;
    const entered = new Promise<void>((r) => (enter = r));
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    let first = true;
    vi.spyOn(Segment.prototype, method).mockImplementation(async function (this: Segment, ...args: unknown[]) {
      if (first) {
        first = false;
        enter();
        await gate;
      }
      return orig.apply(this, args);
    } as never);
    return { entered, release };
  }

  it('a read in a blocks segment that races with the swap continues in the compacted segment', async () => {
    const log = await PartitionLog.open(dir, OPTS);
    try {
      const { recs } = await fill(log);
      const expected = compacted(recs, activeBase(log));
      expect(expected.length).toBeLessThan(recs.length);
      for (const maxRecords of [2, 1000]) {
        const g = gateFirst('read');
        const reading = readAll(log, maxRecords);
        await g.entered;
        await log.compact({ now: clock });
        g.release();
        // The first pass reads the blocks and compacts; the second reads the compacted segments.
        expect(await reading).toEqual(maxRecords === 2 ? expected : compacted(expected, activeBase(log)));
        vi.restoreAllMocks();
      }
    } finally {
      await log.close();
    }
  });

  it('a truncation (at an append boundary) during the compaction of blocks aborts it without damage; the next one compacts', async () => {
    const log = await PartitionLog.open(dir, OPTS);
    try {
      const { recs, starts } = await fill(log);
      const g = gateFirst('scanRecords');
      const compaction = log.compact({ now: clock });
      await g.entered;
      const cut = starts.at(-4)!;
      await log.truncateTo(cut);
      recs.splice(cut);
      g.release();
      expect(await compaction).toMatchObject({ segmentsCompacted: 0, recordsRemoved: 0 });
      expect((await readdir(dir)).filter((f) => f.endsWith('.tmp'))).toEqual([]);
      expect(await readAll(log)).toEqual(recs);
      vi.restoreAllMocks();
      log.setHighWatermark(log.logEndOffset);
      await log.compact({ now: clock });
      expect(await readAll(log)).toEqual(compacted(recs, activeBase(log)));
    } finally {
      await log.close();
    }
  });

  it('a compaction of blocks planned while a truncation removes segments swaps nothing in', async () => {
    const log = await PartitionLog.open(dir, OPTS);
    try {
      const { recs, starts } = await fill(log);
      const segs = log.segmentInfos();
      // A cut that removes the last two segments, at an append boundary.
      const cut = starts.find((o) => o >= segs.at(-3)!.baseOffset && o > segs.at(-3)!.baseOffset)!;
      const g = gateFirst('remove');
      const truncation = log.truncateTo(cut);
      await g.entered;
      const compaction = log.compact({ now: clock });
      g.release();
      await truncation;
      await compaction;
      recs.splice(cut);
      // Nothing of the compaction planned over the records the cut took: every record kept.
      expect(await readAll(log)).toEqual(recs);
      vi.restoreAllMocks();
      await log.compact({ now: clock });
      expect(await readAll(log)).toEqual(compacted(recs, activeBase(log)));
    } finally {
      await log.close();
    }
  });

  for (const crashAt of ['temp-written', 'index-renamed', 'log-renamed'] as const) {
    it(`a crash during the compaction of blocks (${crashAt}) recovers to the old or the new content of each segment`, async () => {
      let log = await PartitionLog.open(dir, OPTS);
      try {
        const { recs } = await fill(log);
        const segs = log.segmentInfos();
        const expected = compacted(recs, activeBase(log));
        armCompactionCrash(log, crashAt);
        await expect(log.compact({ now: clock })).rejects.toBeInstanceOf(SimulatedCrash);
        await simulateCrash(log);
        log = await PartitionLog.open(dir, OPTS);
        expect((await readdir(dir)).filter((f) => f.endsWith('.tmp'))).toEqual([]);
        expect(log.logEndOffset).toBe(recs.length);
        const got = await readAll(log);
        let swapped = 0;
        for (const s of segs) {
          const inSeg = (r: Plain) => r.offset >= s.baseOffset && r.offset < s.nextOffset;
          if (JSON.stringify(got.filter(inSeg)) !== JSON.stringify(recs.filter(inSeg))) {
            expect(got.filter(inSeg)).toEqual(expected.filter(inSeg));
            swapped++;
          }
        }
        expect(swapped).toBe(crashAt === 'log-renamed' ? 1 : 0);
        log.setHighWatermark(log.logEndOffset);
        await log.compact({ now: clock });
        expect(await readAll(log)).toEqual(expected);
      } finally {
        await log.close();
      }
    });
  }
});

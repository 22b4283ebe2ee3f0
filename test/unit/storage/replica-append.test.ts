import { readdir, readFile, unlink, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import fc from 'fast-check';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { encodeBatch, logRecordsToBatch } from 'tributary-protocol/batch.js';
import { TributaryError } from 'tributary-protocol/errors.js';
import { type LogRecord, type RecordInput, RecordAttr } from 'tributary-protocol/record.js';
import { CLEAN_SHUTDOWN_FILE, type LogOptions, PartitionLog, wholeAppendCount } from 'tributary-broker/storage/partition-log.js';
import { simulateCrash } from 'tributary-broker/storage/log-test-hooks.js';
import { ATTR_END_OF_APPEND, decodeRecords } from 'tributary-broker/storage/record-codec.js';
import { removeDir, tempDir } from '../../helpers/util.js';

let dir: string;
const opened: PartitionLog[] = [];

beforeEach(async () => {
  dir = await tempDir('trib-replica-');
});
afterEach(async () => {
  for (const l of opened.splice(0)) await l.close().catch(() => {});
  await removeDir(dir);
});

const OPTS: Partial<LogOptions> = { flush: 'os', indexIntervalBytes: 64 };

async function openLog(sub: string, opts: Partial<LogOptions> = {}): Promise<PartitionLog> {
  const l = await PartitionLog.open(join(dir, sub), { ...OPTS, ...opts });
  opened.push(l);
  return l;
}

/** A record as a leader stores it; `end` marks the last record of a leader append. */
function lrec(offset: number, end: boolean, salt = ''): LogRecord {
  return {
    offset,
    timestamp: offset % 5 === 4 ? 0 : 1_700_000_000_000 + ((offset * 7919) % 100_000),
    key: offset % 4 === 0 ? null : Buffer.from(`k${offset % 5}${salt}`),
    value: Buffer.from(`v${offset}${salt}-${'y'.repeat(offset % 13)}`),
    headers: offset % 3 === 0 ? [{ key: 'h-ü', value: Buffer.from(String(offset)) }] : [],
    producerId: offset % 2 ? 'producer-ü' : '',
    epoch: offset % 2 ? 3 : -1,
    sequence: offset % 2 ? offset * 2 : -1,
    attributes: (offset % 7 === 0 ? RecordAttr.TRANSACTIONAL : 0) | (offset % 11 === 0 ? RecordAttr.CONTROL : 0) | (end ? ATTR_END_OF_APPEND : 0),
  };
}

/** Leader appends given by their offsets. */
function appends(groups: number[][], salt = ''): LogRecord[][] {
  return groups.map((g) => g.map((o, i) => lrec(o, i === g.length - 1, salt)));
}

/** Every stored field, buffers as hex, so toEqual compares them exactly. */
function norm(r: LogRecord) {
  return {
    offset: r.offset,
    timestamp: r.timestamp,
    key: r.key === null ? null : r.key.toString('hex'),
    value: r.value.toString('hex'),
    headers: r.headers.map((h) => [h.key, h.value.toString('hex')]),
    producerId: r.producerId,
    epoch: r.epoch,
    sequence: r.sequence,
    attributes: r.attributes,
  };
}

/** Every record from the log start, as stored (append markers kept), in reads of `maxRecords`. */
async function readAll(log: PartitionLog, opts: { marker?: boolean; maxRecords?: number; from?: number } = {}) {
  const out: LogRecord[] = [];
  let next = opts.from ?? log.logStartOffset;
  while (next < log.logEndOffset) {
    const got = await log.read(next, { maxRecords: opts.maxRecords ?? 1000, maxBytes: 1 << 20, keepAppendMarker: opts.marker ?? true });
    if (got.length === 0) break;
    out.push(...got);
    next = got[got.length - 1].offset + 1;
  }
  return out.map(norm);
}

const masked = (rs: LogRecord[]) => rs.map((r) => norm({ ...r, attributes: r.attributes & ~ATTR_END_OF_APPEND }));

async function expectRefused(p: Promise<unknown>, reason: RegExp): Promise<void> {
  const err = await p.then(
    () => null,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(TributaryError);
  expect((err as TributaryError).code).toBe('invalid_parameter');
  expect(String((err as TributaryError).fields.reason)).toMatch(reason);
}

/** Copies the leader's log to the follower the way a fetcher would: whole appends from the follower's LEO. */
async function replicate(leader: PartitionLog, follower: PartitionLog, maxRecords: number, maxBytes: number, useOption: boolean): Promise<number> {
  let calls = 0;
  for (;;) {
    const from = follower.logEndOffset;
    if (from >= leader.logEndOffset) return calls;
    let recs = await leader.read(from, { maxRecords, maxBytes, keepAppendMarker: true, wholeAppends: useOption });
    if (!useOption) {
      recs = recs.slice(0, wholeAppendCount(recs));
      // Not even one whole append fitted: fetch bigger.
      if (recs.length === 0) recs = await leader.read(from, { maxRecords: 100_000, maxBytes: 1 << 26, keepAppendMarker: true, wholeAppends: true });
    }
    if (recs.length === 0) return calls;
    const res = await follower.appendReplica(recs);
    expect(res.baseOffset).toBe(recs[0].offset);
    expect(res.lastOffset).toBe(recs[recs.length - 1].offset);
    expect(follower.logEndOffset).toBe(recs[recs.length - 1].offset + 1);
    calls++;
  }
}

const bytes = (max: number) => fc.uint8Array({ maxLength: max }).map((a) => Buffer.from(a));
const recordArb: fc.Arbitrary<RecordInput> = fc.record({
  key: fc.oneof(
    fc.constant(null),
    fc.constantFrom('a', 'b', 'c', 'd', 'e', '').map((s) => Buffer.from(s)),
  ),
  value: fc.oneof(fc.constant(Buffer.alloc(0)), bytes(80)),
  headers: fc.array(fc.record({ key: fc.string({ maxLength: 6 }), value: bytes(12) }), { maxLength: 2 }),
  producerId: fc.constantFrom('', 'p1', 'prod-ü'),
  epoch: fc.oneof(fc.constant(-1), fc.nat(5)),
  sequence: fc.oneof(fc.constant(-1), fc.nat(1000)),
  timestamp: fc.oneof(fc.constant(0), fc.integer({ min: 1, max: 2 ** 45 })),
  attributes: fc.integer({ min: 0, max: 0x7f }),
});

describe('PartitionLog.appendReplica', () => {
  it('a follower copying a leader (compacted or not) in whole appends stores every field as the leader has it', async () => {
    let gaps = 0;
    let runs = 0;
    await fc.assert(
      fc.asyncProperty(
        fc.array(fc.array(recordArb, { minLength: 1, maxLength: 7 }), { minLength: 1, maxLength: 25 }),
        fc.boolean(),
        fc.record({
          maxRecords: fc.integer({ min: 1, max: 12 }),
          maxBytes: fc.integer({ min: 1, max: 3000 }),
          useOption: fc.boolean(),
          segmentBytes: fc.constantFrom(300, 1200, 1 << 20),
          tailCacheBytes: fc.constantFrom(0, 700, 1 << 20),
        }),
        async (batches, compact, f) => {
          const run = runs++;
          const leader = await openLog(`l${run}`, { segmentBytes: 500 });
          const follower = await openLog(`f${run}`, { segmentBytes: f.segmentBytes, tailCacheBytes: f.tailCacheBytes });
          for (const b of batches) await leader.append(b);
          // Compaction stops at the HWM: here everything is acknowledged, as on a leader whose followers have it all.
          leader.setHighWatermark(leader.logEndOffset);
          if (compact) await leader.compact({ now: 2 ** 44, tombstoneRetentionMs: 2 ** 40 });
          const expected = await readAll(leader);
          for (let i = 1; i < expected.length; i++) if (expected[i].offset !== expected[i - 1].offset + 1) gaps++;
          await replicate(leader, follower, f.maxRecords, f.maxBytes, f.useOption);
          expect(await readAll(follower)).toEqual(expected);
          // Consumers' reads (tail cache or disk, markers masked) agree too, from every offset.
          const plain = await readAll(leader, { marker: false });
          expect(await readAll(follower, { marker: false, maxRecords: 3 })).toEqual(plain);
          if (expected.length > 0) expect(follower.logEndOffset).toBe(expected[expected.length - 1].offset + 1);
          // Reopen after a crash: recovery keeps everything (every call ended with a whole append).
          await simulateCrash(follower);
          const again = await openLog(`f${run}`, { segmentBytes: f.segmentBytes });
          expect(await readAll(again)).toEqual(expected);
          await again.close();
          await leader.close();
        },
      ),
      { numRuns: 40 },
    );
    // Compaction left gaps that the followers had to copy.
    expect(gaps).toBeGreaterThan(5);
  }, 120_000);

  it('gaps: from the log end and between appends, across segment rolls, index, tail cache, retention and reopen', async () => {
    const groups = appends([[3, 4, 5], [9], [10, 11], [40, 41, 42, 43], [44], [100], [200, 201, 202, 203, 204, 205], [206], [1000]]);
    for (const tailCacheBytes of [0, 1 << 20]) {
      const sub = `gaps-${tailCacheBytes}`;
      const opts = { segmentBytes: 400, tailCacheBytes, retentionMs: 60_000 };
      let log = await openLog(sub, opts);
      // Two leader appends per call, one alone at the end.
      for (let i = 0; i < groups.length; i += 2) await log.appendReplica(groups.slice(i, i + 2).flat());
      const all = groups.flat();
      expect(log.logEndOffset).toBe(1001);
      expect(log.segmentInfos().length).toBeGreaterThan(2);
      expect(await readAll(log)).toEqual(all.map(norm));
      expect(await readAll(log, { marker: false })).toEqual(masked(all));
      // Every start offset, gaps included, reads the first record at or after it.
      for (let o = 0; o < 1001; o += o < 300 ? 1 : 37) {
        const got = await log.read(o, { maxRecords: 2, maxBytes: 1 << 20 });
        const want = all.filter((r) => r.offset >= o).slice(0, 2);
        expect(got.map(norm), `from ${o}`).toEqual(masked(want));
      }
      expect(await log.offsetForTimestamp(0)).toBe(3);
      await log.close();
      log = await openLog(sub, opts);
      expect(log.logEndOffset).toBe(1001);
      expect(await readAll(log)).toEqual(all.map(norm));
      // The follower keeps going after a reopen.
      await log.appendReplica(appends([[1001, 1002], [1500]]).flat());
      expect(log.logEndOffset).toBe(1501);
      // Retention drops whole closed segments; reads start at the new log start.
      log.setHighWatermark(log.logEndOffset); // all committed: retention deletes only below the HWM
      const res = await log.applyRetention(Date.now() + 10_000);
      expect(res.deletedSegments).toBeGreaterThan(0);
      const start = log.logStartOffset;
      expect(await readAll(log)).toEqual([...all, ...appends([[1001, 1002], [1500]]).flat()].filter((r) => r.offset >= start).map(norm));
      await simulateCrash(log);
      log = await openLog(sub, opts);
      expect(log.logStartOffset).toBe(start);
      expect(log.logEndOffset).toBe(1501);
      await log.close();
    }
  });

  it('refuses bad calls with invalid_parameter and appends nothing', async () => {
    const log = await openLog('refuse');
    await log.appendReplica(appends([[0, 1], [5]]).flat());
    const size = log.sizeBytes;
    const ok = (o: number, end = true) => lrec(o, end);
    await expectRefused(log.appendReplica([]), /non-empty/);
    await expectRefused(log.appendReplica([ok(5)]), /below the log end offset 6/);
    await expectRefused(log.appendReplica([ok(3), ok(7)]), /below the log end/);
    await expectRefused(log.appendReplica([ok(8), ok(8)]), /strictly increasing/);
    await expectRefused(log.appendReplica([ok(9), ok(8)]), /strictly increasing/);
    // A gap right after a record that does not end an append: the leader never has one.
    await expectRefused(log.appendReplica([ok(8, false), ok(10)]), /gap/);
    // A fetch cut inside a leader append.
    await expectRefused(log.appendReplica([ok(6), ok(7, false)]), /does not end an append/);
    await expectRefused(log.appendReplica([ok(6, false)]), /does not end an append/);
    await expectRefused(log.appendReplica([{ ...ok(6), offset: -1 }]), /offset/);
    await expectRefused(log.appendReplica([{ ...ok(6), offset: 6.5 }]), /offset/);
    // A negative timestamp is a leader's as stored (a Kafka producer's -1: untimed-records.test.ts); a fraction is not.
    await expectRefused(log.appendReplica([{ ...ok(6), timestamp: 1.5 }]), /timestamp/);
    await expectRefused(log.appendReplica([{ ...ok(6), timestamp: undefined as unknown as number }]), /timestamp/);
    await expectRefused(log.appendReplica([{ ...ok(6), attributes: 0x180 }]), /attributes/);
    await expectRefused(log.appendReplica([{ ...ok(6), sequence: -2 }]), /sequence/);
    await expectRefused(log.appendReplica([{ ...ok(6), value: 'x' as unknown as Buffer }]), /value/);
    await expectRefused(log.appendReplica([ok(6), ok(2 ** 32 + 7)]), /2\^32/);
    expect(log.logEndOffset).toBe(6);
    expect(log.sizeBytes).toBe(size);
    // An append() queued before it moves the log end past its first offset: refused when it is written.
    const a = log.append([{ key: null, value: Buffer.from('own') }]);
    const r = log.appendReplica([ok(6)]);
    expect((await a).baseOffset).toBe(6);
    await expectRefused(r, /below the log end offset 7/);
    expect(log.logEndOffset).toBe(7);
    // Refusals leave the log usable.
    await log.appendReplica([ok(7)]);
    expect((await readAll(log)).map((x) => x.offset)).toEqual([0, 1, 5, 6, 7]);
  });

  it('a torn replica write keeps a prefix of its whole leader appends, never part of one', async () => {
    const opts: Partial<LogOptions> = { tailCacheBytes: 0 };
    let log = await openLog('torn', opts);
    const earlier = appends([[0, 1, 2], [5, 6], [9]]);
    await log.appendReplica(earlier[0]);
    await log.appendReplica([...earlier[1], ...earlier[2]]);
    const before = log.sizeBytes;
    // The last call: three leader appends with a gap between the second and the third.
    const last = appends([[10, 11], [12], [20, 21, 22]]);
    await log.appendReplica(last.flat());
    await simulateCrash(log);
    const logs = (await readdir(join(dir, 'torn'))).filter((n) => n.endsWith('.log'));
    expect(logs).toHaveLength(1);
    const logPath = join(dir, 'torn', logs[0]);
    const indexPath = logPath.replace(/\.log$/, '.index');
    const original = await readFile(logPath);
    const originalIndex = await readFile(indexPath);
    const raw = decodeRecords(original).records;
    expect(raw.map((r) => norm(r))).toEqual([...earlier.flat(), ...last.flat()].map(norm));
    // End position of each record.
    const ends: number[] = [];
    for (let p = 0; p < original.length; ) {
      p += original.readUInt32BE(p) + 4;
      ends.push(p);
    }
    const endOf = (offset: number) => ends[raw.findIndex((r) => r.offset === offset)];
    // What survives a file of `len` bytes: every whole append that ends within it.
    const expectedEnd = (len: number) => (len >= endOf(22) ? 23 : len >= endOf(12) ? 13 : len >= endOf(11) ? 12 : 10);
    const leaderRecords = [...earlier.flat(), ...last.flat()];

    const reopen = async (bytes: Buffer, what: string, leo: number) => {
      await writeFile(logPath, bytes);
      await writeFile(indexPath, originalIndex);
      await unlink(join(dir, 'torn', CLEAN_SHUTDOWN_FILE)).catch(() => {});
      const l = await PartitionLog.open(join(dir, 'torn'), { ...OPTS, ...opts });
      try {
        expect(l.logEndOffset, what).toBe(leo);
        expect(await readAll(l), what).toEqual(leaderRecords.filter((r) => r.offset < leo).map(norm));
        // The follower fetches the rest again from its log end and ends up with the leader's log.
        const rest = leaderRecords.filter((r) => r.offset >= leo);
        if (rest.length > 0) await l.appendReplica(rest);
        expect(await readAll(l), what).toEqual(leaderRecords.map(norm));
      } finally {
        await simulateCrash(l);
      }
    };
    let cases = 0;
    for (let pos = before; pos < original.length; pos++) {
      await reopen(original.subarray(0, pos), `cut at ${pos}`, expectedEnd(pos));
      cases++;
    }
    expect(cases).toBe(original.length - before);
    for (let pos = before; pos < original.length; pos += 5) {
      const flipped = Buffer.from(original);
      flipped[pos] ^= 0x5a;
      // In the last record: it and its append go, whole appends before it stay. Before it: a valid record
      // follows the damaged one (no torn tail), so the open is refused (docs/architecture.md "Recovery").
      const rec = ends.findIndex((e) => e > pos);
      const startOfDamaged = rec === 0 ? 0 : ends[rec - 1];
      if (startOfDamaged < ends[ends.length - 2]) {
        await writeFile(logPath, flipped);
        await expect(PartitionLog.open(join(dir, 'torn'), { ...OPTS, ...opts, flush: 'always' }), `flip at ${pos}`).rejects.toMatchObject({ code: 'storage_error' });
        // flush=os: no fsync vouches for it, so the log ends before the damaged record's leader append.
        await reopen(flipped, `flip at ${pos}, flush=os`, expectedEnd(startOfDamaged));
      } else {
        await reopen(flipped, `flip at ${pos}`, expectedEnd(startOfDamaged));
      }
    }
    await reopen(original, 'intact', 23);
    log = await PartitionLog.open(join(dir, 'torn'), { ...OPTS, ...opts });
    opened.push(log);
    expect(log.logEndOffset).toBe(23);
  }, 60_000);

  it("with flush 'always' a resolved call survives a crash whole", async () => {
    let log = await openLog('always', { flush: 'always' });
    const groups = appends([[0, 1], [4, 5, 6], [8], [30, 31]]);
    await Promise.all([log.appendReplica([...groups[0], ...groups[1]]), log.append([{ key: null, value: Buffer.from('x') }]).catch(() => null)]);
    await log.appendReplica([...groups[2], ...groups[3]].filter((r) => r.offset >= log.logEndOffset));
    const expected = await readAll(log);
    await simulateCrash(log);
    log = await openLog('always', { flush: 'always' });
    expect(await readAll(log)).toEqual(expected);
    expect(log.logEndOffset).toBe(32);
  });

  it('offsets more than 2^32 past the segment base start a new segment, and the log reopens with both', async () => {
    const far = 2 ** 32 + 10;
    for (const flush of ['os', 'always'] as const) {
      for (const crash of [false, true]) {
        const sub = `far-${flush}-${crash}`;
        let log = await openLog(sub, { flush });
        const recs = [...appends([[0, 1, 2]]).flat(), ...appends([[far, far + 1]]).flat()];
        await log.appendReplica(recs.slice(0, 3));
        await log.appendReplica(recs.slice(3));
        expect(log.logEndOffset).toBe(far + 2);
        const check = async (l: PartitionLog) => {
          expect(await readAll(l)).toEqual(recs.map(norm));
          expect((await l.read(3, { maxRecords: 5, maxBytes: 1 << 20 })).map((r) => r.offset)).toEqual([far, far + 1]);
          expect(l.segmentInfos().map((s) => [s.baseOffset, s.nextOffset])).toEqual([
            [0, far],
            [far, far + 2],
          ]);
        };
        await check(log);
        if (crash) await simulateCrash(log);
        else await log.close();
        log = await openLog(sub, { flush });
        await check(log);
        await log.appendReplica(appends([[far + 2]]).flat());
        expect(log.logEndOffset).toBe(far + 3);
        await log.close();
      }
    }
  });
});

describe('PartitionLog.read wholeAppends', () => {
  it('stops only at append boundaries, returns a first append larger than the limits whole, and leaves out an append cut by maxOffset', async () => {
    const log = await openLog('whole', { tailCacheBytes: 1 << 20 });
    const sizes = [3, 1, 5, 2, 1, 4];
    let n = 0;
    const ends: number[] = [];
    for (const s of sizes) {
      await log.append(Array.from({ length: s }, () => ({ key: null, value: Buffer.alloc(40, n++) })));
      ends.push(n - 1);
    }
    const read = (o: number, maxRecords: number, maxBytes: number, maxOffset?: number) =>
      log.read(o, { maxRecords, maxBytes, maxOffset, keepAppendMarker: true, wholeAppends: true });
    // One record asked for: the whole first append.
    expect((await read(0, 1, 1)).map((r) => r.offset)).toEqual([0, 1, 2]);
    expect((await read(4, 1, 1)).map((r) => r.offset)).toEqual([4, 5, 6, 7, 8]);
    // Limits reached inside an append are checked again at its end.
    expect((await read(0, 4, 1 << 20)).map((r) => r.offset)).toEqual([0, 1, 2, 3]);
    expect((await read(0, 5, 1 << 20)).map((r) => r.offset)).toEqual([0, 1, 2, 3, 4, 5, 6, 7, 8]);
    // maxOffset inside an append: that append is left out.
    expect((await read(0, 100, 1 << 20, 6)).map((r) => r.offset)).toEqual([0, 1, 2, 3]);
    expect(await read(4, 100, 1 << 20, 6)).toEqual([]);
    // Starting inside an append (not what a follower does) returns its rest.
    expect((await read(1, 1, 1)).map((r) => r.offset)).toEqual([1, 2]);
    // Every result ends with the marker, and the records are those of a plain marked read.
    for (let o = 0; o < n; o++) {
      for (const [mr, mb] of [
        [1, 1],
        [2, 100],
        [7, 300],
      ]) {
        const got = await read(o, mr, mb);
        expect(got.length).toBeGreaterThan(0);
        expect(got[got.length - 1].attributes & ATTR_END_OF_APPEND).not.toBe(0);
        expect(ends).toContain(got[got.length - 1].offset);
        const plain = await log.read(o, { maxRecords: got.length, maxBytes: 1 << 20, keepAppendMarker: true });
        expect(got.map(norm)).toEqual(plain.map(norm));
      }
    }
    expect(wholeAppendCount(await log.read(0, { maxRecords: 7, maxBytes: 1 << 20, keepAppendMarker: true }))).toBe(4);
    expect(wholeAppendCount(await log.read(0, { maxRecords: 2, maxBytes: 1 << 20, keepAppendMarker: true }))).toBe(0);
  });
});

describe('truncateTo for a follower', () => {
  it('after truncating to the divergence point, the leader records from there replace the old tail (index, cache, HWM, reopen)', async () => {
    for (const tailCacheBytes of [0, 1 << 20]) {
      for (const reopenHow of ['none', 'close', 'crash'] as const) {
        const sub = `trunc-${tailCacheBytes}-${reopenHow}`;
        const opts = { segmentBytes: 500, tailCacheBytes };
        let log = await openLog(sub, opts);
        const common = appends([[0, 1, 2], [3], [4, 5], [6, 7, 8, 9], [10], [11, 12]]);
        // What an old leader wrote that the new one never got.
        const stale = appends([[13, 14], [15, 16, 17], [18], [19, 20, 21, 22]], '-stale');
        for (const g of [...common, ...stale]) await log.appendReplica(g);
        expect(log.segmentInfos().length).toBeGreaterThan(2);
        log.setHighWatermark(20);
        await log.truncateTo(13);
        expect(log.logEndOffset).toBe(13);
        expect(log.highWatermark).toBe(13);
        expect(await readAll(log)).toEqual(common.flat().map(norm));
        if (reopenHow !== 'none') {
          if (reopenHow === 'close') await log.close();
          else await simulateCrash(log);
          log = await openLog(sub, opts);
          expect(log.logEndOffset).toBe(13);
          // Checkpointed on close; after a crash whatever the last checkpoint said, clamped.
          if (reopenHow === 'close') expect(log.highWatermark).toBe(13);
          else expect(log.highWatermark).toBeLessThanOrEqual(13);
        }
        // The new leader's records from 13 on (with a gap).
        const fresh = appends([[13], [14, 15], [30, 31, 32], [33]], '-new');
        await log.appendReplica(fresh.slice(0, 2).flat());
        await log.appendReplica(fresh.slice(2).flat());
        const want = [...common, ...fresh].flat();
        expect(log.logEndOffset).toBe(34);
        expect(await readAll(log)).toEqual(want.map(norm));
        // From every offset, one record at a time (index lookups, cache or disk).
        for (let o = 0; o < 34; o++) {
          const got = await log.read(o, { maxRecords: 1, maxBytes: 1 << 20 });
          expect(got.map(norm), `at ${o}`).toEqual(masked(want.filter((r) => r.offset >= o).slice(0, 1)));
        }
        await simulateCrash(log);
        log = await openLog(sub, opts);
        expect(await readAll(log)).toEqual(want.map(norm));
        await log.close();
      }
    }
  });

  it('a high watermark checkpointed before the truncation does not cover the new records after a crash', async () => {
    let log = await openLog('hwm');
    for (const g of appends([
      [0, 1, 2],
      [3, 4, 5, 6],
      [7, 8, 9],
    ]))
      await log.appendReplica(g);
    log.setHighWatermark(9);
    await log.flush();
    await log.truncateTo(4);
    expect(log.highWatermark).toBe(4);
    // The new leader's records, not committed yet; then the follower dies.
    await log.appendReplica(appends([[4, 5, 6, 7, 8, 9, 10]], '-new').flat());
    await simulateCrash(log);
    log = await openLog('hwm');
    expect(log.logEndOffset).toBe(11);
    expect(log.highWatermark).toBe(4);
    await log.close();
  });

  it('truncating into a gap, into an earlier segment and below the log start', async () => {
    const opts = { segmentBytes: 300, retentionMs: 60_000 };
    let log = await openLog('tgap', opts);
    const groups = appends([[0, 1, 2, 3, 4], [10, 11, 12], [20], [21, 22, 23, 24, 25], [40]]);
    for (const g of groups) await log.appendReplica(g);
    // Into the gap 5..9: nothing >= 7 is left; the log end is 7 until the log is reopened, which finds
    // the end of the last record (5). A follower may append from either: no record lies in between.
    await log.truncateTo(7);
    expect(log.logEndOffset).toBe(7);
    expect(await readAll(log)).toEqual(groups[0].map(norm));
    expect(await log.read(7, { maxRecords: 5, maxBytes: 1 << 20 })).toEqual([]);
    await log.close();
    log = await openLog('tgap', opts);
    expect(log.logEndOffset).toBe(5);
    expect(await readAll(log)).toEqual(groups[0].map(norm));
    await log.appendReplica(appends([[7, 8]]).flat());
    expect(log.logEndOffset).toBe(9);
    await expectRefused(log.appendReplica(appends([[8]]).flat()), /below the log end/);
    // Below the log start (retention removed the segments): the log restarts at the offset.
    const more = appends([
      [9, 10, 11],
      [12, 13, 14, 15, 16],
      [17, 18, 19, 20],
    ]);
    for (const g of more) await log.appendReplica(g);
    expect(log.segmentInfos().length).toBeGreaterThan(2);
    log.setHighWatermark(log.logEndOffset); // all committed: retention deletes only below the HWM
    await log.applyRetention(Date.now() + 10_000);
    const start = log.logStartOffset;
    expect(start).toBeGreaterThan(0);
    await log.truncateTo(start - 1);
    expect([log.logStartOffset, log.logEndOffset]).toEqual([start - 1, start - 1]);
    await log.appendReplica(appends([[start + 3]]).flat());
    expect((await readAll(log)).map((r) => r.offset)).toEqual([start + 3]);
    await simulateCrash(log);
    log = await openLog('tgap', opts);
    expect([log.logStartOffset, log.logEndOffset]).toEqual([start - 1, start + 4]);
    await log.close();
  });
});

describe('readWire after replica appends with gaps', () => {
  it('serves from the tail cache exactly what read() + encodeBatch gives, and falls back below it', async () => {
    const log = await openLog('wire', { tailCacheBytes: 1 << 20 });
    const groups = appends([[0, 1, 2], [3, 4], [10, 11, 12, 13], [14], [50, 51], [52, 53, 54]]);
    await log.appendReplica([...groups[0], ...groups[1]]);
    await log.appendReplica([...groups[2], ...groups[3], ...groups[4]]);
    await log.appendReplica(groups[5]);
    log.setHighWatermark(55);
    let served = 0;
    let fellBack = 0;
    for (let o = 0; o <= 55; o++) {
      for (const extensions of [false, true]) {
        for (const skipControl of [false, true]) {
          const opts = { maxRecords: 3, maxBytes: 1 << 20 };
          const w = log.readWire(o, opts, { topic: 't', partition: 2, extensions, skipControl });
          const recs = o < log.logEndOffset ? await log.read(o, opts) : [];
          if (!w) {
            fellBack++;
            continue;
          }
          served++;
          const kept = skipControl ? recs.filter((r) => (r.attributes & RecordAttr.CONTROL) === 0) : recs;
          const nextOffset = recs[recs.length - 1].offset + 1;
          const trailer = extensions ? { nextOffset, highWatermark: 55, logStartOffset: 0 } : undefined;
          expect(Buffer.compare(w.frame, encodeBatch(logRecordsToBatch('t', 2, kept, trailer), { extensions })), `at ${o}`).toBe(0);
          expect(w.nextOffset).toBe(nextOffset);
          expect(w.count).toBe(kept.length);
        }
      }
    }
    // The cache holds the last run without a gap (50..54); offsets below it, gaps included, take read().
    expect(served).toBe(4 * 5);
    expect(fellBack).toBeGreaterThan(0);
    expect(log.readWire(49, { maxRecords: 3, maxBytes: 1 << 20 }, { topic: 't', partition: 2, extensions: true, skipControl: false })).toBeNull();
  });

  it('serves from the segment files exactly what read() + encodeBatch gives, over the gaps', async () => {
    const log = await openLog('wire-disk', { tailCacheBytes: 0 });
    const groups = appends([[0, 1, 2], [3, 4], [10, 11, 12, 13], [14], [50, 51], [52, 53, 54]]);
    await log.appendReplica([...groups[0], ...groups[1]]);
    await log.appendReplica([...groups[2], ...groups[3], ...groups[4]]);
    await log.appendReplica(groups[5]);
    log.setHighWatermark(55);
    for (let o = 0; o < 55; o++) {
      for (const extensions of [false, true]) {
        for (const skipControl of [false, true]) {
          const opts = { maxRecords: 3, maxBytes: 1 << 20 };
          const w = await log.readWireFromDisk(o, opts, { topic: 't', partition: 2, extensions, skipControl });
          const recs = await log.read(o, opts);
          const kept = skipControl ? recs.filter((r) => (r.attributes & RecordAttr.CONTROL) === 0) : recs;
          const nextOffset = recs[recs.length - 1].offset + 1;
          const trailer = extensions ? { nextOffset, highWatermark: 55, logStartOffset: 0 } : undefined;
          expect(w, `at ${o}`).not.toBeNull();
          expect(Buffer.compare(w!.frame, encodeBatch(logRecordsToBatch('t', 2, kept, trailer), { extensions })), `at ${o}`).toBe(0);
          expect([w!.nextOffset, w!.count]).toEqual([nextOffset, kept.length]);
        }
      }
    }
  });
});

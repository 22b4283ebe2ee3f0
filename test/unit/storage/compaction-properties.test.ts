/**
 * Property tests of the log cleaner (docs/architecture.md "Storage": Retention, Compaction, Recovery): random
 * keyed appends (tombstones, null keys, batches), HWM moves, truncations above the HWM, compactions (some
 * stopped at a crash point, some racing appends and a truncation), crashes and clean restarts, checked
 * against a model of what compaction may remove; and retention passes against its limits. A failure prints
 * its fast-check seed and path: CLEANER_SEED=<seed> CLEANER_PATH=<path> replays it (a race may not repeat),
 * CLEANER_RUNS=<n> runs longer, CLEANER_NO_SHRINK=1 stops at the first failure.
 */
import { join } from 'node:path';
import fc from 'fast-check';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { LogRecord } from 'tributary-protocol/record.js';
import { type LogOptions, PartitionLog } from 'tributary-broker/storage/partition-log.js';
import { armCompactionCrash, type CompactionCrashPoint, SimulatedCrash, simulateCrash } from 'tributary-broker/storage/log-test-hooks.js';
import { removeDir, tempDir } from '../../helpers/util.js';

let root: string;
let runs = 0;
/** CLEANER_RUNS=<n> runs each property longer than CI does (about 0.5 s a run). */
const RUNS = Number(process.env.CLEANER_RUNS ?? 25);
const TIMEOUT = 60_000 + RUNS * 2000;
const opened = new Set<PartitionLog>();

beforeEach(async () => {
  root = await tempDir('trib-cleaner-prop-');
});
afterEach(async () => {
  for (const l of opened) await l.close().catch(() => {});
  opened.clear();
  await removeDir(root);
});

const T = 1_800_000_000_000;
const KEYS = ['a', 'b', 'c', 'd', 'e', 'f'];

interface Rec {
  offset: number;
  key: string | null;
  value: string;
  ts: number;
}

/** A compaction that was started: it may have removed what its cleanable end and clock allow. */
interface Pass {
  cleanable: number;
  now: number;
  tombstoneMs: number;
}

type Op =
  | { t: 'append'; batch: Array<{ key: string | null; tomb: boolean; pad: number }>; age: number }
  | { t: 'hwm'; frac: number }
  | { t: 'compact'; ahead: number; tombstoneMs: number; crash: CompactionCrashPoint | null }
  | { t: 'restart'; clean: boolean }
  | { t: 'truncate'; frac: number }
  | { t: 'race'; ahead: number; tombstoneMs: number; appends: Array<Array<{ key: string | null; tomb: boolean; pad: number }>>; truncate: number | null };

const recArb = fc.record({
  key: fc.oneof({ weight: 1, arbitrary: fc.constant(null) }, { weight: 6, arbitrary: fc.constantFrom(...KEYS) }),
  tomb: fc.nat(3).map((n) => n === 0),
  pad: fc.nat(60),
});

const opArb: fc.Arbitrary<Op> = fc.oneof(
  { weight: 8, arbitrary: fc.record({ t: fc.constant('append' as const), batch: fc.array(recArb, { minLength: 1, maxLength: 4 }), age: fc.nat(5000) }) },
  { weight: 4, arbitrary: fc.record({ t: fc.constant('hwm' as const), frac: fc.oneof(fc.constant(1), fc.double({ min: 0, max: 1, noNaN: true })) }) },
  {
    weight: 3,
    arbitrary: fc.record({
      t: fc.constant('compact' as const),
      ahead: fc.nat(20_000),
      tombstoneMs: fc.constantFrom(0, 1000, 10_000, 24 * 3600 * 1000),
      crash: fc.constantFrom(null, 'temp-written', 'index-renamed', 'log-renamed', 'emptied-stretched') as fc.Arbitrary<CompactionCrashPoint | null>,
    }),
  },
  { weight: 1, arbitrary: fc.record({ t: fc.constant('restart' as const), clean: fc.boolean() }) },
  { weight: 1, arbitrary: fc.record({ t: fc.constant('truncate' as const), frac: fc.double({ min: 0, max: 1, noNaN: true }) }) },
  {
    weight: 2,
    arbitrary: fc.record({
      t: fc.constant('race' as const),
      ahead: fc.nat(20_000),
      tombstoneMs: fc.constantFrom(0, 1000, 24 * 3600 * 1000),
      appends: fc.array(fc.array(recArb, { minLength: 1, maxLength: 3 }), { minLength: 1, maxLength: 6 }),
      truncate: fc.option(fc.double({ min: 0, max: 1, noNaN: true })),
    }),
  },
);

class Model {
  recs: Rec[] = [];
  /** The first offset of each append. */
  starts: number[] = [];
  passes: Pass[] = [];
  hwm = 0;
  step = 0;

  /** The offset of the latest record of `key` below `end`, -1 when none. */
  latestBelow(key: string, end: number): number {
    for (let i = Math.min(end, this.recs.length) - 1; i >= 0; i--) if (this.recs[i]!.key === key) return i;
    return -1;
  }

  /** Whether some compaction started so far was allowed to drop `r` (docs/architecture.md "Compaction"). */
  removable(r: Rec): boolean {
    if (r.key === null) return false;
    return this.passes.some((p) => {
      if (r.offset >= p.cleanable - 1) return false;
      const latest = this.latestBelow(r.key!, p.cleanable);
      if (latest > r.offset) return true;
      return r.value === '' && latest === r.offset && p.now - r.ts > p.tombstoneMs;
    });
  }
}

function plain(r: LogRecord): Rec {
  return { offset: r.offset, key: r.key === null ? null : r.key.toString(), value: r.value.toString(), ts: r.timestamp };
}

async function readFrom(log: PartitionLog, from: number, maxRecords: number): Promise<Rec[]> {
  const out: Rec[] = [];
  let next = from;
  while (next < log.logEndOffset) {
    const got = await log.read(next, { maxRecords, maxBytes: 1 << 20 });
    if (got.length === 0) break;
    out.push(...got.map(plain));
    next = got[got.length - 1]!.offset + 1;
  }
  return out;
}

/** Every invariant of the log against the model; `what` names the step in a failure. */
async function check(log: PartitionLog, m: Model, what: string): Promise<void> {
  expect(log.logEndOffset, `${what}: log end`).toBe(m.recs.length);
  expect(log.highWatermark, `${what}: HWM`).toBe(m.hwm);
  expect(log.logStartOffset, `${what}: log start`).toBe(0);
  const all = await readFrom(log, 0, 7);
  const present = new Set<number>();
  let prev = -1;
  for (const r of all) {
    expect(r.offset, `${what}: offsets ascend`).toBeGreaterThan(prev);
    prev = r.offset;
    expect(r, `${what}: record at ${r.offset}`).toEqual(m.recs[r.offset]);
    present.add(r.offset);
  }
  for (const r of m.recs) {
    if (!present.has(r.offset) && !m.removable(r)) throw new Error(`${what}: record ${JSON.stringify(r)} is gone, and no compaction could drop it`);
  }
  // A read from inside a gap starts at the next record kept.
  for (let o = 0; o < m.recs.length; o += 1 + (o % 5)) {
    const got = await log.read(o, { maxRecords: 2, maxBytes: 1 << 20 });
    const want = all.filter((r) => r.offset >= o).slice(0, 2);
    expect(got.map(plain), `${what}: read from ${o}`).toEqual(want.slice(0, got.length));
    expect(got.length, `${what}: read from ${o} found nothing`).toBeGreaterThan(0);
  }
  // The first record kept stamped at or after a time (timestamps are not in offset order here).
  for (const ts of [T, T + 5000, T + m.step * 500, T + m.step * 1000 + 6000]) {
    const want = all.find((r) => r.ts >= ts)?.offset ?? m.recs.length;
    expect(await log.offsetForTimestamp(ts), `${what}: offset for timestamp ${ts}`).toBe(want);
  }
  // A tombstone gone with no later record of its key was dropped as its key's latest: the horizon covers it.
  for (const r of m.recs) {
    if (r.value !== '' || r.key === null || present.has(r.offset) || m.latestBelow(r.key, m.recs.length) !== r.offset) continue;
    expect(log.tombstoneHorizon, `${what}: horizon past the dropped tombstone at ${r.offset}`).toBeGreaterThanOrEqual(r.offset + 1);
  }
}

const OPTS = (flush: 'always' | 'os'): Partial<LogOptions> => ({
  flush,
  segmentBytes: 400,
  indexIntervalBytes: 64,
  cleanupPolicy: 'compact',
  checkpointHwmOnTimer: false,
});

async function openLog(dir: string, flush: 'always' | 'os', hwm: number): Promise<PartitionLog> {
  const log = await PartitionLog.open(dir, OPTS(flush));
  opened.add(log);
  // The partition layer restores the HWM it had (a standalone broker: the log end, which is no lower).
  log.setHighWatermark(hwm);
  return log;
}

async function append(log: PartitionLog, m: Model, batch: Array<{ key: string | null; tomb: boolean; pad: number }>, ts: number): Promise<void> {
  const input = batch.map((b) => ({ key: b.key === null ? null : Buffer.from(b.key), value: Buffer.from(b.tomb ? '' : `v${m.recs.length}-${'x'.repeat(b.pad)}`), timestamp: ts }));
  const res = await log.append(input);
  expect(res.baseOffset, 'base offset').toBe(m.recs.length);
  m.starts.push(res.baseOffset);
  for (const i of input) m.recs.push({ offset: m.recs.length, key: i.key === null ? null : i.key.toString(), value: i.value.toString(), ts });
}

/**
 * Truncates the log to the start of an append between its HWM and its end, as a follower drops what its
 * leader lacks (at an epoch's start or the leader's end, both between appends). A cut inside an append
 * leaves its first records without the end-of-append bit, and the next open cuts them (left out here).
 */
async function truncate(log: PartitionLog, m: Model, frac: number): Promise<void> {
  const at = m.starts.filter((o) => o >= m.hwm);
  if (at.length === 0) return;
  const to = at[Math.min(at.length - 1, Math.floor(frac * at.length))]!;
  await log.truncateTo(to);
  m.recs.length = to;
  m.starts = m.starts.filter((o) => o < to);
}

async function runOps(flush: 'always' | 'os', ops: Op[]): Promise<void> {
  const dir = join(root, `run-${runs++}`);
  const m = new Model();
  let log = await openLog(dir, flush, 0);
  try {
    for (const [n, op] of ops.entries()) {
      const what = `step ${n} ${JSON.stringify(op)}`;
      m.step++;
      if (op.t === 'append') {
        await append(log, m, op.batch, T + m.step * 1000 + op.age);
      } else if (op.t === 'race') {
        // Appends (each acknowledged as it lands) while the compaction runs: it may see any HWM up to the last.
        const now = T + m.step * 1000 + op.ahead;
        const pass = { cleanable: 0, now, tombstoneMs: op.tombstoneMs };
        m.passes.push(pass);
        // Settled now, so a rejection is not unhandled while the appends run; thrown below.
        const compacting = log.compact({ now, tombstoneRetentionMs: op.tombstoneMs }).then(
          () => ({ err: null }),
          (err: unknown) => ({ err }),
        );
        for (const [i, batch] of op.appends.entries()) {
          await append(log, m, batch, T + m.step * 1000);
          // A follower's truncation of what is past its HWM, while its compaction runs.
          if (i === 0 && op.truncate !== null) await truncate(log, m, op.truncate);
          m.hwm = m.recs.length;
          log.setHighWatermark(m.hwm);
        }
        pass.cleanable = m.hwm;
        const { err } = await compacting;
        if (err !== null) throw err;
      } else if (op.t === 'hwm') {
        m.hwm += Math.floor(op.frac * (m.recs.length - m.hwm));
        log.setHighWatermark(m.hwm);
      } else if (op.t === 'compact') {
        const now = T + m.step * 1000 + op.ahead;
        m.passes.push({ cleanable: Math.min(m.hwm, m.recs.length), now, tombstoneMs: op.tombstoneMs });
        if (op.crash) armCompactionCrash(log, op.crash);
        try {
          await log.compact({ now, tombstoneRetentionMs: op.tombstoneMs });
        } catch (err) {
          if (!(err instanceof SimulatedCrash)) throw err;
        }
        if (op.crash) {
          await simulateCrash(log);
          opened.delete(log);
          log = await openLog(dir, flush, m.hwm);
        }
      } else if (op.t === 'truncate') {
        await truncate(log, m, op.frac);
      } else if (op.t === 'restart') {
        if (op.clean) await log.close();
        else await simulateCrash(log);
        opened.delete(log);
        log = await openLog(dir, flush, m.hwm);
      }
      await check(log, m, what);
    }
    // A last compaction of everything acknowledged removes what it may, and a restart keeps it so.
    m.hwm = m.recs.length;
    log.setHighWatermark(m.hwm);
    const now = T + (m.step + 100) * 1000;
    m.passes.push({ cleanable: m.hwm, now, tombstoneMs: 0 });
    await log.compact({ now, tombstoneRetentionMs: 0 });
    await check(log, m, 'final compaction');
    await simulateCrash(log);
    opened.delete(log);
    log = await openLog(dir, flush, m.hwm);
    await check(log, m, 'crash after the final compaction');
  } finally {
    await log.close().catch(() => {});
    opened.delete(log);
  }
}

describe('log cleaner properties', () => {
  it('compaction keeps every key latest record below the cleanable end, offsets and order, through crashes at every step', async () => {
    await fc.assert(
      fc.asyncProperty(fc.constantFrom('always' as const, 'os' as const), fc.array(opArb, { minLength: 10, maxLength: 80, size: 'max' }), runOps),
      { numRuns: RUNS, verbose: 1, endOnFailure: process.env.CLEANER_NO_SHRINK === '1', ...(process.env.CLEANER_SEED ? { seed: Number(process.env.CLEANER_SEED), path: process.env.CLEANER_PATH } : {}) },
    );
  }, TIMEOUT);
});

type RetOp =
  | { t: 'append'; n: number; pad: number; age: number }
  | { t: 'hwm'; frac: number }
  | { t: 'retain'; ms: number; bytes: number; ahead: number }
  | { t: 'restart'; clean: boolean };

const retOpArb: fc.Arbitrary<RetOp> = fc.oneof(
  { weight: 6, arbitrary: fc.record({ t: fc.constant('append' as const), n: fc.integer({ min: 1, max: 4 }), pad: fc.nat(80), age: fc.nat(3000) }) },
  { weight: 3, arbitrary: fc.record({ t: fc.constant('hwm' as const), frac: fc.oneof(fc.constant(1), fc.double({ min: 0, max: 1, noNaN: true })) }) },
  {
    weight: 3,
    arbitrary: fc.record({
      t: fc.constant('retain' as const),
      ms: fc.oneof(fc.constant(-1), fc.constant(0), fc.nat(40_000)),
      bytes: fc.oneof(fc.constant(-1), fc.constant(0), fc.nat(3000)),
      ahead: fc.nat(60_000),
    }),
  },
  { weight: 1, arbitrary: fc.record({ t: fc.constant('restart' as const), clean: fc.boolean() }) },
);

/** Retention deletes only whole closed segments below the HWM that are past a limit; the log start only moves forward. */
async function runRetention(flush: 'always' | 'os', ops: RetOp[]): Promise<void> {
  const dir = join(root, `ret-${runs++}`);
  const opts: Partial<LogOptions> = { flush, segmentBytes: 500, segmentMs: 2 ** 40, indexIntervalBytes: 64, checkpointHwmOnTimer: false };
  const recs: Rec[] = [];
  let hwm = 0;
  let step = 0;
  let log = await PartitionLog.open(dir, opts);
  opened.add(log);
  try {
    for (const [n, op] of ops.entries()) {
      const what = `step ${n} ${JSON.stringify(op)}`;
      step++;
      const startBefore = log.logStartOffset;
      if (op.t === 'append') {
        const ts = T + step * 1000 + op.age;
        const input = Array.from({ length: op.n }, (_, i) => ({ key: Buffer.from(`k${i}`), value: Buffer.from(`v${recs.length + i}-${'y'.repeat(op.pad)}`), timestamp: ts }));
        const res = await log.append(input);
        expect(res.baseOffset, `${what}: base offset`).toBe(recs.length);
        for (const i of input) recs.push({ offset: recs.length, key: i.key.toString(), value: i.value.toString(), ts });
      } else if (op.t === 'hwm') {
        hwm += Math.floor(op.frac * (recs.length - hwm));
        log.setHighWatermark(hwm);
      } else if (op.t === 'retain') {
        const now = T + step * 1000 + op.ahead;
        log.setRetention({ retentionMs: op.ms, retentionBytes: op.bytes });
        const before = log.segmentInfos();
        const total = log.sizeBytes;
        const res = await log.applyRetention(now);
        const after = log.segmentInfos();
        // Nothing here is old enough to roll (segmentMs is decades): the segments deleted are a prefix of the closed ones.
        expect(after[after.length - 1], `${what}: active segment kept`).toEqual(before[before.length - 1]);
        const gone = before.filter((s) => s.baseOffset < log.logStartOffset);
        expect(gone.length, `${what}: deleted count`).toBe(res.deletedSegments);
        let left = total;
        for (const s of gone) {
          expect(s.nextOffset, `${what}: segment ${s.baseOffset} deleted with records at or past the HWM ${hwm}`).toBeLessThanOrEqual(hwm);
          const expired = op.ms >= 0 && s.maxTimestamp < now - op.ms;
          const oversized = op.bytes >= 0 && left > op.bytes;
          expect(expired || oversized, `${what}: segment ${s.baseOffset} deleted within both limits`).toBe(true);
          left -= s.sizeBytes;
        }
      } else {
        if (op.clean) await log.close();
        else await simulateCrash(log);
        opened.delete(log);
        log = await PartitionLog.open(dir, opts);
        opened.add(log);
        log.setHighWatermark(hwm);
      }
      expect(log.logStartOffset, `${what}: log start moved back`).toBeGreaterThanOrEqual(startBefore);
      expect(log.logStartOffset, `${what}: log start past the HWM`).toBeLessThanOrEqual(Math.max(hwm, 0));
      expect(log.logEndOffset, `${what}: log end`).toBe(recs.length);
      expect(log.highWatermark, `${what}: HWM`).toBe(hwm);
      const got = await readFrom(log, log.logStartOffset, 9);
      expect(got, `${what}: records from the log start`).toEqual(recs.slice(log.logStartOffset));
    }
  } finally {
    await log.close().catch(() => {});
    opened.delete(log);
  }
}

describe('retention properties', () => {
  it('deletes only closed segments wholly below the HWM and past a limit, and never moves the log start back', async () => {
    await fc.assert(
      fc.asyncProperty(fc.constantFrom('always' as const, 'os' as const), fc.array(retOpArb, { minLength: 10, maxLength: 80, size: 'max' }), runRetention),
      { numRuns: RUNS, verbose: 1, endOnFailure: process.env.CLEANER_NO_SHRINK === '1', ...(process.env.CLEANER_SEED ? { seed: Number(process.env.CLEANER_SEED), path: process.env.CLEANER_PATH } : {}) },
    );
  }, TIMEOUT);
});

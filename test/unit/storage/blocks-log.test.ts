/**
 * A partition log written with storedLayout 'blocks' (append blocks, docs/architecture.md "Stored batches"):
 * every read path the standalone broker uses gives what the per-record layout gives for the same appends,
 * before and after a restart; recovery cuts a damaged last block whole; what does not read blocks yet
 * refuses them.
 */
import { readdir, readFile, unlink, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import fc from 'fast-check';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { type BatchRecord, encodeBatch, type ScannedBatch, scanBatch } from 'tributary-protocol/batch.js';
import type { RecordInput } from 'tributary-protocol/record.js';
import { Partition } from 'tributary-broker/partition/partition.js';
import { PRODUCER_SNAPSHOT_FILE } from 'tributary-broker/partition/partition-snapshots.js';
import { CLEAN_SHUTDOWN_FILE, type LogOptions, PartitionLog } from 'tributary-broker/storage/partition-log.js';
import { simulateCrash } from 'tributary-broker/storage/log-test-hooks.js';
import { removeDir, tempDir } from '../../helpers/util.js';
import { countUnits } from '../../helpers/stored-units.js';

let dir: string;
beforeEach(async () => {
  dir = await tempDir('trib-blocks-');
});
afterEach(async () => {
  vi.restoreAllMocks();
  await removeDir(dir);
});

const NOW = 1_700_000_000_000;
const bytes = (max: number) => fc.uint8Array({ maxLength: max }).map((a) => Buffer.from(a));

type Frame = {
  records: Array<Omit<BatchRecord, 'offset' | 'sequence' | 'attributes' | 'producerId' | 'epoch'>>;
  ext: boolean;
  kind: 'plain' | 'pid' | 'idem' | 'objects';
};

const wireRecordArb = fc.record({
  key: fc.option(bytes(20), { nil: null }),
  value: fc.oneof(bytes(10), bytes(120)),
  timestamp: fc.oneof(fc.constant(0), fc.integer({ min: 1, max: 2 ** 45 })),
  headers: fc.array(fc.record({ key: fc.string({ maxLength: 5 }), value: bytes(20) }), { maxLength: 3 }),
});

/** plain, idem: blockable (with or without extensions); pid (a plain frame whose records carry a producer id) and objects (append()) are not. */
const frameArb: fc.Arbitrary<Frame> = fc.record({
  records: fc.array(wireRecordArb, { minLength: 1, maxLength: 7 }),
  ext: fc.oneof(fc.constant(true), fc.constant(true), fc.constant(false)),
  kind: fc.constantFrom('plain', 'plain', 'idem', 'pid', 'objects'),
});

/** Appends `frames` to `log` (queued together, so several share a write); `seq` numbers each producer's idempotent batches. */
function appendAll(log: PartitionLog, frames: Frame[]): Promise<unknown[]> {
  let seq = 0;
  return Promise.all(
    frames.map((f) => {
      if (f.kind === 'objects') {
        const recs: RecordInput[] = f.records.map((r) => ({ key: r.key, value: r.value, headers: r.headers, timestamp: r.timestamp }));
        return log.append(recs);
      }
      const idem = f.kind === 'idem';
      const records = f.records.map((r, i) => ({
        ...r,
        offset: 0,
        sequence: 0,
        attributes: 0,
        producerId: f.kind === 'plain' ? '' : 'P7',
        epoch: idem ? 3 : 0,
        ...(idem ? { sequence: seq + i } : {}),
      }));
      const first = seq;
      if (idem) seq += records.length;
      const body = encodeBatch(
        {
          topic: 't',
          partition: 0,
          acks: '1',
          idempotent: idem,
          firstSequence: idem ? first : 0,
          lastSequence: idem ? first + records.length - 1 : 0,
          records,
        },
        { extensions: f.ext },
      );
      const scan = scanBatch(body, { extensions: f.ext, request: true });
      return log.appendWire(scan, undefined, idem ? first : -1);
    }),
  );
}


const EXT = { topic: 't', partition: 0, extensions: true, skipControl: false };
const NOEXT = { ...EXT, extensions: false };
/** The Kafka listener's Fetch: one RecordBatch v2. */
const V2 = { ...EXT, format: 'record_batch_v2' as const };

/** Every read of every offset: read() and the wire reads, with a few limits; the wire read as consume-commands.ts takes it. */
async function reads(log: PartitionLog): Promise<unknown[]> {
  const out: unknown[] = [];
  const leo = log.logEndOffset;
  for (let o = 0; o < leo; o++) {
    for (const [maxRecords, maxBytes] of [
      [1000, 1 << 20],
      [3, 1 << 20],
      [1000, 300],
      [1, 1],
    ] as const) {
      const opts = { maxRecords, maxBytes };
      out.push(await log.read(o, opts));
      for (const w of [EXT, NOEXT, V2]) {
        const cached = log.readWire(o, opts, w);
        const wire = cached ?? (await log.readWireFromDisk(o, opts, w));
        out.push(wire && { frame: wire.frame.toString('hex'), count: wire.count, valueBytes: wire.valueBytes, nextOffset: wire.nextOffset });
      }
    }
  }
  for (const ts of [0, NOW - 1, NOW, NOW + 1, 2 ** 44, 2 ** 46]) out.push(await log.offsetForTimestamp(ts));
  return out;
}

describe("storedLayout 'blocks'", () => {
  it('refuses an unknown layout', async () => {
    await expect(PartitionLog.open(dir, { storedLayout: 'batches' as LogOptions['storedLayout'] })).rejects.toMatchObject({ code: 'invalid_parameter' });
  });

  it('reads (LogRecords and wire, tail cache and disk, every offset) give what the per-record layout gives, before and after a restart', async () => {
    vi.spyOn(Date, 'now').mockReturnValue(NOW);
    let blocksSeen = 0;
    let recordsSeen = 0;
    await fc.assert(
      fc.asyncProperty(
        fc.array(fc.array(frameArb, { minLength: 1, maxLength: 4 }), { minLength: 1, maxLength: 4 }),
        fc.constantFrom(0, 600, 1 << 20),
        fc.constantFrom(400, 2000, 1 << 20),
        async (writes, tailCacheBytes, segmentBytes) => {
          const opts: Partial<LogOptions> = { flush: 'os', indexIntervalBytes: 64, tailCacheBytes, segmentBytes };
          const r = await tempDir('r-', dir);
          const b = await tempDir('b-', dir);
          let lr = await PartitionLog.open(r, opts);
          let lb = await PartitionLog.open(b, { ...opts, storedLayout: 'blocks' });
          try {
            for (const frames of writes) {
              const [ra, rb] = await Promise.all([appendAll(lr, frames), appendAll(lb, frames)]);
              const strip = (xs: unknown[]) => xs.map((x) => ({ ...(x as object), writtenAt: undefined }));
              expect(strip(rb)).toEqual(strip(ra));
            }
            const expected = await reads(lr);
            expect(await reads(lb)).toEqual(expected);
            const [recs, blocks] = await countUnits(b);
            blocksSeen += blocks;
            recordsSeen += recs;
            // A clean restart, then one after a crash (the last segment scanned, its index rebuilt).
            await lb.close();
            lb = await PartitionLog.open(b, { ...opts, storedLayout: 'blocks' });
            expect(await reads(lb)).toEqual(expected);
            await simulateCrash(lb);
            for (const f of await readdir(b)) if (f.endsWith('.index')) await unlink(join(b, f));
            lb = await PartitionLog.open(b, { ...opts, storedLayout: 'blocks' });
            expect(await reads(lb)).toEqual(expected);
            // Appends go on after the restart, in both layouts alike.
            await Promise.all([appendAll(lr, writes[0]), appendAll(lb, writes[0])]);
            expect(await reads(lb)).toEqual(await reads(lr));
          } finally {
            await lr.close();
            await lb.close();
          }
          lr = lb = undefined as unknown as PartitionLog;
        },
      ),
      { numRuns: 25 },
    );
    // The property met both layouts in the blocks logs (mixed segments included).
    expect(blocksSeen).toBeGreaterThan(20);
    expect(recordsSeen).toBeGreaterThan(20);
  }, 300_000);

  it('the tail cache holds blocks: wire reads of them are served from it, as the per-record layout gives them', async () => {
    vi.spyOn(Date, 'now').mockReturnValue(NOW);
    const frames: Frame[] = [
      {
        kind: 'plain',
        ext: true,
        records: [{ key: Buffer.from('a'), value: Buffer.from('x'), timestamp: 0, headers: [{ key: 'h', value: Buffer.from('1') }] }],
      },
      { kind: 'objects', ext: true, records: [{ key: null, value: Buffer.from('y'), timestamp: 7, headers: [] }] },
      {
        kind: 'idem',
        ext: true,
        records: [
          { key: null, value: Buffer.from('z1'), timestamp: 9, headers: [] },
          { key: Buffer.from('k'), value: Buffer.from('z2'), timestamp: 0, headers: [] },
        ],
      },
    ];
    const lr = await PartitionLog.open(await tempDir('r-', dir), { flush: 'os' });
    const lb = await PartitionLog.open(await tempDir('b-', dir), { flush: 'os', storedLayout: 'blocks' });
    try {
      for (const f of frames) {
        await appendAll(lr, [f]);
        await appendAll(lb, [f]);
      }
      for (let o = 0; o < 4; o++) {
        for (const w of [EXT, NOEXT, V2]) {
          const got = lb.readWire(o, { maxRecords: 10, maxBytes: 1 << 20 }, w);
          expect(got, `offset ${o}`).not.toBeNull();
          expect(got?.frame).toEqual(lr.readWire(o, { maxRecords: 10, maxBytes: 1 << 20 }, w)?.frame);
        }
        expect(await lb.read(o, { maxRecords: 10, maxBytes: 1 << 20 })).toEqual(await lr.read(o, { maxRecords: 10, maxBytes: 1 << 20 }));
      }
      expect(await countUnits(lb.dir)).toEqual([1, 2]);
    } finally {
      await lr.close();
      await lb.close();
    }
  });

  it('a restart rebuilds the idempotent producer state from blocks: a resent batch is answered with its original offsets', async () => {
    const opts: Partial<LogOptions> = { flush: 'os', segmentBytes: 600, storedLayout: 'blocks' };
    const frame = (seq: number, n: number): ScannedBatch => {
      const records = Array.from({ length: n }, (_, i) => ({
        offset: 0,
        sequence: seq + i,
        producerId: '7',
        key: null,
        epoch: 2,
        value: Buffer.from(`v${seq + i}-${'x'.repeat(60)}`),
        timestamp: 0,
        attributes: 0,
        headers: [],
      }));
      const body = encodeBatch(
        { topic: 't', partition: 0, acks: '1', idempotent: true, firstSequence: seq, lastSequence: seq + n - 1, records },
        { extensions: true },
      );
      return scanBatch(body, { extensions: true, request: true });
    };
    const batch = (seq: number, n: number) => ({ producerId: '7', epoch: 2, firstSequence: seq, lastSequence: seq + n - 1 });
    let p = new Partition('t', 0, await PartitionLog.open(dir, opts));
    try {
      await p.whenProducerStateReady();
      expect(await p.appendIdempotent(frame(0, 3), batch(0, 3))).toMatchObject({ baseOffset: 0, lastOffset: 2, duplicate: false });
      await p.append([{ key: null, value: Buffer.from('plain') }]);
      expect(await p.appendIdempotent(frame(3, 4), batch(3, 4))).toMatchObject({ baseOffset: 4, lastOffset: 7, duplicate: false });
      expect((await countUnits(dir))[1]).toBe(2);
      await p.close();
      // Without its snapshot the state comes from the log: the blocks' producer id, epoch and sequences.
      await unlink(join(dir, PRODUCER_SNAPSHOT_FILE));
      p = new Partition('t', 0, await PartitionLog.open(dir, opts));
      await p.whenProducerStateReady();
      expect(await p.appendIdempotent(frame(3, 4), batch(3, 4))).toMatchObject({ baseOffset: 4, lastOffset: 7, duplicate: true });
      expect(await p.appendIdempotent(frame(7, 1), batch(7, 1))).toMatchObject({ baseOffset: 8, lastOffset: 8, duplicate: false });
      await expect(p.appendIdempotent(frame(9, 1), batch(9, 1))).rejects.toMatchObject({ code: 'out_of_order_sequence' });
      const read = await p.log.read(0, { maxRecords: 100, maxBytes: 1 << 20 });
      expect(read.map((r) => [r.offset, r.producerId, r.epoch, r.sequence])).toEqual([
        [0, '7', 2, 0],
        [1, '7', 2, 1],
        [2, '7', 2, 2],
        [3, '', -1, -1],
        [4, '7', 2, 3],
        [5, '7', 2, 4],
        [6, '7', 2, 5],
        [7, '7', 2, 6],
        [8, '7', 2, 7],
      ]);
    } finally {
      await p.close();
    }
  });
});

describe("recovery of a log written with storedLayout 'blocks'", () => {
  const OPTS: Partial<LogOptions> = { flush: 'os', segmentBytes: 900, indexIntervalBytes: 64, tailCacheBytes: 0, storedLayout: 'blocks' };
  const value = (o: number) => `v${o}-${'z'.repeat((o * 7) % 23)}`;
  function plainFrame(from: number, n: number): ScannedBatch {
    const records = Array.from({ length: n }, (_, i) => ({
      offset: 0,
      sequence: 0,
      producerId: '',
      key: (from + i) % 3 === 0 ? null : Buffer.from(`k${from + i}`),
      epoch: 0,
      value: Buffer.from(value(from + i)),
      timestamp: 0,
      attributes: 0,
      headers: (from + i) % 4 === 0 ? [{ key: 'h', value: Buffer.from('x') }] : [],
    }));
    const body = encodeBatch({ topic: 't', partition: 0, acks: '1', idempotent: false, firstSequence: 0, lastSequence: 0, records }, { extensions: true });
    return scanBatch(body, { extensions: true, request: true });
  }
  async function checkLog(log: PartitionLog, count: number, what: string): Promise<void> {
    expect(log.logEndOffset, what).toBe(count);
    const got = count ? await log.read(0, { maxRecords: 1000, maxBytes: 1 << 20 }) : [];
    expect(
      got.map((r) => r.value.toString()),
      what,
    ).toEqual(Array.from({ length: count }, (_, o) => value(o)));
  }

  it('restores every whole block before a cut or a flipped byte in the last block (cut whole); a flip in the block before refuses', async () => {
    let log = await PartitionLog.open(dir, OPTS);
    let next = 0;
    const sizes = [3, 1, 4, 2, 5, 3, 2, 4, 1, 3, 2, 2, 3];
    for (const n of sizes) {
      expect((await log.appendWire(plainFrame(next, n))).baseOffset).toBe(next);
      next += n;
    }
    // Larger segments from here, so the last one holds the units below: a per-record append between
    // blocks, then the two last blocks.
    await log.close();
    log = await PartitionLog.open(dir, { ...OPTS, segmentBytes: 1 << 20 });
    await log.append([{ key: null, value: Buffer.from(value(next)) }]);
    next++;
    for (const n of [3, 4]) {
      await log.appendWire(plainFrame(next, n));
      next += n;
    }
    const segs = log.segmentInfos();
    expect(segs.length).toBeGreaterThan(2);
    const active = segs[segs.length - 1];
    // Closed (its index vouches for the synced file), then as if the process had died.
    await log.close();
    await unlink(join(dir, CLEAN_SHUTDOWN_FILE));
    const logPath = join(dir, `${String(active.baseOffset).padStart(20, '0')}.log`);
    const indexPath = logPath.replace('.log', '.index');
    const original = await readFile(logPath);
    const originalIndex = await readFile(indexPath);
    // Each unit's end and the offset after it.
    const ends: Array<{ end: number; next: number }> = [];
    for (let p = 0, o = active.baseOffset; p < original.length; ) {
      const w = original.readUInt32BE(p);
      const block = w >= 0x80000000;
      p += 4 + (block ? w - 0x80000000 : w);
      o += block ? original.readUInt32BE(p - (4 + w - 0x80000000) + 18) : 1;
      ends.push({ end: p, next: o });
    }
    expect(ends.at(-1)?.next).toBe(next);
    const k = ends.length;
    expect(k).toBeGreaterThanOrEqual(3);
    const secondLastStart = ends[k - 3]!.end;
    const restore = async (b: Buffer) => {
      await writeFile(logPath, b);
      await writeFile(indexPath, originalIndex);
      await unlink(join(dir, CLEAN_SHUTDOWN_FILE)).catch(() => {});
    };
    const validBefore = (pos: number) => {
      const whole = ends.filter((e) => e.end <= pos);
      return whole.length ? whole.at(-1)!.next : active.baseOffset;
    };
    const verify = async (pos: number, what: string) => {
      const expected = validBefore(pos);
      const l = await PartitionLog.open(dir, OPTS);
      try {
        const kept = ends.filter((e) => e.end <= pos).at(-1)?.end ?? 0;
        expect((await readFile(logPath)).length, what).toBe(kept);
        await checkLog(l, expected, what);
        expect((await l.appendWire(plainFrame(expected, 2))).baseOffset, what).toBe(expected);
        await checkLog(l, expected + 2, what);
      } finally {
        await simulateCrash(l);
      }
    };
    let cases = 0;
    for (let pos = secondLastStart; pos < original.length; pos++) {
      const flipped = Buffer.from(original);
      flipped[pos]! ^= 0xff;
      await restore(flipped);
      if (pos < ends[k - 2]!.end) {
        // A valid block follows the damaged one: not a torn tail, refused with the file kept.
        const err = await PartitionLog.open(dir, OPTS).then(
          (l) => simulateCrash(l).then(() => null),
          (e: Error & { code?: string }) => e,
        );
        expect(err?.code, `flip at ${pos}`).toBe('storage_error');
        expect(err?.message, `flip at ${pos}`).toContain(`${logPath} at byte ${secondLastStart}`);
        expect(await readFile(logPath)).toEqual(flipped);
      } else {
        await verify(pos, `flip at ${pos}`);
      }
      await restore(original.subarray(0, pos));
      await verify(pos, `cut at ${pos}`);
      cases += 2;
    }
    expect(cases).toBe(2 * (original.length - secondLastStart));
  }, 300_000);
});

/** A plain produce frame with extensions of `n` records of values `value(i)`, scanned as the broker does. */
function plainFrame(n: number, value: (i: number) => Buffer) {
  const records = Array.from({ length: n }, (_, i) => ({ offset: 0, sequence: 0, producerId: '', key: null, epoch: 0, value: value(i), timestamp: 5, attributes: 0, headers: [] }));
  const body = encodeBatch({ topic: 't', partition: 0, acks: '1', idempotent: false, firstSequence: 0, lastSequence: 0, records }, { extensions: true });
  return scanBatch(body, { extensions: true, request: true });
}

describe('a truncation at a block boundary', () => {
  it('keeps the blocks before it, and appends go on after it', async () => {
    // A segment per block (inside a block: blocks-truncate.test.ts).
    const log = await PartitionLog.open(dir, { flush: 'os', storedLayout: 'blocks', segmentBytes: 200 });
    try {
      const frame = (n: number) => plainFrame(n, (i) => Buffer.from(`v${i}`));
      await log.appendWire(frame(3));
      await log.appendWire(frame(3));
      await log.truncateTo(3);
      expect(log.logEndOffset).toBe(3);
      expect((await log.appendWire(frame(2))).baseOffset).toBe(3);
      expect((await log.read(0, { maxRecords: 100, maxBytes: 1 << 20 })).map((r) => r.offset)).toEqual([0, 1, 2, 3, 4]);
    } finally {
      await log.close();
    }
  });
});

describe('maxBlockBytes', () => {
  it('keeps an append larger than it in the per-record layout, and reads it back alike', async () => {
    const log = await PartitionLog.open(dir, { flush: 'os', storedLayout: 'blocks', maxBlockBytes: 300 });
    try {
      const frame = (n: number) => plainFrame(n, (i) => Buffer.alloc(40, i));
      // 2 records: a block of 38 + 2 x 83 bytes; 5: 38 + 5 x 83, past 300.
      await log.appendWire(frame(2));
      await log.appendWire(frame(5));
      expect(await countUnits(dir)).toEqual([5, 1]);
      const values = (await log.read(0, { maxRecords: 100, maxBytes: 1 << 20 })).map((r) => r.value[0]);
      expect(values).toEqual([0, 1, 0, 1, 2, 3, 4]);
    } finally {
      await log.close();
    }
  });
});

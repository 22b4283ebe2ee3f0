/**
 * Append blocks stamped in the produce frame's own buffer (append-block.ts stampBlockInPlace, log-writer.ts
 * writeInPlace; docs/architecture.md "Stored batches"): the block on disk and every read must be exactly what
 * the copying path (writeBlockFromWire into the write arena) gives for the same frames, before and after a
 * crash; and only frames that own their buffer are stamped in place (a small one only when written alone).
 */
import { createHash } from 'node:crypto';
import { readdir, readFile } from 'node:fs/promises';
import { join } from 'node:path';
import fc from 'fast-check';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { type BatchRecord, encodeBatch, type ScannedBatch, scanBatch } from 'tributary-protocol/batch.js';
import {
  BLOCK_HEADER_BYTES,
  blockSize,
  IN_PLACE_ALONE_BYTES,
  IN_PLACE_MIN_BYTES,
  inPlaceBlockable,
  stampBlockInPlace,
  writeBlockFromWire,
} from 'tributary-broker/storage/append-block.js';
import { type LogOptions, PartitionLog } from 'tributary-broker/storage/partition-log.js';
import { simulateCrash } from 'tributary-broker/storage/log-test-hooks.js';
import { unwritten } from 'tributary-broker/storage/segment.js';
import { removeDir, tempDir } from '../../helpers/util.js';
import { countUnits } from '../../helpers/stored-units.js';

let dir: string;
beforeEach(async () => {
  dir = await tempDir('trib-inplace-');
});
afterEach(async () => {
  vi.restoreAllMocks();
  await removeDir(dir);
});

const NOW = 1_700_000_000_000;

interface Frame {
  idem: boolean;
  firstSequence: number;
  records: Array<Pick<BatchRecord, 'key' | 'value' | 'timestamp' | 'headers'>>;
}

const frameArb = (minValue: number, maxValue: number): fc.Arbitrary<Frame> =>
  fc.record({
    idem: fc.boolean(),
    firstSequence: fc.integer({ min: 0, max: 2 ** 31 - 100 }),
    records: fc.array(
      fc.record({
        key: fc.option(fc.uint8Array({ maxLength: 8 }).map((a) => Buffer.from(a)), { nil: null }),
        value: fc.integer({ min: minValue, max: maxValue }).map((n) => Buffer.alloc(n, n & 0xff)),
        timestamp: fc.oneof(fc.constant(0), fc.integer({ min: 1, max: 2 ** 45 })),
        headers: fc.array(fc.record({ key: fc.string({ maxLength: 4 }), value: fc.uint8Array({ maxLength: 6 }).map((a) => Buffer.from(a)) }), { maxLength: 2 }),
      }),
      { minLength: 1, maxLength: 6 },
    ),
  });

/** The frame body as the client sends it (record_extensions_v1), in a buffer of its own. */
function body(f: Frame): Buffer {
  const records: BatchRecord[] = f.records.map((r, i) => ({
    ...r,
    offset: 0,
    sequence: f.idem ? f.firstSequence + i : 0,
    producerId: f.idem ? 'P7' : '',
    epoch: f.idem ? 2 : 0,
    attributes: 0,
  }));
  const n = records.length;
  const frame = encodeBatch(
    { topic: 't', partition: 0, acks: '1', idempotent: f.idem, firstSequence: f.idem ? f.firstSequence : 0, lastSequence: f.idem ? f.firstSequence + n - 1 : 0, records },
    { extensions: true },
  );
  const own = Buffer.allocUnsafeSlow(frame.length);
  frame.copy(own);
  return own;
}

const scan = (b: Buffer): ScannedBatch => scanBatch(b, { extensions: true, request: true });

/** The same bytes, cut out of a larger buffer: not stamped in place (the cache would pin the rest). */
function sliced(b: Buffer): Buffer {
  const big = Buffer.alloc(b.length + 8192);
  b.copy(big, 100);
  return big.subarray(100, 100 + b.length);
}

describe('stampBlockInPlace', () => {
  it('gives the header and records writeBlockFromWire writes, stamping the frame where it lies', () => {
    fc.assert(
      fc.property(frameArb(0, 300), fc.integer({ min: 0, max: 2 ** 50 }), fc.integer({ min: 1, max: 2 ** 44 }), (f, baseOffset, now) => {
        const stamp = { baseOffset, now, flags: 0, firstSequence: f.idem ? f.firstSequence : -1 };
        const copied = scan(body(f));
        const expected = Buffer.alloc(blockSize(copied));
        writeBlockFromWire(copied, expected, 0, stamp);
        const own = scan(body(f));
        const header = Buffer.alloc(BLOCK_HEADER_BYTES + 5);
        const records = stampBlockInPlace(own, header, 5, stamp);
        // The records are a view of the frame's buffer, not a copy.
        expect(records.buffer).toBe(own.body.buffer);
        expect(Buffer.concat([header.subarray(5), records])).toEqual(expected);
      }),
      { numRuns: 200 },
    );
  });

  it('is taken for large frames with extensions that own their buffer only', () => {
    const big: Frame = { idem: false, firstSequence: 0, records: [{ key: null, value: Buffer.alloc(IN_PLACE_MIN_BYTES), timestamp: 0, headers: [] }] };
    expect(inPlaceBlockable(scan(body(big)))).toBe(true);
    expect(inPlaceBlockable(scan(sliced(body(big))))).toBe(false);
    const small: Frame = { ...big, records: [{ ...big.records[0]!, value: Buffer.alloc(IN_PLACE_MIN_BYTES - 200) }] };
    expect(inPlaceBlockable(scan(body(small)))).toBe(false);
    const plain = encodeBatch(
      { topic: 't', partition: 0, acks: '1', idempotent: false, firstSequence: 0, lastSequence: 0, records: [{ offset: 0, sequence: 0, producerId: '', key: null, epoch: 0, value: Buffer.alloc(IN_PLACE_MIN_BYTES * 2), timestamp: 0, attributes: 0, headers: [] }] },
      { extensions: false },
    );
    expect(inPlaceBlockable(scanBatch(plain, { extensions: false, request: true }))).toBe(false);
  });
});

describe('unwritten', () => {
  it('is what a short writev left of the pieces', () => {
    fc.assert(
      fc.property(fc.array(fc.uint8Array({ maxLength: 20 }), { minLength: 1, maxLength: 5 }), fc.nat(), (parts, k) => {
        const pieces = parts.map((p) => Buffer.from(p));
        const all = Buffer.concat(pieces);
        const n = k % (all.length + 1);
        expect(Buffer.concat(unwritten(pieces, n) as Buffer[])).toEqual(all.subarray(n));
      }),
    );
  });
});

async function logBytes(d: string): Promise<Buffer> {
  const files = (await readdir(d)).filter((n) => n.endsWith('.log')).sort();
  return Buffer.concat(await Promise.all(files.map((n) => readFile(join(d, n)))));
}

const EXT = { topic: 't', partition: 0, extensions: true, skipControl: false };
const NOEXT = { ...EXT, extensions: false };
const V2 = { ...EXT, format: 'record_batch_v2' as const };

const digest = (b: Buffer) => createHash('sha1').update(b).digest('hex');

async function reads(log: PartitionLog, where: 'cache' | 'disk'): Promise<unknown[]> {
  const out: unknown[] = [];
  for (let o = 0; o < log.logEndOffset; o++) {
    for (const opts of [
      { maxRecords: 1000, maxBytes: 1 << 24 },
      { maxRecords: 2, maxBytes: 1 << 24 },
      { maxRecords: 1000, maxBytes: 40_000 },
    ]) {
      for (const w of [EXT, NOEXT, V2]) {
        const wire = where === 'cache' ? log.readWire(o, opts, w) : await log.readWireFromDisk(o, opts, w);
        out.push(wire && { frame: digest(wire.frame), count: wire.count, nextOffset: wire.nextOffset });
      }
      const r = await log.read(o, opts);
      out.push(r.map((x) => ({ ...x, value: digest(x.value) })));
    }
  }
  return out;
}

describe('a log of blocks stamped in place', () => {
  it('holds and serves, from the tail cache and the files, before and after a crash, what the copying path gives', async () => {
    vi.spyOn(Date, 'now').mockReturnValue(NOW);
    let inPlace = 0;
    await fc.assert(
      fc.asyncProperty(fc.array(fc.array(frameArb(3000, 12_000), { minLength: 1, maxLength: 3 }), { minLength: 1, maxLength: 3 }), async (writes) => {
        const opts: Partial<LogOptions> = { flush: 'os', indexIntervalBytes: 4096, segmentBytes: 150_000, storedLayout: 'blocks', tailCacheBytes: 1 << 24 };
        const a = await tempDir('own-', dir);
        const c = await tempDir('copy-', dir);
        let la = await PartitionLog.open(a, opts);
        let lc = await PartitionLog.open(c, opts);
        try {
          for (const frames of writes) {
            const owned = frames.map((f) => scan(body(f)));
            const copies = frames.map((f) => scan(sliced(body(f))));
            const append = (log: PartitionLog, bs: ScannedBatch[]) => Promise.all(bs.map((b, i) => log.appendWire(b, undefined, frames[i]!.idem ? frames[i]!.firstSequence : -1)));
            const [ra, rc] = await Promise.all([append(la, owned), append(lc, copies)]);
            const strip = (xs: unknown[]) => xs.map((x) => ({ ...(x as object), writtenAt: undefined }));
            expect(strip(ra)).toEqual(strip(rc));
            owned.forEach((b, i) => {
              // Stamped in place: the frame's first record now carries its offset (the copy's frame does not).
              const stamped = b.body.readBigUInt64BE(b.starts[0]!);
              if (!inPlaceBlockable(b)) return;
              const base = BigInt((ra[i] as { baseOffset: number }).baseOffset);
              // One under IN_PLACE_ALONE_BYTES may join the other appends' write (log-write-queue.ts
              // nextGroup), copied; alone or larger it is stamped in place.
              if (frames.length === 1 || blockSize(b) >= IN_PLACE_ALONE_BYTES) expect(stamped).toBe(base);
              else if (stamped !== base) expect(stamped).toBe(0n);
              if (stamped === base) inPlace++;
            });
            for (const b of copies) expect(b.body.readBigUInt64BE(b.starts[0]!)).toBe(0n);
          }
          expect(await logBytes(a)).toEqual(await logBytes(c));
          const expected = await reads(lc, 'disk');
          expect(await reads(la, 'cache')).toEqual(await reads(lc, 'cache'));
          expect(await reads(la, 'disk')).toEqual(expected);
          await simulateCrash(la);
          la = await PartitionLog.open(a, opts);
          expect(await reads(la, 'disk')).toEqual(expected);
          expect((await countUnits(a))[1]).toBe(writes.flat().length);
        } finally {
          await la.close();
          await lc.close();
        }
        la = lc = undefined as unknown as PartitionLog;
      }),
      { numRuns: 10 },
    );
    expect(inPlace).toBeGreaterThan(5);
  }, 300_000);
});

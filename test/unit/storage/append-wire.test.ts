import { readdir, readFile } from 'node:fs/promises';
import { join } from 'node:path';
import fc from 'fast-check';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { type Batch, type BatchRecord, decodeBatch, encodeBatch, scanBatch } from 'tributary-protocol/batch.js';
import type { RecordHeader } from 'tributary-protocol/record.js';
import { PartitionLog } from 'tributary-broker/storage/partition-log.js';
import { removeDir, tempDir } from '../../helpers/util.js';

let dir: string;
beforeEach(async () => {
  dir = await tempDir('trib-appendwire-');
});
afterEach(async () => {
  vi.restoreAllMocks();
  await removeDir(dir);
});

const bytes = (max: number) => fc.uint8Array({ maxLength: max }).map((a) => Buffer.from(a));
const safeNat = fc.integer({ min: 0, max: Number.MAX_SAFE_INTEGER });

const recordArb: fc.Arbitrary<BatchRecord> = fc.record({
  offset: safeNat,
  sequence: safeNat,
  producerId: fc.string({ maxLength: 8 }),
  key: fc.option(bytes(30), { nil: null }),
  epoch: fc.integer({ min: -5, max: 2 ** 40 }),
  value: fc.oneof(bytes(10), bytes(150)),
  timestamp: fc.oneof(fc.constant(0), fc.integer({ min: -(2 ** 40), max: 2 ** 45 })),
  attributes: fc.integer({ min: 0, max: 255 }),
  headers: fc.array(fc.record({ key: fc.string({ unit: 'grapheme', maxLength: 5 }), value: bytes(20) }), { maxLength: 3 }),
});

const NO_HEADERS: RecordHeader[] = [];

/** The records produceBatch hands to append() for a decoded batch. */
function asProduced(b: Batch) {
  return b.records.map((r) => ({
    ...r,
    timestamp: Math.max(r.timestamp, 0),
    producerId: '',
    epoch: -1,
    sequence: -1,
    attributes: 0,
    headers: r.headers.length === 0 ? NO_HEADERS : r.headers,
  }));
}

async function logBytes(d: string): Promise<Buffer> {
  const files = (await readdir(d)).filter((f) => f.endsWith('.log')).sort();
  return Buffer.concat(await Promise.all(files.map((f) => readFile(join(d, f)))));
}

describe('PartitionLog.appendWire', () => {
  it('stores the same bytes as append() of the records produceBatch decodes', async () => {
    vi.spyOn(Date, 'now').mockReturnValue(1_700_000_000_000);
    await fc.assert(
      fc.asyncProperty(fc.array(fc.array(recordArb, { minLength: 1, maxLength: 6 }), { minLength: 1, maxLength: 5 }), fc.boolean(), async (batches, ext) => {
        const a = await tempDir('a-', dir);
        const w = await tempDir('w-', dir);
        const la = await PartitionLog.open(a, { flush: 'os' });
        const lw = await PartitionLog.open(w, { flush: 'os' });
        try {
          const ra: unknown[] = [];
          const rw: unknown[] = [];
          for (const records of batches) {
            const body = encodeBatch(
              { topic: 't', partition: 0, acks: '1', idempotent: false, firstSequence: 0, lastSequence: 0, records },
              { extensions: ext },
            );
            // As produceBatch scans: a request, so every header key is valid UTF-8 (encodeBatch writes it so).
            const scan = scanBatch(body, { extensions: ext, request: true });
            // Queue both before awaiting so several batches share one write.
            ra.push(la.append(asProduced(decodeBatch(body, { extensions: ext }))));
            rw.push(lw.appendWire(scan));
          }
          // The same offsets and timestamps (writtenAt, when each write landed, is a time and differs).
          const results = async (xs: unknown[]) => (await Promise.all(xs)).map((r) => ({ ...(r as object), writtenAt: undefined }));
          expect(await results(rw)).toEqual(await results(ra));
          await la.flush();
          await lw.flush();
          expect(Buffer.compare(await logBytes(w), await logBytes(a))).toBe(0);
          expect(lw.logEndOffset).toBe(la.logEndOffset);
          // And the tail cache serves the same records.
          const opts = { maxRecords: 1000, maxBytes: 1 << 20 };
          expect(await lw.read(0, opts)).toEqual(await la.read(0, opts));
        } finally {
          await la.close();
          await lw.close();
        }
      }),
      { numRuns: 60 },
    );
  }, 60_000);

  it('survives a reopen (recovery accepts the records)', async () => {
    const body = encodeBatch(
      {
        topic: 't',
        partition: 0,
        acks: '1',
        idempotent: false,
        firstSequence: 0,
        lastSequence: 0,
        records: [0, 1, 2].map((i) => ({
          offset: 0,
          sequence: 0,
          producerId: 'p',
          key: i ? Buffer.from(`k${i}`) : null,
          epoch: 0,
          value: Buffer.from(`v${i}`),
          timestamp: 5,
          attributes: 1,
          headers: [{ key: 'h', value: Buffer.from('x') }],
        })),
      },
      { extensions: true },
    );
    let log = await PartitionLog.open(dir, { flush: 'os' });
    expect(await log.appendWire(scanBatch(body, { extensions: true }))).toMatchObject({ baseOffset: 0, lastOffset: 2 });
    await log.close();
    log = await PartitionLog.open(dir, { flush: 'os' });
    try {
      const rs = await log.read(0, { maxRecords: 10, maxBytes: 1 << 20 });
      expect(rs.map((r) => [r.offset, r.key?.toString() ?? null, r.value.toString(), r.timestamp, r.attributes, r.producerId, r.headers.length])).toEqual([
        [0, null, 'v0', 5, 0, '', 1],
        [1, 'k1', 'v1', 5, 0, '', 1],
        [2, 'k2', 'v2', 5, 0, '', 1],
      ]);
    } finally {
      await log.close();
    }
  });

  it('an idempotent batch: stores the producer id and epoch as sent and sequences from the header, as append() of the decoded records does', async () => {
    vi.spyOn(Date, 'now').mockReturnValue(1_700_000_000_000);
    const idemArb = fc.record({
      producerId: fc.string({ minLength: 1, maxLength: 12 }),
      epoch: fc.integer({ min: 0, max: 32767 }),
      firstSequence: fc.integer({ min: 0, max: 2 ** 40 }),
      records: fc.array(recordArb, { minLength: 1, maxLength: 6 }),
    });
    await fc.assert(
      fc.asyncProperty(fc.array(idemArb, { minLength: 1, maxLength: 4 }), fc.boolean(), async (batches, ext) => {
        const a = await tempDir('a-', dir);
        const w = await tempDir('w-', dir);
        const la = await PartitionLog.open(a, { flush: 'os' });
        const lw = await PartitionLog.open(w, { flush: 'os' });
        try {
          const ra: unknown[] = [];
          const rw: unknown[] = [];
          for (const { producerId, epoch, firstSequence, records } of batches) {
            const own = records.map((r) => ({ ...r, producerId, epoch }));
            const lastSequence = firstSequence + own.length - 1;
            const body = encodeBatch({ topic: 't', partition: 0, acks: '1', idempotent: true, firstSequence, lastSequence, records: own }, { extensions: ext });
            const scan = scanBatch(body, { extensions: ext, request: true });
            expect([scan.idempotent, scan.firstSequence, scan.lastSequence]).toEqual([true, firstSequence, lastSequence]);
            // What append() of the decoded records would store for an idempotent batch.
            const decoded = asProduced(decodeBatch(body, { extensions: ext })).map((r, i) => ({ ...r, producerId, epoch, sequence: firstSequence + i }));
            ra.push(la.append(decoded));
            rw.push(lw.appendWire(scan, undefined, firstSequence));
          }
          const results = async (xs: unknown[]) => (await Promise.all(xs)).map((r) => ({ ...(r as object), writtenAt: undefined }));
          expect(await results(rw)).toEqual(await results(ra));
          await la.flush();
          await lw.flush();
          expect(Buffer.compare(await logBytes(w), await logBytes(a))).toBe(0);
          const opts = { maxRecords: 1000, maxBytes: 1 << 20 };
          const read = await lw.read(0, opts);
          expect(read).toEqual(await la.read(0, opts));
          expect(read[0]).toMatchObject({ producerId: batches[0]!.producerId, epoch: batches[0]!.epoch, sequence: batches[0]!.firstSequence });
        } finally {
          await la.close();
          await lw.close();
        }
      }),
      { numRuns: 60 },
    );
  }, 60_000);
});

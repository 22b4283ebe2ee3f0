/**
 * Interop with an independent RecordBatch v2 implementation: kafkajs's protocol module (a devDependency).
 * Its encoder's bytes decode with ours (CRC included), ours decode with its decoder, and for the same
 * fields without compression the two encoders write the same bytes.
 */
import { createRequire } from 'node:module';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { encodeControlBatch } from 'tributary-protocol/record-batch/control.js';
import { encodeRecordBatch } from 'tributary-protocol/record-batch/encode.js';
import { splitRecordBatches } from 'tributary-protocol/record-batch/split.js';
import type { RecordBatchInput } from 'tributary-protocol/record-batch/types.js';
import { RecordBatchView } from 'tributary-protocol/record-batch/view.js';

const require = createRequire(import.meta.url);

interface KEncoder {
  buffer: Buffer;
}
type KLong = { toString(): string };
interface KRecordIn {
  offsetDelta: number;
  timestampDelta: number;
  key: Buffer | null;
  value: Buffer | null;
  headers: Record<string, Buffer>;
}
interface KBatchIn {
  compression: number;
  firstOffset: KLong;
  firstTimestamp: number;
  maxTimestamp: number;
  partitionLeaderEpoch: number;
  lastOffsetDelta: number;
  transactional: boolean;
  producerId: KLong;
  producerEpoch: number;
  firstSequence: number;
  records: KEncoder[];
}
interface KRecordOut {
  offset: string;
  timestamp: string;
  key: Buffer | null;
  value: Buffer | null;
  headers: Record<string, Buffer | Buffer[]>;
  isControlRecord: boolean;
}
interface KBatchOut {
  firstOffset: string;
  firstTimestamp: string;
  maxTimestamp: string;
  partitionLeaderEpoch: number;
  inTransaction: boolean;
  isControlBatch: boolean;
  lastOffsetDelta: number;
  producerId: string;
  producerEpoch: number;
  firstSequence: number;
  records: KRecordOut[];
}

const { RecordBatch } = require('kafkajs/src/protocol/recordBatch/v0') as { RecordBatch: (b: KBatchIn) => Promise<KEncoder> };
const KRecord = require('kafkajs/src/protocol/recordBatch/record/v0') as (r: KRecordIn) => KEncoder;
const decodeKBatch = require('kafkajs/src/protocol/recordBatch/v0/decoder') as (d: unknown) => Promise<KBatchOut>;
const KDecoder = require('kafkajs/src/protocol/decoder') as new (b: Buffer) => unknown;
const Long = require('kafkajs/src/utils/long') as { fromValue(v: number | string): KLong };
const { Types } = require('kafkajs/src/protocol/message/compression') as { Types: { None: number; GZIP: number } };

const bytes = (maxLength: number) => fc.uint8Array({ maxLength }).map((u) => Buffer.from(u));

/** Records as kafkajs can take them: header keys are object keys (unique), header values never null. */
const kafkaRecords = fc.array(
  fc.record({
    key: fc.option(bytes(30), { nil: null }),
    value: fc.option(bytes(200), { nil: null }),
    headers: fc.dictionary(fc.string({ minLength: 1, maxLength: 6 }), bytes(10), { maxKeys: 3 }),
    timestampDelta: fc.integer({ min: -100_000, max: 10 ** 9 }),
    gap: fc.integer({ min: 1, max: 5 }),
  }),
  { minLength: 1, maxLength: 10 },
);

const batchFields = fc.record({
  baseOffset: fc.integer({ min: 0, max: 2 ** 50 }),
  baseTimestamp: fc.integer({ min: 0, max: 2 ** 44 }),
  partitionLeaderEpoch: fc.integer({ min: -1, max: 1000 }),
  producerId: fc.oneof(fc.constant(-1), fc.integer({ min: 0, max: 2 ** 50 })),
  producerEpoch: fc.integer({ min: -1, max: 0x7fff }),
  baseSequence: fc.integer({ min: -1, max: 0x7fffffff }),
  transactional: fc.boolean(),
  gzip: fc.boolean(),
});

type Case = { recs: ArbValue<typeof kafkaRecords>; f: ArbValue<typeof batchFields> };
type ArbValue<A> = A extends fc.Arbitrary<infer T> ? T : never;

/** One case as our input: offsets by the gaps, timestamps base + delta. */
function ours({ recs, f }: Case, gzip = f.gzip): RecordBatchInput {
  let od = -1;
  return {
    records: recs.map((r) => ({
      key: r.key,
      value: r.value,
      headers: Object.entries(r.headers).map(([key, value]) => ({ key, value })),
      timestamp: f.baseTimestamp + r.timestampDelta,
      offsetDelta: (od += r.gap),
    })),
    baseOffset: f.baseOffset,
    baseTimestamp: f.baseTimestamp,
    partitionLeaderEpoch: f.partitionLeaderEpoch,
    producerId: f.producerId,
    producerEpoch: f.producerEpoch,
    baseSequence: f.baseSequence,
    transactional: f.transactional,
    compression: gzip ? 'gzip' : 'none',
  };
}

/** The same case through kafkajs's encoder. */
async function theirs(c: Case, gzip = c.f.gzip): Promise<Buffer> {
  const input = ours(c, gzip);
  const encoded = await RecordBatch({
    compression: gzip ? Types.GZIP : Types.None,
    firstOffset: Long.fromValue(String(c.f.baseOffset)),
    firstTimestamp: c.f.baseTimestamp,
    maxTimestamp: Math.max(...input.records.map((r) => r.timestamp!)),
    partitionLeaderEpoch: c.f.partitionLeaderEpoch,
    lastOffsetDelta: input.records.at(-1)!.offsetDelta!,
    transactional: c.f.transactional,
    producerId: Long.fromValue(String(c.f.producerId)),
    producerEpoch: c.f.producerEpoch,
    firstSequence: c.f.baseSequence,
    records: c.recs.map((r, i) =>
      KRecord({ offsetDelta: input.records[i]!.offsetDelta!, timestampDelta: r.timestampDelta, key: r.key, value: r.value, headers: r.headers }),
    ),
  });
  return encoded.buffer;
}

function headersObject(hs: { key: string; value: Buffer | null }[]): Record<string, Buffer | null> {
  return Object.fromEntries(hs.map((h) => [h.key, h.value]));
}

describe('RecordBatch v2 interop with kafkajs', () => {
  it('for the same fields and no compression, both encoders write the same bytes', async () => {
    await fc.assert(
      fc.asyncProperty(kafkaRecords, batchFields, async (recs, f) => {
        expect(encodeRecordBatch(ours({ recs, f }, false))).toEqual(await theirs({ recs, f }, false));
      }),
      { numRuns: 150 },
    );
  });

  it("kafkajs's batches (plain, gzip, transactional, idempotent) validate and decode with ours", async () => {
    await fc.assert(
      fc.asyncProperty(kafkaRecords, batchFields, async (recs, f) => {
        const input = ours({ recs, f });
        const buf = await theirs({ recs, f });
        const d = new RecordBatchView(buf).validate().decode();
        expect(d.compression).toBe(f.gzip ? 'gzip' : 'none');
        expect(d.isTransactional).toBe(f.transactional);
        expect([d.baseOffset, d.partitionLeaderEpoch, d.producerId, d.producerEpoch, d.baseSequence]).toEqual([
          f.baseOffset,
          f.partitionLeaderEpoch,
          f.producerId,
          f.producerEpoch,
          f.baseSequence,
        ]);
        expect(d.records.map((r) => ({ offset: r.offset, timestamp: r.timestamp, key: r.key, value: r.value, headers: headersObject(r.headers) }))).toEqual(
          input.records.map((r) => ({
            offset: f.baseOffset + r.offsetDelta!,
            timestamp: r.timestamp,
            key: r.key,
            value: r.value,
            headers: headersObject([...r.headers!]),
          })),
        );
      }),
      { numRuns: 150 },
    );
  });

  it('our batches (plain, gzip, transactional, null header values) decode with kafkajs', async () => {
    await fc.assert(
      fc.asyncProperty(kafkaRecords, batchFields, fc.boolean(), async (recs, f, nullHeader) => {
        const input = ours({ recs, f });
        if (nullHeader) input.records = input.records.map((r) => ({ ...r, headers: [...r.headers!, { key: 'nil', value: null }] }));
        const k = await decodeKBatch(new KDecoder(encodeRecordBatch(input)));
        expect(k.firstOffset).toBe(String(f.baseOffset));
        expect(k.firstTimestamp).toBe(String(f.baseTimestamp));
        expect(k.producerId).toBe(String(f.producerId));
        expect([k.partitionLeaderEpoch, k.producerEpoch, k.firstSequence, k.inTransaction, k.isControlBatch]).toEqual([
          f.partitionLeaderEpoch,
          f.producerEpoch,
          f.baseSequence,
          f.transactional,
          false,
        ]);
        expect(k.lastOffsetDelta).toBe(input.records.at(-1)!.offsetDelta);
        expect(k.records.map((r) => ({ offset: r.offset, timestamp: r.timestamp, key: r.key, value: r.value, headers: r.headers }))).toEqual(
          input.records.map((r) => ({
            offset: String(f.baseOffset + r.offsetDelta!),
            timestamp: String(r.timestamp),
            key: r.key,
            value: r.value,
            headers: headersObject([...r.headers!]),
          })),
        );
      }),
      { numRuns: 150 },
    );
  });

  it('our transaction markers decode with kafkajs as a transactional control batch', async () => {
    for (const type of ['COMMIT', 'ABORT'] as const) {
      const marker = encodeControlBatch({
        type,
        coordinatorEpoch: 17,
        producerId: 4242,
        producerEpoch: 3,
        baseOffset: 1000,
        partitionLeaderEpoch: 5,
        timestamp: 1_700_000_000_000,
      });
      const k = await decodeKBatch(new KDecoder(marker));
      expect(k.isControlBatch).toBe(true);
      expect(k.inTransaction).toBe(true);
      expect(k.producerId).toBe('4242');
      expect(k.producerEpoch).toBe(3);
      expect(k.records).toHaveLength(1);
      const r = k.records[0]!;
      expect(r.isControlRecord).toBe(true);
      expect(r.offset).toBe('1000');
      expect([...r.key!]).toEqual([0, 0, 0, type === 'COMMIT' ? 1 : 0]);
      expect(r.value!.readInt16BE(0)).toBe(0);
      expect(r.value!.readInt32BE(2)).toBe(17);
    }
  });

  it('a Fetch-like run of kafkajs batches with a partial last one splits like a segment with a torn tail', async () => {
    const c1: Case = {
      recs: [{ key: null, value: Buffer.from('a'), headers: {}, timestampDelta: 0, gap: 1 }],
      f: { baseOffset: 0, baseTimestamp: 1, partitionLeaderEpoch: 0, producerId: -1, producerEpoch: -1, baseSequence: -1, transactional: false, gzip: false },
    };
    const c2: Case = { ...c1, f: { ...c1.f, baseOffset: 1, gzip: true } };
    const b1 = await theirs(c1);
    const b2 = await theirs(c2);
    const s = splitRecordBatches(Buffer.concat([b1, b2, b1.subarray(0, 20)]));
    expect(s.batches.map((v) => v.baseOffset)).toEqual([0, 1]);
    expect(s.stop?.reason).toBe('truncated');
    expect(s.validEnd).toBe(b1.length + b2.length);
  });
});

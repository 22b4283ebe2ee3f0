/**
 * Stored batches (packages/broker/src/storage/stored-batch.ts): a produce batch stored as one RecordBatch v2
 * must give a consumer exactly the wire records the current layout gives (record-codec.ts: writeStoredFromWire
 * then writeWireRecord), from any offset, and be a batch Kafka's own decoder accepts.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { type BatchRecord, encodeBatch, type ScannedBatch, scanBatch } from 'tributary-protocol/batch.js';
import { encodeRecordBatch } from 'tributary-protocol/record-batch/encode.js';
import { RecordBatchView } from 'tributary-protocol/record-batch/view.js';
import { ATTR_END_OF_APPEND, storedSizeOfWire, writeStoredFromWire, writeWireRecord } from 'tributary-broker/storage/record-codec.js';
import { type StoredBatchStamp, storedBatchBound, wireOut, writeStoredBatchFromWire, writeWireFromStoredBatch } from 'tributary-broker/storage/stored-batch.js';

const bytes = (max: number) => fc.uint8Array({ maxLength: max }).map((a) => Buffer.from(a));

interface Case {
  ext: boolean;
  /** An idempotent append: its producer id (decimal), epoch and first sequence. */
  producer: { id: number; epoch: number; firstSequence: number } | null;
  transactional: boolean;
  records: Array<Pick<BatchRecord, 'key' | 'value' | 'timestamp' | 'headers'>>;
  baseOffset: number;
  now: number;
}

const caseArb: fc.Arbitrary<Case> = fc.record({
  ext: fc.boolean(),
  producer: fc.option(
    fc.record({
      id: fc.oneof(fc.integer({ min: 0, max: 5000 }), fc.integer({ min: 0, max: Number.MAX_SAFE_INTEGER })),
      epoch: fc.integer({ min: 0, max: 32767 }),
      firstSequence: fc.integer({ min: 0, max: 2 ** 31 - 2000 }),
    }),
    { nil: null },
  ),
  transactional: fc.boolean(),
  records: fc.array(
    fc.record({
      key: fc.option(bytes(40), { nil: null }),
      value: fc.oneof(bytes(10), bytes(300)),
      timestamp: fc.oneof(fc.constant(0), fc.integer({ min: -5, max: 2 ** 45 }), fc.integer({ min: 1_700_000_000_000, max: 1_700_000_100_000 })),
      headers: fc.array(fc.record({ key: fc.string({ unit: 'grapheme', maxLength: 6 }), value: bytes(40) }), { maxLength: 4 }),
    }),
    { minLength: 1, maxLength: 40 },
  ),
  baseOffset: fc.oneof(fc.integer({ min: 0, max: 1000 }), fc.integer({ min: 0, max: 2 ** 52 })),
  now: fc.integer({ min: 1, max: 2 ** 44 }),
});

function scanned(c: Case): ScannedBatch {
  const seq0 = c.producer?.firstSequence ?? 0;
  const records: BatchRecord[] = c.records.map((r, i) => ({
    offset: 0,
    sequence: c.producer ? seq0 + i : 0,
    producerId: c.producer ? String(c.producer.id) : '',
    key: r.key,
    epoch: c.producer ? c.producer.epoch : -1,
    value: r.value,
    timestamp: r.timestamp,
    attributes: 0,
    headers: c.ext ? r.headers : [],
  }));
  const frame = encodeBatch(
    { topic: 't', partition: 0, acks: '1', idempotent: c.producer !== null, firstSequence: seq0, lastSequence: seq0 + records.length - 1, records },
    { extensions: c.ext },
  );
  return scanBatch(frame, { extensions: c.ext, request: true });
}

/** The current layout's answer: each record stored by writeStoredFromWire, then written out by writeWireRecord. */
function viaRecordCodec(c: Case, b: ScannedBatch, from: number): Buffer {
  const attrs = c.transactional ? 2 : 0;
  const seq = c.producer ? c.producer.firstSequence : -1;
  let size = 0;
  for (let i = 0; i < b.count; i++) size += storedSizeOfWire(b.body, b.starts[i]!, b.starts[i + 1]!, b.extensions, seq >= 0);
  const stored = Buffer.alloc(size);
  const starts: number[] = [];
  let p = 0;
  for (let i = 0; i < b.count; i++) {
    starts.push(p);
    p = writeStoredFromWire(b.body, b.starts[i]!, b.starts[i + 1]!, b.extensions, stored, p, c.baseOffset + i, c.now, attrs | (i === b.count - 1 ? ATTR_END_OF_APPEND : 0), seq < 0 ? -1 : seq + i);
  }
  const out = Buffer.alloc(size);
  let at = 0;
  for (let i = from - c.baseOffset; i < b.count; i++) {
    if (i < 0) continue;
    at = writeWireRecord(stored, starts[i]!, out, at, c.ext);
    if (at < 0) throw new Error('writeWireRecord refused a record');
  }
  return out.subarray(0, at);
}

function stampOf(c: Case): StoredBatchStamp {
  return {
    baseOffset: c.baseOffset,
    now: c.now,
    leaderEpoch: 7,
    producerId: c.producer ? c.producer.id : -1,
    producerEpoch: c.producer ? c.producer.epoch : -1,
    firstSequence: c.producer ? c.producer.firstSequence : -1,
    wireAttributes: c.transactional ? 2 : 0,
  };
}

function stored(c: Case, b: ScannedBatch, lead = 0): { buf: Buffer; end: number } {
  const buf = Buffer.alloc(lead + storedBatchBound(b));
  const end = writeStoredBatchFromWire(b, buf, lead, stampOf(c));
  return { buf, end };
}

function wireOf(buf: Buffer, pos: number, from: number, ext: boolean, count: number): Buffer {
  const out = Buffer.alloc(buf.length + count * 64);
  const end = writeWireFromStoredBatch(buf, pos, from, out, 0, ext);
  expect(end).toBeGreaterThanOrEqual(0);
  return out.subarray(0, end);
}

describe('stored batches (RecordBatch v2) against the current record layout', () => {
  it('give a consumer the same wire bytes, from the first offset and from any offset inside the batch', () => {
    fc.assert(
      fc.property(caseArb, fc.nat(), (c, pick) => {
        const b = scanned(c);
        const lead = 5;
        const { buf, end } = stored(c, b, lead);
        expect(end).toBeLessThanOrEqual(buf.length);
        const from = c.baseOffset + (pick % b.count);
        expect(wireOf(buf, lead, c.baseOffset, c.ext, b.count)).toEqual(viaRecordCodec(c, b, c.baseOffset));
        expect(wireOut.records).toBe(b.count);
        expect(wireOut.nextOffset).toBe(c.baseOffset + b.count);
        expect(wireOf(buf, lead, from, c.ext, b.count)).toEqual(viaRecordCodec(c, b, from));
        expect(wireOut.records).toBe(c.baseOffset + b.count - from);
      }),
      { numRuns: 300 },
    );
  });

  it('are RecordBatch v2 batches: CRC-32C over the batch, header fields and records as Kafka decodes them', () => {
    fc.assert(
      fc.property(caseArb, (c) => {
        const b = scanned(c);
        const { buf, end } = stored(c, b);
        const view = new RecordBatchView(buf.subarray(0, end)).validate();
        const d = view.decode();
        expect(d.baseOffset).toBe(c.baseOffset);
        expect(d.partitionLeaderEpoch).toBe(7);
        expect(d.producerId).toBe(c.producer ? c.producer.id : -1);
        expect(d.producerEpoch).toBe(c.producer ? c.producer.epoch : -1);
        expect(d.baseSequence).toBe(c.producer ? c.producer.firstSequence : -1);
        expect(d.isTransactional).toBe(c.transactional);
        expect(d.isControl).toBe(false);
        expect(d.lastOffsetDelta).toBe(b.count - 1);
        const stamped = c.records.map((r) => (c.ext && r.timestamp > 0 ? r.timestamp : c.now));
        expect(d.maxTimestamp).toBe(Math.max(...stamped));
        expect(d.records.map((r) => r.offset)).toEqual(c.records.map((_, i) => c.baseOffset + i));
        expect(d.records.map((r) => r.timestamp)).toEqual(stamped);
        expect(d.records.map((r) => r.key)).toEqual(c.records.map((r) => (r.key && r.key.length > 0 ? r.key : null)));
        expect(d.records.map((r) => r.value)).toEqual(c.records.map((r) => r.value));
        expect(d.records.map((r) => r.headers.map((h) => [h.key, h.value]))).toEqual(
          c.records.map((r) => (c.ext ? r.headers.map((h) => [h.key, h.value]) : [])),
        );
      }),
      { numRuns: 200 },
    );
  });

  it('any flipped byte of a stored batch fails its CRC, length or magic check', () => {
    const c: Case = {
      ext: true,
      producer: { id: 1001, epoch: 3, firstSequence: 40 },
      transactional: false,
      records: [
        { key: Buffer.from('k1'), value: Buffer.from('v1'), timestamp: 1_700_000_000_000, headers: [{ key: 'h', value: Buffer.from('x') }] },
        { key: null, value: Buffer.alloc(100, 9), timestamp: 0, headers: [] },
      ],
      baseOffset: 12,
      now: 1_700_000_000_500,
    };
    const { buf, end } = stored(c, scanned(c));
    const batch = buf.subarray(0, end);
    // Base offset and batch length lie outside the CRC: the length is caught by the framing, the offset is
    // what recovery checks against the segment's order.
    for (let i = 8; i < batch.length; i++) {
      if (i >= 12 && i < 16) continue; // partition leader epoch: outside the CRC in Kafka's layout too
      const copy = Buffer.from(batch);
      copy[i] ^= 0x40;
      expect(new RecordBatchView(copy).check(), `byte ${i}`).not.toBeNull();
    }
  });

  it('refuses to write a key longer than 65535 bytes to the wire, as the current layout does', () => {
    // A produce frame cannot carry such a key (u16 length); a Kafka producer's batch can.
    const big = encodeRecordBatch({ records: [{ key: Buffer.alloc(70_000, 1), value: Buffer.from('v') }], now: 5 });
    expect(writeWireFromStoredBatch(big, 0, 0, Buffer.alloc(big.length + 100), 0, true)).toBe(-1);
    const fits = encodeRecordBatch({ records: [{ key: Buffer.alloc(65_535, 1), value: Buffer.from('v') }], now: 5 });
    expect(writeWireFromStoredBatch(fits, 0, 0, Buffer.alloc(fits.length + 100), 0, true)).toBeGreaterThan(65_535);
  });
});

/**
 * Append blocks (packages/broker/src/storage/append-block.ts): a produce frame stored as one block must give
 * a consumer exactly the wire records the per-record layout gives (record-codec.ts: writeStoredFromWire then
 * writeWireRecord), from any offset, with and without record_extensions_v1 on the reading connection; and
 * checkBlock must find every cut and every flipped byte.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { type BatchRecord, encodeBatch, type ScannedBatch, scanBatch } from 'tributary-protocol/batch.js';
import { crc32c } from 'tributary-protocol/record-batch/crc32c.js';
import {
  BLOCK_CONTROL,
  BLOCK_HEADER_BYTES,
  BLOCK_IDEMPOTENT,
  BLOCK_TRANSACTIONAL,
  blockOut,
  blockSize,
  checkBlock,
  shortenBlock,
  wireBlockable,
  writeBlockFromWire,
  writeRunCutAtValues,
  writeWireFromBlock,
} from 'tributary-broker/storage/append-block.js';
import { ATTR_END_OF_APPEND, storedSizeOfWire, writeStoredFromWire, writeWireRecord } from 'tributary-broker/storage/record-codec.js';

const bytes = (max: number) => fc.uint8Array({ maxLength: max }).map((a) => Buffer.from(a));

interface Case {
  /** The frame carries record_extensions_v1 (timestamps, attributes, headers). */
  ext: boolean;
  producer: { id: number; epoch: number; firstSequence: number } | null;
  flags: number;
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
  flags: fc.constantFrom(0, BLOCK_TRANSACTIONAL, BLOCK_TRANSACTIONAL | BLOCK_CONTROL),
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

/** The frame a client sends: a plain append's records with any sequence and epoch (the broker normalises them). */
function scanned(c: Case, plainJunk = 7): ScannedBatch {
  const seq0 = c.producer?.firstSequence ?? 0;
  const records: BatchRecord[] = c.records.map((r, i) => ({
    offset: 0,
    sequence: c.producer ? seq0 + i : plainJunk + i,
    producerId: c.producer ? String(c.producer.id) : '',
    key: r.key,
    epoch: c.producer ? c.producer.epoch : plainJunk,
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

/** The per-record layout's answer: each record stored by writeStoredFromWire, then written out by writeWireRecord. */
function viaRecordCodec(c: Case, b: ScannedBatch, from: number, ext: boolean): Buffer {
  const attrs = ((c.flags & BLOCK_TRANSACTIONAL) !== 0 ? 2 : 0) | ((c.flags & BLOCK_CONTROL) !== 0 ? 1 : 0);
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
  for (let i = from - c.baseOffset; i < b.count; i++) at = writeWireRecord(stored, starts[i]!, out, at, ext);
  return out.subarray(0, at);
}

function block(c: Case, b: ScannedBatch, lead = 0): Buffer {
  const buf = Buffer.alloc(lead + blockSize(b));
  const end = writeBlockFromWire(b, buf, lead, { baseOffset: c.baseOffset, now: c.now, flags: c.flags, firstSequence: c.producer?.firstSequence ?? -1 });
  expect(end).toBe(buf.length);
  return buf;
}

function wireOf(buf: Buffer, pos: number, from: number, ext: boolean): Buffer {
  const out = Buffer.alloc(buf.length);
  return out.subarray(0, writeWireFromBlock(buf, pos, from, out, 0, ext));
}

/** Lengths at the per-record layout's varint boundaries (zigzag and plain) and the wire's u16 key length. */
const edgeLength = fc.constantFrom(0, 1, 63, 64, 127, 128, 255, 256, 8191, 8192, 16383, 16384, 65535, 65536);
const edgeBytes = edgeLength.chain((n) => fc.integer({ min: 0, max: 255 }).map((x) => Buffer.alloc(n, x)));

/** Cases with keys and values of edge lengths (few records: they are large), some at offsets crossing 2^32. */
const edgeCaseArb: fc.Arbitrary<Case> = caseArb.chain((c) =>
  fc
    .array(
      fc.record({
        key: fc.option(fc.oneof(bytes(3), edgeBytes.filter((b) => b.length <= 0xffff)), { nil: null }),
        value: fc.oneof(bytes(3), edgeBytes),
        timestamp: fc.constantFrom(0, -1, 1, c.now + 1),
        headers: c.ext ? fc.array(fc.record({ key: fc.string({ maxLength: 3 }), value: fc.oneof(bytes(3), edgeBytes) }), { maxLength: 2 }) : fc.constant<BatchRecord['headers']>([]),
      }),
      { minLength: 1, maxLength: 5 },
    )
    // Offsets that cross a 32-bit word boundary inside the block.
    .chain((records) => fc.constantFrom(c.baseOffset, 2 ** 32 - 2, 2 ** 40 - 1).map((baseOffset) => ({ ...c, records, baseOffset }))),
);

/** The block of `c` written between guard bytes, which must stay as they were. */
function guardedBlock(c: Case, b: ScannedBatch, lead: number): Buffer {
  const buf = Buffer.alloc(lead + blockSize(b) + 7, 0xa5);
  const end = writeBlockFromWire(b, buf, lead, { baseOffset: c.baseOffset, now: c.now, flags: c.flags, firstSequence: c.producer?.firstSequence ?? -1 });
  expect(end).toBe(buf.length - 7);
  expect(buf.subarray(0, lead).every((x) => x === 0xa5)).toBe(true);
  expect(buf.subarray(end).every((x) => x === 0xa5)).toBe(true);
  return buf;
}

describe('append blocks against the per-record layout', () => {
  it('hold records of edge lengths (varint boundaries, empty and null keys, headers) as the per-record layout gives them, written in their room only', () => {
    fc.assert(
      fc.property(edgeCaseArb, fc.nat(), fc.boolean(), fc.nat({ max: 9 }), (c, pick, ext, lead) => {
        const b = scanned(c);
        const buf = guardedBlock(c, b, lead);
        expect(checkBlock(buf, lead, buf.length - 7)).toMatchObject({ ok: true, count: b.count });
        const from = c.baseOffset + (pick % b.count);
        expect(wireOf(buf, lead, from, ext)).toEqual(viaRecordCodec(c, b, from, ext));
      }),
      { numRuns: 60 },
    );
  });

  it('cut at values, a run of a block is each record up to its value, written after what the reply holds, with its value bytes', () => {
    fc.assert(
      fc.property(fc.oneof(caseArb, edgeCaseArb), fc.nat(), fc.nat({ max: 40 }), (c, pick, at) => {
        const b = scanned(c);
        const buf = block(c, b);
        const from = c.baseOffset + (pick % b.count);
        const expected = viaRecordCodec(c, b, from, false);
        // The run's start: the records before `from` walked by the layout (a record's own length, no parsing).
        const whole = viaRecordCodec(c, b, c.baseOffset, true);
        const s = BLOCK_HEADER_BYTES + whole.length - viaRecordCodec(c, b, from, true).length;
        const dst = Buffer.alloc(at + buf.length + 5, 0x5a);
        const end = writeRunCutAtValues(buf, s, buf.length, dst, at);
        expect(end).toBe(at + expected.length);
        expect(dst.subarray(at, end)).toEqual(expected);
        expect(dst.subarray(0, at).every((x) => x === 0x5a)).toBe(true);
        expect(blockOut.values).toBe(c.records.slice(from - c.baseOffset).reduce((n, r) => n + r.value.length, 0));
      }),
      { numRuns: 100 },
    );
  });

  it('give a consumer the same wire bytes, from any offset of the block, with and without extensions', () => {
    fc.assert(
      fc.property(caseArb, fc.nat(), fc.boolean(), (c, pick, ext) => {
        const b = scanned(c);
        expect(wireBlockable(b)).toBe(true);
        const buf = block(c, b, 3);
        const from = c.baseOffset + (pick % b.count);
        expect(wireOf(buf, 3, from, ext)).toEqual(viaRecordCodec(c, b, from, ext));
        expect(blockOut.records).toBe(c.baseOffset + b.count - from);
      }),
      { numRuns: 300 },
    );
  });

  it('check as whole blocks with the header the append stamped', () => {
    fc.assert(
      fc.property(caseArb, (c) => {
        const b = scanned(c);
        const buf = block(c, b);
        const r = checkBlock(buf, 0);
        const stamped = c.records.map((x) => (c.ext && x.timestamp > 0 ? x.timestamp : c.now));
        expect(r).toEqual({
          ok: true,
          size: buf.length,
          flags: c.flags | (c.producer ? BLOCK_IDEMPOTENT : 0),
          baseOffset: c.baseOffset,
          count: b.count,
          appendTime: c.now,
          maxTimestamp: Math.max(...stamped),
        });
      }),
      { numRuns: 200 },
    );
  });

  it('shortened to their first records (a truncation inside a block) are the block those records alone make', () => {
    let cases = 0;
    fc.assert(
      fc.property(caseArb, (c) => {
        const b = scanned(c);
        for (let keep = 1; keep < b.count; keep++) {
          const buf = block(c, b, 5);
          const end = shortenBlock(buf, 5, keep);
          // Byte for byte the block of the first `keep` records, appended at the same offset and time.
          const alone = { ...c, records: c.records.slice(0, keep) };
          expect(buf.subarray(5, end)).toEqual(block(alone, scanned(alone)));
          expect(checkBlock(buf, 5, end)).toMatchObject({ ok: true, count: keep, baseOffset: c.baseOffset, size: end - 5 });
          cases++;
        }
      }),
      { numRuns: 200 },
    );
    expect(cases).toBeGreaterThan(100);
  });

  it('are found incomplete when cut anywhere and corrupt when any byte flips', () => {
    fc.assert(
      fc.property(caseArb, (c) => {
        const b = scanned({ ...c, records: c.records.slice(0, 3) });
        const buf = block(c, b);
        for (let cut = 0; cut < buf.length; cut++) expect(checkBlock(buf, 0, cut)).toMatchObject({ ok: false, reason: 'incomplete' });
        for (let i = 0; i < buf.length; i++) {
          for (const bit of [0x01, 0x80]) {
            const bad = Buffer.from(buf);
            bad[i]! ^= bit;
            // A flip of the length either claims more bytes than there are or fails the CRC over fewer.
            expect(checkBlock(bad, 0).ok).toBe(false);
          }
        }
      }),
      { numRuns: 25 },
    );
  });

  it('hold frames without extensions, but not a plain append whose records carry a producer id', () => {
    const records: BatchRecord[] = [{ offset: 0, sequence: 0, producerId: '', key: null, epoch: -1, value: Buffer.from('v'), timestamp: 0, attributes: 0, headers: [] }];
    const plain = { topic: 't', partition: 0, acks: '1' as const, idempotent: false, firstSequence: 0, lastSequence: 0, records };
    expect(wireBlockable(scanBatch(encodeBatch(plain, { extensions: true }), { extensions: true, request: true }))).toBe(true);
    expect(wireBlockable(scanBatch(encodeBatch(plain), { extensions: false, request: true }))).toBe(true);
    const withId = { ...plain, records: [{ ...records[0]!, producerId: '12' }] };
    expect(wireBlockable(scanBatch(encodeBatch(withId, { extensions: true }), { extensions: true, request: true }))).toBe(false);
  });

  it('refuse a per-record layout record, a short header and a block whose offsets do not follow its base', () => {
    const c: Case = { ext: true, producer: null, flags: 0, records: [{ key: null, value: Buffer.from('a'), timestamp: 0, headers: [] }, { key: null, value: Buffer.from('b'), timestamp: 0, headers: [] }], baseOffset: 10, now: 5 };
    const buf = block(c, scanned(c));
    expect(checkBlock(buf, 0).ok).toBe(true);
    const perRecord = Buffer.from(buf);
    perRecord[0]! &= 0x7f;
    expect(checkBlock(perRecord, 0)).toEqual({ ok: false, reason: 'corrupt' });
    expect(checkBlock(buf, 0, BLOCK_HEADER_BYTES - 1)).toMatchObject({ ok: false, reason: 'incomplete' });
    // The second record's offset rewritten (and the CRC with it): the structure check, not the CRC, refuses it.
    const other = Buffer.alloc(buf.length);
    const b = scanned(c);
    writeBlockFromWire(b, other, 0, { baseOffset: 10, now: 5, flags: 0, firstSequence: -1 });
    const second = BLOCK_HEADER_BYTES + b.starts[1]! - b.starts[0]!;
    other[second + 7] = 99;
    other.writeUInt32BE(crc32c(other.subarray(8)), 4);
    expect(checkBlock(other, 0)).toEqual({ ok: false, reason: 'corrupt' });
  });
});

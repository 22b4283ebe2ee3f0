import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  type Acks,
  BATCH_MAGIC,
  type Batch,
  type BatchRecord,
  type BatchTrailer,
  type BatchTxn,
  batchTxnKind,
  decodeBatch,
  encodeBatch,
  isBatchBody,
  logRecordsToBatch,
  scanBatch,
} from 'tributary-protocol/batch.js';
import { TributaryError } from 'tributary-protocol/errors.js';
import type { LogRecord } from 'tributary-protocol/record.js';
import { batchRec } from '../../helpers/util.js';

// ---------- arbitraries ----------

const safeNat = fc.integer({ min: 0, max: Number.MAX_SAFE_INTEGER });
const safeInt = fc.integer({ min: Number.MIN_SAFE_INTEGER, max: Number.MAX_SAFE_INTEGER });
const bytes = (maxLength: number) => fc.uint8Array({ maxLength }).map((u) => Buffer.from(u));
const acksArb = fc.constantFrom<Acks>('0', '1', '-1', 'all');

function recordArb(ext: boolean): fc.Arbitrary<BatchRecord> {
  return fc.record({
    offset: safeNat,
    sequence: safeNat,
    producerId: fc.string({ unit: 'binary', maxLength: 20 }),
    key: fc.option(bytes(40), { nil: null }),
    epoch: fc.oneof(fc.constant(-1), safeInt),
    value: bytes(100),
    timestamp: ext ? safeInt : fc.constant(0),
    attributes: ext ? fc.integer({ min: 0, max: 255 }) : fc.constant(0),
    headers: ext ? fc.array(fc.record({ key: fc.string({ unit: 'binary', maxLength: 16 }), value: bytes(24) }), { maxLength: 4 }) : fc.constant([]),
  });
}

const int32 = fc.integer({ min: -0x80000000, max: 0x7fffffff });
const txnArb: fc.Arbitrary<BatchTxn> = fc.record({
  transactionalId: fc.string({ unit: 'binary', maxLength: 20 }),
  producerId: fc.string({ unit: 'binary', maxLength: 20 }),
  epoch: int32,
  coordinatorPartition: int32,
  coordinatorEpoch: int32,
});

const trailerArb: fc.Arbitrary<BatchTrailer> = fc.record({ nextOffset: safeNat, highWatermark: safeNat, logStartOffset: safeNat });

function batchArb(opts: { ext: boolean; trailer: boolean; maxRecords?: number }): fc.Arbitrary<Batch> {
  return fc.record({
    topic: fc.string({ unit: 'binary', maxLength: 300 }),
    partition: fc.integer({ min: -1, max: 0x7fffffff }),
    acks: acksArb,
    idempotent: fc.boolean(),
    firstSequence: safeNat,
    lastSequence: safeNat,
    records: fc.array(recordArb(opts.ext), { maxLength: opts.maxRecords ?? 6 }),
    trailer: opts.trailer ? trailerArb : fc.constant(undefined),
    txn: fc.option(txnArb, { nil: undefined }),
  });
}

/** What the decoder should give back: an empty key reads as null (length 0 means "no key" on the wire). */
function expected(b: Batch, ext: boolean): Batch {
  return {
    ...b,
    // A transactional batch is not idempotent: its sequences are the transaction's.
    idempotent: b.txn ? false : b.idempotent,
    records: b.records.map((r) => ({
      ...r,
      key: r.key && r.key.length > 0 ? r.key : null,
      timestamp: ext ? r.timestamp : 0,
      attributes: ext ? r.attributes : 0,
      headers: ext ? r.headers : [],
    })),
    trailer: ext ? b.trailer : undefined,
  };
}

/** Buffers compared by content (decoded buffers are views into the input). */
function norm(b: Batch): unknown {
  return JSON.parse(JSON.stringify(b, (_k, v) => (v && typeof v === 'object' && v.type === 'Buffer' && Array.isArray(v.data) ? { buf: v.data } : v)));
}

function catchErr(fn: () => unknown): unknown {
  try {
    fn();
  } catch (e) {
    return e;
  }
  return undefined;
}

function expectInvalidBatch(fn: () => unknown, reason?: RegExp): TributaryError {
  const err = catchErr(fn);
  expect(err).toBeInstanceOf(TributaryError);
  expect(err).not.toBeInstanceOf(RangeError);
  expect((err as TributaryError).code).toBe('invalid_batch');
  if (reason) expect(String((err as TributaryError).fields.reason)).toMatch(reason);
  return err as TributaryError;
}

function sample(over: Partial<Batch> = {}): Batch {
  return {
    topic: 'orders',
    partition: 3,
    acks: 'all',
    idempotent: true,
    firstSequence: 10,
    lastSequence: 11,
    records: [
      batchRec('v', { offset: 100, sequence: 10, producerId: 'p-1', key: Buffer.from('k1'), epoch: 2, value: Buffer.from('hello') }),
      batchRec('v', { offset: 101, sequence: 11, producerId: 'p-1', key: null, epoch: 2, value: Buffer.alloc(0) }),
    ],
    ...over,
  };
}

// Header layout of `sample()` (topic 'orders', acks 'all'): offsets of the fixed fields.
const TOPIC_LEN = 6;
const ACKS_AT = 2 + 2 + TOPIC_LEN + 4; // acks length byte
const FIRST_SEQ_AT = ACKS_AT + 1 + 3 + 1;
const COUNT_AT = FIRST_SEQ_AT + 16;
const FIRST_RECORD_AT = COUNT_AT + 4;

// ---------- tests ----------

describe('isBatchBody', () => {
  it('recognises the 0xBA7C magic and nothing else', () => {
    expect(BATCH_MAGIC).toBe(0xba7c);
    expect(isBatchBody(encodeBatch(sample()))).toBe(true);
    expect(isBatchBody(Buffer.from([0xba, 0x7c]))).toBe(true);
    expect(isBatchBody(Buffer.from([0xba]))).toBe(false);
    expect(isBatchBody(Buffer.alloc(0))).toBe(false);
    expect(isBatchBody(Buffer.from([0x7c, 0xba, 0]))).toBe(false);
    expect(isBatchBody(Buffer.from('PUBLISH topic=t'))).toBe(false);
  });
});

describe('encodeBatch layout (docs/protocol.md section 5.1)', () => {
  it('writes the header fields big-endian in the documented order', () => {
    const buf = encodeBatch(sample({ records: [] }));
    expect(buf.readUInt16BE(0)).toBe(0xba7c);
    expect(buf.readUInt16BE(2)).toBe(TOPIC_LEN);
    expect(buf.toString('utf8', 4, 4 + TOPIC_LEN)).toBe('orders');
    expect(buf.readInt32BE(4 + TOPIC_LEN)).toBe(3);
    expect(buf.readUInt8(ACKS_AT)).toBe(3);
    expect(buf.toString('ascii', ACKS_AT + 1, ACKS_AT + 4)).toBe('all');
    expect(buf.readUInt8(ACKS_AT + 4)).toBe(1);
    expect(buf.readBigUInt64BE(FIRST_SEQ_AT)).toBe(10n);
    expect(buf.readBigUInt64BE(FIRST_SEQ_AT + 8)).toBe(11n);
    expect(buf.readInt32BE(COUNT_AT)).toBe(0);
    expect(buf.length).toBe(FIRST_RECORD_AT);
  });

  it('writes each record as offset, sequence, pid, key, epoch (i64), payload', () => {
    const r = batchRec('v', { offset: 2 ** 40 + 5, sequence: 7, producerId: 'pid', key: Buffer.from('kk'), epoch: -1, value: Buffer.from('val') });
    const buf = encodeBatch(sample({ records: [r] }));
    let at = FIRST_RECORD_AT;
    expect(buf.readBigUInt64BE(at)).toBe(BigInt(2 ** 40 + 5));
    expect(buf.readBigUInt64BE(at + 8)).toBe(7n);
    at += 16;
    expect(buf.readUInt16BE(at)).toBe(3);
    expect(buf.toString('utf8', at + 2, at + 5)).toBe('pid');
    at += 5;
    expect(buf.readUInt16BE(at)).toBe(2);
    expect(buf.toString('utf8', at + 2, at + 4)).toBe('kk');
    at += 4;
    expect(buf.readBigInt64BE(at)).toBe(-1n);
    at += 8;
    expect(buf.readUInt32BE(at)).toBe(3);
    expect(buf.toString('utf8', at + 4, at + 7)).toBe('val');
    expect(buf.length).toBe(at + 7);
  });

  it('u64 values round-trip at the 2^53 - 1 edge', () => {
    const max = Number.MAX_SAFE_INTEGER;
    const b = sample({ firstSequence: max, lastSequence: max, records: [batchRec('v', { offset: max, sequence: max, epoch: Number.MIN_SAFE_INTEGER })] });
    const buf = encodeBatch(b);
    expect(buf.readBigUInt64BE(FIRST_SEQ_AT)).toBe(BigInt(max));
    const back = decodeBatch(buf);
    expect(back.firstSequence).toBe(max);
    expect(back.records[0]?.offset).toBe(max);
    expect(back.records[0]?.sequence).toBe(max);
    expect(back.records[0]?.epoch).toBe(Number.MIN_SAFE_INTEGER);
  });

  it('refuses a key longer than 65535 bytes with invalid_batch', () => {
    expectInvalidBatch(() => encodeBatch(sample({ records: [batchRec('v', { key: Buffer.alloc(65536) })] })));
    expect(decodeBatch(encodeBatch(sample({ records: [batchRec('v', { key: Buffer.alloc(65535, 1) })] }))).records[0]?.key?.length).toBe(65535);
  });
});

describe('round trips', () => {
  it('an empty key decodes as null; a missing key too', () => {
    const b = sample({ records: [batchRec('v', { key: Buffer.alloc(0) }), batchRec('v', { key: null }), batchRec('v', { key: Buffer.from([0]) })] });
    const back = decodeBatch(encodeBatch(b));
    expect(back.records[0]?.key).toBeNull();
    expect(back.records[1]?.key).toBeNull();
    expect(back.records[2]?.key).toEqual(Buffer.from([0]));
  });

  it('without extensions, timestamps/attributes/headers/trailer are not carried', () => {
    const b = sample({
      records: [batchRec('v', { timestamp: 123, attributes: 3, headers: [{ key: 'h', value: Buffer.from('x') }] })],
      trailer: { nextOffset: 1, highWatermark: 2, logStartOffset: 0 },
    });
    const plain = encodeBatch(b);
    const back = decodeBatch(plain);
    expect(back.records[0]?.timestamp).toBe(0);
    expect(back.records[0]?.attributes).toBe(0);
    expect(back.records[0]?.headers).toEqual([]);
    expect(back.trailer).toBeUndefined();
    const ext = encodeBatch(b, { extensions: true });
    expect(ext.length).toBe(plain.length + (8 + 1 + 2) + (2 + 1 + 4 + 1) + 24);
  });

  it('property: arbitrary batches round-trip without extensions', () => {
    fc.assert(
      fc.property(batchArb({ ext: false, trailer: false }), (b) => {
        const buf = encodeBatch(b);
        expect(isBatchBody(buf)).toBe(true);
        expect(norm(decodeBatch(buf))).toEqual(norm(expected(b, false)));
      }),
      { numRuns: 300 },
    );
  });

  it('property: arbitrary batches round-trip with extensions, with and without a trailer', () => {
    fc.assert(
      fc.property(batchArb({ ext: true, trailer: false }), fc.option(trailerArb, { nil: undefined }), (b0, trailer) => {
        const b = { ...b0, trailer };
        const buf = encodeBatch(b, { extensions: true });
        const back = decodeBatch(buf, { extensions: true });
        expect(norm(back)).toEqual(norm(expected(b, true)));
        expect(back.trailer === undefined).toBe(trailer === undefined);
      }),
      { numRuns: 300 },
    );
  });

  it('property: with a RecordMaker, each record is what it made from the fields a BatchRecord would hold, in order', () => {
    fc.assert(
      fc.property(batchArb({ ext: true, trailer: false }), fc.boolean(), (b, ext) => {
        const buf = encodeBatch(b, { extensions: ext });
        const plain = decodeBatch(buf, { extensions: ext });
        let calls = 0;
        const made = decodeBatch(buf, { extensions: ext }, (offset, key, value, timestamp, attributes, headers, sequence, producerId, epoch) => ({
          n: calls++,
          r: { offset, sequence, producerId, key, epoch, value, timestamp, attributes, headers },
        }));
        expect(made.records.map((m) => m.n)).toEqual(plain.records.map((_, i) => i));
        expect(made.records.map((m) => m.r)).toEqual(plain.records);
        expect({ ...made, records: [] }).toEqual({ ...plain, records: [] });
      }),
      { numRuns: 200 },
    );
  });

  it('a batch encoded with extensions is refused by a decoder without them, and vice versa', () => {
    const b = sample();
    expectInvalidBatch(() => decodeBatch(encodeBatch(b, { extensions: true })));
    expectInvalidBatch(() => decodeBatch(encodeBatch(b), { extensions: true }));
  });

  it('attributes are written as one byte', () => {
    const back = decodeBatch(encodeBatch(sample({ records: [batchRec('v', { attributes: 255 })] }), { extensions: true }), { extensions: true });
    expect(back.records[0]?.attributes).toBe(255);
  });

  it('logRecordsToBatch carries stored records and the trailer to the wire', () => {
    const stored: LogRecord[] = [
      {
        offset: 42,
        timestamp: 1_700_000_000_000,
        key: Buffer.from('k'),
        value: Buffer.from('v'),
        headers: [{ key: 'trace', value: Buffer.from('abc') }],
        producerId: 'p',
        epoch: 0,
        sequence: 5,
        attributes: 2,
      },
    ];
    const trailer = { nextOffset: 43, highWatermark: 43, logStartOffset: 0 };
    const b = logRecordsToBatch('t', 1, stored, trailer);
    const back = decodeBatch(encodeBatch(b, { extensions: true }), { extensions: true });
    expect(back.topic).toBe('t');
    expect(back.partition).toBe(1);
    expect(back.trailer).toEqual(trailer);
    expect(norm(back.records as unknown as Batch)).toEqual(norm(stored.map((r) => ({ ...r })) as unknown as Batch));
  });
});

describe('decodeBatch refuses malformed input with invalid_batch (never a RangeError)', () => {
  const cases: Array<[string, Batch, boolean]> = [
    ['no extensions', sample(), false],
    ['no records', sample({ records: [] }), false],
    [
      'extensions with headers',
      sample({
        records: [
          batchRec('v', {
            timestamp: 5,
            attributes: 1,
            headers: [
              { key: 'a', value: Buffer.from('1') },
              { key: '', value: Buffer.alloc(0) },
            ],
          }),
          batchRec('v', { key: Buffer.from('k') }),
        ],
      }),
      true,
    ],
  ];

  it.each(cases)('every strict prefix of a valid encoding is refused (%s)', (_name, b, ext) => {
    const buf = encodeBatch(b, { extensions: ext });
    for (let len = 0; len < buf.length; len++) {
      expectInvalidBatch(() => decodeBatch(buf.subarray(0, len), { extensions: ext }));
    }
  });

  it('with a trailer, prefixes are refused except the one that drops exactly the 24-byte trailer', () => {
    const b = sample({ trailer: { nextOffset: 9, highWatermark: 9, logStartOffset: 1 } });
    const buf = encodeBatch(b, { extensions: true });
    for (let len = 0; len < buf.length; len++) {
      const prefix = buf.subarray(0, len);
      if (len === buf.length - 24) {
        // The trailer is optional and recognised by length, so this prefix is a well-formed batch without one.
        const back = decodeBatch(prefix, { extensions: true });
        expect(back.trailer).toBeUndefined();
        expect(back.records).toHaveLength(2);
      } else {
        expectInvalidBatch(() => decodeBatch(prefix, { extensions: true }));
      }
    }
  });

  it('property: every strict prefix of an arbitrary batch is refused', () => {
    fc.assert(
      fc.property(batchArb({ ext: false, trailer: false, maxRecords: 3 }), fc.boolean(), (b, ext) => {
        const buf = encodeBatch(b, { extensions: ext });
        for (let len = 0; len < buf.length; len++) {
          const err = catchErr(() => decodeBatch(buf.subarray(0, len), { extensions: ext }));
          expect(err).toBeInstanceOf(TributaryError);
          expect((err as TributaryError).code).toBe('invalid_batch');
        }
      }),
      { numRuns: 60 },
    );
  });

  it('trailing garbage', () => {
    const buf = encodeBatch(sample());
    for (const extra of [1, 7, 24, 100]) {
      expectInvalidBatch(() => decodeBatch(Buffer.concat([buf, Buffer.alloc(extra, 0xee)])), /trailing/);
    }
    // with extensions, anything but exactly a 24-byte trailer is garbage
    const ext = encodeBatch(sample(), { extensions: true });
    for (const extra of [1, 23, 25, 48]) {
      expectInvalidBatch(() => decodeBatch(Buffer.concat([ext, Buffer.alloc(extra)]), { extensions: true }), /trailing/);
    }
  });

  it('bad magic', () => {
    const buf = Buffer.from(encodeBatch(sample()));
    buf[0] = 0x7c;
    buf[1] = 0xba;
    expectInvalidBatch(() => decodeBatch(buf), /magic/);
    expectInvalidBatch(() => decodeBatch(Buffer.from('PUBLISH topic=t message=x')), /magic/);
  });

  it('a record count of 0x7FFFFFFF in a tiny buffer is refused before allocating', () => {
    const buf = Buffer.from(encodeBatch(sample({ records: [] })));
    buf.writeInt32BE(0x7fffffff, COUNT_AT);
    expectInvalidBatch(() => decodeBatch(buf), /record count/);
    // also with a few bytes following
    expectInvalidBatch(() => decodeBatch(Buffer.concat([buf, Buffer.alloc(64)])), /record count/);
  });

  it('a record count larger than the remaining bytes can hold is refused', () => {
    const buf = Buffer.from(encodeBatch(sample()));
    buf.writeInt32BE(3, COUNT_AT); // two records are present
    expectInvalidBatch(() => decodeBatch(buf));
  });

  it('a negative record count', () => {
    const buf = Buffer.from(encodeBatch(sample({ records: [] })));
    buf.writeInt32BE(-1, COUNT_AT);
    expectInvalidBatch(() => decodeBatch(buf), /negative/);
    buf.writeInt32BE(-0x80000000, COUNT_AT);
    expectInvalidBatch(() => decodeBatch(buf), /negative/);
  });

  it('maxRecords is enforced', () => {
    const buf = encodeBatch(sample());
    expect(decodeBatch(buf, { maxRecords: 2 }).records).toHaveLength(2);
    expectInvalidBatch(() => decodeBatch(buf, { maxRecords: 1 }));
  });

  it("acks 'x' (and any other unknown acks)", () => {
    const buf = Buffer.from(encodeBatch(sample({ acks: '1', records: [] })));
    expect(buf.readUInt8(ACKS_AT)).toBe(1);
    buf.write('x', ACKS_AT + 1, 'ascii');
    expectInvalidBatch(() => decodeBatch(buf), /acks/);
    for (const acks of ['', '2', 'ALL', '-0', 'al']) {
      expectInvalidBatch(() => decodeBatch(encodeBatch(sample({ acks: acks as Acks }))), /acks/);
    }
  });

  it('a 64-bit offset above 2^53', () => {
    const buf = Buffer.from(encodeBatch(sample()));
    buf.writeBigUInt64BE(2n ** 53n, FIRST_RECORD_AT);
    expectInvalidBatch(() => decodeBatch(buf), /2\^53/);
    buf.writeBigUInt64BE(2n ** 64n - 1n, FIRST_RECORD_AT);
    expectInvalidBatch(() => decodeBatch(buf), /2\^53/);
    buf.writeBigUInt64BE(2n ** 53n - 1n, FIRST_RECORD_AT);
    expect(decodeBatch(buf).records[0]?.offset).toBe(Number.MAX_SAFE_INTEGER);
  });

  it('a 64-bit first sequence above 2^53, and an epoch beyond the safe range', () => {
    const seq = Buffer.from(encodeBatch(sample()));
    seq.writeBigUInt64BE(2n ** 60n, FIRST_SEQ_AT);
    expectInvalidBatch(() => decodeBatch(seq), /2\^53/);
    const epochAt = FIRST_RECORD_AT + 16 + 2 + 3 + 2 + 2; // pid 'p-1', key 'k1'
    const ep = Buffer.from(encodeBatch(sample()));
    expect(ep.readBigInt64BE(epochAt)).toBe(2n);
    ep.writeBigInt64BE(-(2n ** 62n), epochAt);
    expectInvalidBatch(() => decodeBatch(ep), /2\^53/);
  });

  it('property: random byte mutations of a valid batch either decode or throw TributaryError (nothing else)', () => {
    const mutationArb = fc.array(fc.tuple(fc.nat(), fc.integer({ min: 0, max: 255 })), { minLength: 1, maxLength: 6 });
    const lengthMutationArb = fc.array(fc.tuple(fc.nat(), fc.constantFrom(0x00, 0x7f, 0x80, 0xff)), { minLength: 1, maxLength: 3 });
    fc.assert(
      fc.property(
        batchArb({ ext: true, trailer: true, maxRecords: 4 }),
        fc.boolean(),
        fc.oneof(mutationArb, lengthMutationArb),
        fc.integer({ min: -8, max: 8 }),
        (b, ext, mutations, resize) => {
          const src = encodeBatch(b, { extensions: ext });
          let buf = Buffer.from(src);
          for (const [pos, byte] of mutations) buf[pos % buf.length] = byte;
          if (resize < 0) buf = buf.subarray(0, Math.max(0, buf.length + resize));
          else if (resize > 0) buf = Buffer.concat([buf, Buffer.alloc(resize, 0xab)]);
          let decoded: Batch | undefined;
          try {
            decoded = decodeBatch(buf, { extensions: ext });
          } catch (e) {
            expect(e).toBeInstanceOf(TributaryError);
            expect((e as TributaryError).code).toBe('invalid_batch');
            return;
          }
          // Whatever decodes is a well-formed batch: valid acks, safe integers, and it survives a second
          // encode/decode unchanged (bytes may differ only where invalid UTF-8 became U+FFFD).
          expect(['0', '1', '-1', 'all']).toContain(decoded.acks);
          for (const r of decoded.records) {
            expect(Number.isSafeInteger(r.offset) && r.offset >= 0).toBe(true);
            expect(Number.isSafeInteger(r.epoch)).toBe(true);
          }
          const again = decodeBatch(encodeBatch(decoded, { extensions: ext }), { extensions: ext });
          expect(norm(again)).toEqual(norm(decoded));
        },
      ),
      { numRuns: 1000 },
    );
  });
});

describe('produce requests', () => {
  it('refuse a partition below -1 (-1: the broker chooses) and, as requests, the 24 bytes of a consume trailer', () => {
    const b = sample({ records: [batchRec('v')] });
    for (const partition of [-2, -2147483648]) expect(() => decodeBatch(encodeBatch({ ...b, partition }))).toThrow(/partition must be -1/);
    expect(decodeBatch(encodeBatch({ ...b, partition: -1 })).partition).toBe(-1);
    const withTrailer = Buffer.concat([encodeBatch(b, { extensions: true }), Buffer.alloc(24)]);
    expect(decodeBatch(withTrailer, { extensions: true }).trailer).toEqual({ nextOffset: 0, highWatermark: 0, logStartOffset: 0 });
    expect(() => decodeBatch(withTrailer, { extensions: true, request: true })).toThrow(/trailing bytes/);
    expect(() => scanBatch(withTrailer, { extensions: true, request: true })).toThrow(/trailing bytes/);
  });
});

describe('decodeBatch maxObjects', () => {
  const headers = (n: number) => Array.from({ length: n }, () => ({ key: '', value: Buffer.alloc(0) }));
  const body = encodeBatch(sample({ records: [batchRec('a', { headers: headers(3) }), batchRec('b'), batchRec('c', { headers: headers(2) })] }), { extensions: true });

  it('takes a batch of exactly as many records and headers as it allows', () => {
    expect(decodeBatch(body, { extensions: true, maxObjects: 8 }).records.map((r) => r.headers.length)).toEqual([3, 0, 2]);
  });

  it('refuses one more, as invalid_batch, whether the records or the headers go past it', () => {
    expect(() => decodeBatch(body, { extensions: true, maxObjects: 7 })).toThrow(expect.objectContaining({ code: 'invalid_batch', fields: { reason: 'more than 7 records and headers' } }));
    // The record count alone: refused before any record is built.
    expect(() => decodeBatch(body, { extensions: true, maxObjects: 2 })).toThrow(/more than 2 records and headers/);
  });

  it('charges a record\'s headers before building them: a later record past the budget is refused at its header count', () => {
    const made: number[] = [];
    const maker = (offset: number, _k: Buffer | null, _v: Buffer, _t: number, _a: number, hs: unknown[]) => {
      made.push(hs.length);
      return offset;
    };
    // 3 records + 3 headers fit in 6; the third record's 2 headers do not.
    expect(() => decodeBatch(body, { extensions: true, maxObjects: 6 }, maker)).toThrow(/more than 6 records and headers/);
    expect(made).toEqual([3, 0]);
  });

  it('without record_extensions_v1 there are no headers to charge', () => {
    const plain = encodeBatch(sample({ records: [batchRec('a'), batchRec('b')] }));
    expect(decodeBatch(plain, { maxObjects: 2 }).records).toHaveLength(2);
  });
});

describe('transactional batches (flags 2)', () => {
  const txn: BatchTxn = { transactionalId: 'tx-1', producerId: 'txn-ab', epoch: 3, coordinatorPartition: -1, coordinatorEpoch: -1 };

  it('writes flags 2 and the transaction section between the count and the first record', () => {
    const b = sample({ idempotent: false, txn });
    const buf = encodeBatch(b);
    expect(buf[FIRST_SEQ_AT - 1]).toBe(2);
    let at = FIRST_RECORD_AT;
    expect(buf.readUInt16BE(at)).toBe(4);
    expect(buf.toString('utf8', at + 2, at + 6)).toBe('tx-1');
    at += 6;
    expect(buf.readUInt16BE(at)).toBe(6);
    expect(buf.toString('utf8', at + 2, at + 8)).toBe('txn-ab');
    at += 8;
    expect([buf.readInt32BE(at), buf.readInt32BE(at + 4), buf.readInt32BE(at + 8)]).toEqual([3, -1, -1]);
    expect(buf.length).toBe(encodeBatch(sample({ idempotent: false })).length + 6 + 8 + 12);
    expect(decodeBatch(buf).txn).toEqual(txn);
  });

  it('batchTxnKind tells a producer frame from a coordinator frame by the header alone', () => {
    expect(batchTxnKind(encodeBatch(sample({ txn }), { extensions: true }))).toBe('producer');
    expect(batchTxnKind(encodeBatch(sample({ txn: { ...txn, coordinatorPartition: 4, coordinatorEpoch: 7 } })))).toBe('coordinator');
    expect(batchTxnKind(encodeBatch(sample()))).toBeUndefined();
    expect(batchTxnKind(encodeBatch(sample({ idempotent: false })))).toBeUndefined();
    // A header cut inside the transaction section says nothing (decodeBatch refuses it).
    const cut = encodeBatch(sample({ txn })).subarray(0, FIRST_RECORD_AT + 10);
    expect(batchTxnKind(cut)).toBeUndefined();
    expectInvalidBatch(() => decodeBatch(cut), /truncated/);
  });

  it('unknown flags are refused', () => {
    const buf = encodeBatch(sample());
    buf[FIRST_SEQ_AT - 1] = 3;
    expectInvalidBatch(() => decodeBatch(buf), /unknown flags 3/);
  });
});

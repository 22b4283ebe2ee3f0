import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { TributaryError } from 'tributary-protocol/errors.js';
import { registerCompressionCodec } from 'tributary-protocol/record-batch/compression.js';
import { encodeControlBatch, parseControlRecord } from 'tributary-protocol/record-batch/control.js';
import { encodeRecordBatch, encodeRecordBatchAsync } from 'tributary-protocol/record-batch/encode.js';
import { RecordBatchError, type RecordBatchErrorReason } from 'tributary-protocol/record-batch/errors.js';
import { ATTRIBUTES, CRC, RECORDS } from 'tributary-protocol/record-batch/layout.js';
import type { RecordBatchInput, RecordV2Input } from 'tributary-protocol/record-batch/types.js';
import { RecordBatchView } from 'tributary-protocol/record-batch/view.js';
import { crc32cPure } from 'tributary-protocol/record-batch/crc32c.js';

const bytes = (maxLength: number) => fc.uint8Array({ maxLength }).map((u) => Buffer.from(u));
const safeInt = fc.integer({ min: Number.MIN_SAFE_INTEGER, max: Number.MAX_SAFE_INTEGER });
const timestamp = fc.oneof(fc.integer({ min: 0, max: 2 ** 42 }), safeInt, fc.constant(-1));

const recordArb: fc.Arbitrary<Omit<RecordV2Input, 'offsetDelta'>> = fc.record({
  key: fc.option(bytes(40), { nil: null }),
  value: fc.option(bytes(300), { nil: null }),
  headers: fc.array(fc.record({ key: fc.string({ maxLength: 8 }), value: fc.option(bytes(20), { nil: null }) }), { maxLength: 3 }),
  timestamp,
});

const batchArb: fc.Arbitrary<RecordBatchInput> = fc
  .record({
    records: fc.array(recordArb, { minLength: 1, maxLength: 12 }),
    gaps: fc.array(fc.integer({ min: 1, max: 1000 }), { minLength: 12, maxLength: 12 }),
    baseOffset: fc.integer({ min: 0, max: Number.MAX_SAFE_INTEGER - 2 ** 31 }),
    partitionLeaderEpoch: fc.integer({ min: -1, max: 0x7fffffff }),
    producerId: fc.oneof(fc.constant(-1), fc.maxSafeInteger()),
    producerEpoch: fc.integer({ min: -1, max: 0x7fff }),
    baseSequence: fc.integer({ min: -1, max: 0x7fffffff }),
    transactional: fc.boolean(),
    compression: fc.constantFrom('none' as const, 'gzip' as const),
    withGaps: fc.boolean(),
  })
  .map(({ records, gaps, withGaps, ...rest }) => {
    let od = -1;
    return { ...rest, records: records.map((r, i) => ({ ...r, offsetDelta: withGaps ? (od += gaps[i]!) : (od += 1) })) };
  });

function reasonOf(fn: () => unknown): RecordBatchErrorReason | 'none' {
  try {
    fn();
    return 'none';
  } catch (err) {
    if (!(err instanceof RecordBatchError)) throw err;
    return err.reason;
  }
}

function expectSame(input: RecordBatchInput, buf: Buffer): void {
  const view = new RecordBatchView(buf).validate();
  const d = view.decode();
  const n = input.records.length;
  expect(d.recordCount).toBe(n);
  expect(d.magic).toBe(2);
  expect(d.baseOffset).toBe(input.baseOffset ?? 0);
  expect(d.partitionLeaderEpoch).toBe(input.partitionLeaderEpoch ?? -1);
  expect(d.producerId).toBe(input.producerId ?? -1);
  expect(d.producerEpoch).toBe(input.producerEpoch ?? -1);
  expect(d.baseSequence).toBe(input.baseSequence ?? -1);
  expect(d.isTransactional).toBe(input.transactional === true);
  expect(d.isControl).toBe(false);
  expect(d.compression).toBe(input.compression ?? 'none');
  expect(d.baseTimestamp).toBe(input.records[0]!.timestamp);
  expect(d.maxTimestamp).toBe(Math.max(...input.records.map((r) => r.timestamp!)));
  expect(d.lastOffsetDelta).toBe(input.records[n - 1]!.offsetDelta);
  expect(d.records.length).toBe(n);
  for (let i = 0; i < n; i++) {
    const r = input.records[i]!;
    const got = d.records[i]!;
    expect(got.offsetDelta).toBe(r.offsetDelta);
    expect(got.offset).toBe(d.baseOffset + r.offsetDelta!);
    expect(got.timestamp).toBe(r.timestamp);
    expect(got.key).toEqual(r.key);
    expect(got.value).toEqual(r.value);
    expect(got.headers).toEqual(r.headers ?? []);
  }
}

describe('RecordBatch v2 round trip', () => {
  it('random batches (null key/value, headers, large and negative timestamp deltas, offset gaps, gzip) decode to their input', () => {
    fc.assert(
      fc.property(batchArb, (input) => {
        expectSame(input, encodeRecordBatch(input));
      }),
      { numRuns: 400 },
    );
  });

  it('the asynchronous encoder writes the same batch', async () => {
    await fc.assert(
      fc.asyncProperty(batchArb, async (input) => {
        expectSame(input, await encodeRecordBatchAsync(input));
        if (input.compression === 'none') expect(await encodeRecordBatchAsync(input)).toEqual(encodeRecordBatch(input));
      }),
      { numRuns: 60 },
    );
  });

  it('timestamp deltas beyond 2^53 (through bigint) still give the exact timestamps', () => {
    const input: RecordBatchInput = {
      records: [
        { key: null, value: Buffer.from('a'), timestamp: Number.MIN_SAFE_INTEGER, offsetDelta: 0 },
        { key: null, value: Buffer.from('b'), timestamp: Number.MAX_SAFE_INTEGER, offsetDelta: 1 },
      ],
    };
    expectSame(input, encodeRecordBatch(input));
  });

  it('an empty batch (as compaction leaves one) is legal and keeps its lastOffsetDelta', () => {
    const buf = encodeRecordBatch({ records: [], baseOffset: 100, lastOffsetDelta: 9, baseTimestamp: 5, producerId: 7, producerEpoch: 2, baseSequence: 40 });
    expect(buf.length).toBe(RECORDS);
    const v = new RecordBatchView(buf).validate();
    expect(v.recordCount).toBe(0);
    expect(v.nextOffset).toBe(110);
    expect(v.decode().records).toEqual([]);
    const gz = new RecordBatchView(encodeRecordBatch({ records: [], compression: 'gzip' })).validate();
    expect(gz.decode().records).toEqual([]);
  });

  it('a log-append-time batch gives every record the maxTimestamp', () => {
    const buf = encodeRecordBatch({
      records: [
        { key: null, value: null, timestamp: 10 },
        { key: null, value: null, timestamp: 20 },
      ],
      timestampType: 1,
      maxTimestamp: 99,
    });
    const d = new RecordBatchView(buf).validate().decode();
    expect(d.timestampType).toBe(1);
    expect(d.records.map((r) => r.timestamp)).toEqual([99, 99]);
  });

  it('refuses input out of range with invalid_input', () => {
    const rec = { key: null, value: null };
    expect(
      reasonOf(() =>
        encodeRecordBatch({
          records: [
            { ...rec, offsetDelta: 1 },
            { ...rec, offsetDelta: 1 },
          ],
        }),
      ),
    ).toBe('invalid_input');
    expect(reasonOf(() => encodeRecordBatch({ records: [rec], producerEpoch: 0x8000 }))).toBe('invalid_input');
    expect(reasonOf(() => encodeRecordBatch({ records: [{ ...rec, timestamp: 2 ** 60 }] }))).toBe('invalid_input');
    expect(reasonOf(() => encodeRecordBatch({ records: [rec, rec], lastOffsetDelta: 0 }))).toBe('invalid_input');
  });
});

describe('RecordBatchView validation', () => {
  const small = encodeRecordBatch({
    records: [
      { key: Buffer.from('k1'), value: Buffer.from('value one'), headers: [{ key: 'h', value: Buffer.from('x') }], timestamp: 1_700_000_000_000 },
      { key: null, value: Buffer.from('v2'), timestamp: 1_699_999_999_000 },
    ],
    producerId: 12,
    producerEpoch: 3,
    baseSequence: 7,
  });

  it('detects a flip of any bit of a small batch, except in baseOffset and partitionLeaderEpoch (outside the CRC)', () => {
    expect(reasonOf(() => new RecordBatchView(small).validate())).toBe('none');
    for (let i = 0; i < small.length; i++) {
      for (let bit = 0; bit < 8; bit++) {
        const b = Buffer.from(small);
        b[i]! ^= 1 << bit;
        const reason = reasonOf(() => new RecordBatchView(b).validate());
        if (i < 8 || (i >= 12 && i < 16)) expect(reason, `byte ${i}`).toBe('none');
        // batchLength: longer runs past the bytes, shorter moves the CRC's range.
        else if (i < 12) expect(['bad_length', 'truncated', 'crc_mismatch', 'bad_record_count'], `byte ${i}`).toContain(reason);
        else if (i === 16) expect(reason).toBe('bad_magic');
        else expect(['crc_mismatch', 'bad_record_count'], `byte ${i} bit ${bit}`).toContain(reason);
      }
    }
  });

  it('detects truncation at every length', () => {
    for (let len = 0; len < small.length; len++) {
      expect(
        reasonOf(() => new RecordBatchView(small.subarray(0, len)).validate()),
        `length ${len}`,
      ).toBe('truncated');
    }
  });

  it('stamps baseOffset and partitionLeaderEpoch in place without touching the CRC', () => {
    fc.assert(
      fc.property(fc.integer({ min: 0, max: Number.MAX_SAFE_INTEGER - 10 }), fc.integer({ min: -1, max: 0x7fffffff }), (offset, epoch) => {
        const b = Buffer.from(small);
        const v = new RecordBatchView(b);
        v.setBaseOffset(offset);
        v.setPartitionLeaderEpoch(epoch);
        expect(b.subarray(CRC)).toEqual(small.subarray(CRC));
        v.validate();
        expect(v.computeCrc()).toBe(v.crc);
        expect(v.baseOffset).toBe(offset);
        expect(v.partitionLeaderEpoch).toBe(epoch);
        expect(v.decode().records.map((r) => r.offset)).toEqual([offset, offset + 1]);
      }),
      { numRuns: 200 },
    );
  });

  it('check() returns what validate() throws, without throwing', () => {
    expect(new RecordBatchView(small).check()).toBeNull();
    const err = new RecordBatchView(small.subarray(0, 70)).check();
    expect(err).toBeInstanceOf(RecordBatchError);
    expect(err?.reason).toBe('truncated');
    expect(err?.fields).toMatchObject({ need: small.length, have: 70 });
  });

  it('lastSequence is baseSequence + lastOffsetDelta, wrapping past 2^31 - 1 as producer sequences do', () => {
    const seq = (baseSequence: number, n: number) =>
      new RecordBatchView(
        encodeRecordBatch({ records: Array.from({ length: n }, () => ({ key: null, value: null })), baseSequence, producerId: 1, producerEpoch: 0 }),
      ).lastSequence;
    expect(seq(7, 3)).toBe(9);
    expect(seq(0x7fffffff - 1, 3)).toBe(0);
    expect(seq(0x7fffffff, 1)).toBe(0x7fffffff);
    expect(seq(-1, 5)).toBe(-1);
  });

  it('works on a batch at an offset inside a larger buffer', () => {
    const big = Buffer.concat([Buffer.alloc(37, 0xee), small, Buffer.alloc(5)]);
    const v = new RecordBatchView(big, 37).validate();
    expect(v.end).toBe(37 + small.length);
    expect(v.decode().records.length).toBe(2);
    expect(v.bytes()).toEqual(small);
  });

  it('reads int64 fields as numbers and refuses one beyond 2^53 precisely', () => {
    const b = Buffer.from(small);
    b.writeBigInt64BE(2n ** 60n, 0);
    const err = (() => {
      try {
        return new RecordBatchView(b).baseOffset;
      } catch (e) {
        return e;
      }
    })();
    expect(err).toBeInstanceOf(RecordBatchError);
    expect((err as RecordBatchError).reason).toBe('int64_out_of_range');
  });

  it('walks records under any int64 baseTimestamp, refusing only a record timestamp beyond 2^53 (timestamp_out_of_range)', () => {
    const stamped = (b: Buffer, at: number, v: bigint) => recrc(b, (x) => x.writeBigInt64BE(v, at));
    const one = encodeRecordBatch({ records: [{ key: null, value: Buffer.from('x'), timestamp: 5 }] });
    // The delta -(2^54 - 2) (a record at -(2^53 - 1) under a base of 2^53 - 1), under a base of 2^54: 2.
    const far = encodeRecordBatch({ baseTimestamp: Number.MAX_SAFE_INTEGER, records: [{ key: null, value: null, timestamp: Number.MIN_SAFE_INTEGER }] });
    const first = (b: Buffer) => {
      let ts: number | undefined;
      new RecordBatchView(b).forEachRecord((r) => void (ts ??= r.timestamp));
      return ts;
    };
    expect(first(stamped(far, 27, 2n ** 54n))).toBe(2);
    expect(reasonOf(() => new RecordBatchView(stamped(one, 27, 2n ** 60n)).forEachRecord(() => {}))).toBe('timestamp_out_of_range');
    expect(reasonOf(() => new RecordBatchView(stamped(one, 27, -(2n ** 63n))).forEachRecord(() => {}))).toBe('timestamp_out_of_range');
    // A log-append-time batch goes by its maxTimestamp alone.
    const logAppend = encodeRecordBatch({ records: [{ key: null, value: null, timestamp: 1 }], timestampType: 1, maxTimestamp: 7 });
    expect(first(stamped(logAppend, 27, 2n ** 62n))).toBe(7);
    expect(reasonOf(() => new RecordBatchView(stamped(logAppend, 35, 2n ** 60n)).forEachRecord(() => {}))).toBe('timestamp_out_of_range');
  });

  it('errors are TributaryErrors with the stable code invalid_batch and the reason in their fields', () => {
    const b = Buffer.from(small);
    b[b.length - 1]! ^= 1;
    try {
      new RecordBatchView(b).validate();
      expect.unreachable();
    } catch (err) {
      expect(err).toBeInstanceOf(TributaryError);
      expect((err as TributaryError).code).toBe('invalid_batch');
      expect((err as TributaryError).fields.reason).toBe('crc_mismatch');
      expect((err as TributaryError).retriable).toBe(false);
    }
  });

  /** A copy of `buf` with its CRC recomputed after `edit`, so only the record walk can find the damage. */
  function recrc(buf: Buffer, edit: (b: Buffer) => void): Buffer {
    const b = Buffer.from(buf);
    edit(b);
    b.writeUInt32BE(crc32cPure(b.subarray(ATTRIBUTES)), CRC);
    return b;
  }

  it('the record walk refuses records that do not fit their length or the batch, even under a good CRC', () => {
    const walk = (b: Buffer) => reasonOf(() => new RecordBatchView(b).validate().forEachRecord(() => {}));
    // The first record's length varint (a small positive length) made larger or smaller.
    expect(walk(recrc(small, (b) => (b[RECORDS]! += 2)))).toBe('bad_record');
    expect(walk(recrc(small, (b) => (b[RECORDS]! -= 2)))).toBe('bad_record');
    // One record fewer declared than present, and one more.
    expect(walk(recrc(small, (b) => b.writeInt32BE(1, RECORDS - 4)))).toBe('bad_record_count');
    expect(walk(recrc(small, (b) => b.writeInt32BE(3, RECORDS - 4)))).toBe('bad_record_count');
  });
});

describe('hostile input', () => {
  it('random mutations under a recomputed CRC either decode or throw RecordBatchError, nothing else', () => {
    fc.assert(
      fc.property(
        batchArb,
        fc.array(fc.tuple(fc.nat(), fc.integer({ min: 0, max: 255 })), { minLength: 1, maxLength: 6 }),
        (input, edits) => {
          const b = Buffer.from(encodeRecordBatch({ ...input, compression: 'none' }));
          // Mutate the header after the CRC and the records, then make the CRC agree, so the walk sees it.
          for (const [pos, byte] of edits) b[ATTRIBUTES + 2 + (pos % (b.length - ATTRIBUTES - 2))] = byte;
          b.writeUInt32BE(crc32cPure(b.subarray(ATTRIBUTES)), CRC);
          try {
            const v = new RecordBatchView(b).validate();
            v.decode();
          } catch (err) {
            if (!(err instanceof RecordBatchError)) throw err;
          }
        },
      ),
      { numRuns: 500 },
    );
  });
});

describe('record walk', () => {
  const input: RecordBatchInput = {
    records: Array.from({ length: 10 }, (_, i) => ({ key: Buffer.from(`k${i}`), value: Buffer.alloc(i * 10, i), timestamp: 1000 + i })),
  };
  const buf = encodeRecordBatch(input);

  it('gives offsets, timestamps and slices through one reused cursor, and stops when asked', () => {
    const v = new RecordBatchView(buf).validate();
    const seen: number[] = [];
    let cursor: unknown;
    const visited = v.forEachRecord((r) => {
      cursor ??= r;
      expect(r).toBe(cursor);
      seen.push(r.offset);
      expect(r.timestamp).toBe(1000 + r.index);
      expect(r.valueLength).toBe(r.index * 10);
      expect(buf.subarray(r.keyStart, r.keyStart + r.keyLength).toString()).toBe(`k${r.index}`);
      // The record's bytes are the batch's own: no copy.
      expect(r.data).toBe(buf);
      return r.index < 4;
    });
    expect(visited).toBe(5);
    expect(seen).toEqual([0, 1, 2, 3, 4]);
  });

  it('walks a gzip batch decompressed ahead (asynchronously)', async () => {
    const gz = encodeRecordBatch({ ...input, compression: 'gzip' });
    const v = new RecordBatchView(gz).validate();
    const data = await v.recordsDataAsync();
    let n = 0;
    v.forEachRecord((r) => {
      expect(r.value()).toEqual(Buffer.alloc(r.index * 10, r.index));
      n++;
    }, data);
    expect(n).toBe(10);
  });
});

describe('compression table', () => {
  const recs = [{ key: null, value: Buffer.alloc(200, 1), timestamp: 1 }];

  it('refuses zstd with unsupported_compression, on encode and on read', () => {
    expect(reasonOf(() => encodeRecordBatch({ records: recs, compression: 'zstd' }))).toBe('unsupported_compression');
    const b = encodeRecordBatch({ records: recs });
    const z = recrcAttr(b, 4);
    const v = new RecordBatchView(z).validate();
    expect(v.compression).toBe('zstd');
    expect(reasonOf(() => v.decode())).toBe('unsupported_compression');
    expect(reasonOf(() => new RecordBatchView(recrcAttr(b, 6)).validate().forEachRecord(() => {}))).toBe('unknown_compression');
  });

  it('snappy and lz4 are refused until a codec is registered, then used', () => {
    expect(reasonOf(() => encodeRecordBatch({ records: recs, compression: 'lz4' }))).toBe('unsupported_compression');
    // A stand-in codec (reversing the bytes) shows the table is consulted both ways.
    registerCompressionCodec('lz4', { compress: (d) => Buffer.from(d).reverse(), decompress: (d) => Buffer.from(d).reverse() });
    const b = encodeRecordBatch({ records: [{ key: Buffer.from('k'), value: Buffer.from('v'), timestamp: 5 }], compression: 'lz4' });
    const d = new RecordBatchView(b).validate().decode();
    expect(d.compression).toBe('lz4');
    expect(d.records[0]!.value).toEqual(Buffer.from('v'));
  });

  it('bounds decompression and reports a broken stream', () => {
    const gz = encodeRecordBatch({ records: [{ key: null, value: Buffer.alloc(100_000), timestamp: 1 }], compression: 'gzip' });
    const v = new RecordBatchView(gz).validate();
    expect(reasonOf(() => v.recordsData(10_000))).toBe('decompression_failed');
    expect(v.recordsData().length).toBeGreaterThan(100_000);
    const broken = recrcTail(gz);
    expect(reasonOf(() => new RecordBatchView(broken).validate().decode())).toBe('decompression_failed');
  });

  function recrcAttr(buf: Buffer, compression: number): Buffer {
    const b = Buffer.from(buf);
    b.writeInt16BE((b.readInt16BE(ATTRIBUTES) & ~7) | compression, ATTRIBUTES);
    b.writeUInt32BE(crc32cPure(b.subarray(ATTRIBUTES)), CRC);
    return b;
  }

  function recrcTail(buf: Buffer): Buffer {
    const b = Buffer.from(buf);
    for (let i = RECORDS + 12; i < RECORDS + 20; i++) b[i] = 0x55;
    b.writeUInt32BE(crc32cPure(b.subarray(ATTRIBUTES)), CRC);
    return b;
  }
});

describe('control batches', () => {
  it('encode COMMIT and ABORT markers that read back, with the transactional and control bits', () => {
    for (const type of ['COMMIT', 'ABORT'] as const) {
      const b = encodeControlBatch({ type, coordinatorEpoch: 42, producerId: 9001, producerEpoch: 4, baseOffset: 77, timestamp: 123 });
      const v = new RecordBatchView(b).validate();
      expect(v.isControl).toBe(true);
      expect(v.isTransactional).toBe(true);
      expect(v.baseSequence).toBe(-1);
      expect(v.recordCount).toBe(1);
      expect(v.producerId).toBe(9001);
      expect(v.controlRecord()).toEqual({ type, typeId: type === 'COMMIT' ? 1 : 0, coordinatorEpoch: 42 });
    }
  });

  it('an unknown control type is reported as such; a short key is refused', () => {
    expect(parseControlRecord(Buffer.from([0, 0, 0, 3]), null)).toEqual({ type: 'UNKNOWN', typeId: 3, coordinatorEpoch: -1 });
    expect(reasonOf(() => parseControlRecord(Buffer.from([0, 0]), null))).toBe('bad_control_record');
    expect(reasonOf(() => parseControlRecord(Buffer.from([0, 0, 0, 1]), Buffer.from([0, 0])))).toBe('bad_control_record');
    const data = new RecordBatchView(encodeRecordBatch({ records: [{ key: null, value: null }] })).validate();
    expect(reasonOf(() => data.controlRecord())).toBe('bad_control_record');
  });
});

import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { RecordBatchError } from 'tributary-protocol/record-batch/errors.js';
import {
  readVarint,
  readVarlong,
  readVarlongBig,
  sizeOfVarint,
  sizeOfVarlong,
  varEnd,
  writeVarint,
  writeVarlong,
} from 'tributary-protocol/record-batch/varint.js';

function enc(v: number, long = false): number[] {
  const b = Buffer.alloc(10);
  const n = long ? writeVarlong(b, 0, v) : writeVarint(b, 0, v);
  return [...b.subarray(0, n)];
}

describe('zigzag varints', () => {
  it('writes the known encodings', () => {
    expect(enc(0)).toEqual([0x00]);
    expect(enc(-1)).toEqual([0x01]);
    expect(enc(1)).toEqual([0x02]);
    expect(enc(63)).toEqual([0x7e]);
    expect(enc(-64)).toEqual([0x7f]);
    expect(enc(64)).toEqual([0x80, 0x01]);
    expect(enc(0x7fffffff)).toEqual([0xfe, 0xff, 0xff, 0xff, 0x0f]);
    expect(enc(-0x80000000)).toEqual([0xff, 0xff, 0xff, 0xff, 0x0f]);
    // The same values as varlongs, then past 32 bits.
    expect(enc(-0x80000000, true)).toEqual([0xff, 0xff, 0xff, 0xff, 0x0f]);
    expect(enc(2 ** 32, true)).toEqual([0x80, 0x80, 0x80, 0x80, 0x20]);
  });

  it('int32 round trip, with the size it announced', () => {
    fc.assert(
      fc.property(fc.integer({ min: -0x80000000, max: 0x7fffffff }), (v) => {
        const b = Buffer.alloc(5);
        const n = writeVarint(b, 0, v);
        expect(n).toBe(sizeOfVarint(v));
        expect(readVarint(b, 0, n)).toBe(v);
        expect(varEnd.pos).toBe(n);
      }),
      { numRuns: 2000 },
    );
  });

  it('varlong round trip over the safe range on numbers and the full int64 range through bigint', () => {
    fc.assert(
      fc.property(fc.oneof(fc.integer({ min: -1000, max: 1000 }), fc.maxSafeInteger(), fc.integer({ min: Number.MIN_SAFE_INTEGER, max: 0 })), (v) => {
        const b = Buffer.alloc(10);
        const n = writeVarlong(b, 0, v);
        expect(n).toBe(sizeOfVarlong(v));
        expect(readVarlong(b, 0, n)).toBe(v);
        expect(varEnd.pos).toBe(n);
        expect(readVarlongBig(b, 0, n)).toBe(BigInt(v));
      }),
      { numRuns: 3000 },
    );
    fc.assert(
      fc.property(fc.bigInt({ min: -(2n ** 63n), max: 2n ** 63n - 1n }), (v) => {
        const b = Buffer.alloc(10);
        const n = writeVarlong(b, 0, v);
        expect(n).toBe(sizeOfVarlong(v));
        expect(readVarlongBig(b, 0, n)).toBe(v);
        const asNumber = readVarlong(b, 0, n);
        if (Number.isSafeInteger(Number(v)) && BigInt(Number(v)) === v) expect(asNumber).toBe(Number(v));
        else expect(asNumber).toBe(v);
      }),
      { numRuns: 3000 },
    );
  });

  it('refuses a varint that runs past its end or past 32 / 64 bits', () => {
    const b = Buffer.from([0x80, 0x80]);
    expect(() => readVarint(b, 0, 2)).toThrow(RecordBatchError);
    expect(() => readVarint(Buffer.from([0xff, 0xff, 0xff, 0xff, 0x1f]), 0, 5)).toThrow(/longer than 32 bits/);
    expect(() => readVarlong(Buffer.from([0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02]), 0, 10)).toThrow(/longer than 64 bits/);
    expect(() => readVarlong(Buffer.from([0xff, 0xff, 0xff]), 0, 3)).toThrow(/runs past/);
  });
});

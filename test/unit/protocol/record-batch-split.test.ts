import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { encodeControlBatch } from 'tributary-protocol/record-batch/control.js';
import { encodeRecordBatch } from 'tributary-protocol/record-batch/encode.js';
import { splitRecordBatches } from 'tributary-protocol/record-batch/split.js';
import { RecordBatchView } from 'tributary-protocol/record-batch/view.js';

/** A log of `n` batches with consecutive offsets, as a segment would hold them. */
function log(sizes: number[]): { buf: Buffer; ends: number[] } {
  const parts: Buffer[] = [];
  const ends: number[] = [];
  let offset = 0;
  let end = 0;
  for (const [i, n] of sizes.entries()) {
    const b =
      n === 0
        ? encodeControlBatch({ type: 'COMMIT', coordinatorEpoch: 1, producerId: 5, producerEpoch: 0, baseOffset: offset })
        : encodeRecordBatch({
            baseOffset: offset,
            compression: i % 3 === 2 ? 'gzip' : 'none',
            records: Array.from({ length: n }, (_, j) => ({ key: null, value: Buffer.alloc(j * 3, i), timestamp: 1000 + j })),
          });
    offset = new RecordBatchView(b).nextOffset;
    parts.push(b);
    end += b.length;
    ends.push(end);
  }
  return { buf: Buffer.concat(parts), ends };
}

describe('splitRecordBatches', () => {
  it('splits a log into its batches, in order, with nothing left over', () => {
    const { buf, ends } = log([3, 1, 0, 7, 2]);
    const s = splitRecordBatches(buf);
    expect(s.stop).toBeNull();
    expect(s.validEnd).toBe(buf.length);
    expect(s.batches.map((v) => v.end)).toEqual(ends);
    expect(s.batches.map((v) => v.baseOffset)).toEqual([0, 3, 4, 5, 12]);
    expect(s.batches[2]!.controlRecord().type).toBe('COMMIT');
    expect(s.batches.map((v) => v.decode().records.length)).toEqual([3, 1, 1, 7, 2]);
  });

  it('reports a torn last batch at every cut, keeping the whole batches before it', () => {
    const { buf, ends } = log([2, 4, 3]);
    const lastStart = ends[1]!;
    for (let cut = lastStart; cut < buf.length; cut++) {
      const s = splitRecordBatches(buf.subarray(0, cut));
      expect(s.batches.length, `cut ${cut}`).toBe(2);
      expect(s.validEnd).toBe(lastStart);
      if (cut === lastStart) expect(s.stop).toBeNull();
      else expect(s.stop?.reason, `cut ${cut}`).toBe('truncated');
    }
  });

  it('stops at a corrupt batch in the middle and says why and where', () => {
    const { buf, ends } = log([2, 4, 3]);
    const b = Buffer.from(buf);
    b[ends[0]! + 70]! ^= 0x10;
    const s = splitRecordBatches(b);
    expect(s.batches.length).toBe(1);
    expect(s.validEnd).toBe(ends[0]);
    expect(s.stop?.reason).toBe('crc_mismatch');
    expect(s.stop?.at).toBe(ends[0]);
    // Without the CRC check the damage is not seen at this level.
    expect(splitRecordBatches(b, { verifyCrc: false }).stop).toBeNull();
    // A zeroed length (a preallocated, never written region) is not a torn tail.
    const z = Buffer.concat([buf.subarray(0, ends[0]), Buffer.alloc(64)]);
    expect(splitRecordBatches(z).stop?.reason).toBe('bad_length');
  });

  it('any prefix of any log: whole batches kept, the rest reported as truncated', () => {
    fc.assert(
      fc.property(fc.array(fc.integer({ min: 0, max: 6 }), { minLength: 1, maxLength: 6 }), fc.nat(), (sizes, x) => {
        const { buf, ends } = log(sizes);
        const cut = x % (buf.length + 1);
        const s = splitRecordBatches(buf.subarray(0, cut));
        const whole = ends.filter((e) => e <= cut);
        expect(s.batches.map((v) => v.end)).toEqual(whole);
        expect(s.validEnd).toBe(whole.at(-1) ?? 0);
        expect(s.stop?.reason ?? 'none').toBe(s.validEnd === cut ? 'none' : 'truncated');
      }),
      { numRuns: 300 },
    );
  });

  it('starts and ends where told', () => {
    const { buf, ends } = log([1, 1, 1]);
    const s = splitRecordBatches(buf, { start: ends[0], end: ends[1] });
    expect(s.batches.length).toBe(1);
    expect(s.batches[0]!.start).toBe(ends[0]);
    expect(s.stop).toBeNull();
  });
});

/**
 * The producer's run path (docs/sdk.md "Producer"): a run of plain messages appended in one call
 * (RecordAccumulator.appendRun, BatchFrameBuilder.appendValue) makes the same batches, frames, owners
 * and outcomes as appending them record by record (appendTo), across batch limits.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { BatchFrameBuilder } from 'tributary-protocol/batch-frame-builder.js';
import { type ProducerMessage, RECORD_BASE_BYTES, plainRunEnd } from 'tributary-client/producer-messages.js';
import { APPENDED_CLOSED_BATCH, APPENDED_NEW_BATCH, RUN_COUNT_UNIT, RecordAccumulator, type RecordSink } from 'tributary-client/record-accumulator.js';

const sinkOf = (name: string): RecordSink & { name: string } => ({ name, settle: () => {} });

const valueArb = fc.oneof(
  fc.uint8Array({ maxLength: 300 }).map((u) => Buffer.from(u)),
  fc.string({ unit: 'grapheme', maxLength: 40 }),
);

function size(v: Buffer | string): number {
  return RECORD_BASE_BYTES + (typeof v === 'string' ? Buffer.byteLength(v) : v.length);
}

describe('appendRun', () => {
  it('property: the same batches, frames, owners and outcomes as appendTo record by record', () => {
    fc.assert(
      fc.property(
        fc.array(fc.array(valueArb, { minLength: 1, maxLength: 30 }), { minLength: 1, maxLength: 6 }),
        fc.integer({ min: 200, max: 4000 }),
        fc.oneof(fc.constant(Number.POSITIVE_INFINITY), fc.integer({ min: 1, max: 12 })),
        fc.constantFrom('', 'producer-7'),
        (sends, maxBatchBytes, maxBatchRecords, producerId) => {
          const byRun = new RecordAccumulator({ maxBatchBytes, maxBatchRecords, producerId });
          const byRecord = new RecordAccumulator({ maxBatchBytes, maxBatchRecords, producerId });
          const qRun = byRun.queue('t', 3);
          const qRecord = byRecord.queue('t', 3);
          // Each call's bits say what it did: a batch started (the caller arms its linger), one closed (it sends).
          const checkBits = (q: typeof qRun, append: () => number): number => {
            const before = [q.batches.length, q.batches.filter((b) => b.closed).length];
            const r = append();
            expect((r & APPENDED_NEW_BATCH) !== 0).toBe(q.batches.length > before[0]!);
            expect((r & APPENDED_CLOSED_BATCH) !== 0).toBe(q.batches.filter((b) => b.closed).length > before[1]!);
            return r;
          };
          sends.forEach((values, s) => {
            const sink = sinkOf(`send${s}`);
            const messages: ProducerMessage[] = values.map((value) => ({ value, partition: 3 }));
            const sizes = values.map(size);
            for (let i = 0; i < messages.length; ) {
              const n = Math.floor(checkBits(qRun, () => byRun.appendRun(qRun, messages, sizes, i, messages.length, sink, 1)) / RUN_COUNT_UNIT);
              expect(n).toBeGreaterThanOrEqual(1);
              i += n;
            }
            values.forEach((v, i) => {
              const len = typeof v === 'string' ? Buffer.byteLength(v) : v.length;
              checkBits(qRecord, () => byRecord.appendTo(qRecord, null, v, len, 0, undefined, sizes[i]!, sink, i, 1));
            });
          });
          expect(qRun.batches.length).toBe(qRecord.batches.length);
          qRun.batches.forEach((b, k) => {
            const o = qRecord.batches[k]!;
            expect([b.count, b.closed, b.bytes, b.reserved]).toEqual([o.count, o.closed, o.bytes, o.reserved]);
            expect([b.runFirst, b.runCount, b.sinks]).toEqual([o.runFirst, o.runCount, o.sinks]);
            expect(b.frame.frame(false, 0, 0, true).equals(o.frame.frame(false, 0, 0, true))).toBe(true);
          });
        },
      ),
      { numRuns: 300 },
    );
  });

  it('an append that throws part-way leaves the records before it accounted for (owners, bytes)', () => {
    const acc = new RecordAccumulator({ maxBatchBytes: 1 << 20, maxBatchRecords: Number.POSITIVE_INFINITY });
    const q = acc.queue('t', 0);
    const sink = sinkOf('send');
    const v = Buffer.alloc(10);
    const messages: ProducerMessage[] = [{ value: v }, { value: v }, { value: 'abc' }];
    // A string's length that is not its UTF-8 length: the builder refuses it as it writes it.
    const sizes = [size(v), size(v), RECORD_BASE_BYTES + 5];
    expect(() => acc.appendRun(q, messages, sizes, 0, 3, sink)).toThrow(/UTF-8 length/);
    const [b] = q.batches;
    expect([b!.count, b!.runFirst, b!.runCount, b!.sinks]).toEqual([2, [0], [2], [sink]]);
    expect(b!.reserved).toBe(2 * size(v));
  });

  it('appendValue writes what append writes for a record without key, timestamp or headers', () => {
    fc.assert(
      fc.property(fc.array(valueArb, { maxLength: 20 }), fc.constantFrom('', 'p-1'), (values, pid) => {
        const a = new BatchFrameBuilder('orders', 1, 'all', Buffer.from(pid), 8);
        const b = new BatchFrameBuilder('orders', 1, 'all', Buffer.from(pid), 8);
        for (const v of values) {
          const len = typeof v === 'string' ? Buffer.byteLength(v) : v.length;
          a.appendValue(v, len);
          b.append(null, v, len, 0, undefined);
        }
        expect(a.frame(false, 0, 0, true).equals(b.frame(false, 0, 0, true))).toBe(true);
        expect([a.count, a.extended]).toEqual([b.count, false]);
      }),
      { numRuns: 200 },
    );
  });
});

describe('plainRunEnd', () => {
  it('ends a run at a key, headers, timestamp or another partition', () => {
    const v = Buffer.from('x');
    const ms: ProducerMessage[] = [
      { value: v, partition: 1 },
      { value: v, partition: 1 },
      { value: v, partition: 2 },
      { value: v },
      { value: v },
      { value: v, key: 'k' },
      { value: v, key: null },
      { value: v, headers: {} },
      { value: v, timestamp: 5 },
      { value: v },
    ];
    expect(plainRunEnd(ms, 0, ms.length)).toBe(2);
    expect(plainRunEnd(ms, 2, ms.length)).toBe(3);
    expect(plainRunEnd(ms, 3, ms.length)).toBe(5);
    expect(plainRunEnd(ms, 6, ms.length)).toBe(7); // key null is no key
    expect(plainRunEnd(ms, 3, 4)).toBe(4);
  });
});

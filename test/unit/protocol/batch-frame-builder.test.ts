/**
 * BatchFrameBuilder (the SDK producer's in-place batch frames): byte for byte what
 * encodeFrame(encodeBatch(...)) writes for the same records, with and without record_extensions_v1,
 * numbered in place (and renumbered), through buffer growth and reuse.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { type Acks, type BatchRecord, decodeBatch, encodeBatch } from 'tributary-protocol/batch.js';
import { BatchFrameBuilder, RECORD_FIXED_BYTES } from 'tributary-protocol/batch-frame-builder.js';
import { encodeFrame } from 'tributary-protocol/frame.js';
import type { RecordHeader } from 'tributary-protocol/record.js';

interface Input {
  key: Buffer | null;
  value: Buffer | string;
  timestamp: number;
  headers: RecordHeader[];
}

const bytes = (maxLength: number) => fc.uint8Array({ maxLength }).map((u) => Buffer.from(u));
const inputArb = (ext: boolean): fc.Arbitrary<Input> =>
  fc.record({
    key: fc.option(bytes(40).filter((b) => b.length > 0), { nil: null }),
    value: fc.oneof(bytes(300), fc.string({ unit: 'grapheme', maxLength: 60 })),
    timestamp: ext ? fc.integer({ min: 0, max: Number.MAX_SAFE_INTEGER }) : fc.constant(0),
    headers: ext ? fc.array(fc.record({ key: fc.string({ unit: 'grapheme', maxLength: 12 }), value: bytes(24) }), { maxLength: 3 }) : fc.constant([]),
  });

function build(topic: string, partition: number, acks: Acks, pid: string, inputs: Input[], capacity = 16, reuse?: Buffer, limit?: number): BatchFrameBuilder {
  const b = new BatchFrameBuilder(topic, partition, acks, Buffer.from(pid), capacity, reuse, limit);
  for (const r of inputs) {
    const valueLen = typeof r.value === 'string' ? Buffer.byteLength(r.value) : r.value.length;
    b.append(r.key, r.value, valueLen, r.timestamp, r.headers.length > 0 ? r.headers : undefined);
  }
  return b;
}

/** The records encodeBatch gets for the same inputs (what the SDK sent before the builder). */
function records(inputs: Input[], pid: string, epoch: number, firstSequence: number): BatchRecord[] {
  return inputs.map((r, i) => ({
    offset: 0,
    sequence: firstSequence < 0 ? 0 : firstSequence + i,
    producerId: pid,
    key: r.key,
    epoch,
    value: typeof r.value === 'string' ? Buffer.from(r.value) : r.value,
    timestamp: r.timestamp,
    attributes: 0,
    headers: r.headers,
  }));
}

describe('BatchFrameBuilder', () => {
  it('property: the frame is encodeFrame(encodeBatch(...)) of the same records, with record_extensions_v1', () => {
    fc.assert(
      fc.property(fc.string({ maxLength: 30 }), fc.integer({ min: 0, max: 1000 }), fc.constantFrom<Acks>('0', '1', 'all'), fc.array(inputArb(true), { maxLength: 20 }), (topic, partition, acks, inputs) => {
        const b = build(topic, partition, acks, '', inputs);
        const expected = encodeFrame(encodeBatch({ topic, partition, acks, idempotent: false, firstSequence: 0, lastSequence: 0, records: records(inputs, '', -1, -1) }, { extensions: true }));
        expect(b.frame(false, 0, 0, true).equals(expected)).toBe(true);
        expect(b.count).toBe(inputs.length);
        expect(b.extended).toBe(inputs.some((r) => r.timestamp > 0 || r.headers.length > 0));
      }),
      { numRuns: 300 },
    );
  });

  it('property: without extensions the copy drops timestamp, attributes and header count per record', () => {
    fc.assert(
      fc.property(fc.string({ maxLength: 30 }), fc.array(inputArb(false), { maxLength: 20 }), (topic, inputs) => {
        const b = build(topic, 7, '1', '', inputs);
        const expected = encodeFrame(encodeBatch({ topic, partition: 7, acks: '1', idempotent: false, firstSequence: 0, lastSequence: 0, records: records(inputs, '', -1, -1) }));
        expect(b.frame(false, 0, 0, false).equals(expected)).toBe(true);
        // the builder's own buffer still holds the extension form
        expect(decodeBatch(b.frame(false, 0, 0, true).subarray(4), { extensions: true }).records).toHaveLength(inputs.length);
      }),
      { numRuns: 200 },
    );
  });

  it('property: idempotent numbers are stamped in place, and stamped again on renumbering', () => {
    fc.assert(
      fc.property(
        fc.array(inputArb(true), { minLength: 1, maxLength: 15 }),
        fc.integer({ min: 0, max: 1_000_000 }),
        fc.integer({ min: 0, max: 1000 }),
        (inputs, first, epoch) => {
          const pid = 'f47ac10b-58cc-4372-a567-0e02b2c3d479';
          const b = build('orders', 3, 'all', pid, inputs);
          b.setNumbers(epoch, first);
          const last = first + inputs.length - 1;
          const frame = (f: number, e: number) =>
            encodeFrame(encodeBatch({ topic: 'orders', partition: 3, acks: 'all', idempotent: true, firstSequence: f, lastSequence: f + inputs.length - 1, records: records(inputs, pid, e, f) }, { extensions: true }));
          expect(b.frame(true, first, last, true).equals(frame(first, epoch))).toBe(true);
          // a retry in a newer epoch from sequence 0
          b.setNumbers(epoch + 1, 0);
          expect(b.frame(true, 0, inputs.length - 1, true).equals(frame(0, epoch + 1))).toBe(true);
        },
      ),
      { numRuns: 200 },
    );
  });

  it('property: a run of records copied into another builder (appendEncoded of encodedRecords) is the frame of that run', () => {
    fc.assert(
      fc.property(fc.array(inputArb(true), { minLength: 1, maxLength: 12 }), fc.nat(), fc.nat(), (inputs, a, b) => {
        const from = a % inputs.length;
        const count = 1 + (b % (inputs.length - from));
        const pid = 'p-17';
        const whole = build('orders', 2, 'all', pid, inputs);
        whole.setNumbers(4, 100); // numbers stamped on the source are stamped again on the copy
        const part = new BatchFrameBuilder('orders', 2, 'all', Buffer.from(pid), 8);
        part.appendEncoded(whole.encodedRecords(from, count), count, whole.extended);
        part.setNumbers(0, 7);
        const run = inputs.slice(from, from + count);
        const expected = encodeFrame(encodeBatch({ topic: 'orders', partition: 2, acks: 'all', idempotent: true, firstSequence: 7, lastSequence: 6 + count, records: records(run, pid, 0, 7) }, { extensions: true }));
        expect(part.frame(true, 7, 6 + count, true).equals(expected)).toBe(true);
        expect(part.count).toBe(count);
      }),
      { numRuns: 200 },
    );
  });

  it('grows by doubling up to its limit, and writes into a reused buffer', () => {
    const inputs: Input[] = Array.from({ length: 50 }, (_, i) => ({ key: i % 3 === 0 ? null : Buffer.from(`k${i}`), value: 'x'.repeat(i), timestamp: 0, headers: [] }));
    const expected = encodeFrame(encodeBatch({ topic: 't', partition: 0, acks: 'all', idempotent: false, firstSequence: 0, lastSequence: 0, records: records(inputs, '', -1, -1) }, { extensions: true }));
    const limit = expected.length + 10;
    const grown = build('t', 0, 'all', '', inputs, 8, undefined, limit);
    expect(grown.frame(false, 0, 0, true).equals(expected)).toBe(true);
    const buf = grown.detach();
    expect(buf.length).toBeLessThanOrEqual(limit);
    expect(grown.length).toBe(0);
    // a spare buffer (with stale bytes) is written over, not appended to
    buf.fill(0xee);
    const reused = build('t', 0, 'all', '', inputs, 64, buf);
    const frame = reused.frame(false, 0, 0, true);
    expect(frame.buffer).toBe(buf.buffer);
    expect(frame.equals(expected)).toBe(true);
    // a spare too small for the asked capacity is not used
    const tooSmall = Buffer.alloc(100);
    const small = build('t', 0, 'all', '', inputs.slice(0, 1), 4096, tooSmall);
    expect(small.frame(false, 0, 0, true).buffer).not.toBe(tooSmall.buffer);
  });

  it('past half its limit it grows straight to the limit, not to a size a little short of it', () => {
    const b = new BatchFrameBuilder('t', 0, '1', Buffer.alloc(0), 1024, undefined, 10_000);
    const sizes = new Set<number>();
    while (b.length + 100 + RECORD_FIXED_BYTES <= 10_000) {
      b.append(null, Buffer.alloc(100), 100, 0, undefined);
      sizes.add(b.capacity);
    }
    expect([...sizes]).toEqual([1024, 2048, 4096, 10_000]);
  });

  it('a string value is written as UTF-8 of the measured length', () => {
    const b = new BatchFrameBuilder('t', 0, '1', Buffer.alloc(0), 16);
    b.append(null, 'ü€😀', Buffer.byteLength('ü€😀'), 0, undefined);
    const [r] = decodeBatch(b.frame(false, 0, 0, true).subarray(4), { extensions: true }).records;
    expect(r!.value.toString()).toBe('ü€😀');
    expect(r!.key).toBeNull();
    expect(() => new BatchFrameBuilder('t', 0, '1', Buffer.alloc(0), 16).append(null, 'ü', 1, 0, undefined)).toThrow('UTF-8 length');
  });
});

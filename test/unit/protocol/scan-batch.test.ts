import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { type Batch, type BatchRecord, decodeBatch, encodeBatch, scanBatch } from 'tributary-protocol/batch.js';

const safeNat = fc.integer({ min: 0, max: Number.MAX_SAFE_INTEGER });
const safeInt = fc.integer({ min: Number.MIN_SAFE_INTEGER, max: Number.MAX_SAFE_INTEGER });
const bytes = (maxLength: number) => fc.uint8Array({ maxLength }).map((u) => Buffer.from(u));

const recordArb: fc.Arbitrary<BatchRecord> = fc.record({
  offset: safeNat,
  sequence: safeNat,
  producerId: fc.string({ unit: 'binary', maxLength: 8 }),
  key: fc.option(bytes(20), { nil: null }),
  epoch: fc.oneof(fc.constant(-1), safeInt),
  value: bytes(40),
  timestamp: fc.oneof(fc.constant(0), safeInt),
  attributes: fc.integer({ min: 0, max: 255 }),
  headers: fc.array(fc.record({ key: fc.string({ unit: 'binary', maxLength: 6 }), value: bytes(10) }), { maxLength: 3 }),
});

const batchArb: fc.Arbitrary<Batch> = fc.record({
  topic: fc.string({ maxLength: 10 }),
  partition: fc.integer({ min: -1, max: 1000 }),
  acks: fc.constantFrom('0' as const, '1' as const, '-1' as const, 'all' as const),
  idempotent: fc.boolean(),
  firstSequence: safeNat,
  lastSequence: safeNat,
  records: fc.array(recordArb, { maxLength: 5 }),
  txn: fc.option(
    fc.record({
      transactionalId: fc.string({ maxLength: 6 }),
      producerId: fc.string({ maxLength: 6 }),
      epoch: fc.integer({ min: -1, max: 100 }),
      coordinatorPartition: fc.integer({ min: -1, max: 100 }),
      coordinatorEpoch: fc.integer({ min: -1, max: 100 }),
    }),
    { nil: undefined },
  ),
});

function outcome(f: () => unknown): unknown {
  try {
    f();
    return 'ok';
  } catch (e) {
    const err = e as { code?: string; message: string; fields?: unknown };
    return { code: err.code, message: err.message, fields: err.fields };
  }
}

/** A mutation: overwrite bytes, truncate, or append garbage. */
const mutationArb = fc.oneof(
  fc.record({ kind: fc.constant('set' as const), at: fc.nat(), v: fc.integer({ min: 0, max: 255 }) }),
  fc.record({ kind: fc.constant('cut' as const), at: fc.nat(), v: fc.constant(0) }),
  fc.record({ kind: fc.constant('add' as const), at: fc.nat({ max: 30 }), v: fc.integer({ min: 0, max: 255 }) }),
);

function mutate(buf: Buffer, ms: { kind: 'set' | 'cut' | 'add'; at: number; v: number }[]): Buffer {
  let b = Buffer.from(buf);
  for (const m of ms) {
    if (b.length === 0) break;
    if (m.kind === 'set') b[m.at % b.length] = m.v;
    else if (m.kind === 'cut') b = b.subarray(0, m.at % b.length);
    else b = Buffer.concat([b, Buffer.alloc(m.at, m.v)]);
  }
  return b;
}

describe('scanBatch', () => {
  it('accepts exactly what decodeBatch accepts, with the same errors, and finds every record', () => {
    fc.assert(
      fc.property(batchArb, fc.boolean(), fc.boolean(), fc.boolean(), fc.array(mutationArb, { maxLength: 3 }), (batch, ext, encExt, request, ms) => {
        const body = mutate(encodeBatch(batch, { extensions: encExt }), ms);
        const expected = outcome(() => decodeBatch(body, { extensions: ext, request }));
        expect(outcome(() => scanBatch(body, { extensions: ext, request }))).toEqual(expected);
        if (expected !== 'ok') return;
        const d = decodeBatch(body, { extensions: ext, request });
        const s = scanBatch(body, { extensions: ext, request });
        expect(s.topic).toBe(d.topic);
        expect(s.partition).toBe(d.partition);
        expect(s.acks).toBe(d.acks);
        expect(s.idempotent).toBe(d.idempotent);
        expect(s.count).toBe(d.records.length);
        expect(s.starts.length).toBe(d.records.length + 1);
        for (let i = 0; i < s.count; i++) {
          // Each span decodes alone (as a one-record batch) to the same record.
          const head = encodeBatch({ ...d, records: [], trailer: undefined });
          // The count is the header's last field, or the one before a transaction section.
          const txnLen = d.txn ? 2 + Buffer.byteLength(d.txn.transactionalId) + 2 + Buffer.byteLength(d.txn.producerId) + 12 : 0;
          head.writeInt32BE(1, head.length - txnLen - 4);
          const one = decodeBatch(Buffer.concat([head, body.subarray(s.starts[i], s.starts[i + 1])]), { extensions: ext });
          expect(one.records[0]).toEqual(d.records[i]);
        }
      }),
      { numRuns: 500 },
    );
  });

  it('refuses a request whose header key is not valid UTF-8, as decodeBatch does (nothing to decode it for)', () => {
    const batch: Batch = {
      topic: 't',
      partition: 0,
      acks: '1',
      idempotent: false,
      firstSequence: 0,
      lastSequence: 0,
      records: [
        {
          offset: 0,
          sequence: 0,
          producerId: '',
          key: null,
          epoch: -1,
          value: Buffer.from('v'),
          timestamp: 0,
          attributes: 0,
          headers: [{ key: 'ab', value: Buffer.alloc(0) }],
        },
      ],
    };
    const body = encodeBatch(batch, { extensions: true });
    expect(scanBatch(body, { extensions: true, request: true }).count).toBe(1);
    const at = body.indexOf(Buffer.from('ab'));
    body[at] = 0xff;
    const refused = { code: 'invalid_batch', reason: 'header key is not valid UTF-8' };
    expect(() => scanBatch(body, { extensions: true, request: true })).toThrow(expect.objectContaining({ code: refused.code, fields: { reason: refused.reason } }));
    expect(() => decodeBatch(body, { extensions: true, request: true })).toThrow(expect.objectContaining({ code: refused.code, fields: { reason: refused.reason } }));
    // A CONSUME reply is not a request: the client decodes what it is given.
    expect(decodeBatch(body, { extensions: true }).records[0]!.headers[0]!.key).toBe('\ufffdb');
  });
});

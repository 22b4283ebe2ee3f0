/**
 * The producer's pure parts, without a broker: option validation, message conversion, record sizing,
 * partitioning and the accumulator's batching rules.
 */
import { describe, expect, it } from 'vitest';
import {
  Producer,
  type ProducerOptions,
  RecordAccumulator,
  type RecordSink,
  batchOverhead,
  choosePartition,
  recordSize,
  toBatchRecord,
  validateProducerOptions,
} from 'tributary-client/producer.js';
import { encodeBatch } from 'tributary-protocol/batch.js';
import { TributaryError } from 'tributary-protocol/errors.js';
import { partitionForKey } from 'tributary-protocol/partitioner.js';

const BROKERS = ['127.0.0.1:9'];

function configError(opts: Partial<ProducerOptions> & Record<string, unknown>): TributaryError {
  try {
    new Producer({ brokers: BROKERS, ...opts } as ProducerOptions);
  } catch (err) {
    expect(err).toBeInstanceOf(TributaryError);
    return err as TributaryError;
  }
  throw new Error('expected invalid_config');
}

describe('producer options', () => {
  it('accepts the defaults and fills them in', () => {
    const p = new Producer({ brokers: BROKERS });
    expect(p.options).toMatchObject({
      acks: 'all',
      lingerMs: 0,
      maxBatchBytes: 256 * 1024,
      maxBufferedBytes: 32 * 1024 * 1024,
      maxInFlightPerPartition: 5,
      clientId: 'tributary-producer',
      stallTimeoutMs: 3000,
      keylessPartitioning: 'sticky',
    });
    expect(new Producer({ brokers: BROKERS, stallTimeoutMs: 10 }).options.stallTimeoutMs).toBe(10);
    expect(p.state).toBe('open');
    expect(p.bufferedBytes).toBe(0);
  });

  it.each([
    [{ brokers: [] }, 'brokers'],
    [{ brokers: ['nohost'] }, 'brokers'],
    [{ acks: 2 }, 'acks'],
    [{ acks: '-1' }, 'acks'],
    [{ lingerMs: -1 }, 'lingerMs'],
    [{ lingerMs: 1.5 }, 'lingerMs'],
    [{ maxBatchBytes: 0 }, 'maxBatchBytes'],
    [{ maxBatchBytes: 2 ** 40 }, 'maxBatchBytes'],
    [{ maxBatchRecords: 0 }, 'maxBatchRecords'],
    [{ maxBufferedBytes: -5 }, 'maxBufferedBytes'],
    [{ maxInFlightPerPartition: 0 }, 'maxInFlightPerPartition'],
    [{ requestTimeoutMs: 0 }, 'requestTimeoutMs'],
    [{ stallTimeoutMs: 0 }, 'stallTimeoutMs'],
    [{ stallTimeoutMs: 5 }, 'stallTimeoutMs'],
    [{ stallTimeoutMs: 1500.5 }, 'stallTimeoutMs'],
    [{ stallTimeoutMs: '3000' }, 'stallTimeoutMs'],
    [{ stallTimeoutMs: 2 ** 31 }, 'stallTimeoutMs'],
    [{ clientId: 'has space' }, 'clientId'],
    [{ retry: 3 }, 'retry'],
    [{ idempotent: 'yes' }, 'idempotent'],
    [{ keylessPartitioning: 'random' }, 'keylessPartitioning'],
  ])('refuses %j at construction', (opts, option) => {
    const err = configError(opts as Record<string, unknown>);
    expect(err.code).toBe('invalid_config');
    expect(err.fields.option).toBe(option);
    expect(err.retriable).toBe(false);
  });

  it('accepts idempotent: true with at most 5 batches in flight and acks 1 or all', () => {
    expect(() => validateProducerOptions({ brokers: BROKERS, idempotent: true })).not.toThrow();
    expect(() => validateProducerOptions({ brokers: BROKERS, idempotent: false })).not.toThrow();
    expect(configError({ idempotent: true, maxInFlightPerPartition: 6 }).fields.option).toBe('maxInFlightPerPartition');
    expect(configError({ idempotent: true, acks: 0 }).fields.option).toBe('acks');
  });

  it('accepts every acks value', () => {
    for (const acks of [0, 1, 'all'] as const) expect(new Producer({ brokers: BROKERS, acks }).options.acks).toBe(acks);
  });
});

describe('producer without a broker', () => {
  it('rejects bad messages before queuing anything, and send after close with client_closed', async () => {
    const p = new Producer({ brokers: BROKERS });
    expect(await p.send({ topic: 't', messages: [] })).toEqual([]);
    await expect(p.send({ topic: '', messages: [{ value: 'x' }] })).rejects.toMatchObject({ code: 'invalid_parameter', fields: { param: 'topic' } });
    await expect(p.send({ topic: 't', messages: [{ value: 'ok' }, { value: 42 as unknown as string }] })).rejects.toMatchObject({
      code: 'invalid_parameter',
      fields: { param: 'messages[1]' },
    });
    await expect(p.send({ topic: 't', messages: [{ value: 'x', partition: -1 }] })).rejects.toMatchObject({ code: 'invalid_parameter' });
    expect(p.bufferedBytes).toBe(0);
    await p.close();
    await p.close(); // idempotent
    expect(p.state).toBe('closed');
    await expect(p.send({ topic: 't', messages: [{ value: 'x' }] })).rejects.toMatchObject({ code: 'client_closed' });
  });

  it('refuses a record larger than the whole buffer with record_too_large', async () => {
    const p = new Producer({ brokers: BROKERS, maxBufferedBytes: 100 });
    await expect(p.send({ topic: 't', messages: [{ value: Buffer.alloc(200) }] })).rejects.toMatchObject({ code: 'record_too_large' });
    await p.close();
  });

  it("reports a message's own fault before any message's partition or size fault, else the first of those", async () => {
    const p = new Producer({ brokers: BROKERS, maxBufferedBytes: 100 });
    const big = Buffer.alloc(200);
    const cases: Array<[Array<Record<string, unknown>>, Record<string, unknown>]> = [
      [[{ value: 'x', partition: -1 }, { value: 42 }], { code: 'invalid_parameter', fields: { param: 'messages[1]', reason: 'value must be a string, Buffer or Uint8Array' } }],
      [[{ value: big }, { value: 'x', parition: 1 }], { code: 'invalid_parameter', fields: { param: 'messages[1]' } }],
      [[{ value: 'x' }, { value: big }, { value: 'x', partition: 1.5 }], { code: 'record_too_large', fields: { index: 1, size: expect.any(Number) } }],
      [[{ value: 'x' }, { value: big, partition: 'a' }, { value: big }], { code: 'invalid_parameter', fields: { param: 'messages[1]', reason: 'partition must be a non-negative integer' } }],
      [[{ value: 'x', partition: 3 }, { value: 'x', partition: Number.NaN }], { code: 'invalid_parameter', fields: { param: 'messages[1]' } }],
    ];
    for (const [messages, error] of cases) await expect(p.send({ topic: 't', messages: messages as never })).rejects.toMatchObject(error);
    expect(p.bufferedBytes).toBe(0);
    await p.close();
  });

  it('honours an already aborted signal', async () => {
    const p = new Producer({ brokers: BROKERS });
    const ac = new AbortController();
    ac.abort(new Error('stop'));
    await expect(p.send({ topic: 't', messages: [{ value: 'x' }] }, { signal: ac.signal })).rejects.toThrow('stop');
    await expect(p.flush({ signal: ac.signal })).rejects.toThrow('stop');
    await p.close();
  });
});

describe('message conversion', () => {
  it('converts keys, values, headers and timestamps', () => {
    const r = toBatchRecord({ key: 'k', value: 'v', headers: { a: '1', b: Buffer.from([2]) }, timestamp: new Date(5000) }, 0);
    expect(r.key).toEqual(Buffer.from('k'));
    expect(r.value).toEqual(Buffer.from('v'));
    expect(r.headers).toEqual([
      { key: 'a', value: Buffer.from('1') },
      { key: 'b', value: Buffer.from([2]) },
    ]);
    expect(r.timestamp).toBe(5000);
    expect(r.producerId).toBe('');
    const list = toBatchRecord({ value: new Uint8Array([1, 2, 3]), headers: [{ key: 'x', value: 'a' }, { key: 'x', value: 'b' }] }, 0);
    expect(list.value).toEqual(Buffer.from([1, 2, 3]));
    expect(list.headers.map((h) => h.value.toString())).toEqual(['a', 'b']);
    expect(list.timestamp).toBe(0); // stamped by the broker on append
  });

  it('treats an empty key as no key (the wire cannot tell them apart)', () => {
    expect(toBatchRecord({ key: '', value: 'v' }, 0).key).toBeNull();
    expect(toBatchRecord({ key: null, value: 'v' }, 0).key).toBeNull();
  });

  it.each([
    [{ value: undefined }, 'value'],
    [{ value: 'v', key: 5 }, 'key'],
    [{ value: 'v', key: 'x'.repeat(70_000) }, '65535'],
    [{ value: 'v', timestamp: -1 }, 'timestamp'],
    [{ value: 'v', timestamp: new Date('nope') }, 'timestamp'],
    [{ value: 'v', headers: { a: 1 } }, 'header a'],
    [{ value: 'v', headers: 'x' }, 'headers'],
  ])('refuses %j', (m, reason) => {
    expect(() => toBatchRecord(m as never, 3)).toThrow(reason);
  });
});

describe('record sizing', () => {
  it('matches the encoded frame exactly (record_extensions_v1)', () => {
    const records = [
      toBatchRecord({ value: 'hello' }, 0),
      toBatchRecord({ key: 'key-1', value: Buffer.alloc(1000), headers: { trace: 'abc', 'ü': 'x' } }, 1),
      toBatchRecord({ key: 'k', value: '', timestamp: 1 }, 2),
    ];
    const frame = encodeBatch({ topic: 'tøpic', partition: 3, acks: 'all', idempotent: false, firstSequence: 0, lastSequence: 0, records }, { extensions: true });
    expect(batchOverhead('tøpic') + records.map(recordSize).reduce((a, b) => a + b, 0)).toBe(frame.length);
  });
});

describe('partitioning', () => {
  it('explicit partition wins, then the key hash (the broker partitioner), then round-robin', () => {
    let rr = 0;
    const next = () => rr++;
    expect(choosePartition(Buffer.from('k'), 2, 8, next)).toBe(2);
    for (const k of ['a', 'user-42', 'ü', 'x'.repeat(300)]) {
      expect(choosePartition(Buffer.from(k), undefined, 7, next)).toBe(partitionForKey(Buffer.from(k), 7));
    }
    expect(rr).toBe(0);
    expect([0, 1, 2, 3, 4].map(() => choosePartition(null, undefined, 3, next))).toEqual([0, 1, 2, 0, 1]);
  });

  it('the same key always maps to the same partition; keys spread over partitions', () => {
    const counts = new Array(4).fill(0);
    for (let i = 0; i < 4000; i++) {
      const key = Buffer.from(`key-${i}`);
      const p = choosePartition(key, undefined, 4, () => 0);
      expect(choosePartition(key, undefined, 4, () => 0)).toBe(p);
      counts[p]++;
    }
    for (const c of counts) expect(c).toBeGreaterThan(800);
  });
});

describe('record accumulator', () => {
  const sink: RecordSink = { settle: () => {} };
  const rec = (n: number) => toBatchRecord({ value: Buffer.alloc(n) }, 0);

  it('groups records by (topic, partition)', () => {
    const acc = new RecordAccumulator({ maxBatchBytes: 10_000, maxBatchRecords: Number.POSITIVE_INFINITY });
    const r = rec(10);
    const s = recordSize(r);
    expect(acc.append('a', 0, r, s, sink, 0, 0).created).toBe(true);
    expect(acc.append('a', 0, r, s, sink, 1, 0).created).toBe(false);
    expect(acc.append('a', 1, r, s, sink, 2, 0).created).toBe(true);
    expect(acc.append('b', 0, r, s, sink, 3, 0).created).toBe(true);
    expect(acc.all().map((q) => [q.topic, q.partition, q.batches.length, q.batches[0]!.count])).toEqual([
      ['a', 0, 1, 2],
      ['a', 1, 1, 1],
      ['b', 0, 1, 1],
    ]);
  });

  it("a partition without a batch of its own starts small, whatever size other partitions' batches grew to", () => {
    const acc = new RecordAccumulator({ maxBatchBytes: 256 * 1024, maxBatchRecords: Number.POSITIVE_INFINITY });
    const big = rec(1000);
    for (let i = 0; i < 200; i++) acc.append('t', 0, big, recordSize(big), sink, i, 0);
    expect(acc.queue('t', 0).batches[0]!.frame.capacity).toBeGreaterThan(150_000);
    const small = rec(1);
    for (let p = 1; p <= 50; p++) acc.append('t', p, small, recordSize(small), sink, 0, 0);
    for (let p = 1; p <= 50; p++) expect(acc.queue('t', p).batches[0]!.frame.capacity).toBeLessThanOrEqual(16 * 1024);
  });

  it("a partition's batches queued behind a full one start at its size, and a small batch does not shrink the next", () => {
    const acc = new RecordAccumulator({ maxBatchBytes: 256 * 1024, maxBatchRecords: Number.POSITIVE_INFINITY });
    const big = rec(1000);
    const q = acc.queue('t', 0);
    // A burst: batches queue behind a full one before any is sent.
    let i = 0;
    while (q.batches.length < 2) acc.append('t', 0, big, recordSize(big), sink, i++, 0);
    const full = q.batches[0]!.frame.length;
    expect(q.batches[1]!.frame.capacity).toBeGreaterThanOrEqual(full); // not 16 KiB, grown (copied) four times
    // Sent: the full batch, then a small one (a send's remainder, closed by its linger): the next batch is
    // again as large as the full one.
    acc.closeAll();
    expect(acc.takeReady(q, 10).map((b) => b.count)).toEqual([i - 1, 1]);
    acc.append('t', 0, big, recordSize(big), sink, i++, 0);
    expect(q.batches[0]!.frame.capacity).toBeGreaterThanOrEqual(full);
  });

  it('keeps the buffers of acknowledged batches for new ones, up to half of maxBufferedBytes and 16 MiB', () => {
    const frameOf = (acc: RecordAccumulator, p: number) => acc.queue('t', p).batches[0]!.frame.frame(false, 0, 0, true).buffer;
    for (const [maxBufferedBytes, kept] of [[1024 * 1024, 2], [undefined, 30]] as const) {
      const acc = new RecordAccumulator({ maxBatchBytes: 256 * 1024, maxBatchRecords: Number.POSITIVE_INFINITY, maxBufferedBytes });
      const big = rec(200_000);
      const n = 30; // 30 frames of about 200 KB: 6 MB, more than the 4 MiB kept before
      for (let p = 0; p < n; p++) acc.append('t', p, big, recordSize(big), sink, 0, 0);
      const old = new Set(Array.from({ length: n }, (_, p) => frameOf(acc, p)));
      const sent = acc.closeAll().flatMap((q) => acc.takeReady(q, 1));
      for (const b of sent) acc.recycle(b);
      for (let p = 0; p < n; p++) acc.append('t', p, big, recordSize(big), sink, 1, 0);
      const reused = Array.from({ length: n }, (_, p) => frameOf(acc, p)).filter((b) => old.has(b)).length;
      expect(reused).toBe(Math.min(kept, n));
    }
  });

  it('closes a batch before it would pass maxBatchBytes; a larger record goes alone', () => {
    const r = rec(100);
    const s = recordSize(r);
    const acc = new RecordAccumulator({ maxBatchBytes: batchOverhead('t') + 3 * s + 10, maxBatchRecords: Number.POSITIVE_INFINITY });
    const results = [];
    for (let i = 0; i < 7; i++) results.push(acc.append('t', 0, r, s, sink, i, 0));
    const q = acc.queue('t', 0);
    expect(q.batches.map((b) => b.count)).toEqual([3, 3, 1]);
    expect(q.batches.map((b) => b.closed)).toEqual([true, true, false]);
    expect(results.map((x) => x.closed)).toEqual([false, false, false, true, false, false, true]);
    for (const b of q.batches) expect(b.bytes).toBeLessThanOrEqual(batchOverhead('t') + 3 * s + 10);

    const big = rec(5000);
    acc.append('t', 0, big, recordSize(big), sink, 7, 0);
    expect(q.batches.map((b) => b.count)).toEqual([3, 3, 1, 1]);
    expect(q.batches[3]!.closed).toBe(true); // alone, over the limit, ready at once
  });

  it('a record that takes the batch to maxBatchBytes closes it; the next starts a new one', () => {
    const r = rec(100);
    const s = recordSize(r);
    const acc = new RecordAccumulator({ maxBatchBytes: batchOverhead('t') + 2 * s, maxBatchRecords: Number.POSITIVE_INFINITY });
    expect(acc.append('t', 0, r, s, sink, 0, 0).closed).toBe(false);
    const second = acc.append('t', 0, r, s, sink, 1, 0);
    expect(second.closed).toBe(true); // exactly at the limit: full
    const third = acc.append('t', 0, r, s, sink, 2, 0);
    expect(third.created).toBe(true);
    expect(third.batch).not.toBe(second.batch);
    expect(acc.queue('t', 0).batches.map((b) => b.count)).toEqual([2, 1]);
  });

  it("remembers each record's send as runs and settles them with consecutive offsets", () => {
    const acc = new RecordAccumulator({ maxBatchBytes: 1 << 20, maxBatchRecords: 100 });
    const calls: Array<[string, number, number, number]> = [];
    const sinkA: RecordSink = { settle: (first, count, _err, _t, _p, offset) => calls.push(['a', first, count, offset]) };
    const sinkB: RecordSink = { settle: (first, count, _err, _t, _p, offset) => calls.push(['b', first, count, offset]) };
    const r = rec(1);
    // a0 a1 b0 a3 (a's record 2 went elsewhere) a4 b1
    for (const [sinkX, i] of [[sinkA, 0], [sinkA, 1], [sinkB, 0], [sinkA, 3], [sinkA, 4], [sinkB, 1]] as const) acc.append('t', 0, r, recordSize(r), sinkX, i, 0);
    const [b] = acc.queue('t', 0).batches;
    expect([b!.runFirst, b!.runCount]).toEqual([
      [0, 0, 3, 1],
      [2, 1, 2, 1],
    ]);
    let offset = 100;
    for (let k = 0; k < b!.sinks.length; k++) {
      b!.sinks[k]!.settle(b!.runFirst[k]!, b!.runCount[k]!, null, 't', 0, offset);
      offset += b!.runCount[k]!;
    }
    expect(calls).toEqual([
      ['a', 0, 2, 100],
      ['b', 0, 1, 102],
      ['a', 3, 2, 103],
      ['b', 1, 1, 105],
    ]);
  });

  it('a record larger than maxBatchBytes gets a batch of its own without making later batch buffers that large', () => {
    for (const producerId of ['', 'f47ac10b-58cc-4372-a567-0e02b2c3d479']) {
      const acc = new RecordAccumulator({ maxBatchBytes: 10_000, maxBatchRecords: Number.POSITIVE_INFINITY, producerId });
      const big = rec(1_000_000);
      acc.append('t', 0, big, recordSize(big), sink, 0, 0);
      expect(acc.takeReady(acc.queue('t', 0), 5)).toHaveLength(1);
      const small = rec(10);
      acc.append('t', 0, small, recordSize(small), sink, 1, 0);
      acc.append('t', 1, small, recordSize(small), sink, 2, 0);
      for (const p of [0, 1]) expect(acc.queue('t', p).batches.at(-1)!.frame.capacity).toBeLessThan(40_000);
    }
  });

  it('closes a batch at maxBatchRecords', () => {
    const acc = new RecordAccumulator({ maxBatchBytes: 1 << 20, maxBatchRecords: 4 });
    const r = rec(1);
    const closed = [];
    for (let i = 0; i < 10; i++) closed.push(acc.append('t', 0, r, recordSize(r), sink, i, 0).closed);
    expect(acc.queue('t', 0).batches.map((b) => b.count)).toEqual([4, 4, 2]);
    expect(closed.filter(Boolean)).toHaveLength(2);
  });

  it('hands out closed head batches in order, within the in-flight limit, never past a retry', () => {
    const acc = new RecordAccumulator({ maxBatchBytes: 1 << 20, maxBatchRecords: 1 });
    const r = rec(1);
    for (let i = 0; i < 5; i++) acc.append('t', 0, r, recordSize(r), sink, i, 0);
    const q = acc.queue('t', 0);
    const first = acc.takeReady(q, 2);
    expect(first).toHaveLength(2);
    expect(acc.takeReady(q, 2)).toHaveLength(0);
    expect(acc.canSend(q, 2)).toBe(false);
    q.inFlight.delete(first[0]!);
    q.retrying = 1;
    expect(acc.takeReady(q, 2)).toHaveLength(0);
    q.retrying = 0;
    const next = acc.takeReady(q, 2);
    expect(next).toHaveLength(1);
    expect(next[0]).toBe(acc.pending().find((b) => b === next[0]));
    // order: the batches come out in the order they were appended
    expect([first[0], first[1], next[0]].map((b) => b!.runFirst[0])).toEqual([0, 1, 2]);
  });

  it('an open batch is not sent until closed (linger, flush, backpressure)', () => {
    const acc = new RecordAccumulator({ maxBatchBytes: 1 << 20, maxBatchRecords: 100 });
    const r = rec(1);
    acc.append('t', 0, r, recordSize(r), sink, 0, 0);
    acc.append('u', 1, r, recordSize(r), sink, 0, 0);
    const q = acc.queue('t', 0);
    expect(acc.canSend(q, 5)).toBe(false);
    expect(acc.closeAll().map((x) => x.topic).sort()).toEqual(['t', 'u']);
    expect(acc.canSend(q, 5)).toBe(true);
    expect(acc.pending()).toHaveLength(2);
  });
});

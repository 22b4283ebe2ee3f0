/**
 * send({ ... }, { metadata: 'runs' }) (docs/sdk.md, "Producer"): one SendRun per contiguous run of a
 * send's records instead of one RecordMetadata per message. SendResult on its own (any settle order:
 * runs in message order, covering every message once, with the offsets the per-message metadata
 * gives), then send() against a scripted server: one batch, several partitions, a send split over
 * batches, acks 0, errors, and the option's validation.
 */
import fc from 'fast-check';
import { afterEach, describe, expect, it } from 'vitest';
import { Producer, type ProducerOptions, type RecordMetadata, type SendRun } from 'tributary-client/producer.js';
import { recordRuns, SendResult } from 'tributary-client/send-result.js';
import { decodeBatch } from 'tributary-protocol/batch.js';
import { TributaryError } from 'tributary-protocol/errors.js';
import { ScriptedServer } from '../../helpers/scripted-server.js';

/** The per-message (partition, offset) a list of runs says. */
function expand(runs: SendRun[]): Array<{ partition: number; offset: number }> {
  return runs.flatMap((r) => Array.from({ length: r.count }, (_, i) => ({ partition: r.partition, offset: r.baseOffset < 0 ? -1 : r.baseOffset + i })));
}

describe('SendResult with runs', () => {
  /** A send of `n` messages cut into settle calls: [first, count, partition, offset] each, in a shuffled order. */
  const settles = fc
    .record({
      cuts: fc.array(fc.integer({ min: 1, max: 8 }), { minLength: 1, maxLength: 12 }),
      partitions: fc.array(fc.integer({ min: 0, max: 2 }), { minLength: 12, maxLength: 12 }),
      gaps: fc.array(fc.integer({ min: 0, max: 2 }), { minLength: 12, maxLength: 12 }),
      acksZero: fc.boolean(),
      order: fc.array(fc.nat(), { minLength: 12, maxLength: 12 }),
    })
    .map(({ cuts, partitions, gaps, acksZero, order }) => {
      const next = [0, 0, 0];
      const calls: Array<[number, number, number, number]> = [];
      let first = 0;
      cuts.forEach((count, i) => {
        const p = partitions[i]!;
        // A gap: other records between two batches of the partition (another send's, or a retry's).
        next[p]! += gaps[i]!;
        calls.push([first, count, p, acksZero ? -1 : next[p]!]);
        next[p]! += count;
        first += count;
      });
      const shuffled = calls.map((c, i) => ({ c, k: order[i]! })).sort((a, b) => a.k - b.k).map((x) => x.c);
      return { n: first, calls: shuffled };
    });

  it('runs are in message order, cover every message once, and give the offsets the per-message metadata gives', async () => {
    await fc.assert(
      fc.asyncProperty(settles, async ({ n, calls }) => {
        const runs = new SendResult(n, true);
        const records = new SendResult(n, false);
        for (const [first, count, p, off] of calls) {
          runs.settle(first, count, null, 't', p, off);
          records.settle(first, count, null, 't', p, off);
        }
        const got = (await runs.promise) as SendRun[];
        const meta = (await records.promise) as RecordMetadata[];
        let next = 0;
        for (const r of got) {
          expect(r.topic).toBe('t');
          expect(r.count).toBeGreaterThan(0);
          expect(r.first).toBe(next);
          next += r.count;
        }
        expect(next).toBe(n);
        expect(got.length).toBeLessThanOrEqual(calls.length);
        expect(expand(got)).toEqual(meta.map((m) => ({ partition: m.partition, offset: m.offset })));
      }),
    );
  });

  it('a run that continues the previous one (same partition, next offsets) is merged; one with a gap is not', async () => {
    const merged = new SendResult(5, true);
    merged.settle(3, 2, null, 't', 1, 13);
    merged.settle(0, 3, null, 't', 1, 10);
    expect(await merged.promise).toEqual([{ topic: 't', partition: 1, first: 0, count: 5, baseOffset: 10 }]);
    const gap = new SendResult(5, true);
    gap.settle(0, 3, null, 't', 1, 10);
    gap.settle(3, 2, null, 't', 1, 20);
    expect(await gap.promise).toEqual([
      { topic: 't', partition: 1, first: 0, count: 3, baseOffset: 10 },
      { topic: 't', partition: 1, first: 3, count: 2, baseOffset: 20 },
    ]);
  });

  it('recordRuns (a transaction\'s per-record acknowledgements): consecutive records of a partition at consecutive offsets make one run', () => {
    const acks = [
      { partition: 0, offset: 4 },
      { partition: 0, offset: 5 },
      { partition: 1, offset: 0 },
      { partition: 0, offset: 6 },
      { partition: 0, offset: 9 },
    ];
    expect(recordRuns('t', acks)).toEqual([
      { topic: 't', partition: 0, first: 0, count: 2, baseOffset: 4 },
      { topic: 't', partition: 1, first: 2, count: 1, baseOffset: 0 },
      { topic: 't', partition: 0, first: 3, count: 1, baseOffset: 6 },
      { topic: 't', partition: 0, first: 4, count: 1, baseOffset: 9 },
    ]);
    expect(recordRuns('t', [])).toEqual([]);
  });

  it('an error rejects, whatever settled before or after it', async () => {
    const r = new SendResult(4, true);
    r.settle(0, 2, null, 't', 0, 0);
    r.settle(2, 1, new TributaryError('not_leader'), 't', 0, -1);
    r.settle(3, 1, null, 't', 0, 5);
    await expect(r.promise).rejects.toMatchObject({ code: 'not_leader' });
  });
});

describe("send() with metadata: 'runs' (scripted server)", () => {
  const cleanups: Array<() => Promise<unknown> | unknown> = [];

  afterEach(async () => {
    for (const c of cleanups.splice(0).reverse()) await Promise.resolve(c()).catch(() => {});
  });

  /**
   * A 3-partition topic. Each batch is appended at the partition's next offset plus `gap` (as if other
   * producers wrote in between); `refuse` answers a batch with an error instead.
   */
  async function fake(opts: { gap?: number; refuse?: string } = {}) {
    const server = await ScriptedServer.start();
    cleanups.push(() => server.close());
    const a = server.address;
    server.on('METADATA', (line) => `OK topic=${line.params.get('topic')} partitions=3 leaders=${a},${a},${a} epochs=0,0,0`);
    const next = [0, 0, 0];
    const batches: Array<{ partition: number; values: string[] }> = [];
    server.onBatch = (body) => {
      const b = decodeBatch(body);
      batches.push({ partition: b.partition, values: b.records.map((r) => r.value.toString()) });
      if (opts.refuse) return opts.refuse;
      if (b.acks === '0') return 'OK';
      next[b.partition]! += opts.gap ?? 0;
      const base = next[b.partition]!;
      next[b.partition]! += b.records.length;
      return JSON.stringify({ status: 'OK', partition: b.partition, base_offset: base, last_offset: base + b.records.length - 1, count: b.records.length });
    };
    return { server, batches };
  }

  function producer(server: ScriptedServer, opts: Partial<ProducerOptions> = {}): Producer {
    const p = new Producer({ brokers: [server.address], retry: { retries: 0 }, ...opts });
    cleanups.push(() => p.close({ signal: AbortSignal.timeout(2000) }));
    return p;
  }

  it('a send to one batch resolves with one run', async () => {
    const { server, batches } = await fake();
    const p = producer(server);
    const runs: SendRun[] = await p.send({ topic: 't', messages: [{ value: 'a', partition: 2 }, { value: 'b', partition: 2 }, { value: 'c', partition: 2 }] }, { metadata: 'runs' });
    expect(batches).toHaveLength(1);
    expect(runs).toEqual([{ topic: 't', partition: 2, first: 0, count: 3, baseOffset: 0 }]);
    // The default is still one RecordMetadata per message, and so is metadata: 'records'.
    const meta: RecordMetadata[] = await p.send({ topic: 't', messages: [{ value: 'd', partition: 2 }] }, { metadata: 'records' });
    expect(meta).toEqual([{ topic: 't', partition: 2, offset: 3 }]);
    expect(await p.send({ topic: 't', messages: [{ value: 'e', partition: 2 }] })).toEqual([{ topic: 't', partition: 2, offset: 4 }]);
  });

  it('messages to several partitions: one run per contiguous stretch of a partition, in message order', async () => {
    const { server } = await fake();
    const p = producer(server);
    const messages = [0, 0, 1, 1, 0, 2].map((partition, i) => ({ value: `v${i}`, partition }));
    const runs = await p.send({ topic: 't', messages }, { metadata: 'runs' });
    expect(runs).toEqual([
      { topic: 't', partition: 0, first: 0, count: 2, baseOffset: 0 },
      { topic: 't', partition: 1, first: 2, count: 2, baseOffset: 0 },
      { topic: 't', partition: 0, first: 4, count: 1, baseOffset: 2 },
      { topic: 't', partition: 2, first: 5, count: 1, baseOffset: 0 },
    ]);
  });

  it('a send split over several batches: back-to-back batches make one run, batches with records between them one run each', async () => {
    const messages = Array.from({ length: 5 }, (_, i) => ({ value: `v${i}`, partition: 1 }));
    const whole = await fake();
    const runs = await producer(whole.server, { maxBatchRecords: 2 }).send({ topic: 't', messages }, { metadata: 'runs' });
    expect(whole.batches.map((b) => b.values.length)).toEqual([2, 2, 1]);
    expect(runs).toEqual([{ topic: 't', partition: 1, first: 0, count: 5, baseOffset: 0 }]);
    const gapped = await fake({ gap: 10 });
    const parts = await producer(gapped.server, { maxBatchRecords: 2 }).send({ topic: 't', messages }, { metadata: 'runs' });
    expect(parts).toEqual([
      { topic: 't', partition: 1, first: 0, count: 2, baseOffset: 10 },
      { topic: 't', partition: 1, first: 2, count: 2, baseOffset: 22 },
      { topic: 't', partition: 1, first: 4, count: 1, baseOffset: 34 },
    ]);
  });

  it('acks 0: runs without offsets (-1)', async () => {
    const { server } = await fake();
    const runs = await producer(server, { acks: 0 }).send({ topic: 't', messages: [{ value: 'a', partition: 0 }, { value: 'b', partition: 0 }, { value: 'c', partition: 1 }] }, { metadata: 'runs' });
    expect(runs).toEqual([
      { topic: 't', partition: 0, first: 0, count: 2, baseOffset: -1 },
      { topic: 't', partition: 1, first: 2, count: 1, baseOffset: -1 },
    ]);
  });

  it('a refused batch rejects the send', async () => {
    const { server } = await fake({ refuse: 'ERROR: invalid_batch class=validation retryable=false' });
    const send = producer(server).send({ topic: 't', messages: [{ value: 'a', partition: 0 }, { value: 'b', partition: 1 }] }, { metadata: 'runs' });
    await expect(send).rejects.toMatchObject({ code: 'invalid_batch' });
  });

  it('an unknown metadata value or option name is refused (invalid_config), not ignored', async () => {
    const { server } = await fake();
    const p = producer(server);
    const record = { topic: 't', messages: [{ value: 'a' }] };
    await expect(p.send(record, { metadata: 'run' } as never)).rejects.toMatchObject({ code: 'invalid_config', fields: { option: 'metadata' } });
    await expect(p.send(record, { metdata: 'runs' } as never)).rejects.toMatchObject({ code: 'invalid_config', fields: { option: 'metdata', did_you_mean: 'metadata' } });
    await expect(p.send(record, { signal: 'x' } as never)).rejects.toMatchObject({ code: 'invalid_config', fields: { option: 'signal' } });
    await expect(p.send(record, null as never)).rejects.toMatchObject({ code: 'invalid_config' });
    expect(server.received('BATCH')).toHaveLength(0);
  });
});

/**
 * Batches the broker refuses as record_too_large, against a scripted server (docs/sdk.md, "Producer"):
 * the parts a refused batch is split into get their own attempt even when the refusal came after the
 * batch's retry budget was spent (fake clock), and a single send's records are split further, down to
 * single records, so only a record that is itself too large fails.
 */
import { afterEach, describe, expect, it, vi } from 'vitest';
import { Producer, type ProducerOptions } from 'tributary-client/producer.js';
import { type Batch, decodeBatch } from 'tributary-protocol/batch.js';
import { track, untilReal, useFakeTimersForIo } from '../../helpers/fake-timers.js';
import { ScriptedServer } from '../../helpers/scripted-server.js';

const TOO_LARGE = 'ERROR: record_too_large class=validation retryable=false';
const FAST = { initialDelayMs: 1, maxDelayMs: 5 };

/** A one-partition topic on a scripted server: `batches` holds each batch's values as received. */
interface Fake {
  server: ScriptedServer;
  batches: string[][];
  /** What was appended, in order. */
  log: string[];
  /** Answers a batch: `accept` appends it and acknowledges it. */
  answer: (b: Batch, accept: () => string) => string | Promise<string>;
}

describe('Producer: batches refused as record_too_large (scripted server)', () => {
  const cleanups: Array<() => Promise<unknown> | unknown> = [];

  afterEach(async () => {
    vi.useRealTimers();
    for (const c of cleanups.splice(0).reverse()) await Promise.resolve(c()).catch(() => {});
  });

  async function fake(): Promise<Fake> {
    const server = await ScriptedServer.start();
    cleanups.push(() => server.close());
    const f: Fake = { server, batches: [], log: [], answer: (_b, accept) => accept() };
    server.on('METADATA', (line) => `OK topic=${line.params.get('topic')} partitions=1 leaders=${server.address} epochs=0`);
    server.onBatch = (body) => {
      const b = decodeBatch(body);
      const values = b.records.map((r) => r.value.toString());
      f.batches.push(values);
      return f.answer(b, () => {
        const base = f.log.length;
        f.log.push(...values);
        return JSON.stringify({ status: 'OK', partition: 0, base_offset: base, last_offset: base + values.length - 1, count: values.length });
      });
    };
    return f;
  }

  function producer(f: Fake, opts: Partial<ProducerOptions>): Producer {
    const p = new Producer({ brokers: [f.server.address], retry: FAST, ...opts });
    cleanups.push(() => p.close({ signal: AbortSignal.timeout(2000) }));
    return p;
  }

  it('a split part is sent even when the refusal came after the batch’s retry budget: the innocent send is acknowledged', async () => {
    const f = await fake();
    let release!: () => void;
    const held = new Promise<void>((r) => {
      release = r;
    });
    f.answer = async (b, accept) => {
      if (b.records.some((r) => r.value.length > 100)) return TOO_LARGE;
      if (b.records[0]!.value.toString() === 'first') await held;
      return accept();
    };
    useFakeTimersForIo();
    // One batch in flight at a time: [ok, big] waits behind [first], whose acknowledgement is slow.
    const p = producer(f, { lingerMs: 0, maxInFlightPerPartition: 1, requestTimeoutMs: 10_000, stallTimeoutMs: 60_000, retry: { ...FAST, maxElapsedMs: 1000 } });
    const first = track(p.send({ topic: 't', messages: [{ value: 'first' }] }));
    await untilReal(() => f.batches.length === 1, 'the first batch');
    const ok = track(p.send({ topic: 't', messages: [{ value: 'ok' }] }));
    const big = track(p.send({ topic: 't', messages: [{ value: 'x'.repeat(200) }] }));
    // The queued batch outlives its retry budget before it is ever sent.
    await vi.advanceTimersByTimeAsync(1500);
    release();
    await untilReal(() => first.settled && ok.settled && big.settled, 'the sends to settle');
    expect(await first.promise).toEqual([{ topic: 't', partition: 0, offset: 0 }]);
    await expect(big.promise).rejects.toMatchObject({ code: 'record_too_large' });
    // Refused together, then each send's records on their own: the refusal spent the budget, not the part.
    expect(await ok.promise).toEqual([{ topic: 't', partition: 0, offset: 1 }]);
    expect(f.batches).toEqual([['first'], ['ok', 'x'.repeat(200)], ['ok'], ['x'.repeat(200)]]);
    expect(f.log).toEqual(['first', 'ok']);
  });

  it('a batch queued behind one refused as record_too_large past its budget is sent, not failed unsent with that refusal', async () => {
    const f = await fake();
    let release!: () => void;
    const held = new Promise<void>((r) => {
      release = r;
    });
    f.answer = async (b, accept) => {
      await held;
      return b.records.some((r) => r.value.length > 100) ? TOO_LARGE : accept();
    };
    useFakeTimersForIo();
    const p = producer(f, { lingerMs: 0, maxInFlightPerPartition: 1, requestTimeoutMs: 10_000, stallTimeoutMs: 60_000, retry: { ...FAST, maxElapsedMs: 1000 } });
    const big = track(p.send({ topic: 't', messages: [{ value: 'x'.repeat(200) }] }));
    await untilReal(() => f.batches.length === 1, 'the first batch');
    const ok = track(p.send({ topic: 't', messages: [{ value: 'ok' }] }));
    // Both outlive the retry budget: [big] waiting for its answer, [ok] queued behind it.
    await vi.advanceTimersByTimeAsync(1500);
    release();
    await untilReal(() => big.settled && ok.settled, 'the sends to settle');
    await expect(big.promise).rejects.toMatchObject({ code: 'record_too_large' });
    // A refusal of one batch's records says nothing of the partition: the one behind is still sent.
    expect(await ok.promise).toEqual([{ topic: 't', partition: 0, offset: 0 }]);
    expect(f.log).toEqual(['ok']);
  });

  /**
   * The broker's idempotence check, in short (src/partition/producer-state.ts): a newer epoch starts at
   * sequence 0, then each batch must start where the last one ended; anything else is a gap.
   */
  function checkSequence(): (b: Batch) => string | undefined {
    let epoch = -1;
    let next = 0;
    return (b) => {
      if (!b.idempotent) return undefined;
      const e = b.records[0]!.epoch;
      const expected = e > epoch ? 0 : next;
      if (e < epoch || b.firstSequence !== expected) return `ERROR: out_of_order_sequence class=conflict retryable=false sequence=${b.firstSequence} expected=${expected}`;
      epoch = e;
      next = b.lastSequence + 1;
      return undefined;
    };
  }

  it('one send’s records refused only as a whole are split in halves until the parts fit: all acknowledged, in order', async () => {
    const f = await fake();
    // A batch limit of 3 records (the producer's maxBatchBytes above the broker's --max-batch-bytes).
    f.answer = (b, accept) => (b.records.length > 3 ? TOO_LARGE : accept());
    const p = producer(f, { lingerMs: 0 });
    const values = Array.from({ length: 8 }, (_, i) => `m${i}`);
    const meta = await p.send({ topic: 't', messages: values.map((value) => ({ value })) });
    expect(meta.map((m) => m.offset)).toEqual([0, 1, 2, 3, 4, 5, 6, 7]);
    expect(f.log).toEqual(values);
    expect(f.batches.map((b) => b.length)).toEqual([8, 4, 2, 2, 4, 2, 2]);
    expect(p.bufferedBytes).toBe(0);
  });

  it('an idempotent producer’s parts take the refused batch’s numbers: a split costs no epoch (16-bit, docs/sdk.md)', async () => {
    const f = await fake();
    const check = checkSequence();
    const accepted: Array<[number, number]> = [];
    f.answer = (b, accept) => {
      if (b.records.length > 3) return TOO_LARGE;
      const refusal = check(b);
      if (refusal) return refusal;
      accepted.push([b.records[0]!.epoch, b.firstSequence]);
      return accept();
    };
    const p = producer(f, { lingerMs: 0, idempotent: true });
    const values = Array.from({ length: 8 }, (_, i) => `m${i}`);
    await p.send({ topic: 't', messages: values.map((value) => ({ value })) });
    await p.send({ topic: 't', messages: [{ value: 'next' }] });
    expect(f.log).toEqual([...values, 'next']);
    expect(accepted).toEqual([
      [0, 0],
      [0, 2],
      [0, 4],
      [0, 6],
      [0, 8],
    ]);
  });

  it('an idempotent batch pipelined behind a split one is refused for the gap, then resent after the parts with its numbers', async () => {
    const f = await fake();
    const check = checkSequence();
    const accepted: Array<[number, number]> = [];
    f.answer = (b, accept) => {
      if (b.records.length > 3) return TOO_LARGE;
      const refusal = check(b);
      if (refusal) return refusal;
      accepted.push([b.records[0]!.epoch, b.firstSequence]);
      return accept();
    };
    const p = producer(f, { lingerMs: 0, idempotent: true, maxBatchRecords: 4 });
    // Two batches in one turn, both in flight: [m0..m3] (refused) and [n0, n1] (refused for the gap before it).
    const first = p.send({ topic: 't', messages: ['m0', 'm1', 'm2', 'm3'].map((value) => ({ value })) });
    const second = p.send({ topic: 't', messages: ['n0', 'n1'].map((value) => ({ value })) });
    expect((await first).map((m) => m.offset)).toEqual([0, 1, 2, 3]);
    expect((await second).map((m) => m.offset)).toEqual([4, 5]);
    expect(f.batches.map((b) => b.length)).toEqual([4, 2, 2, 2, 2]);
    expect(f.log).toEqual(['m0', 'm1', 'm2', 'm3', 'n0', 'n1']);
    expect(accepted).toEqual([
      [0, 0],
      [0, 2],
      [0, 4],
    ]);
  });

  for (const idempotent of [false, true]) {
    it(`a send with one record too large fails with record_too_large; its other records and the sends behind it are written in order (idempotent: ${idempotent})`, async () => {
      const f = await fake();
      const check = checkSequence();
      const numbered: boolean[] = [];
      f.answer = (b, accept) => {
        numbered.push(b.idempotent);
        return b.records.some((r) => r.value.length > 100) ? TOO_LARGE : (check(b) ?? accept());
      };
      const p = producer(f, { lingerMs: 0, idempotent });
      const errors: Array<{ records: number }> = [];
      p.on('error', (e) => errors.push(e));
      const big = 'x'.repeat(200);
      const values = ['a', 'b', 'c', big, 'e', 'f'];
      const send = p.send({ topic: 't', messages: values.map((value) => ({ value })) });
      const after = p.send({ topic: 't', messages: [{ value: 'after' }] });
      await expect(send).rejects.toMatchObject({ code: 'record_too_large' });
      expect((await after)[0]!.offset).toBe(5);
      expect(f.log).toEqual(['a', 'b', 'c', 'e', 'f', 'after']);
      expect(errors).toEqual([expect.objectContaining({ records: 1 })]);
      expect(new Set(numbered)).toEqual(new Set([idempotent]));
      expect(p.bufferedBytes).toBe(0);
    });
  }
});

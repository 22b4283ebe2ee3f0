/**
 * The Producer against a real broker: send/flush/close, keyed partitioning as the broker computes it,
 * per-partition order with pipelined batches, headers and timestamps, backpressure and buffer_full,
 * acks=0, events and diagnostics, errors.
 */
import diagnostics from 'node:diagnostics_channel';
import { describe, expect, it, vi } from 'vitest';
import { Connection } from 'tributary-protocol/connection.js';
import { channels } from 'tributary-client/events.js';
import { Producer, type ProducerOptions } from 'tributary-client/producer.js';
import { parseLine } from 'tributary-protocol/command.js';
import { TributaryError } from 'tributary-protocol/errors.js';
import { partitionForKey } from 'tributary-protocol/partitioner.js';
import { BrokerProcess } from '../../helpers/launcher.js';
import { useProducerSuite } from '../../helpers/sdk-producers.js';
import { sleep } from '../../helpers/util.js';

describe('Producer against a broker', () => {
  const suite = useProducerSuite(['--offsets-topic-partitions', '4']);
  const { producers, readAll } = suite;
  const producer = (opts: Partial<ProducerOptions> = {}): Producer => producers.make(opts);

  async function topic(name: string, partitions: number): Promise<string> {
    await suite.admin.command('CREATE', { topic: name, partitions });
    return name;
  }

  async function endOffsets(t: string): Promise<number[]> {
    const csv = parseLine(await suite.admin.command('LIST_OFFSETS', { topic: t })).params.get('offsets')!;
    return csv.split(',').map((e) => Number(/leo=(\d+)/.exec(e)![1]));
  }

  it('send resolves with one RecordMetadata per message, in order, once acknowledged', async () => {
    const t = await topic('p-basic', 3);
    const p = producer();
    const meta = await p.send({
      topic: t,
      messages: [
        { value: 'a', partition: 1 },
        { value: 'b', partition: 1 },
        { value: 'c', partition: 2 },
        { value: 'd', partition: 1 },
      ],
    });
    expect(meta).toEqual([
      { topic: t, partition: 1, offset: 0 },
      { topic: t, partition: 1, offset: 1 },
      { topic: t, partition: 2, offset: 0 },
      { topic: t, partition: 1, offset: 2 },
    ]);
    const again = await p.send({ topic: t, messages: [{ value: 'e', partition: 1 }] });
    expect(again).toEqual([{ topic: t, partition: 1, offset: 3 }]);
    expect((await readAll(t, 1)).map((r) => r.value.toString())).toEqual(['a', 'b', 'd', 'e']);
    expect((await readAll(t, 2)).map((r) => r.value.toString())).toEqual(['c']);
    expect(p.bufferedBytes).toBe(0);
  });

  it('carries keys, headers and timestamps (record_extensions_v1); no timestamp means broker time', async () => {
    const t = await topic('p-ext', 1);
    const p = producer();
    const before = Date.now();
    await p.send({
      topic: t,
      messages: [
        { key: 'k1', value: 'v1', headers: { trace: 'abc', bin: Buffer.from([0, 255]) }, timestamp: 1_700_000_000_000 },
        {
          value: Buffer.from('v2'),
          headers: [
            { key: 'dup', value: '1' },
            { key: 'dup', value: '2' },
          ],
        },
      ],
    });
    const [r1, r2] = await readAll(t, 0);
    expect(r1!.key!.toString()).toBe('k1');
    expect(r1!.timestamp).toBe(1_700_000_000_000);
    expect(r1!.headers.map((h) => [h.key, [...h.value]])).toEqual([
      ['trace', [...Buffer.from('abc')]],
      ['bin', [0, 255]],
    ]);
    expect(r2!.key).toBeNull();
    expect(r2!.timestamp).toBeGreaterThanOrEqual(before - 1000);
    expect(r2!.headers.map((h) => `${h.key}=${h.value}`)).toEqual(['dup=1', 'dup=2']);
  });

  it('keyed records land on partitionForKey(key) — the partition the broker itself picks for the key', async () => {
    const t = await topic('p-keys', 5);
    const p = producer();
    const keys = Array.from({ length: 60 }, (_, i) => `customer-${i}`);
    const meta = await p.send({ topic: t, messages: keys.map((key) => ({ key, value: key })) });
    for (let i = 0; i < keys.length; i++) expect(meta[i]!.partition).toBe(partitionForKey(Buffer.from(keys[i]!), 5));
    expect(new Set(meta.map((m) => m.partition)).size).toBeGreaterThan(2);
    // The broker's own choice for a PUBLISH with the same key agrees.
    for (const key of keys.slice(0, 10)) {
      const ack = JSON.parse(await suite.admin.command('PUBLISH', { topic: t, key, message: 'x' })) as { partition: number };
      expect(ack.partition).toBe(partitionForKey(Buffer.from(key), 5));
    }
    // and every record is on its partition
    for (let part = 0; part < 5; part++) {
      for (const r of await readAll(t, part)) expect(partitionForKey(r.key!, 5)).toBe(part);
    }
  });

  it("records without key or partition: with keylessPartitioning 'round-robin' one record at a time", async () => {
    const t = await topic('p-rr', 4);
    const p = producer({ keylessPartitioning: 'round-robin' });
    const meta = await p.send({ topic: t, messages: Array.from({ length: 40 }, (_, i) => ({ value: `m${i}` })) });
    const counts = [0, 0, 0, 0];
    for (const m of meta) counts[m.partition]++;
    expect(counts).toEqual([10, 10, 10, 10]);
  });

  it('records without key or partition, by default (sticky): one partition until its batch closes, then the next', async () => {
    const t = await topic('p-sticky', 4);
    const p = producer();
    // One send fills one batch: every record on one partition.
    const first = await p.send({ topic: t, messages: Array.from({ length: 40 }, (_, i) => ({ value: `a${i}` })) });
    expect(new Set(first.map((m) => m.partition)).size).toBe(1);
    // That batch was sent and closed: the next records go to another partition.
    const second = await p.send({ topic: t, messages: [{ value: 'b0' }, { value: 'b1' }] });
    expect(new Set(second.map((m) => m.partition)).size).toBe(1);
    expect(second[0]!.partition).not.toBe(first[0]!.partition);
    // Batches that close when full move the records along: 10 per batch, 4 partitions, 10 each.
    const q = producer({ maxBatchRecords: 10 });
    const meta = await q.send({ topic: t, messages: Array.from({ length: 40 }, (_, i) => ({ value: `c${i}` })) });
    const runs = meta.map((m) => m.partition);
    for (let i = 0; i < 40; i += 10) expect(new Set(runs.slice(i, i + 10)).size).toBe(1);
    expect(new Set(runs).size).toBe(4);
    // Keys and explicit partitions are not affected.
    const keyed = await q.send({
      topic: t,
      messages: [
        { key: 'k1', value: 'x' },
        { value: 'y', partition: 2 },
      ],
    });
    expect(keyed.map((m) => m.partition)).toEqual([partitionForKey(Buffer.from('k1'), 4), 2]);
  });

  it('partitions added to the topic are found: at once for an explicit partition, after metadataMaxAgeMs for the others', async () => {
    const t = await topic('p-grow', 2);
    const p = producer({ keylessPartitioning: 'round-robin' });
    await p.send({ topic: t, messages: [{ value: 'a', partition: 1 }] });
    await suite.admin.command('ADD_PARTITIONS', { topic: t, partitions: 4 });
    // A count kept for good refused partition 3 on the client, without asking the broker again.
    const [m] = await p.send({ topic: t, messages: [{ value: 'b', partition: 3 }] });
    expect(m!.partition).toBe(3);

    const t2 = await topic('p-grow-age', 2);
    const aged = producer({ keylessPartitioning: 'round-robin', metadataMaxAgeMs: 1 });
    await aged.send({ topic: t2, messages: [{ value: 'a' }] });
    await suite.admin.command('ADD_PARTITIONS', { topic: t2, partitions: 4 });
    await sleep(5); // the count's 1 ms age passes (an answer on loopback can come sooner)
    const metas = await aged.send({ topic: t2, messages: Array.from({ length: 8 }, () => ({ value: 'x' })) });
    expect(new Set(metas.map((x) => x.partition))).toEqual(new Set([0, 1, 2, 3]));
  });

  it('keeps per-partition order with several batches in flight on one pipelined connection', async () => {
    const t = await topic('p-order', 2);
    const p = producer({ lingerMs: 0, maxBatchRecords: 25, maxInFlightPerPartition: 5 });
    let inFlight = 0;
    let maxInFlight = 0;
    // Batch frames go out through requestFramed (length prefix included, so the magic is at byte 4).
    const original = Connection.prototype.requestFramed;
    const spy = vi.spyOn(Connection.prototype, 'requestFramed').mockImplementation(function (this: Connection, frame: Buffer, waitMs?: number) {
      const p = original.call(this, frame, waitMs);
      if (frame[4] === 0xba) {
        inFlight++;
        maxInFlight = Math.max(maxInFlight, inFlight);
        p.finally(() => inFlight--).catch(() => {});
      }
      return p;
    });
    let batches = 0;
    p.on('send', () => batches++);
    try {
      const N = 3000;
      // Not awaited one by one: the sends pile up and go out as many pipelined batches.
      const sends = [];
      for (let i = 0; i < N; i++) sends.push(p.send({ topic: t, messages: [{ value: `${i}`, partition: i % 2 }] }));
      const meta = (await Promise.all(sends)).map((m) => m[0]!);
      // offsets follow the send order within each partition
      for (const part of [0, 1]) {
        const offsets = meta.filter((m) => m.partition === part).map((m) => m.offset);
        expect(offsets).toEqual(offsets.map((_, i) => i));
        const values = (await readAll(t, part)).map((r) => Number(r.value.toString()));
        expect(values).toEqual(Array.from({ length: N / 2 }, (_, i) => 2 * i + part));
      }
    } finally {
      spy.mockRestore();
    }
    expect(batches).toBeGreaterThanOrEqual(3000 / 25);
    expect(maxInFlight).toBeGreaterThan(1);
    expect(maxInFlight).toBeLessThanOrEqual(2 * 5);
  });

  it('lingerMs batches records of separate sends into one frame; flush() sends without waiting for it', async () => {
    const t = await topic('p-linger', 1);
    // An hour's linger: only flush() can send these within the test.
    const p = producer({ lingerMs: 3_600_000 });
    const events: Array<{ records: number }> = [];
    p.on('send', (e) => events.push(e));
    let settled = false;
    const sends = [0, 1, 2, 3, 4].map((i) => p.send({ topic: t, messages: [{ value: `v${i}` }] }));
    const all = Promise.all(sends).then((m) => {
      settled = true;
      return m;
    });
    await sleep(100);
    expect(settled).toBe(false);
    expect(p.bufferedBytes).toBeGreaterThan(0);
    await p.flush();
    expect(settled).toBe(true);
    expect((await all).map((m) => m[0]!.offset)).toEqual([0, 1, 2, 3, 4]);
    expect(events).toEqual([expect.objectContaining({ topic: t, partition: 0, records: 5, baseOffset: 0 })]);
    expect(p.bufferedBytes).toBe(0);
    await p.flush(); // nothing buffered: resolves at once
  });

  it('close() flushes what is buffered, is idempotent, and later sends reject with client_closed', async () => {
    const t = await topic('p-close', 1);
    const p = producer({ lingerMs: 60_000 });
    const pending = p.send({ topic: t, messages: [{ value: 'last words' }] });
    const c1 = p.close();
    const c2 = p.close();
    await expect(p.send({ topic: t, messages: [{ value: 'too late' }] })).rejects.toMatchObject({ code: 'client_closed' });
    await Promise.all([c1, c2]);
    expect(await pending).toEqual([{ topic: t, partition: 0, offset: 0 }]);
    expect(p.state).toBe('closed');
    await p.close();
    await expect(p.send({ topic: t, messages: [{ value: 'x' }] })).rejects.toMatchObject({ code: 'client_closed' });
    expect((await readAll(t, 0)).map((r) => r.value.toString())).toEqual(['last words']);
  });

  it('Symbol.asyncDispose closes the producer', async () => {
    const t = await topic('p-dispose', 1);
    let ref: Producer;
    {
      await using p = producer({ lingerMs: 60_000 });
      ref = p;
      void p.send({ topic: t, messages: [{ value: 'disposed' }] });
    }
    expect(ref.state).toBe('closed');
    expect(await endOffsets(t)).toEqual([1]);
  });

  it('backpressure: buffered bytes stay within maxBufferedBytes and every send completes', async () => {
    const t = await topic('p-bp', 2);
    const max = 4096;
    const p = producer({ maxBufferedBytes: max, lingerMs: 1000, maxBatchBytes: 1024 });
    let peak = 0;
    const timer = setInterval(() => {
      peak = Math.max(peak, p.bufferedBytes);
    }, 1);
    const value = Buffer.alloc(200, 7);
    const sends = [];
    for (let i = 0; i < 300; i++) {
      sends.push(p.send({ topic: t, messages: [{ value, partition: i % 2 }] }));
      peak = Math.max(peak, p.bufferedBytes);
    }
    const meta = await Promise.all(sends);
    clearInterval(timer);
    expect(peak).toBeGreaterThan(max / 2);
    expect(peak).toBeLessThanOrEqual(max);
    expect(meta.flat()).toHaveLength(300);
    expect(await endOffsets(t)).toEqual([150, 150]);
  });

  it('backpressure: a send rejects with buffer_full when the buffer stays full past requestTimeoutMs, and honours its signal', async () => {
    const t = await topic('p-full', 1);
    const p = producer({
      maxBufferedBytes: 1000,
      lingerMs: 0,
      requestTimeoutMs: 400,
      retry: { retries: 50, maxElapsedMs: 60_000, initialDelayMs: 20, maxDelayMs: 100 },
    });
    await p.send({ topic: t, messages: [{ value: 'warm-up' }] }); // metadata and connection ready
    suite.broker.proc!.kill('SIGSTOP'); // the broker stops answering: nothing is acknowledged
    try {
      const first = p.send({ topic: t, messages: [{ value: Buffer.alloc(600, 1) }] });
      first.catch(() => {});
      // It waits for room, then gives up with buffer_full (its deadline, requestTimeoutMs after it began to
      // wait, is driven by a fake clock in producer-scripted.test.ts).
      const err = await p.send({ topic: t, messages: [{ value: Buffer.alloc(600, 2) }] }).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(TributaryError);
      expect((err as TributaryError).code).toBe('buffer_full');
      expect((err as TributaryError).retriable).toBe(true);
      expect((err as TributaryError).fields).toMatchObject({ max: 1000 });

      const ac = new AbortController();
      const aborted = p.send({ topic: t, messages: [{ value: Buffer.alloc(600, 3) }] }, { signal: ac.signal });
      setTimeout(() => ac.abort(new Error('caller gave up')), 50);
      await expect(aborted).rejects.toThrow('caller gave up');
      expect(p.bufferedBytes).toBeLessThanOrEqual(1000);

      suite.broker.proc!.kill('SIGCONT');
      // The first send was retried (its attempts timed out) and gets through once the broker is back.
      const [m] = await first;
      expect(m!.partition).toBe(0);
    } finally {
      suite.broker.proc!.kill('SIGCONT');
    }
    await p.flush();
    const values = (await readAll(t, 0)).map((r) => r.value[0]);
    // warm-up, then at least one copy of the first record (a timed-out attempt may have been appended too);
    // neither the buffer_full record nor the aborted one was ever queued
    expect(values.slice(1).every((v) => v === 1)).toBe(true);
    expect(values.length).toBeGreaterThanOrEqual(2);
  });

  it('acks: 0 resolves without offsets (-1) and the records still arrive', async () => {
    const t = await topic('p-acks0', 1);
    const p = producer({ acks: 0 });
    const meta = await p.send({ topic: t, messages: [{ value: 'x' }, { value: 'y' }] });
    expect(meta).toEqual([
      { topic: t, partition: 0, offset: -1 },
      { topic: t, partition: 0, offset: -1 },
    ]);
    await p.close();
    for (let i = 0; i < 50 && (await endOffsets(t))[0] !== 2; i++) await sleep(20);
    expect(await endOffsets(t)).toEqual([2]);
  });

  it('acks: 1 acknowledges like all on a standalone broker', async () => {
    const t = await topic('p-acks1', 1);
    const p = producer({ acks: 1 });
    expect(await p.send({ topic: t, messages: [{ value: 'x' }] })).toEqual([{ topic: t, partition: 0, offset: 0 }]);
  });

  it('emits send events and publishes on the producerSend diagnostics channel', async () => {
    const t = await topic('p-events', 2);
    const p = producer({ lingerMs: 20 });
    const events: unknown[] = [];
    const diag: unknown[] = [];
    const onDiag = (m: unknown) => diag.push(m);
    diagnostics.subscribe(channels.producerSend.name, onDiag);
    p.on('send', (e) => events.push(e));
    try {
      await p.send({
        topic: t,
        messages: [
          { value: 'a', partition: 0 },
          { value: 'b', partition: 0 },
          { value: 'c', partition: 1 },
        ],
      });
    } finally {
      diagnostics.unsubscribe(channels.producerSend.name, onDiag);
    }
    expect(events).toHaveLength(2);
    expect(events).toContainEqual({ topic: t, partition: 0, records: 2, durationMs: expect.any(Number), baseOffset: 0 });
    expect(events).toContainEqual({ topic: t, partition: 1, records: 1, durationMs: expect.any(Number), baseOffset: 0 });
    expect(diag).toHaveLength(2);
    expect(diag).toContainEqual(expect.objectContaining({ topic: t, partition: 0, records: 2, bytes: expect.any(Number) }));
  });

  it('broker errors reject the send: unknown topic, partition out of range, record too large, internal topic', async () => {
    const t = await topic('p-errors', 2);
    const p = producer();
    await expect(p.send({ topic: 'p-no-such-topic', messages: [{ value: 'x' }] })).rejects.toMatchObject({ code: 'topic_not_found' });
    await expect(p.send({ topic: t, messages: [{ value: 'x', partition: 2 }] })).rejects.toMatchObject({ code: 'partition_not_found' });
    await expect(p.send({ topic: '__consumer_offsets', messages: [{ value: 'x' }] })).rejects.toMatchObject({ code: 'invalid_topic_name' });
    expect(p.bufferedBytes).toBe(0);
    // the producer still works afterwards
    expect(await p.send({ topic: t, messages: [{ value: 'ok', partition: 1 }] })).toEqual([{ topic: t, partition: 1, offset: 0 }]);
  });

  it('a record the broker refuses fails its own send, not the one it shared a batch with; the error event reports it', async () => {
    const small = await BrokerProcess.start({ args: ['--offsets-topic-partitions', '4', '--max-record-bytes', '1000'] });
    try {
      const c = await small.connect();
      await c.command('CREATE', { topic: 'p-big', partitions: 1 });
      const p = new Producer({ brokers: [small.address], lingerMs: 50 });
      const errors: Array<{ error: Error; records: number }> = [];
      p.on('error', (e) => errors.push(e));
      const ok = p.send({ topic: 'p-big', messages: [{ value: 'small' }] });
      const big = p.send({ topic: 'p-big', messages: [{ value: Buffer.alloc(5000) }] });
      await expect(big).rejects.toMatchObject({ code: 'record_too_large' });
      // Same batch: refused as a whole, then each send's records went again on their own.
      expect(await ok).toEqual([{ topic: 'p-big', partition: 0, offset: 0 }]);
      expect(errors).toEqual([expect.objectContaining({ topic: 'p-big', partition: 0, records: 1 })]);
      expect(await p.send({ topic: 'p-big', messages: [{ value: 'after' }] })).toEqual([{ topic: 'p-big', partition: 0, offset: 1 }]);
      await p.close();
    } finally {
      await small.dispose();
    }
  });

  it('a send aborted while waiting for its acknowledgement rejects with the reason (the records may still land)', async () => {
    const t = await topic('p-abort', 1);
    const p = producer({ lingerMs: 300 });
    const ac = new AbortController();
    const s = p.send({ topic: t, messages: [{ value: 'x' }] }, { signal: ac.signal });
    for (let i = 0; i < 100 && p.bufferedBytes === 0; i++) await sleep(2); // queued (after the metadata lookup)
    expect(p.bufferedBytes).toBeGreaterThan(0);
    ac.abort(new Error('not waiting'));
    await expect(s).rejects.toThrow('not waiting');
    await p.flush();
    expect(await endOffsets(t)).toEqual([1]);
  });

  it('close({ signal }) gives up on a broker that does not answer: pending sends fail with client_closed', async () => {
    const b2 = await BrokerProcess.start({ args: ['--offsets-topic-partitions', '4'] });
    try {
      const c = await b2.connect();
      await c.command('CREATE', { topic: 'p-stuck', partitions: 1 });
      // Request and stall bounds of 10 minutes: only close()'s signal can end the stuck send within the test.
      const p = new Producer({ brokers: [b2.address], lingerMs: 0, requestTimeoutMs: 600_000, stallTimeoutMs: 600_000 });
      await p.send({ topic: 'p-stuck', messages: [{ value: 'warm-up' }] });
      b2.proc!.kill('SIGSTOP');
      const stuck = p.send({ topic: 'p-stuck', messages: [{ value: 'never acknowledged' }] });
      stuck.catch(() => {});
      await sleep(50);
      await p.close({ signal: AbortSignal.timeout(200) });
      await expect(stuck).rejects.toMatchObject({ code: 'client_closed' });
      expect(p.state).toBe('closed');
    } finally {
      b2.proc?.kill('SIGCONT');
      await b2.dispose();
    }
  });
});

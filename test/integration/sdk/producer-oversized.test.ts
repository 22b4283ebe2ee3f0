/**
 * A record the broker refuses as too large (`--max-record-bytes`) fails its own send() only: the sends
 * whose records shared its batch are sent again without it and acknowledged (docs/sdk.md, "Producer"),
 * in send order, once, also with pipelined batches behind it and an idempotent producer. A send's own
 * records refused as a whole (`--max-batch-bytes`) are written in halves; only a record too large itself
 * fails its send, and its other records are written, in order.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Connection } from 'tributary-protocol/connection.js';
import { Producer } from 'tributary-client/producer.js';
import { BrokerProcess } from '../../helpers/launcher.js';

const MAX_RECORD = 1024;
const MAX_BATCH = 4096;

describe('Producer: a record the broker refuses as too large, batched with good ones', () => {
  let broker: BrokerProcess;
  let admin: Connection;

  beforeAll(async () => {
    broker = await BrokerProcess.start({ args: ['--offsets-topic-partitions', '1', '--max-record-bytes', String(MAX_RECORD), '--max-batch-bytes', String(MAX_BATCH)] });
    admin = await broker.connect();
  });

  afterAll(async () => {
    await broker?.dispose();
  });

  async function values(topic: string): Promise<string[]> {
    const recs = (await admin.consume({ topic, partition: 0, offset: 0, batch: 1000 })).records;
    return recs.map((r) => r.value.toString());
  }

  for (const idempotent of [true, false]) {
    it(`fails the send that holds it, not the others (idempotent: ${idempotent})`, async () => {
      const topic = `oversized-${idempotent}`;
      await admin.command('CREATE', { topic, partitions: 1 });
      // Two records a batch: [a, big] and [c, d] go out at once, pipelined; [e] follows.
      const p = new Producer({ brokers: [broker.address], idempotent, lingerMs: 50, maxBatchRecords: 2, maxInFlightPerPartition: 5 });
      try {
        await p.send({ topic, messages: [{ value: 'warm-up', partition: 0 }] });
        const send = (value: string) => p.send({ topic, messages: [{ value, partition: 0 }] });
        const outcomes = await Promise.allSettled([send('a'), send('b'.repeat(MAX_RECORD + 1)), send('c'), send('d'), send('e')]);
        expect(outcomes.map((o) => o.status)).toEqual(['fulfilled', 'rejected', 'fulfilled', 'fulfilled', 'fulfilled']);
        expect((outcomes[1] as PromiseRejectedResult).reason).toMatchObject({ code: 'record_too_large' });
        const offsets = outcomes.map((o) => (o.status === 'fulfilled' ? o.value[0]!.offset : -1));
        expect((await send('f'))[0]!.offset).toBe(5);
        const log = await values(topic);
        expect([0, 2, 3, 4].map((i) => log[offsets[i]!])).toEqual(['a', 'c', 'd', 'e']);
        // Idempotent: in send order. Without idempotence [c, d], appended while [a] waited for its resend,
        // may precede it (as any batch retried behind a later one; docs/sdk.md, "Producer").
        if (idempotent) expect(log).toEqual(['warm-up', 'a', 'c', 'd', 'e', 'f']);
        else expect([...log].sort()).toEqual(['a', 'c', 'd', 'e', 'f', 'warm-up']);
      } finally {
        await p.close();
      }
    });
  }

  for (const idempotent of [true, false]) {
    it(`writes a send larger than --max-batch-bytes in parts; a send fails only for its own record too large (idempotent: ${idempotent})`, async () => {
      const topic = `halves-${idempotent}`;
      await admin.command('CREATE', { topic, partitions: 1 });
      const p = new Producer({ brokers: [broker.address], idempotent, lingerMs: 0 });
      try {
        // 40 records of 300 bytes: one batch of about 12 KiB, three times the broker's batch limit.
        const many = Array.from({ length: 40 }, (_, i) => String(i).padStart(300, '-'));
        const meta = await p.send({ topic, messages: many.map((value) => ({ value, partition: 0 })) });
        expect(meta.map((m) => m.offset)).toEqual(many.map((_, i) => i));
        const mixed = ['a', 'b', 'x'.repeat(MAX_RECORD + 1), 'd', 'e'];
        await expect(p.send({ topic, messages: mixed.map((value) => ({ value, partition: 0 })) })).rejects.toMatchObject({ code: 'record_too_large' });
        const [after] = await p.send({ topic, messages: [{ value: 'after', partition: 0 }] });
        expect(after!.offset).toBe(44);
        expect(await values(topic)).toEqual([...many, 'a', 'b', 'd', 'e', 'after']);
      } finally {
        await p.close();
      }
    });
  }

});

/**
 * Produce frames large enough to be stamped in their own buffer (append blocks of 16 KiB of records and
 * more, docs/architecture.md "Stored batches") against a real broker: what the SDK producer sent, plain and
 * idempotent, reads back whole and in order from the tail cache, and again from the files after kill -9.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { BatchRecord } from 'tributary-protocol/batch.js';
import { Producer } from 'tributary-client/producer.js';
import { BrokerProcess } from '../../helpers/launcher.js';

const TOPIC = 'large';
const RECORDS = 400;

/** Record i: 1 KiB to 3 KiB, its bytes derived from i. */
const recordValue = (i: number) => Buffer.alloc(1024 + (i % 3) * 1024, i & 0xff).fill(`r${i};`, 0, 8);

describe('large produce frames', () => {
  let broker: BrokerProcess;

  beforeAll(async () => {
    broker = await BrokerProcess.start({ args: ['--offsets-topic-partitions', '1'] });
    const c = await broker.connect();
    await c.command('CREATE', { topic: TOPIC, partitions: 2 });
  });

  afterAll(async () => {
    await broker?.dispose();
  });

  async function readAll(partition: number): Promise<BatchRecord[]> {
    const c = await broker.connect();
    const out: BatchRecord[] = [];
    for (let offset = 0; out.length < RECORDS; ) {
      const batch = await c.consume({ topic: TOPIC, partition, offset, batch: 1000, max_bytes: 1 << 22 });
      if (batch.records.length === 0) break;
      out.push(...batch.records);
      offset = batch.records[batch.records.length - 1]!.offset + 1;
    }
    return out;
  }

  it('read back whole, from the tail cache and from the files after kill -9', async () => {
    const sent: Array<{ partition: number; idempotent: boolean }> = [
      { partition: 0, idempotent: false },
      { partition: 1, idempotent: true },
    ];
    for (const { partition, idempotent } of sent) {
      const producer = new Producer({ brokers: [broker.address], acks: 'all', idempotent, lingerMs: 20, maxBatchBytes: 256 * 1024 });
      try {
        // Sends of 40 records (40-120 KiB): each a frame the broker assembles from several socket reads.
        const sends: Promise<unknown>[] = [];
        for (let i = 0; i < RECORDS; i += 40) {
          const messages = Array.from({ length: 40 }, (_, j) => ({ partition, key: Buffer.from(`k${i + j}`), value: recordValue(i + j), headers: { n: String(i + j) } }));
          sends.push(producer.send({ topic: TOPIC, messages }));
        }
        await Promise.all(sends);
      } finally {
        await producer.close();
      }
    }
    const check = (recs: BatchRecord[]) => {
      expect(recs.map((r) => r.offset)).toEqual(Array.from({ length: RECORDS }, (_, i) => i));
      recs.forEach((r, i) => {
        expect(r.value.equals(recordValue(i)), `record ${i}`).toBe(true);
        expect(r.key?.toString()).toBe(`k${i}`);
        expect(r.headers).toEqual([{ key: 'n', value: Buffer.from(String(i)) }]);
        expect(r.timestamp).toBeGreaterThan(0);
      });
    };
    const cached = [await readAll(0), await readAll(1)];
    cached.forEach(check);
    await broker.kill();
    await broker.relaunch();
    const fromDisk = [await readAll(0), await readAll(1)];
    fromDisk.forEach(check);
    expect(fromDisk.map((p) => p.map((r) => r.timestamp))).toEqual(cached.map((p) => p.map((r) => r.timestamp)));
  }, 120_000);
});

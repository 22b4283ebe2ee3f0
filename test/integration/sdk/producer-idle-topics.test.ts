/**
 * A producer forgets the topics it stopped sending to (docs/sdk.md, "Producer"): their partition counts,
 * round-robin positions, metadata and partition queues went with them never, so a producer that writes to
 * ever new topics (one per tenant or per day) grew without bound. An idempotent producer keeps its
 * partition queues (the sequences the broker expects next): a topic it comes back to goes on, not refused.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Admin } from 'tributary-client/admin.js';
import { Producer } from 'tributary-client/producer.js';
import { BrokerProcess } from '../../helpers/launcher.js';
import { until } from '../../helpers/util.js';

/** The producer's per-topic state, as its private fields hold it (what this test is about). */
function topicState(p: Producer): { counts: number; roundRobin: number; queues: number } {
  const inner = p as unknown as { partitionCounts: Map<string, unknown>; roundRobin: Map<string, unknown>; accumulator: { all(): unknown[] } };
  return { counts: inner.partitionCounts.size, roundRobin: inner.roundRobin.size, queues: inner.accumulator.all().length };
}

describe('SDK producer: topics it no longer sends to', () => {
  let broker: BrokerProcess;
  let admin: Admin;
  const topics = Array.from({ length: 20 }, (_, i) => `tenant-${i}`);

  beforeAll(async () => {
    broker = await BrokerProcess.start({ args: ['--offsets-topic-partitions', '1'] });
    admin = new Admin({ brokers: [broker.address] });
    for (const topic of [...topics, 'live']) await admin.createTopic({ topic, partitions: 2 });
  });

  afterAll(async () => {
    await admin?.close();
    await broker?.dispose();
  });

  it('are forgotten once their metadata is older than metadataMaxAgeMs and nothing of theirs is pending', async () => {
    const producer = new Producer({ brokers: [broker.address], metadataMaxAgeMs: 200 });
    try {
      for (const topic of topics) await producer.send({ topic, messages: [{ value: 'a' }, { value: 'b' }] });
      // Only 'live' is written from now on: the others go at a send past metadataMaxAgeMs.
      await until(
        async () => {
          await producer.send({ topic: 'live', messages: [{ value: 'x' }] });
          const s = topicState(producer);
          return s.counts <= 1 && s.roundRobin <= 1;
        },
        10_000,
        'the idle topics forgotten',
        50,
      );
      expect(topicState(producer).queues).toBeLessThanOrEqual(2);
      // A forgotten topic is simply new again.
      expect((await producer.send({ topic: 'tenant-3', messages: [{ value: 'c', partition: 1 }] }))[0]).toMatchObject({ topic: 'tenant-3', partition: 1 });
    } finally {
      await producer.close();
    }
  });

  it('an idempotent producer keeps its partition queues: a topic it comes back to goes on from its sequence', async () => {
    const producer = new Producer({ brokers: [broker.address], metadataMaxAgeMs: 200, idempotent: true });
    try {
      await producer.send({
        topic: 'tenant-0',
        messages: [
          { value: 'a', partition: 0 },
          { value: 'b', partition: 0 },
        ],
      });
      const queuesBefore = topicState(producer).queues;
      await until(
        async () => {
          await producer.send({ topic: 'live', messages: [{ value: 'x', partition: 0 }] });
          return topicState(producer).counts <= 1;
        },
        10_000,
        'the idle topic forgotten',
        50,
      );
      expect(topicState(producer).queues).toBeGreaterThanOrEqual(queuesBefore);
      // Sequence 2 on partition 0, as the broker expects (a queue made anew would send 0 and be refused).
      const [m] = await producer.send({ topic: 'tenant-0', messages: [{ value: 'c', partition: 0 }] });
      expect(m).toMatchObject({ partition: 0 });
    } finally {
      await producer.close();
    }
  });
});

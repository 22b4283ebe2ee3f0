/**
 * A topic deleted and created again under its name while a group consumes it, faster than the group's
 * heartbeat notices the gap (docs/operations.md, "Deleting a topic"): the new topic is a new log, read
 * from the group's autoOffsetReset. The coordinator sees a new topic id and has every member read its
 * partitions anew (reset=), so no reader carries its position in the old log over: one did, and skipped
 * the new topic's records below it (and committed the old offsets into it).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Admin } from 'tributary-client/admin.js';
import { Consumer } from 'tributary-client/consumer.js';
import { Producer } from 'tributary-client/producer.js';
import { BrokerProcess } from '../../helpers/launcher.js';
import { until } from '../../helpers/util.js';

describe('a topic re-created under a running group', () => {
  let broker: BrokerProcess;
  let admin: Admin;

  beforeAll(async () => {
    broker = await BrokerProcess.start({ args: ['--offsets-topic-partitions', '2', '--group-join-window-ms', '20'] });
    admin = new Admin({ brokers: [broker.address] });
  });

  afterAll(async () => {
    await admin?.close();
    await broker?.dispose();
  });

  it('is read from autoOffsetReset (earliest: offset 0), not from the positions reached in the old topic', { timeout: 60_000 }, async () => {
    const topic = 'recreated';
    await admin.createTopic({ topic, partitions: 2 });
    const producer = new Producer({ brokers: [broker.address] });
    const consumed: Array<{ partition: number; offset: number; value: string }> = [];
    const consumer = new Consumer({ brokers: [broker.address], groupId: 'recreate-g', topic, autoOffsetReset: 'earliest', heartbeatIntervalMs: 1000, maxWaitMs: 200, autoCommitIntervalMs: 200 });
    const running = consumer.run({ eachMessage: ({ message }) => void consumed.push({ partition: message.partition, offset: message.offset, value: message.value.toString() }) });
    try {
      await producer.send({ topic, messages: Array.from({ length: 100 }, (_, i) => ({ value: `old-${i}`, partition: i % 2 })) });
      await until(() => consumed.length === 100, 15_000, 'the old records consumed');
      await until(async () => (await admin.fetchOffset('recreate-g', topic, 0)).offset === 50 && (await admin.fetchOffset('recreate-g', topic, 1)).offset === 50, 10_000, 'the old offsets committed');
      // Within one heartbeat: the coordinator sees the new topic id, not a gap without the topic.
      await admin.deleteTopic(topic);
      await admin.createTopic({ topic, partitions: 2 });
      await producer.send({ topic, messages: Array.from({ length: 160 }, (_, i) => ({ value: `new-${i}`, partition: i % 2 })) });
      const fresh = () => consumed.filter((c) => c.value.startsWith('new-'));
      await until(() => fresh().length >= 160, 20_000, 'every new record consumed');
      for (const p of [0, 1]) {
        expect(
          fresh()
            .filter((c) => c.partition === p)
            .map((c) => c.offset)
            .sort((a, b) => a - b),
        ).toEqual(Array.from({ length: 80 }, (_, i) => i));
      }
      await until(async () => (await admin.fetchOffset('recreate-g', topic, 0)).offset === 80 && (await admin.fetchOffset('recreate-g', topic, 1)).offset === 80, 10_000, 'the new offsets committed');
    } finally {
      await consumer.close();
      await running.catch(() => {});
      await producer.close();
    }
  });
});

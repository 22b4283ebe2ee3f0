/**
 * DeleteTopics on the Kafka port takes the topic's committed offsets from every group, as Kafka does
 * (docs/kafka.md): a kafkajs group that had consumed a topic deleted and re-created with less data starts
 * from the new topic's beginning instead of from an offset beyond its log end, also after a restart; a
 * commit for the deleted topic is refused with UNKNOWN_TOPIC_OR_PARTITION. A Fetch waiting on a topic when it is
 * deleted is answered UNKNOWN_TOPIC_OR_PARTITION, without the deleted records, once the delete is done.
 */
import { Kafka, logLevel } from 'kafkajs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Connection } from 'tributary-protocol/connection.js';
import { kafkaErrorCode } from 'tributary-broker/kafka/protocol/error-codes.js';
import type { KafkaStruct } from 'tributary-broker/kafka/protocol/schema.js';
import { BrokerProcess } from '../../helpers/launcher.js';
import { RawKafka } from '../../helpers/raw-kafka.js';
import { until } from '../../helpers/util.js';

const TOPIC = 'kd';
const GROUP = 'kd-group';

describe('DeleteTopics and committed offsets', () => {
  let broker: BrokerProcess;
  let c: Connection;
  let kafka: Kafka;
  let raw: RawKafka | undefined;

  beforeAll(async () => {
    broker = await BrokerProcess.start({ args: ['--kafka-port', '0', '--group-join-window-ms', '0'] });
    c = await broker.connect();
    kafka = new Kafka({ brokers: [`127.0.0.1:${broker.kafkaPort}`], clientId: 'topic-delete-test', logLevel: logLevel.NOTHING });
  });

  afterAll(async () => {
    raw?.socket.destroy();
    await broker?.dispose();
  });

  async function fillTopic(perPartition: number): Promise<void> {
    await c.command('CREATE', { topic: TOPIC, partitions: 2 });
    for (let p = 0; p < 2; p++) for (let i = 0; i < perPartition; i++) await c.command('PUBLISH', { topic: TOPIC, partition: p, message: `p${p}-r${i}` });
  }

  /** A kafkajs consumer of GROUP until it has received `n` records (committed as it goes); what it got. */
  async function consume(n: number): Promise<Array<{ partition: number; offset: number }>> {
    const got: Array<{ partition: number; offset: number }> = [];
    const consumer = kafka.consumer({ groupId: GROUP, sessionTimeout: 10_000, heartbeatInterval: 300 });
    try {
      await consumer.connect();
      await consumer.subscribe({ topic: TOPIC, fromBeginning: true });
      await consumer.run({ eachMessage: async ({ partition, message }) => void got.push({ partition, offset: Number(message.offset) }) });
      await until(() => got.length >= n, 30_000, `${n} records`);
      // Its commits of what it received, before it leaves.
      await until(async () => (await committed()).every((o) => o === n / 2), 10_000, 'the commits');
    } finally {
      await consumer.disconnect();
    }
    return got;
  }

  /** OffsetFetch v4 of TOPIC's two partitions (-1: none committed). */
  async function committed(): Promise<number[]> {
    raw ??= await RawKafka.connect(broker.kafkaPort);
    const res = await raw.call(9, 4, { groupId: GROUP, topics: [{ name: TOPIC, partitionIndexes: [0, 1] }] });
    return ((res.topics as KafkaStruct[])[0]!.partitions as KafkaStruct[]).map((p) => Number(p.committedOffset));
  }

  it("a re-created topic is consumed from its beginning, not from the old topic's offsets, also after a restart", async () => {
    await fillTopic(10);
    expect(await consume(20)).toHaveLength(20);
    expect(await committed()).toEqual([10, 10]);

    const admin = kafka.admin();
    await admin.connect();
    try {
      await admin.deleteTopics({ topics: [TOPIC] });
    } finally {
      await admin.disconnect();
    }
    expect(await committed()).toEqual([-1, -1]);
    // A commit for the deleted topic (a member that has not heard yet) is refused.
    const res = await raw!.call(8, 7, {
      groupId: GROUP,
      generationId: -1,
      memberId: '',
      groupInstanceId: null,
      topics: [{ name: TOPIC, partitions: [{ partitionIndex: 0, committedOffset: 11, committedLeaderEpoch: -1, committedMetadata: null }] }],
    });
    expect(((res.topics as KafkaStruct[])[0]!.partitions as KafkaStruct[])[0]!.errorCode).toBe(kafkaErrorCode('UNKNOWN_TOPIC_OR_PARTITION'));

    await fillTopic(3);
    expect(await committed()).toEqual([-1, -1]);
    const again = await consume(6);
    expect(again.map((r) => `${r.partition}:${r.offset}`).sort()).toEqual(['0:0', '0:1', '0:2', '1:0', '1:1', '1:2']);

    raw!.socket.destroy();
    raw = undefined;
    await broker.restart();
    expect(await committed()).toEqual([3, 3]);
  });
});

describe('DeleteTopics and a waiting Fetch', () => {
  let broker: BrokerProcess;
  const raws: RawKafka[] = [];

  beforeAll(async () => {
    broker = await BrokerProcess.start({ args: ['--kafka-port', '0'] });
  });

  afterAll(async () => {
    for (const r of raws) r.socket.destroy();
    await broker?.dispose();
  });

  it('a long-poll Fetch of a topic being deleted is answered UNKNOWN_TOPIC_OR_PARTITION with no records (it read the deleted partition again and again until its wait ended)', async () => {
    const c = await broker.connect();
    await c.command('CREATE', { topic: 'kd-wait', partitions: 1 });
    for (let i = 0; i < 3; i++) await c.command('PUBLISH', { topic: 'kd-wait', partition: 0, message: `old-${i}` });
    const [reader, admin] = [await RawKafka.connect(broker.kafkaPort), await RawKafka.connect(broker.kafkaPort)];
    raws.push(reader, admin);
    // Waits for more than the topic holds (minBytes), up to its maxWaitMs.
    const fetched = reader.call(1, 11, {
      replicaId: -1,
      maxWaitMs: 20_000,
      minBytes: 1_000_000,
      maxBytes: 2_000_000,
      isolationLevel: 0,
      sessionId: 0,
      sessionEpoch: -1,
      topics: [{ topic: 'kd-wait', partitions: [{ partition: 0, currentLeaderEpoch: -1, fetchOffset: 0, logStartOffset: -1, partitionMaxBytes: 1_000_000 }] }],
      forgottenTopicsData: [],
      rackId: '',
    });
    // The Fetch is in hand (its request bytes held until it is answered), waiting for more records.
    const pending = async () => Number(/^tributary_kafka_pending_request_bytes (\d+)/m.exec((await broker.health('/metrics')).body)?.[1] ?? 0);
    await until(async () => (await pending()) > 0, 10_000, 'the Fetch being handled');
    const deleted = await admin.call(20, 1, { topicNames: ['kd-wait'], timeoutMs: 30_000 });
    expect((deleted.responses as KafkaStruct[])[0]!.errorCode).toBe(0);
    const p = ((await fetched).responses as KafkaStruct[])[0]!.partitions as KafkaStruct[];
    expect([p[0]!.errorCode, (p[0]!.records as Buffer).length]).toEqual([kafkaErrorCode('UNKNOWN_TOPIC_OR_PARTITION'), 0]);
  });
});

/**
 * The Kafka listener on a 3-broker cluster (docs/kafka.md, "In a cluster"): Metadata names every broker's
 * Kafka address and each partition's leader, kafkajs creates a replicated topic, and an idempotent acks -1
 * producer loses nothing acknowledged and stores nothing twice when a partition leader is killed: the
 * client follows NOT_LEADER_OR_FOLLOWER and Metadata to the new leader on its own. A kafkajs consumer
 * group whose coordinator is killed carries on at the new one without a committed offset going back.
 * Transactions on a cluster: kafka-cluster-transactions.test.ts.
 */
import { type Consumer, Kafka, logLevel } from 'kafkajs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { encodeRecordBatch } from 'tributary-protocol/record-batch/encode.js';
import type { KafkaStruct } from 'tributary-broker/kafka/protocol/schema.js';
import { type StoredAt, expectAcknowledgedStored, readValues } from '../../helpers/acked-records.js';
import { TestCluster } from '../../helpers/cluster.js';
import { kcat, RawKafka } from '../../helpers/raw-kafka.js';

const TOPIC = 'kafka-rf3';
const PARTITIONS = 3;


interface KcatMetadata {
  brokers: { id: number; name: string }[];
  topics: { topic: string; partitions: { partition: number; leader: number; replicas: { id: number }[]; isrs: { id: number }[] }[] }[];
}

describe('the Kafka listener on a 3-broker cluster', () => {
  let cluster: TestCluster;

  beforeAll(async () => {
    cluster = await TestCluster.start(3, ['--kafka-port', '0', '--min-insync-replicas', '2']);
  }, 120_000);

  afterAll(async () => {
    await cluster?.dispose();
  });

  it("a kafkajs group's coordinator is killed: the group goes on at its new coordinator, every record is received, no committed offset goes back", async () => {
    const kafka = new Kafka({ brokers: [0, 1, 2].map((id) => `127.0.0.1:${cluster.broker(id).kafkaPort}`), clientId: 'group-failover', logLevel: logLevel.NOTHING, retry: { retries: 30, initialRetryTime: 100, maxRetryTime: 1000 } });
    const admin = kafka.admin();
    await admin.connect();
    const consumers: Consumer[] = [];
    const received = new Map<string, number>();
    const history: number[][] = [];
    let sampling = true;
    let victim = -1;
    try {
      expect(await admin.createTopics({ topics: [{ topic: 'kg-rf3', numPartitions: 4, replicationFactor: 3 }], waitForLeaders: true })).toBe(true);
      const produce = async (from: number, n: number) => {
        let producer = kafka.producer({ idempotent: true, maxInFlightRequests: 1 });
        // Just after the kill the metadata may still name the dead broker, and kafkajs can give up its idempotent
        // producer's connect (InitProducerId) on that broker's refused connection instead of retrying: connect
        // again, as an application would. Nothing is sent before connect succeeds, so no record is doubled.
        for (let attempt = 1; ; attempt++) {
          try {
            await producer.connect();
            break;
          } catch (err) {
            await producer.disconnect().catch(() => {});
            if (attempt >= 10 || (err as Error).name !== 'KafkaJSConnectionError') throw err;
            await new Promise((r) => setTimeout(r, 500));
            producer = kafka.producer({ idempotent: true, maxInFlightRequests: 1 });
          }
        }
        try {
          await producer.send({ topic: 'kg-rf3', acks: -1, messages: Array.from({ length: n }, (_, i) => ({ key: `k${(from + i) % 8}`, value: `v${from + i}` })) });
        } finally {
          await producer.disconnect();
        }
      };
      await produce(0, 200);
      for (let m = 0; m < 2; m++) {
        const c = kafka.consumer({ groupId: 'failover', sessionTimeout: 10_000, heartbeatInterval: 300 });
        consumers.push(c);
        await c.connect();
        await c.subscribe({ topic: 'kg-rf3', fromBeginning: true });
        await c.run({ eachMessage: async ({ message }) => void received.set(message.value!.toString(), (received.get(message.value!.toString()) ?? 0) + 1) });
      }
      await cluster.waitFor('the first 200 records', async () => received.size >= 200, 60_000);
      // Committed offsets sampled all along: none may ever go back.
      const sampler = (async () => {
        while (sampling) {
          try {
            const [t] = await admin.fetchOffsets({ groupId: 'failover', topics: ['kg-rf3'] });
            history.push(t!.partitions.sort((a, b) => a.partition - b.partition).map((p) => Number(p.offset)));
          } catch {
            // the coordinator moving: sampled again next time
          }
          await new Promise((r) => setTimeout(r, 200));
        }
      })();
      const raw = await RawKafka.connect(cluster.broker(0).kafkaPort);
      victim = (await raw.call(10, 3, { key: 'failover', keyType: 0 })).nodeId as number;
      raw.socket.destroy();
      await cluster.broker(victim).kill('SIGKILL');
      await produce(200, 200);
      await cluster.waitFor('all 400 records after the coordinator died', async () => received.size >= 400, 90_000);
      // The members commit what they processed at their new coordinator: every partition at its end.
      // (-1: nothing committed there; keyed records need not reach every partition.)
      const committed = (sample: number[] | undefined) => sample?.reduce((a, b) => a + Math.max(0, b), 0);
      await cluster.waitFor('every record committed', async () => committed(history.at(-1)) === 400, 60_000);
      sampling = false;
      await sampler;
      expect(history.length).toBeGreaterThan(3);
      for (let i = 1; i < history.length; i++) {
        for (const [p, o] of history[i]!.entries()) expect(o, `partition ${p} sample ${i}`).toBeGreaterThanOrEqual(history[i - 1]![p]!);
      }
      expect([...received.keys()].sort()).toEqual(Array.from({ length: 400 }, (_, i) => `v${i}`).sort());
    } finally {
      sampling = false;
      await Promise.all(consumers.map((c) => c.disconnect().catch(() => {})));
      await admin.disconnect();
      if (victim >= 0) {
        await cluster.broker(victim).relaunch();
        await cluster.waitFor('the killed broker back', async () => (await cluster.status()).brokers.length === 3);
      }
    }
  }, 240_000);

  it("a Kafka producer's timestamps 0 and -1 reach the followers as given: the next leader serves them after the old one is killed", async () => {
    const topic = 'kafka-ts-rf3';
    const leader = (await cluster.createInSync(topic)).id;
    const raw = await RawKafka.connect(cluster.broker(leader).kafkaPort);
    const normal = 1_700_000_000_000;
    try {
      const records = encodeRecordBatch({ records: [0, -1, normal].map((timestamp, i) => ({ key: null, value: Buffer.from(`t${i}`), timestamp })) });
      // acks -1 under --min-insync-replicas 2: answered once a follower appended them too.
      const res = await raw.call(0, 7, { transactionalId: null, acks: -1, timeoutMs: 5000, topicData: [{ name: topic, partitionData: [{ index: 0, records }] }] });
      expect(((res.responses as KafkaStruct[])[0]!.partitionResponses as KafkaStruct[])[0]!.errorCode).toBe(0);
    } finally {
      raw.socket.destroy();
    }
    await cluster.broker(leader).kill('SIGKILL');
    try {
      const next = await cluster.waitFor(`a new leader of ${topic}[0]`, async () => {
        const l = await cluster.leaderOf(topic, 0);
        return l.id >= 0 && l.id !== leader ? l.id : false;
      });
      const c = await cluster.connect(next);
      try {
        const got = await cluster.waitFor('the records at the new leader', async () => {
          const recs = (await c.consume({ topic, partition: 0, offset: 0, batch: 10 }).catch(() => ({ records: [] }))).records;
          return recs.length === 3 ? recs : false;
        });
        expect(got.map((r) => r.timestamp)).toEqual([0, -1, normal]);
      } finally {
        await c.close().catch(() => {});
      }
    } finally {
      await cluster.broker(leader).relaunch();
      await cluster.waitFor('the killed broker back', async () => (await cluster.status()).brokers.length === 3);
    }
  }, 120_000);

  it('Metadata names every Kafka address and leader; an acks -1 producer loses nothing when a leader is killed', async () => {
    const kafkaAddress = (id: number) => `127.0.0.1:${cluster.broker(id).kafkaPort}`;
    const kafka = new Kafka({ brokers: [0, 1, 2].map(kafkaAddress), clientId: 'cluster-test', logLevel: logLevel.NOTHING });
    const admin = kafka.admin();
    await admin.connect();
    try {
      expect(await admin.createTopics({ topics: [{ topic: TOPIC, numPartitions: PARTITIONS, replicationFactor: 3 }] })).toBe(true);
    } finally {
      await admin.disconnect();
    }
    const states = await cluster.waitFor(`${TOPIC} led with full ISRs`, async () => {
      const ps = (await cluster.status()).partitions.filter((p) => p.topic === TOPIC);
      return ps.length === PARTITIONS && ps.every((p) => p.leader >= 0 && p.isr.length === 3) ? ps : false;
    });
    // Every broker answers Metadata with the same nodes and leaders as the cluster's partition states.
    for (const via of [0, 1, 2]) {
      const meta = JSON.parse(await kcat(['-b', kafkaAddress(via), '-L', '-J', '-t', TOPIC])) as KcatMetadata;
      expect(meta.brokers.sort((a, b) => a.id - b.id)).toEqual([0, 1, 2].map((id) => ({ id, name: kafkaAddress(id) })));
      const parts = meta.topics[0]!.partitions.sort((a, b) => a.partition - b.partition);
      expect(parts.map((p) => p.leader)).toEqual(states.sort((a, b) => a.partition - b.partition).map((s) => s.leader));
      expect(parts.every((p) => p.replicas.length === 3 && p.isrs.length === 3)).toBe(true);
    }

    const producer = kafka.producer({ idempotent: true, maxInFlightRequests: 1, retry: { retries: 20, initialRetryTime: 100, maxRetryTime: 1000 } });
    await producer.connect();
    const acked = new Map<string, StoredAt>();
    const ackedPerPartition = [0, 0, 0];
    let stop = false;
    // One sender per partition: kafkajs reuses a failed request's sequence numbers for the next send() to
    // the partition, which duplicates records when the failed one was appended (test/fault/kafka-kill9.test.ts).
    const lanes = Array.from({ length: PARTITIONS }, async (_, lane) => {
      const partition = lane % PARTITIONS;
      for (let n = 0; !stop; n++) {
        const value = `${lane}-${n}`;
        try {
          const [meta] = await producer.send({ topic: TOPIC, acks: -1, messages: [{ value, partition }] });
          acked.set(value, { partition, offset: Number(meta!.baseOffset) });
          ackedPerPartition[partition]!++;
        } catch {
          // Not acknowledged: it may or may not be stored, but never twice (checked below).
        }
      }
    });
    await cluster.waitFor('100 acknowledged records', async () => acked.size >= 100);
    const victim = (await cluster.leaderOf(TOPIC, 0)).id;
    const before = ackedPerPartition[0]!;
    await cluster.broker(victim).kill('SIGKILL');
    // The producer carries on through the new leader of partition 0.
    await cluster.waitFor('partition 0 written through its new leader', async () => ackedPerPartition[0]! >= before + 50, 60_000);
    stop = true;
    await Promise.all(lanes);
    await producer.disconnect();

    const stored = new Map<string, StoredAt>();
    for (let p = 0; p < PARTITIONS; p++) {
      const leader = await cluster.waitFor(`a live leader of ${TOPIC}[${p}]`, async () => {
        const l = await cluster.leaderOf(TOPIC, p);
        return l.id >= 0 && l.id !== victim ? l.id : false;
      });
      await readValues(await cluster.connect(leader), TOPIC, p, stored);
    }
    expectAcknowledgedStored(acked, stored);
    expect(acked.size).toBeGreaterThan(150);
  }, 180_000);
});

/**
 * Transactional ids belong to the principal that initialized them (docs/security.md, "Transactional ids")
 * in a cluster with authentication on, where a Kafka request reaches another broker than the id's
 * coordinator: a transactional Produce at a partition's leader (asked on with TXN_VERIFY) and a
 * TxnOffsetCommit at the group's coordinator (passed on with TXN_OFFSETS) carry the client's principal,
 * so another principal is refused there too, while the owner (an admin here) goes through.
 */
import fs from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { encodeRecordBatch } from 'tributary-protocol/record-batch/encode.js';
import { kafkaErrorCode } from 'tributary-broker/kafka/protocol/error-codes.js';
import type { KafkaStruct } from 'tributary-broker/kafka/protocol/schema.js';
import { TestCluster } from '../../helpers/cluster.js';
import { RawKafka } from '../../helpers/raw-kafka.js';
import { removeDir, tempDir } from '../../helpers/util.js';
import { addUser } from '../security/pki.js';

const TXN_AUTH = kafkaErrorCode('TRANSACTIONAL_ID_AUTHORIZATION_FAILED');
const first = (s: KafkaStruct, field: string) => (s[field] as KafkaStruct[])[0]!;

describe('transactional id ownership across brokers (Kafka port, authentication on)', () => {
  let dir: string;
  let cluster: TestCluster;
  const tokens: Record<string, string> = {};
  const raws: RawKafka[] = [];

  async function rawAs(user: string, broker: number): Promise<RawKafka> {
    const raw = await RawKafka.connect(cluster.broker(broker).kafkaPort);
    raws.push(raw);
    expect((await raw.call(17, 1, { mechanism: 'PLAIN' })).errorCode).toBe(0);
    expect((await raw.call(36, 2, { authBytes: Buffer.from(`\0${user}\0${tokens[user]!}`) })).errorCode).toBe(0);
    return raw;
  }

  /** The broker coordinating `key` (keyType 0: a group, 1: a transactional id). */
  async function coordinatorOf(key: string, keyType: 0 | 1): Promise<number> {
    const raw = await rawAs('admin', 0);
    return cluster.waitFor(`the coordinator of ${key}`, async () => {
      const r = await raw.call(10, 3, { key, keyType });
      return r.errorCode === 0 ? (r.nodeId as number) : false;
    });
  }

  beforeAll(async () => {
    dir = await tempDir('tributary-cluster-txn-owner-');
    const config = path.join(dir, 'broker.json');
    fs.writeFileSync(config, JSON.stringify({ authentication: true, interBrokerPrincipal: 'broker' }));
    const brokerToken = addUser(config, 'broker', ['admin']);
    tokens.admin = addUser(config, 'admin', ['admin']);
    tokens.alice = addUser(config, 'alice', ['topic.read', 'topic.write', 'group', 'transaction']);
    cluster = await TestCluster.start(3, ['--config', config, '--inter-broker-token', brokerToken, '--kafka-port', '0', '--min-insync-replicas', '2'], {}, { clientAuth: { principal: 'admin', token: tokens.admin } });
  }, 120_000);

  afterAll(async () => {
    for (const r of raws) r.socket.destroy();
    await cluster?.dispose();
    if (dir) await removeDir(dir);
  });

  it("alice's Produce at another leader and TxnOffsetCommit at another group coordinator, into admin's transaction, are TRANSACTIONAL_ID_AUTHORIZATION_FAILED; admin's commit goes through", async () => {
    const c = await cluster.connect(0);
    await c.command('CREATE', { topic: 'cown', partitions: 3, replication_factor: 3 });
    const leaders = await cluster.waitFor('cown led with full ISRs', async () => {
      const ps = (await cluster.status()).partitions.filter((p) => p.topic === 'cown').sort((a, b) => a.partition - b.partition);
      return ps.length === 3 && ps.every((p) => p.leader >= 0 && p.isr.length === 3) ? ps.map((p) => p.leader) : false;
    });
    // An id, and a group, coordinated by another broker than a partition's leader.
    let id = '';
    let group = '';
    let at = { txn: -1, group: -1, partition: -1 };
    for (let i = 0; !id; i++) {
      const t = await coordinatorOf(`cown-id-${i}`, 1);
      const partition = leaders.findIndex((l) => l !== t);
      if (partition >= 0) [id, at] = [`cown-id-${i}`, { txn: t, group: -1, partition }];
    }
    for (let i = 0; !group; i++) {
      const g = await coordinatorOf(`cown-group-${i}`, 0);
      if (g !== at.txn) [group, at.group] = [`cown-group-${i}`, g];
    }
    const leader = leaders[at.partition]!;

    const admin = await rawAs('admin', at.txn);
    const init = await admin.call(22, 1, { transactionalId: id, transactionTimeoutMs: 60_000 });
    expect(init.errorCode).toBe(0);
    const p = { transactionalId: id, producerId: init.producerId as bigint, producerEpoch: init.producerEpoch as number };
    const added = await admin.call(24, 1, { ...p, topics: [{ name: 'cown', partitions: [at.partition] }] });
    expect(first(first(added, 'results'), 'results').errorCode).toBe(0);
    expect((await admin.call(25, 1, { ...p, groupId: group })).errorCode).toBe(0);

    const produce = (raw: RawKafka, value: string, baseSequence: number) =>
      raw.call(0, 7, {
        transactionalId: id,
        acks: -1,
        timeoutMs: 5000,
        topicData: [{ name: 'cown', partitionData: [{ index: at.partition, records: encodeRecordBatch({ records: [{ key: null, value: Buffer.from(value) }], producerId: Number(p.producerId), producerEpoch: p.producerEpoch, baseSequence, transactional: true }) }] }],
      });
    const produceCode = (res: KafkaStruct) => first(first(res, 'responses'), 'partitionResponses').errorCode;
    const offsetCommit = (raw: RawKafka, offset: number) =>
      raw.call(28, 1, { ...p, groupId: group, topics: [{ name: 'cown', partitions: [{ partitionIndex: at.partition, committedOffset: offset, committedMetadata: null }] }] });
    const offsetCode = (res: KafkaStruct) => first(first(res, 'topics'), 'partitions').errorCode;

    const alice = await rawAs('alice', leader);
    expect(produceCode(await produce(alice, 'alice-in-admins', 0))).toBe(TXN_AUTH);
    const aliceAtGroup = await rawAs('alice', at.group);
    expect(offsetCode(await offsetCommit(aliceAtGroup, 7))).toBe(TXN_AUTH);

    // The owner, through the same brokers.
    expect(produceCode(await produce(await rawAs('admin', leader), 'admins', 0))).toBe(0);
    expect(offsetCode(await offsetCommit(await rawAs('admin', at.group), 1))).toBe(0);
    expect((await admin.call(26, 1, { ...p, committed: true })).errorCode).toBe(0);
    const atLeader = await cluster.connect(leader);
    // Only admin's record is in the partition, committed (read_committed skips the marker).
    const values = await cluster.waitFor('the commit marker', async () => {
      const batch = await atLeader.consume({ topic: 'cown', partition: at.partition, offset: 0, batch: 100, isolation: 'read_committed' });
      return batch.records.length > 0 ? batch.records.map((r) => r.value.toString()) : false;
    });
    expect(values).toEqual(['admins']);
  });
});

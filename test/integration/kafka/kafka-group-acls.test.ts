/**
 * Group ACLs on the Kafka port (docs/kafka.md, "Authentication and authorization"; docs/security.md,
 * "Group ACLs") against a real broker with authentication on: kafkajs authenticated with SASL/PLAIN gets
 * GROUP_AUTHORIZATION_FAILED for a group its principal may not use, on every group API, and works for its
 * own; ListGroups leaves the group out; refused requests leave the group and its offsets as they were.
 */
import fs from 'node:fs';
import path from 'node:path';
import { Kafka, logLevel } from 'kafkajs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseDocument } from 'yaml';
import { Connection } from 'tributary-protocol/connection.js';
import { encodeRecordBatch } from 'tributary-protocol/record-batch/encode.js';
import { kafkaErrorCode } from 'tributary-broker/kafka/protocol/error-codes.js';
import type { KafkaStruct } from 'tributary-broker/kafka/protocol/schema.js';
import { BrokerProcess } from '../../helpers/launcher.js';
import { RawKafka } from '../../helpers/raw-kafka.js';
import { removeDir, tempDir, until } from '../../helpers/util.js';
import { addUser } from '../security/pki.js';

const DENIED = kafkaErrorCode('GROUP_AUTHORIZATION_FAILED');
const plainToken = (user: string, password: string) => Buffer.from(`\0${user}\0${password}`);

interface Disconnectable {
  disconnect(): Promise<void>;
}

describe('group ACLs on the Kafka port', () => {
  let dir: string;
  let config: string;
  let broker: BrokerProcess;
  let admin: Connection;
  const tokens: Record<string, string> = {};
  const raws: RawKafka[] = [];
  const clients: Disconnectable[] = [];
  /** GROUP_JOIN events of alice's consumer: one while nobody else got in. */
  let aliceJoins = 0;

  /**
   * The Kafka error types kafkajs logged (at debug): it reports a refused FindCoordinator as "coordinator
   * not found" (it asks the next broker), the error the broker sent only in its log.
   */
  const kafkaErrors: string[] = [];
  const kafka = (user: string) =>
    new Kafka({
      brokers: [`127.0.0.1:${broker.kafkaPort}`],
      clientId: `gacl-${user}`,
      logLevel: logLevel.DEBUG,
      logCreator: () => (entry) => {
        const type = (entry.log.error as { type?: unknown } | undefined)?.type;
        if (user === 'bob' && typeof type === 'string') kafkaErrors.push(type);
      },
      retry: { retries: 0 },
      sasl: { mechanism: 'plain', username: user, password: tokens[user]! },
    });
  const track = <T extends Disconnectable>(c: T): T => {
    clients.push(c);
    return c;
  };

  async function rawAs(user: string): Promise<RawKafka> {
    const raw = await RawKafka.connect(broker.kafkaPort);
    raws.push(raw);
    expect((await raw.call(17, 1, { mechanism: 'PLAIN' })).errorCode).toBe(0);
    expect((await raw.call(36, 2, { authBytes: plainToken(user, tokens[user]!) })).errorCode).toBe(0);
    return raw;
  }
  const groupStatus = async (group: string) => JSON.parse(await admin.command('GROUP_STATUS', { group })) as { generation: number; state: string; members: Array<{ member_id: string }> };

  /** A kafkajs consumer of `orders` in `groupId`, collecting the values it reads. */
  async function consume(user: string, groupId: string, onJoin?: () => void) {
    const consumer = track(kafka(user).consumer({ groupId, sessionTimeout: 30_000, heartbeatInterval: 500, retry: { retries: 0, restartOnFailure: async () => false } }));
    const values: string[] = [];
    const crashed = new Promise<Error>((resolve) => consumer.on(consumer.events.CRASH, (e) => resolve(e.payload.error)));
    if (onJoin) consumer.on(consumer.events.GROUP_JOIN, onJoin);
    await consumer.connect();
    await consumer.subscribe({ topic: 'orders', fromBeginning: true });
    await consumer.run({ autoCommit: false, eachMessage: async ({ message }) => void values.push(message.value!.toString()) });
    return { consumer, values, crashed };
  }

  beforeAll(async () => {
    dir = await tempDir('tributary-kafka-groupacl-');
    config = path.join(dir, 'broker.yaml');
    fs.writeFileSync(config, ['authentication: true', 'groupAcls:', "  'alice-*': [alice]", "  'bob-*': [bob]", ''].join('\n'));
    tokens.admin = addUser(config, 'admin', ['admin']);
    for (const user of ['alice', 'bob']) tokens[user] = addUser(config, user, ['topic.read', 'topic.write', 'group', 'transaction']);
    broker = await BrokerProcess.start({ args: ['--config', config, '--kafka-port', '0', '--offsets-topic-partitions', '1', '--log-level', 'warn'] });
    admin = await Connection.connect({ host: '127.0.0.1', port: broker.port, auth: { principal: 'admin', token: tokens.admin } });
    await admin.command('CREATE', { topic: 'orders', partitions: 1 });
    for (const m of ['a', 'b']) await admin.command('PUBLISH', { topic: 'orders', partition: 0, message: m });
    // alice's consumer group, Stable, with offset 2 committed.
    const alice = await consume('alice', 'alice-k', () => aliceJoins++);
    await until(() => alice.values.length === 2, 20_000);
    await alice.consumer.commitOffsets([{ topic: 'orders', partition: 0, offset: '2' }]);
  }, 60_000);

  afterAll(async () => {
    for (const c of clients) await c.disconnect().catch(() => {});
    for (const r of raws) r.socket.destroy();
    await admin?.close().catch(() => {});
    await broker?.dispose();
    if (dir) await removeDir(dir);
  });

  it("kafkajs as bob: a consumer of alice's group fails with GROUP_AUTHORIZATION_FAILED, one of bob's own group reads", async () => {
    const refused = await consume('bob', 'alice-k');
    expect(await refused.crashed).toMatchObject({ name: 'KafkaJSGroupCoordinatorNotFound' });
    expect(kafkaErrors).toContain('GROUP_AUTHORIZATION_FAILED');
    expect(refused.values).toEqual([]);
    const own = await consume('bob', 'bob-k');
    await expect.poll(() => own.values, { timeout: 20_000 }).toEqual(['a', 'b']);

    const bobAdmin = track(kafka('bob').admin());
    await bobAdmin.connect();
    const ids = (await bobAdmin.listGroups()).groups.map((g) => g.groupId);
    expect(ids).toContain('bob-k');
    expect(ids).not.toContain('alice-k');
    kafkaErrors.length = 0;
    await expect(bobAdmin.fetchOffsets({ groupId: 'alice-k', topics: ['orders'] })).rejects.toMatchObject({ name: 'KafkaJSGroupCoordinatorNotFound' });
    expect(kafkaErrors).toContain('GROUP_AUTHORIZATION_FAILED');
    expect(await bobAdmin.fetchOffsets({ groupId: 'bob-k', topics: ['orders'] })).toHaveLength(1);
    const aliceAdmin = track(kafka('alice').admin());
    await aliceAdmin.connect();
    expect((await aliceAdmin.listGroups()).groups.map((g) => g.groupId)).toContain('alice-k');
  });

  it("every group API naming alice's group is refused to bob on the wire, and the group and its offset stay as they were", async () => {
    const before = await groupStatus('alice-k');
    expect(before.state).toBe('Stable');
    const [member] = before.members.map((m) => m.member_id);
    const generationId = before.generation;
    const raw = await rawAs('bob');
    const groupId = 'alice-k';
    const partitions = (offset: bigint) => [{ name: 'orders', partitions: [{ partitionIndex: 0, committedOffset: offset, committedMetadata: null }] }];

    expect((await raw.call(10, 1, { key: groupId, keyType: 0 })).errorCode).toBe(DENIED);
    const join = await raw.call(11, 1, { groupId, sessionTimeoutMs: 30000, rebalanceTimeoutMs: 30000, memberId: '', protocolType: 'consumer', protocols: [{ name: 'range', metadata: Buffer.alloc(0) }] });
    expect(join.errorCode).toBe(DENIED);
    expect((await raw.call(14, 0, { groupId, generationId, memberId: member, assignments: [] })).errorCode).toBe(DENIED);
    expect((await raw.call(12, 0, { groupId, generationId, memberId: member })).errorCode).toBe(DENIED);
    expect((await raw.call(13, 0, { groupId, memberId: member })).errorCode).toBe(DENIED);
    const commit = await raw.call(8, 2, { groupId, generationId: -1, memberId: '', topics: partitions(0n) });
    expect(((commit.topics as KafkaStruct[])[0]!.partitions as KafkaStruct[])[0]!.errorCode).toBe(DENIED);
    expect((await raw.call(9, 3, { groupId, topics: [{ name: 'orders', partitionIndexes: [0] }] })).errorCode).toBe(DENIED);
    expect(((await raw.call(15, 0, { groups: [groupId] })).groups as KafkaStruct[])[0]!.errorCode).toBe(DENIED);
    // The transactional ones, with an id bob may use: refused for the group.
    expect((await raw.call(25, 0, { transactionalId: 'bob-ktx', producerId: 0n, producerEpoch: 0, groupId })).errorCode).toBe(DENIED);
    const txnCommit = await raw.call(28, 0, { transactionalId: 'bob-ktx', groupId, producerId: 0n, producerEpoch: 0, topics: partitions(0n) });
    expect(((txnCommit.topics as KafkaStruct[])[0]!.partitions as KafkaStruct[])[0]!.errorCode).toBe(DENIED);
    // Per group where one request names several: bob's own group is served beside the refused one.
    const codes = (xs: unknown) => (xs as KafkaStruct[]).map((x) => x.errorCode);
    expect(codes((await raw.call(10, 4, { keyType: 0, coordinatorKeys: [groupId, 'bob-k'] })).coordinators)).toEqual([DENIED, 0]);
    expect(codes((await raw.call(15, 0, { groups: [groupId, 'bob-k'] })).groups)).toEqual([DENIED, 0]);
    const fetch8 = await raw.call(9, 8, { groups: [{ groupId, topics: null }, { groupId: 'bob-k', topics: null }], requireStable: false });
    expect(codes(fetch8.groups)).toEqual([DENIED, 0]);
    expect((fetch8.groups as KafkaStruct[])[0]!.topics).toEqual([]);
    // ListGroups leaves it out.
    const listed = ((await raw.call(16, 0, {})).groups as KafkaStruct[]).map((g) => g.groupId);
    expect(listed).not.toContain(groupId);

    // Nothing changed: the same member and generation, Stable, one join of alice's consumer, offset 2 kept.
    const after = await groupStatus('alice-k');
    expect([after.generation, after.state, after.members.map((m) => m.member_id)]).toEqual([generationId, 'Stable', [member]]);
    expect(aliceJoins).toBe(1);
    expect(await admin.command('FETCH_OFFSET', { group: 'alice-k', topic: 'orders', partition: 0 })).toMatch(/offset=2\b/);
    // alice herself passes the same check.
    const aliceRaw = await rawAs('alice');
    expect(((await aliceRaw.call(15, 0, { groups: [groupId] })).groups as KafkaStruct[])[0]!.errorCode).toBe(0);
  });
  it('EndTxn commit of offsets staged before a SIGHUP withdrew the group is refused, and the transaction is left to abort', async () => {
    /** Rewrites groupAcls and sends SIGHUP; `applied` tells (on the wire) when the broker has the new ones. */
    const reload = async (groupAcls: Record<string, string[]>, applied: () => Promise<boolean>) => {
      const doc = parseDocument(fs.readFileSync(config, 'utf8'));
      doc.set('groupAcls', doc.createNode(groupAcls));
      fs.writeFileSync(config, doc.toString());
      broker.proc!.kill('SIGHUP');
      await until(applied, 5000);
    };
    const raw = await rawAs('bob');
    const groupId = 'alice-kt';
    const findCoordinator = async () => (await raw.call(10, 1, { key: groupId, keyType: 0 })).errorCode as number;
    await reload({ 'alice-*': ['alice'], 'alice-kt': ['bob'], 'bob-*': ['bob'] }, async () => (await findCoordinator()) === 0);
    const init = await raw.call(22, 1, { transactionalId: 'bob-kt', transactionTimeoutMs: 60_000 });
    expect(init.errorCode).toBe(0);
    const txn = { transactionalId: 'bob-kt', producerId: init.producerId as bigint, producerEpoch: init.producerEpoch as number };
    expect((await raw.call(24, 1, { ...txn, topics: [{ name: 'orders', partitions: [0] }] })).results).toEqual([{ name: 'orders', results: [{ partitionIndex: 0, errorCode: 0 }] }]);
    const records = encodeRecordBatch({ records: [{ key: null, value: Buffer.from('in-txn') }], producerId: Number(txn.producerId), producerEpoch: txn.producerEpoch, baseSequence: 0, transactional: true });
    const produced = await raw.call(0, 7, { transactionalId: 'bob-kt', acks: -1, timeoutMs: 5000, topicData: [{ name: 'orders', partitionData: [{ index: 0, records }] }] });
    expect((produced.responses as Array<{ partitionResponses: Array<{ errorCode: number }> }>)[0]!.partitionResponses[0]!.errorCode).toBe(0);
    expect((await raw.call(25, 0, { ...txn, groupId })).errorCode).toBe(0);
    const staged = await raw.call(28, 0, { ...txn, groupId, topics: [{ name: 'orders', partitions: [{ partitionIndex: 0, committedOffset: 1n, committedMetadata: null }] }] });
    expect(((staged.topics as KafkaStruct[])[0]!.partitions as KafkaStruct[])[0]!.errorCode).toBe(0);

    await reload({ 'alice-*': ['alice'], 'bob-*': ['bob'] }, async () => (await findCoordinator()) === DENIED);
    // Neither the offsets without the record nor the record without the offsets: the commit is refused whole.
    expect((await raw.call(26, 1, { ...txn, committed: true })).errorCode).toBe(DENIED);
    // Still open, its offsets pending (not applied): only the abort ends it.
    expect(await admin.command('TXN_STATUS', { transactional_id: 'bob-kt' })).toMatch(/state=open/);
    await expect(admin.command('FETCH_OFFSET', { group: groupId, topic: 'orders', partition: 0 })).rejects.toMatchObject({ code: 'UNSTABLE_OFFSET_COMMIT' });
    expect((await raw.call(26, 1, { ...txn, committed: false })).errorCode).toBe(0);
    expect(await admin.command('TXN_STATUS', { transactional_id: 'bob-kt' })).toMatch(/state=aborted/);
    const after = await admin.command('FETCH_OFFSET', { group: groupId, topic: 'orders', partition: 0 });
    expect(after).toMatch(/^OK /);
    expect(after).not.toMatch(/offset=1\b/);
  });
});

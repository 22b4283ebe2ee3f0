/**
 * A transactional id belongs to the principal that first initialized it (docs/security.md, "Transactional
 * ids"), against a real broker with authentication on, on the main port and the Kafka port: another
 * principal with every permission a transaction needs (but not `admin`) cannot read the id's producer id
 * and epoch, publish into its transaction, end it, or fence its producer, and the owner's transaction
 * commits as if nothing happened; an admin may take an id over; ownership survives a kill -9.
 */
import fs from 'node:fs';
import path from 'node:path';
import { Kafka, logLevel } from 'kafkajs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { encodeBatch } from 'tributary-protocol/batch.js';
import { Connection } from 'tributary-protocol/connection.js';
import { encodeRecordBatch } from 'tributary-protocol/record-batch/encode.js';
import { kafkaErrorCode } from 'tributary-broker/kafka/protocol/error-codes.js';
import type { KafkaStruct } from 'tributary-broker/kafka/protocol/schema.js';
import { BrokerProcess } from '../../helpers/launcher.js';
import { RawKafka } from '../../helpers/raw-kafka.js';
import { tempDir } from '../../helpers/util.js';
import { addUser } from './pki.js';

const FORBIDDEN = /^ERROR: NOT_AUTHORIZED_FOR_OPERATION (?=.*\bclass=authorization\b)(?=.*\bprincipal=alice\b)/;
const TXN_AUTH = kafkaErrorCode('TRANSACTIONAL_ID_AUTHORIZATION_FAILED');
const first = (s: KafkaStruct, field: string) => (s[field] as KafkaStruct[])[0]!;

describe('transactional ids belong to the principal that initialized them', () => {
  let dir: string;
  let broker: BrokerProcess;
  const tokens: Record<string, string> = {};
  const closers: Array<() => unknown> = [];

  async function connect(principal: string): Promise<Connection> {
    const c = await Connection.connect({ host: '127.0.0.1', port: broker.port, auth: { principal, token: tokens[principal]! } });
    closers.push(() => c.close().catch(() => {}));
    return c;
  }

  /** The reply text, `ERROR: ...` included. */
  async function send(c: Connection, line: string | Buffer): Promise<string> {
    const r = await c.request(line);
    return r.kind === 'text' ? r.text : '(batch)';
  }

  /** A Kafka connection authenticated as `user` with SASL/PLAIN. */
  async function rawAs(user: string): Promise<RawKafka> {
    const raw = await RawKafka.connect(broker.kafkaPort);
    closers.push(() => raw.socket.destroy());
    expect((await raw.call(17, 1, { mechanism: 'PLAIN' })).errorCode).toBe(0);
    expect((await raw.call(36, 2, { authBytes: Buffer.from(`\0${user}\0${tokens[user]!}`) })).errorCode).toBe(0);
    return raw;
  }

  const kafka = (user: string) =>
    new Kafka({
      brokers: [`127.0.0.1:${broker.kafkaPort}`],
      clientId: `owner-${user}`,
      logLevel: logLevel.NOTHING,
      // An idempotent producer needs retries; a refusal is not retried.
      retry: { retries: 2, initialRetryTime: 50 },
      sasl: { mechanism: 'plain', username: user, password: tokens[user]! },
    });

  async function committedValues(c: Connection, topic: string): Promise<string[]> {
    const batch = await c.consume({ topic, partition: 0, offset: 0, batch: 1000, isolation: 'read_committed' });
    return batch.records.map((r) => r.value.toString());
  }

  const field = (reply: string, name: string) => new RegExp(`\\b${name}=(\\S+)`).exec(reply)![1]!;

  beforeAll(async () => {
    dir = await tempDir('tributary-txn-owner-');
    const config = path.join(dir, 'broker.yaml');
    // payments: written by admin only (the review's setup); orders: by anyone with topic.write.
    fs.writeFileSync(config, ['authentication: true', 'topicAcls:', '  payments:', '    write: [admin]', ''].join('\n'));
    tokens.admin = addUser(config, 'admin', ['admin']);
    tokens.alice = addUser(config, 'alice', ['topic.read', 'topic.write', 'group', 'transaction']);
    broker = await BrokerProcess.start({ args: ['--config', config, '--kafka-port', '0'] });
    const admin = await connect('admin');
    for (const topic of ['payments', 'orders', 'billing']) await admin.command('CREATE', { topic, partitions: 1 });
  });

  afterAll(async () => {
    await Promise.all(closers.map((close) => close()));
    await broker?.dispose();
    if (dir) fs.rmSync(dir, { recursive: true, force: true });
  });

  it('main port: alice cannot status, init, begin, publish (text or batch), send offsets to, commit or abort admin’s id; admin’s transaction commits', async () => {
    const admin = await connect('admin');
    const alice = await connect('alice');
    const init = await admin.command('INIT_PRODUCER_ID', { transactional_id: 'pay-txn3' });
    const pid = field(init, 'producerId');
    expect(field(init, 'epoch')).toBe('0');
    await admin.command('BEGIN_TXN', { transactional_id: 'pay-txn3', producerId: pid, epoch: 0 });
    await admin.command('TXN_PUBLISH', { transactional_id: 'pay-txn3', producerId: pid, epoch: 0, topic: 'payments', seqNum: 1, message: 'pay-1' });

    const ids = `transactional_id=pay-txn3 producerId=${pid} epoch=0`;
    const status = await send(alice, 'TXN_STATUS transactional_id=pay-txn3');
    expect(status).toMatch(FORBIDDEN);
    expect(status).not.toMatch(/producerId=|epoch=/);
    expect(await send(alice, `TXN_PUBLISH ${ids} topic=orders seqNum=2 message=alice-1`)).toMatch(FORBIDDEN);
    const frame = encodeBatch(
      {
        topic: 'orders',
        partition: 0,
        acks: 'all',
        idempotent: false,
        firstSequence: 2,
        lastSequence: 2,
        records: [{ offset: 0, sequence: 0, producerId: '', key: null, epoch: 0, value: Buffer.from('alice-2'), timestamp: 0, attributes: 0, headers: [] }],
        txn: { transactionalId: 'pay-txn3', producerId: pid, epoch: 0, coordinatorPartition: -1, coordinatorEpoch: -1 },
      },
      { extensions: alice.extensions },
    );
    expect(await send(alice, frame)).toMatch(FORBIDDEN);
    expect(await send(alice, `SEND_OFFSETS_TO_TXN ${ids} topic=orders group=g1 member=m generation=1 P0:0`)).toMatch(FORBIDDEN);
    expect(await send(alice, `BEGIN_TXN ${ids}`)).toMatch(FORBIDDEN);
    expect(await send(alice, `END_TXN ${ids} result=abort`)).toMatch(FORBIDDEN);
    expect(await send(alice, `END_TXN ${ids} result=commit`)).toMatch(FORBIDDEN);
    // Initializing the id would fence admin's producer and abort its transaction.
    expect(await send(alice, 'INIT_PRODUCER_ID transactional_id=pay-txn3')).toMatch(FORBIDDEN);

    // Nothing of alice's landed; admin's transaction is open at its epoch and commits.
    expect(await admin.command('TXN_STATUS', { transactional_id: 'pay-txn3' })).toMatch(new RegExp(`state=open producerId=${pid} epoch=0 `));
    expect(await admin.command('END_TXN', { transactional_id: 'pay-txn3', producerId: pid, epoch: 0, result: 'commit' })).toMatch(/state=committed/);
    expect(await committedValues(admin, 'payments')).toEqual(['pay-1']);
    expect(await committedValues(admin, 'orders')).toEqual([]);
    // alice's own ids work as before.
    const mine = await alice.command('INIT_PRODUCER_ID', { transactional_id: 'alice-own' });
    expect(await alice.command('TXN_STATUS', { transactional_id: 'alice-own' })).toMatch(new RegExp(`producerId=${field(mine, 'producerId')} `));
  });

  it('main port: an admin may take an id over; its first owner is then refused', async () => {
    const admin = await connect('admin');
    const alice = await connect('alice');
    const init = await alice.command('INIT_PRODUCER_ID', { transactional_id: 'taken-tx' });
    const pid = field(init, 'producerId');
    await alice.command('BEGIN_TXN', { transactional_id: 'taken-tx', producerId: pid, epoch: 0 });
    // admin reads and takes it: alice's open transaction is aborted and her epoch fenced, as any INIT_PRODUCER_ID does.
    expect(await admin.command('TXN_STATUS', { transactional_id: 'taken-tx' })).toMatch(/state=open/);
    const taken = await admin.command('INIT_PRODUCER_ID', { transactional_id: 'taken-tx' });
    expect(field(taken, 'epoch')).toBe('1');
    expect(await send(alice, 'TXN_STATUS transactional_id=taken-tx')).toMatch(FORBIDDEN);
    expect(await send(alice, 'INIT_PRODUCER_ID transactional_id=taken-tx')).toMatch(FORBIDDEN);
    await admin.command('BEGIN_TXN', { transactional_id: 'taken-tx', producerId: pid, epoch: 1 });
    await admin.command('TXN_PUBLISH', { transactional_id: 'taken-tx', producerId: pid, epoch: 1, topic: 'orders', seqNum: 1, message: 'admin-took' });
    expect(await admin.command('END_TXN', { transactional_id: 'taken-tx', producerId: pid, epoch: 1, result: 'commit' })).toMatch(/state=committed/);
  });

  it('Kafka port: alice’s InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn, TxnOffsetCommit, Produce and EndTxn on admin’s id are TRANSACTIONAL_ID_AUTHORIZATION_FAILED; admin’s kafkajs transaction commits', async () => {
    const c = await connect('admin');
    const producer = kafka('admin').producer({ transactionalId: 'billing-tx2', idempotent: true, maxInFlightRequests: 1 });
    await producer.connect();
    try {
      const txn = await producer.transaction();
      await txn.send({ topic: 'billing', messages: [{ value: 'bill-1' }] });
      const status = await c.command('TXN_STATUS', { transactional_id: 'billing-tx2' });
      const p = { transactionalId: 'billing-tx2', producerId: BigInt(field(status, 'producerId')), producerEpoch: Number(field(status, 'epoch')) };

      const alice = await rawAs('alice');
      expect((await alice.call(22, 1, { transactionalId: 'billing-tx2', transactionTimeoutMs: 60_000 })).errorCode).toBe(TXN_AUTH);
      // v3+: naming admin's producer id and epoch, as a producer resuming would.
      expect((await alice.call(22, 3, { ...p, transactionTimeoutMs: 60_000 })).errorCode).toBe(TXN_AUTH);
      const added = await alice.call(24, 1, { ...p, topics: [{ name: 'orders', partitions: [0] }] });
      expect(first(first(added, 'results'), 'results').errorCode).toBe(TXN_AUTH);
      expect((await alice.call(25, 1, { ...p, groupId: 'alice-group' })).errorCode).toBe(TXN_AUTH);
      const offsets = await alice.call(28, 1, {
        ...p,
        groupId: 'alice-group',
        topics: [{ name: 'orders', partitions: [{ partitionIndex: 0, committedOffset: 0, committedMetadata: null }] }],
      });
      expect(first(first(offsets, 'topics'), 'partitions').errorCode).toBe(TXN_AUTH);
      // Into a partition admin's transaction already holds, with its producer id and epoch.
      const records = encodeRecordBatch({ records: [{ key: null, value: Buffer.from('alice-bill') }], producerId: Number(p.producerId), producerEpoch: p.producerEpoch, baseSequence: 1, transactional: true });
      const produced = await alice.call(0, 7, { transactionalId: 'billing-tx2', acks: -1, timeoutMs: 1000, topicData: [{ name: 'billing', partitionData: [{ index: 0, records }] }] });
      expect(first(first(produced, 'responses'), 'partitionResponses').errorCode).toBe(TXN_AUTH);
      expect((await alice.call(26, 1, { ...p, committed: false })).errorCode).toBe(TXN_AUTH);
      expect((await alice.call(26, 1, { ...p, committed: true })).errorCode).toBe(TXN_AUTH);
      // kafkajs as alice: its InitProducerId (at its first transaction) is refused: no producer of the id.
      const zombie = kafka('alice').producer({ transactionalId: 'billing-tx2', idempotent: true, maxInFlightRequests: 1 });
      await zombie.connect();
      await expect(zombie.transaction()).rejects.toThrow(/Transactional Id authorization failed/);
      await zombie.disconnect().catch(() => {});

      await txn.commit();
      expect(await c.command('TXN_STATUS', { transactional_id: 'billing-tx2' })).toMatch(/state=committed/);
      expect(await committedValues(c, 'billing')).toEqual(['bill-1']);
    } finally {
      await producer.disconnect();
    }
  });

  it('ownership survives kill -9 and a restart, on both ports', async () => {
    await broker.kill();
    await broker.relaunch();
    const admin = await connect('admin');
    const alice = await connect('alice');
    for (const id of ['pay-txn3', 'taken-tx', 'billing-tx2']) {
      expect(await send(alice, `TXN_STATUS transactional_id=${id}`), id).toMatch(FORBIDDEN);
      expect(await send(alice, `INIT_PRODUCER_ID transactional_id=${id}`), id).toMatch(FORBIDDEN);
    }
    const raw = await rawAs('alice');
    expect((await raw.call(22, 1, { transactionalId: 'billing-tx2', transactionTimeoutMs: 60_000 })).errorCode).toBe(TXN_AUTH);
    expect(await alice.command('TXN_STATUS', { transactional_id: 'alice-own' })).toMatch(/state=empty/);
    const again = await admin.command('INIT_PRODUCER_ID', { transactional_id: 'pay-txn3' });
    expect(field(again, 'epoch')).toBe('1');
  });
});

/**
 * An id whose stored state names no owner (written with authentication off, as by a version before owners
 * were kept) is anyone's until a principal initializes it, which claims it.
 */
describe('a transactional id stored without an owner', () => {
  let dir: string;
  let dataDir: string;
  let broker: BrokerProcess | undefined;
  const tokens: Record<string, string> = {};

  afterAll(async () => {
    await broker?.dispose();
    if (dir) fs.rmSync(dir, { recursive: true, force: true });
  });

  it('is claimed by the next principal to initialize it', async () => {
    dir = await tempDir('tributary-txn-unowned-');
    dataDir = path.join(dir, 'data');
    // First without authentication (and so without users: a broker refuses users it would not use).
    broker = await BrokerProcess.start({ dataDir });
    const open = await broker.connect();
    const before = await open.command('INIT_PRODUCER_ID', { transactional_id: 'legacy-tx' });
    const pid = /producerId=(\S+)/.exec(before)![1]!;
    await broker.stop();
    const config = path.join(dir, 'broker.yaml');
    fs.writeFileSync(config, 'authentication: true\n');
    tokens.alice = addUser(config, 'alice', ['transaction']);
    tokens.bob = addUser(config, 'bob', ['transaction']);
    broker = await BrokerProcess.start({ dataDir, args: ['--config', config] });
    const as = (principal: string) => Connection.connect({ host: '127.0.0.1', port: broker!.port, auth: { principal, token: tokens[principal]! } });
    const alice = await as('alice');
    const bob = await as('bob');
    try {
      expect(await bob.command('TXN_STATUS', { transactional_id: 'legacy-tx' })).toMatch(new RegExp(`producerId=${pid} epoch=0 `));
      expect(await alice.command('INIT_PRODUCER_ID', { transactional_id: 'legacy-tx' })).toMatch(/epoch=1\b/);
      const refused = await bob.request('TXN_STATUS transactional_id=legacy-tx');
      expect(refused.kind === 'text' && refused.text).toMatch(/^ERROR: NOT_AUTHORIZED_FOR_OPERATION (?=.*\bprincipal=bob\b)/);
      expect(await alice.command('TXN_STATUS', { transactional_id: 'legacy-tx' })).toMatch(/epoch=1\b/);
    } finally {
      await Promise.all([alice.close(), bob.close()]);
    }
  });
});

/**
 * SASL and authorization on the Kafka port (docs/kafka.md, "Authentication") against a real broker with
 * `--authentication`: kafkajs and kcat (librdkafka) authenticate with SASL/PLAIN as Tributary principals and
 * tokens; wrong credentials and unknown mechanisms are answered and the connection closed; nothing but
 * ApiVersions and SASL is served before authentication; after it each API applies the main port's
 * permissions and topic ACLs.
 */
import { execFileSync } from 'node:child_process';
import { createHash, createHmac, pbkdf2Sync } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { Kafka, logLevel } from 'kafkajs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseDocument } from 'yaml';
import { Connection } from 'tributary-protocol/connection.js';
import { encodeRecordBatch } from 'tributary-protocol/record-batch/encode.js';
import { splitRecordBatches } from 'tributary-protocol/record-batch/split.js';
import { kafkaErrorCode } from 'tributary-broker/kafka/protocol/error-codes.js';
import type { KafkaStruct } from 'tributary-broker/kafka/protocol/schema.js';
import { BrokerProcess, CLI } from '../../helpers/launcher.js';
import { removeDir, tempDir, until } from '../../helpers/util.js';
import { addUser, makeCa, makeCert, removeUser } from '../security/pki.js';
import { kcat, RawKafka } from '../../helpers/raw-kafka.js';

const plainToken = (user: string, password: string, authzid = '') => Buffer.from(`${authzid}\0${user}\0${password}`);
const code = (name: string) => kafkaErrorCode(name);
const MECHANISMS = ['PLAIN', 'SCRAM-SHA-256'];
/** The first element of a response's list field. */
const first = (s: KafkaStruct, field: string) => (s[field] as KafkaStruct[])[0]!;

describe('SASL and ACLs on the Kafka port', () => {
  let dir: string;
  let config: string;
  let broker: BrokerProcess;
  let admin: Connection;
  let bootstrap: string;
  const tokens: Record<string, string> = {};
  const raws: RawKafka[] = [];

  /** A kafkajs client; it does not retry unless `retries` (an idempotent producer needs them). */
  const kafka = (user: string, password = tokens[user]!, retries = 0, mechanism: 'plain' | 'scram-sha-256' = 'plain') =>
    new Kafka({
      brokers: [bootstrap],
      clientId: `sasl-${user}`,
      logLevel: logLevel.NOTHING,
      retry: { retries },
      sasl: mechanism === 'plain' ? { mechanism, username: user, password } : { mechanism, username: user, password },
    });

  /** A bare connection that authenticated as `user` with SaslHandshake v1 and SaslAuthenticate `version`. */
  async function rawAs(user: string, version = 2): Promise<RawKafka> {
    const raw = await RawKafka.connect(broker.kafkaPort);
    raws.push(raw);
    expect(await raw.call(17, 1, { mechanism: 'PLAIN' })).toEqual({ errorCode: 0, mechanisms: MECHANISMS });
    const res = await raw.call(36, version, { authBytes: plainToken(user, tokens[user]!) });
    expect(res).toMatchObject({ errorCode: 0, errorMessage: null });
    return raw;
  }

  const highWatermark = async (topic: string) => Number((await admin.command('LIST_OFFSETS', { topic, partition: 0 })).match(/leo=(\d+)/)![1]);

  beforeAll(async () => {
    dir = await tempDir('tributary-kafka-sasl-');
    config = path.join(dir, 'broker.yaml');
    // `secret` is readable and writable by `insider` only; `orders` by whoever has the permission.
    fs.writeFileSync(
      config,
      ['authentication: true', 'authTimeoutMs: 3000', 'topicAcls:', '  secret:', '    read: [insider]', '    write: [insider]', ''].join('\n'),
    );
    tokens.admin = addUser(config, 'admin', ['admin']);
    tokens.app = addUser(config, 'app', ['topic.read', 'topic.write']);
    tokens.reader = addUser(config, 'reader', ['topic.read']);
    tokens.insider = addUser(config, 'insider', ['topic.read', 'topic.write']);
    tokens.nobody = addUser(config, 'nobody', []);
    tokens.grouper = addUser(config, 'grouper', ['topic.read', 'topic.write', 'group']);
    tokens.revokee = addUser(config, 'revokee', ['topic.read', 'topic.write']);
    tokens.rotor = addUser(config, 'rotor', ['topic.read', 'topic.write']);
    // A user from before SCRAM keys were stored: its entry has the scrypt hash only.
    tokens.legacy = addUser(config, 'legacy', ['topic.read', 'topic.write']);
    tokens.txn = addUser(config, 'txn', ['transaction', 'topic.write']);
    tokens.txnall = addUser(config, 'txnall', ['transaction', 'topic.write', 'topic.read', 'group']);
    const doc = parseDocument(fs.readFileSync(config, 'utf8'));
    expect(doc.hasIn(['users', 'legacy', 'scram'])).toBe(true);
    doc.deleteIn(['users', 'legacy', 'scram']);
    fs.writeFileSync(config, doc.toString());
    const listed = execFileSync(process.execPath, [CLI, 'user', 'list', '--config', config], { encoding: 'utf8' });
    expect(listed).toMatch(/^legacy permissions=topic\.read,topic\.write scram=no$/m);
    expect(listed).toMatch(/^app permissions=topic\.read,topic\.write scram=yes$/m);
    broker = await BrokerProcess.start({ args: ['--config', config, '--kafka-port', '0', '--offsets-topic-partitions', '1', '--log-level', 'info'] });
    bootstrap = `127.0.0.1:${broker.kafkaPort}`;
    admin = await Connection.connect({ host: '127.0.0.1', port: broker.port, auth: { principal: 'admin', token: tokens.admin } });
    for (const topic of ['orders', 'secret']) await admin.command('CREATE', { topic, partitions: 1 });
  });

  afterAll(async () => {
    for (const r of raws) r.socket.destroy();
    await admin?.close().catch(() => {});
    await broker?.dispose();
    if (dir) await removeDir(dir);
  });

  it('kafkajs with SASL/PLAIN produces (idempotent) and lists only the topics its principal may describe; the records read back by Fetch', async () => {
    const client = kafka('app', tokens.app, 2);
    const producer = client.producer({ idempotent: true, maxInFlightRequests: 1 });
    const kadmin = client.admin();
    try {
      await producer.connect();
      await producer.send({ topic: 'orders', acks: -1, messages: [{ key: 'k1', value: 'one' }, { value: 'two' }] });
      await kadmin.connect();
      const topics = await kadmin.listTopics();
      expect(topics).toContain('orders');
      expect(topics).not.toContain('secret'); // its ACL does not list app
      await expect(kadmin.fetchTopicMetadata({ topics: ['secret'] })).rejects.toMatchObject({ type: 'TOPIC_AUTHORIZATION_FAILED' });
    } finally {
      await producer.disconnect();
      await kadmin.disconnect();
    }
    const raw = await rawAs('app', 1);
    const fetched = await raw.call(1, 11, {
      maxWaitMs: 0,
      minBytes: 1,
      maxBytes: 1 << 20,
      isolationLevel: 0,
      topics: [{ topic: 'orders', partitions: [{ partition: 0, fetchOffset: 0, partitionMaxBytes: 1 << 20 }] }],
      forgottenTopicsData: [],
      rackId: '',
    });
    const part = ((fetched.responses as KafkaStruct[])[0]!.partitions as KafkaStruct[])[0]!;
    expect(part.errorCode).toBe(0);
    const values = splitRecordBatches(part.records as Buffer).batches.flatMap((b) =>
      b.decode().records.map((r) => `${r.key?.toString() ?? ''}:${r.value!.toString()}`),
    );
    expect(values).toEqual(['k1:one', ':two']);
  });

  it('a wrong password or an unknown user fails with an authentication error, and nothing is stored', async () => {
    const before = await highWatermark('orders');
    for (const [user, password] of [
      ['app', 'not-the-token'],
      ['ghost', 'whatever'],
    ] as const) {
      const producer = kafka(user, password).producer();
      try {
        const err = await producer.connect().then(
          () => undefined,
          (e: unknown) => e,
        );
        expect(err, user).toMatchObject({ name: 'KafkaJSSASLAuthenticationError' });
        expect(String((err as Error).message)).not.toContain(password);
      } finally {
        await producer.disconnect();
      }
    }
    // On the wire: SASL_AUTHENTICATION_FAILED with Kafka's wording, then the broker hangs up; a Produce sent
    // right behind it is never served.
    const raw = await RawKafka.connect(broker.kafkaPort);
    raws.push(raw);
    expect((await raw.call(17, 1, { mechanism: 'PLAIN' })).errorCode).toBe(0);
    const res = await raw.call(36, 2, { authBytes: plainToken('app', 'wrong') });
    expect(res).toEqual({
      errorCode: code('SASL_AUTHENTICATION_FAILED'),
      errorMessage: 'Authentication failed: Invalid username or password',
      authBytes: Buffer.alloc(0),
      sessionLifetimeMs: 0,
    });
    await raw.closed;
    expect(await highWatermark('orders')).toBe(before);
  });

  it('an authorization id other than the user, or a malformed PLAIN token, fails too', async () => {
    for (const token of [plainToken('app', tokens.app!, 'admin'), Buffer.from(`app\0${tokens.app}`), plainToken('app', '')]) {
      const raw = await RawKafka.connect(broker.kafkaPort);
      raws.push(raw);
      await raw.call(17, 1, { mechanism: 'PLAIN' });
      expect((await raw.call(36, 0, { authBytes: token })).errorCode).toBe(code('SASL_AUTHENTICATION_FAILED'));
      await raw.closed;
    }
  });

  it('an unknown mechanism gets UNSUPPORTED_SASL_MECHANISM with the enabled ones, then the connection closes', async () => {
    const raw = await RawKafka.connect(broker.kafkaPort);
    raws.push(raw);
    expect(await raw.call(17, 1, { mechanism: 'SCRAM-SHA-512' })).toEqual({ errorCode: code('UNSUPPORTED_SASL_MECHANISM'), mechanisms: MECHANISMS });
    await raw.closed;
  });

  it('before authentication only ApiVersions and SASL are served: Metadata closes the connection', async () => {
    const raw = await RawKafka.connect(broker.kafkaPort);
    raws.push(raw);
    const versions = (await raw.call(18, 3, { clientSoftwareName: 'raw', clientSoftwareVersion: '1' })).apiKeys as KafkaStruct[];
    expect(versions.filter((a) => a.apiKey === 17 || a.apiKey === 36)).toEqual([
      { apiKey: 17, minVersion: 0, maxVersion: 1 },
      { apiKey: 36, minVersion: 0, maxVersion: 2 },
    ]);
    await raw.closedBy(3, 9, {
      topics: null,
      allowAutoTopicCreation: false,
      includeClusterAuthorizedOperations: false,
      includeTopicAuthorizedOperations: false,
    });
    // Refused by its header alone, its body never decoded: a Metadata v1 declaring 1,000,000 topic names
    // (and holding none, which the codec would refuse) is "before authentication", not "not understood".
    const mark = broker.stderr.length;
    const big = await RawKafka.connect(broker.kafkaPort);
    raws.push(big);
    const names = 1_000_000;
    const body = Buffer.alloc(2 + 2 + 4 + 2 + 3 + 4);
    let at = body.writeInt16BE(3, 0); // Metadata
    at = body.writeInt16BE(1, at); // v1
    at = body.writeInt32BE(7, at); // correlation id
    at = body.writeInt16BE(3, at); // client id "raw"
    at += body.write('raw', at);
    body.writeInt32BE(names, at); // the topic array's count, and no names
    const frame = Buffer.alloc(4);
    frame.writeInt32BE(body.length);
    big.socket.write(Buffer.concat([frame, body]));
    await big.closed;
    await expect.poll(() => broker.stderr.slice(mark)).toMatch(/request before authentication/);
    expect(broker.stderr.slice(mark)).not.toMatch(/request not understood/);
    // SaslAuthenticate without a handshake is out of order: answered, then closed.
    const early = await RawKafka.connect(broker.kafkaPort);
    raws.push(early);
    expect((await early.call(36, 2, { authBytes: plainToken('app', tokens.app!) })).errorCode).toBe(code('ILLEGAL_SASL_STATE'));
    await early.closed;
    // A Produce before authentication stores nothing.
    const before = await highWatermark('orders');
    const producer = await RawKafka.connect(broker.kafkaPort);
    raws.push(producer);
    const records = encodeRecordBatch({ records: [{ key: null, value: Buffer.from('sneaky') }] });
    await producer.closedBy(0, 7, { transactionalId: null, acks: 1, timeoutMs: 1000, topicData: [{ name: 'orders', partitionData: [{ index: 0, records }] }] });
    expect(await highWatermark('orders')).toBe(before);
  });

  it('after a SaslHandshake v0 the token goes bare and is answered bare; a wrong one closes the connection unanswered', async () => {
    const raw = await RawKafka.connect(broker.kafkaPort);
    raws.push(raw);
    expect(await raw.call(17, 0, { mechanism: 'PLAIN' })).toEqual({ errorCode: 0, mechanisms: MECHANISMS });
    const token = plainToken('app', tokens.app!);
    const sizeOf = (b: Buffer) => Buffer.from([0, 0, 0, b.length]);
    raw.socket.write(Buffer.concat([sizeOf(token), token]));
    expect(await raw.next()).toEqual(Buffer.alloc(0)); // PLAIN's empty server token
    const meta = await raw.call(3, 1, { topics: [{ name: 'orders' }] });
    expect(first(meta, 'topics').errorCode).toBe(0);

    const wrong = await RawKafka.connect(broker.kafkaPort);
    raws.push(wrong);
    await wrong.call(17, 0, { mechanism: 'PLAIN' });
    const bad = plainToken('app', 'wrong');
    wrong.socket.write(Buffer.concat([sizeOf(bad), bad]));
    const outcome = await Promise.race([wrong.closed.then(() => 'closed'), wrong.next().then(() => 'answered')]);
    expect(outcome).toBe('closed');
  });

  it('a second handshake on an authenticated connection is ILLEGAL_SASL_STATE, and the connection keeps its principal', async () => {
    const raw = await rawAs('app');
    expect((await raw.call(17, 1, { mechanism: 'PLAIN' })).errorCode).toBe(code('ILLEGAL_SASL_STATE'));
    expect((await raw.call(36, 2, { authBytes: plainToken('admin', tokens.admin!) })).errorCode).toBe(code('ILLEGAL_SASL_STATE'));
    const meta = await raw.call(3, 9, {
      topics: [{ name: 'orders' }],
      allowAutoTopicCreation: false,
      includeClusterAuthorizedOperations: false,
      includeTopicAuthorizedOperations: false,
    });
    expect((meta.topics as KafkaStruct[])[0]!.errorCode).toBe(0);
  });

  it('a principal without topic.write gets TOPIC_AUTHORIZATION_FAILED on Produce, as does one the topic ACL leaves out; nothing is stored', async () => {
    const before = { orders: await highWatermark('orders'), secret: await highWatermark('secret') };
    const producer = kafka('reader').producer();
    try {
      await producer.connect();
      await expect(producer.send({ topic: 'orders', acks: -1, messages: [{ value: 'no' }] })).rejects.toMatchObject({ type: 'TOPIC_AUTHORIZATION_FAILED' });
    } finally {
      await producer.disconnect();
    }
    const records = encodeRecordBatch({ records: [{ key: null, value: Buffer.from('no') }] });
    const produce = (topic: string) => ({
      transactionalId: null,
      acks: -1,
      timeoutMs: 1000,
      topicData: [{ name: topic, partitionData: [{ index: 0, records }] }],
    });
    const partitionCode = (res: KafkaStruct) => ((res.responses as KafkaStruct[])[0]!.partitionResponses as KafkaStruct[])[0]!.errorCode;
    const app = await rawAs('app');
    expect(partitionCode(await app.call(0, 9, produce('secret')))).toBe(code('TOPIC_AUTHORIZATION_FAILED'));
    const insider = await rawAs('insider');
    expect(partitionCode(await insider.call(0, 9, produce('secret')))).toBe(0);
    expect(await highWatermark('orders')).toBe(before.orders);
    expect(await highWatermark('secret')).toBe(before.secret + 1);
  });

  it("each API applies the main port's permission: topics refused with TOPIC_, cluster operations with CLUSTER_AUTHORIZATION_FAILED", async () => {
    const nobody = await rawAs('nobody');
    const reader = await rawAs('reader');
    const app = await rawAs('app');
    const adminRaw = await rawAs('admin');
    const fetch = (topic: string) => ({
      maxWaitMs: 0,
      minBytes: 1,
      maxBytes: 1 << 20,
      isolationLevel: 0,
      topics: [{ topic, partitions: [{ partition: 0, fetchOffset: 0, partitionMaxBytes: 1 << 20 }] }],
      forgottenTopicsData: [],
      rackId: '',
    });
    const fetchCode = async (raw: RawKafka, topic: string) => first(first(await raw.call(1, 12, fetch(topic)), 'responses'), 'partitions').errorCode;
    expect(await fetchCode(nobody, 'orders')).toBe(code('TOPIC_AUTHORIZATION_FAILED'));
    expect(await fetchCode(reader, 'secret')).toBe(code('TOPIC_AUTHORIZATION_FAILED')); // the ACL
    expect(await fetchCode(reader, 'orders')).toBe(0);

    const listCode = async (raw: RawKafka) => {
      const res = await raw.call(2, 5, { isolationLevel: 0, topics: [{ name: 'orders', partitions: [{ partitionIndex: 0, timestamp: -1 }] }] });
      return first(first(res, 'topics'), 'partitions').errorCode;
    };
    expect(await listCode(nobody)).toBe(code('TOPIC_AUTHORIZATION_FAILED'));
    expect(await listCode(reader)).toBe(0);

    // Metadata: all topics lists only what may be described; asked by name, a refused topic is refused whether it exists or not.
    const metadata = (raw: RawKafka, topics: { name: string }[] | null) =>
      raw.call(3, 9, { topics, allowAutoTopicCreation: false, includeClusterAuthorizedOperations: false, includeTopicAuthorizedOperations: false });
    expect(((await metadata(nobody, null)).topics as KafkaStruct[]).map((t) => t.name)).toEqual([]);
    expect(((await metadata(app, null)).topics as KafkaStruct[]).map((t) => t.name)).toEqual(['orders']);
    expect(((await metadata(adminRaw, null)).topics as KafkaStruct[]).map((t) => t.name).sort()).toEqual(['orders', 'secret']);
    expect(((await metadata(app, [{ name: 'secret' }])).topics as KafkaStruct[]).map((t) => [t.name, t.errorCode])).toEqual([
      ['secret', code('TOPIC_AUTHORIZATION_FAILED')],
    ]);

    const create = {
      topics: [{ name: 'made-by-kafka', numPartitions: 1, replicationFactor: -1, assignments: [], configs: [] }],
      timeoutMs: 1000,
      validateOnly: false,
    };
    expect(((await app.call(19, 7, create)).topics as KafkaStruct[])[0]!.errorCode).toBe(code('TOPIC_AUTHORIZATION_FAILED'));
    expect(
      (
        (await app.call(20, 6, { topics: [{ name: 'orders', topicId: '00000000-0000-0000-0000-000000000000' }], timeoutMs: 1000 })).responses as KafkaStruct[]
      )[0]!.errorCode,
    ).toBe(code('TOPIC_AUTHORIZATION_FAILED'));
    expect(
      (
        (await app.call(37, 3, { topics: [{ name: 'orders', count: 2, assignments: null }], timeoutMs: 1000, validateOnly: false })).results as KafkaStruct[]
      )[0]!.errorCode,
    ).toBe(code('TOPIC_AUTHORIZATION_FAILED'));
    expect((await admin.command('LIST')).match(/made-by-kafka/)).toBeNull();
    expect(((await adminRaw.call(19, 7, create)).topics as KafkaStruct[])[0]!.errorCode).toBe(0);
    // AlterConfigs and IncrementalAlterConfigs: ALTER_TOPIC (admin) per topic, CLUSTER_STATUS for a broker resource.
    const alter = (resourceType: number, resourceName: string) => ({ resources: [{ resourceType, resourceName, configs: [{ name: 'retention.bytes', value: '4096' }] }], validateOnly: false });
    const incremental = (resourceType: number, resourceName: string) => ({
      resources: [{ resourceType, resourceName, configs: [{ name: 'retention.bytes', configOperation: 0, value: '4096' }] }],
      validateOnly: false,
    });
    const alterCode = async (raw: RawKafka, key: 33 | 44, type: number, name: string) =>
      ((await raw.call(key, key === 33 ? 2 : 1, key === 33 ? alter(type, name) : incremental(type, name))).responses as KafkaStruct[])[0]!.errorCode;
    for (const key of [33, 44] as const) {
      expect(await alterCode(app, key, 2, 'orders')).toBe(code('TOPIC_AUTHORIZATION_FAILED'));
      expect(await alterCode(app, key, 4, '')).toBe(code('CLUSTER_AUTHORIZATION_FAILED'));
    }
    expect(await admin.json('DESCRIBE', { topic: 'orders' })).not.toMatchObject({ retention_bytes: 4096 });
    expect(await alterCode(adminRaw, 44, 2, 'orders')).toBe(0);
    expect(await admin.json('DESCRIBE', { topic: 'orders' })).toMatchObject({ retention_bytes: 4096 });

    const describe = (resourceType: number, resourceName: string) => ({
      resources: [{ resourceType, resourceName, configurationKeys: null }],
      includeSynonyms: false,
      includeDocumentation: false,
    });
    const describeCode = async (raw: RawKafka, type: number, name: string) =>
      ((await raw.call(32, 4, describe(type, name))).results as KafkaStruct[])[0]!.errorCode;
    expect(await describeCode(app, 4, '')).toBe(code('CLUSTER_AUTHORIZATION_FAILED'));
    expect(await describeCode(adminRaw, 4, '')).toBe(0);
    expect(await describeCode(nobody, 2, 'orders')).toBe(code('TOPIC_AUTHORIZATION_FAILED'));
    expect(await describeCode(reader, 2, 'orders')).toBe(0);

    // An idempotent producer id is for whoever may write topics.
    expect((await reader.call(22, 4, { transactionalId: null, transactionTimeoutMs: 1000, producerId: -1n, producerEpoch: -1 })).errorCode).toBe(
      code('CLUSTER_AUTHORIZATION_FAILED'),
    );
    expect((await app.call(22, 4, { transactionalId: null, transactionTimeoutMs: 1000, producerId: -1n, producerEpoch: -1 })).errorCode).toBe(0);
  });

  it('the transaction APIs apply INIT_PRODUCER_ID, TXN_PUBLISH, SEND_OFFSETS_TO_TXN and END_TXN: refused with TRANSACTIONAL_ID_, TOPIC_ or GROUP_AUTHORIZATION_FAILED', async () => {
    const app = await rawAs('app');
    const txn = await rawAs('txn');
    const txnall = await rawAs('txnall');
    const init = { transactionalId: 'sasl-tx', transactionTimeoutMs: 60_000 };
    // Without the transaction permission: no producer id for a transactional id.
    expect((await app.call(22, 1, init)).errorCode).toBe(code('TRANSACTIONAL_ID_AUTHORIZATION_FAILED'));
    const got = await txn.call(22, 1, init);
    expect(got.errorCode).toBe(0);
    const p = { transactionalId: 'sasl-tx', producerId: got.producerId as bigint, producerEpoch: got.producerEpoch as number };
    const addCodes = async (raw: RawKafka, topics: string[]) =>
      ((await raw.call(24, 1, { ...p, topics: topics.map((name) => ({ name, partitions: [0] })) })).results as KafkaStruct[]).map(
        (t) => first(t, 'results').errorCode,
      );
    expect(await addCodes(app, ['orders'])).toEqual([code('TRANSACTIONAL_ID_AUTHORIZATION_FAILED')]);
    // secret's write ACL lists insider only; the request is refused as a whole.
    expect(await addCodes(txn, ['secret', 'orders'])).toEqual([code('TOPIC_AUTHORIZATION_FAILED'), code('OPERATION_NOT_ATTEMPTED')]);
    expect(await addCodes(txn, ['orders'])).toEqual([0]);
    const records = encodeRecordBatch({
      records: [{ key: null, value: Buffer.from('in-txn') }],
      producerId: Number(p.producerId),
      producerEpoch: p.producerEpoch,
      baseSequence: 0,
      transactional: true,
    });
    const produceCode = async (raw: RawKafka) =>
      first(
        first(
          await raw.call(0, 7, {
            transactionalId: 'sasl-tx',
            acks: -1,
            timeoutMs: 1000,
            topicData: [{ name: 'orders', partitionData: [{ index: 0, records }] }],
          }),
          'responses',
        ),
        'partitionResponses',
      ).errorCode;
    const before = await highWatermark('orders');
    expect(await produceCode(app)).toBe(code('TRANSACTIONAL_ID_AUTHORIZATION_FAILED'));
    expect(await highWatermark('orders')).toBe(before);
    expect(await produceCode(txn)).toBe(0);
    // Offsets: the group permission, then the topic's read ACL.
    const addOffsets = { ...p, groupId: 'sasl-tx-group' };
    expect((await app.call(25, 1, addOffsets)).errorCode).toBe(code('TRANSACTIONAL_ID_AUTHORIZATION_FAILED'));
    expect((await txn.call(25, 1, addOffsets)).errorCode).toBe(code('GROUP_AUTHORIZATION_FAILED'));
    // txn's id is not txnall's (docs/security.md, "Transactional ids"): it sends offsets in its own.
    expect((await txnall.call(25, 1, addOffsets)).errorCode).toBe(code('TRANSACTIONAL_ID_AUTHORIZATION_FAILED'));
    const own = await txnall.call(22, 1, { transactionalId: 'sasl-tx-all', transactionTimeoutMs: 60_000 });
    expect(own.errorCode).toBe(0);
    const q = { transactionalId: 'sasl-tx-all', producerId: own.producerId as bigint, producerEpoch: own.producerEpoch as number };
    expect((await txnall.call(25, 1, { ...q, groupId: 'sasl-tx-group' })).errorCode).toBe(0);
    const offsets = (ids: typeof p, topic: string) => ({
      ...ids,
      groupId: 'sasl-tx-group',
      topics: [{ name: topic, partitions: [{ partitionIndex: 0, committedOffset: 0, committedMetadata: null }] }],
    });
    const offsetCode = async (raw: RawKafka, topic: string, ids = p) => first(first(await raw.call(28, 1, offsets(ids, topic)), 'topics'), 'partitions').errorCode;
    expect(await offsetCode(app, 'orders')).toBe(code('TRANSACTIONAL_ID_AUTHORIZATION_FAILED'));
    expect(await offsetCode(txn, 'orders')).toBe(code('GROUP_AUTHORIZATION_FAILED'));
    expect(await offsetCode(txnall, 'orders')).toBe(code('TRANSACTIONAL_ID_AUTHORIZATION_FAILED'));
    expect(await offsetCode(txnall, 'secret', q)).toBe(code('TOPIC_AUTHORIZATION_FAILED'));
    expect(await offsetCode(txnall, 'orders', q)).toBe(0);
    expect((await txnall.call(26, 1, { ...q, committed: false })).errorCode).toBe(0);
    expect((await app.call(26, 1, { ...p, committed: false })).errorCode).toBe(code('TRANSACTIONAL_ID_AUTHORIZATION_FAILED'));
    expect((await txn.call(26, 1, { ...p, committed: false })).errorCode).toBe(0);
  });

  it('kafkajs with SCRAM-SHA-256 produces and lists; a wrong password fails and stores nothing; the token never crosses the wire', async () => {
    const client = kafka('app', tokens.app, 2, 'scram-sha-256');
    const producer = client.producer({ idempotent: true, maxInFlightRequests: 1 });
    const before = await highWatermark('orders');
    try {
      await producer.connect();
      await producer.send({ topic: 'orders', acks: -1, messages: [{ value: 'scram-1' }] });
    } finally {
      await producer.disconnect();
    }
    expect(await highWatermark('orders')).toBe(before + 1);
    const kadmin = client.admin();
    try {
      await kadmin.connect();
      expect(await kadmin.listTopics()).not.toContain('secret');
    } finally {
      await kadmin.disconnect();
    }
    for (const [user, password] of [
      ['app', 'not-the-token'],
      ['ghost', 'whatever'],
      ['legacy', tokens.legacy!], // right token, but no SCRAM keys stored for it
    ] as const) {
      const p = kafka(user, password, 0, 'scram-sha-256').producer();
      try {
        await expect(p.connect(), user).rejects.toMatchObject({ name: 'KafkaJSSASLAuthenticationError' });
      } finally {
        await p.disconnect();
      }
    }
    expect(await highWatermark('orders')).toBe(before + 1);
    // The failure is logged with its reason (for the legacy user: add it again), never with a token.
    // (The log line is written before the answer, but reaches this process through a pipe of its own.)
    await expect.poll(() => broker.stderr, { timeout: 5000 }).toMatch(/"principal":"legacy".*no SCRAM keys for this principal/);
    for (const t of Object.values(tokens)) expect(broker.stderr).not.toContain(t);
    // PLAIN still works for the legacy user: its scrypt hash is all AUTH needs.
    const legacy = kafka('legacy').producer();
    try {
      await legacy.connect();
      await legacy.send({ topic: 'orders', messages: [{ value: 'legacy-plain' }] });
    } finally {
      await legacy.disconnect();
    }
  });

  it("SCRAM's first answer does not tell whether a user exists: an unknown one gets a stable salt and the same iterations", async () => {
    const serverFirst = async (user: string) => {
      const raw = await RawKafka.connect(broker.kafkaPort);
      raws.push(raw);
      await raw.call(17, 1, { mechanism: 'SCRAM-SHA-256' });
      const res = await raw.call(36, 2, { authBytes: Buffer.from(`n,,n=${user},r=abcdefgh`) });
      expect(res.errorCode).toBe(0);
      raw.socket.destroy();
      const m = /^r=abcdefgh[^,]+,s=([^,]+),i=(\d+)$/.exec((res.authBytes as Buffer).toString());
      expect(m, (res.authBytes as Buffer).toString()).not.toBeNull();
      return { salt: m![1]!, iterations: Number(m![2]) };
    };
    const ghost = await serverFirst('ghost');
    expect(await serverFirst('ghost')).toEqual(ghost);
    expect(Buffer.from(ghost.salt, 'base64')).toHaveLength(16);
    const app = await serverFirst('app');
    expect(app.iterations).toBe(ghost.iterations);
    expect(app.salt).not.toBe(ghost.salt);
    expect(Buffer.from(app.salt, 'base64')).toHaveLength(16);
  });

  it('kcat (librdkafka) with SASL_PLAINTEXT lists, produces and reads; with a wrong password it fails', async () => {
    const sasl = (user: string, password: string) => [
      '-b',
      bootstrap,
      '-X',
      'security.protocol=SASL_PLAINTEXT',
      '-X',
      'sasl.mechanisms=PLAIN',
      '-X',
      `sasl.username=${user}`,
      '-X',
      `sasl.password=${password}`,
    ];
    const list = JSON.parse(await kcat([...sasl('app', tokens.app!), '-L', '-J'])) as { topics: { topic: string }[] };
    expect(list.topics.map((t) => t.topic)).toContain('orders');
    expect(list.topics.map((t) => t.topic)).not.toContain('secret');
    const before = await highWatermark('orders');
    await kcat([...sasl('app', tokens.app!), '-P', '-t', 'orders', '-p', '0'], 'from-kcat\n');
    expect(await highWatermark('orders')).toBe(before + 1);
    const read = await kcat([...sasl('app', tokens.app!), '-C', '-t', 'orders', '-p', '0', '-o', String(before), '-e', '-f', '%s\\n']);
    expect(read.trim()).toBe('from-kcat');
    await expect(kcat([...sasl('app', 'wrong-password'), '-L', '-m', '2'])).rejects.toThrow(
      /SASL authentication error: Authentication failed: Invalid username or password/,
    );
    const scram = ['-b', bootstrap, '-X', 'security.protocol=SASL_PLAINTEXT', '-X', 'sasl.mechanisms=SCRAM-SHA-256', '-X', 'sasl.username=app'];
    const viaScram = JSON.parse(await kcat([...scram, '-X', `sasl.password=${tokens.app}`, '-L', '-J'])) as { topics: { topic: string }[] };
    expect(viaScram.topics.map((t) => t.topic)).toContain('orders');
    await expect(kcat([...scram, '-X', 'sasl.password=wrong-password', '-L', '-m', '2'])).rejects.toThrow(/SASL authentication error/);
  });

  it("a user removed by SIGHUP is refused from its open connection's next request, and cannot authenticate again", async () => {
    const raw = await rawAs('revokee');
    const metadataCode = async () =>
      first(
        await raw.call(3, 9, {
          topics: [{ name: 'orders' }],
          allowAutoTopicCreation: false,
          includeClusterAuthorizedOperations: false,
          includeTopicAuthorizedOperations: false,
        }),
        'topics',
      ).errorCode;
    expect(await metadataCode()).toBe(0);
    removeUser(config, 'revokee');
    broker.proc!.kill('SIGHUP');
    await expect.poll(metadataCode, { timeout: 10_000 }).toBe(code('TOPIC_AUTHORIZATION_FAILED'));
    const before = await highWatermark('orders');
    const records = encodeRecordBatch({ records: [{ key: null, value: Buffer.from('revoked') }] });
    const res = await raw.call(0, 9, {
      transactionalId: null,
      acks: 1,
      timeoutMs: 1000,
      topicData: [{ name: 'orders', partitionData: [{ index: 0, records }] }],
    });
    expect(first(first(res, 'responses'), 'partitionResponses').errorCode).toBe(code('TOPIC_AUTHORIZATION_FAILED'));
    expect(await highWatermark('orders')).toBe(before);
    const again = kafka('revokee').producer();
    try {
      await expect(again.connect()).rejects.toMatchObject({ name: 'KafkaJSSASLAuthenticationError' });
    } finally {
      await again.disconnect();
    }
  });

  it('a SCRAM exchange that began before a SIGHUP rotated its token fails: the old token gets no session', async () => {
    // The rotated file is made first, so that the exchange spans the reload alone (authTimeoutMs is short).
    const rotated = path.join(dir, 'rotated.yaml');
    fs.copyFileSync(config, rotated);
    execFileSync(process.execPath, [CLI, 'user', 'add', 'rotor', '--permissions', 'topic.read,topic.write', '--token', 'rotor-new-token-0123456789', '--config', rotated]);
    const raw = await RawKafka.connect(broker.kafkaPort);
    raws.push(raw);
    expect((await raw.call(17, 1, { mechanism: 'SCRAM-SHA-256' })).errorCode).toBe(0);
    const clientFirstBare = 'n=rotor,r=rotationnonce';
    const serverFirst = ((await raw.call(36, 2, { authBytes: Buffer.from(`n,,${clientFirstBare}`) })).authBytes as Buffer).toString();
    const [, nonce, salt, iterations] = /^r=([^,]+),s=([^,]+),i=(\d+)$/.exec(serverFirst)!;
    const mark = broker.stderr.length;
    fs.renameSync(rotated, config);
    broker.proc!.kill('SIGHUP');
    await expect.poll(() => broker.stderr.slice(mark).includes('users and topic ACLs reloaded'), { timeout: 5000 }).toBe(true);
    // The proof is right for the old token and the keys the exchange started with.
    const hmac = (k: Buffer, d: string) => createHmac('sha256', k).update(d).digest();
    const clientKey = hmac(pbkdf2Sync(tokens.rotor!, Buffer.from(salt!, 'base64'), Number(iterations), 32, 'sha256'), 'Client Key');
    const withoutProof = `c=biws,r=${nonce}`;
    const signature = hmac(createHash('sha256').update(clientKey).digest(), `${clientFirstBare},${serverFirst},${withoutProof}`);
    const proof = Buffer.from(clientKey.map((b, i) => b ^ signature[i]!));
    const final = await raw.call(36, 2, { authBytes: Buffer.from(`${withoutProof},p=${proof.toString('base64')}`) });
    expect(final.errorCode).toBe(code('SASL_AUTHENTICATION_FAILED'));
    await expect.poll(() => broker.stderr.slice(mark), { timeout: 5000 }).toMatch(/"principal":"rotor".*changed or removed during the login/);
  });

  it("consumer groups: the group permission and the topics' read ACLs, as the main port's group commands", async () => {
    // No `group` permission: FindCoordinator, JoinGroup and ListGroups are refused as the group's.
    const app = await rawAs('app');
    expect(first(await app.call(10, 4, { keyType: 0, coordinatorKeys: ['g-app'] }), 'coordinators').errorCode).toBe(code('GROUP_AUTHORIZATION_FAILED'));
    const joinBody = {
      groupId: 'g-app',
      sessionTimeoutMs: 10_000,
      rebalanceTimeoutMs: 10_000,
      memberId: '',
      groupInstanceId: 'i',
      protocolType: 'consumer',
      protocols: [{ name: 'range', metadata: Buffer.alloc(0) }],
    };
    expect((await app.call(11, 5, joinBody)).errorCode).toBe(code('GROUP_AUTHORIZATION_FAILED'));
    expect((await app.call(16, 3, {})).errorCode).toBe(code('GROUP_AUTHORIZATION_FAILED'));

    // With it, a kafkajs group consumes `orders` and commits.
    await admin.command('PUBLISH', { topic: 'orders', partition: 0, message: 'for-the-group' });
    const consumer = kafka('grouper', tokens.grouper, 5).consumer({ groupId: 'g-ok', heartbeatInterval: 300 });
    const seen: string[] = [];
    try {
      await consumer.connect();
      await consumer.subscribe({ topic: 'orders', fromBeginning: true });
      await consumer.run({ eachMessage: async ({ message }) => void seen.push(message.value!.toString()) });
      await until(() => seen.includes('for-the-group'), 20_000, 'the group to read orders');
    } finally {
      await consumer.disconnect();
    }
    expect(Number(/offset=(\d+)/.exec(await admin.command('FETCH_OFFSET', { group: 'g-ok', topic: 'orders', partition: 0 }))![1])).toBeGreaterThan(0);

    // `secret`'s ACL does not list grouper: its commits there are refused, its offsets not shown.
    const adminRaw = await rawAs('admin');
    const commitBody = (topic: string) => ({
      groupId: 'g-mixed',
      generationId: -1,
      memberId: '',
      groupInstanceId: null,
      topics: [{ name: topic, partitions: [{ partitionIndex: 0, committedOffset: 0, committedLeaderEpoch: -1, committedMetadata: null }] }],
    });
    for (const topic of ['orders', 'secret']) expect(first(first(await adminRaw.call(8, 7, commitBody(topic)), 'topics'), 'partitions').errorCode).toBe(0);
    const grouper = await rawAs('grouper');
    expect(first(first(await grouper.call(8, 7, commitBody('secret')), 'topics'), 'partitions').errorCode).toBe(code('TOPIC_AUTHORIZATION_FAILED'));
    const all = first(await grouper.call(9, 8, { groups: [{ groupId: 'g-mixed', topics: null }], requireStable: false }), 'groups');
    expect((all.topics as KafkaStruct[]).map((t) => t.name)).toEqual(['orders']);
    const named = await grouper.call(9, 4, { groupId: 'g-mixed', topics: [{ name: 'secret', partitionIndexes: [0] }] });
    expect(first(first(named, 'topics'), 'partitions')).toMatchObject({ committedOffset: -1, errorCode: code('TOPIC_AUTHORIZATION_FAILED') });
  });

  it('a connection that does not authenticate within authTimeoutMs is closed', async () => {
    const raw = await RawKafka.connect(broker.kafkaPort);
    raws.push(raw);
    const t0 = Date.now();
    await raw.closed;
    // authTimeoutMs is 3 s here; the other tests' connections authenticate long before.
    expect(Date.now() - t0).toBeGreaterThanOrEqual(2_500);
  });
});

describe('client certificates on the Kafka port', () => {
  it('a verified certificate whose CN is a user authenticates without SASL; without one, SASL is required', async () => {
    const dir = await tempDir('tributary-kafka-mtls-');
    let broker: BrokerProcess | undefined;
    try {
      const ca = makeCa(dir, 'ca');
      const server = makeCert(dir, ca, 'server', 'localhost');
      const client = makeCert(dir, ca, 'client-app', 'app');
      const stranger = makeCert(dir, ca, 'client-stranger', 'stranger');
      const config = path.join(dir, 'broker.yaml');
      fs.writeFileSync(config, 'authentication: true\n');
      const token = addUser(config, 'app', ['topic.read', 'topic.write']);
      const adminToken = addUser(config, 'admin', ['admin']);
      broker = await BrokerProcess.start({
        args: [
          '--config',
          config,
          '--kafka-port',
          '0',
          '--offsets-topic-partitions',
          '1',
          '--tls-cert',
          server.certFile,
          '--tls-key',
          server.keyFile,
          '--tls-ca',
          ca.certFile,
        ],
      });
      const admin = await Connection.connect({
        host: '127.0.0.1',
        port: broker.port,
        tls: { ca: ca.cert, servername: 'localhost' },
        auth: { principal: 'admin', token: adminToken },
      });
      await admin.command('CREATE', { topic: 'mtls', partitions: 1 });
      await admin.close();
      const kafkaWith = (o: { cert?: { cert: string; key: string }; sasl?: boolean }) =>
        new Kafka({
          brokers: [`127.0.0.1:${broker!.kafkaPort}`],
          clientId: 'mtls',
          logLevel: logLevel.NOTHING,
          retry: { retries: 0 },
          ssl: { ca: [ca.cert], ...(o.cert ? { cert: o.cert.cert, key: o.cert.key } : {}) },
          ...(o.sasl ? { sasl: { mechanism: 'scram-sha-256' as const, username: 'app', password: token } } : {}),
        });
      const send = async (k: Kafka, value: string) => {
        const p = k.producer();
        try {
          await p.connect();
          await p.send({ topic: 'mtls', acks: 1, messages: [{ value }] });
        } finally {
          await p.disconnect();
        }
      };
      await send(kafkaWith({ cert: client }), 'by-certificate');
      // A certificate naming no user, or none at all: nothing is served until SASL (the connection closes).
      await expect(send(kafkaWith({ cert: stranger }), 'stranger')).rejects.toThrow();
      await expect(send(kafkaWith({}), 'anonymous')).rejects.toThrow();
      await send(kafkaWith({ sasl: true }), 'by-scram-over-tls');
      const c = await Connection.connect({
        host: '127.0.0.1',
        port: broker.port,
        tls: { ca: ca.cert, servername: 'localhost' },
        auth: { principal: 'app', token },
      });
      try {
        expect((await c.consume({ topic: 'mtls', partition: 0, offset: 0, batch: 10 })).records.map((r) => r.value.toString())).toEqual([
          'by-certificate',
          'by-scram-over-tls',
        ]);
      } finally {
        await c.close();
      }
    } finally {
      await broker?.dispose();
      await removeDir(dir);
    }
  });
});

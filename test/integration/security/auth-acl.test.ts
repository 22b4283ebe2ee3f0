import fs from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Admin } from 'tributary-client/admin.js';
import { Connection } from 'tributary-protocol/connection.js';
import { Consumer } from 'tributary-client/consumer.js';
import { Producer } from 'tributary-client/producer.js';
import { type Batch, encodeBatch } from 'tributary-protocol/batch.js';
import { BrokerProcess } from '../../helpers/launcher.js';
import { addUser, makeCa, makeCert, type Pem, removeUser } from './pki.js';
import { tempDir } from '../../helpers/util.js';

/**
 * Authentication and authorization against a real broker with TLS and authentication on: every protected
 * command is refused without AUTH, after a wrong token, for a revoked user and without the permission;
 * topic ACLs hold for produce, consume, stream and group commands; LIST/METADATA only show what the
 * principal may see; secrets stay out of logs, metrics and replies.
 */

const batch = (topic: string): Batch => ({
  topic,
  partition: 0,
  acks: '1',
  idempotent: false,
  firstSequence: 0,
  lastSequence: 0,
  records: [{ offset: 0, sequence: 0, producerId: '', key: null, epoch: 0, value: Buffer.from('b'), timestamp: 0, attributes: 0, headers: [] }],
});

/** Every command that needs authentication, with plausible parameters; `BATCH` is a binary batch frame. */
const PROTECTED: Array<[string, string]> = [
  ['CREATE', 'CREATE topic=newtopic'],
  ['DELETE', 'DELETE topic=open'],
  ['DESCRIBE', 'DESCRIBE topic=open'],
  ['METADATA', 'METADATA topic=open'],
  ['LIST_OFFSETS', 'LIST_OFFSETS topic=open'],
  ['CLUSTER_STATUS', 'CLUSTER_STATUS'],
  ['PUBLISH', 'PUBLISH topic=open message=x'],
  ['BATCH', ''],
  ['CONSUME', 'CONSUME topic=open partition=0 offset=0'],
  ['STREAM', 'STREAM topic=open partition=0 offset=0'],
  ['FIND_COORDINATOR', 'FIND_COORDINATOR group=g1'],
  ['FIND_COORDINATOR(txn)', 'FIND_COORDINATOR transactional_id=tx1'],
  ['JOIN_GROUP', 'JOIN_GROUP topic=open group=g1 member=m'],
  ['SYNC_GROUP', 'SYNC_GROUP topic=open group=g1 member=m generation=1'],
  ['HEARTBEAT', 'HEARTBEAT topic=open group=g1 member=m generation=1'],
  ['LEAVE_GROUP', 'LEAVE_GROUP topic=open group=g1 member=m'],
  ['FETCH_OFFSET', 'FETCH_OFFSET topic=open group=g1 partition=0'],
  ['COMMIT_OFFSET', 'COMMIT_OFFSET topic=open group=g1 partition=0 offset=0 member=m generation=1'],
  ['BATCH_COMMIT', 'BATCH_COMMIT topic=open group=g1 member=m generation=1 P0:0'],
  ['GROUP_STATUS', 'GROUP_STATUS group=g1'],
  ['LIST_GROUPS', 'LIST_GROUPS'],
  ['DELETE_GROUP', 'DELETE_GROUP group=g1'],
  ['RESET_OFFSETS', 'RESET_OFFSETS group=g1 topic=open to=earliest'],
  ['INIT_PRODUCER_ID', 'INIT_PRODUCER_ID transactional_id=tx1'],
  ['INIT_PRODUCER_ID(idempotent)', 'INIT_PRODUCER_ID'],
  ['BEGIN_TXN', 'BEGIN_TXN transactional_id=tx1 producerId=p epoch=0'],
  ['TXN_PUBLISH', 'TXN_PUBLISH transactional_id=tx1 producerId=p epoch=0 topic=open seqNum=1 message=x'],
  ['SEND_OFFSETS_TO_TXN', 'SEND_OFFSETS_TO_TXN transactional_id=tx1 producerId=p epoch=0 topic=open group=g1 member=m generation=1 P0:0'],
  ['END_TXN', 'END_TXN transactional_id=tx1 producerId=p epoch=0 result=abort'],
  ['TXN_STATUS', 'TXN_STATUS transactional_id=tx1'],
];
const ALL_PROTECTED: Array<[string, string]> = [...PROTECTED, ['LIST', 'LIST']];

async function send(conn: Connection, name: string, line: string): Promise<string> {
  const reply = await conn.request(name === 'BATCH' ? encodeBatch(batch('open')) : line);
  return reply.kind === 'text' ? reply.text : '(batch)';
}

describe('authentication and authorization (TLS + AUTH)', () => {
  let dir: string;
  let config: string;
  let ca: Pem;
  let broker: BrokerProcess;
  const tokens: Record<string, string> = {};
  const open: Connection[] = [];

  async function connect(principal?: string, token?: string): Promise<Connection> {
    const auth = principal === undefined ? undefined : { principal, token: token ?? tokens[principal]! };
    const c = await Connection.connect({ host: '127.0.0.1', port: broker.port, tls: { ca: ca.cert, servername: 'localhost' }, auth });
    open.push(c);
    return c;
  }

  beforeAll(async () => {
    dir = await tempDir('tributary-sec-');
    ca = makeCa(dir, 'ca');
    const server = makeCert(dir, ca, 'server', 'localhost');
    config = path.join(dir, 'broker.yaml');
    fs.writeFileSync(
      config,
      ['# security test config', 'authentication: true', 'topicAcls:', '  locked:', '    read: [reader]', '    write: [writer]', ''].join('\n'),
    );
    tokens.admin = addUser(config, 'admin', ['admin']);
    tokens.writer = addUser(config, 'writer', ['topic.write']);
    tokens.reader = addUser(config, 'reader', ['topic.read', 'group']);
    tokens.readonly = addUser(config, 'readonly', ['topic.read']);
    tokens.grouponly = addUser(config, 'grouponly', ['group']);
    tokens.txn = addUser(config, 'txn', ['transaction']);
    tokens.outsider = addUser(config, 'outsider', ['topic.read', 'topic.write', 'group']);
    tokens.nobody = addUser(config, 'nobody', []);
    tokens.revokee = addUser(config, 'revokee', ['admin']);
    const text = fs.readFileSync(config, 'utf8');
    expect(text).toContain('# security test config'); // user add keeps the rest of the file
    for (const t of Object.values(tokens)) expect(text).not.toContain(t); // only hashes are stored
    broker = await BrokerProcess.start({
      args: ['--config', config, '--tls-cert', server.certFile, '--tls-key', server.keyFile, '--log-level', 'debug', '--offsets-topic-partitions', '2'],
    });
    const admin = await connect('admin');
    for (const t of ['open', 'locked']) await admin.command('CREATE', { topic: t, partitions: 2 });
  });

  afterAll(async () => {
    await Promise.all(open.map((c) => c.close().catch(() => {})));
    await broker?.dispose();
    if (dir) fs.rmSync(dir, { recursive: true, force: true });
  });

  it('AUTH with the right token authenticates; PROTOCOL_INFO, NEGOTIATE and HELP need no AUTH', async () => {
    const anon = await connect();
    expect(await anon.command('PROTOCOL_INFO')).toMatch(/^OK protocol=tributary/);
    expect(await anon.command('HELP')).toMatch(/^OK commands=/);
    expect(await anon.command('NEGOTIATE', { version: 1 })).toMatch(/^OK/);
    expect(await anon.command('AUTH', { principal: 'reader', token: tokens.reader })).toBe('OK principal=reader authenticated=true');
  });

  it.each(ALL_PROTECTED)('%s without AUTH: authentication_required', async (name, line) => {
    const conn = await connect();
    expect(await send(conn, name, line)).toMatch(/^ERROR: authentication_required .*class=authorization/);
  });

  it('a wrong token is refused (without echoing it), and the connection stays unauthenticated', async () => {
    await expect(connect('reader', 'not-the-token')).rejects.toMatchObject({ code: 'authentication_failed' });
    await expect(connect('ghost', 'whatever')).rejects.toMatchObject({ code: 'authentication_failed' });
    const conn = await connect();
    const reply = await conn.request('AUTH principal=reader token=wrong-token-1234');
    expect(reply.kind === 'text' && reply.text).toMatch(/^ERROR: authentication_failed/);
    expect(reply.kind === 'text' && reply.text).not.toContain('wrong-token-1234');
    for (const [name, line] of ALL_PROTECTED) expect(await send(conn, name, line), name).toMatch(/^ERROR: authentication_required/);
  });

  it('closes a connection after repeated authentication failures', async () => {
    const conn = await connect();
    for (let i = 0; i < 3; i++) await conn.request('AUTH principal=reader token=bad').catch(() => {});
    await expect.poll(() => conn.closed, { timeout: 3000 }).toBe(true);
  });

  it.each(PROTECTED)('%s without any permission: NOT_AUTHORIZED_FOR_OPERATION', async (name, line) => {
    const conn = await connect('nobody');
    expect(await send(conn, name, line)).toMatch(/^ERROR: NOT_AUTHORIZED_FOR_OPERATION .*class=authorization/);
  });

  it('LIST for a principal without permissions is empty', async () => {
    const conn = await connect('nobody');
    expect(await conn.command('LIST')).toBe('OK count=0 topics=""');
  });

  it('a command that crosses boundaries needs every permission it touches', async () => {
    const readonly = await connect('readonly');
    expect(await send(readonly, 'CONSUME', 'CONSUME topic=open partition=0 offset=0')).toBe('(batch)');
    expect(await send(readonly, 'CONSUME', 'CONSUME topic=open partition=0 offset=0 group=g1')).toMatch(/^ERROR: NOT_AUTHORIZED_FOR_OPERATION .*permission=group/);
    expect(await send(readonly, 'STREAM', 'STREAM topic=open partition=0 offset=0 group=g1')).toMatch(/^ERROR: NOT_AUTHORIZED_FOR_OPERATION .*permission=group/);
    const grouponly = await connect('grouponly');
    expect(await send(grouponly, 'JOIN_GROUP', 'JOIN_GROUP topic=open group=g1 member=m')).toMatch(/^ERROR: NOT_AUTHORIZED_FOR_OPERATION .*permission=topic.read/);
    expect(await grouponly.command('LIST_GROUPS')).toMatch(/^OK/);
    const reader = await connect('reader');
    expect(await send(reader, 'FIND_COORDINATOR', 'FIND_COORDINATOR transactional_id=tx1')).toMatch(/^ERROR: NOT_AUTHORIZED_FOR_OPERATION .*permission=transaction/);
    expect(await send(reader, 'PUBLISH', 'PUBLISH topic=open message=x')).toMatch(/^ERROR: NOT_AUTHORIZED_FOR_OPERATION .*permission=topic.write/);
    expect(await send(reader, 'CREATE', 'CREATE topic=mine')).toMatch(/^ERROR: NOT_AUTHORIZED_FOR_OPERATION .*permission=admin/);
    const txn = await connect('txn');
    expect(await txn.command('FIND_COORDINATOR', { transactional_id: 'tx1' })).toMatch(/^OK coordinator_id=/);
    expect(await send(txn, 'FIND_COORDINATOR', 'FIND_COORDINATOR group=g1')).toMatch(/^ERROR: NOT_AUTHORIZED_FOR_OPERATION .*permission=group/);
    // Transactions: the coordinator commands need `transaction`; TXN_PUBLISH also topic.write (and the
    // topic ACL), SEND_OFFSETS_TO_TXN also group and topic.read.
    const init = await txn.command('INIT_PRODUCER_ID', { transactional_id: 'sec-tx' });
    const pid = /producerId=(\S+)/.exec(init)![1]!;
    expect(await txn.command('BEGIN_TXN', { transactional_id: 'sec-tx', producerId: pid, epoch: 0 })).toMatch(/^OK .*state=open/);
    expect(await send(txn, 'TXN_PUBLISH', `TXN_PUBLISH transactional_id=sec-tx producerId=${pid} epoch=0 topic=open seqNum=1 message=x`)).toMatch(
      /^ERROR: NOT_AUTHORIZED_FOR_OPERATION .*permission=topic.write/,
    );
    // The same as a transactional batch frame: it names its topic in the header.
    const txnBatch = (coordinatorPartition: number) =>
      encodeBatch(
        { ...batch('open'), acks: 'all', txn: { transactionalId: 'sec-tx', producerId: pid, epoch: 0, coordinatorPartition, coordinatorEpoch: coordinatorPartition }, firstSequence: 1, lastSequence: 1 },
        { extensions: txn.extensions },
      );
    const textOf = (r: Awaited<ReturnType<Connection['request']>>) => (r.kind === 'text' ? r.text : '(batch)');
    expect(textOf(await txn.request(txnBatch(-1)))).toMatch(/^ERROR: NOT_AUTHORIZED_FOR_OPERATION .*command=TXN_PUBLISH .*permission=topic.write/);
    expect(textOf(await txn.request(txnBatch(0)))).toMatch(/^ERROR: NOT_AUTHORIZED_FOR_OPERATION .*command=TXN_APPEND .*permission=admin/);
    expect(await send(txn, 'SEND_OFFSETS_TO_TXN', `SEND_OFFSETS_TO_TXN transactional_id=sec-tx producerId=${pid} epoch=0 topic=open group=g1 member=m generation=1 P0:0`)).toMatch(
      /^ERROR: NOT_AUTHORIZED_FOR_OPERATION .*permission=(group|topic.read)/,
    );
    expect(await txn.command('END_TXN', { transactional_id: 'sec-tx', producerId: pid, epoch: 0, result: 'abort' })).toMatch(/state=aborted/);
    expect(await send(reader, 'INIT_PRODUCER_ID', 'INIT_PRODUCER_ID transactional_id=sec-tx')).toMatch(/^ERROR: NOT_AUTHORIZED_FOR_OPERATION .*permission=transaction/);
    // An idempotent producer's id needs topic.write (it is only good for writing), not `transaction`.
    expect(await send(reader, 'INIT_PRODUCER_ID', 'INIT_PRODUCER_ID')).toMatch(/^ERROR: NOT_AUTHORIZED_FOR_OPERATION .*permission=topic.write/);
    // The broker-to-broker commands need admin, whatever transaction and topic permissions a user has.
    const outsiderTxn = await connect('outsider');
    for (const line of [
      `TXN_MARKER topic=open partition=0 producerId=${pid} epoch=0 result=abort`,
      `TXN_APPEND topic=open partition=0 producerId=${pid} epoch=0 message=x`,
      'TXN_GROUP_OFFSETS op=clear transactional_id=sec-tx group=g1 topic=open P0:0',
      'REPLICA_FETCH topic=open partition=0 offset=0 leader_epoch=0 replica=1',
    ]) {
      expect(await send(outsiderTxn, line.split(' ')[0]!, line), line).toMatch(/^ERROR: NOT_AUTHORIZED_FOR_OPERATION .*permission=admin/);
    }
    const writer = await connect('writer');
    expect(await send(writer, 'CONSUME', 'CONSUME topic=open partition=0 offset=0')).toMatch(/^ERROR: NOT_AUTHORIZED_FOR_OPERATION .*permission=topic.read/);
    // A producer needs metadata: topic.write is enough to describe a topic.
    expect(await writer.command('METADATA', { topic: 'open' })).toMatch(/^OK topic=open/);
  });

  it('topic ACLs: produce (text and binary), consume, stream and group commands on a locked topic', async () => {
    const outsider = await connect('outsider');
    const denied = /^ERROR: NOT_AUTHORIZED_FOR_TOPIC .*topic=locked/;
    expect(await send(outsider, 'PUBLISH', 'PUBLISH topic=locked message=x')).toMatch(denied);
    expect((await outsider.request(encodeBatch(batch('locked')))).kind === 'text').toBe(true);
    expect(await outsider.produceBatch(batch('locked')).catch((e: { code: string }) => e.code)).toBe('NOT_AUTHORIZED_FOR_TOPIC');
    expect(await send(outsider, 'CONSUME', 'CONSUME topic=locked partition=0 offset=0')).toMatch(denied);
    expect(await send(outsider, 'STREAM', 'STREAM topic=locked partition=0 offset=0')).toMatch(denied);
    expect(await send(outsider, 'JOIN_GROUP', 'JOIN_GROUP topic=locked group=g2 member=m')).toMatch(denied);
    expect(await send(outsider, 'COMMIT_OFFSET', 'COMMIT_OFFSET topic=locked group=g2 partition=0 offset=0 member=m generation=1')).toMatch(denied);
    expect(await send(outsider, 'FETCH_OFFSET', 'FETCH_OFFSET topic=locked group=g2 partition=0')).toMatch(denied);
    expect(await send(outsider, 'METADATA', 'METADATA topic=locked')).toMatch(denied);
    // The same principal may use topics without an ACL.
    expect(await outsider.command('PUBLISH', { topic: 'open', partition: 0, message: 'o' })).toMatch(/"status":"OK"/);
    expect((await outsider.produceBatch(batch('open'))).count).toBe(1);

    // The ACL's writer writes, its reader reads, streams and commits.
    const writer = await connect('writer');
    expect(await writer.command('PUBLISH', { topic: 'locked', partition: 0, message: 'secret-1' })).toMatch(/"status":"OK"/);
    expect((await writer.produceBatch(batch('locked'))).count).toBe(1);
    expect(await send(writer, 'CONSUME', 'CONSUME topic=locked partition=0 offset=0')).toMatch(/^ERROR: NOT_AUTHORIZED_FOR_OPERATION/);
    const reader = await connect('reader');
    expect(await send(reader, 'PUBLISH', 'PUBLISH topic=locked message=x')).toMatch(/^ERROR: NOT_AUTHORIZED_FOR_OPERATION/);
    const got = await reader.consume({ topic: 'locked', partition: 0, offset: 0 });
    expect(got.records.map((r) => r.value.toString())).toEqual(['secret-1', 'b']);
    const join = await reader.command('JOIN_GROUP', { topic: 'locked', group: 'g3', member: 'r' });
    const member = /member=(\S+)/.exec(join)![1]!;
    const generation = Number(/generation=(\d+)/.exec(join)![1]);
    await reader.command('SYNC_GROUP', { topic: 'locked', group: 'g3', member, generation });
    expect(await reader.command('COMMIT_OFFSET', { topic: 'locked', group: 'g3', partition: 0, offset: 1, member, generation })).toBe('OK');
    const streamer = await connect('reader');
    const ac = new AbortController();
    const it = streamer.stream({ topic: 'locked', partition: 0, offset: 0 }, ac.signal);
    const first = await it.next();
    expect(first.done).toBe(false);
    ac.abort();
  });

  it('LIST shows only topics the principal may read or write; internal topics only to admin', async () => {
    expect(await (await connect('outsider')).command('LIST')).toBe('OK count=1 topics=open');
    expect(await (await connect('reader')).command('LIST')).toBe('OK count=2 topics=locked,open');
    expect(await (await connect('admin')).command('LIST')).toMatch(/__consumer_offsets/);
    expect(await send(await connect('reader'), 'CONSUME', 'CONSUME topic=__consumer_offsets partition=0 offset=0')).toMatch(/^ERROR: NOT_AUTHORIZED_FOR_TOPIC/);
  });

  it('the SDK authenticates every connection it opens (producer, group consumer, admin)', async () => {
    const brokers = [`127.0.0.1:${broker.port}`];
    const tlsOpts = { ca: ca.cert, servername: 'localhost' };
    await using producer = new Producer({ brokers, tls: tlsOpts, auth: { principal: 'writer', token: tokens.writer! } });
    await producer.send({ topic: 'locked', messages: Array.from({ length: 10 }, (_, i) => ({ value: `m${i}`, partition: 1 })) });
    await using consumer = new Consumer({ brokers, tls: tlsOpts, auth: { principal: 'reader', token: tokens.reader! }, groupId: 'sdk-group', topic: 'locked', autoOffsetReset: 'earliest' });
    const seen: string[] = [];
    for await (const m of consumer) {
      if (m.partition === 1) seen.push(m.value.toString());
      if (seen.length === 10) break;
    }
    expect(seen).toEqual(Array.from({ length: 10 }, (_, i) => `m${i}`));
    await using bad = new Admin({ brokers, tls: tlsOpts, auth: { principal: 'reader', token: 'nope' }, retry: { retries: 0 } });
    await expect(bad.listTopics()).rejects.toMatchObject({ code: 'authentication_failed' });
    await using denied = new Admin({ brokers, tls: tlsOpts, auth: { principal: 'reader', token: tokens.reader! }, retry: { retries: 0 } });
    await expect(denied.createTopic({ topic: 'x' })).rejects.toMatchObject({ code: 'NOT_AUTHORIZED_FOR_OPERATION', errorClass: 'authorization' });
  });

  it('GROUP_STATUS, metrics and error replies carry no token', async () => {
    const reader = await connect('reader');
    const status = await reader.command('GROUP_STATUS', { group: 'g3' });
    const metrics = (await broker.health('/metrics')).body;
    for (const t of Object.values(tokens)) {
      expect(status).not.toContain(t);
      expect(metrics).not.toContain(t);
    }
  });

  // Last: it revokes a user for good.
  it('a revoked user (user remove + SIGHUP) is refused for every protected command, on old and new connections', async () => {
    const before = await connect('revokee');
    expect(await before.command('LIST')).toMatch(/^OK/);
    removeUser(config, 'revokee');
    broker.proc!.kill('SIGHUP');
    await expect.poll(() => broker.stderr.includes('users and topic ACLs reloaded'), { timeout: 5000 }).toBe(true);
    for (const [name, line] of ALL_PROTECTED) expect(await send(before, name, line), name).toMatch(/^ERROR: authentication_required/);
    await expect(connect('revokee')).rejects.toMatchObject({ code: 'authentication_failed' });
  });

  it('tokens and hashes never reach the debug log', async () => {
    expect(broker.stderr).toContain('"level":20'); // debug logging was on
    expect(broker.stderr).toContain('authentication failed');
    const stored = fs.readFileSync(config, 'utf8');
    const hashes = [...stored.matchAll(/(?:hash|salt): (\S+)/g)].map((m) => m[1]!);
    expect(hashes.length).toBeGreaterThan(0);
    for (const secret of [...Object.values(tokens), ...hashes, 'wrong-token-1234', 'not-the-token']) expect(broker.stderr).not.toContain(secret);
  });
});

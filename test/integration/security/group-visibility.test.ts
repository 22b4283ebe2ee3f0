/**
 * Groups and topic ACLs against a real broker with authentication on (docs/security.md, "Groups and topic
 * ACLs"): a group consuming a topic the principal may not describe is left out of LIST_GROUPS, the HTTP
 * group list and the Kafka port's ListGroups; GROUP_STATUS, the HTTP group page and DescribeGroups of it
 * are refused with the authorization error; and JOIN_GROUP naming another topic does not name the group's.
 */
import fs from 'node:fs';
import path from 'node:path';
import { Kafka, logLevel } from 'kafkajs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Connection } from 'tributary-protocol/connection.js';
import { BrokerProcess } from '../../helpers/launcher.js';
import { tempDir, until } from '../../helpers/util.js';
import { addUser } from './pki.js';
import { Principals } from './principals.js';

describe('groups of topics a principal may not describe', () => {
  let dir: string;
  let broker: BrokerProcess;
  const who = new Principals(() => broker);
  const { tokens } = who;
  const kafkaClients: Array<{ disconnect(): Promise<void> }> = [];

  const connect = (principal: string) => who.connect(principal);
  const text = (c: Connection, line: string) => who.text(c, line);
  const http = (p: string, user: string) => who.http(p, user);
  const kafka = (user: string) => new Kafka({ brokers: [`127.0.0.1:${broker.kafkaPort}`], clientId: `vis-${user}`, logLevel: logLevel.NOTHING, retry: { retries: 2 }, sasl: { mechanism: 'plain', username: user, password: tokens[user]! } });

  beforeAll(async () => {
    dir = await tempDir('tributary-groupvis-');
    const config = path.join(dir, 'broker.yaml');
    fs.writeFileSync(config, ['authentication: true', 'topicAcls:', '  payments:', '    read: [admin]', '    write: [admin]', ''].join('\n'));
    tokens.admin = addUser(config, 'admin', ['admin']);
    tokens.alice = addUser(config, 'alice', ['topic.read', 'topic.write', 'group']);
    broker = await BrokerProcess.start({ args: ['--config', config, '--kafka-port', '0', '--offsets-topic-partitions', '1', '--log-level', 'warn'] });
    const admin = await connect('admin');
    for (const t of ['payments', 'orders']) await admin.command('CREATE', { topic: t, partitions: 1 });
    // A Tributary group on payments, with a member and a commit.
    const join = await admin.command('JOIN_GROUP', { topic: 'payments', group: 'paygroup', member: 'p1', session_timeout_ms: 60000 });
    const member = /member=(\S+)/.exec(join)![1]!;
    const generation = Number(/generation=(\d+)/.exec(join)![1]);
    await admin.command('SYNC_GROUP', { topic: 'payments', group: 'paygroup', member, generation });
    await admin.command('PUBLISH', { topic: 'payments', message: 'x' });
    await admin.command('COMMIT_OFFSET', { topic: 'payments', group: 'paygroup', member, generation, partition: 0, offset: 1 });
    // alice's own group on orders stays visible to her.
    const own = await connect('alice');
    await own.command('JOIN_GROUP', { topic: 'orders', group: 'ordergroup', member: 'o1', session_timeout_ms: 60000 });
    // A Kafka consumer group on payments (kafkajs, as admin), Stable with its assignment.
    const consumer = kafka('admin').consumer({ groupId: 'kpay', sessionTimeout: 30_000, heartbeatInterval: 500 });
    kafkaClients.push(consumer);
    await consumer.connect();
    await consumer.subscribe({ topic: 'payments', fromBeginning: true });
    await consumer.run({ eachMessage: async () => {} });
    const kadmin = kafka('admin').admin();
    kafkaClients.push(kadmin);
    await kadmin.connect();
    await until(async () => (await kadmin.describeGroups(['kpay'])).groups[0]?.state === 'Stable', 20_000);
  }, 60_000);

  afterAll(async () => {
    for (const k of kafkaClients) await k.disconnect().catch(() => {});
    await who.closeAll();
    await broker?.dispose();
    if (dir) fs.rmSync(dir, { recursive: true, force: true });
  });

  it('LIST_GROUPS and GROUP_STATUS on the main port', async () => {
    const alice = await connect('alice');
    const list = await text(alice, 'LIST_GROUPS');
    expect(list).toMatch(/^OK /);
    expect(list).toContain('ordergroup');
    expect(list).not.toContain('paygroup');
    expect(list).not.toContain('kpay');
    for (const g of ['paygroup', 'kpay']) {
      const status = await text(alice, `GROUP_STATUS group=${g}`);
      expect(status).toMatch(/^ERROR: NOT_AUTHORIZED_FOR_OPERATION /);
      expect(status).not.toContain('payments');
    }
    expect(await text(alice, 'GROUP_STATUS group=ordergroup')).toContain('"topic":"orders"');
    // admin still sees everything.
    const admin = await connect('admin');
    expect(await text(admin, 'LIST_GROUPS')).toContain('paygroup');
    expect(await text(admin, 'GROUP_STATUS group=paygroup')).toContain('"topic":"payments"');
  });

  it("JOIN_GROUP naming another topic does not name the group's", async () => {
    const alice = await connect('alice');
    const reply = await text(alice, 'JOIN_GROUP group=paygroup topic=orders member=a1 session_timeout_ms=10000');
    expect(reply).toMatch(/^ERROR: invalid_parameter/);
    expect(reply).not.toContain('payments');
    // A topic she may describe is still named.
    const admin = await connect('admin');
    expect(await text(admin, 'JOIN_GROUP group=ordergroup topic=payments member=z1 session_timeout_ms=10000')).toContain('consumes topic orders');
  });

  it('the HTTP group list and group page', async () => {
    const list = await http('/api/v1/groups', 'alice');
    expect(list.status).toBe(200);
    expect(list.body).toContain('ordergroup');
    expect(list.body).not.toContain('paygroup');
    expect(list.body).not.toContain('payments');
    const page = await http('/api/v1/groups/paygroup', 'alice');
    expect(page.status).toBe(403);
    expect(page.body).not.toContain('payments');
    expect((await http('/api/v1/groups/paygroup', 'admin')).body).toContain('payments');
  });

  it('ListGroups and DescribeGroups on the Kafka port', async () => {
    const kadmin = kafka('alice').admin();
    kafkaClients.push(kadmin);
    await kadmin.connect();
    const ids = (await kadmin.listGroups()).groups.map((g) => g.groupId);
    expect(ids).toContain('ordergroup');
    expect(ids).not.toContain('kpay');
    expect(ids).not.toContain('paygroup');
    // Member metadata and assignments are bytes: shown as text, so a topic name in them is found.
    const asText = (_k: string, v: unknown) => (v && typeof v === 'object' && (v as { type?: unknown }).type === 'Buffer' ? Buffer.from((v as { data: number[] }).data).toString('latin1') : v);
    const described = await kadmin.describeGroups(['kpay', 'paygroup']).then(
      (r) => JSON.stringify(r, asText),
      (err: Error) => `${err.name}: ${err.message} ${JSON.stringify((err as { groups?: unknown }).groups ?? null)}`,
    );
    expect(described).not.toContain('payments');
    expect(described).not.toContain('vis-admin');
    expect(described).toMatch(/authoriz|GROUP_AUTHORIZATION_FAILED/i);
  });
});

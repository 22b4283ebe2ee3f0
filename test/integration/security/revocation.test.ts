import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Connection } from 'tributary-protocol/connection.js';
import { BrokerProcess, CLI } from '../../helpers/launcher.js';
import { addUser } from './pki.js';
import { tempDir } from '../../helpers/util.js';

/**
 * Revocation and group checks against a real broker with authentication on (docs/security.md): a group
 * command's topic must be the group's (the ACL is checked on the topic named), a rotated token ends the
 * sessions that logged in with the old one (main port and HTTP API), and the HTTP API lists the users and
 * ACLs in force after a SIGHUP, not those of the start.
 */
describe('revocation and group topic checks', () => {
  let dir: string;
  let config: string;
  let broker: BrokerProcess;
  const tokens: Record<string, string> = {};
  const open: Connection[] = [];

  async function connect(principal: string, token = tokens[principal]!): Promise<Connection> {
    const c = await Connection.connect({ host: '127.0.0.1', port: broker.port, auth: { principal, token } });
    open.push(c);
    return c;
  }
  const text = async (c: Connection, line: string) => {
    const r = await c.request(line);
    return r.kind === 'text' ? r.text : '(batch)';
  };
  const http = async (p: string, user: string, token: string) => {
    const res = await fetch(`http://127.0.0.1:${broker.healthPort}${p}`, {
      headers: { authorization: `Basic ${Buffer.from(`${user}:${token}`).toString('base64')}` },
    });
    return { status: res.status, body: await res.text() };
  };

  beforeAll(async () => {
    dir = await tempDir('tributary-secrev-');
    config = path.join(dir, 'broker.yaml');
    fs.writeFileSync(config, ['authentication: true', 'topicAcls:', '  payments:', '    read: [billing]', '    write: [billing]', ''].join('\n'));
    tokens.admin = addUser(config, 'admin', ['admin']);
    tokens.billing = addUser(config, 'billing', ['topic.read', 'topic.write', 'group']);
    tokens.mallory = addUser(config, 'mallory', ['topic.read', 'topic.write', 'group']);
    tokens.rotated = addUser(config, 'rotated', ['topic.read']);
    tokens.grown = addUser(config, 'grown', ['topic.read']);
    tokens.poller = addUser(config, 'poller', ['topic.read']);
    broker = await BrokerProcess.start({ args: ['--config', config, '--offsets-topic-partitions', '1', '--log-level', 'info'] });
    const admin = await connect('admin');
    for (const t of ['payments', 'public']) await admin.command('CREATE', { topic: t, partitions: 1 });
  });

  afterAll(async () => {
    await Promise.all(open.map((c) => c.close().catch(() => {})));
    await broker?.dispose();
    if (dir) fs.rmSync(dir, { recursive: true, force: true });
  });

  it("HEARTBEAT and LEAVE_GROUP naming a topic other than the group's are refused: the ACL was checked on that topic", async () => {
    const billing = await connect('billing');
    const join = await billing.command('JOIN_GROUP', { topic: 'payments', group: 'billing-group', member: 'b1', session_timeout_ms: 30000 });
    const member = /member=(\S+)/.exec(join)![1]!;
    const generation = Number(/generation=(\d+)/.exec(join)![1]);
    await billing.command('SYNC_GROUP', { topic: 'payments', group: 'billing-group', member, generation });
    const mallory = await connect('mallory');
    expect(await text(mallory, `LEAVE_GROUP topic=payments group=billing-group member=${member}`)).toMatch(/^ERROR: NOT_AUTHORIZED_FOR_TOPIC/);
    // A topic mallory may read passes the gate; the coordinator refuses it as not the group's.
    expect(await text(mallory, `HEARTBEAT topic=public group=billing-group member=${member} generation=${generation}`)).toMatch(/^ERROR: invalid_parameter/);
    expect(await text(mallory, `LEAVE_GROUP topic=public group=billing-group member=${member}`)).toMatch(/^ERROR: invalid_parameter/);
    expect(await text(billing, `HEARTBEAT topic=payments group=billing-group member=${member} generation=${generation}`)).toMatch(/^OK /);
  });

  it('GET /api/v1/users and /acls list the users and ACLs in force after a SIGHUP', async () => {
    execFileSync(process.execPath, [CLI, 'user', 'remove', 'mallory', '--config', config]);
    fs.writeFileSync(config, fs.readFileSync(config, 'utf8').replace('topicAcls:\n', 'topicAcls:\n  audit:\n    read: [admin]\n'));
    const mark = broker.stderr.length;
    broker.proc!.kill('SIGHUP');
    await expect.poll(() => broker.stderr.slice(mark).includes('users and topic ACLs reloaded'), { timeout: 5000 }).toBe(true);
    const users = JSON.parse((await http('/api/v1/users', 'admin', tokens.admin!)).body) as { users: Array<{ principal: string }> };
    expect(users.users.map((u) => u.principal).sort()).toEqual(['admin', 'billing', 'grown', 'poller', 'rotated']);
    const acls = JSON.parse((await http('/api/v1/acls', 'admin', tokens.admin!)).body) as { acls: Array<{ topic: string }> };
    expect(acls.acls.map((a) => a.topic).sort()).toEqual(['audit', 'payments']);
  });

  it('a rotated token ends the sessions that logged in with the old one, on the main port and the HTTP API', async () => {
    const oldToken = tokens.rotated!;
    expect((await http('/api/v1/topics', 'rotated', oldToken)).status).toBe(200);
    const openConn = await connect('rotated', oldToken);
    expect(await text(openConn, 'LIST')).toMatch(/^OK /);
    execFileSync(process.execPath, [CLI, 'user', 'add', 'rotated', '--permissions', 'topic.read', '--token', 'brand-new-token-123456', '--config', config]);
    const mark = broker.stderr.length;
    broker.proc!.kill('SIGHUP');
    await expect.poll(() => broker.stderr.slice(mark).includes('users and topic ACLs reloaded'), { timeout: 5000 }).toBe(true);
    const fresh = await Connection.connect({ host: '127.0.0.1', port: broker.port, auth: { principal: 'rotated', token: oldToken } }).then(
      (c) => {
        open.push(c);
        return 'accepted';
      },
      (e: { code: string }) => e.code,
    );
    expect(fresh).toBe('authentication_failed');
    expect(await text(openConn, 'LIST')).toMatch(/^ERROR: authentication_required/);
    expect((await http('/api/v1/topics', 'rotated', oldToken)).status).toBe(401);
    expect((await http('/api/v1/topics', 'rotated', 'brand-new-token-123456')).status).toBe(200);
  });

  it("user add with the user's current token changes its permissions only: its open sessions go on under them", async () => {
    const conn = await connect('grown');
    expect(await text(conn, 'PUBLISH topic=public message=before')).toMatch(/^ERROR: NOT_AUTHORIZED_FOR_OPERATION/);
    const entryOf = () => fs.readFileSync(config, 'utf8').match(/ {2}grown:\n {4}hash: (\S+)/)?.[1];
    const hash = entryOf();
    expect(hash).toBeDefined();
    execFileSync(process.execPath, [CLI, 'user', 'add', 'grown', '--permissions', 'topic.read,topic.write', '--token', tokens.grown!, '--config', config]);
    expect(entryOf()).toBe(hash);
    const mark = broker.stderr.length;
    broker.proc!.kill('SIGHUP');
    await expect.poll(() => broker.stderr.slice(mark).includes('users and topic ACLs reloaded'), { timeout: 5000 }).toBe(true);
    expect(JSON.parse(await text(conn, 'PUBLISH topic=public message=after'))).toMatchObject({ status: 'OK' });
    expect(await text(conn, 'LIST')).toMatch(/^OK /);
  });

  it('a long-poll CONSUME admitted before a revocation does not answer with records written after it', async () => {
    const admin = await connect('admin');
    await admin.command('CREATE', { topic: 'polled', partitions: 1 });
    const reader = await connect('poller');
    // Admitted once its handler started: the fetch metrics count its queue phase then.
    const admitted = async () => Number((await http('/metrics', 'admin', tokens.admin!)).body.match(/^tributary_fetch_phase_seconds_count\{phase="queue"\} (\d+)/m)?.[1] ?? 0);
    const before = await admitted();
    const poll = reader.request('CONSUME topic=polled partition=0 offset=0 wait_ms=20000', 25_000);
    await expect.poll(admitted, { timeout: 10_000 }).toBeGreaterThan(before);
    execFileSync(process.execPath, [CLI, 'user', 'remove', 'poller', '--config', config]);
    const mark = broker.stderr.length;
    broker.proc!.kill('SIGHUP');
    await expect.poll(() => broker.stderr.slice(mark).includes('users and topic ACLs reloaded'), { timeout: 5000 }).toBe(true);
    await admin.command('PUBLISH', { topic: 'polled', partition: 0, message: 'written-after-revocation' });
    const r = await poll;
    expect(r.kind).toBe('text');
    expect(r.kind === 'text' ? r.text : '').toMatch(/^ERROR: authentication_required/);
  });
});

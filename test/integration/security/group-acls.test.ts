/**
 * Group ACLs on the main port and the HTTP API against a real broker with authentication on
 * (docs/security.md, "Group ACLs"): a principal the group's ACL does not list is refused on every command
 * naming the group, and the refused commands change nothing (no member added, no rebalance, the committed
 * offset kept); the group is left out of its LIST_GROUPS and HTTP group list; a SIGHUP that adds or
 * withdraws a principal applies at once, a withdrawal ending its STREAM with the group.
 */
import fs from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseDocument } from 'yaml';
import type { Connection } from 'tributary-protocol/connection.js';
import { BrokerProcess } from '../../helpers/launcher.js';
import { tempDir } from '../../helpers/util.js';
import { addUser } from './pki.js';
import { Principals } from './principals.js';

describe('group ACLs on the main port', () => {
  let dir: string;
  let config: string;
  let broker: BrokerProcess;
  const who = new Principals(() => broker);
  const { tokens } = who;
  /** alice's member of alice-g, Stable after its SYNC. */
  let member: string;
  let generation: number;

  const connect = (principal: string) => who.connect(principal);
  const text = (c: Connection, line: string) => who.text(c, line);
  const http = (p: string, user: string) => who.http(p, user);
  /** Rewrites the config file's groupAcls and has the broker reload it (SIGHUP), waiting for its log line. */
  async function reloadGroupAcls(groupAcls: Record<string, string[]>): Promise<void> {
    const doc = parseDocument(fs.readFileSync(config, 'utf8'));
    doc.set('groupAcls', doc.createNode(groupAcls));
    fs.writeFileSync(config, doc.toString());
    const mark = broker.stderr.length;
    broker.proc!.kill('SIGHUP');
    await expect.poll(() => broker.stderr.slice(mark).includes('users and topic ACLs reloaded'), { timeout: 5000 }).toBe(true);
  }
  /** The gate's refusal, as on the wire (docs/protocol.md: class and retryable follow the code). */
  const refusal = (group: string, principal: string) => `ERROR: NOT_AUTHORIZED_FOR_GROUP class=authorization retryable=false group=${group} principal=${principal}`;
  const status = async (c: Connection, group: string) => JSON.parse(await text(c, `GROUP_STATUS group=${group}`)) as { generation: number; state: string; members: Array<{ member_id: string }> };

  beforeAll(async () => {
    dir = await tempDir('tributary-groupacl-');
    config = path.join(dir, 'broker.yaml');
    fs.writeFileSync(config, ['authentication: true', 'groupAcls:', "  'alice-*': [alice]", "  'bob-*': [bob]", ''].join('\n'));
    tokens.admin = addUser(config, 'admin', ['admin']);
    for (const user of ['alice', 'bob', 'carol']) tokens[user] = addUser(config, user, ['topic.read', 'topic.write', 'group', 'transaction']);
    broker = await BrokerProcess.start({ args: ['--config', config, '--offsets-topic-partitions', '1', '--log-level', 'info'] });
    const admin = await connect('admin');
    await admin.command('CREATE', { topic: 'orders', partitions: 1 });
    for (const m of ['a', 'b', 'c']) await admin.command('PUBLISH', { topic: 'orders', partition: 0, message: m });
    const alice = await connect('alice');
    const join = await alice.command('JOIN_GROUP', { topic: 'orders', group: 'alice-g', member: 'a1', session_timeout_ms: 60000 });
    member = /member=(\S+)/.exec(join)![1]!;
    generation = Number(/generation=(\d+)/.exec(join)![1]);
    await alice.command('SYNC_GROUP', { topic: 'orders', group: 'alice-g', member, generation });
    await alice.command('COMMIT_OFFSET', { topic: 'orders', group: 'alice-g', member, generation, partition: 0, offset: 1 });
    const bob = await connect('bob');
    await bob.command('JOIN_GROUP', { topic: 'orders', group: 'bob-g', member: 'b1', session_timeout_ms: 60000 });
  }, 60_000);

  afterAll(async () => {
    await who.closeAll();
    await broker?.dispose();
    if (dir) fs.rmSync(dir, { recursive: true, force: true });
  });

  it("refuses every command naming alice's group to bob, and none of them changes the group", async () => {
    const bob = await connect('bob');
    const before = await status(await connect('admin'), 'alice-g');
    expect(before.members.map((m) => m.member_id)).toEqual([member]);
    const refused = refusal('alice-g', 'bob');
    // bob's own transactional id, so SEND_OFFSETS_TO_TXN below is refused for the group alone.
    expect(await text(bob, 'INIT_PRODUCER_ID transactional_id=bob-tx')).toMatch(/^OK /);
    for (const line of [
      'JOIN_GROUP topic=orders group=alice-g member= session_timeout_ms=60000',
      `SYNC_GROUP topic=orders group=alice-g member=${member} generation=${generation}`,
      `HEARTBEAT topic=orders group=alice-g member=${member} generation=${generation}`,
      `LEAVE_GROUP topic=orders group=alice-g member=${member}`,
      'FETCH_OFFSET topic=orders group=alice-g partition=0',
      `COMMIT_OFFSET topic=orders group=alice-g member=${member} generation=${generation} partition=0 offset=3`,
      `BATCH_COMMIT topic=orders group=alice-g member=${member} generation=${generation} P0:3`,
      'CONSUME topic=orders partition=0 offset=0 group=alice-g',
      'GROUP_STATUS group=alice-g',
      'FIND_COORDINATOR group=alice-g',
      'SEND_OFFSETS_TO_TXN transactional_id=bob-tx topic=orders group=alice-g P0:3',
    ]) {
      expect(await text(bob, line), line).toBe(refused);
    }
    // A STREAM with the group is refused before it starts (its own connection: a STREAM takes it over).
    expect(await text(await connect('bob'), 'STREAM topic=orders partition=0 offset=0 group=alice-g')).toBe(refused);
    // The admin-only group commands stay the permission's refusal; admin passes the group ACL.
    expect(await text(bob, 'DELETE_GROUP group=alice-g')).toMatch(/^ERROR: NOT_AUTHORIZED_FOR_OPERATION .*permission=admin/);
    expect(await text(await connect('admin'), 'RESET_OFFSETS group=alice-g topic=orders to=earliest dry_run=true')).toMatch(/^OK /);

    // Nothing changed: the same member and generation, no rebalance pending, the commit kept.
    const alice = await connect('alice');
    const after = await status(alice, 'alice-g');
    expect([after.generation, after.state, after.members.map((m) => m.member_id)]).toEqual([before.generation, before.state, [member]]);
    expect(await text(alice, `HEARTBEAT topic=orders group=alice-g member=${member} generation=${generation}`)).toMatch(new RegExp(`^OK .*generation=${generation}`));
    expect(await text(alice, 'FETCH_OFFSET topic=orders group=alice-g partition=0')).toMatch(/^OK .*offset=1\b/);
    // bob's own group, and a group no entry matches, work as without ACLs.
    expect(await text(bob, 'FETCH_OFFSET topic=orders group=bob-g partition=0')).toMatch(/^OK /);
    expect(await text(bob, 'FETCH_OFFSET topic=orders group=unlisted partition=0')).toMatch(/^OK /);
  });

  it('LIST_GROUPS and the HTTP group list leave out the groups a principal may not use; the group page is 403', async () => {
    const list = async (user: string) => text(await connect(user), 'LIST_GROUPS');
    const bobs = await list('bob');
    expect(bobs).toMatch(/^OK /);
    expect(bobs).toContain('bob-g');
    expect(bobs).not.toContain('alice-g');
    const alices = await list('alice');
    expect(alices).toContain('alice-g');
    expect(alices).not.toContain('bob-g');
    const admins = await list('admin');
    expect(admins).toContain('alice-g');
    expect(admins).toContain('bob-g');

    const groups = await http('/api/v1/groups', 'bob');
    expect(groups.status).toBe(200);
    expect(groups.body).toContain('bob-g');
    expect(groups.body).not.toContain('alice-g');
    const page = await http('/api/v1/groups/alice-g', 'bob');
    expect(page.status).toBe(403);
    expect(page.body).toContain('NOT_AUTHORIZED_FOR_GROUP');
    expect((await http('/api/v1/groups/alice-g', 'alice')).status).toBe(200);
    const acls = JSON.parse((await http('/api/v1/acls', 'admin')).body) as { groupAcls: Array<{ group: string; principals: string[] }> };
    expect(acls.groupAcls).toEqual(expect.arrayContaining([{ group: 'alice-*', principals: ['alice'] }]));
  });

  it('a SIGHUP adding a principal lets it use the group; one withdrawing it refuses its next request and ends its STREAM', async () => {
    const carol = await connect('carol');
    expect(await text(carol, 'FETCH_OFFSET topic=orders group=alice-g partition=0')).toBe(refusal('alice-g', 'carol'));

    await reloadGroupAcls({ 'alice-*': ['alice', 'carol'], 'bob-*': ['bob'] });
    expect(await text(carol, 'FETCH_OFFSET topic=orders group=alice-g partition=0')).toMatch(/^OK .*offset=1\b/);
    expect(await text(carol, 'LIST_GROUPS')).toContain('alice-g');
    const join = await carol.command('JOIN_GROUP', { topic: 'orders', group: 'alice-c', member: 'c1', session_timeout_ms: 60000 });
    const carolMember = /member=(\S+)/.exec(join)![1]!;
    const carolGeneration = Number(/generation=(\d+)/.exec(join)![1]);
    // A STREAM reading with the group, on a connection of its own.
    const values: string[] = [];
    const streamConn = await connect('carol');
    const closed = (async () => {
      const it = streamConn.stream({ topic: 'orders', partition: 0, offset: 0, group: 'alice-g' });
      for (;;) {
        const n = await it.next();
        if (n.done) return n.value;
        for (const r of n.value.records) values.push(r.value.toString());
      }
    })();
    closed.catch(() => {});
    await expect.poll(() => values.includes('c'), { timeout: 5000 }).toBe(true);
    // A long-poll CONSUME with the group, waiting at the log's end (admitted: the fetch metrics count its queue phase).
    const admitted = async () => Number((await http('/metrics', 'admin')).body.match(/^tributary_fetch_phase_seconds_count\{phase="queue"\} (\d+)/m)?.[1] ?? 0);
    const polledBefore = await admitted();
    const poll = (await connect('carol')).request('CONSUME topic=orders partition=0 offset=3 group=alice-g wait_ms=20000', 25_000);
    await expect.poll(admitted, { timeout: 10_000 }).toBeGreaterThan(polledBefore);

    await reloadGroupAcls({ 'alice-*': ['alice'], 'bob-*': ['bob'] });
    expect(await closed).toMatchObject({ type: 'CLOSE', reason: 'unauthorized' });
    // The poll answers the refusal, not the record written after the withdrawal.
    await (await connect('admin')).command('PUBLISH', { topic: 'orders', partition: 0, message: 'after-withdrawal' });
    const polled = await poll;
    expect(polled.kind === 'text' ? polled.text : '(batch)').toBe(refusal('alice-g', 'carol'));
    expect(values).not.toContain('after-withdrawal');
    expect(await text(carol, 'FETCH_OFFSET topic=orders group=alice-g partition=0')).toBe(refusal('alice-g', 'carol'));
    expect(await text(carol, `HEARTBEAT topic=orders group=alice-c member=${carolMember} generation=${carolGeneration}`)).toBe(refusal('alice-c', 'carol'));
    expect(await text(carol, 'LIST_GROUPS')).not.toContain('alice-');
    // alice is unaffected.
    expect(await text(await connect('alice'), `HEARTBEAT topic=orders group=alice-g member=${member} generation=${generation}`)).toMatch(/^OK /);
  });

  it('a SIGHUP whose groupAcls are invalid leaves the group ACLs in force unchanged', async () => {
    const doc = parseDocument(fs.readFileSync(config, 'utf8'));
    doc.set('groupAcls', doc.createNode({ 'alice-*': ['alice', 'carol'], 'a*b': ['carol'] }));
    fs.writeFileSync(config, doc.toString());
    const mark = broker.stderr.length;
    broker.proc!.kill('SIGHUP');
    await expect.poll(() => broker.stderr.slice(mark).includes('SIGHUP: config invalid'), { timeout: 5000 }).toBe(true);
    expect(broker.stderr.slice(mark)).toContain('groupAcls.a*b');
    expect(await text(await connect('carol'), 'FETCH_OFFSET topic=orders group=alice-g partition=0')).toBe(refusal('alice-g', 'carol'));
  });

  it('a request admitted before a SIGHUP but held behind an earlier one is held to the new group ACLs when it runs', async () => {
    await reloadGroupAcls({ 'alice-*': ['alice'], 'bob-*': ['bob'] });
    const bob = await connect('bob');
    const join = await bob.command('JOIN_GROUP', { topic: 'orders', group: 'bob-h', member: 'b2', session_timeout_ms: 60000 });
    const m = /member=(\S+)/.exec(join)![1]!;
    const gen = Number(/generation=(\d+)/.exec(join)![1]);
    await bob.command('SYNC_GROUP', { topic: 'orders', group: 'bob-h', member: m, generation: gen });
    // A long-poll HEARTBEAT (pipelined) holds the reply order; the LEAVE_GROUP after it (not pipelined) is
    // admitted at once and runs only once the heartbeat's reply is out, after the withdrawal below.
    const heartbeat = bob.request(`HEARTBEAT topic=orders group=bob-h member=${m} generation=${gen} wait_ms=4000`, 15_000);
    const leave = bob.request(`LEAVE_GROUP topic=orders group=bob-h member=${m}`, 15_000);
    await new Promise((r) => setTimeout(r, 300));
    await reloadGroupAcls({ 'alice-*': ['alice'], 'bob-*': ['alice'] });
    await heartbeat;
    const left = await leave;
    expect(left.kind === 'text' ? left.text : '(batch)').toBe(refusal('bob-h', 'bob'));
    // Refused, so nothing changed: bob's member is still in the group.
    expect((await status(await connect('admin'), 'bob-h')).members.map((x) => x.member_id)).toEqual([m]);
    await reloadGroupAcls({ 'alice-*': ['alice'], 'bob-*': ['bob'] });
  });

  it('a long-poll HEARTBEAT waiting when a SIGHUP withdraws its principal answers the refusal, as a long-poll CONSUME does', async () => {
    const bob = await connect('bob');
    const join = await bob.command('JOIN_GROUP', { topic: 'orders', group: 'bob-k', member: 'b3', session_timeout_ms: 60000 });
    const m = /member=(\S+)/.exec(join)![1]!;
    const gen = Number(/generation=(\d+)/.exec(join)![1]);
    await bob.command('SYNC_GROUP', { topic: 'orders', group: 'bob-k', member: m, generation: gen });
    const heartbeat = bob.request(`HEARTBEAT topic=orders group=bob-k member=${m} generation=${gen} wait_ms=4000`, 15_000);
    await new Promise((r) => setTimeout(r, 300));
    await reloadGroupAcls({ 'alice-*': ['alice'], 'bob-*': ['alice'] });
    // Not OK: that would keep the member's session alive past the withdrawal.
    const answered = await heartbeat;
    expect(answered.kind === 'text' ? answered.text : '(batch)').toBe(refusal('bob-k', 'bob'));
    await reloadGroupAcls({ 'alice-*': ['alice'], 'bob-*': ['bob'] });
  });
  it('END_TXN commit of offsets staged before a SIGHUP withdrew the group is refused, and leaves the transaction to abort', async () => {
    await reloadGroupAcls({ 'alice-*': ['alice', 'carol'], 'bob-*': ['bob'] });
    const carol = await connect('carol');
    const join = await carol.command('JOIN_GROUP', { topic: 'orders', group: 'alice-t', member: 'c2', session_timeout_ms: 60000 });
    const m = /member=(\S+)/.exec(join)![1]!;
    const gen = Number(/generation=(\d+)/.exec(join)![1]);
    await carol.command('SYNC_GROUP', { topic: 'orders', group: 'alice-t', member: m, generation: gen });
    const init = await text(carol, 'INIT_PRODUCER_ID transactional_id=carol-tx');
    const pid = `transactional_id=carol-tx producerId=${/producerId=(\S+)/.exec(init)![1]} epoch=${/epoch=(\d+)/.exec(init)![1]}`;
    expect(await text(carol, `BEGIN_TXN ${pid}`)).toMatch(/^OK /);
    expect(await text(carol, `TXN_PUBLISH ${pid} topic=orders partition=0 seqNum=1 message=in-txn`)).toMatch(/^OK /);
    expect(await text(carol, `SEND_OFFSETS_TO_TXN ${pid} topic=orders group=alice-t member=${m} generation=${gen} P0:2`)).toMatch(/^OK /);

    await reloadGroupAcls({ 'alice-*': ['alice'], 'bob-*': ['bob'] });
    // Neither the offsets without the records nor the records without the offsets: the commit is refused whole.
    expect(await text(carol, `END_TXN ${pid} result=commit`)).toBe(refusal('alice-t', 'carol'));
    const admin = await connect('admin');
    // Still open, its offsets pending (not applied): only the abort ends it.
    expect(await text(admin, 'TXN_STATUS transactional_id=carol-tx')).toMatch(/^OK .*state=open/);
    expect(await text(admin, 'FETCH_OFFSET topic=orders group=alice-t partition=0')).toMatch(/^ERROR: UNSTABLE_OFFSET_COMMIT /);
    expect(await text(carol, `END_TXN ${pid} result=abort`)).toMatch(/^OK .*state=aborted/);
    const after = await text(admin, 'FETCH_OFFSET topic=orders group=alice-t partition=0');
    expect(after).toMatch(/^OK /);
    expect(after).not.toMatch(/offset=2\b/);
    // The record was aborted with the offsets: a read_committed consumer does not see it.
    const committed = await admin.consume({ topic: 'orders', partition: 0, offset: 0, isolation: 'read_committed' });
    expect(committed.records.map((r) => r.value.toString())).not.toContain('in-txn');
    expect((await admin.consume({ topic: 'orders', partition: 0, offset: 0, isolation: 'read_uncommitted' })).records.map((r) => r.value.toString())).toContain('in-txn');
    await reloadGroupAcls({ 'alice-*': ['alice'], 'bob-*': ['bob'] });
  });
});

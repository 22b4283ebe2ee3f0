/**
 * Consumer-group membership against a real broker: join/sync/heartbeat, incremental rebalancing with
 * exclusive ownership at every step, leave, resume and catch-up joins, session expiry, static members,
 * client-side assignment and assignor selection.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Connection } from 'tributary-protocol/connection.js';
import type { BrokerProcess } from '../../helpers/launcher.js';
import { GroupMember, expectDisjointSyncReplies, expectExclusiveOwnership, groupStatus, kv, list, settle, stableStatus, startBroker } from './helpers.js';
import { eventually, expectError, sleep } from '../../helpers/util.js';

describe('consumer group membership', () => {
  let broker: BrokerProcess;
  let admin: Connection;

  beforeAll(async () => {
    broker = await startBroker();
    admin = await broker.connect();
    for (const t of ['m-basic', 'm-rebal', 'm-resume', 'm-expire', 'm-static', 'm-client', 'm-assignors', 'm-history']) {
      await admin.command('CREATE', { topic: t, partitions: 4 });
    }
  });

  afterAll(async () => {
    await broker?.dispose();
  });

  it('FIND_COORDINATOR answers this broker', async () => {
    const r = kv(await admin.command('FIND_COORDINATOR', { group: 'g-anything' }));
    expect(`${r.get('host')}:${r.get('port')}`).toBe(broker.address);
    expect(Number(r.get('partition'))).toBeGreaterThanOrEqual(0);
    expect(Number(r.get('partition'))).toBeLessThan(4);
  });

  it('joins, syncs and heartbeats: a lone member gets every partition', async () => {
    const a = await GroupMember.connect(broker, 'm-basic', 'g-basic', 'alpha');
    const j = await a.join();
    expect(a.id).toMatch(/^alpha-[0-9a-f-]{36}$/);
    expect(a.generation).toBe(1);
    expect(j.get('leader')).toBe(a.id);
    expect(a.joinAssignments).toEqual([0, 1, 2, 3]);
    expect(await a.sync()).toEqual([0, 1, 2, 3]);
    expect(kv(await a.heartbeat())).toEqual(
      new Map([
        ['member', a.id],
        ['generation', '1'],
      ]),
    );
    const s = await groupStatus(admin, 'g-basic');
    expect(s).toMatchObject({ state: 'Stable', generation: 1, leader: a.id, topic: 'm-basic' });
    expect(s.members.map((m) => [m.member_id, m.client_id, m.assignments, m.pending])).toEqual([[a.id, 'alpha', [0, 1, 2, 3], []]]);
    expect(s.history.at(-1)).toMatchObject({ generation: 1, reasons: [{ cause: 'join', member: a.id }] });
    expect(s.history.at(-1)!.rebalanceMs).toBeGreaterThanOrEqual(0);
    // a heartbeat with a generation the member never had
    await expectError(admin.command('HEARTBEAT', { topic: 'm-basic', group: 'g-basic', member: a.id, generation: 7 }), 'GEN_MISMATCH', {
      current: '1',
      requested: '7',
    });
    expect(
      kv(await admin.command('LIST_GROUPS'))
        .get('groups')!
        .split(','),
    ).toContain('g-basic');
  });

  it('a second member wakes the first one’s long-poll heartbeat and the split never double-assigns', async () => {
    const a = await GroupMember.connect(broker, 'm-rebal', 'g-rebal', 'a');
    const b = await GroupMember.connect(broker, 'm-rebal', 'g-rebal', 'b');
    // A long session, so that its long-poll heartbeat may wait 150 s (half of it): longer than the test
    // lasts, so only B's join can end it.
    await a.join({ session_timeout_ms: 300_000 });
    expect(await a.sync()).toEqual([0, 1, 2, 3]);

    const hb = a.heartbeat(150_000).then(
      () => ({ ok: true as const }),
      (err: { code: string }) => ({ ok: false as const, code: err.code }),
    );
    await sleep(50);
    await b.join();
    expect(b.generation).toBe(2);
    // A still owns everything, so B is entitled to nothing yet.
    expect(b.joinAssignments).toEqual([]);
    const woke = await hb;
    expect(woke).toMatchObject({ ok: false, code: 'REBALANCE_IN_PROGRESS' });

    // B syncs first: nothing is free for it.
    expect(await b.sync()).toEqual([]);
    expectDisjointSyncReplies([a, b]);
    expectExclusiveOwnership(await groupStatus(admin, 'g-rebal'));

    // A rejoins (catch-up from generation 1) and gives half away.
    await a.rejoin();
    expect(a.generation).toBe(2);
    expect(a.joinAssignments).toHaveLength(2);
    const kept = await a.sync();
    expect(kept).toHaveLength(2);
    expectDisjointSyncReplies([a, b]);
    let s = await groupStatus(admin, 'g-rebal');
    expectExclusiveOwnership(s);
    expect(s.state).toBe('CompletingRebalance');
    const bRow = s.members.find((m) => m.member_id === b.id)!;
    expect(bRow.assignments).toEqual([]);
    expect(bRow.pending).toHaveLength(2);

    // B learns that its partitions are free through its heartbeat, rejoins and takes them.
    await expectError(b.heartbeat(2000), 'REBALANCE_IN_PROGRESS');
    await b.rejoin();
    expect(b.generation).toBe(2);
    const taken = await b.sync();
    expect(taken).toHaveLength(2);
    expect([...kept, ...taken].sort()).toEqual([0, 1, 2, 3]);
    expectDisjointSyncReplies([a, b]);
    s = await groupStatus(admin, 'g-rebal');
    expectExclusiveOwnership(s);
    expect(s.state).toBe('Stable');
    expect(s.generation).toBe(2);
    expect(s.history.at(-1)).toMatchObject({ generation: 2, reasons: [{ cause: 'join', member: b.id }] });
    expect(s.history.at(-1)!.rebalanceMs).toBeGreaterThanOrEqual(0);
    expect(kv(await a.heartbeat()).get('generation')).toBe('2');
    expect(kv(await b.heartbeat()).get('generation')).toBe('2');

    // B leaves: A gets everything after its rejoin.
    expect(kv(await b.leave())).toEqual(
      new Map([
        ['group', 'g-rebal'],
        ['member', b.id],
        ['left', 'true'],
      ]),
    );
    b.owned = [];
    await expectError(a.heartbeat(2000), 'REBALANCE_IN_PROGRESS');
    await a.rejoin();
    expect(a.generation).toBe(3);
    expect(await a.sync()).toEqual([0, 1, 2, 3]);
    s = await groupStatus(admin, 'g-rebal');
    expect(s).toMatchObject({ state: 'Stable', generation: 3, leader: a.id });
    expect(s.members.map((m) => m.member_id)).toEqual([a.id]);
    expect(s.history.at(-1)).toMatchObject({ generation: 3, reasons: [{ cause: 'leave', member: b.id }] });
    // the departed member is gone for good
    await expectError(b.heartbeat(), 'member_not_found', { member: b.id });
  });

  it('three members settle into a balanced split and each departure redistributes', async () => {
    const ms = await Promise.all(['x', 'y', 'z'].map((n) => GroupMember.connect(broker, 'm-rebal', 'g-three', n)));
    await Promise.all(ms.map((m) => m.join()));
    // all three joined within one window: one generation, disjoint entitlements covering everything
    expect(new Set(ms.map((m) => m.generation))).toEqual(new Set([1]));
    expect(ms.flatMap((m) => m.joinAssignments).sort()).toEqual([0, 1, 2, 3]);
    for (const m of ms) await m.sync();
    let s = await settle(admin, ms);
    expect(s.members.map((m) => m.assignments.length).sort()).toEqual([1, 1, 2]);
    await ms[0]!.leave();
    ms[0]!.owned = [];
    const rest = ms.slice(1);
    await eventually('generation 2', async () => (await groupStatus(admin, 'g-three')).generation === 2);
    s = await settle(admin, rest);
    expect(s.members.map((m) => m.assignments.length)).toEqual([2, 2]);
    expect(s.members.flatMap((m) => m.assignments).sort()).toEqual([0, 1, 2, 3]);
  });

  it('resume: JOIN with the own id and current generation keeps generation and assignments; stale generations are synchronized', async () => {
    const a = await GroupMember.connect(broker, 'm-resume', 'g-resume', 'res');
    const b = await GroupMember.connect(broker, 'm-resume', 'g-resume', 'other');
    await a.join();
    await a.sync();
    await b.join();
    await b.sync();
    await settle(admin, [a, b]);
    const before = await stableStatus(admin, 'g-resume');
    const gen = a.generation;
    expect(gen).toBe(2);
    const owned = a.owned;

    const r = await a.rejoin();
    expect(r.get('member')).toBe(a.id);
    expect(Number(r.get('generation'))).toBe(gen);
    expect(list(r.get('assignments'))).toEqual(owned);
    expect(await a.sync()).toEqual(owned);
    // No new generation was started: a new generation only comes from a join window, and a window opens
    // with a membership change that GROUP_STATUS shows (state PreparingRebalance, the member's fields)
    // from the moment the reply was sent. So the status right after the reply is the event to check: it
    // is what it was before.
    expect(await stableStatus(admin, 'g-resume')).toEqual(before);

    // stale generation: synchronized to the current one, same member id, no new generation
    const stale = kv(await a.conn.command('JOIN_GROUP', { topic: 'm-resume', group: 'g-resume', member: a.id, generation: 1 }));
    expect(stale.get('member')).toBe(a.id);
    expect(stale.get('generation')).toBe(String(gen));
    expect(list(stale.get('assignments'))).toEqual(owned);
    expect(await a.sync()).toEqual(owned);
    expect(await stableStatus(admin, 'g-resume')).toEqual(before); // as above: no change pending

    // an unknown member id with a generation must join fresh
    await expectError(
      admin.command('JOIN_GROUP', { topic: 'm-resume', group: 'g-resume', member: 'res-00000000-0000-0000-0000-000000000000', generation: gen }),
      'member_not_found',
      {
        member: 'res-00000000-0000-0000-0000-000000000000',
      },
    );
    expect(await stableStatus(admin, 'g-resume')).toEqual(before); // the refused JOIN changed nothing
  });

  it('expires a member that stops heartbeating after its session timeout, not before', async () => {
    const a = await GroupMember.connect(broker, 'm-expire', 'g-expire', 'live');
    const q = await GroupMember.connect(broker, 'm-expire', 'g-expire', 'quiet');
    await Promise.all([a.join(), q.join({ session_timeout_ms: 1000 })]);
    await a.sync();
    await q.sync();
    const s0 = await settle(admin, [a, q]);
    expect(s0.members.find((m) => m.member_id === q.id)!.session_timeout_ms).toBe(1000);
    // A keeps heartbeating (long-poll) and is told to rejoin once Q expires.
    await eventually(
      'A to be told to rejoin after Q expired',
      async () => {
        try {
          await a.heartbeat(300);
          return false;
        } catch (err) {
          expect((err as { code: string }).code).toBe('REBALANCE_IN_PROGRESS');
          return true;
        }
      },
      30_000,
      0,
    );
    await a.rejoin();
    expect(await a.sync()).toEqual([0, 1, 2, 3]);
    const s = await groupStatus(admin, 'g-expire');
    expect(s.members.map((m) => m.member_id)).toEqual([a.id]);
    const change = s.history.at(-1)!;
    expect(change.generation).toBe(s0.generation + 1);
    expect(change.reasons).toHaveLength(1);
    expect(change.reasons[0]).toMatchObject({ cause: 'expired', member: q.id });
    // Not before its session passed, by the broker's own account: removed at or after its last heartbeat
    // plus its session timeout. The exact deadline is driven by a fake clock in group-coordinator.test.ts.
    expect(change.reasons[0]!.missedByMs).toBeGreaterThanOrEqual(0);
    await expectError(q.heartbeat(), 'member_not_found', { member: q.id });
  });

  it('removes a member that keeps heartbeating but does not rejoin within its rebalance timeout', async () => {
    const a = await GroupMember.connect(broker, 'm-expire', 'g-rtimeout', 'slow');
    // A long session: its long-poll heartbeat may wait 150 s, and its session never runs out in this test.
    await a.join({ rebalance_timeout_ms: 400, session_timeout_ms: 300_000 });
    await a.sync();
    const b = await GroupMember.connect(broker, 'm-expire', 'g-rtimeout', 'fast');
    // A's long-poll heartbeat, parked before B joins, is answered when A is told to rejoin: still a member,
    // its rebalance timeout running.
    const told = a.heartbeat(150_000);
    told.catch(() => {});
    await b.join();
    await b.sync();
    await expectError(told, 'REBALANCE_IN_PROGRESS');
    // It keeps heartbeating and never rejoins: removed by its rebalance timeout (cause below; the exact
    // deadline is driven by a fake clock in group-coordinator.test.ts).
    await eventually(
      'A to be removed',
      async () => {
        try {
          await a.heartbeat();
          return false;
        } catch (err) {
          const code = (err as { code: string }).code;
          if (code === 'member_not_found') return true;
          expect(code).toBe('REBALANCE_IN_PROGRESS');
          return false;
        }
      },
      30_000,
      50,
    );
    const s = await settle(admin, [b]);
    expect(s.members.map((m) => m.member_id)).toEqual([b.id]);
    expect(b.owned).toEqual([0, 1, 2, 3]);
    expect(s.history.at(-1)!.reasons).toMatchObject([{ cause: 'rebalance_timeout', member: a.id }]);
  });

  it('static membership: a new client with the same instance takes over the slot; the old id is fenced', async () => {
    const old = await GroupMember.connect(broker, 'm-static', 'g-static', 'c1');
    const other = await GroupMember.connect(broker, 'm-static', 'g-static', 'c2');
    await old.join({ instance: 'node-1' });
    await old.sync();
    await other.join();
    await other.sync();
    await settle(admin, [old, other]);
    const before = await groupStatus(admin, 'g-static');
    const gen = before.generation;
    const oldRow = before.members.find((m) => m.member_id === old.id)!;
    expect(oldRow.instance).toBe('node-1');
    // the old incarnation is long-polling when it is replaced
    const pending = old.heartbeat(3000).then(
      () => 'ok',
      (err: { code: string }) => err.code,
    );
    await sleep(50);

    const fresh = await GroupMember.connect(broker, 'm-static', 'g-static', 'c1-restarted');
    const j = await fresh.join({ instance: 'node-1' });
    expect(fresh.id).toMatch(/^c1-restarted-/);
    expect(fresh.id).not.toBe(old.id);
    expect(fresh.generation).toBe(gen);
    expect(list(j.get('assignments'))).toEqual(oldRow.assignments);
    expect(await pending).toBe('FENCED_INSTANCE_ID');
    expect(await fresh.sync()).toEqual(oldRow.assignments);

    // The replacement started no rebalance: it would show in the status from the JOIN's reply on.
    const after = await groupStatus(admin, 'g-static');
    expect(after.generation).toBe(gen);
    expect(after.state).toBe('Stable');
    expect(after.members.map((m) => m.member_id).sort()).toEqual([fresh.id, other.id].sort());
    expect(after.members.find((m) => m.member_id === fresh.id)).toMatchObject({ instance: 'node-1', assignments: oldRow.assignments });
    expectExclusiveOwnership(after);
    // the other member was not disturbed
    expect(kv(await other.heartbeat()).get('generation')).toBe(String(gen));

    await expectError(old.heartbeat(), 'FENCED_INSTANCE_ID', { member: old.id });
    await expectError(old.commit(oldRow.assignments[0]!, 0), 'FENCED_INSTANCE_ID');
    await expectError(old.sync(), 'FENCED_INSTANCE_ID');
    await expectError(old.rejoin(), 'FENCED_INSTANCE_ID');
    expect(await fresh.commit(oldRow.assignments[0]!, 0)).toBe('OK');
    expect((await groupStatus(admin, 'g-static')).generation).toBe(gen);
  });

  it('client-side assignment: the leader submits a plan; invalid plans change nothing', async () => {
    const l = await GroupMember.connect(broker, 'm-client', 'g-client', 'lead');
    const f = await GroupMember.connect(broker, 'm-client', 'g-client', 'follow');
    const j1 = await l.join({ protocol: 'client' });
    expect(j1.get('protocol')).toBe('client');
    expect(j1.get('leader')).toBe(l.id);
    expect(j1.get('members')).toBe(`${l.id}:`);
    expect(await l.sync({ plan: `${l.id}:0,1,2,3` })).toEqual([0, 1, 2, 3]);

    await f.join({ protocol: 'client' });
    expect(f.leader).toBe(l.id);
    expect(f.lastJoin.has('members')).toBe(false);
    await expectError(l.heartbeat(2000), 'REBALANCE_IN_PROGRESS');
    const j2 = await l.rejoin();
    expect(l.generation).toBe(2);
    expect(j2.get('members')!.split(';').sort()).toEqual([`${l.id}:0,1,2,3`, `${f.id}:`].sort());

    const before = await stableStatus(admin, 'g-client');
    for (const plan of [
      `${l.id}:0,1;${f.id}:1,2,3`, // partition twice
      `${l.id}:0,1;ghost-member:2,3`, // unknown member
      `${l.id}:0,1;${f.id}:2`, // partition 3 missing
      `${l.id}:0,1;${f.id}:2,9`, // no such partition
      `${l.id}:0,1;${f.id}:2,x`, // malformed
    ]) {
      await expectError(l.sync({ plan }), 'invalid_parameter', { param: 'plan' });
      expect(await stableStatus(admin, 'g-client'), plan).toEqual(before);
    }
    // only the leader may submit a plan
    await expectError(f.sync({ plan: `${l.id}:0,1;${f.id}:2,3` }), 'invalid_parameter', { param: 'plan' });
    expect(await stableStatus(admin, 'g-client')).toEqual(before);

    // The follower's SYNC waits for the leader's plan.
    const fSync = f.sync();
    await sleep(100);
    expect(await l.sync({ plan: `${l.id}:0,1;${f.id}:2,3` })).toEqual([0, 1]);
    expect(await fSync).toEqual([2, 3]);
    expectDisjointSyncReplies([l, f]);
    const s = await groupStatus(admin, 'g-client');
    expect(s).toMatchObject({ state: 'Stable', protocol: 'client', generation: 2 });
    expectExclusiveOwnership(s);
  });

  it('accepts assignor=range|roundrobin|sticky (balanced split) and rejects assignor=bogus', async () => {
    for (const assignor of ['range', 'roundrobin', 'sticky']) {
      const group = `g-assign-${assignor}`;
      const ms = await Promise.all(['p', 'q'].map((n) => GroupMember.connect(broker, 'm-assignors', group, n)));
      await Promise.all(ms.map((m) => m.join({ assignor })));
      for (const m of ms) await m.sync();
      const s = await settle(admin, ms);
      expect(s.assignor).toBe(assignor);
      expect(s.members.map((m) => m.assignments.length)).toEqual([2, 2]);
    }
    await expectError(admin.command('JOIN_GROUP', { topic: 'm-assignors', group: 'g-assign-bogus', member: 'p', assignor: 'bogus' }), 'invalid_parameter', {
      param: 'assignor',
    });
    await expectError(groupStatus(admin, 'g-assign-bogus'), 'group_not_found');
    expect(
      kv(await admin.command('LIST_GROUPS'))
        .get('groups')!
        .split(','),
    ).not.toContain('g-assign-bogus');
  });

  it('keeps the last 20 generations in history', async () => {
    const m = await GroupMember.connect(broker, 'm-history', 'g-history', 'h');
    for (let i = 0; i < 11; i++) {
      await m.join();
      expect(m.generation).toBe(2 * i + 1);
      await m.leave();
      // the next join must not share the leave's join window
      await eventually(`generation ${2 * i + 2}`, async () => (await groupStatus(admin, 'g-history')).generation === 2 * i + 2);
    }
    const s = await eventually('generation 22', async () => {
      const st = await groupStatus(admin, 'g-history');
      return st.generation === 22 && st;
    });
    expect(s.state).toBe('Empty');
    expect(s.history).toHaveLength(20);
    expect(s.history.map((h) => h.generation)).toEqual(Array.from({ length: 20 }, (_, i) => i + 3));
    expect(s.history.at(-1)!.reasons[0]!.cause).toBe('leave');
  });
});

describe('a JOIN whose connection closes before its reply', () => {
  let broker: BrokerProcess;
  let admin: Connection;

  beforeAll(async () => {
    // A join window long enough for the connection to close while the new member's reply waits.
    broker = await startBroker(['--group-join-window-ms', '3000']);
    admin = await broker.connect();
    await admin.command('CREATE', { topic: 'm-ghost', partitions: 4 });
  });

  afterAll(async () => {
    await broker?.dispose();
  });

  it('leaves no member behind: nobody could sync, heartbeat or leave for it', async () => {
    const a = await GroupMember.connect(broker, 'm-ghost', 'g-ghost', 'alpha');
    await a.join();
    await a.sync();
    const ghostConn = await broker.connect();
    const reply = ghostConn.command('JOIN_GROUP', { topic: 'm-ghost', group: 'g-ghost', member: 'ghost', session_timeout_ms: 60_000 }).catch(() => 'closed');
    await eventually('the new member in the group', async () => (await groupStatus(admin, 'g-ghost')).members.some((m) => m.member_id.startsWith('ghost-')));
    await ghostConn.close();
    expect(await reply).toBe('closed');
    // Its session (60 s) would otherwise have kept it, and a share of the partitions, for a minute.
    await eventually('the member gone', async () => (await groupStatus(admin, 'g-ghost')).members.every((m) => !m.member_id.startsWith('ghost-')), 10_000);
  });
});

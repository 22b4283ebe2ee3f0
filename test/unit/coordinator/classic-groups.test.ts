/**
 * Kafka classic-protocol groups in the group coordinator (coordinator/classic-*.ts) on a fake clock: the
 * join window, a member that does not rejoin within the rebalance timeout, session expiry, a leader that
 * never assigns, a restart in the middle of a group's life (generations never handed out twice), and a
 * refused log write answered with a retriable error. Real partitions hold the log; no timer runs on real time.
 */
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { ClassicJoinAnswer } from 'tributary-broker/coordinator/classic-groups.js';
import type { JoinResult } from 'tributary-broker/coordinator/classic-group.js';
import { TributaryError } from 'tributary-protocol/errors.js';
import { type Coordinators, classicJoinRequest, GROUP_CONFIG, openCoordinators } from '../../helpers/coordinators.js';
import { FakeClock } from '../../helpers/fake-clock.js';
import { removeDir, tempDir, until } from '../../helpers/util.js';

const WINDOW = GROUP_CONFIG.joinWindowMs;

let dir: string;
let clock: FakeClock;
let c: Coordinators;

beforeEach(async () => {
  dir = await tempDir('trib-classic-');
  clock = new FakeClock();
  c = await openCoordinators(dir, clock, { topics: { t: 2 } });
});

afterEach(async () => {
  await c.close();
  await removeDir(dir);
});

const classic = () => c.groups.classic;

const req = classicJoinRequest;

function joined(a: ClassicJoinAnswer): JoinResult {
  if ('memberIdRequired' in a) throw new Error('unexpected MEMBER_ID_REQUIRED');
  return a;
}

const kafkaName = (p: Promise<unknown>) =>
  p.then(
    () => 'NONE',
    (err: unknown) => (err as { kafkaName?: string; code?: string }).kafkaName ?? (err as TributaryError).code,
  );

/** Two members joined and synced: [leader, follower] at generation 1. */
async function twoMembers(sessionTimeoutMs = 1000): Promise<[JoinResult, JoinResult]> {
  const first = classic().join(req('', { sessionTimeoutMs }));
  const second = classic().join(req('', { sessionTimeoutMs }));
  await clock.advance(WINDOW);
  const [a, b] = [joined(await first), joined(await second)];
  const leader = a.leader === a.memberId ? a : b;
  const follower = leader === a ? b : a;
  const followerSync = classic().sync({ group: 'g', memberId: follower.memberId, instanceId: null, generation: 1, assignments: [], protocolType: null, protocolName: null });
  await classic().sync({ group: 'g', memberId: leader.memberId, instanceId: null, generation: 1, assignments: [{ memberId: follower.memberId, assignment: Buffer.from('f') }], protocolType: null, protocolName: null });
  expect(await followerSync).toEqual(Buffer.from('f'));
  return [leader, follower];
}

const hb = (m: JoinResult, generation = m.generation) => classic().heartbeat({ group: 'g', memberId: m.memberId, instanceId: null, generation });

describe('Kafka classic groups on a fake clock', () => {
  it('each new generation counts in tributary_group_rebalances_total, as a Tributary group\'s does', async () => {
    const rebalances = async () => (await c.groupRegistry.getSingleMetric('tributary_group_rebalances_total')!.get()).values.find((v) => v.labels.group === 'g')?.value ?? 0;
    const [leader, follower] = await twoMembers();
    expect(await rebalances()).toBe(1);
    // Both rejoin: generation 2.
    const again = [classic().join(req(leader.memberId)), classic().join(req(follower.memberId))];
    await clock.advance(WINDOW);
    expect((await Promise.all(again)).map((a) => joined(a).generation)).toEqual([2, 2]);
    expect(await rebalances()).toBe(2);
  });

  it('joins within the window share one generation; the leader alone gets every member', async () => {
    const [leader, follower] = await twoMembers();
    expect(leader.generation).toBe(1);
    expect(follower.generation).toBe(1);
    expect(leader.members.map((m) => m.memberId).sort()).toEqual([leader.memberId, follower.memberId].sort());
    expect(follower.members).toEqual([]);
    expect(leader.protocolName).toBe('range');
    expect(classic().describe('g').state).toBe('Stable');
  });

  it('a member that does not join again within the rebalance timeout is removed; the others go on without it', async () => {
    const [leader, follower] = await twoMembers(10_000);
    const third = classic().join(req(''));
    await until(() => classic().describe('g').state === 'PreparingRebalance', 5000, 'the rebalance');
    expect(await kafkaName(hb(leader))).toBe('REBALANCE_IN_PROGRESS');
    const rejoined = classic().join(req(leader.memberId, { sessionTimeoutMs: 10_000 }));
    // The follower's session (10 s) outlasts the rebalance timeout (3 s): the timeout is what removes it.
    await clock.advance(2999);
    expect(classic().describe('g').state).toBe('PreparingRebalance');
    await clock.advance(1);
    const [l2, t2] = [joined(await rejoined), joined(await third)];
    expect(l2.generation).toBe(2);
    expect(t2.generation).toBe(2);
    expect(classic().describe('g').members.map((m) => m.memberId).sort()).toEqual([l2.memberId, t2.memberId].sort());
    expect(await kafkaName(hb(follower))).toBe('UNKNOWN_MEMBER_ID');
  });

  it('a member whose session ends is removed and the group rebalances; an emptied group ends Empty at a new generation', async () => {
    const [leader, follower] = await twoMembers();
    await clock.advance(600);
    await hb(leader);
    await clock.advance(500); // the follower's session (1000 ms) has passed; the leader's has not
    await until(() => classic().describe('g').members.length === 1, 5000, 'the follower expired');
    expect(classic().describe('g').state).toBe('PreparingRebalance');
    const again = classic().join(req(leader.memberId));
    await clock.advance(WINDOW);
    expect(joined(await again).generation).toBe(2);
    expect(await kafkaName(hb(follower))).toBe('UNKNOWN_MEMBER_ID');
    // The leader leaves: Empty at once, at generation 3.
    expect(await classic().leave('g', [{ memberId: leader.memberId, instanceId: null }])).toEqual([null]);
    expect(classic().describe('g')).toMatchObject({ state: 'Empty', generation: 3, protocolType: 'consumer', members: [] });
  });

  it('a member that joins again with a shorter session timeout is expired by it, as Kafka holds a member to its latest JoinGroup', async () => {
    const [, follower] = await twoMembers(10_000);
    // Same protocols, Stable, not the leader: answered at once, without a rebalance.
    const again = joined(await classic().join(req(follower.memberId, { sessionTimeoutMs: 1000 })));
    expect(again.generation).toBe(1);
    const t0 = clock.now();
    expect(classic().describe('g').members.find((m) => m.memberId === follower.memberId)?.sessionTimeoutMs).toBe(1000);
    await clock.advanceTo(t0 + 999);
    expect(classic().describe('g').members).toHaveLength(2);
    await clock.advanceTo(t0 + 1000);
    await until(() => classic().describe('g').members.length === 1, 5000, 'the follower to expire at its new session timeout');
    expect(await kafkaName(hb(follower))).toBe('UNKNOWN_MEMBER_ID');
  });

  it('a leader that never assigns does not hold the group: members that did not sync are removed after the rebalance timeout', async () => {
    const first = classic().join(req('', { sessionTimeoutMs: 10_000 }));
    const second = classic().join(req('', { sessionTimeoutMs: 10_000 }));
    await clock.advance(WINDOW);
    const [a, b] = [joined(await first), joined(await second)];
    const follower = a.leader === a.memberId ? b : a;
    const waiting = classic().sync({ group: 'g', memberId: follower.memberId, instanceId: null, generation: 1, assignments: [], protocolType: null, protocolName: null });
    const outcome = kafkaName(waiting);
    await clock.advance(3000);
    expect(await outcome).toBe('REBALANCE_IN_PROGRESS');
    expect(classic().describe('g').members.map((m) => m.memberId)).toEqual([follower.memberId]);
  });

  it('a restarted coordinator keeps the generation and the members, and never hands a generation number out twice', async () => {
    const [leader, follower] = await twoMembers();
    // A rebalance completes (generation 2 is written before anyone hears of it), then the coordinator restarts.
    const l = classic().join(req(leader.memberId, { protocols: [{ name: 'range', metadata: Buffer.from('changed') }] }));
    const f = classic().join(req(follower.memberId));
    await clock.advance(WINDOW);
    expect([joined(await l).generation, joined(await f).generation]).toEqual([2, 2]);
    await c.close();
    c = await openCoordinators(dir, clock, { topics: { t: 2 } });
    const d = classic().describe('g');
    expect(d.generation).toBe(2);
    expect(d.members.map((m) => m.memberId).sort()).toEqual([leader.memberId, follower.memberId].sort());
    // It was completing a rebalance: the members must join again, and the next generation is 3.
    expect(d.state).toBe('PreparingRebalance');
    expect(await kafkaName(hb(leader, 2))).toBe('REBALANCE_IN_PROGRESS');
    const l3 = classic().join(req(leader.memberId));
    const f3 = classic().join(req(follower.memberId));
    await clock.advance(WINDOW);
    expect([joined(await l3).generation, joined(await f3).generation]).toEqual([3, 3]);
    // Commits are fenced by it: generation 2 is over.
    const commit = (generation: number) => classic().commit({ group: 'g', memberId: follower.memberId, instanceId: null, generation }, [{ topic: 't', entries: [{ partition: 0, offset: 0 }] }]);
    expect((await commit(2))[0]).toMatchObject({ kafkaName: 'ILLEGAL_GENERATION' });
  });

  it('a join whose generation the log refuses is answered NOT_COORDINATOR (retriable: the client finds the coordinator again), and the group is reloaded from the log', async () => {
    const [leader] = await twoMembers();
    const write = c.groupLog.writeGroup.bind(c.groupLog);
    c.groupLog.writeGroup = () => Promise.reject(new TributaryError('storage_error', { reason: 'disk full' }));
    const j = kafkaName(classic().join(req(leader.memberId, { protocols: [{ name: 'range', metadata: Buffer.from('x') }] })));
    await clock.advance(3000);
    c.groupLog.writeGroup = write;
    expect(await j).toBe('NOT_COORDINATOR');
    // Reloaded from the log: still generation 1, as written.
    await until(() => {
      try {
        return classic().describe('g').generation === 1 && classic().describe('g').state === 'Stable';
      } catch {
        return false;
      }
    }, 5000, 'the reload');
  });

  it('a join whose generation a full disk refuses (nothing written) is answered NOT_COORDINATOR, and the group is as last written at once', async () => {
    const [leader] = await twoMembers();
    const write = c.groupLog.writeGroup.bind(c.groupLog);
    c.groupLog.writeGroup = () => Promise.reject(new TributaryError('storage_error', { reason: 'write failed, the disk is full', outcome: 'not_written' }));
    let replays = 0;
    const replay = c.groupLog.replay.bind(c.groupLog);
    c.groupLog.replay = (p) => {
      replays++;
      return replay(p);
    };
    const j = kafkaName(classic().join(req(leader.memberId, { protocols: [{ name: 'range', metadata: Buffer.from('x') }] })));
    await clock.advance(3000);
    c.groupLog.writeGroup = write;
    expect(await j).toBe('NOT_COORDINATOR');
    // No reload: the group is back to its last written state at once.
    expect(classic().describe('g')).toMatchObject({ generation: 1, state: 'Stable' });
    expect(replays).toBe(0);
  });

  it('v4 joins get a member id first; one that never comes back does not hold a rebalance past its session', async () => {
    await twoMembers();
    const first = await classic().join(req('', { requireKnownMemberId: true }));
    expect('memberIdRequired' in first).toBe(true);
    // The pending id holds nothing yet; after its session it is forgotten and joining with it is refused.
    await clock.advance(1000);
    const late = kafkaName(classic().join(req((first as { memberIdRequired: string }).memberIdRequired)));
    expect(await late).toBe('UNKNOWN_MEMBER_ID');
  });

  it('the rebalance timeout still forces completion when a timer fired while the lease was unconfirmed', async () => {
    // Cluster-style ownership: the lease can be in doubt (canAct false), and timers must then wait, each its own.
    let lease = true;
    c.groups.enableOwnership(
      (partition) => new TributaryError('NOT_COORDINATOR', { partition }),
      () => true,
      () => lease,
      () => true,
    );
    for (let p = 0; p < 2; p++) await c.groups.loadPartition(p);
    const [leader, follower] = await twoMembers(60_000);
    const third = classic().join(req('', { sessionTimeoutMs: 60_000 }));
    await until(() => classic().describe('g').state === 'PreparingRebalance', 5000, 'the rebalance');
    const rejoined = classic().join(req(leader.memberId, { sessionTimeoutMs: 60_000 }));
    // Let the rejoin take the group's lock and park before the lease goes into doubt.
    for (let i = 0; i < 3; i++) await new Promise((r) => setImmediate(r));
    lease = false;
    await clock.advance(WINDOW + 1); // the join window's timer fires in doubt
    lease = true;
    // The follower heartbeats but never joins again: only the rebalance timeout (3 s) can end this.
    for (let t = 0; t < 4; t++) {
      await clock.advance(1000);
      await kafkaName(hb(follower));
    }
    const [l2, t2] = [joined(await rejoined), joined(await third)];
    expect([l2.generation, t2.generation]).toEqual([2, 2]);
    expect(await kafkaName(hb(follower))).toBe('UNKNOWN_MEMBER_ID');
  });

  it('a static member that misses a rebalance stays (KIP-345) and comes back to its assignment without another one', async () => {
    const s1 = classic().join(req('', { instanceId: 'static-1', sessionTimeoutMs: 60_000 }));
    const d1 = classic().join(req('', { sessionTimeoutMs: 60_000 }));
    await clock.advance(WINDOW);
    const [a, b] = [joined(await s1), joined(await d1)];
    const ids = { static: classic().describe('g').members.find((m) => m.instanceId === 'static-1')!.memberId };
    const dynamic = a.memberId === ids.static ? b : a;
    const sync = (m: JoinResult, assignments: Array<{ memberId: string; assignment: Buffer }> = []) =>
      classic().sync({ group: 'g', memberId: m.memberId, instanceId: m.memberId === ids.static ? 'static-1' : null, generation: m.generation, assignments, protocolType: null, protocolName: null });
    const lead = a.leader === a.memberId ? a : b;
    const other = lead === a ? b : a;
    const otherSync = sync(other);
    await sync(lead, [
      { memberId: ids.static, assignment: Buffer.from('S') },
      { memberId: dynamic.memberId, assignment: Buffer.from('D') },
    ]);
    await otherSync;
    // A new member: the dynamic one rejoins, the static one is away (its process restarting).
    const newcomer = classic().join(req('', { sessionTimeoutMs: 60_000 }));
    await until(() => classic().describe('g').state === 'PreparingRebalance', 5000, 'the rebalance');
    const dynAgain = classic().join(req(dynamic.memberId, { sessionTimeoutMs: 60_000 }));
    await clock.advance(3000);
    const [n2, d2] = [joined(await newcomer), joined(await dynAgain)];
    expect(n2.generation).toBe(2);
    // Still a member, and the leader (one that joined) was told of it.
    expect(classic().describe('g').members.map((m) => m.instanceId)).toContain('static-1');
    const newLeader = [n2, d2].find((m) => m.leader === m.memberId)!;
    expect(newLeader.members.map((m) => m.instanceId)).toContain('static-1');
    await sync(newLeader, [{ memberId: ids.static, assignment: Buffer.from('S2') }]);
    // It comes back under a new id: its assignment, no rebalance.
    const back = joined(await classic().join(req('', { instanceId: 'static-1', sessionTimeoutMs: 60_000 })));
    expect(back.generation).toBe(2);
    expect(classic().describe('g').state).toBe('Stable');
    expect(await classic().sync({ group: 'g', memberId: back.memberId, instanceId: 'static-1', generation: 2, assignments: [], protocolType: null, protocolName: null })).toEqual(Buffer.from('S2'));
  });

  it('a member id handed out (KIP-394) that leaves instead of joining does not hold the rebalance', async () => {
    const [leader, follower] = await twoMembers(60_000);
    const pending = await classic().join(req('', { requireKnownMemberId: true }));
    const id = (pending as { memberIdRequired: string }).memberIdRequired;
    const newcomer = classic().join(req(''));
    await until(() => classic().describe('g').state === 'PreparingRebalance', 5000, 'the rebalance');
    const rejoins = [leader, follower].map((m) => classic().join(req(m.memberId, { sessionTimeoutMs: 60_000 })));
    await clock.advance(WINDOW);
    // Everyone joined but the id handed out: the rebalance waits for it...
    expect(classic().describe('g').state).toBe('PreparingRebalance');
    expect(await classic().leave('g', [{ memberId: id, instanceId: null }])).toEqual([null]);
    // ...and completes once it left, well before the rebalance timeout.
    expect(joined(await newcomer).generation).toBe(2);
    expect((await Promise.all(rejoins)).map((r) => joined(r).generation)).toEqual([2, 2]);
  });

  it('one id, one kind: an idle Tributary group of the id is replaced by a Kafka group, and the other way round', async () => {
    const join = (member: string) => c.groups.join({ topic: 't', group: 'g', member, host: '127.0.0.1' });
    const members = () => (c.groups.status('g') as { members: unknown[] }).members.length;
    const tj = join('native-1');
    await until(() => {
      try {
        return members() === 1;
      } catch {
        return false;
      }
    }, 5000, 'the Tributary member registered');
    await clock.advance(WINDOW);
    const view = await tj;
    await c.groups.leave({ topic: 't', group: 'g', member: view.memberId });
    // The leave's join window is open: the id is still in use.
    expect(await kafkaName(classic().join(req('')))).toBe('INCONSISTENT_GROUP_PROTOCOL');
    await clock.advance(WINDOW);
    await until(() => (c.groups.status('g') as { state: string }).state === 'Empty', 5000, 'the Tributary group empty');
    const k = classic().join(req(''));
    await until(() => classic().describe('g').state === 'PreparingRebalance', 5000, 'the Kafka join parked');
    await clock.advance(WINDOW);
    joined(await k);
    expect((c.groups.status('g') as { kind?: string }).kind).toBe('kafka');
    // In use by Kafka members: refused on the main port.
    await expect(join('native-2')).rejects.toThrow(/Kafka consumer group of this id is in use/);
  });

  it('a main-port JOIN that is refused leaves an idle Kafka group of the id as it was', async () => {
    const [leader, follower] = await twoMembers();
    expect(await classic().leave('g', [leader, follower].map((m) => ({ memberId: m.memberId, instanceId: null })))).toEqual([null, null]);
    const before = classic().describe('g');
    expect(before).toMatchObject({ state: 'Empty', protocolType: 'consumer' });
    // A member id nobody has, with a generation: member_not_found, and nothing else happens.
    const ghost = c.groups.join({ topic: 't', group: 'g', member: 'ghost-1', generation: 3, host: '127.0.0.1' });
    await expect(ghost).rejects.toMatchObject({ code: 'member_not_found' });
    expect(classic().describe('g')).toEqual(before);
    expect((c.groups.status('g') as { kind?: string }).kind).toBe('kafka');
  });

  it('a Kafka join that is refused, or only told its member id, leaves an idle Tributary group of the id as it was', async () => {
    const tj = c.groups.join({ topic: 't', group: 'g', member: 'native-1', host: '127.0.0.1', assignor: 'sticky' });
    await until(() => {
      try {
        return (c.groups.status('g') as { members: unknown[] }).members.length === 1;
      } catch {
        return false;
      }
    }, 5000, 'the Tributary member registered');
    await clock.advance(WINDOW);
    await c.groups.leave({ topic: 't', group: 'g', member: (await tj).memberId });
    await clock.advance(WINDOW);
    await until(() => (c.groups.status('g') as { state: string }).state === 'Empty', 5000, 'the Tributary group empty');
    const before = c.groups.status('g') as { generation: number; assignor: string };
    expect(before).toMatchObject({ generation: 2, assignor: 'sticky' });
    // A join naming a member id nobody has: UNKNOWN_MEMBER_ID, and nothing else happens.
    expect(await kafkaName(classic().join(req('bogus')))).toBe('UNKNOWN_MEMBER_ID');
    // A v4 join told its member id, which never comes back.
    expect(await classic().join(req('', { requireKnownMemberId: true }))).toHaveProperty('memberIdRequired');
    await clock.advance(1000);
    for (const status of [c.groups.status('g') as { kind?: string; generation: number; assignor: string }]) {
      expect(status.kind).toBeUndefined();
      expect(status).toMatchObject({ generation: 2, assignor: 'sticky' });
    }
    // The next Tributary join goes on from its generation.
    const again = c.groups.join({ topic: 't', group: 'g', member: 'native-2', host: '127.0.0.1' });
    await until(() => (c.groups.status('g') as { members: unknown[] }).members.length === 1, 5000, 'the second member registered');
    await clock.advance(WINDOW);
    expect((await again).generation).toBe(3);
  });

  it('a client id of any length makes a member id that stays short; an instance id that names no static member is UNKNOWN_MEMBER_ID', async () => {
    const long = 'x'.repeat(32_000);
    const j = classic().join(req('', { clientId: long }));
    await clock.advance(WINDOW);
    const m = joined(await j);
    expect(m.memberId.length).toBeLessThanOrEqual(255 + 1 + 36);
    expect(m.memberId.startsWith(`${'x'.repeat(255)}-`)).toBe(true);
    await classic().sync({ group: 'g', memberId: m.memberId, instanceId: null, generation: 1, assignments: [], protocolType: null, protocolName: null });
    expect(await kafkaName(hb(m))).toBe('NONE');
    expect(await kafkaName(classic().heartbeat({ group: 'g', memberId: m.memberId, instanceId: 'not-a-static-member', generation: 1 }))).toBe('UNKNOWN_MEMBER_ID');
  });

  it('its partition moving away mid-rebalance answers the waiting joins NOT_COORDINATOR; taken back, the group rebalances from its log', async () => {
    c.groups.enableOwnership(
      (partition) => new TributaryError('NOT_COORDINATOR', { partition }),
      () => true,
      () => true,
      () => true,
    );
    for (let p = 0; p < 2; p++) await c.groups.loadPartition(p);
    const [leader, follower] = await twoMembers(60_000);
    const newcomer = kafkaName(classic().join(req('', { sessionTimeoutMs: 60_000 })));
    await until(() => classic().describe('g').state === 'PreparingRebalance', 5000, 'the rebalance');
    const partition = c.groups.partitionFor('g');
    c.groups.unloadPartition(partition);
    expect(await newcomer).toBe('NOT_COORDINATOR');
    expect(await kafkaName(hb(leader))).toBe('NOT_COORDINATOR');
    // No timer of the dropped group acts: past its rebalance timeout nothing is written for it.
    await clock.advance(5000);
    await c.groups.loadPartition(partition);
    // From the log: generation 1, both members (the newcomer never got an answer, so it never joined).
    const d = classic().describe('g');
    expect(d.generation).toBe(1);
    expect(d.members.map((m) => m.memberId).sort()).toEqual([leader.memberId, follower.memberId].sort());
    const rejoins = [leader, follower].map((m) => classic().join(req(m.memberId, { sessionTimeoutMs: 60_000 })));
    await until(() => classic().describe('g').state === 'PreparingRebalance', 5000, 'a rebalance after the reload');
    await clock.advance(WINDOW);
    expect((await Promise.all(rejoins)).map((r) => joined(r).generation)).toEqual([2, 2]);
  });

  it('a group that only handed out member ids is forgotten with them', async () => {
    const first = await classic().join(req('', { group: 'probe', requireKnownMemberId: true }));
    expect('memberIdRequired' in first).toBe(true);
    await clock.advance(1000);
    await until(() => classic().describe('probe').state === 'Dead', 5000, 'the probe group forgotten');
    expect(classic().list().map((x) => x.groupId)).not.toContain('probe');
  });
});

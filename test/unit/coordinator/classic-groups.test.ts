/**
 * Kafka classic-protocol groups in the group coordinator (coordinator/classic-*.ts) on a fake clock: the
 * join window, a member that does not rejoin within the rebalance timeout, session expiry, a leader that
 * never assigns, a restart in the middle of a group's life (generations never handed out twice), and a
 * refused log write answered with a retriable error. Real partitions hold the log; no timer runs on real time.
 */
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { ClassicJoinAnswer, ClassicJoinRequest } from 'tributary-broker/coordinator/classic-groups.js';
import type { JoinResult } from 'tributary-broker/coordinator/classic-group.js';
import { TributaryError } from 'tributary-protocol/errors.js';
import { type Coordinators, GROUP_CONFIG, openCoordinators } from '../../helpers/coordinators.js';
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

function req(memberId: string, extra: Partial<ClassicJoinRequest> = {}): ClassicJoinRequest {
  return {
    group: 'g',
    memberId,
    instanceId: null,
    clientId: 'cli',
    clientHost: '/127.0.0.1',
    sessionTimeoutMs: 1000,
    rebalanceTimeoutMs: 3000,
    protocolType: 'consumer',
    protocols: [{ name: 'range', metadata: Buffer.from('m') }],
    requireKnownMemberId: false,
    ...extra,
  };
}

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

  it('v4 joins get a member id first; one that never comes back does not hold a rebalance past its session', async () => {
    await twoMembers();
    const first = await classic().join(req('', { requireKnownMemberId: true }));
    expect('memberIdRequired' in first).toBe(true);
    // The pending id holds nothing yet; after its session it is forgotten and joining with it is refused.
    await clock.advance(1000);
    const late = kafkaName(classic().join(req((first as { memberIdRequired: string }).memberIdRequired)));
    expect(await late).toBe('UNKNOWN_MEMBER_ID');
  });
});

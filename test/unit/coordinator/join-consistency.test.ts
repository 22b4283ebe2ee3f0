/**
 * What a JOIN_GROUP may change of a group and of its member (docs/protocol.md, "Consumer groups"): a group
 * with members keeps its assignor and protocol, and a member asking for others is refused with
 * inconsistent_group_protocol, changing nothing; a member's rejoin sets its session and rebalance timeouts
 * to the ones it sends, and its expiry follows them. On a fake clock, as group-coordinator.test.ts.
 */
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { GroupCoordinator, JoinRequest, MemberView } from 'tributary-broker/coordinator/group-coordinator.js';
import { GROUP_CONFIG, memberIdsOf, openCoordinators, type Coordinators } from '../../helpers/coordinators.js';
import { FakeClock } from '../../helpers/fake-clock.js';
import { expectError, removeDir, tempDir, until } from '../../helpers/util.js';

const TOPIC = 't';
const WINDOW = GROUP_CONFIG.joinWindowMs;

interface Status {
  state: string;
  generation: number;
  assignor: string;
  protocol: string;
  members: Array<{ member_id: string; session_timeout_ms: number }>;
  history: unknown[];
}

let dir: string;
let clock: FakeClock;
let c: Coordinators;
let gc: GroupCoordinator;

beforeEach(async () => {
  dir = await tempDir('trib-join-consistency-');
  clock = new FakeClock();
  c = await openCoordinators(dir, clock, { topics: { [TOPIC]: 4 } });
  gc = c.groups;
});

afterEach(async () => {
  await c.close();
  await removeDir(dir);
});

const status = (group: string) => gc.status(group) as unknown as Status;
const memberIds = (group: string) => memberIdsOf(gc, group);
const joinReq = (member: string, extra: Partial<JoinRequest> = {}): JoinRequest => ({ topic: TOPIC, group: 'g', member, host: '127.0.0.1', ...extra });
const sync = (v: MemberView) => gc.sync({ topic: TOPIC, group: 'g', member: v.memberId, generation: v.generation });

/** A fresh member, joined and synced: its JOIN waits for the window, which the clock closes. */
async function joinAndSync(req: JoinRequest): Promise<MemberView> {
  const before = memberIds('g').length;
  const view = gc.join(req);
  await until(() => memberIds('g').length === before + 1, 5000, 'the join to be registered');
  await clock.advance(WINDOW);
  return sync(await view);
}

/** GROUP_STATUS with its clock-dependent fields left out. */
function snapshot(): unknown {
  const s = gc.status('g') as unknown as Record<string, unknown> & { members: Array<Record<string, unknown>> };
  return { ...s, members: s.members.map(({ last_heartbeat: _a, last_heartbeat_ms_ago: _b, ...m }) => m) };
}

describe('JOIN_GROUP consistency with the group', () => {
  it('a join asking for another assignor or protocol than the group has is refused and changes nothing', async () => {
    const a = await joinAndSync(joinReq('a', { assignor: 'roundrobin' }));
    expect(status('g')).toMatchObject({ state: 'Stable', generation: 1, assignor: 'roundrobin', protocol: 'server' });
    const before = snapshot();

    const refusals: Array<[JoinRequest, Record<string, string>]> = [
      [joinReq('b', { assignor: 'sticky' }), { group: 'g', assignor: 'roundrobin', requested: 'sticky' }],
      [joinReq('b', { protocol: 'client' }), { group: 'g', protocol: 'server', requested: 'client' }],
      [joinReq('b', { assignor: 'roundrobin', protocol: 'client' }), { group: 'g', protocol: 'server', requested: 'client' }],
      // The member itself, rejoining: the group's assignor stays the one its other members expect.
      [joinReq(a.memberId, { generation: a.generation, assignor: 'range' }), { group: 'g', assignor: 'roundrobin', requested: 'range' }],
    ];
    for (const [req, fields] of refusals) {
      const join = gc.join(req);
      let answered = false;
      join.then(
        () => (answered = true),
        () => (answered = true),
      );
      // A join taken waits for the window (which this clock does not close): its member shows at once.
      await until(() => answered || memberIds('g').length !== 1, 5000, 'the join to be answered or registered');
      // No member added, no rebalance started, nothing rewritten.
      expect(snapshot(), JSON.stringify(req)).toEqual(before);
      expect(gc.scheduler.has('window:g')).toBe(false);
      await expectError(join, 'inconsistent_group_protocol', fields);
    }

    // The group's own assignor, or none named, is accepted.
    const b = await joinAndSync(joinReq('b', { assignor: 'roundrobin' }));
    const d = await joinAndSync(joinReq('d'));
    expect([b.generation, d.generation]).toEqual([2, 3]);
    expect(status('g')).toMatchObject({ assignor: 'roundrobin', protocol: 'server' });
  });

  it('a group without members takes the assignor and protocol of the next member to join', async () => {
    const a = await joinAndSync(joinReq('a', { assignor: 'roundrobin' }));
    await gc.leave({ topic: TOPIC, group: 'g', member: a.memberId });
    await clock.advance(WINDOW);
    await until(() => status('g').state === 'Empty', 5000, 'the group to be empty');
    const b = gc.join(joinReq('b', { assignor: 'sticky', protocol: 'client' }));
    await until(() => memberIds('g').length === 1, 5000, 'the join to be registered');
    await clock.advance(WINDOW);
    expect((await b).protocol).toBe('client');
    expect(status('g')).toMatchObject({ generation: 3, assignor: 'sticky', protocol: 'client' });
  });
});

describe('a rejoining member takes the timeouts of its latest JOIN', () => {
  it('a shorter session timeout sent with a rejoin expires the member by it', async () => {
    const a = await joinAndSync(joinReq('a', { sessionTimeoutMs: 10_000 }));
    const j = await gc.join(joinReq(a.memberId, { generation: a.generation, sessionTimeoutMs: 1000 }));
    await sync(j);
    const t0 = clock.now(); // its last request
    expect(status('g').members.map((m) => m.session_timeout_ms)).toEqual([1000]);

    await clock.advanceTo(t0 + 999);
    expect(memberIds('g')).toEqual([a.memberId]);
    await clock.advanceTo(t0 + 1000);
    await until(() => memberIds('g').length === 0, 5000, 'the member to expire at its new session timeout');
  });

  it('a rejoin that names no timeouts keeps the member’s', async () => {
    const a = await joinAndSync(joinReq('a', { sessionTimeoutMs: 1000 }));
    await sync(await gc.join(joinReq(a.memberId, { generation: a.generation })));
    expect(status('g').members.map((m) => m.session_timeout_ms)).toEqual([1000]);
  });

  it('a shorter rebalance timeout sent with a rejoin removes the member that does not sync by it', async () => {
    const a = await joinAndSync(joinReq('a', { sessionTimeoutMs: 60_000, rebalanceTimeoutMs: 30_000 }));
    await gc.join(joinReq(a.memberId, { generation: a.generation, rebalanceTimeoutMs: 2000 }));
    const t0 = clock.now();
    // Joined but not synced: the rebalance timeout runs from the JOIN.
    await clock.advanceTo(t0 + 1999);
    expect(memberIds('g')).toEqual([a.memberId]);
    await clock.advanceTo(t0 + 2000);
    await until(() => memberIds('g').length === 0, 5000, 'the member to be removed at its new rebalance timeout');
  });
});

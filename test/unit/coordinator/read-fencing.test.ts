/**
 * Fenced reads on a fake clock: the coordinator's read check is its commit check (member, its own
 * generation, ownership, resets, static fencing), its watchers hear of every change that moves a
 * partition, and a cluster leader's cached copy of a member's standing (MemberLeases) is never trusted
 * past its lease nor past the member's session deadline as the coordinator reported it.
 */
import { describe, expect, it } from 'vitest';
import type { JoinRequest, MemberView } from 'tributary-broker/coordinator/group-coordinator.js';
import { LEASE_MS, MemberLeases } from 'tributary-broker/cluster/member-leases.js';
import { GROUP_CONFIG, joinAlone as joinAloneAt, useCoordinators } from '../../helpers/coordinators.js';
import { expectError, until } from '../../helpers/util.js';

const TOPIC = 't';
const WINDOW = GROUP_CONFIG.joinWindowMs;

const f = useCoordinators('trib-read-fence-', { [TOPIC]: 4 });

const joinReq = (member: string, extra: Partial<JoinRequest> = {}): JoinRequest => ({ topic: TOPIC, group: 'g', member, host: '127.0.0.1', ...extra });
const sync = (v: MemberView) => f.gc.sync({ topic: TOPIC, group: 'g', member: v.memberId, generation: v.generation });
const read = (v: { memberId: string; generation: number }, partition: number) => () =>
  f.gc.checkRead({ group: 'g', topic: TOPIC, member: v.memberId, generation: v.generation, partition });
const members = () => (f.gc.status('g') as { members: Array<{ member_id: string }> }).members.map((m) => m.member_id);

function joinAlone(member: string, extra: Partial<JoinRequest> = {}): Promise<MemberView> {
  return joinAloneAt(f, joinReq(member, extra));
}

function codeOf(fn: () => void): string | undefined {
  try {
    fn();
    return undefined;
  } catch (err) {
    return (err as { code?: string }).code;
  }
}

describe('the coordinator’s read fence', () => {
  it('serves the owner at its own generation only; bad generations, other partitions and strangers are refused', async () => {
    const a = await joinAlone('a', { sessionTimeoutMs: 1000 });
    expect(a.assignments).toEqual([0, 1, 2, 3]);
    expect(codeOf(read(a, 2))).toBeUndefined();
    expect(codeOf(read({ ...a, generation: a.generation + 1 }, 2))).toBe('GEN_MISMATCH');
    expect(codeOf(read({ memberId: 'nobody', generation: a.generation }, 2))).toBe('member_not_found');
    expect(codeOf(() => f.gc.checkRead({ group: 'g', topic: 'other', member: a.memberId, generation: a.generation, partition: 0 }))).toBe('invalid_parameter');
    expect(codeOf(() => f.gc.checkRead({ group: 'nope', topic: TOPIC, member: a.memberId, generation: 1, partition: 0 }))).toBe('group_not_found');
  });

  it('a member that expires is refused from that moment, and its watcher hears of it then', async () => {
    const a = await joinAlone('a', { sessionTimeoutMs: 1000 });
    let changes = 0;
    const unwatch = f.gc.watchGroup('g', () => changes++);
    const t0 = f.clock.now();
    await f.clock.advanceTo(t0 + 999);
    expect(codeOf(read(a, 0))).toBeUndefined();
    expect(changes).toBe(0);
    await f.clock.advanceTo(t0 + 1000);
    await until(() => members().length === 0, 5000, 'a to expire');
    expect(changes).toBeGreaterThan(0);
    expect(codeOf(read(a, 0))).toBe('member_not_found');
    unwatch();
    const seen = changes;
    await joinAlone('b');
    expect(changes).toBe(seen); // unwatched: told nothing more
  });

  it('a member that has not rejoined keeps reading what it still owns, as it keeps committing; a partition it synced away is refused', async () => {
    const a = await joinAlone('a');
    let changes = 0;
    f.gc.watchGroup('g', () => changes++);
    // b joins: a new generation; a is told to rejoin but still owns everything until it syncs.
    const bJoin = f.gc.join(joinReq('b'));
    await until(() => f.gc.scheduler.has('window:g'), 5000, 'the join window');
    await f.clock.advance(WINDOW);
    const b = await bJoin;
    expect(b.generation).toBe(a.generation + 1);
    for (const p of [0, 1, 2, 3]) expect(codeOf(read(a, p))).toBeUndefined();
    expect(await f.gc.commit({ topic: TOPIC, group: 'g', member: a.memberId, generation: a.generation, entries: [{ partition: 0, offset: 1 }] })).toBe(1);
    // a rejoins: its old generation is refused now, the new one served for what it keeps
    const aj = await f.gc.join(joinReq(a.memberId, { generation: a.generation }));
    expect(codeOf(read(a, 0))).toBe('GEN_MISMATCH');
    const before = changes;
    const as = await sync(aj);
    expect(changes).toBeGreaterThan(before);
    const gave = [0, 1, 2, 3].filter((p) => !as.assignments.includes(p));
    expect(gave.length).toBe(2);
    for (const p of as.assignments) expect(codeOf(read(as, p))).toBeUndefined();
    for (const p of gave) expect(codeOf(read(as, p))).toBe('NOT_OWNER');
    // b takes them at its sync (it was told to rejoin when they became free)
    const bs = await f.gc.join(joinReq(b.memberId, { generation: b.generation })).then(sync);
    for (const p of gave) expect(codeOf(read(bs, p))).toBeUndefined();
  });

  it('a static member replaced by a new process of the same instance is fenced at once', async () => {
    const first = await joinAlone('s', { instance: 'inst-1' });
    let changes = 0;
    f.gc.watchGroup('g', () => changes++);
    const second = await sync(await f.gc.join(joinReq('s', { instance: 'inst-1' })));
    expect(changes).toBeGreaterThan(0);
    expect(codeOf(read(first, 0))).toBe('FENCED_INSTANCE_ID');
    expect(codeOf(read(second, 0))).toBeUndefined();
  });

  it('an offset reset of a live group refuses the reset partitions until the member synced again', async () => {
    const a = await joinAlone('a');
    let changes = 0;
    f.gc.watchGroup('g', () => changes++);
    await f.gc.resetOffsets({ group: 'g', topic: TOPIC, partition: 1, to: 'earliest' });
    expect(changes).toBeGreaterThan(0);
    expect(codeOf(read(a, 1))).toBe('REBALANCE_IN_PROGRESS');
    expect(codeOf(read(a, 0))).toBeUndefined();
  });
});

describe('MemberLeases (a cluster leader’s copy of a member’s standing)', () => {
  function leases(answers: string[]) {
    const clockMs = { t: 0 };
    const asked: string[] = [];
    const l = new MemberLeases(
      async (group, topic, member) => {
        asked.push(`${group}/${topic}/${member}`);
        const a = answers.shift();
        if (!a) throw new Error('no more answers');
        return a;
      },
      () => clockMs.t,
    );
    return { l, clockMs, asked };
  }
  const ok = (generation: number, owned: string, sessionLeftMs: number) =>
    `OK group=g member=m generation=${generation} group_generation=${generation} owned=${owned} reset=[] session_left_ms=${sessionLeftMs}`;

  it('asks once per lease, not per read, and again once the lease ran out', async () => {
    const { l, clockMs, asked } = leases([ok(3, '[0,2]', 10_000), ok(3, '[2]', 10_000)]);
    const first = await l.standing('g', 't', 'm', 3);
    expect(first.standing.owns(0)).toBe(true);
    expect(first.standing.owns(1)).toBe(false);
    expect(first.validForMs).toBe(LEASE_MS);
    clockMs.t = LEASE_MS - 1;
    expect((await l.standing('g', 't', 'm', 3)).standing.owns(0)).toBe(true);
    expect(asked).toHaveLength(1);
    clockMs.t = LEASE_MS;
    expect((await l.standing('g', 't', 'm', 3)).standing.owns(0)).toBe(false);
    expect(asked).toHaveLength(2);
  });

  it('never trusts a copy past the member’s session deadline the coordinator reported', async () => {
    const { l, clockMs, asked } = leases([ok(3, '[0]', 300), 'ERROR']);
    const v = await l.standing('g', 't', 'm', 3);
    expect(v.validForMs).toBe(300);
    clockMs.t = 300;
    await expect(l.standing('g', 't', 'm', 3)).rejects.toThrow();
    expect(asked).toHaveLength(2);
  });

  it('asks again when a read carries another generation than the copy, and fails closed on a due session', async () => {
    const { l, asked } = leases([ok(3, '[0]', 10_000), ok(4, '[0]', 10_000), ok(4, '[0]', 0)]);
    await l.standing('g', 't', 'm', 3);
    expect((await l.standing('g', 't', 'm', 4)).standing.generation).toBe(4);
    expect(asked).toHaveLength(2);
    await expectError(l.standing('g', 't', 'm', 5), 'COORDINATOR_NOT_AVAILABLE');
  });
});

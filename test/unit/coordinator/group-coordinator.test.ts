/**
 * The group coordinator's state machine on a fake clock: join windows, sync, session expiry, rebalance
 * timeouts, static members and commit fencing. Real partitions in a temporary directory hold its log;
 * no server, no socket, and no coordinator timer runs on real time.
 */
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { GroupCoordinator, JoinRequest, MemberView } from 'tributary-broker/coordinator/group-coordinator.js';
import { GROUP_CONFIG, memberIdsOf, openCoordinators, type Coordinators } from '../../helpers/coordinators.js';
import { FakeClock } from '../../helpers/fake-clock.js';
import { TributaryError } from 'tributary-protocol/errors.js';
import { expectError, rec, removeDir, tempDir, until } from '../../helpers/util.js';

const TOPIC = 't';
const PARTITIONS = 4;
const WINDOW = GROUP_CONFIG.joinWindowMs;

interface StatusMember {
  member_id: string;
  client_id: string;
  instance: string | null;
  generation: number;
  assignments: number[];
  needs_rejoin: boolean;
}

interface Status {
  state: string;
  generation: number;
  leader: string | null;
  members: StatusMember[];
  history: Array<{ generation: number; reasons: Array<{ cause: string; member: string; missedByMs?: number }>; moved?: number[] }>;
}

let dir: string;
let clock: FakeClock;
let c: Coordinators;
let gc: GroupCoordinator;

beforeEach(async () => {
  dir = await tempDir('trib-group-coord-');
  clock = new FakeClock();
  c = await openCoordinators(dir, clock, { topics: { [TOPIC]: PARTITIONS } });
  gc = c.groups;
  // Ten records per partition, so offsets up to 10 can be committed.
  for (const p of c.topics.get(TOPIC).partitions) await p.append(Array.from({ length: 10 }, (_, i) => rec(`r${i}`)));
});

afterEach(async () => {
  await c.close();
  await removeDir(dir);
});

const status = (group: string) => gc.status(group) as unknown as Status;
const memberIds = (group: string) => memberIdsOf(gc, group);

function joinReq(group: string, member: string, extra: Partial<JoinRequest> = {}): JoinRequest {
  return { topic: TOPIC, group, member, host: '127.0.0.1', ...extra };
}

/**
 * Fresh joins: they wait for the join window, which opens with the first of them and closes
 * `joinWindowMs` later on the clock. Answered together, with one generation.
 */
async function joinTogether(group: string, reqs: JoinRequest[]): Promise<MemberView[]> {
  const before = memberIds(group).length;
  const views = reqs.map((r) => gc.join(r));
  await until(() => memberIds(group).length === before + reqs.length, 5000, 'the joins to be registered');
  expect(gc.scheduler.has(`window:${group}`)).toBe(true);
  await clock.advance(WINDOW);
  return Promise.all(views);
}

const sync = (group: string, v: { memberId: string; generation: number }) => gc.sync({ topic: TOPIC, group, member: v.memberId, generation: v.generation });
const heartbeat = (group: string, v: { memberId: string; generation: number }) =>
  gc.heartbeat({ topic: TOPIC, group, member: v.memberId, generation: v.generation });
const commit = (group: string, v: { memberId: string; generation: number }, entries: Array<[number, number]>) =>
  gc.commit({ topic: TOPIC, group, member: v.memberId, generation: v.generation, entries: entries.map(([partition, offset]) => ({ partition, offset })) });

/** Rejoin with the member id and generation (the SDK's answer to REBALANCE_IN_PROGRESS), then sync. */
async function rejoinAndSync(group: string, v: MemberView): Promise<MemberView> {
  const j = await gc.join(joinReq(group, v.memberId, { generation: v.generation }));
  return sync(group, j);
}

describe('GroupCoordinator on a fake clock', () => {
  it('join: the window batches joins into one generation, answered when it closes; sync hands out the partitions', async () => {
    const a = gc.join(joinReq('g', 'alpha'));
    const b = gc.join(joinReq('g', 'beta'));
    let answered = false;
    void Promise.all([a, b]).then(() => {
      answered = true;
    });
    await until(() => memberIds('g').length === 2, 5000, 'both joins registered');

    // One tick short of the window: nothing decided yet.
    await clock.advance(WINDOW - 1);
    expect(answered).toBe(false);
    expect(status('g')).toMatchObject({ state: 'PreparingRebalance', generation: 0 });

    await clock.advance(1);
    const [va, vb] = await Promise.all([a, b]);
    expect([va.generation, vb.generation]).toEqual([1, 1]);
    expect(va.memberId).toMatch(/^alpha-[0-9a-f-]{36}$/);
    expect(vb.leader).toBe(va.leader);
    // Nobody owns anything yet, so each may take its whole target at once: disjoint, covering every partition.
    expect([...va.assignments, ...vb.assignments].sort()).toEqual([0, 1, 2, 3]);
    expect(status('g').state).toBe('CompletingRebalance');

    const sa = await sync('g', va);
    const sb = await sync('g', vb);
    expect(sa.assignments).toEqual(va.assignments);
    expect(sb.assignments).toEqual(vb.assignments);
    const s = status('g');
    expect(s).toMatchObject({ state: 'Stable', generation: 1 });
    expect(s.history).toHaveLength(1);
    expect(s.history[0]!.reasons.map((r) => r.cause)).toEqual(['join', 'join']);
    // The first generation gives every partition to a member: all of them moved.
    expect(s.history[0]!.moved).toEqual([0, 1, 2, 3]);
    expect(await heartbeat('g', sa)).toEqual({ generation: 1, memberId: va.memberId });
  });

  it("partitions added to the group's topic start a new generation that gives them out, noticed on a heartbeat", async () => {
    const [va, vb] = await joinTogether('g', [joinReq('g', 'a'), joinReq('g', 'b')]);
    let sa = await sync('g', va!);
    let sb = await sync('g', vb!);
    expect([...sa.assignments, ...sb.assignments].sort((x, y) => x - y)).toEqual([0, 1, 2, 3]);
    await c.topics.addPartitions(TOPIC, 6);
    await heartbeat('g', sa);
    await until(() => status('g').state === 'PreparingRebalance', 5000, 'a rebalance for the new partitions');
    await clock.advance(WINDOW);
    await until(() => status('g').generation === 2, 5000, 'generation 2');
    await expectError(heartbeat('g', sa), 'REBALANCE_IN_PROGRESS');
    sa = await rejoinAndSync('g', sa);
    sb = await rejoinAndSync('g', sb);
    // A partition moving from one to the other is handed over once released (incremental): its new owner
    // is told to rejoin on its next heartbeat.
    for (let round = 0; round < 3 && status('g').state !== 'Stable'; round++) {
      for (const v of [sa, sb]) {
        const rejoin = await heartbeat('g', v).then(
          () => false,
          (e: { code?: string }) => e.code === 'REBALANCE_IN_PROGRESS',
        );
        if (rejoin && v === sa) sa = await rejoinAndSync('g', sa);
        if (rejoin && v === sb) sb = await rejoinAndSync('g', sb);
      }
    }
    expect([...sa.assignments, ...sb.assignments].sort((x, y) => x - y)).toEqual([0, 1, 2, 3, 4, 5]);
    expect(status('g').history.at(-1)!.reasons).toEqual([{ cause: 'subscription', member: TOPIC }]);
    // Settled on the new count: heartbeats start nothing more.
    await heartbeat('g', sa);
    await clock.advance(WINDOW);
    expect(status('g')).toMatchObject({ state: 'Stable', generation: 2 });
  });

  it("heartbeat and leave name the group's own topic (the one the request was authorized for), else invalid_parameter", async () => {
    const [v] = await joinTogether('g', [joinReq('g', 'alpha')]);
    const sv = await sync('g', v!);
    // A principal allowed on another topic only: it may neither keep the member alive nor evict it.
    await expectError(gc.heartbeat({ topic: 'other', group: 'g', member: sv.memberId, generation: sv.generation }), 'invalid_parameter');
    await expectError(gc.leave({ topic: 'other', group: 'g', member: sv.memberId }), 'invalid_parameter');
    expect(memberIds('g')).toEqual([sv.memberId]);
    await heartbeat('g', sv);
  });

  it('heartbeat expiry: a member that stops heartbeating is removed exactly when its session passes, not before', async () => {
    const [live, quiet] = await joinTogether('g', [joinReq('g', 'live'), joinReq('g', 'quiet', { sessionTimeoutMs: 1000 })]);
    const sl = await sync('g', live!);
    const sq = await sync('g', quiet!);
    const t0 = clock.now(); // quiet's last request

    // Half a session later it heartbeats once more, then stops: its session now ends at t0 + 1500.
    await clock.advance(500);
    await heartbeat('g', sq);
    const deadline = t0 + 1500;

    // The expiry set at join time falls due first; the member heartbeated since, so it stays.
    await clock.advanceTo(t0 + 1000);
    expect(memberIds('g')).toContain(quiet!.memberId);
    await heartbeat('g', sl);
    await clock.advanceTo(deadline - 1);
    expect(memberIds('g')).toContain(quiet!.memberId);
    expect(status('g').state).toBe('Stable');

    await clock.advanceTo(deadline);
    await until(() => !memberIds('g').includes(quiet!.memberId), 5000, 'quiet to be removed');
    expect(memberIds('g')).toEqual([live!.memberId]);
    await expectError(heartbeat('g', sq), 'member_not_found');

    // The departure opens a window; when it closes the survivor is told to rejoin, and takes everything.
    await clock.advance(WINDOW);
    await until(() => status('g').generation === 2, 5000, 'generation 2');
    expect(status('g').history.at(-1)!.reasons).toEqual([{ cause: 'expired', member: quiet!.memberId, missedByMs: 0 }]);
    await expectError(heartbeat('g', sl), 'REBALANCE_IN_PROGRESS');
    const again = await rejoinAndSync('g', sl);
    expect(again).toMatchObject({ generation: 2, memberId: live!.memberId, assignments: [0, 1, 2, 3] });
    expect(status('g').state).toBe('Stable');
  });

  it('a long-poll heartbeat is woken by the expiry of another member, not by the time passing', async () => {
    const [live, quiet] = await joinTogether('g', [joinReq('g', 'live', { sessionTimeoutMs: 4000 }), joinReq('g', 'quiet', { sessionTimeoutMs: 1000 })]);
    const sl = await sync('g', live!);
    await sync('g', quiet!);
    const t0 = clock.now();
    let outcome: string | undefined;
    const hb = gc.heartbeat({ topic: TOPIC, group: 'g', member: sl.memberId, generation: sl.generation, waitMs: 2000 }).then(
      () => 'ok',
      (err: { code: string }) => err.code,
    );
    void hb.then((o) => {
      outcome = o;
    });
    await clock.advanceTo(t0 + 900);
    expect(outcome).toBeUndefined(); // still waiting
    // quiet expires at t0 + 970 (1000 ms after its join); the window that opens then closes 30 ms later
    // with a new generation, which wakes the long poll well before its 2000 ms.
    await clock.advanceTo(t0 + 1000 + WINDOW);
    expect(await hb).toBe('REBALANCE_IN_PROGRESS');
    expect(memberIds('g')).toEqual([live!.memberId]);
    expect(clock.now()).toBeLessThan(t0 + 2000);
  });

  it('rebalance timeout: a member told to rejoin that does not is removed when its rebalance timeout passes', async () => {
    const [a] = await joinTogether('g', [joinReq('g', 'slow', { sessionTimeoutMs: 10_000, rebalanceTimeoutMs: 2000 })]);
    const sa = await sync('g', a!);
    expect(sa.assignments).toEqual([0, 1, 2, 3]);

    // A second member joins: generation 2, and `slow` is told to rejoin when the window closes.
    const [b] = await joinTogether('g', [joinReq('g', 'fast')]);
    const notifiedAt = clock.now();
    expect(b!.generation).toBe(2);
    expect(status('g').members.find((m) => m.member_id === a!.memberId)!.needs_rejoin).toBe(true);
    const sb = await sync('g', b!); // nothing free for it yet: `slow` still owns its partitions
    expect(sb.assignments).toEqual([]);
    await expectError(heartbeat('g', sa), 'REBALANCE_IN_PROGRESS'); // alive, but not rejoining

    await clock.advanceTo(notifiedAt + 1999);
    expect(memberIds('g')).toContain(a!.memberId);
    await clock.advance(1);
    await until(() => !memberIds('g').includes(a!.memberId), 5000, 'slow to be removed');

    // Its partitions are free: the next generation gives them to `fast`.
    await clock.advance(WINDOW);
    await until(() => status('g').generation === 3, 5000, 'generation 3');
    expect(status('g').history.at(-1)!.reasons).toEqual([{ cause: 'rebalance_timeout', member: a!.memberId }]);
    await expectError(heartbeat('g', sb), 'REBALANCE_IN_PROGRESS');
    const again = await rejoinAndSync('g', sb);
    expect(again).toMatchObject({ generation: 3, assignments: [0, 1, 2, 3] });
  });

  it('a restarted coordinator gives every restored member a full session from the restart, not from its last heartbeat', async () => {
    const [live, quiet] = await joinTogether('g', [joinReq('g', 'live', { sessionTimeoutMs: 60_000 }), joinReq('g', 'quiet', { sessionTimeoutMs: 1000 })]);
    await sync('g', live!);
    await sync('g', quiet!);
    // quiet's session would end 100 ms from now; the coordinator goes down for longer than a session
    await clock.advance(900);
    await c.close();
    await clock.advance(5000);
    c = await openCoordinators(dir, clock, { topics: { [TOPIC]: PARTITIONS } });
    gc = c.groups;
    const restartedAt = clock.now();
    expect(memberIds('g').sort()).toEqual([live!.memberId, quiet!.memberId].sort());

    await clock.advanceTo(restartedAt + 999);
    expect(memberIds('g')).toContain(quiet!.memberId);
    await clock.advance(1);
    await until(() => !memberIds('g').includes(quiet!.memberId), 5000, 'quiet to be removed');
    await clock.advance(WINDOW);
    await until(() => status('g').history.at(-1)!.reasons[0]?.cause === 'expired', 5000, 'the expiry recorded');
    expect(status('g').history.at(-1)!.reasons).toEqual([{ cause: 'expired', member: quiet!.memberId, missedByMs: 0 }]);
    expect(memberIds('g')).toEqual([live!.memberId]);
  });

  it('static members: the same instance id replaces the member at once, keeps its partitions and fences the old id', async () => {
    const [plain, first] = await joinTogether('g', [joinReq('g', 'plain'), joinReq('g', 'static', { instance: 'inst-1', sessionTimeoutMs: 1000 })]);
    await sync('g', plain!);
    const s1 = await sync('g', first!);
    const owned = s1.assignments;
    expect(owned.length).toBe(2);
    const before = status('g');
    expect(before).toMatchObject({ state: 'Stable', generation: 1 });

    // The process restarts and joins fresh with the same instance id: answered without a window.
    await clock.advance(400);
    // The new process's own session timeout (3 s) applies, not the old one's (1 s).
    const replaced = await gc.join(joinReq('g', 'static', { instance: 'inst-1', sessionTimeoutMs: 3000 }));
    expect(replaced.memberId).not.toBe(first!.memberId);
    expect((gc.status('g') as { members: Array<{ instance: string | null; session_timeout_ms: number }> }).members.find((m) => m.instance === 'inst-1')!.session_timeout_ms).toBe(3000);
    expect(replaced).toMatchObject({ generation: 1, assignments: owned });
    expect(gc.scheduler.has('window:g')).toBe(false);
    const s2 = await sync('g', replaced);
    expect(s2.assignments).toEqual(owned);
    const after = status('g');
    expect(after).toMatchObject({ state: 'Stable', generation: 1 });
    expect(after.history).toEqual(before.history);
    expect(after.members.map((m) => [m.client_id, m.instance, m.assignments])).toEqual([
      ['plain', null, before.members.find((m) => m.client_id === 'plain')!.assignments],
      ['static', 'inst-1', owned],
    ]);

    // The old member id is fenced everywhere.
    await expectError(heartbeat('g', first!), 'FENCED_INSTANCE_ID');
    await expectError(commit('g', first!, [[owned[0]!, 1]]), 'FENCED_INSTANCE_ID');
    await expectError(gc.join(joinReq('g', first!.memberId, { generation: 1 })), 'FENCED_INSTANCE_ID');

    // The old id's session (ending at +1000) expires nothing; the new one has its own full session.
    await clock.advance(700);
    await heartbeat('g', s2);
    expect(memberIds('g')).toContain(replaced.memberId);
    expect(status('g').generation).toBe(1);
  });

  it('commit fencing: a stale generation is refused, ownership is checked, and offsets never go back', async () => {
    const [a] = await joinTogether('g', [joinReq('g', 'a')]);
    const sa = await sync('g', a!);
    expect(
      await commit('g', sa, [
        [0, 5],
        [1, 5],
        [2, 5],
        [3, 5],
      ]),
    ).toBe(4);
    expect(gc.fetchOffset('g', TOPIC, 0)).toEqual({ offset: 5, committed: true });

    await expectError(commit('g', sa, [[0, 3]]), 'offset_regression', { partition: '0', current: '5', requested: '3' });
    expect(await commit('g', sa, [[0, 5]])).toBe(1); // the same offset again is a no-op
    await expectError(commit('g', { memberId: sa.memberId, generation: 2 }, [[0, 6]]), 'GEN_MISMATCH', { current: '1', requested: '2' });
    await expectError(commit('g', sa, [[0, 11]]), 'invalid_parameter'); // past the log end
    await expectError(commit('g', { memberId: 'nobody', generation: 1 }, [[0, 6]]), 'member_not_found');

    // A second member: generation 2. Until it rejoins, `a` keeps committing under its own generation.
    const [b] = await joinTogether('g', [joinReq('g', 'b')]);
    expect(b!.generation).toBe(2);
    expect(
      await commit('g', sa, [
        [0, 6],
        [1, 6],
        [2, 6],
        [3, 6],
      ]),
    ).toBe(4);

    // Once it rejoined, its old generation is stale.
    const ja = await gc.join(joinReq('g', sa.memberId, { generation: 1 }));
    expect(ja.generation).toBe(2);
    await expectError(commit('g', sa, [[0, 7]]), 'GEN_MISMATCH', { current: '2', requested: '1' });
    const sa2 = await sync('g', ja);
    const moved = [0, 1, 2, 3].filter((p) => !sa2.assignments.includes(p));
    expect(moved.length).toBe(2);
    await expectError(commit('g', sa2, [[moved[0]!, 8]]), 'NOT_OWNER', { partition: String(moved[0]) });

    // `b` (joined, not synced yet) takes the released partitions at its SYNC, and cannot commit below
    // what `a` committed for them.
    const sb = await sync('g', b!);
    expect(sb.assignments).toEqual(moved);
    await expectError(commit('g', sb, [[moved[0]!, 4]]), 'offset_regression', { current: '6', requested: '4' });
    expect(await commit('g', sb, [[moved[0]!, 9]])).toBe(1);

    // A batch is all or nothing: one partition not owned refuses all of it.
    await expectError(
      commit('g', sb, [
        [moved[1]!, 9],
        [sa2.assignments[0]!, 9],
      ]),
      'NOT_OWNER',
    );
    expect(gc.fetchOffset('g', TOPIC, moved[1]!)).toEqual({ offset: 6, committed: true });
    expect(gc.fetchOffset('g', TOPIC, moved[0]!)).toEqual({ offset: 9, committed: true });
    for (const p of sa2.assignments) expect(gc.fetchOffset('g', TOPIC, p)).toEqual({ offset: 6, committed: true });
  });

  it("a __consumer_offsets partition given up and led again holds none of its groups' pending transaction offsets from before", async () => {
    gc.enableOwnership(
      (p) => new TributaryError('NOT_COORDINATOR', { partition: p }),
      () => true,
    );
    for (let p = 0; p < 2; p++) await gc.loadPartition(p);
    const [v] = await joinTogether('g-tx', [joinReq('g-tx', 'solo')]);
    const sv = await sync('g-tx', v!);
    await gc.stageTxnOffsets('tx-1', { topic: TOPIC, group: 'g-tx', member: sv.memberId, generation: sv.generation, entries: [{ partition: 0, offset: 5 }] });
    expect(() => gc.fetchOffset('g-tx', TOPIC, 0)).toThrow(expect.objectContaining({ code: 'UNSTABLE_OFFSET_COMMIT' }));

    // The partition moves away; the transaction ends at the group's new coordinator (this one never
    // hears of it); the partition comes back.
    const op = gc.partitionFor('g-tx');
    gc.unloadPartition(op);
    await gc.loadPartition(op);
    // Not held behind a transaction this broker cannot see end: the offset is answered.
    expect(gc.fetchOffset('g-tx', TOPIC, 0)).toEqual({ offset: 0, committed: false });
  });
  it('a request queued behind a refused group write hears COORDINATOR_LOADING while the partition reloads, never group_not_found', async () => {
    gc.enableOwnership(
      (p) => new TributaryError('NOT_COORDINATOR', { partition: p }),
      () => true,
      () => true,
      () => true,
    );
    for (let p = 0; p < 2; p++) await gc.loadPartition(p);
    const [va, vb] = await joinTogether('g', [joinReq('g', 'a'), joinReq('g', 'b')]);
    const sa = await sync('g', va!);
    await sync('g', vb!);

    // The next group write is held, then refused (a write etcd or the replicas refused: chaos seed 343502639).
    const write = c.groupLog.writeGroup.bind(c.groupLog);
    let refuse!: () => void;
    let held = false;
    c.groupLog.writeGroup = (snapshot) => {
      if (held) return write(snapshot);
      held = true;
      return new Promise((_, reject) => {
        refuse = () => reject(new TributaryError('NOT_LEADER', { reason: 'test: the write was refused' }));
      });
    };
    // The reload that follows is held too, so requests are answered while the partition is loading.
    const replay = c.groupLog.replay.bind(c.groupLog);
    let openReplay!: () => void;
    const replayGate = new Promise<void>((resolve) => {
      openReplay = resolve;
    });
    c.groupLog.replay = async (partition) => {
      await replayGate;
      return replay(partition);
    };
    const leave = gc.leave({ topic: TOPIC, group: 'g', member: vb!.memberId });
    await until(() => held, 5000, 'the leave to write the group');
    // Queued on the group's lock behind the held write; the ownership check before the lock has passed.
    const leaveRefused = expectError(leave, 'NOT_LEADER');
    const queued = expectError(commit('g', sa, [[sa.assignments[0]!, 3]]), 'COORDINATOR_LOADING');
    const heartbeatWaiting = expectError(
      gc.heartbeat({ topic: TOPIC, group: 'g', member: sa.memberId, generation: sa.generation, waitMs: 1000 }),
      'COORDINATOR_LOADING',
    );
    refuse();
    await leaveRefused;
    await queued;
    // The waiting heartbeat is answered when its wait ends, still during the reload.
    await clock.advance(1000);
    await heartbeatWaiting;
    openReplay();
    // Reloaded from the log, which has no trace of the refused leave: b is still a member, and commits work.
    await until(() => gc.coordinates('g'), 5000, 'the partition to be reloaded');
    expect(memberIds('g')).toHaveLength(2);
    await expect(commit('g', sa, [[sa.assignments[0]!, 3]])).resolves.toBe(1);
  });
  it('joins waiting for a window whose group write is refused hear COORDINATOR_LOADING at once, not at their rebalance timeout', async () => {
    const write = c.groupLog.writeGroup.bind(c.groupLog);
    let refused = 0;
    c.groupLog.writeGroup = (snapshot) => {
      if (refused > 0) return write(snapshot);
      refused++;
      return Promise.reject(new TributaryError('storage_error', { reason: 'test: the write was refused' }));
    };
    // The reload is held, so the joins are answered while the partition is loading.
    const replay = c.groupLog.replay.bind(c.groupLog);
    let openReplay!: () => void;
    const replayGate = new Promise<void>((resolve) => {
      openReplay = resolve;
    });
    let replayed = false;
    c.groupLog.replay = async (partition) => {
      await replayGate;
      const r = await replay(partition);
      replayed = true;
      return r;
    };
    const joins = [gc.join(joinReq('g', 'a')), gc.join(joinReq('g', 'b'))].map((j) => expectError(j, 'COORDINATOR_LOADING'));
    await until(() => memberIds('g').length === 2, 5000, 'the joins to be registered');
    // Only the window passes on the clock, far less than the rebalance timeout.
    await clock.advance(WINDOW);
    await Promise.all(joins);
    expect(refused).toBe(1);
    openReplay();
    await until(() => replayed, 5000, 'the partition to be reloaded');
    // The refused generation left no trace: a new join forms the group.
    const [v] = await joinTogether('g', [joinReq('g', 'c')]);
    expect(v!.generation).toBe(1);
  });
  it('a reset on a live group: reset partitions leave their owners, old reads cannot overwrite them, a new generation names them until the member syncs', async () => {
    const [va, vb] = await joinTogether('g', [joinReq('g', 'a'), joinReq('g', 'b')]);
    const sa = await sync('g', va!);
    const sb = await sync('g', vb!);
    const all = [...sa.assignments, ...sb.assignments].map((p): [number, number] => [p, 6]);
    await commit(
      'g',
      sa,
      all.filter(([p]) => sa.assignments.includes(p)),
    );
    await commit(
      'g',
      sb,
      all.filter(([p]) => sb.assignments.includes(p)),
    );
    const pa = sa.assignments[0]!;

    expect(await gc.resetOffsets({ group: 'g', topic: TOPIC, partition: pa, to: 'offset', value: 2, dryRun: true })).toEqual([{ partition: pa, offset: 2 }]);
    expect(gc.fetchOffset('g', TOPIC, pa)).toEqual({ offset: 6, committed: true });
    expect(status('g').state).toBe('Stable');

    expect(await gc.resetOffsets({ group: 'g', topic: TOPIC, partition: pa, to: 'offset', value: 2, by: 'ops' })).toEqual([{ partition: pa, offset: 2 }]);
    expect(gc.fetchOffset('g', TOPIC, pa)).toEqual({ offset: 2, committed: true });
    // The old owner's commit of what it read before is refused; b's partitions are untouched.
    await expectError(commit('g', sa, [[pa, 7]]), 'REBALANCE_IN_PROGRESS');
    expect(gc.fetchOffset('g', TOPIC, pa)).toEqual({ offset: 2, committed: true });
    await expect(commit('g', sb, [[sb.assignments[0]!, 7]])).resolves.toBe(1);

    // The join window closes: one new generation, caused by the reset, and both are told to rejoin.
    await clock.advance(WINDOW);
    const st = status('g');
    expect(st.generation).toBe(sa.generation + 1);
    expect(st.history.at(-1)!.reasons).toEqual([{ cause: 'offsets_reset', member: 'ops' }]);
    await expectError(heartbeat('g', sa), 'REBALANCE_IN_PROGRESS');

    // A restart in between keeps the fence (the snapshot holds it).
    await c.close();
    c = await openCoordinators(dir, clock, { topics: { [TOPIC]: PARTITIONS } });
    gc = c.groups;
    await expectError(commit('g', sa, [[pa, 7]]), 'REBALANCE_IN_PROGRESS');

    const ja = await gc.join(joinReq('g', sa.memberId, { generation: sa.generation }));
    expect(ja.reset).toEqual([pa]);
    const jb = await gc.join(joinReq('g', sb.memberId, { generation: sb.generation }));
    expect(jb.reset).toEqual([pa]);
    const sa2 = await sync('g', ja);
    await sync('g', jb);
    expect(sa2.assignments).toContain(pa);
    expect(gc.fetchOffset('g', TOPIC, pa)).toEqual({ offset: 2, committed: true });
    await expect(commit('g', sa2, [[pa, 3]])).resolves.toBe(1);
    // Synced past the reset: later joins no longer name it.
    expect((await gc.join(joinReq('g', sa2.memberId, { generation: sa2.generation }))).reset).toBeUndefined();
  });
});

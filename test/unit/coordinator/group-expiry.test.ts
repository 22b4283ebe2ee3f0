/**
 * Offsets retention (coordinator/group-expiry.ts) on a fake clock: a group without members is deleted with
 * its committed offsets `offsetsRetentionMs` after it became empty or last committed, as DELETE_GROUP
 * deletes it; a join or a commit meanwhile starts the wait over; a group with members never expires; Kafka
 * classic groups and groups known only by offsets alike; and a restart neither brings the offsets back nor
 * starts the wait from zero. Real partitions hold the log; no coordinator timer runs on real time.
 */
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { JoinRequest, MemberView } from 'tributary-broker/coordinator/group-coordinator.js';
import type { JoinResult } from 'tributary-broker/coordinator/classic-group.js';
import { MemoryOffsetStore } from 'tributary-broker/coordinator/memory-offset-store.js';
import type { OffsetStore } from 'tributary-broker/coordinator/offset-store.js';
import { TributaryError } from 'tributary-protocol/errors.js';
import { type Coordinators, classicJoinRequest, GROUP_CONFIG, openCoordinators } from '../../helpers/coordinators.js';
import { FakeClock } from '../../helpers/fake-clock.js';
import { rec, removeDir, tempDir, thrownCode, until } from '../../helpers/util.js';

const TOPIC = 't';
const WINDOW = GROUP_CONFIG.joinWindowMs;
const RETENTION = 60_000;
const SESSION = 10_000;

let dir: string;
let clock: FakeClock;
let c: Coordinators;
let memoryStore: MemoryOffsetStore | undefined;

const open = (offsetStore?: () => OffsetStore) =>
  openCoordinators(dir, clock, { topics: { [TOPIC]: 2 }, group: { offsetsRetentionMs: RETENTION }, ...(offsetStore ? { offsetStore } : {}) });

beforeEach(async () => {
  dir = await tempDir('trib-group-expiry-');
  clock = new FakeClock();
  memoryStore = undefined;
  c = await open();
  for (const p of c.topics.get(TOPIC).partitions) await p.append(Array.from({ length: 10 }, (_, i) => rec(`r${i}`)));
});

afterEach(async () => {
  await c.close();
  await removeDir(dir);
});

const gc = () => c.groups;
const listed = (group: string) => gc().listGroups().includes(group);
const expiredTotal = async () => (await c.groupRegistry.getSingleMetric('tributary_groups_expired_total')!.get()).values[0]?.value ?? 0;

/** Waits for the expiry the fake clock just made due: it deletes under the group's lock, with real log writes. */
const gone = (group: string) => until(() => !listed(group), 5000, `group ${group} to expire`);

/** A restart of both coordinators on the same data directory and the same clock. */
async function restart(): Promise<void> {
  await c.close();
  c = await open(memoryStore ? () => memoryStore! : undefined);
}

function joinReq(group: string, extra: Partial<JoinRequest> = {}): JoinRequest {
  return { topic: TOPIC, group, member: 'cli', host: '127.0.0.1', sessionTimeoutMs: SESSION, ...extra };
}

/** A join registered: its window is open on the fake clock (advancing before would leave it waiting). */
const windowOpen = (group: string, key = `window:${group}`) => until(() => gc().scheduler.has(key), 5000, `the join window of ${group}`);

/** One member joined and synced, then committed offset 5 of partition 0. */
async function memberWithCommit(group: string): Promise<MemberView> {
  const join = gc().join(joinReq(group));
  await windowOpen(group);
  await clock.advance(WINDOW);
  const v = await join;
  await gc().sync({ topic: TOPIC, group, member: v.memberId, generation: v.generation });
  await gc().commit({ topic: TOPIC, group, member: v.memberId, generation: v.generation, entries: [{ partition: 0, offset: 5 }] });
  return v;
}

const leave = (group: string, v: MemberView) => gc().leave({ topic: TOPIC, group, member: v.memberId });

/** A commit with no membership (a Kafka standalone consumer: generation -1, no member id). */
async function simpleCommit(group: string, offset: number): Promise<void> {
  const [err] = await gc().classic.commit({ group, memberId: '', instanceId: null, generation: -1 }, [{ topic: TOPIC, entries: [{ partition: 1, offset }] }]);
  expect(err).toBeNull();
}

/** What FETCH_OFFSET answers for an unknown group. */
const NONE = { offset: 0, committed: false };

describe('offsets retention of empty groups', () => {
  it('an emptied group expires after the retention: offsets, state and listing gone, counted, and a restart does not bring them back', async () => {
    const v = await memberWithCommit('g');
    await clock.advance(1000);
    await leave('g', v);
    expect(gc().status('g')).toMatchObject({ state: 'Empty' });
    await clock.advance(RETENTION - 1);
    expect(listed('g')).toBe(true);
    expect(gc().fetchOffset('g', TOPIC, 0)).toEqual({ offset: 5, committed: true });
    await clock.advance(1);
    await gone('g');
    expect(gc().fetchOffset('g', TOPIC, 0)).toEqual(NONE);
    expect(thrownCode(() => gc().status('g'))).toBe('group_not_found');
    expect(await expiredTotal()).toBe(1);
    await restart();
    expect(listed('g')).toBe(false);
    expect(gc().fetchOffset('g', TOPIC, 0)).toEqual(NONE);
  });

  it('with the memory offset store too: the store forgets the offsets', async () => {
    await c.close();
    memoryStore = new MemoryOffsetStore(clock);
    c = await open(() => memoryStore!);
    const v = await memberWithCommit('g');
    expect(await memoryStore.fetch('g', TOPIC, 0)).toBe(5);
    await leave('g', v);
    await clock.advance(RETENTION);
    await gone('g');
    expect(await memoryStore.fetch('g', TOPIC, 0)).toBeUndefined();
    await restart();
    expect(listed('g')).toBe(false);
  });

  it('a member joining meanwhile starts the wait over from when the group is empty again', async () => {
    const v = await memberWithCommit('g');
    await leave('g', v);
    await clock.advance(RETENTION / 2);
    const again = gc().join(joinReq('g'));
    await windowOpen('g');
    await clock.advance(WINDOW);
    const v2 = await again;
    await gc().sync({ topic: TOPIC, group: 'g', member: v2.memberId, generation: v2.generation });
    // Past the first wait's end with a member (heartbeating): kept.
    for (let t = 0; t < RETENTION / SESSION; t++) {
      await clock.advance(SESSION / 2);
      await gc().heartbeat({ topic: TOPIC, group: 'g', member: v2.memberId, generation: v2.generation });
    }
    expect(listed('g')).toBe(true);
    await leave('g', v2);
    const emptiedAt = clock.monotonic();
    await clock.advance(RETENTION - 1);
    expect(listed('g')).toBe(true);
    await clock.advance(1);
    await gone('g');
    expect(clock.monotonic() - emptiedAt).toBe(RETENTION);
  });

  it('a commit without membership meanwhile starts the wait over', async () => {
    const v = await memberWithCommit('g');
    await leave('g', v);
    await clock.advance(RETENTION / 2);
    await simpleCommit('g', 3);
    await clock.advance(RETENTION - 1);
    expect(listed('g')).toBe(true);
    expect(gc().fetchOffset('g', TOPIC, 1)).toEqual({ offset: 3, committed: true });
    await clock.advance(1);
    await gone('g');
    expect(gc().fetchOffset('g', TOPIC, 1)).toEqual(NONE);
  });

  it('a group known only by offsets committed without membership expires a retention after its last commit', async () => {
    await simpleCommit('solo', 2);
    await clock.advance(RETENTION / 2);
    await simpleCommit('solo', 4);
    await clock.advance(RETENTION - 1);
    expect(gc().fetchOffset('solo', TOPIC, 1)).toEqual({ offset: 4, committed: true });
    await clock.advance(1);
    await gone('solo');
    expect(gc().fetchOffset('solo', TOPIC, 1)).toEqual(NONE);
  });

  it('a group with members never expires; once empty, the wait counts from then, not from its last commit', async () => {
    const v = await memberWithCommit('g');
    for (let t = 0; t < (3 * RETENTION) / (SESSION / 2); t++) {
      await clock.advance(SESSION / 2);
      await gc().heartbeat({ topic: TOPIC, group: 'g', member: v.memberId, generation: v.generation });
    }
    expect(gc().status('g')).toMatchObject({ state: 'Stable' });
    expect(gc().fetchOffset('g', TOPIC, 0)).toEqual({ offset: 5, committed: true });
    await leave('g', v);
    await clock.advance(RETENTION - 1);
    expect(gc().fetchOffset('g', TOPIC, 0)).toEqual({ offset: 5, committed: true });
    await clock.advance(1);
    await gone('g');
    expect(await expiredTotal()).toBe(1);
  });

  it('a restart does not start the wait from zero: it goes on from the time the group became empty', async () => {
    const v = await memberWithCommit('g');
    await leave('g', v);
    await clock.advance(RETENTION / 2);
    await restart();
    expect(listed('g')).toBe(true);
    await clock.advance(RETENTION / 2 - 1);
    expect(gc().fetchOffset('g', TOPIC, 0)).toEqual({ offset: 5, committed: true });
    await clock.advance(1);
    await gone('g');
    await restart();
    expect(gc().fetchOffset('g', TOPIC, 0)).toEqual(NONE);
  });

  it('after a restart a group known only by offsets waits from its last commit', async () => {
    await simpleCommit('solo', 2);
    await clock.advance(RETENTION - 1000);
    await restart();
    await clock.advance(999);
    expect(listed('solo')).toBe(true);
    await clock.advance(1);
    await gone('solo');
  });

  it('only a coordinator that can act expires: not while its lease is in doubt, and not a group whose partition it gave up', async () => {
    let lease = true;
    gc().enableOwnership(
      (partition) => new TributaryError('NOT_COORDINATOR', { partition }),
      () => true,
      () => lease,
      () => true,
    );
    for (let p = 0; p < 2; p++) await gc().loadPartition(p);
    const v = await memberWithCommit('g');
    await leave('g', v);
    lease = false;
    await clock.advance(RETENTION + 5000);
    expect(listed('g')).toBe(true);
    lease = true;
    await clock.advance(250);
    await gone('g');
    // A group whose partition moved away is the new coordinator's to expire.
    const w = await memberWithCommit('h');
    await leave('h', w);
    gc().unloadPartition(gc().partitionFor('h'));
    await clock.advance(RETENTION);
    expect(await expiredTotal()).toBe(1);
  });

  it('0 keeps every group for ever', async () => {
    await c.close();
    c = await openCoordinators(dir, clock, { topics: { [TOPIC]: 2 }, group: { offsetsRetentionMs: 0 } });
    const v = await memberWithCommit('g');
    await leave('g', v);
    await clock.advance(10 * RETENTION);
    expect(gc().fetchOffset('g', TOPIC, 0)).toEqual({ offset: 5, committed: true });
  });
});

describe('offsets retention of Kafka classic groups', () => {
  const req = (memberId: string) => classicJoinRequest(memberId, { group: 'k', sessionTimeoutMs: SESSION });

  /** One member joined, synced and committed offset 7 of partition 0 under its generation. */
  async function member(): Promise<JoinResult> {
    const join = gc().classic.join(req(''));
    await windowOpen('k', 'cwin:k');
    await clock.advance(WINDOW);
    const j = (await join) as JoinResult;
    await gc().classic.sync({
      group: 'k',
      memberId: j.memberId,
      instanceId: null,
      generation: j.generation,
      assignments: [],
      protocolType: null,
      protocolName: null,
    });
    const [err] = await gc().classic.commit({ group: 'k', memberId: j.memberId, instanceId: null, generation: j.generation }, [
      { topic: TOPIC, entries: [{ partition: 0, offset: 7 }] },
    ]);
    expect(err).toBeNull();
    return j;
  }

  it('with members it never expires; once Empty it expires after the retention, and a restart does not bring it back', async () => {
    const m = await member();
    for (let t = 0; t < (2 * RETENTION) / (SESSION / 2); t++) {
      await clock.advance(SESSION / 2);
      await gc().classic.heartbeat({ group: 'k', memberId: m.memberId, instanceId: null, generation: m.generation });
    }
    expect(gc().classic.describe('k').state).toBe('Stable');
    expect(await gc().classic.leave('k', [{ memberId: m.memberId, instanceId: null }])).toEqual([null]);
    expect(gc().classic.describe('k').state).toBe('Empty');
    await clock.advance(RETENTION - 1);
    expect(gc().classic.fetch('k', null, false)).toEqual([{ topic: TOPIC, partitions: [{ partition: 0, offset: 7, error: null }] }]);
    await clock.advance(1);
    await gone('k');
    expect(gc().classic.describe('k').state).toBe('Dead');
    expect(gc().classic.fetch('k', [{ topic: TOPIC, partitions: [0] }], false)[0]!.partitions[0]!.offset).toBe(-1);
    await restart();
    expect(gc().classic.describe('k').state).toBe('Dead');
    expect(
      gc()
        .classic.list()
        .map((g) => g.groupId),
    ).not.toContain('k');
  });

  it('a member joining meanwhile starts the wait over', async () => {
    const m = await member();
    await gc().classic.leave('k', [{ memberId: m.memberId, instanceId: null }]);
    await clock.advance(RETENTION - 1000);
    const m2 = await member();
    await gc().classic.leave('k', [{ memberId: m2.memberId, instanceId: null }]);
    await clock.advance(RETENTION - 1);
    expect(gc().classic.describe('k').state).toBe('Empty');
    await clock.advance(1);
    await gone('k');
  });

  it('its wait survives a restart', async () => {
    const m = await member();
    await gc().classic.leave('k', [{ memberId: m.memberId, instanceId: null }]);
    await clock.advance(RETENTION - 1000);
    await restart();
    await clock.advance(999);
    expect(gc().classic.describe('k').state).toBe('Empty');
    await clock.advance(1);
    await gone('k');
  });
});

/**
 * A RESET_OFFSETS the offset store refuses changes nothing (docs/protocol.md, RESET_OFFSETS): the live
 * group's members keep their partitions and generation, no rebalance follows, their commits go on. The
 * store is the log store with its failures injected: down (as PostgreSQL unreachable: every call fails),
 * or refusing only the write. A write whose outcome is unknown keeps the fence, as before.
 */
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { GroupCoordinator, JoinRequest, MemberView } from 'tributary-broker/coordinator/group-coordinator.js';
import { LogOffsetStore } from 'tributary-broker/coordinator/group-log.js';
import { TributaryError } from 'tributary-protocol/errors.js';
import { type Coordinators, GROUP_CONFIG, openCoordinators } from '../../helpers/coordinators.js';
import { FakeClock } from '../../helpers/fake-clock.js';
import { expectError, rec, removeDir, tempDir, until } from '../../helpers/util.js';

const TOPIC = 't';
const WINDOW = GROUP_CONFIG.joinWindowMs;

let dir: string;
let clock: FakeClock;
let c: Coordinators;
let gc: GroupCoordinator;
/** 'down': fetch and commit fail; 'refuse': commit fails, nothing written; 'unknown': commit written, its answer lost. */
let fault: 'none' | 'down' | 'refuse' | 'unknown' = 'none';

beforeEach(async () => {
  dir = await tempDir('trib-reset-refused-');
  clock = new FakeClock();
  fault = 'none';
  c = await openCoordinators(dir, clock, {
    topics: { [TOPIC]: 2 },
    offsetStore: (log) => {
      const store = new LogOffsetStore(log, clock);
      const fetch = store.fetch.bind(store);
      const commit = store.commit.bind(store);
      store.fetch = async (...args) => {
        if (fault === 'down') throw new TributaryError('storage_error', { op: 'fetch', reason: 'injected: connection refused' });
        return fetch(...args);
      };
      store.commit = async (...args) => {
        if (fault === 'down' || fault === 'refuse') throw new TributaryError('storage_error', { op: 'commit', reason: 'injected: refused' });
        if (fault === 'unknown') {
          await commit(...args);
          throw new TributaryError('storage_error', { op: 'commit', reason: 'injected: answer lost', outcome: 'unknown' });
        }
        return commit(...args);
      };
      return store;
    },
  });
  gc = c.groups;
  for (const p of c.topics.get(TOPIC).partitions) await p.append(Array.from({ length: 10 }, (_, i) => rec(`r${i}`)));
});

afterEach(async () => {
  await c.close();
  await removeDir(dir);
});

const joinReq = (member: string): JoinRequest => ({ topic: TOPIC, group: 'g', member, host: '127.0.0.1' });
type Status = { state: string; generation: number; history: unknown[]; members: Array<{ member_id: string; generation: number; assignments: number[]; needs_rejoin: boolean }> };
const status = () => gc.status('g') as unknown as Status;
/** What a reset would change of each member (its heartbeat times aside). */
const members = (s: Status = status()) => s.members.map((m) => ({ id: m.member_id, generation: m.generation, assignments: m.assignments, rejoin: m.needs_rejoin }));
const commit = (v: MemberView, partition: number, offset: number) =>
  gc.commit({ topic: TOPIC, group: 'g', member: v.memberId, generation: v.generation, entries: [{ partition, offset }] });

/** One member owning both partitions, each committed at 6. */
async function stableGroup(): Promise<MemberView> {
  const joined = gc.join(joinReq('a'));
  await until(() => gc.scheduler.has('window:g'), 5000, 'the join window');
  await clock.advance(WINDOW);
  const v = await gc.sync({ topic: TOPIC, group: 'g', member: (await joined).memberId, generation: (await joined).generation });
  expect(v.assignments).toEqual([0, 1]);
  for (const p of [0, 1]) await commit(v, p, 6);
  return v;
}

describe('RESET_OFFSETS refused by the offset store', () => {
  for (const f of ['down', 'refuse'] as const) {
    it(`changes nothing when the store is ${f === 'down' ? 'down' : 'up but refuses the write'}`, async () => {
      const v = await stableGroup();
      const before = status();
      fault = f;
      await expectError(gc.resetOffsets({ group: 'g', topic: TOPIC, to: 'earliest', by: 'ops' }), 'storage_error');
      fault = 'none';
      // No join window, no new generation, the member keeps its partitions and its commits are taken.
      expect(gc.scheduler.has('window:g')).toBe(false);
      await clock.advance(WINDOW * 10);
      expect(status()).toMatchObject({ state: 'Stable', generation: before.generation, history: before.history });
      expect(members()).toEqual(members(before));
      expect(await gc.heartbeat({ topic: TOPIC, group: 'g', member: v.memberId, generation: v.generation })).toEqual({ generation: v.generation, memberId: v.memberId });
      await expect(commit(v, 0, 7)).resolves.toBe(1);
      expect(gc.fetchOffset('g', TOPIC, 0)).toEqual({ offset: 7, committed: true });
      // A restart brings back the same group: the log holds no fence either.
      await c.close();
      c = await openCoordinators(dir, clock, { topics: { [TOPIC]: 2 } });
      gc = c.groups;
      expect((await gc.join({ ...joinReq(v.memberId), generation: v.generation })).reset).toBeUndefined();
    });
  }

  it('keeps the fence when the write may have happened (outcome unknown)', async () => {
    const v = await stableGroup();
    const before = status();
    fault = 'unknown';
    await expectError(gc.resetOffsets({ group: 'g', topic: TOPIC, to: 'earliest', by: 'ops' }), 'storage_error');
    fault = 'none';
    await expectError(commit(v, 0, 7), 'REBALANCE_IN_PROGRESS');
    await clock.advance(WINDOW);
    expect(status().generation).toBe(before.generation + 1);
  });
});

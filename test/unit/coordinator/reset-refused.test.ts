/**
 * A RESET_OFFSETS the offset store refuses changes nothing (docs/protocol.md, RESET_OFFSETS): the live
 * group's members keep their partitions and generation, no rebalance follows, their commits go on. The
 * store is the log store with its failures injected: down (as PostgreSQL unreachable: every call fails),
 * or refusing only the write. A write whose outcome is unknown keeps the fence, as before.
 */
import { describe, expect, it } from 'vitest';
import type { JoinRequest, MemberView } from 'tributary-broker/coordinator/group-coordinator.js';
import { GROUP_CONFIG, type StoreFaults, joinAlone, useCoordinators } from '../../helpers/coordinators.js';
import { expectError } from '../../helpers/util.js';

const TOPIC = 't';
const WINDOW = GROUP_CONFIG.joinWindowMs;

const f = useCoordinators('trib-reset-refused-', { [TOPIC]: 2 });

/** 'down': fetch and commit fail; 'refuse': commit fails, nothing written; 'unknown': commit written, its answer lost. */
const FAULTS: Record<'down' | 'refuse' | 'unknown', StoreFaults> = {
  down: { commit: 'refused', reads: true },
  refuse: { commit: 'refused', reads: false },
  unknown: { commit: 'written', reads: false },
};
const inject = (fault: keyof typeof FAULTS | 'none') => Object.assign(f.faults, fault === 'none' ? { commit: 'none', reads: false } : FAULTS[fault]);

const joinReq = (member: string): JoinRequest => ({ topic: TOPIC, group: 'g', member, host: '127.0.0.1' });
type Status = { state: string; generation: number; history: unknown[]; members: Array<{ member_id: string; generation: number; assignments: number[]; needs_rejoin: boolean }> };
const status = () => f.gc.status('g') as unknown as Status;
/** What a reset would change of each member (its heartbeat times aside). */
const members = (s: Status = status()) => s.members.map((m) => ({ id: m.member_id, generation: m.generation, assignments: m.assignments, rejoin: m.needs_rejoin }));
const commit = (v: MemberView, partition: number, offset: number) =>
  f.gc.commit({ topic: TOPIC, group: 'g', member: v.memberId, generation: v.generation, entries: [{ partition, offset }] });

/** One member owning both partitions, each committed at 6. */
async function stableGroup(): Promise<MemberView> {
  const v = await joinAlone(f, joinReq('a'));
  expect(v.assignments).toEqual([0, 1]);
  for (const p of [0, 1]) await commit(v, p, 6);
  return v;
}

describe('RESET_OFFSETS refused by the offset store', () => {
  for (const fault of ['down', 'refuse'] as const) {
    it(`changes nothing when the store is ${fault === 'down' ? 'down' : 'up but refuses the write'}`, async () => {
      const v = await stableGroup();
      const before = status();
      inject(fault);
      await expectError(f.gc.resetOffsets({ group: 'g', topic: TOPIC, to: 'earliest', by: 'ops' }), 'storage_error');
      inject('none');
      // No join window, no new generation, the member keeps its partitions and its commits are taken.
      expect(f.gc.scheduler.has('window:g')).toBe(false);
      await f.clock.advance(WINDOW * 10);
      expect(status()).toMatchObject({ state: 'Stable', generation: before.generation, history: before.history });
      expect(members()).toEqual(members(before));
      expect(await f.gc.heartbeat({ topic: TOPIC, group: 'g', member: v.memberId, generation: v.generation })).toEqual({ generation: v.generation, memberId: v.memberId });
      await expect(commit(v, 0, 7)).resolves.toBe(1);
      expect(f.gc.fetchOffset('g', TOPIC, 0)).toEqual({ offset: 7, committed: true });
      // A restart brings back the same group: the log holds no fence either.
      await f.reopen();
      expect((await f.gc.join({ ...joinReq(v.memberId), generation: v.generation })).reset).toBeUndefined();
    });
  }

  it('keeps the fence when the write may have happened (outcome unknown)', async () => {
    const v = await stableGroup();
    const before = status();
    inject('unknown');
    await expectError(f.gc.resetOffsets({ group: 'g', topic: TOPIC, to: 'earliest', by: 'ops' }), 'storage_error');
    inject('none');
    await expectError(commit(v, 0, 7), 'REBALANCE_IN_PROGRESS');
    await f.clock.advance(WINDOW);
    expect(status().generation).toBe(before.generation + 1);
  });
});

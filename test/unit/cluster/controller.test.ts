import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { assignReplicas, nextLeadership, preferredLeadership } from 'tributary-broker/cluster/controller.js';
import type { PartitionState } from 'tributary-broker/cluster/partition-state.js';

const state = (s: Partial<PartitionState>): PartitionState => ({ replicas: [0, 1, 2], leader: 0, leaderEpoch: 4, isr: [0, 1, 2], hwm: 0, ...s });

describe('assignReplicas', () => {
  it('spreads leaders over the brokers and gives every partition rf distinct replicas', () => {
    fc.assert(
      fc.property(fc.integer({ min: 1, max: 40 }), fc.uniqueArray(fc.integer({ min: 0, max: 50 }), { minLength: 1, maxLength: 7 }), fc.integer({ min: 0, max: 10 }), (n, ids, first) => {
        const rf = Math.min(ids.length, 3);
        const states = assignReplicas(n, rf, ids, first);
        expect(states).toHaveLength(n);
        for (const s of states) {
          expect(new Set(s.replicas).size).toBe(rf);
          expect(s.replicas.every((id) => ids.includes(id))).toBe(true);
          expect(s.leader).toBe(s.replicas[0]);
          expect(s.isr).toEqual(s.replicas);
        }
        // Leaders differ by at most one partition between any two brokers (over a window of all brokers).
        if (n >= ids.length) {
          const counts = new Map<number, number>();
          for (const s of states) counts.set(s.leader, (counts.get(s.leader) ?? 0) + 1);
          const c = [...counts.values()];
          expect(Math.max(...c) - Math.min(...c)).toBeLessThanOrEqual(1);
        }
      }),
    );
  });

  it('refuses a replication factor above the live brokers', () => {
    expect(() => assignReplicas(3, 3, [0, 1])).toThrow(/replication factor/);
  });
});

describe('nextLeadership', () => {
  it('leaves a partition with a live leader and a live ISR alone', () => {
    expect(nextLeadership(state({}), new Set([0, 1, 2]), false)).toBeUndefined();
  });

  it('drops dead followers from the ISR without a new epoch', () => {
    expect(nextLeadership(state({}), new Set([0, 2]), false)).toEqual(state({ isr: [0, 2] }));
  });

  it('moves a dead leader to the first live in-sync replica in replica order, with the epoch bumped', () => {
    expect(nextLeadership(state({ replicas: [2, 0, 1], leader: 2 }), new Set([0, 1]), false)).toEqual(state({ replicas: [2, 0, 1], leader: 0, leaderEpoch: 5, isr: [0, 1] }));
  });

  it('never elects an out-of-sync replica unless unclean election is allowed', () => {
    const s = state({ isr: [0] });
    expect(nextLeadership(s, new Set([1, 2]), false)).toEqual(state({ isr: [0], leader: -1, leaderEpoch: 5 }));
    expect(nextLeadership(state({ isr: [0], leader: -1, leaderEpoch: 5 }), new Set([1, 2]), false)).toBeUndefined();
    expect(nextLeadership(s, new Set([1, 2]), true)).toEqual(state({ leader: 1, leaderEpoch: 5, isr: [1] }));
  });

  it('a leaderless partition gets its returning in-sync replica as leader', () => {
    expect(nextLeadership(state({ isr: [0], leader: -1, leaderEpoch: 5 }), new Set([0, 2]), false)).toEqual(state({ isr: [0], leader: 0, leaderEpoch: 6 }));
  });

  it('property: a new leader is always live and in the ISR (clean), and the epoch only moves with the leader', () => {
    fc.assert(
      fc.property(
        fc.shuffledSubarray([0, 1, 2, 3, 4], { minLength: 1 }),
        fc.subarray([0, 1, 2, 3, 4]),
        fc.subarray([0, 1, 2, 3, 4]),
        fc.integer({ min: -1, max: 4 }),
        (replicas, isrPick, livePick, leader) => {
          const isr = replicas.filter((r) => isrPick.includes(r) || r === leader);
          const s = state({ replicas, isr: isr.length > 0 ? isr : [replicas[0]!], leader: replicas.includes(leader) ? leader : -1 });
          const live = new Set(livePick);
          const next = nextLeadership(s, live, false);
          if (!next) return;
          if (next.leader !== s.leader) {
            expect(next.leaderEpoch).toBe(s.leaderEpoch + 1);
            if (next.leader >= 0) {
              expect(live.has(next.leader)).toBe(true);
              expect(s.isr).toContain(next.leader);
            }
          } else {
            expect(next.leaderEpoch).toBe(s.leaderEpoch);
          }
          if (next.leader >= 0) expect(next.isr).toContain(next.leader);
        },
      ),
    );
  });
});

describe('preferredLeadership', () => {
  const always = () => true;

  it('gives the lead back to the first replica once it is in sync and ready, with the epoch bumped and the ISR kept', () => {
    expect(preferredLeadership(state({ leader: 2 }), always)).toEqual(state({ leader: 0, leaderEpoch: 5 }));
  });

  it('leaves the partition alone while the preferred replica leads, is out of the ISR, not ready, or nobody leads', () => {
    expect(preferredLeadership(state({ leader: 0 }), always)).toBeUndefined();
    expect(preferredLeadership(state({ leader: 2, isr: [1, 2] }), always)).toBeUndefined();
    expect(preferredLeadership(state({ leader: 2 }), (id) => id !== 0)).toBeUndefined();
    expect(preferredLeadership(state({ leader: -1 }), always)).toBeUndefined();
  });

  it('property: a move is always to the first replica, which is in the ISR, and only with a new epoch', () => {
    fc.assert(
      fc.property(fc.shuffledSubarray([0, 1, 2, 3, 4], { minLength: 1 }), fc.subarray([0, 1, 2, 3, 4]), fc.integer({ min: -1, max: 4 }), fc.subarray([0, 1, 2, 3, 4]), (replicas, isrPick, leader, readyPick) => {
        const isr = replicas.filter((r) => isrPick.includes(r) || r === leader);
        const s = state({ replicas, isr, leader: replicas.includes(leader) ? leader : -1 });
        const next = preferredLeadership(s, (id) => readyPick.includes(id));
        if (!next) return;
        expect(next.leader).toBe(replicas[0]);
        expect(s.isr).toContain(next.leader);
        expect(readyPick).toContain(next.leader);
        expect(next.leaderEpoch).toBe(s.leaderEpoch + 1);
        expect(next.isr).toEqual(s.isr);
      }),
    );
  });
});

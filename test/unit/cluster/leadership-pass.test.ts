/**
 * The controller's pass over every partition (cluster/leadership-pass.ts): live brokers read again per
 * partition, leader moves bounded in flight, a failed move ending the pass once the others settle.
 */
import { describe, expect, it } from 'vitest';
import { nextLeadership } from 'tributary-broker/cluster/controller.js';
import { type LeaderMove, type LeadershipPassDeps, leadershipPass } from 'tributary-broker/cluster/leadership-pass.js';
import type { PartitionStateEntry } from 'tributary-broker/cluster/partition-state.js';

/** `n` partitions at replication factor 1, each led by `leader`. */
function entries(n: number, leader: number): PartitionStateEntry[] {
  return Array.from({ length: n }, (_, i) => ({
    topic: 't',
    partition: i,
    modRevision: i + 1,
    createRevision: 1,
    lease: '0',
    value: { replicas: [leader], leader, leaderEpoch: 0, isr: [leader], hwm: 0 },
  }));
}

const failover = (e: PartitionStateEntry, live: Set<number>): LeaderMove | undefined => {
  const next = nextLeadership(e.value, live, false);
  return next && { next, reason: 'failover' };
};

/** A pass over `entries` with broker 0 alone live, failover decisions and moves that apply: `over` changes any of it. */
const pass = (entries: PartitionStateEntry[], over: Partial<LeadershipPassDeps>) =>
  leadershipPass({ entries, live: () => new Set([0]), active: () => true, decide: failover, reassign: async () => {}, move: async () => {}, ...over });

describe('leadershipPass', () => {
  it('reads the live brokers for every partition: a broker back mid-pass keeps leading the partitions not yet moved', async () => {
    let live = new Set([0, 2]);
    const moved: number[] = [];
    await pass(entries(100, 1), {
      live: () => live,
      move: async (e, m) => {
        expect(m.next.leader).toBe(-1);
        moved.push(e.partition);
        // Broker 1 registers again while the 10th move is under way.
        if (moved.length === 10) live = new Set([0, 1, 2]);
      },
    });
    expect(moved).toEqual(Array.from({ length: 10 }, (_, i) => i));
  });

  it('keeps up to `concurrency` moves in flight, and settles every one before it resolves', async () => {
    let inFlight = 0;
    let most = 0;
    let done = 0;
    await pass(entries(50, 1), {
      concurrency: 8,
      move: async () => {
        inFlight++;
        most = Math.max(most, inFlight);
        await new Promise((resolve) => setImmediate(resolve));
        inFlight--;
        done++;
      },
    });
    expect([most, done, inFlight]).toEqual([8, 50, 0]);
  });

  it('runs reassignment steps one at a time, in partition order, between moves', async () => {
    const steps: number[] = [];
    let stepping = false;
    await pass(entries(6, 0), {
      decide: (e) => (e.partition % 2 === 0 ? 'reassign' : undefined),
      reassign: async (e) => {
        expect(stepping).toBe(false);
        stepping = true;
        await new Promise((resolve) => setImmediate(resolve));
        steps.push(e.partition);
        stepping = false;
      },
    });
    expect(steps).toEqual([0, 2, 4]);
  });

  it('a failed move ends the pass: no move begins after it, the others settle, and the error is thrown', async () => {
    const begun: number[] = [];
    let settled = 0;
    const running = pass(entries(40, 1), {
      concurrency: 4,
      move: async (e) => {
        begun.push(e.partition);
        await new Promise((resolve) => setImmediate(resolve));
        settled++;
        if (e.partition === 5) throw new Error('etcd unavailable');
      },
    });
    await expect(running).rejects.toThrow('etcd unavailable');
    expect(settled).toBe(begun.length);
    expect(begun.length).toBeLessThan(12);
  });

  it('reports every failure: moves failing together, and a reassignment step failing beside a move', async () => {
    const together = pass(entries(4, 1), {
      move: async (e) => {
        await new Promise((resolve) => setImmediate(resolve));
        throw new Error(`move ${e.partition}`);
      },
    });
    await expect(together).rejects.toMatchObject({ errors: [new Error('move 0'), new Error('move 1'), new Error('move 2'), new Error('move 3')] });

    const beside = pass(entries(2, 1), {
      decide: (e, live) => (e.partition === 1 ? 'reassign' : failover(e, live)),
      reassign: async () => {
        throw new Error('step');
      },
      move: async () => {
        await new Promise((resolve) => setImmediate(resolve));
        throw new Error('move');
      },
    });
    await expect(beside).rejects.toMatchObject({ errors: [new Error('step'), new Error('move')] });
  });

  it('stops deciding once this broker is no longer the controller', async () => {
    let controller = true;
    const moved: number[] = [];
    await pass(entries(20, 1), {
      active: () => controller,
      move: async (e) => {
        moved.push(e.partition);
        if (moved.length === 3) controller = false;
      },
    });
    expect(moved).toEqual([0, 1, 2]);
  });
});

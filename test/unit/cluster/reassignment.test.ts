/**
 * The reassignment state machine (cluster/reassignment.ts) without etcd: each step from a state and a
 * request, cancel from every step, the plans of drain and replication-factor changes, and the throttle's
 * budget on a fake clock.
 */
import { describe, expect, it } from 'vitest';
import type { PartitionState } from 'tributary-broker/cluster/partition-state.js';
import {
  ReplicationThrottle,
  checkTarget,
  drainPlan,
  nextReassignmentStep,
  originalReplicas,
  replicationFactorPlan,
} from 'tributary-broker/cluster/reassignment.js';

const live = new Set([0, 1, 2, 3]);
const base: PartitionState = { replicas: [0, 1, 2], leader: 0, leaderEpoch: 4, isr: [0, 1, 2], hwm: 10 };
const req = (target: number[], extra: { throttle?: number; cancel?: boolean } = {}) => ({ target, throttle: extra.throttle ?? 0, cancel: extra.cancel, requestedAt: 0 });

function write(step: ReturnType<typeof nextReassignmentStep>): PartitionState {
  if (step.kind !== 'write') throw new Error(`expected a write, got ${JSON.stringify(step)}`);
  return step.state;
}

describe('reassignment steps', () => {
  it('start, catch up, complete: the leader leaves a removed replica with the epoch bumped', () => {
    const started = write(nextReassignmentStep(base, req([3, 1, 2], { throttle: 500 }), live));
    expect(started).toMatchObject({ replicas: [0, 1, 2, 3], leader: 0, leaderEpoch: 4, isr: [0, 1, 2], reassign: { target: [3, 1, 2], adding: [3], removing: [0], throttle: 500 } });
    expect(originalReplicas(started)).toEqual([0, 1, 2]);
    // Broker 3 not in sync yet: nothing to do.
    expect(nextReassignmentStep(started, req([3, 1, 2], { throttle: 500 }), live).kind).toBe('wait');
    const caughtUp = { ...started, isr: [0, 1, 2, 3] };
    const done = nextReassignmentStep(caughtUp, req([3, 1, 2], { throttle: 500 }), live);
    expect(done).toMatchObject({ kind: 'write', finished: true });
    expect(write(done)).toEqual({ replicas: [3, 1, 2], leader: 3, leaderEpoch: 5, isr: [1, 2, 3], hwm: 10 });
  });

  it('a leader kept in the target keeps leading at the same epoch', () => {
    const s = write(nextReassignmentStep(base, req([0, 1]), live));
    expect(s.reassign).toMatchObject({ adding: [], removing: [2] });
    expect(write(nextReassignmentStep(s, req([0, 1]), live))).toEqual({ replicas: [0, 1], leader: 0, leaderEpoch: 4, isr: [0, 1], hwm: 10 });
  });

  it('waits while a target replica is dead, even if it is in the ISR', () => {
    const s = { ...write(nextReassignmentStep(base, req([3, 1, 2]), live)), isr: [0, 1, 2, 3] };
    expect(nextReassignmentStep(s, req([3, 1, 2]), new Set([0, 1, 2])).kind).toBe('wait');
  });

  it('a request equal to the replicas is removed; a throttle change is written first', () => {
    expect(nextReassignmentStep(base, req([0, 1, 2]), live).kind).toBe('delete');
    const s = write(nextReassignmentStep(base, req([3, 1, 2], { throttle: 100 }), live));
    expect(write(nextReassignmentStep(s, req([3, 1, 2], { throttle: 900 }), live)).reassign?.throttle).toBe(900);
  });

  it('a state without its request goes on to its target', () => {
    const s = { ...write(nextReassignmentStep(base, req([3, 1, 2]), live)), isr: [0, 1, 2, 3] };
    expect(write(nextReassignmentStep(s, undefined, live)).replicas).toEqual([3, 1, 2]);
  });

  it('cancel at every step goes back to the original replicas; a leader that moved to a new replica moves back', () => {
    expect(nextReassignmentStep(base, req([3, 1, 2], { cancel: true }), live).kind).toBe('delete');
    const started = write(nextReassignmentStep(base, req([3, 1, 2]), live));
    expect(write(nextReassignmentStep(started, req([3, 1, 2], { cancel: true }), live))).toEqual(base);
    // Broker 3 caught up and (by a failover) leads: the first in-sync original replica takes over.
    const led = { ...started, isr: [1, 2, 3], leader: 3, leaderEpoch: 6 };
    expect(write(nextReassignmentStep(led, req([3, 1, 2], { cancel: true }), live))).toEqual({ replicas: [0, 1, 2], leader: 1, leaderEpoch: 7, isr: [1, 2], hwm: 10 });
    // No original replica in sync and live: wait rather than lose acknowledged records.
    const alone = { ...started, isr: [3], leader: 3, leaderEpoch: 6 };
    expect(nextReassignmentStep(alone, req([3, 1, 2], { cancel: true }), live).kind).toBe('wait');
  });

  it('checks targets: empty, duplicates, unknown brokers', () => {
    expect(() => checkTarget([], live, 't[0]')).toThrow(/empty/);
    expect(() => checkTarget([1, 1], live, 't[0]')).toThrow(/listed twice/);
    expect(() => checkTarget([1, 7], live, 't[0]')).toThrow(/7 not registered/);
    expect(() => checkTarget([3, 2], live, 't[0]')).not.toThrow();
  });
});

describe('plans', () => {
  const states = [
    { topic: 't', partition: 0, value: { ...base, replicas: [0, 1, 2] } },
    { topic: 't', partition: 1, value: { ...base, replicas: [1, 2, 0] } },
    { topic: 't', partition: 2, value: { ...base, replicas: [2, 0, 1] } },
    { topic: 'u', partition: 0, value: { ...base, replicas: [0] } },
  ];

  it('a drain replaces the broker in place by the least loaded others, spreading them', () => {
    const plan = drainPlan(states, 0, [0, 1, 2, 3]);
    expect(plan.map((x) => x.target)).toEqual([
      [3, 1, 2],
      [1, 2, 3],
      [2, 3, 1],
      [1],
    ]);
    expect(() => drainPlan(states, 0, [0, 1, 2])).toThrow(/no live broker/);
  });

  it('replication factor up appends the least loaded brokers; down drops the last replicas', () => {
    expect(replicationFactorPlan(states, 'u', 3, [0, 1, 2, 3]).map((x) => x.target)).toEqual([[0, 3, 1]]);
    expect(replicationFactorPlan(states, 't', 2, [0, 1, 2, 3]).map((x) => x.target)).toEqual([
      [0, 1],
      [1, 2],
      [2, 0],
    ]);
    expect(replicationFactorPlan(states, 't', 3, [0, 1, 2])).toEqual([]);
    expect(() => replicationFactorPlan(states, 't', 5, [0, 1, 2, 3])).toThrow(/fewer live brokers/);
  });

  it('a shrink keeps live in-sync replicas before the preferred one when that one is dead or out of sync', () => {
    const states = [
      { topic: 's', partition: 0, value: { ...base, replicas: [2, 0], leader: 0, isr: [0] } },
      { topic: 's', partition: 1, value: { ...base, replicas: [1, 2, 0], leader: 0, isr: [0, 2] } },
      { topic: 's', partition: 2, value: { ...base, replicas: [0, 1], leader: 0, isr: [0, 1] } },
    ];
    // Broker 2 is dead. Before: [2] for partition 0, keeping only the dead broker and dropping the live copy.
    expect(replicationFactorPlan(states, 's', 1, [0, 1]).map((x) => x.target)).toEqual([[0], [0], [0]]);
    // Broker 1 is live but out of sync for partition 1: the in-sync ones go first.
    expect(replicationFactorPlan(states, 's', 2, [0, 1, 2]).map((x) => x.target)).toEqual([[2, 0]]);
  });
});

describe('replication throttle', () => {
  it('spaces fetches so bytes stay within rate x time plus one fetch', () => {
    let now = 1000;
    const t = new ReplicationThrottle({ now: () => now });
    expect(t.consume(500, 1000)).toBe(500);
    expect(t.consume(500, 1000)).toBe(1000); // debt adds up
    now += 1000;
    expect(t.pending()).toBe(0);
    now += 5000; // idle time is not saved up as a burst
    expect(t.consume(1000, 1000)).toBe(1000);
    expect(t.consume(1000, 0)).toBe(0); // no throttle
    expect(t.throttledBytes).toBe(2000);
    // A fetch's round trip counts against its own budget: one sent 600 ms ago for 1000 B at 1000 B/s waits 400 ms.
    now += 10_000;
    expect(t.consume(1000, 1000, now - 600)).toBe(400);
  });
});

describe('permissions', () => {
  it('every reassignment command needs admin; REPLICA_POSITIONS is broker-only', async () => {
    const { BROKER_COMMANDS, requirementOf } = await import('tributary-broker/broker/security.js');
    for (const cmd of ['REASSIGN', 'REASSIGN_CANCEL', 'REASSIGN_THROTTLE', 'REASSIGNMENTS', 'DRAIN_BROKER', 'ALTER_REPLICATION_FACTOR', 'REPLICA_POSITIONS']) {
      expect(requirementOf(cmd, new Map([['topic', 't']])), cmd).toEqual({ permissions: ['admin'] });
    }
    expect(BROKER_COMMANDS.has('REPLICA_POSITIONS')).toBe(true);
    expect(BROKER_COMMANDS.has('REASSIGN')).toBe(false);
  });
});

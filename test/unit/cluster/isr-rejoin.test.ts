/**
 * The leader asks a parked follower out of the ISR for one more fetch when it may rejoin (isr-rejoin.ts):
 * when its registration appears, and when the ISR loses it while it is registered. Nobody else is asked:
 * followers in the ISR, not parked (a fetch of theirs is coming anyway), unregistered, or of partitions
 * this broker does not lead.
 */
import { EventEmitter } from 'node:events';
import { describe, expect, it } from 'vitest';
import { askParkedFollowersBack } from 'tributary-broker/cluster/isr-rejoin.js';
import type { BrokerRegistration } from 'tributary-broker/cluster/broker-registry.js';
import type { Replica } from 'tributary-broker/cluster/replica-types.js';

function replica(topic: string, role: Replica['role'], isr: number[], parked: number[]): Replica {
  const followers = new Map([1, 2].map((id) => [id, { offset: 5, caughtUpMs: 0, parked: parked.includes(id), sentEnd: 5, sentHwm: 5 }]));
  return { topic, id: 0, role, isr, replicas: [0, 1, 2], followers } as unknown as Replica;
}

function setup(replicas: Replica[], registered: number[]) {
  const registry = { events: new EventEmitter(), get: (id: number) => (registered.includes(id) ? ({ id } as BrokerRegistration) : undefined) };
  const states = { events: new EventEmitter() };
  const marks: string[] = [];
  askParkedFollowersBack({
    registry,
    states,
    replicas: () => replicas,
    get: (t) => replicas.find((r) => r.topic === t),
    mark: (id, t, p) => marks.push(`${id}@${t}:${p}`),
  });
  return { registry, states, marks };
}

describe('askParkedFollowersBack', () => {
  it('marks a parked follower out of the ISR of the partitions this broker leads when it registers again', () => {
    const idle = replica('idle', 'leader', [0, 2], [1, 2]);
    const inSync = replica('in-sync', 'leader', [0, 1, 2], [1, 2]);
    const followed = replica('followed', 'follower', [0, 2], [1]);
    const { registry, marks } = setup([idle, inSync, followed], [0, 1, 2]);
    registry.events.emit('broker-joined', { id: 1 });
    expect(marks).toEqual(['1@idle:0']);
    // Marked once: the follower's fetch parks it again if it finds nothing.
    expect(idle.followers.get(1)!.parked).toBe(false);
    registry.events.emit('broker-joined', { id: 1 });
    expect(marks).toEqual(['1@idle:0']);
  });

  it('does not mark a follower whose fetch is on its way', () => {
    const busy = replica('busy', 'leader', [0, 2], []);
    const { registry, marks } = setup([busy], [0, 1, 2]);
    registry.events.emit('broker-joined', { id: 1 });
    expect(marks).toEqual([]);
  });

  it('marks a registered parked follower that a state change left out of the ISR, never an unregistered one', () => {
    const p = replica('idle', 'leader', [0, 1, 2], [1, 2]);
    const { states, marks } = setup([p], [0, 1]);
    p.isr = [0];
    states.events.emit('changed', { topic: 'idle', partition: 0 });
    expect(marks).toEqual(['1@idle:0']);
  });
});

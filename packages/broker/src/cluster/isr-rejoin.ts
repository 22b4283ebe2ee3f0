/**
 * Leader side: a parked follower out of the ISR is asked for one more fetch when it may rejoin
 * (docs/architecture.md, "Cluster mode", connections). The leader adds a follower to the ISR only on one of
 * its fetches, and only while the follower is registered (ReplicaManager.followerFetch). A caught-up
 * follower of a partition that takes no writes parks its fetch, and only a mark (fetch-watch.ts) makes it ask
 * again. A follower cut off long enough for its lease to expire is dropped from the ISR by the controller,
 * but keeps its connections and its parked fetch through the cut; once healed it registers again, and
 * nothing marked the idle partition, so it stayed out of the ISR until the park fallback (30 s). So when
 * its registration appears, or the ISR loses it while it is registered (the controller's view lagging the
 * leader's), the leader marks it; the fetch that follows is checked against the usual rule.
 */
import type { EventEmitter } from 'node:events';
import type { BrokerRegistration } from './broker-registry.js';
import type { PartitionStateEntry } from './partition-state.js';
import type { Replica } from './replica-types.js';

export interface RejoinDeps {
  registry: { events: EventEmitter; get(id: number): BrokerRegistration | undefined };
  states: { events: EventEmitter };
  /** Every partition this broker replicates, and one of them. */
  replicas: () => Iterable<Replica>;
  get: (topic: string, partition: number) => Replica | undefined;
  /** Marks the partition for the follower: its REPLICA_WAIT answers and it fetches once more. */
  mark: (follower: number, topic: string, partition: number) => void;
}

/** Marks, on the events that can let it rejoin, each parked registered follower that is out of the ISR. */
export function askParkedFollowersBack(deps: RejoinDeps): void {
  const ask = (r: Replica, id: number) => {
    const f = r.followers.get(id);
    if (r.role !== 'leader' || !f?.parked || r.isr.includes(id) || !deps.registry.get(id)) return;
    f.parked = false;
    deps.mark(id, r.topic, r.id);
  };
  deps.registry.events.on('broker-joined', (b: BrokerRegistration) => {
    for (const r of deps.replicas()) ask(r, b.id);
  });
  // Registered after ReplicaManager's own listener: the replica already holds the new ISR.
  deps.states.events.on('changed', (e: PartitionStateEntry) => {
    const r = deps.get(e.topic, e.partition);
    if (r) for (const id of [...r.followers.keys()]) ask(r, id);
  });
}

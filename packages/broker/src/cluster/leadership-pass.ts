/**
 * One controller pass over every partition's state (docs/architecture.md, "Cluster mode"): failover,
 * preferred-leader moves and reassignment steps, each a compare-and-set on the partition's record.
 *
 * Two things matter at 10,000 partitions. The live brokers are read again for every partition, so a
 * broker that returns while a long pass runs is not made leaderless for the rest of it (a clean restart
 * at replication factor 1 used to leave a third of the partitions leaderless for minutes). And up to
 * `concurrency` leader moves are in flight at once, so etcd commits them in shared batches rather than
 * one round trip and fsync each.
 */
import type { PartitionState, PartitionStateEntry } from './partition-state.js';

export const LEADER_MOVES_IN_FLIGHT = 32;

export interface LeaderMove {
  next: PartitionState;
  reason: 'failover' | 'preferred leader';
}

export interface LeadershipPassDeps {
  entries: Iterable<PartitionStateEntry>;
  /** The brokers counted live now. */
  live(): Set<number>;
  /** False once this broker stopped being the controller: the pass ends. */
  active(): boolean;
  /** The move this partition needs, 'reassign' for a reassignment step, or undefined. */
  decide(e: PartitionStateEntry, live: Set<number>): LeaderMove | 'reassign' | undefined;
  /** A reassignment step (sequential: it may read and remove its request). */
  reassign(e: PartitionStateEntry, live: Set<number>): Promise<void>;
  /** The compare-and-set of a move (one that lost the compare is for the next pass to decide again). */
  move(e: PartitionStateEntry, m: LeaderMove): Promise<void>;
  concurrency?: number;
}

/**
 * Runs the pass. A failed move (or reassignment step) ends it: no move begins after it, those in flight
 * settle, and it rejects with the error, or an AggregateError of all of them.
 */
export async function leadershipPass(d: LeadershipPassDeps): Promise<void> {
  const limit = Math.max(1, d.concurrency ?? LEADER_MOVES_IN_FLIGHT);
  const inFlight = new Set<Promise<void>>();
  const errors: unknown[] = [];
  try {
    for (const e of d.entries) {
      if (!d.active() || errors.length > 0) break;
      const live = d.live();
      const what = d.decide(e, live);
      if (what === undefined) continue;
      if (what === 'reassign') {
        await d.reassign(e, live);
        continue;
      }
      const p: Promise<void> = d.move(e, what).then(
        () => {
          inFlight.delete(p);
        },
        (err: unknown) => {
          inFlight.delete(p);
          errors.push(err);
        },
      );
      inFlight.add(p);
      if (inFlight.size >= limit) await Promise.race(inFlight);
    }
  } catch (err) {
    errors.push(err);
  } finally {
    await Promise.all(inFlight);
  }
  if (errors.length === 1) throw errors[0];
  if (errors.length > 1) throw new AggregateError(errors, `${errors.length} steps of the controller pass failed`);
}

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
  /** The compare-and-set of a move; true when it was applied. */
  move(e: PartitionStateEntry, m: LeaderMove): Promise<boolean>;
  concurrency?: number;
}

/** Runs the pass; rejects with the first failed move's error once every move begun has settled. */
export async function leadershipPass(d: LeadershipPassDeps): Promise<void> {
  const limit = Math.max(1, d.concurrency ?? LEADER_MOVES_IN_FLIGHT);
  const inFlight = new Set<Promise<void>>();
  const failed: { err?: unknown; any: boolean } = { any: false };
  try {
    for (const e of d.entries) {
      if (!d.active() || failed.any) break;
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
          if (!failed.any) Object.assign(failed, { err, any: true });
        },
      );
      inFlight.add(p);
      if (inFlight.size >= limit) await Promise.race(inFlight);
    }
  } finally {
    await Promise.all(inFlight);
  }
  if (failed.any) throw failed.err;
}

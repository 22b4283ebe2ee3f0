/**
 * Fenced reads: a CONSUME or STREAM that names a group member and its generation is served only while
 * a commit of the partition by that member would pass the coordinator's fence (docs/protocol.md, "Fenced
 * reads"; docs/architecture.md, "Fenced reads"). The coordinator of this broker checks its own groups
 * and tells watchers of every change; a cluster leader that does not coordinate the group checks a copy
 * of the member's standing it asked the coordinator for (cluster/member-leases.ts).
 */
import type { TributaryError } from 'tributary-protocol/errors.js';
import { checkGeneration, checkPartition } from '../coordinator/member-fencing.js';
import type { BrokerContext } from './command-context.js';

export interface ReadFence {
  group: string;
  member: string;
  generation: number;
}

/**
 * Throws the fence's refusal (member_not_found, FENCED_INSTANCE_ID, GEN_MISMATCH, NOT_OWNER,
 * REBALANCE_IN_PROGRESS reason=offsets_reset, or a retriable error when the answer cannot be known);
 * else returns how long the answer holds without a change notification: Infinity for a group
 * coordinated here (watchGroup tells of every change), a lease's remainder for one coordinated elsewhere.
 */
export async function checkReadFence(b: BrokerContext, topic: string, partition: number, f: ReadFence, running = false): Promise<number> {
  // A running stream was admitted at its generation: from then on only the partition's ownership matters,
  // so a member that rejoins (a new generation) and keeps the partition keeps its stream.
  const generation = running ? undefined : f.generation;
  if (!remote(b, f.group)) {
    b.coordinator.checkRead({ group: f.group, topic, member: f.member, generation, partition });
    return Number.POSITIVE_INFINITY;
  }
  const { standing, validForMs } = await b.cluster!.memberLeases!.standing(f.group, topic, f.member, generation);
  if (generation !== undefined) checkGeneration(standing, generation);
  checkPartition(standing, partition);
  return validForMs;
}

/**
 * Calls `fn` on every change to the group while it is coordinated here (nothing for a group coordinated
 * elsewhere: its lease runs out instead). Returns the function that stops it.
 */
export function watchReadFence(b: BrokerContext, f: ReadFence, fn: () => void): () => void {
  // Registered either way: the group may move here while the stream runs, and a watcher costs nothing.
  return b.coordinator.watchGroup(f.group, fn);
}

/** Whether a refusal means the member lost the partition (the stream ends `removed`) rather than "retry". */
export function isFenced(err: TributaryError): boolean {
  return err.errorClass === 'fencing' || err.errorClass === 'not_found' || err.errorClass === 'validation';
}

function remote(b: BrokerContext, group: string): boolean {
  return b.cluster !== undefined && b.cluster.memberLeases !== undefined && !b.coordinator.coordinates(group);
}

import { TributaryError } from 'tributary-protocol/errors.js';
import type { ConsumerGroup, Member } from './group.js';

/**
 * What fences a member's use of a partition: one copy for commits (group-offsets.ts) and for reads
 * (CONSUME, STREAM with `member=`), whether the coordinator checks its own group or a partition leader
 * checks a coordinator's answer (cluster/member-leases.ts). docs/protocol.md, "Fencing of commits" and
 * "Fenced reads".
 */
export interface MemberStanding {
  group: string;
  /** The group's generation: what GEN_MISMATCH reports as `current`. */
  groupGeneration: number;
  memberId: string;
  /** The member's own generation (it keeps it until it rejoins): commits and reads must carry it. */
  generation: number;
  /** Whether the coordinator's owners map gives the partition to this member. */
  owns(partition: number): boolean;
  /** Whether an admin reset the partition's offsets since the member last synced. */
  isReset(partition: number): boolean;
}

/**
 * `topicId`: the id of the group's topic now. One other than the group's generation was assigned for (the
 * topic deleted and created again under its name since) counts as a reset of every partition: a reader
 * positioned in the old log must not read the new one from there nor commit that position into it; the
 * member rejoins, and that generation has it read the partitions anew (rebalance.ts).
 */
export function standingOf(g: ConsumerGroup, m: Member, topicId?: string): MemberStanding {
  const renewed = g.assignedForOtherTopic(topicId);
  return {
    group: g.groupId,
    groupGeneration: g.generation,
    memberId: m.memberId,
    generation: m.generation,
    owns: (p) => g.owners.get(p) === m.memberId,
    isReset: (p) => renewed || m.reset.has(p),
  };
}

/** The request must carry the member's own generation. */
export function checkGeneration(s: MemberStanding, generation: number): void {
  if (generation !== s.generation) throw new TributaryError('GEN_MISMATCH', { current: s.groupGeneration, requested: generation });
}

/** The member must own the partition, and its offsets must not have been reset since it synced. */
export function checkPartition(s: MemberStanding, partition: number): void {
  // Its offset was reset by an admin: what this member read before must not overwrite it; it rejoins.
  if (s.isReset(partition)) throw new TributaryError('REBALANCE_IN_PROGRESS', { group: s.group, generation: s.groupGeneration, reason: 'offsets_reset', partition });
  if (!s.owns(partition)) throw new TributaryError('NOT_OWNER', { partition, member: s.memberId });
}

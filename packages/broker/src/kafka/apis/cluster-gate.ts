/**
 * Cluster mode on the Kafka port (docs/kafka.md, "In a cluster"): the same leader and acknowledgement
 * gates as the main port's produce and consume. Only a partition's leader appends and serves reads
 * (NOT_LEADER_OR_FOLLOWER otherwise, which sends Kafka clients back to Metadata); acks -1 is refused
 * up front below min.insync.replicas and answered once every in-sync replica has the records.
 */
import type { Partition } from '../../partition/partition.js';
import type { KafkaRequestContext } from '../context.js';
import { KafkaApiError } from './handler.js';

/** The leader epoch the request is served under; undefined on a standalone broker. Throws NOT_LEADER. */
export function leaderGate(ctx: KafkaRequestContext, partition: Partition, acks?: number): number | undefined {
  const cluster = ctx.broker.cluster;
  if (!cluster) return undefined;
  const replica = cluster.requireLeader(partition.topic, partition.id);
  if (acks === -1) cluster.replicas.checkMinIsr(replica);
  return replica.leaderEpoch;
}

/**
 * Kafka's check of a request's currentLeaderEpoch (Partition.checkCurrentLeaderEpoch), then leaderGate, in
 * the order of Kafka's Partition.getLocalLog: a replica of the partition (a follower too) compares the
 * epoch with the one it knows first, so a client behind it is FENCED_LEADER_EPOCH (its metadata is stale:
 * it refreshes it) and one ahead UNKNOWN_LEADER_EPOCH (this broker has not caught up: the client retries),
 * and only a request at that epoch learns that this broker does not lead (NOT_LEADER_OR_FOLLOWER). A
 * broker that holds no replica of the partition answers NOT_LEADER_OR_FOLLOWER whatever the epoch, as
 * Kafka's answers for a partition it does not host. The leader serves the epoch Metadata reports (the
 * replica's in a cluster, 0 standalone). `requested` undefined: not checked (each API says which values
 * Kafka leaves unchecked). Returns the epoch served.
 */
export function leaderEpochGate(ctx: KafkaRequestContext, partition: Partition, requested: number | undefined): number {
  const replica = ctx.broker.cluster?.replicas.get(partition.topic, partition.id);
  if (replica && replica.role !== 'none') checkEpoch(partition, requested, replica.leaderEpoch);
  const served = leaderGate(ctx, partition) ?? 0;
  checkEpoch(partition, requested, served);
  return served;
}

function checkEpoch(partition: Partition, requested: number | undefined, known: number): void {
  if (requested === undefined || requested === known) return;
  const which = requested < known ? 'FENCED_LEADER_EPOCH' : 'UNKNOWN_LEADER_EPOCH';
  throw new KafkaApiError(which, `leader epoch ${requested} where ${partition.topic}[${partition.id}] is at epoch ${known} on this broker`);
}

/**
 * After the append: acks -1 waits until the high watermark passed `lastOffset` at `epoch`; acks 1 checks
 * the broker still leads at `epoch` (a record written by a demoted leader may not survive).
 */
export async function acknowledged(ctx: KafkaRequestContext, partition: Partition, lastOffset: number, acks: number, epoch: number | undefined): Promise<void> {
  const cluster = ctx.broker.cluster;
  if (!cluster || epoch === undefined) return;
  if (acks === -1) return cluster.replicas.waitReplicated(partition.topic, partition.id, epoch, lastOffset, ctx.broker.config.replicationTimeoutMs);
  const afterPause = cluster.replicas.checkLeadsAfterAppend(partition.topic, partition.id, epoch);
  if (afterPause) await afterPause;
}

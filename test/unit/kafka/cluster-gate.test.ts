/**
 * The order of a Fetch's or ListOffsets' partition checks (apis/cluster-gate.ts, docs/kafka.md "In a
 * cluster"), as Kafka's Partition.getLocalLog orders them: a replica of the partition checks the request's
 * currentLeaderEpoch against the epoch it knows first (FENCED_LEADER_EPOCH below it, UNKNOWN_LEADER_EPOCH
 * above), and only then whether it leads (NOT_LEADER_OR_FOLLOWER). A broker that holds no replica of the
 * partition answers NOT_LEADER_OR_FOLLOWER whatever the epoch, as Kafka's does for a partition it does not
 * host. A fake cluster: the replica's role and epoch are what the gate reads.
 */
import { describe, expect, it } from 'vitest';
import { TributaryError } from 'tributary-protocol/errors.js';
import type { KafkaRequestContext } from 'tributary-broker/kafka/context.js';
import { leaderEpochGate } from 'tributary-broker/kafka/apis/cluster-gate.js';
import { errorCodeOf } from 'tributary-broker/kafka/apis/handler.js';
import { kafkaErrorCode } from 'tributary-broker/kafka/protocol/error-codes.js';
import type { Partition } from 'tributary-broker/partition/partition.js';

const PARTITION = { topic: 'orders', id: 3 } as Partition;

/** A broker whose replica of orders[3] has `role` at leader epoch `epoch` (none: no replica object at all). */
function ctxWith(role: 'leader' | 'follower' | 'none' | 'absent', epoch: number): KafkaRequestContext {
  const replica = role === 'absent' ? undefined : { topic: PARTITION.topic, id: PARTITION.id, role, leaderEpoch: epoch };
  const cluster = {
    replicas: { get: (topic: string, partition: number) => (topic === PARTITION.topic && partition === PARTITION.id ? replica : undefined) },
    requireLeader: (topic: string, partition: number) => {
      if (replica?.role === 'leader') return replica;
      throw new TributaryError('NOT_LEADER', { topic, partition, reason: 'follower' });
    },
  };
  return { broker: { cluster } } as unknown as KafkaRequestContext;
}

/** The Kafka error code the gate answers (0: served, at the returned epoch). */
function gate(ctx: KafkaRequestContext, requested: number | undefined): number | { served: number } {
  try {
    return { served: leaderEpochGate(ctx, PARTITION, requested) };
  } catch (err) {
    return errorCodeOf(err);
  }
}

const FENCED = kafkaErrorCode('FENCED_LEADER_EPOCH');
const UNKNOWN = kafkaErrorCode('UNKNOWN_LEADER_EPOCH');
const NOT_LEADER = kafkaErrorCode('NOT_LEADER_OR_FOLLOWER');

describe('leaderEpochGate', () => {
  it('on a follower: an older epoch is FENCED_LEADER_EPOCH and a newer one UNKNOWN_LEADER_EPOCH before NOT_LEADER_OR_FOLLOWER', () => {
    const follower = ctxWith('follower', 5);
    expect(gate(follower, 4)).toBe(FENCED);
    expect(gate(follower, 0)).toBe(FENCED);
    expect(gate(follower, 6)).toBe(UNKNOWN);
    // The epoch it knows, or none given: then it is not the leader.
    expect(gate(follower, 5)).toBe(NOT_LEADER);
    expect(gate(follower, undefined)).toBe(NOT_LEADER);
  });

  it('on the leader: its epoch is served, an older one FENCED_LEADER_EPOCH, a newer one UNKNOWN_LEADER_EPOCH', () => {
    const leader = ctxWith('leader', 5);
    expect(gate(leader, 5)).toEqual({ served: 5 });
    expect(gate(leader, undefined)).toEqual({ served: 5 });
    expect(gate(leader, 4)).toBe(FENCED);
    expect(gate(leader, 6)).toBe(UNKNOWN);
  });

  it('on a broker that holds no replica of the partition: NOT_LEADER_OR_FOLLOWER whatever the epoch', () => {
    for (const ctx of [ctxWith('none', 5), ctxWith('absent', 5)]) {
      for (const requested of [4, 5, 6, undefined]) expect(gate(ctx, requested)).toBe(NOT_LEADER);
    }
  });

  it('standalone: epoch 0 is served, above it UNKNOWN_LEADER_EPOCH', () => {
    const standalone = { broker: {} } as unknown as KafkaRequestContext;
    expect(gate(standalone, 0)).toEqual({ served: 0 });
    expect(gate(standalone, undefined)).toEqual({ served: 0 });
    expect(gate(standalone, 1)).toBe(UNKNOWN);
  });
});

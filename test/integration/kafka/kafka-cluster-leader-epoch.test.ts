/**
 * Fetch and ListOffsets check `currentLeaderEpoch` in a cluster against the epoch the partition's leader
 * serves, the one Metadata reports (docs/kafka.md, "In a cluster"): once a killed leader was replaced, a
 * client still at the old epoch is FENCED_LEADER_EPOCH (it refreshes its metadata), one ahead of the leader
 * UNKNOWN_LEADER_EPOCH, and one at Metadata's epoch is served. A follower checks the epoch before it says
 * it does not lead, as Kafka's does: FENCED_LEADER_EPOCH or UNKNOWN_LEADER_EPOCH, else NOT_LEADER_OR_FOLLOWER.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { kafkaErrorCode } from 'tributary-broker/kafka/protocol/error-codes.js';
import type { KafkaStruct } from 'tributary-broker/kafka/protocol/schema.js';
import { TestCluster } from '../../helpers/cluster.js';
import { RawKafka } from '../../helpers/raw-kafka.js';

const TOPIC = 'epochs-rf3';

describe('currentLeaderEpoch on a cluster', () => {
  let cluster: TestCluster;

  beforeAll(async () => {
    cluster = await TestCluster.start(3, ['--kafka-port', '0']);
  }, 120_000);
  afterAll(async () => {
    await cluster?.dispose();
  });

  it('after a leader change: Metadata’s epoch is served, the old one FENCED_LEADER_EPOCH, a newer one UNKNOWN_LEADER_EPOCH', async () => {
    const first = await cluster.createInSync(TOPIC);
    expect(first.epoch).toBe(0);
    await cluster.broker(first.id).kill('SIGKILL');
    const next = await cluster.waitFor(`a new leader of ${TOPIC}[0]`, async () => {
      const l = await cluster.leaderOf(TOPIC, 0);
      return l.id >= 0 && l.id !== first.id ? l : false;
    });
    const raw = await RawKafka.connect(cluster.broker(next.id).kafkaPort);
    try {
      // Metadata from the leader, once it serves the partition at the new epoch.
      const epoch = await cluster.waitFor('the new leader serving', async () => {
        const meta = await raw.call(3, 9, { topics: [{ name: TOPIC }], allowAutoTopicCreation: false, includeTopicAuthorizedOperations: false });
        const p = ((meta.topics as KafkaStruct[])[0]!.partitions as KafkaStruct[])[0]!;
        const fetched = await fetchCode(raw, p.leaderEpoch as number);
        return p.leaderId === next.id && fetched === 0 ? (p.leaderEpoch as number) : false;
      });
      expect(epoch).toBe(next.epoch);
      expect(epoch).toBeGreaterThan(0);
      expect([await fetchCode(raw, epoch), await listCode(raw, epoch)]).toEqual([0, 0]);
      const FENCED = kafkaErrorCode('FENCED_LEADER_EPOCH');
      const UNKNOWN = kafkaErrorCode('UNKNOWN_LEADER_EPOCH');
      expect([await fetchCode(raw, first.epoch), await listCode(raw, first.epoch)]).toEqual([FENCED, FENCED]);
      expect([await fetchCode(raw, epoch + 1), await listCode(raw, epoch + 1)]).toEqual([UNKNOWN, UNKNOWN]);
      // Not checked: -1.
      expect([await fetchCode(raw, -1), await listCode(raw, -1)]).toEqual([0, 0]);

      // A follower checks the epoch first, as Kafka's Partition.getLocalLog: only a request at the epoch it
      // knows learns that it does not lead.
      const followerId = [0, 1, 2].find((id) => id !== first.id && id !== next.id)!;
      const follower = await RawKafka.connect(cluster.broker(followerId).kafkaPort);
      try {
        const NOT_LEADER = kafkaErrorCode('NOT_LEADER_OR_FOLLOWER');
        await cluster.waitFor('the follower at the new epoch', async () => (await fetchCode(follower, epoch)) === NOT_LEADER);
        expect([await fetchCode(follower, epoch), await listCode(follower, epoch)]).toEqual([NOT_LEADER, NOT_LEADER]);
        expect([await fetchCode(follower, -1), await listCode(follower, -1)]).toEqual([NOT_LEADER, NOT_LEADER]);
        expect([await fetchCode(follower, first.epoch), await listCode(follower, first.epoch)]).toEqual([FENCED, FENCED]);
        expect([await fetchCode(follower, epoch + 1), await listCode(follower, epoch + 1)]).toEqual([UNKNOWN, UNKNOWN]);
      } finally {
        follower.socket.destroy();
      }
    } finally {
      raw.socket.destroy();
      await cluster.broker(first.id).relaunch();
    }
  }, 120_000);
});

async function fetchCode(raw: RawKafka, currentLeaderEpoch: number): Promise<number> {
  const res = await raw.call(1, 11, {
    replicaId: -1,
    maxWaitMs: 0,
    minBytes: 0,
    maxBytes: 1 << 20,
    isolationLevel: 0,
    sessionId: 0,
    sessionEpoch: -1,
    topics: [{ topic: TOPIC, partitions: [{ partition: 0, currentLeaderEpoch, fetchOffset: 0, logStartOffset: -1, partitionMaxBytes: 1 << 20 }] }],
    forgottenTopicsData: [],
    rackId: '',
  });
  return ((res.responses as KafkaStruct[])[0]!.partitions as KafkaStruct[])[0]!.errorCode as number;
}

async function listCode(raw: RawKafka, currentLeaderEpoch: number): Promise<number> {
  const res = await raw.call(2, 5, {
    replicaId: -1,
    isolationLevel: 0,
    topics: [{ name: TOPIC, partitions: [{ partitionIndex: 0, currentLeaderEpoch, timestamp: -1 }] }],
  });
  return ((res.topics as KafkaStruct[])[0]!.partitions as KafkaStruct[])[0]!.errorCode as number;
}

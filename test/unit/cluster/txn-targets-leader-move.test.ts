/**
 * A transaction marker (or append) sent to a partition leader that froze: the request would wait out the
 * peer stall bound although the cluster moved the partition long before. ClusterTxnTargets gives the
 * request up as soon as another broker leads the partition, and a marker is written at the new leader.
 * A scripted ClusterNode stands in for the cluster: the frozen leader's connection never answers.
 */
import { describe, expect, it } from 'vitest';
import type { ClusterNode } from 'tributary-broker/cluster/cluster-node.js';
import { ClusterTxnTargets } from 'tributary-broker/cluster/cluster-txn-targets.js';
import type { GroupCoordinator } from 'tributary-broker/coordinator/group-coordinator.js';
import type { TopicManager } from 'tributary-broker/partition/topic-manager.js';
import { rec, until } from '../../helpers/util.js';

interface Sent {
  broker: number;
  command: string;
  fields: Record<string, unknown>;
}

function scriptedCluster() {
  const sent: Sent[] = [];
  const state = { leader: 1 };
  /** Broker 1 is frozen: it takes requests and never answers. Broker 2 answers at once. */
  const conn = (broker: number) => ({
    command: (command: string, fields: Record<string, unknown>) => {
      sent.push({ broker, command, fields });
      if (broker === 1) return new Promise<string>(() => {});
      return Promise.resolve('OK');
    },
    // TXN_APPEND goes as a transactional batch frame.
    produceBatch: (batch: Record<string, unknown>) => {
      sent.push({ broker, command: 'TXN_APPEND', fields: batch });
      if (broker === 1) return new Promise<never>(() => {});
      return Promise.resolve({ partition: 0, base_offset: 7, last_offset: 7, count: 1 });
    },
  });
  const cluster = {
    coordinatorEpoch: () => 3,
    isLeader: () => false,
    leaderAddress: () => ({ id: state.leader, advertisedAddress: `127.0.0.1:${9000 + state.leader}` }),
    leaderPeer: async () => conn(state.leader),
  };
  return { cluster: cluster as unknown as ClusterNode, sent, state };
}

const topics = { tryGet: () => ({}) } as unknown as TopicManager;
const groups = {} as GroupCoordinator;
describe('ClusterTxnTargets across a leader that froze', () => {
  it('writes the marker at the new leader once the partition moves, without waiting for the frozen one', async () => {
    const { cluster, sent, state } = scriptedCluster();
    const targets = new ClusterTxnTargets(cluster, topics, groups, async () => {});
    const marker = targets.marker('t', 0, 'p-1', 0, 'commit', 0);
    await until(() => sent.length === 1, 5000, 'the marker sent to broker 1');
    state.leader = 2;
    await marker;
    expect(sent.map((s) => [s.broker, s.command])).toEqual([
      [1, 'TXN_MARKER'],
      [2, 'TXN_MARKER'],
    ]);
    expect(sent[1]!.fields).toMatchObject({ topic: 't', partition: 0, producerId: 'p-1', epoch: 0, result: 'commit', coordinator_epoch: 3 });
  }, 10_000);

  it('fails an append in flight to the frozen leader with a retriable NOT_LEADER once the partition moves (it is not sent again)', async () => {
    const { cluster, sent, state } = scriptedCluster();
    const targets = new ClusterTxnTargets(cluster, topics, groups, async () => {});
    const append = targets.append('t', 0, [rec('v')], 'p-1', 0, 0);
    append.catch(() => {});
    await until(() => sent.length === 1, 5000, 'the append sent to broker 1');
    state.leader = 2;
    await expect(append).rejects.toMatchObject({ code: 'NOT_LEADER', retriable: true });
    expect(sent.map((s) => s.broker)).toEqual([1]);
  }, 10_000);
});

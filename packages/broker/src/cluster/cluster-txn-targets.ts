import type { TopicManager } from '../partition/topic-manager.js';
import type { MarkerType } from '../partition/txn-index.js';
import type { GroupCoordinator } from '../coordinator/group-coordinator.js';
import { OFFSETS_TOPIC } from '../coordinator/group-log.js';
import type { OffsetEntry } from '../coordinator/offset-store.js';
import { TributaryError } from 'tributary-protocol/errors.js';
import type { RecordInput } from 'tributary-protocol/record.js';
import type { BatchRecord } from 'tributary-protocol/batch.js';
import { LocalTxnTargets, type StageRequest, type TxnTargets, appendNext } from '../txn/txn-targets.js';
import type { ClusterNode } from './cluster-node.js';

/** How long a marker or an offset change keeps looking for a leader or coordinator that moved. */
const MOVE_WAIT_MS = 10_000;

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));
/** How often a request to a partition's leader checks that the broker it went to still leads. */
const LEADER_CHECK_MS = 100;

function retriableMove(err: unknown): boolean {
  return err instanceof TributaryError && ['NOT_LEADER', 'NOT_COORDINATOR', 'COORDINATOR_LOADING', 'connection_lost', 'request_timeout', 'not_ready'].includes(err.code);
}

/**
 * Cluster mode: a transaction's data partitions and groups may live on other brokers. Local ones are
 * handled here as standalone; the others get the broker-only commands TXN_APPEND, TXN_MARKER and
 * TXN_GROUP_OFFSETS on a connection per broker (pipelined, so one partition's appends keep their order).
 * Appends are not retried after a send (it may have applied: the transaction then fails and is aborted);
 * markers and offset changes are safe to repeat and follow leadership moves.
 */
export class ClusterTxnTargets implements TxnTargets {
  private readonly local: LocalTxnTargets;

  constructor(
    private readonly cluster: ClusterNode,
    private readonly topics: TopicManager,
    private readonly groups: GroupCoordinator,
    /** Waits for replication of an append made while leading at `epoch` (commands.ts replicated()). */
    private readonly replicated: (topic: string, partition: number, lastOffset: number, epoch: number) => Promise<void>,
  ) {
    this.local = new LocalTxnTargets(topics, groups);
  }

  async append(topic: string, partition: number, records: RecordInput[], producerId: string, epoch: number, txnPartition: number): Promise<{ offset: number }> {
    // Our own epoch as the transaction's coordinator: the data leader refuses the append once a newer
    // coordinator of that partition is known, so an append held up in the network cannot land after the
    // new coordinator's marker ended the transaction.
    const coordinatorEpoch = this.cluster.coordinatorEpoch(txnPartition);
    if (this.cluster.isLeader(topic, partition)) {
      this.cluster.checkTxnCoordinator(txnPartition, coordinatorEpoch);
      const leaderEpoch = this.cluster.requireLeader(topic, partition).leaderEpoch;
      const res = await appendNext(this.topics, topic, partition, records, producerId, epoch);
      await this.replicated(topic, partition, res.lastOffset, leaderEpoch);
      return res;
    }
    const leaderId = this.cluster.leaderAddress(topic, partition)?.id;
    const conn = await this.cluster.leaderPeer(topic, partition);
    // A transactional batch frame (TXN_APPEND): binary key, value, headers and timestamp as sent.
    const frames: BatchRecord[] = records.map((r) => ({ offset: 0, sequence: 0, producerId: '', key: r.key, epoch: -1, value: r.value, timestamp: r.timestamp ?? 0, attributes: 0, headers: r.headers ?? [] }));
    const txn = { transactionalId: '', producerId, epoch, coordinatorPartition: txnPartition, coordinatorEpoch };
    const reply = await this.whileLeading(topic, partition, leaderId, conn.produceBatch({ topic, partition, acks: 'all', idempotent: false, firstSequence: 0, lastSequence: 0, records: frames, txn }));
    return { offset: reply.base_offset };
  }

  marker(topic: string, partition: number, producerId: string, epoch: number, type: MarkerType, txnPartition: number): Promise<void> {
    const coordinatorEpoch = this.cluster.coordinatorEpoch(txnPartition);
    return this.following(async () => {
      if (!this.topics.tryGet(topic)) return;
      if (this.cluster.isLeader(topic, partition)) {
        this.cluster.checkTxnCoordinator(txnPartition, coordinatorEpoch);
        this.cluster.noteTxnCoordinator(txnPartition, coordinatorEpoch);
        const leaderEpoch = this.cluster.requireLeader(topic, partition).leaderEpoch;
        const part = this.topics.get(topic).partition(partition);
        const m = await part.writeMarker(producerId, epoch, type);
        await this.replicated(topic, partition, m.offset, leaderEpoch);
        return;
      }
      const leaderId = this.cluster.leaderAddress(topic, partition)?.id;
      const conn = await this.cluster.leaderPeer(topic, partition);
      const sent = conn.command('TXN_MARKER', { topic, partition, producerId, epoch, result: type, coordinator_partition: txnPartition, coordinator_epoch: coordinatorEpoch });
      await this.whileLeading(topic, partition, leaderId, sent);
    });
  }

  stageOffsets(txn: string, req: StageRequest): Promise<void> {
    if (this.groups.coordinates(req.group)) return this.local.stageOffsets(txn, req);
    // Staging is fenced (generation, ownership): not repeated blindly, a failure fails the request. A
    // Kafka group's member is checked at the group's coordinator as its commits are (kind=classic).
    const c = req.classic;
    return this.remoteOffsets(req.group, {
      op: 'stage',
      transactional_id: txn,
      group: req.group,
      topic: req.topic,
      ...(c ? { kind: 'classic', member: c.memberId, generation: c.generation, ...(c.instanceId !== null ? { instance: c.instanceId } : {}) } : { member: req.member, generation: req.generation }),
      entries: req.entries,
    });
  }

  applyOffsets(txn: string, group: string, topic: string, entries: OffsetEntry[]): Promise<void> {
    return this.following(() =>
      this.groups.coordinates(group) ? this.local.applyOffsets(txn, group, topic, entries) : this.remoteOffsets(group, { op: 'apply', transactional_id: txn, group, topic, entries }),
    );
  }

  clearOffsets(txn: string, group: string, topic: string, partitions: number[]): Promise<void> {
    const entries = partitions.map((partition) => ({ partition, offset: 0 }));
    return this.following(() =>
      this.groups.coordinates(group) ? this.local.clearOffsets(txn, group, topic, partitions) : this.remoteOffsets(group, { op: 'clear', transactional_id: txn, group, topic, entries }),
    );
  }

  async restorePending(txn: string, group: string, topic: string, partitions: number[]): Promise<void> {
    const entries = partitions.map((partition) => ({ partition, offset: 0 }));
    await this.following(() =>
      this.groups.coordinates(group)
        ? this.local.restorePending(txn, group, topic, partitions)
        : this.remoteOffsets(group, { op: 'restore', transactional_id: txn, group, topic, entries }),
    ).catch(() => {
      // Best effort: a coordinator that cannot be reached loses only the "unstable" hint, not offsets.
    });
  }

  /** Repeats `fn` while the leader or coordinator it needs is moving. */
  /**
   * `request`, sent to the broker `leaderId` as the partition's leader, or a retriable NOT_LEADER as soon
   * as another broker leads it: a leader that froze answers nothing until the peer stall bound (3 s)
   * ends the wait, although the cluster may have moved the partition long before. A marker is then
   * written again at the new leader (repeating one is safe); an append fails and spoils its transaction,
   * as it would have after the stall. What the frozen broker does with the request later is refused or
   * truncated: it no longer leads.
   */
  private whileLeading<T>(topic: string, partition: number, leaderId: number | undefined, request: Promise<T>): Promise<T> {
    request.catch(() => {});
    let timer: NodeJS.Timeout | undefined;
    const moved = new Promise<never>((_, reject) => {
      timer = setInterval(() => {
        if (this.cluster.leaderAddress(topic, partition)?.id !== leaderId) {
          reject(new TributaryError('NOT_LEADER', { topic, partition, reason: 'leadership moved while the request was in flight' }));
        }
      }, LEADER_CHECK_MS);
      timer.unref();
    });
    moved.catch(() => {});
    return Promise.race([request, moved]).finally(() => clearInterval(timer));
  }

  private async following(fn: () => Promise<void>): Promise<void> {
    const deadline = performance.now() + MOVE_WAIT_MS;
    for (let attempt = 1; ; attempt++) {
      try {
        return await fn();
      } catch (err) {
        if (!retriableMove(err) || performance.now() > deadline) throw err;
        await sleep(Math.min(500, 50 * attempt));
      }
    }
  }

  private async remoteOffsets(
    group: string,
    f: { op: string; transactional_id: string; group: string; topic: string; kind?: string; member?: string; instance?: string; generation?: number; entries: OffsetEntry[] },
  ): Promise<void> {
    if (!this.topics.tryGet(OFFSETS_TOPIC)) throw new TributaryError('COORDINATOR_LOADING', { reason: `no ${OFFSETS_TOPIC} yet` });
    const conn = await this.cluster.leaderPeer(OFFSETS_TOPIC, this.groups.partitionFor(group));
    const { entries, ...fields } = f;
    await conn.command('TXN_GROUP_OFFSETS', fields, [entries.map((e) => `P${e.partition}:${e.offset}`).join(',')]);
  }
}

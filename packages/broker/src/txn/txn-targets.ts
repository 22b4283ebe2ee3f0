import type { MarkerType } from '../partition/txn-index.js';
import type { TopicManager } from '../partition/topic-manager.js';
import type { GroupCoordinator } from '../coordinator/group-coordinator.js';
import type { OffsetEntry } from '../coordinator/offset-store.js';
import type { ClassicMemberRef } from '../coordinator/classic-groups.js';
import type { RecordInput } from 'tributary-protocol/record.js';

/** Offsets a transaction sends for a group, as SEND_OFFSETS_TO_TXN checks them. */
export interface StageRequest {
  group: string;
  topic: string;
  member: string;
  generation: number;
  entries: OffsetEntry[];
  /**
   * A Kafka classic group's member (TxnOffsetCommit): checked as that group's commits are, in place of
   * `member` and `generation`, by the group's coordinator when the offsets are staged.
   */
  classic?: Omit<ClassicMemberRef, 'group'>;
}

/**
 * What a transaction touches outside the coordinator: data partitions (records and markers) and group
 * coordinators (offsets). Standalone, everything is in this process; in a cluster, a partition's leader or
 * a group's coordinator may be another broker (src/cluster/cluster-txn-targets.ts).
 */
export interface TxnTargets {
  /**
   * Appends records of the producer's transaction to the partition's leader (their first offset). Calls for one partition
   * must reach it in call order: the partition numbers a producer epoch's records itself. `txnPartition`:
   * the `__transaction_state` partition of the transaction (in a cluster the leader fences appends from a
   * coordinator that has been replaced).
   */
  append(topic: string, partition: number, records: RecordInput[], producerId: string, epoch: number, txnPartition: number): Promise<{ offset: number }>;
  /** A commit or abort marker (durable, and replicated in a cluster, when resolved). */
  marker(topic: string, partition: number, producerId: string, epoch: number, type: MarkerType, txnPartition: number): Promise<void>;
  /** Stages the offsets under the transaction, checked by the group's coordinator (req.classic: a Kafka group's check). */
  stageOffsets(txn: string, req: StageRequest): Promise<void>;
  applyOffsets(txn: string, group: string, topic: string, entries: OffsetEntry[]): Promise<void>;
  clearOffsets(txn: string, group: string, topic: string, partitions: number[]): Promise<void>;
  /** After a restart: offsets of a transaction still open are pending again. */
  restorePending(txn: string, group: string, topic: string, partitions: number[]): Promise<void>;
}

/**
 * Appends a transactional record with the partition's next sequence for the producer epoch: computed from
 * the partition's own producer state, synchronously with the append, so concurrent appends of one
 * producer get consecutive sequences in call order. The partition refuses an older epoch.
 */
export async function appendNext(
  topics: TopicManager,
  topic: string,
  partition: number,
  records: RecordInput[],
  producerId: string,
  epoch: number,
): Promise<{ offset: number; lastOffset: number }> {
  const part = topics.get(topic).partition(partition);
  // Calls waiting here resume in call order, so the sequences below still follow it.
  if (!part.producerState() || !part.txnIndex()) await Promise.all([part.whenProducerStateReady(), part.whenTxnIndexReady()]);
  const d = part.producerState()?.describe(producerId);
  const seq = d && d.epoch === epoch ? d.lastSeq + 1 : 0;
  const res = await part.appendTransactional(records, { producerId, epoch, firstSequence: seq, lastSequence: seq + records.length - 1 });
  return { offset: res.baseOffset, lastOffset: res.lastOffset };
}

/** Stages at this broker's group coordinator: a Kafka group's member with its own check, else Tributary's. */
export function stageLocally(groups: GroupCoordinator, txn: string, req: StageRequest): Promise<void> {
  if (!req.classic) return groups.stageTxnOffsets(txn, req);
  const check = groups.classic.memberCheck({ group: req.group, ...req.classic }, { transactional: true });
  return groups.stageTxnOffsetsChecked(txn, { group: req.group, topic: req.topic, entries: req.entries }, check);
}

/** Standalone: every partition and group is local. */
export class LocalTxnTargets implements TxnTargets {
  constructor(
    private readonly topics: TopicManager,
    private readonly groups: GroupCoordinator,
  ) {}

  append(topic: string, partition: number, records: RecordInput[], producerId: string, epoch: number, _txnPartition: number): Promise<{ offset: number }> {
    return appendNext(this.topics, topic, partition, records, producerId, epoch);
  }

  async marker(topic: string, partition: number, producerId: string, epoch: number, type: MarkerType, _txnPartition: number): Promise<void> {
    // A deleted topic took the transaction's records with it.
    const part = this.topics.tryGet(topic)?.partitions[partition];
    if (part) await part.writeMarker(producerId, epoch, type);
  }

  stageOffsets(txn: string, req: StageRequest): Promise<void> {
    return stageLocally(this.groups, txn, req);
  }

  applyOffsets(txn: string, group: string, topic: string, entries: OffsetEntry[]): Promise<void> {
    return this.groups.applyTxnOffsets(txn, group, topic, entries);
  }

  async clearOffsets(txn: string, group: string, topic: string, partitions: number[]): Promise<void> {
    this.groups.clearPending(txn, group, topic, partitions);
  }

  async restorePending(txn: string, group: string, topic: string, partitions: number[]): Promise<void> {
    this.groups.markPending(txn, group, topic, partitions);
  }
}

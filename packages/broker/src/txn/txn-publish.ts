import type { Clock } from '../common/clock.js';
import type { TopicManager } from '../partition/topic-manager.js';
import { TributaryError } from 'tributary-protocol/errors.js';
import type { RecordInput } from 'tributary-protocol/record.js';
import type { TxnLog } from './txn-log.js';
import type { TxnTargets } from './txn-targets.js';
import { type Entry, type TxnPublishResult, checkOpen, partKey, txnState } from './txn-entry.js';

/**
 * TXN_PUBLISH for the transaction coordinator (txn-coordinator.ts): the one request that does not run
 * under the transactional id's lock, so a producer's records pipeline. It checks the state before and
 * after registering its partition, and END_TXN waits for the appends it has started (Entry.inflight).
 * See docs/architecture.md, "Transaction coordinator".
 */
export class TxnPublisher {
  constructor(
    private readonly deps: {
      topics: TopicManager;
      log: TxnLog;
      targets: TxnTargets;
      /** Every time the coordinator reads and every timer it arms. */
      clock: Clock;
      partitionFor: (transactionalId: string) => number;
    },
  ) {}

  /** One record of the open transaction `e` (of id `id`, whose ownership the coordinator checked). */
  publish(e: Entry, id: string, producerId: string, epoch: number, topicName: string, explicit: number | undefined, record: RecordInput, seqNum: number): Promise<TxnPublishResult> {
    checkOpen(e, producerId, epoch);
    const prior = e.results.get(seqNum);
    if (prior) return prior.then((r) => ({ ...r, duplicate: true }));
    if (seqNum !== e.lastSeq + 1) {
      throw new TributaryError('out_of_order_sequence', { transactional_id: id, sequence: seqNum, expected: e.lastSeq + 1 });
    }
    if (e.spoiled) throw txnState(id, e.meta.state, e.spoiled);
    const topic = this.deps.topics.get(topicName);
    const partition = topic.choosePartition(explicit, record.key);
    topic.partition(partition);
    e.lastSeq = seqNum;
    const result = this.append(e, topicName, partition, record, producerId, epoch).catch((err: unknown) => {
      const reason = `record ${seqNum} of the transaction failed (${err instanceof TributaryError ? err.code : 'error'}); abort it`;
      e.spoiled ??= reason;
      // The append may have landed, so it is never tried again: a retriable error would only have the
      // producer retry this seqNum (answered from this same result) until the transaction times out.
      if (err instanceof TributaryError && !err.retriable) throw err;
      throw txnState(id, e.meta.state, reason);
    });
    e.results.set(seqNum, result);
    result.catch(() => {});
    return result;
  }

  private async append(e: Entry, topicName: string, partition: number, record: RecordInput, producerId: string, epoch: number): Promise<TxnPublishResult> {
    const k = partKey(topicName, partition);
    let add = e.adds.get(k);
    if (!add) {
      e.meta.partitions.push({ topic: topicName, partition });
      e.meta.updatedMs = this.deps.clock.now();
      add = this.deps.log.write(e.meta);
      e.adds.set(k, add);
    }
    // Publishes to one partition wait on the same promise, so they append in arrival order.
    await add;
    // END_TXN, a timeout or a new epoch may have come in meanwhile.
    checkOpen(e, producerId, epoch);
    const appended = this.deps.targets.append(topicName, partition, record, producerId, epoch, this.deps.partitionFor(e.meta.transactionalId));
    e.inflight.add(appended);
    try {
      const res = await appended;
      return { partition, offset: res.offset, duplicate: false };
    } finally {
      e.inflight.delete(appended);
    }
  }
}

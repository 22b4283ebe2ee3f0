import type { Clock } from '../common/clock.js';
import { TributaryError } from 'tributary-protocol/errors.js';
import type { TxnLog } from './txn-log.js';
import { type CommitCheck, type Entry, RECOVERED, STATUS, checkOpen, checkProducer, partKey, txnState } from './txn-entry.js';

/**
 * A previous transaction of the id is still being finished (its markers and offsets): Kafka's
 * CONCURRENT_TRANSACTIONS, on which a client retries. Its code stays Tributary's invalid_txn_state. Only
 * AddPartitionsToTxn, AddOffsetsToTxn and a KIP-360 InitProducerId that fenced an open transaction
 * (txn-coordinator.ts) raise it, at the id's coordinator itself, so it never has to survive a
 * broker-to-broker reply.
 */
export class ConcurrentTransactionsError extends TributaryError {
  constructor(id: string, state: string) {
    super('invalid_txn_state', { transactional_id: id, state, reason: 'the previous transaction is still being finished; retry' });
  }
}

/**
 * The Kafka port's transactions (docs/kafka.md, "Transactions") on the transaction coordinator
 * (txn-coordinator.ts): a Kafka transaction begins implicitly with its first AddPartitionsToTxn or
 * AddOffsetsToTxn, and registers each partition before it produces to it; its records carry the
 * producer's own per-partition sequences, appended by the Produce handler through `append`. The
 * registration is durable in `__transaction_state` before it is answered, so an abort after a crash knows
 * every partition to mark. InitProducerId and TxnOffsetCommit are the coordinator's own initProducerId
 * and sendOffsets; EndTxn its endTxn.
 */
export class KafkaTransactions {
  constructor(
    private readonly deps: {
      log: TxnLog;
      clock: Clock;
      /** The id's entry; transactional_id_not_found when none. */
      entry: (id: string) => Entry;
      /** Throws NOT_COORDINATOR when another broker coordinates the id (cluster mode). */
      checkOwner: (id: string) => void;
      withTxn: <T>(id: string, fn: () => Promise<T>) => Promise<T>;
      /** Opens a new transaction of the entry, durably (the coordinator's BEGIN_TXN step; under the lock). */
      open: (e: Entry) => Promise<void>;
      /** The coordinator's END_TXN. */
      endTxn: (id: string, producerId: string, epoch: number, result: 'commit' | 'abort', check?: CommitCheck) => Promise<unknown>;
    },
  ) {}

  /** The transaction of the id is open at this epoch, begun now when none is; under the id's lock. */
  private async ensureOpen(e: Entry, producerId: string, epoch: number): Promise<void> {
    checkProducer(e, producerId, epoch);
    const m = e.meta;
    if (m.state === 'open') {
      if (e.recovered) throw txnState(m.transactionalId, m.state, RECOVERED);
      return;
    }
    if (m.state === 'prepare_commit' || m.state === 'prepare_abort') throw new ConcurrentTransactionsError(m.transactionalId, STATUS[m.state]);
    // Aborted by a coordinator restart (the epoch unchanged): the producer still thinks it is open. Beginning
    // a new one implicitly would let it commit the rest of its transaction without the part that was
    // aborted; it must end it with an abort first (endTxn below).
    if (m.state === 'aborted' && m.abortReason === RECOVERED && e.endedEpoch === m.epoch) {
      throw txnState(m.transactionalId, m.state, `${RECOVERED}; end it with an abort before the next one`);
    }
    await this.deps.open(e);
  }

  /**
   * EndTxn: the coordinator's END_TXN. An abort also acknowledges an abort the coordinator decided when it
   * recovered the transaction: the producer's next transaction may then begin. (Only in memory: after
   * another restart the producer is asked to abort once more.)
   */
  async endTxn(id: string, producerId: string, epoch: number, result: 'commit' | 'abort', check?: CommitCheck): Promise<void> {
    // Answered once the decision is durable, though its markers may still be retried (the coordinator's
    // END_TXN): kafkajs does not retry a failed EndTxn, and would give up a transaction that commits.
    await this.deps.endTxn(id, producerId, epoch, result, check);
    if (result !== 'abort') return;
    await this.deps.withTxn(id, async () => {
      const m = this.deps.entry(id).meta;
      if (m.state === 'aborted' && m.abortReason === RECOVERED && m.producerId === producerId && m.epoch === epoch) m.abortReason = undefined;
    });
  }

  /**
   * AddPartitionsToTxn: the partitions join the open transaction (begun if none is), durably before this
   * resolves. Partitions already in it are answered again. The caller checked that they exist.
   */
  addPartitions(id: string, producerId: string, epoch: number, partitions: Array<{ topic: string; partition: number }>): Promise<void> {
    this.deps.checkOwner(id);
    return this.deps.withTxn(id, async () => {
      const e = this.deps.entry(id);
      await this.ensureOpen(e, producerId, epoch);
      const m = e.meta;
      const fresh = partitions.filter((tp, i) => !e.adds.has(partKey(tp.topic, tp.partition)) && partitions.findIndex((x) => x.topic === tp.topic && x.partition === tp.partition) === i);
      // Registered earlier (by this request's retry, say): durable once their write is.
      const earlier = partitions.map((tp) => e.adds.get(partKey(tp.topic, tp.partition))).filter((p) => p !== undefined);
      if (fresh.length > 0) {
        for (const tp of fresh) m.partitions.push({ topic: tp.topic, partition: tp.partition });
        m.updatedMs = this.deps.clock.now();
        const write = this.deps.log.write(m);
        for (const tp of fresh) e.adds.set(partKey(tp.topic, tp.partition), write);
        try {
          await write;
        } catch (err) {
          // Not registered: Produce to them is refused. They stay in the metadata (a marker on a partition
          // the transaction never wrote changes nothing), and a retry writes them again.
          for (const tp of fresh) if (e.adds.get(partKey(tp.topic, tp.partition)) === write) e.adds.delete(partKey(tp.topic, tp.partition));
          throw err;
        }
      }
      await Promise.all(earlier);
    });
  }

  /** AddOffsetsToTxn: the group's offsets may be sent to the open transaction (begun if none is). */
  addOffsets(id: string, producerId: string, epoch: number): Promise<void> {
    this.deps.checkOwner(id);
    return this.deps.withTxn(id, async () => {
      await this.ensureOpen(this.deps.entry(id), producerId, epoch);
    });
  }

  /**
   * The id's entry and a check, run again after every wait (synchronously with what follows it), that the
   * partition's registration in the open transaction at this epoch is the one to wait for.
   */
  private registration(id: string, producerId: string, epoch: number, topic: string, partition: number): { e: Entry; check: (admitted?: boolean) => Promise<void> } {
    this.deps.checkOwner(id);
    const e = this.deps.entry(id);
    const k = partKey(topic, partition);
    const check = (admitted = false): Promise<void> => {
      checkOpen(e, producerId, epoch, admitted);
      const add = e.adds.get(k);
      if (!add) throw txnState(id, e.meta.state, `${topic}[${partition}] was not added to the transaction (AddPartitionsToTxn first)`);
      return add;
    };
    return { e, check };
  }

  /**
   * Cluster mode, asked by a partition's leader on another broker before it appends a transactional
   * Produce batch (TXN_VERIFY, docs/kafka.md "Transactions"): resolves once the partition is durably
   * registered in the id's open transaction at this producer epoch, else invalid_txn_state (or the
   * producer's fencing error). The leader appends only if no marker of the producer reached the partition
   * meanwhile (kafka/apis/txn-produce.ts), so the append cannot land after the transaction ended there.
   */
  async verify(id: string, producerId: string, epoch: number, topic: string, partition: number): Promise<void> {
    const { e, check } = this.registration(id, producerId, epoch, topic, partition);
    const add = check();
    await add;
    if (check() !== add) throw txnState(id, e.meta.state, `${topic}[${partition}] was registered again meanwhile`);
  }

  /**
   * A transactional Produce batch: `start` appends it (with the producer's sequences) once the partition
   * is durably registered in the open transaction at this epoch; otherwise invalid_txn_state (or the
   * producer's fencing error) and nothing is appended. Not under the id's lock (produces pipeline); the
   * state is checked again right before the append starts, synchronously with it. From its first check
   * it is in flight (Entry.inflight): EndTxn commit waits for it before deciding, and is refused if it
   * failed; an abort (EndTxn, a timeout or a new epoch) waits for it before writing markers.
   */
  async append<T>(id: string, producerId: string, epoch: number, topic: string, partition: number, start: () => Promise<T>): Promise<T> {
    const { e, check } = this.registration(id, producerId, epoch, topic, partition);
    const add = check();
    const appended = (async () => {
      await add;
      // A decided EndTxn, a timeout, a new epoch or a failed registration may have come in meanwhile.
      if (check(true) !== add) throw txnState(id, e.meta.state, `${topic}[${partition}] was registered again meanwhile`);
      return start();
    })();
    e.inflight.add(appended);
    try {
      return await appended;
    } finally {
      e.inflight.delete(appended);
    }
  }
}

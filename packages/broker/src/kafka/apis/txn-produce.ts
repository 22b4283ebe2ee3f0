/**
 * A transactional Produce batch at the partition's leader (docs/kafka.md, "Transactions"). Where this
 * broker coordinates the transactional id, the coordinator's own check and in-flight tracking hold the
 * append (KafkaTransactions.append: EndTxn waits for it). In a cluster where another broker coordinates
 * the id, this leader asks that coordinator (TXN_VERIFY) whether the partition is durably in the id's
 * open transaction at the batch's epoch, and appends only if no marker of the producer began on the
 * partition since the batch arrived: the transaction may end and its marker reach this partition before
 * the append, which would then open a transaction nobody ends (Kafka's "hanging transaction", KIP-890) or
 * join the producer's next transaction of the same epoch. Such a batch is INVALID_TXN_STATE. One
 * producer's batches to one partition are verified and appended in the order they arrived.
 */
import { TributaryError } from 'tributary-protocol/errors.js';
import type { RecordInput } from 'tributary-protocol/record.js';
import type { Partition } from '../../partition/partition.js';
import type { IdempotentAppend, TransactionalBatch } from '../../partition/partition-types.js';
import { TXN_STATE_TOPIC } from '../../txn/txn-log.js';
import type { KafkaRequestContext } from '../context.js';
import { leaderGate } from './cluster-gate.js';

/** How long a leader keeps looking for a transaction coordinator that is moving or loading. */
const COORDINATOR_WAIT_MS = 5_000;
const MOVING = new Set(['NOT_COORDINATOR', 'COORDINATOR_LOADING', 'COORDINATOR_NOT_AVAILABLE', 'NOT_LEADER', 'connection_lost', 'request_timeout', 'not_ready']);

/** Per partition, per producer id: the last verified append queued. */
const queues = new WeakMap<Partition, Map<string, Promise<unknown>>>();

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

/**
 * Appends `records` of transactional batch `b` to `partition` (this broker leads it at `leaderEpoch`) if
 * the transaction holds it; invalid_txn_state or the producer's fencing error otherwise, nothing appended.
 */
export function transactionalAppend(
  ctx: KafkaRequestContext,
  txnId: string,
  b: TransactionalBatch,
  partition: Partition,
  records: RecordInput[],
  leaderEpoch: number | undefined,
): Promise<IdempotentAppend> {
  const txns = ctx.broker.transactions;
  const cluster = ctx.broker.cluster;
  // Still the leader, at the same epoch, when the append finally starts (after waiting on the coordinator).
  const append = () => {
    if (leaderGate(ctx, partition) !== leaderEpoch) throw new TributaryError('NOT_LEADER', { topic: partition.topic, partition: partition.id, reason: 'leadership moved' });
    return partition.appendTransactional(records, b);
  };
  if (!cluster || cluster.isLeader(TXN_STATE_TOPIC, txns.partitionFor(txnId))) {
    return txns.kafka.append(txnId, b.producerId, b.epoch, partition.topic, partition.id, append);
  }
  let byProducer = queues.get(partition);
  if (!byProducer) queues.set(partition, (byProducer = new Map()));
  const queue = byProducer;
  // The baseline is taken when the batch arrives: a marker of this producer after it ended the
  // transaction the batch belongs to (a later one of the same epoch must not take it).
  const ready = partition.txnIndex() ? Promise.resolve() : partition.whenTxnIndexReady();
  const baseline = ready.then(() => ({ index: partition.txnIndex(), seen: partition.txnIndex()?.markersOf(b.producerId) }));
  const run = () => baseline.then((base) => verifiedAppend(ctx, txnId, b, partition, append, base));
  const prior = queue.get(b.producerId);
  const p = prior ? prior.then(run, run) : run();
  queue.set(b.producerId, p);
  const done = () => {
    if (queue.get(b.producerId) === p) queue.delete(b.producerId);
  };
  p.then(done, done);
  return p;
}

async function verifiedAppend(
  ctx: KafkaRequestContext,
  txnId: string,
  b: TransactionalBatch,
  partition: Partition,
  append: () => Promise<IdempotentAppend>,
  base: { index: ReturnType<Partition['txnIndex']>; seen: number | undefined },
): Promise<IdempotentAppend> {
  await askCoordinator(ctx, txnId, b, partition);
  // Synchronous from the check to the append call: a marker begun later is written after the append.
  if (partition.txnIndex() === base.index && base.index?.markersOf(b.producerId) === base.seen) return append();
  throw new TributaryError('invalid_txn_state', { topic: partition.topic, partition: partition.id, reason: "the producer's transaction ended on this partition while the batch waited" });
}

/** TXN_VERIFY at the id's coordinator, following it while it moves or loads. */
async function askCoordinator(ctx: KafkaRequestContext, txnId: string, b: TransactionalBatch, partition: Partition): Promise<void> {
  const cluster = ctx.broker.cluster!;
  const deadline = Date.now() + COORDINATOR_WAIT_MS;
  const fields = { transactional_id: txnId, producerId: b.producerId, epoch: b.epoch, topic: partition.topic, partition: partition.id };
  for (let attempt = 1; ; attempt++) {
    try {
      const txnPartition = ctx.broker.transactions.partitionFor(txnId);
      // Moved here meanwhile: this broker's own coordinator answers.
      if (cluster.isLeader(TXN_STATE_TOPIC, txnPartition)) return await ctx.broker.transactions.kafka.verify(txnId, b.producerId, b.epoch, partition.topic, partition.id);
      await (await cluster.leaderPeer(TXN_STATE_TOPIC, txnPartition)).command('TXN_VERIFY', fields);
      return;
    } catch (err) {
      const moving = err instanceof TributaryError && MOVING.has(err.code);
      if (!moving) throw err;
      // Retriable for the producer, which sends the batch again (Kafka answers NOT_ENOUGH_REPLICAS here too).
      if (Date.now() > deadline) throw new TributaryError('NOT_ENOUGH_REPLICAS', { reason: `the transaction coordinator of ${txnId} did not answer: ${err.code}` });
      await sleep(Math.min(500, 50 * attempt));
    }
  }
}

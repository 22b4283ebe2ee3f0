/**
 * A transactional Produce batch at the partition's leader (docs/kafka.md, "Transactions"). Where this
 * broker coordinates the transactional id, the coordinator's own check and in-flight tracking hold the
 * append (KafkaTransactions.append: EndTxn waits for it). In a cluster where another broker coordinates
 * the id, this leader asks that coordinator (TXN_VERIFY) whether the partition is durably in the id's
 * open transaction at the batch's epoch. Either way it appends only if no marker of the producer began on
 * the partition since the batch arrived: the transaction may end and its marker reach this partition
 * before the append, which would then open a transaction nobody ends (Kafka's "hanging transaction",
 * KIP-890) or join the producer's next transaction of the same epoch. Such a batch is INVALID_TXN_STATE. One
 * producer's batches to one partition are verified and appended in the order they arrived, whichever
 * broker coordinates the id when each one's turn comes.
 */
import { TributaryError } from 'tributary-protocol/errors.js';
import type { RecordInput } from 'tributary-protocol/record.js';
import type { Partition } from '../../partition/partition.js';
import type { IdempotentAppend, TransactionalBatch } from '../../partition/partition-types.js';
import { TXN_STATE_TOPIC } from '../../txn/txn-log.js';
import type { KafkaRequestContext } from '../context.js';
import { leaderGate } from './cluster-gate.js';
import { refusal } from './handler.js';

/** How long a leader keeps looking for a transaction coordinator that is moving, loading or silent. */
const COORDINATOR_WAIT_MS = 5_000;
const MOVING = new Set(['NOT_COORDINATOR', 'COORDINATOR_LOADING', 'COORDINATOR_NOT_AVAILABLE', 'NOT_LEADER', 'connection_lost', 'request_timeout', 'not_ready']);

/** Per partition, per producer id: the end of the last queued batch's turn. */
const queues = new WeakMap<Partition, Map<string, Promise<void>>>();

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

/**
 * Appends `records` of transactional batch `b` to `partition` (this broker leads it at `leaderEpoch`) if
 * the transaction holds it; invalid_txn_state or the producer's fencing error otherwise, nothing appended.
 * `waitMs`, counted from the batch's arrival (also while it waits behind the producer's earlier batches),
 * bounds its wait for a remote coordinator that is moving, loading or silent.
 */
export function transactionalAppend(
  ctx: KafkaRequestContext,
  txnId: string,
  b: TransactionalBatch,
  partition: Partition,
  records: RecordInput[],
  leaderEpoch: number | undefined,
  waitMs = COORDINATOR_WAIT_MS,
): Promise<IdempotentAppend> {
  const txns = ctx.broker.transactions;
  const cluster = ctx.broker.cluster;
  const deadline = performance.now() + waitMs;
  // The baseline is taken when the batch arrives: a marker of this producer after it ended the
  // transaction the batch belongs to (a later one of the same epoch must not take it).
  const ready = partition.txnIndex() ? Promise.resolve() : partition.whenTxnIndexReady();
  const baseline = ready.then(() => ({ index: partition.txnIndex(), seen: partition.txnIndex()?.markersOf(b.producerId) }));
  return enqueue(partition, b.producerId, async (issued) => {
    const base = await baseline;
    // Still the leader, at the same epoch, and no marker of the producer since the batch arrived, when the
    // append finally starts (synchronously with these checks: a marker begun later is written after it).
    const append = () => {
      if (leaderGate(ctx, partition) !== leaderEpoch) throw new TributaryError('NOT_LEADER', { topic: partition.topic, partition: partition.id, reason: 'leadership moved' });
      if (partition.txnIndex() !== base.index || base.index?.markersOf(b.producerId) !== base.seen) {
        throw new TributaryError('invalid_txn_state', { topic: partition.topic, partition: partition.id, reason: "the producer's transaction ended on this partition while the batch waited" });
      }
      const appending = partition.appendTransactional(records, b);
      issued();
      return appending;
    };
    // Decided when the batch's turn comes: the id's coordinator may have moved here (or away) meanwhile.
    if (!cluster || cluster.coordinatesHere(TXN_STATE_TOPIC, txns.partitionFor(txnId))) {
      // The coordinator's own check and in-flight tracking (EndTxn waits for the append).
      return txns.kafka.append(txnId, b.producerId, b.epoch, partition.topic, partition.id, append);
    }
    await askCoordinator(ctx, txnId, b, partition, deadline);
    return append();
  });
}

/**
 * Runs `step` after the producer's previous batch to the partition was issued (its append called, so the
 * log keeps their order) or refused; the next batch's turn comes as soon as `step` calls `issued`, not when
 * its append is durable, so a producer's pipelined batches still share one flush.
 */
function enqueue(partition: Partition, producerId: string, step: (issued: () => void) => Promise<IdempotentAppend>): Promise<IdempotentAppend> {
  let byProducer = queues.get(partition);
  if (!byProducer) queues.set(partition, (byProducer = new Map()));
  const queue = byProducer;
  let markIssued!: () => void;
  const turnEnds = new Promise<void>((resolve) => (markIssued = resolve));
  const prior = queue.get(producerId);
  queue.set(producerId, turnEnds);
  const result = prior ? prior.then(() => step(markIssued)) : step(markIssued);
  result.then(markIssued, markIssued);
  turnEnds.then(() => {
    if (queue.get(producerId) === turnEnds) queue.delete(producerId);
  });
  return result;
}

/** TXN_VERIFY at the id's coordinator, following it while it moves or loads, until `deadline`. */
async function askCoordinator(ctx: KafkaRequestContext, txnId: string, b: TransactionalBatch, partition: Partition, deadline: number): Promise<void> {
  const cluster = ctx.broker.cluster!;
  // The coordinator checks the id's owner against the producing principal, not this broker's (docs/security.md, "Transactional ids").
  const caller = ctx.broker.security.txnCaller(ctx.identity);
  const fields = { transactional_id: txnId, producerId: b.producerId, epoch: b.epoch, topic: partition.topic, partition: partition.id, ...(caller && !caller.admin ? { principal: caller.principal } : {}) };
  // Retriable for the producer, which sends the batch again (Kafka answers NOT_ENOUGH_REPLICAS here too).
  const gaveUp = (why: string) => new TributaryError('NOT_ENOUGH_REPLICAS', { reason: `the transaction coordinator of ${txnId} did not answer: ${why}` });
  for (let attempt = 1; ; attempt++) {
    // Its time ran out while earlier batches of the producer had their turn.
    if (performance.now() >= deadline) throw gaveUp('no time left after the earlier batches');
    try {
      const txnPartition = ctx.broker.transactions.partitionFor(txnId);
      // Moved here meanwhile: this broker's own coordinator answers.
      if (cluster.coordinatesHere(TXN_STATE_TOPIC, txnPartition)) return await ctx.broker.transactions.kafka.verify(txnId, b.producerId, b.epoch, partition.topic, partition.id);
      // A coordinator that is alive but holds the request (its probe answers, so the peer stall bound
      // never fires), or a dial that takes long, must not hold the batch, nor the producer's later batches
      // queued behind it.
      const ask = cluster.leaderPeer(TXN_STATE_TOPIC, txnPartition).then((peer) => peer.command('TXN_VERIFY', fields));
      await withDeadline(ask, deadline, () => gaveUp('no reply'));
      return;
    } catch (err) {
      if (err instanceof TributaryError && err.code === 'NOT_AUTHORIZED_FOR_OPERATION') throw refusal(err, 'transactional_id');
      const moving = err instanceof TributaryError && MOVING.has(err.code);
      if (!moving) throw err;
      if (performance.now() > deadline) throw gaveUp(err.code);
      await sleep(Math.min(500, 50 * attempt, Math.max(0, deadline - performance.now())));
    }
  }
}

/** `work`, or `timedOut()` thrown once `deadline` passes first (what `work` answers later is dropped). */
function withDeadline<T>(work: Promise<T>, deadline: number, timedOut: () => Error): Promise<T> {
  work.catch(() => {});
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(timedOut()), Math.max(0, deadline - performance.now()));
  });
  return Promise.race([work, late]).finally(() => clearTimeout(timer));
}

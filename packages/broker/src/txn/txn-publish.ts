import type { Clock } from '../common/clock.js';
import type { TopicManager } from '../partition/topic-manager.js';
import { TributaryError } from 'tributary-protocol/errors.js';
import type { RecordInput } from 'tributary-protocol/record.js';
import type { TxnLog } from './txn-log.js';
import type { TxnTargets } from './txn-targets.js';
import { type Entry, type PublishedRecords, type PublishedRun, type TxnPublishResult, checkOpen, partKey, txnState } from './txn-entry.js';

/**
 * TXN_PUBLISH for the transaction coordinator (txn-coordinator.ts): the one request that does not run
 * under the transactional id's lock, so a producer's records pipeline. It checks the state before and
 * after registering its partition, and END_TXN waits for the runs it has admitted (Entry.inflight).
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
    return this.publishRun(e, id, producerId, epoch, topicName, explicit, [record], seqNum).then((rs) => rs[0]!);
  }

  /**
   * What publishRun of `count` records with seqNums `firstSeq`.. would refuse before it looks at a record
   * (ownership aside): the producer and epoch, the seqNums, a spoiled transaction, the topic and an explicit
   * partition. Changes nothing: a batch frame is checked so before its records are decoded.
   */
  checkRun(e: Entry, id: string, producerId: string, epoch: number, topicName: string, explicit: number | undefined, count: number, firstSeq: number): void {
    checkOpen(e, producerId, epoch);
    if (firstSeq >= 1 && firstSeq <= e.lastSeq) {
      // Taken before: a retry only for the same topic and partition. If all were, they are answered from
      // the runs; else the rest is a run of its own, from the next seqNum.
      checkRetry(e, id, firstSeq, Math.min(firstSeq + count - 1, e.lastSeq), topicName, explicit);
      if (firstSeq + count - 1 <= e.lastSeq) return;
      firstSeq = e.lastSeq + 1;
    }
    if (firstSeq !== e.lastSeq + 1) {
      throw new TributaryError('out_of_order_sequence', { transactional_id: id, sequence: firstSeq, expected: e.lastSeq + 1 });
    }
    if (e.spoiled) throw txnState(id, e.meta.state, e.spoiled);
    const topic = this.deps.topics.get(topicName);
    if (explicit !== undefined) topic.partition(explicit);
  }

  /**
   * Records with seqNums `firstSeq`.. of the open transaction `e`, as one publish each would take them
   * (the same partitions, seqNums, errors and retries), but with one append per partition they go to
   * rather than one per record (in a cluster, one TXN_APPEND each). The new records are taken whole or
   * refused whole; seqNums taken before are answered with their results, also ahead of new ones.
   */
  publishRun(e: Entry, id: string, producerId: string, epoch: number, topicName: string, explicit: number | undefined, records: RecordInput[], firstSeq: number): Promise<TxnPublishResult[]> {
    checkOpen(e, producerId, epoch);
    const n = records.length;
    const last = firstSeq + n - 1;
    if (firstSeq >= 1 && firstSeq <= e.lastSeq) {
      checkRetry(e, id, firstSeq, Math.min(last, e.lastSeq), topicName, explicit);
      if (last <= e.lastSeq) return priorResults(e, firstSeq, last);
      // Part retry, part new: as one publish per record, the retried seqNums are answered and the rest is
      // taken (or refused, throwing before anything changed) as a run of its own.
      const known = e.lastSeq - firstSeq + 1;
      const fresh = this.publishRun(e, id, producerId, epoch, topicName, explicit, records.slice(known), e.lastSeq + 1);
      return Promise.all([priorResults(e, firstSeq, firstSeq + known - 1), fresh]).then(([a, b]) => a.concat(b));
    }
    if (firstSeq !== e.lastSeq + 1) {
      throw new TributaryError('out_of_order_sequence', { transactional_id: id, sequence: firstSeq, expected: e.lastSeq + 1 });
    }
    if (e.spoiled) throw txnState(id, e.meta.state, e.spoiled);
    const topic = this.deps.topics.get(topicName);
    const partitions = new Array<number>(n);
    // Each partition's records, in seqNum order, in the order the run first reaches the partition.
    const groups = new Map<number, number[]>();
    for (let i = 0; i < n; i++) {
      const p = topic.choosePartition(explicit, records[i]!.key);
      topic.partition(p);
      partitions[i] = p;
      const g = groups.get(p);
      if (g) g.push(i);
      else groups.set(p, [i]);
    }
    e.lastSeq = last;
    const offsets = new Array<number>(n);
    const appends: Array<Promise<void>> = [];
    for (const [p, idx] of groups) {
      // At most APPEND_CHUNK_BYTES an append: in a cluster each is a TXN_APPEND frame to the partition's
      // leader, which must stay far below the frame limit whatever the producer's frame held.
      for (let from = 0; from < idx.length; ) {
        let to = from + 1;
        let bytes = recordBytes(records[idx[from]!]!);
        for (; to < idx.length; to++) {
          const b = recordBytes(records[idx[to]!]!);
          if (bytes + b > APPEND_CHUNK_BYTES) break;
          bytes += b;
        }
        const chunk = idx.slice(from, to);
        const recs = chunk.length === n ? records : chunk.map((i) => records[i]!);
        appends.push(
          this.append(e, topicName, p, recs, producerId, epoch).then((base) => {
            for (let j = 0; j < chunk.length; j++) offsets[chunk[j]!] = base + j;
          }),
        );
        from = to;
      }
    }
    const result = Promise.all(appends).then(
      (): PublishedRecords => ({ partitions, offsets }),
      (err: unknown) => {
        const reason = `record${n > 1 ? `s ${firstSeq}-${last}` : ` ${firstSeq}`} of the transaction failed (${err instanceof TributaryError ? err.code : 'error'}); abort it`;
        e.spoiled ??= reason;
        // The append may have landed, so it is never tried again: a retriable error would only have the
        // producer retry these seqNums (answered from this same result) until the transaction times out.
        if (err instanceof TributaryError && !err.retriable) throw err;
        throw txnState(id, e.meta.state, reason);
      },
    );
    e.runs.push({ first: firstSeq, last, topic: topicName, partitions, result });
    // In flight from now on, registrations included: END_TXN commit decides once it settled.
    e.inflight.add(result);
    const settled = () => e.inflight.delete(result);
    result.then(settled, settled);
    return result.then((r) => resultsOf(r, 0, n, false));
  }

  /** Appends `records` (one partition's, in seqNum order) once the partition is registered; the first offset. */
  private async append(e: Entry, topicName: string, partition: number, records: RecordInput[], producerId: string, epoch: number): Promise<number> {
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
    // A timeout, a new epoch or a decided END_TXN may have come in meanwhile; a commit waiting for the
    // appends admitted (this one's run is) lets it go on.
    checkOpen(e, producerId, epoch, true);
    return (await this.deps.targets.append(topicName, partition, records, producerId, epoch, this.deps.partitionFor(e.meta.transactionalId))).offset;
  }
}

/** Bytes one TXN_APPEND frame may carry besides its records' fixed overhead. */
const APPEND_CHUNK_BYTES = 4 * 1024 * 1024;

/** A record's bytes in a batch frame, roughly: its key, value and headers, and 64 for the rest. */
function recordBytes(r: RecordInput): number {
  let n = 64 + r.value.length + (r.key?.length ?? 0);
  if (r.headers) for (const h of r.headers) n += 6 + h.key.length * 3 + h.value.length;
  return n;
}

function resultsOf(r: PublishedRecords, from: number, to: number, duplicate: boolean): TxnPublishResult[] {
  const out = new Array<TxnPublishResult>(to - from);
  for (let i = from; i < to; i++) out[i - from] = { partition: r.partitions[i]!, offset: r.offsets[i]!, duplicate };
  return out;
}

/**
 * seqNums `first`..`last`, all taken before, are a retry only if they name the topic (and an explicit
 * partition, if given) their records went to; else the producer reused them for another record, which
 * must not be told it landed (docs/protocol.md, TXN_PUBLISH). Without a partition any is accepted: keyless
 * records were placed round-robin. Throws out_of_order_sequence, changing nothing.
 */
function checkRetry(e: Entry, id: string, first: number, last: number, topicName: string, explicit: number | undefined): void {
  const runs = e.runs;
  for (let i = runHolding(runs, first); i < runs.length && runs[i]!.first <= last; i++) {
    const r = runs[i]!;
    for (let s = Math.max(first, r.first); s <= Math.min(last, r.last); s++) {
      const p = r.partitions[s - r.first]!;
      if (r.topic === topicName && (explicit === undefined || explicit === p)) continue;
      throw new TributaryError('out_of_order_sequence', {
        transactional_id: id,
        sequence: s,
        expected: e.lastSeq + 1,
        reason: `seqNum ${s} was taken by topic ${r.topic} partition ${p}`,
      });
    }
  }
}

/** Index of the run holding seqNum `seq`: runs are contiguous and in seqNum order, so by binary search. */
function runHolding(runs: PublishedRun[], seq: number): number {
  let lo = 0;
  let hi = runs.length - 1;
  while (lo < hi) {
    const mid = (lo + hi + 1) >>> 1;
    if (runs[mid]!.first <= seq) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

/** A retry of seqNums `first`..`last`, all taken before: their original results, from the runs holding them. */
function priorResults(e: Entry, first: number, last: number): Promise<TxnPublishResult[]> {
  const runs = e.runs;
  const parts: Array<Promise<TxnPublishResult[]>> = [];
  for (let i = runHolding(runs, first); i < runs.length && runs[i]!.first <= last; i++) {
    const r = runs[i]!;
    const from = Math.max(first, r.first) - r.first;
    const to = Math.min(last, r.last) - r.first + 1;
    parts.push(r.result.then((rec) => resultsOf(rec, from, to, true)));
  }
  return Promise.all(parts).then((xs) => xs.flat());
}

/**
 * The record accumulator: per-partition queues of batches (no I/O; the producer drives it, the sender
 * takes its ready batches). Batches close on maxBatchBytes / maxBatchRecords, or when the producer
 * closes them (linger timer, flush, backpressure); see docs/sdk.md, "Producer".
 */
import type { BatchRecord } from 'tributary-protocol/batch.js';
import { batchOverhead, type RecordMetadata } from './producer-messages.js';

/** Where a record's outcome goes: the send() it came from and its position there. */
export interface RecordSink {
  settle(index: number, err: Error | null, meta?: RecordMetadata): void;
}

export class ProducerBatch {
  readonly records: BatchRecord[] = [];
  /** Who waits for each record (parallel to `records`): the send() it came from and its index there. */
  readonly sinks: RecordSink[] = [];
  readonly sinkIndexes: number[] = [];
  /** Estimated frame bytes (header + records). */
  bytes: number;
  /** Bytes held against maxBufferedBytes (records only). */
  reserved = 0;
  /** A closed batch takes no more records and is ready to send. */
  closed = false;
  /**
   * Its linger time is up: it may be sent, but until the sender takes it (an in-flight slot is free)
   * it keeps taking records, so a short lingerMs never degrades into one record per request while the
   * partition's slots are busy (docs/sdk.md, "Producer").
   */
  ready = false;
  dispatched = false;
  completed = false;
  timer: NodeJS.Timeout | undefined;
  startedAt = 0;
  /**
   * Idempotent producers: the sequence of the first record and the epoch, assigned at first send (-1:
   * none) and kept by retries; new ones only once the broker showed these were never appended.
   */
  firstSequence = -1;
  epoch = -1;
  /** The last attempt failed and the batch waits for its retry turn (the oldest unsettled batch goes first). */
  awaitingRetry = false;
  retryError: unknown;
  /** Resend without a backoff when its turn comes: it was refused only for its numbers. */
  resendAtOnce = false;
  /** Resolves (never rejects) once the batch is acknowledged or failed for good. */
  readonly done: Promise<void>;
  markDone!: () => void;

  constructor(
    readonly topic: string,
    readonly partition: number,
    readonly createdAt: number,
  ) {
    this.bytes = batchOverhead(topic);
    this.done = new Promise<void>((resolve) => {
      this.markDone = resolve;
    });
  }
}

export interface PartitionQueue {
  readonly topic: string;
  readonly partition: number;
  /** Batches not yet sent, oldest first; only the last may be open. */
  readonly batches: ProducerBatch[];
  /** Batches sent and not yet completed (including those being retried), in send order. */
  readonly inFlight: Set<ProducerBatch>;
  /** Batches waiting for a retry: while > 0 no new batch of the partition is sent (keeps order). */
  retrying: number;
  /** The retry loop runs: it retries the oldest unsettled batch once that one waits for a retry. */
  retryRunning: boolean;
  pumping: boolean;
  again: boolean;
  /** Idempotent producers: the next batch's first sequence and the epoch of this partition. */
  nextSequence: number;
  epoch: number;
  /** A numbered batch failed for good: the next numbers start a new epoch at sequence 0. */
  bumpEpoch: boolean;
  /** Idempotent: epoch → first sequence from which the broker reported a gap (nothing from there on was appended). */
  readonly lost: Map<number, number>;
}

/** Idempotent: the batch's numbers are known unusable (a gap before them), so it gets new ones. */
export function needsNewNumbers(q: PartitionQueue, b: ProducerBatch): boolean {
  const from = b.firstSequence >= 0 ? q.lost.get(b.epoch) : undefined;
  return from !== undefined && b.firstSequence >= from;
}

/**
 * Idempotent: an unsettled batch may still take numbers ahead of anything sent now (it is in an older
 * epoch, needs new numbers, or the epoch is about to change): new batches wait, or they would overtake it.
 */
function numberingUnsettled(q: PartitionQueue): boolean {
  for (const b of q.inFlight) if (b.firstSequence >= 0 && (q.bumpEpoch || b.epoch !== q.epoch || needsNewNumbers(q, b))) return true;
  return false;
}

export interface AccumulatorLimits {
  maxBatchBytes: number;
  maxBatchRecords: number;
}

/**
 * Records grouped by (topic, partition) into batches. A batch closes when the next record would take it
 * past `maxBatchBytes` or `maxBatchRecords` (a record larger than `maxBatchBytes` gets a batch of its
 * own), or when someone closes it (linger timer, flush, backpressure).
 */
export class RecordAccumulator {
  private readonly byTopic = new Map<string, PartitionQueue[]>();
  /** Every queue, in creation order. */
  private readonly queues: PartitionQueue[] = [];

  constructor(private readonly limits: AccumulatorLimits) {}

  queue(topic: string, partition: number): PartitionQueue {
    // By topic, then partition: no key string built per record.
    let byPartition = this.byTopic.get(topic);
    if (!byPartition) {
      byPartition = [];
      this.byTopic.set(topic, byPartition);
    }
    let q = byPartition[partition];
    if (!q) {
      q = {
        topic,
        partition,
        batches: [],
        inFlight: new Set(),
        retrying: 0,
        retryRunning: false,
        pumping: false,
        again: false,
        nextSequence: 0,
        epoch: 0,
        bumpEpoch: false,
        lost: new Map(),
      };
      byPartition[partition] = q;
      this.queues.push(q);
    }
    return q;
  }

  all(): PartitionQueue[] {
    return [...this.queues];
  }

  /**
   * Appends one record. Returns its batch, whether that batch is new (the caller arms its linger timer)
   * and whether a batch got closed by this append (the caller sends it).
   */
  append(topic: string, partition: number, record: BatchRecord, size: number, sink: RecordSink, index: number, now: number): { batch: ProducerBatch; created: boolean; closed: boolean } {
    const q = this.queue(topic, partition);
    let closed = false;
    let tail = q.batches[q.batches.length - 1];
    if (tail && !tail.closed && tail.records.length > 0 && (tail.bytes + size > this.limits.maxBatchBytes || tail.records.length >= this.limits.maxBatchRecords)) {
      tail.closed = true;
      closed = true;
    }
    let created = false;
    if (!tail || tail.closed) {
      tail = new ProducerBatch(topic, partition, now);
      q.batches.push(tail);
      created = true;
    }
    tail.records.push(record);
    tail.sinks.push(sink);
    tail.sinkIndexes.push(index);
    tail.bytes += size;
    tail.reserved += size;
    if (tail.bytes >= this.limits.maxBatchBytes || tail.records.length >= this.limits.maxBatchRecords) {
      tail.closed = true;
      closed = true;
    }
    return { batch: tail, created, closed };
  }

  /** Closes every open batch (flush, close, backpressure); returns the queues that have something to send. */
  closeAll(): PartitionQueue[] {
    const out: PartitionQueue[] = [];
    for (const q of this.queues) {
      for (const b of q.batches) b.closed = true;
      if (q.batches.length > 0) out.push(q);
    }
    return out;
  }

  /** Every batch not completed yet: queued, in flight or being retried. */
  pending(): ProducerBatch[] {
    const out: ProducerBatch[] = [];
    for (const q of this.queues) out.push(...q.inFlight, ...q.batches);
    return out;
  }

  /** Closed head batches that may be sent now without passing the in-flight limit or overtaking a retry. */
  takeReady(q: PartitionQueue, maxInFlight: number): ProducerBatch[] {
    const out: ProducerBatch[] = [];
    while (this.canSend(q, maxInFlight)) {
      const b = q.batches.shift()!;
      b.closed = true; // taken: no more records
      q.inFlight.add(b);
      out.push(b);
    }
    return out;
  }

  /** True when the queue can send its head batch right now. */
  canSend(q: PartitionQueue, maxInFlight: number): boolean {
    const head = q.batches[0];
    return q.retrying === 0 && q.inFlight.size < maxInFlight && head !== undefined && (head.closed || head.ready) && !numberingUnsettled(q);
  }
}

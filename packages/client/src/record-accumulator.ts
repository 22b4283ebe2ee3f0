/**
 * The record accumulator: per-partition queues of batches (no I/O; the producer drives it, the sender
 * takes its ready batches). Batches close on maxBatchBytes / maxBatchRecords, or when the producer
 * closes them (linger timer, flush, backpressure); see docs/sdk.md, "Producer". A batch holds its records
 * already encoded in its frame (BatchFrameBuilder), not as objects, and remembers who waits for them as
 * runs of consecutive messages of one send(), so the cost per record is a copy into the frame.
 */
import type { Acks, BatchRecord } from 'tributary-protocol/batch.js';
import { BatchFrameBuilder } from 'tributary-protocol/batch-frame-builder.js';
import type { RecordHeader } from 'tributary-protocol/record.js';
import { batchOverhead, RECORD_BASE_BYTES } from './producer-messages.js';

/** Where records' outcomes go: the send() they came from. */
export interface RecordSink {
  /**
   * Messages `first` .. `first + count - 1` of the send are done: failed with `err`, or appended at
   * consecutive offsets from `offset` of `partition` (-1: not known, acks 0).
   */
  settle(first: number, count: number, err: Error | null, topic: string, partition: number, offset: number): void;
}

export class ProducerBatch {
  /**
   * Who waits for the records, in record order: run r is messages runFirst[r] .. runFirst[r] +
   * runCount[r] - 1 of the send sinks[r] (one run per send() whose messages came in a row).
   */
  readonly sinks: RecordSink[] = [];
  readonly runFirst: number[] = [];
  readonly runCount: number[] = [];
  /** Estimated frame bytes (header + records, as recordSize counts them). */
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
  /** Its linger wait: a timer, or with `lingerMs` 0 the end of the event-loop turn (`lingersToTurnEnd`: it is in its producer's list for it). */
  timer: NodeJS.Timeout | undefined;
  lingersToTurnEnd = false;
  /** performance.now() at its first send (the durationMs published). */
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
  /** Resend without a backoff when its turn comes: it was refused only for its numbers, or it is a split part. */
  resendAtOnce = false;
  /**
   * A part of a batch refused as record_too_large, not sent on its own yet: it keeps the batch's creation
   * time, but its first turn gets at least requestTimeoutMs of budget (the refusal spent the rest, not it).
   */
  untried = false;
  /** Resolves (never rejects) once the batch is acknowledged or failed for good. */
  readonly done: Promise<void>;
  markDone!: () => void;

  constructor(
    readonly topic: string,
    readonly partition: number,
    /** performance.now(), not the wall clock: the retry budget counts from it and an NTP step must not move it. */
    readonly createdAt: number,
    /** The records, encoded in the batch frame as they are appended. */
    readonly frame: BatchFrameBuilder,
  ) {
    this.bytes = batchOverhead(topic);
    this.done = new Promise<void>((resolve) => {
      this.markDone = resolve;
    });
  }

  /** Records in the batch. */
  get count(): number {
    return this.frame.count;
  }

  /** Records message `index` of `sink` as the next record's owner (extends the last run when it follows it). */
  addOwner(sink: RecordSink, index: number): void {
    this.addOwners(sink, index, 1);
  }

  /** addOwner of messages `first` .. `first + count - 1` of `sink`, in one go. */
  addOwners(sink: RecordSink, first: number, count: number): void {
    const last = this.sinks.length - 1;
    if (last >= 0 && this.sinks[last] === sink && this.runFirst[last]! + this.runCount[last]! === first) {
      this.runCount[last]! += count;
      return;
    }
    this.sinks.push(sink);
    this.runFirst.push(first);
    this.runCount.push(count);
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
  /** A little more than the frame bytes of the partition's last batch sent (0: none yet): the buffer size a new batch starts with. */
  sizeHint: number;
  /**
   * The partition's last batch failed for good with this (cleared by a success): a batch queued behind it
   * that outlived the retry budget by then fails unsent (producer-sender.ts).
   */
  failure?: Error;
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
  /** The acks written in every batch header (default 'all'). */
  acks?: Acks;
  /** Idempotent producers: the producer id stamped on every record (default '': none). */
  producerId?: string;
  /** The producer's maxBufferedBytes (default 32 MiB): the spare buffers kept take at most half as much. */
  maxBufferedBytes?: number;
}

/** Outcome bits of RecordAccumulator.appendTo. */
export const APPENDED_NEW_BATCH = 1;
export const APPENDED_CLOSED_BATCH = 2;
/** appendRun's result: the records appended times RUN_COUNT_UNIT, plus the APPENDED_* bits (below it). */
export const RUN_COUNT_UNIT = 4;

/** A new partition's first batch buffer: small (a lingering batch of a few records), grown by doubling. */
const FIRST_BATCH_CAPACITY = 1024;
/** The most a partition's first batch starts with (it grows, copying, if it needs more). */
const NEW_PARTITION_CAPACITY = 16 * 1024;
/**
 * Buffers of completed batches kept for new ones (at most this many bytes, and at most half of
 * maxBufferedBytes): a fresh large buffer costs a page fault per 4 KiB written, more than the records'
 * encoding itself, and its external memory drives V8 to full collections. Under load the frames in flight
 * (bounded by maxBufferedBytes) come and go in bursts: a few MiB of spares did not cover the swing and
 * most buffers were allocated anew.
 */
const MAX_SPARE_BYTES = 16 * 1024 * 1024;

/**
 * Records grouped by (topic, partition) into batches. A batch closes when the next record would take it
 * past `maxBatchBytes` or `maxBatchRecords` (a record larger than `maxBatchBytes` gets a batch of its
 * own), or when someone closes it (linger timer, flush, backpressure).
 */
export class RecordAccumulator {
  private readonly byTopic = new Map<string, PartitionQueue[]>();
  /** Every queue, in creation order. */
  private readonly queues: PartitionQueue[] = [];

  private readonly acks: Acks;
  private producerId: Buffer;
  /**
   * The largest frame a batch reaches unless a single record is larger than maxBatchBytes: maxBatchBytes
   * (which counts no producer ids) plus a producer id per record. Buffers grow up to it; size hints stay below it.
   */
  private frameLimit = 0;
  private readonly spare: Buffer[] = [];
  private spareBytes = 0;
  private readonly maxSpareBytes: number;
  /** The latest batch size (sent, or grown to), for partitions that have sent none. */
  private sizeHint = FIRST_BATCH_CAPACITY;

  private readonly maxBatchBytes: number;
  /** maxBatchRecords, with "no limit" (Infinity) as a large small integer: compared per record. */
  private readonly maxBatchRecords: number;

  constructor(limits: AccumulatorLimits) {
    this.maxBatchBytes = limits.maxBatchBytes;
    this.maxBatchRecords = Math.min(limits.maxBatchRecords, 0x3fffffff);
    this.acks = limits.acks ?? 'all';
    this.maxSpareBytes = Math.min(MAX_SPARE_BYTES, Math.floor((limits.maxBufferedBytes ?? 32 * 1024 * 1024) / 2));
    this.producerId = Buffer.alloc(0);
    this.setProducerId(limits.producerId ?? '');
  }

  /** The producer id of every batch from now on (an idempotent producer learns it before its first record). */
  setProducerId(id: string): void {
    if (this.queues.some((q) => q.batches.length > 0)) throw new Error('the producer id is set before any record is queued');
    this.producerId = Buffer.from(id, 'utf8');
    this.frameLimit = 4 + this.maxBatchBytes + (Math.floor(this.maxBatchBytes / RECORD_BASE_BYTES) + 1) * this.producerId.length;
  }

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
        sizeHint: 0,
      };
      byPartition[partition] = q;
      this.queues.push(q);
    }
    return q;
  }

  all(): PartitionQueue[] {
    return [...this.queues];
  }

  /** Nothing of `topic` is queued, in flight, waiting for a retry or being sent. */
  idle(topic: string): boolean {
    const qs = this.byTopic.get(topic);
    if (qs === undefined) return true;
    for (const q of qs) if (q && (q.batches.length > 0 || q.inFlight.size > 0 || q.retrying > 0 || q.retryRunning || q.pumping)) return false;
    return true;
  }

  /** Drops `topic`'s partition queues (idle: see idle()); a later record makes new ones. */
  forget(topic: string): void {
    const qs = this.byTopic.get(topic);
    if (qs === undefined) return;
    this.byTopic.delete(topic);
    const gone = new Set(qs);
    for (let i = this.queues.length - 1; i >= 0; i--) if (gone.has(this.queues[i]!)) this.queues.splice(i, 1);
  }

  /**
   * Appends one record (a BatchRecord, as toBatchRecord makes it; `size` is its recordSize). Returns its
   * batch, whether that batch is new (the caller arms its linger timer) and whether a batch got closed
   * by this append (the caller sends it). The producer itself takes appendTo, which needs no record object.
   */
  append(topic: string, partition: number, record: BatchRecord, size: number, sink: RecordSink, index: number, now: number): { batch: ProducerBatch; created: boolean; closed: boolean } {
    const q = this.queue(topic, partition);
    const outcome = this.appendTo(q, record.key, record.value, record.value.length, record.timestamp, record.headers.length > 0 ? record.headers : undefined, size, sink, index, now);
    return { batch: q.batches[q.batches.length - 1]!, created: (outcome & APPENDED_NEW_BATCH) !== 0, closed: (outcome & APPENDED_CLOSED_BATCH) !== 0 };
  }

  /**
   * Appends one record to the queue's open batch, encoding it into the batch frame: `value` is bytes or
   * a string of `valueLen` UTF-8 bytes, `size` its recordSize (checked by the caller, as are the key and
   * header limits). The record's batch is then the queue's last. Returns APPENDED_* bits: a new batch
   * was started (the caller arms its linger timer), a batch got closed (the caller sends it).
   */
  appendTo(
    q: PartitionQueue,
    key: Uint8Array | null,
    value: Uint8Array | string,
    valueLen: number,
    timestamp: number,
    headers: readonly RecordHeader[] | undefined,
    size: number,
    sink: RecordSink,
    index: number,
    now = 0,
  ): number {
    let outcome = this.makeRoom(q, size, now);
    const tail = q.batches[q.batches.length - 1]!;
    tail.frame.append(key, value, valueLen, timestamp, headers);
    // A batch that had to grow tells the batches created after it (of any partition) where to start.
    if (tail.frame.capacity > this.sizeHint && tail.frame.capacity <= this.frameLimit) this.sizeHint = tail.frame.capacity;
    tail.addOwner(sink, index);
    tail.bytes += size;
    tail.reserved += size;
    if (tail.bytes >= this.maxBatchBytes || tail.count >= this.maxBatchRecords) outcome |= this.closeFull(q, tail);
    return outcome;
  }

  /**
   * appendTo for a run of plain messages (no key, headers or timestamp) of one send() going to `q`:
   * messages `from` .. `to - 1`, `sizes[i]` message i's recordSize. Appends them one after another into
   * the open batch without a call and an owner update per record, and stops where appendTo of the next
   * record would close the batch (it does not fit, or the last one filled it), so the caller sees the
   * same batches and outcomes as record by record. Returns the records appended (at least one) times
   * RUN_COUNT_UNIT plus the APPENDED_* bits.
   */
  appendRun(q: PartitionQueue, messages: ReadonlyArray<{ readonly value: Uint8Array | string }>, sizes: readonly number[], from: number, to: number, sink: RecordSink, now = 0): number {
    let outcome = this.makeRoom(q, sizes[from]!, now);
    const tail = q.batches[q.batches.length - 1]!;
    const frame = tail.frame;
    const maxBytes = this.maxBatchBytes;
    const maxRecords = this.maxBatchRecords;
    const startBytes = tail.bytes;
    let bytes = startBytes;
    let i = from;
    try {
      for (; i < to; i++) {
        const size = sizes[i]!;
        if (i > from && bytes + size > maxBytes) break;
        const v = messages[i]!.value;
        frame.appendValue(v, typeof v === 'string' ? size - RECORD_BASE_BYTES : v.length);
        bytes += size;
        if (bytes >= maxBytes || frame.count >= maxRecords) {
          i++;
          break;
        }
      }
    } finally {
      // Also when an append threw (a buffer that could not grow): the records in the frame are accounted for.
      if (frame.capacity > this.sizeHint && frame.capacity <= this.frameLimit) this.sizeHint = frame.capacity;
      if (i > from) tail.addOwners(sink, from, i - from);
      tail.bytes = bytes;
      tail.reserved += bytes - startBytes;
    }
    if (bytes >= maxBytes || frame.count >= maxRecords) outcome |= this.closeFull(q, tail);
    return (i - from) * RUN_COUNT_UNIT + outcome;
  }

  /**
   * Before a record of `size` bytes is appended to `q`: closes an open tail it does not fit (or that holds
   * maxBatchRecords) and starts a new batch when there is no open one. Returns the APPENDED_* bits.
   */
  private makeRoom(q: PartitionQueue, size: number, now: number): number {
    let outcome = 0;
    let tail = q.batches[q.batches.length - 1];
    if (tail && !tail.closed && tail.count > 0 && (tail.bytes + size > this.maxBatchBytes || tail.count >= this.maxBatchRecords)) outcome |= this.closeFull(q, tail);
    if (!tail || tail.closed) {
      // Sized for what the partition's last batch needed (a spare buffer if one is that large), so a
      // batch seldom grows: growing copies it into a fresh buffer.
      // A spare buffer (warm memory) is taken if it holds the first record; else a fresh one as large as
      // the partition's last batch, or for a partition without one, the producer's latest batch size.
      const need = 64 + q.topic.length * 3 + size + this.producerId.length;
      const spare = this.takeSpare();
      let hint = q.sizeHint;
      // Batches that reach a good part of frameLimit vary with timing: they all get the full size (the
      // buffers circulate through the spares), so none grows and every spare fits every batch.
      if (hint > this.frameLimit / 4) hint = this.frameLimit;
      // A partition without a batch of its own yet: at most NEW_PARTITION_CAPACITY of the producer's latest
      // size, or records for many new partitions after one large batch each took a frame-sized buffer
      // (500 MiB for 2,000 one-byte records), none of it counted in maxBufferedBytes.
      if (q.sizeHint === 0) hint = Math.min(this.sizeHint, NEW_PARTITION_CAPACITY);
      const capacity = spare !== undefined && spare.length >= need ? need : Math.max(need, hint);
      const frame = new BatchFrameBuilder(q.topic, q.partition, this.acks, this.producerId, capacity, spare, this.frameLimit);
      tail = new ProducerBatch(q.topic, q.partition, now || performance.now(), frame);
      q.batches.push(tail);
      outcome |= APPENDED_NEW_BATCH;
    }
    return outcome;
  }

  private closeFull(q: PartitionQueue, tail: ProducerBatch): number {
    tail.closed = true;
    this.noteBatchSize(q, tail.frame.length);
    return APPENDED_CLOSED_BATCH;
  }

  /**
   * A batch of `q` closed full or was taken for sending at `length` frame bytes: the buffer size the
   * partition's next batches start with. Noted at a full close too, so the batches a burst queues behind
   * a full one before anything is sent do not each start small and grow (each growth copies the frame).
   * A smaller batch lowers the hint by at most half: a partition whose batches alternate between full
   * and small ones (a send's remainder) keeps buffers the full ones fit in.
   */
  private noteBatchSize(q: PartitionQueue, length: number): void {
    q.sizeHint = Math.max(Math.min(this.frameLimit, length + (length >> 2)), q.sizeHint >> 1);
    this.sizeHint = q.sizeHint;
  }

  /**
   * A batch the broker refused for its size (record_too_large), in parts (producer-sender.ts, split): one
   * per run of a send's records when it holds several sends' records, else its one run in two halves
   * (split again if refused again, down to single records). Each keeps the batch's creation time (its
   * retry budget), and the batch's reserved bytes are shared out among them, so releasing theirs releases
   * all of it. The batch holds at least two records.
   */
  splitRefused(b: ProducerBatch): ProducerBatch[] {
    // Per part: its first record in the batch, its record count, its run and its first message's offset in the run.
    const pieces: Array<[number, number, number, number]> = [];
    if (b.sinks.length > 1) {
      for (let r = 0, at = 0; r < b.sinks.length; at += b.runCount[r]!, r++) pieces.push([at, b.runCount[r]!, r, 0]);
    } else {
      const half = Math.ceil(b.count / 2);
      pieces.push([0, half, 0, 0], [half, b.count - half, 0, half]);
    }
    const out: ProducerBatch[] = [];
    let reservedLeft = b.reserved;
    for (const [first, n, run, offset] of pieces) {
      const records = b.frame.encodedRecords(first, n);
      const frame = new BatchFrameBuilder(b.topic, b.partition, this.acks, this.producerId, 64 + b.topic.length * 3 + records.length);
      frame.appendEncoded(records, n, b.frame.extended);
      const part = new ProducerBatch(b.topic, b.partition, b.createdAt, frame);
      part.addOwner(b.sinks[run]!, b.runFirst[run]! + offset);
      part.runCount[0] = n;
      const share = out.length === pieces.length - 1 ? reservedLeft : Math.min(reservedLeft, Math.round((b.reserved * n) / b.count));
      reservedLeft -= share;
      part.reserved = share;
      part.bytes += share;
      part.closed = true;
      out.push(part);
    }
    return out;
  }

  /**
   * An acknowledged batch: its frame buffer serves a later batch. Safe because the reply shows the broker
   * received the whole frame (the socket holds none of it any more) and no attempt of the batch is pending.
   */
  recycle(b: ProducerBatch): void {
    const buf = b.frame.detach();
    // Small buffers come from Node's shared pool anyway; a lone oversized record's buffer is not kept.
    if (buf.length > 4096 && buf.length <= this.frameLimit && this.spareBytes + buf.length <= this.maxSpareBytes) {
      this.spare.push(buf);
      this.spareBytes += buf.length;
    }
  }

  private takeSpare(): Buffer | undefined {
    const buf = this.spare.pop();
    if (buf) this.spareBytes -= buf.length;
    return buf;
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
      // Room for a somewhat larger batch than this one: the next need not grow (and reaches frameLimit at most).
      this.noteBatchSize(q, b.frame.length);
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

/** Cancels a batch's linger wait, whichever kind it is. */
export function cancelLinger(b: ProducerBatch): void {
  if (b.timer) clearTimeout(b.timer);
  b.timer = undefined;
  b.lingersToTurnEnd = false;
}

import { randomUUID } from 'node:crypto';
import { setMaxListeners } from 'node:events';
import { type Acks, type BatchRecord, encodeBatch } from 'tributary-protocol/batch.js';
import { isErrorReply, parseError, parseLine } from 'tributary-protocol/command.js';
import { TributaryError } from 'tributary-protocol/errors.js';
import { DEFAULT_MAX_FRAME_BYTES } from 'tributary-protocol/frame.js';
import { partitionForKey } from 'tributary-protocol/partitioner.js';
import type { RecordHeader } from 'tributary-protocol/record.js';
import { untilAborted } from './abort.js';
import { Cluster, checkStallTimeout, DEFAULT_STALL_TIMEOUT_MS } from './cluster.js';
import type { Connection } from 'tributary-protocol/connection.js';
import { channels, publish, TypedEmitter } from './events.js';
import { isRetriable, type RetryOptions, retry } from './retry.js';
import { ProducerFencedError, Transaction, TransactionStateError, typedTxnError } from './transaction.js';

// ---------------------------------------------------------------------------------------------------
// Public types
// ---------------------------------------------------------------------------------------------------

export type ProducerAcks = 0 | 1 | 'all';

export type HeaderValue = string | Buffer | Uint8Array;

/** Headers as an object (`{ traceId: 'abc' }`) or as a list (repeated keys allowed, order kept). */
export type ProducerHeaders = Record<string, HeaderValue> | Array<{ key: string; value: HeaderValue }>;

export interface ProducerMessage {
  /** Records with the same key land on the same partition (FNV-1a 64 of the key, like the broker). */
  key?: string | Buffer | Uint8Array | null;
  value: string | Buffer | Uint8Array;
  headers?: ProducerHeaders;
  /** Explicit partition; wins over the key. */
  partition?: number;
  /** Milliseconds since the epoch (or a Date); omitted or 0: the broker stamps the record on append. */
  timestamp?: number | Date;
}

export interface ProducerRecord {
  topic: string;
  messages: ProducerMessage[];
}

export interface RecordMetadata {
  topic: string;
  partition: number;
  /** The record's offset; -1 with `acks: 0` (the broker does not say where it appended). */
  offset: number;
}

export interface ProducerOptions {
  /** Bootstrap brokers, `host:port`. */
  brokers: string[];
  clientId?: string;
  /** 0: fire and forget; 1 / 'all': wait until the record is durable (the same on a standalone broker). */
  acks?: ProducerAcks;
  /** How long a partition's batch waits for more records before it is sent. */
  lingerMs?: number;
  /** A batch is sent once adding the next record would pass this many bytes (a larger record goes alone). */
  maxBatchBytes?: number;
  /** A batch is sent once it holds this many records (default: no limit besides bytes). */
  maxBatchRecords?: number;
  /** Memory for records not yet acknowledged; `send()` waits for room beyond it. */
  maxBufferedBytes?: number;
  /** Batches of one partition on the wire at once (pipelined on the leader's shared connection). */
  maxInFlightPerPartition?: number;
  /** A batch reply that takes longer fails the attempt (and is retried); also the longest wait for buffer room. */
  requestTimeoutMs?: number;
  retry?: RetryOptions;
  /** TLS for every broker connection (CA, client certificate and key, servername). */
  tls?: import('node:tls').ConnectionOptions;
  /** Credentials (`AUTH principal= token=`) for brokers with authentication on. */
  auth?: import('tributary-protocol/connection.js').AuthOptions;
  /**
   * A broker connection on which nothing arrives for this long past a request's own wait, while the
   * broker does not answer a ping either, is failed (connection_lost) and its batches are retried;
   * also how long one broker gets to answer a leader lookup. Default 3000.
   */
  stallTimeoutMs?: number;
  /**
   * Idempotent producing: the producer gets a random id, numbers each partition's records, and the broker
   * answers a retried batch it already appended with the original offsets instead of appending it again,
   * so retries never duplicate. Needs `maxInFlightPerPartition` <= 5 and `acks` 1 or "all".
   */
  idempotent?: boolean;
  /**
   * Makes this a transactional producer: records are written through `transaction()` only. The id names
   * the producer across restarts: a new Producer with the same id fences this one (its transactions are
   * refused with ProducerFencedError) and aborts a transaction it left open.
   */
  transactionalId?: string;
  /** How long a transaction may stay open before the broker aborts it (default: the broker's, 60 s). */
  transactionTimeoutMs?: number;
}

export interface ProducerEvents {
  /** A batch was acknowledged. */
  send: { topic: string; partition: number; records: number; durationMs: number; baseOffset: number };
  /** A batch failed for good: every send() with a record in it rejects with `error`. */
  error: { error: Error; topic: string; partition: number; records: number };
  /** A batch attempt failed with a retriable error and will be sent again after `delayMs`. */
  retry: { error: Error; topic: string; partition: number; attempt: number; delayMs: number };
}

export type ProducerState = 'open' | 'closing' | 'closed';

const DEFAULTS = {
  acks: 'all' as ProducerAcks,
  lingerMs: 5,
  maxBatchBytes: 256 * 1024,
  maxBatchRecords: Number.POSITIVE_INFINITY,
  maxBufferedBytes: 32 * 1024 * 1024,
  maxInFlightPerPartition: 5,
  requestTimeoutMs: 30_000,
};

 /** The broker remembers this many batches per producer and partition for duplicate detection. */
export const MAX_IDEMPOTENT_IN_FLIGHT = 5;

const ID_RE = /^[A-Za-z0-9._-]{1,200}$/;

function configError(option: string, reason: string): TributaryError {
  return new TributaryError('invalid_config', { option, reason }, `invalid producer option ${option}: ${reason}`);
}

function checkInt(o: Record<string, unknown>, key: string, min: number, max = Number.MAX_SAFE_INTEGER): void {
  const v = o[key];
  if (v === undefined) return;
  if (typeof v !== 'number' || !Number.isSafeInteger(v) || v < min || v > max) {
    throw configError(key, max === Number.MAX_SAFE_INTEGER ? `must be an integer >= ${min}` : `must be an integer ${min}..${max}`);
  }
}

/** Validates options up front: a producer that cannot work fails at construction, not on first send. */
export function validateProducerOptions(o: ProducerOptions): void {
  if (!o || typeof o !== 'object') throw configError('options', 'required');
  if (!Array.isArray(o.brokers) || o.brokers.length === 0 || o.brokers.some((b) => typeof b !== 'string')) {
    throw configError('brokers', 'at least one bootstrap broker (host:port) is required');
  }
  if (o.clientId !== undefined && (typeof o.clientId !== 'string' || !ID_RE.test(o.clientId))) {
    throw configError('clientId', '1-200 characters of letters, digits, ".", "_", "-"');
  }
  if (o.acks !== undefined && o.acks !== 0 && o.acks !== 1 && o.acks !== 'all') throw configError('acks', 'expected 0, 1 or "all"');
  const r = o as unknown as Record<string, unknown>;
  checkInt(r, 'lingerMs', 0, 3_600_000);
  checkInt(r, 'maxBatchBytes', 1, DEFAULT_MAX_FRAME_BYTES);
  checkInt(r, 'maxBatchRecords', 1);
  checkInt(r, 'maxBufferedBytes', 1);
  checkInt(r, 'maxInFlightPerPartition', 1, 1000);
  checkInt(r, 'requestTimeoutMs', 1);
  const stall = checkStallTimeout(o.stallTimeoutMs);
  if (stall) throw configError('stallTimeoutMs', stall);
  if (o.retry !== undefined && (o.retry === null || typeof o.retry !== 'object')) throw configError('retry', 'must be an object');
  if (o.idempotent !== undefined && typeof o.idempotent !== 'boolean') throw configError('idempotent', 'must be a boolean');
  if (o.transactionalId !== undefined && (typeof o.transactionalId !== 'string' || o.transactionalId.length === 0 || Buffer.byteLength(o.transactionalId, 'utf8') > 255 || /[\s"=]/.test(o.transactionalId))) {
    throw configError('transactionalId', '1-255 bytes without spaces, quotes or "="');
  }
  checkInt(r, 'transactionTimeoutMs', 1, 2 ** 31 - 1);
  if (o.transactionTimeoutMs !== undefined && o.transactionalId === undefined) throw configError('transactionTimeoutMs', 'only for a transactional producer (transactionalId)');
  if (o.idempotent === true) {
    if (o.maxInFlightPerPartition !== undefined && o.maxInFlightPerPartition > MAX_IDEMPOTENT_IN_FLIGHT) {
      throw configError('maxInFlightPerPartition', `at most ${MAX_IDEMPOTENT_IN_FLIGHT} with idempotent: true`);
    }
    if (o.acks === 0) throw configError('acks', 'idempotent: true needs acks 1 or "all"');
  }
}

// ---------------------------------------------------------------------------------------------------
// Partitioning and sizing (pure functions, unit tested without a broker)
// ---------------------------------------------------------------------------------------------------

/**
 * The partition of a record: explicit, else FNV-1a 64 of the key modulo the partition count (the broker's
 * own partitioner, so a keyed record lands where the broker would put it), else round-robin.
 * An empty key is no key (the wire cannot tell them apart).
 */
export function choosePartition(key: Buffer | null, explicit: number | undefined, partitions: number, nextRoundRobin: () => number): number {
  if (explicit !== undefined) return explicit;
  if (key && key.length > 0) return partitionForKey(key, partitions);
  return nextRoundRobin() % partitions;
}

/** Fixed bytes of a batch frame besides its records: magic, topic, partition, acks, flags, sequences, count. */
export function batchOverhead(topic: string): number {
  return 2 + 2 + Buffer.byteLength(topic, 'utf8') + 4 + 1 + 3 + 1 + 16 + 4;
}

/** Bytes a record takes in a batch frame (with record_extensions_v1, which the SDK always asks for). */
export function recordSize(r: Pick<BatchRecord, 'key' | 'value' | 'headers'>): number {
  let n = 8 + 8 + 2 + 2 + (r.key?.length ?? 0) + 8 + 4 + r.value.length + 8 + 1 + 2;
  for (const h of r.headers) n += 2 + Buffer.byteLength(h.key, 'utf8') + 4 + h.value.length;
  return n;
}

function toBuffer(v: HeaderValue): Buffer {
  if (typeof v === 'string') return Buffer.from(v, 'utf8');
  return Buffer.isBuffer(v) ? v : Buffer.from(v.buffer, v.byteOffset, v.byteLength);
}

function badMessage(index: number, reason: string): TributaryError {
  return new TributaryError('invalid_parameter', { param: `messages[${index}]`, reason }, `invalid message ${index}: ${reason}`);
}

/** A message checked and converted to a wire record (offset and sequence are the broker's business). */
export function toBatchRecord(m: ProducerMessage, index: number): BatchRecord {
  if (!m || typeof m !== 'object') throw badMessage(index, 'must be an object');
  if (typeof m.value !== 'string' && !(m.value instanceof Uint8Array)) throw badMessage(index, 'value must be a string, Buffer or Uint8Array');
  let key: Buffer | null = null;
  if (m.key !== undefined && m.key !== null) {
    if (typeof m.key !== 'string' && !(m.key instanceof Uint8Array)) throw badMessage(index, 'key must be a string, Buffer or Uint8Array');
    key = toBuffer(m.key);
    if (key.length > 0xffff) throw badMessage(index, 'key longer than 65535 bytes');
    if (key.length === 0) key = null;
  }
  let timestamp = 0;
  if (m.timestamp !== undefined) {
    timestamp = m.timestamp instanceof Date ? m.timestamp.getTime() : m.timestamp;
    if (typeof timestamp !== 'number' || !Number.isSafeInteger(timestamp) || timestamp < 0) throw badMessage(index, 'timestamp must be a non-negative integer (ms) or a valid Date');
  }
  const headers: RecordHeader[] = [];
  if (m.headers !== undefined) {
    if (m.headers === null || typeof m.headers !== 'object') throw badMessage(index, 'headers must be an object or an array');
    const entries: Array<[string, unknown]> = Array.isArray(m.headers) ? m.headers.map((h) => [h?.key, h?.value]) : Object.entries(m.headers);
    if (entries.length > 0xffff) throw badMessage(index, 'more than 65535 headers');
    for (const [k, v] of entries) {
      if (typeof k !== 'string') throw badMessage(index, 'header keys must be strings');
      if (Buffer.byteLength(k, 'utf8') > 0xffff) throw badMessage(index, 'header key longer than 65535 bytes');
      if (typeof v !== 'string' && !(v instanceof Uint8Array)) throw badMessage(index, `header ${k} must be a string, Buffer or Uint8Array`);
      headers.push({ key: k, value: toBuffer(v) });
    }
  }
  return { offset: 0, sequence: 0, producerId: '', key, epoch: -1, value: toBuffer(m.value), timestamp, attributes: 0, headers };
}

// ---------------------------------------------------------------------------------------------------
// Accumulator: per-partition queues of batches (no I/O; the producer drives it)
// ---------------------------------------------------------------------------------------------------

/** Where a record's outcome goes: the send() it came from and its position there. */
export interface RecordSink {
  settle(index: number, err: Error | null, meta?: RecordMetadata): void;
}

export class ProducerBatch {
  readonly records: BatchRecord[] = [];
  readonly sinks: Array<{ sink: RecordSink; index: number }> = [];
  /** Estimated frame bytes (header + records). */
  bytes: number;
  /** Bytes held against maxBufferedBytes (records only). */
  reserved = 0;
  /** A closed batch takes no more records and is ready to send. */
  closed = false;
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
function needsNewNumbers(q: PartitionQueue, b: ProducerBatch): boolean {
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
  private readonly queues = new Map<string, PartitionQueue>();

  constructor(private readonly limits: AccumulatorLimits) {}

  queue(topic: string, partition: number): PartitionQueue {
    const k = `${partition}:${topic}`;
    let q = this.queues.get(k);
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
      this.queues.set(k, q);
    }
    return q;
  }

  all(): PartitionQueue[] {
    return [...this.queues.values()];
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
    tail.sinks.push({ sink, index });
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
    for (const q of this.queues.values()) {
      for (const b of q.batches) b.closed = true;
      if (q.batches.length > 0) out.push(q);
    }
    return out;
  }

  /** Every batch not completed yet: queued, in flight or being retried. */
  pending(): ProducerBatch[] {
    const out: ProducerBatch[] = [];
    for (const q of this.queues.values()) out.push(...q.inFlight, ...q.batches);
    return out;
  }

  /** Closed head batches that may be sent now without passing the in-flight limit or overtaking a retry. */
  takeReady(q: PartitionQueue, maxInFlight: number): ProducerBatch[] {
    const out: ProducerBatch[] = [];
    while (this.canSend(q, maxInFlight)) {
      const b = q.batches.shift()!;
      q.inFlight.add(b);
      out.push(b);
    }
    return out;
  }

  /** True when the queue can send its head batch right now. */
  canSend(q: PartitionQueue, maxInFlight: number): boolean {
    return q.retrying === 0 && q.inFlight.size < maxInFlight && q.batches.length > 0 && q.batches[0]!.closed && !numberingUnsettled(q);
  }
}

// ---------------------------------------------------------------------------------------------------
// Producer
// ---------------------------------------------------------------------------------------------------

/** One send(): collects the metadata of its records and settles once all are in. */
class SendResult implements RecordSink {
  readonly results: RecordMetadata[];
  private remaining: number;
  private settled = false;
  readonly promise: Promise<RecordMetadata[]>;
  private resolve!: (r: RecordMetadata[]) => void;
  private reject!: (e: Error) => void;

  constructor(count: number) {
    this.results = new Array(count);
    this.remaining = count;
    this.promise = new Promise<RecordMetadata[]>((resolve, reject) => {
      this.resolve = resolve;
      this.reject = reject;
    });
    // The caller may stop waiting (signal): a later failure must not become an unhandled rejection.
    this.promise.catch(() => {});
  }

  settle(index: number, err: Error | null, meta?: RecordMetadata): void {
    if (this.settled) return;
    if (err) {
      this.settled = true;
      this.reject(err);
      return;
    }
    this.results[index] = meta!;
    if (--this.remaining === 0) {
      this.settled = true;
      this.resolve(this.results);
    }
  }

  fail(err: Error): void {
    if (this.settled) return;
    this.settled = true;
    this.reject(err);
  }
}

interface BatchAck {
  partition: number;
  base_offset: number;
  last_offset?: number;
  count?: number;
}

/**
 * A batching producer. Records are grouped by (topic, partition); a partition's batch is sent when it
 * is full (`maxBatchBytes` / `maxBatchRecords`) or `lingerMs` after its first record, as one binary
 * batch frame to the partition leader on the leader's shared connection. Up to
 * `maxInFlightPerPartition` batches of a partition are pipelined; the broker appends one connection's
 * batches in the order sent, so records of one partition keep their send order.
 *
 * Delivery is at least once. A batch that fails with a retriable error (NOT_LEADER, a lost connection,
 * a timeout) is sent again through the retry module (exponential backoff with jitter); NOT_LEADER
 * updates the leader cache first. Retries of a partition run one at a time, oldest unsettled batch
 * first, and hold back its newer batches, so a retry does not overtake. Without idempotence a batch whose reply was lost,
 * but which the broker had appended, is appended again when it is retried: a retry may DUPLICATE
 * records. And with `maxInFlightPerPartition` > 1, a batch that failed while a later one succeeded is
 * written after that later one: use `maxInFlightPerPartition: 1` when even that reordering matters.
 * With `idempotent: true` batches carry this producer's id, an epoch and per-partition sequence
 * numbers (assigned at first send, renewed only once the broker showed they were never appended): the
 * broker answers a batch it already has with the original offsets, and refuses a batch that would skip
 * ahead of a failed one (out_of_order_sequence), so retries neither duplicate nor reorder.
 */
export class Producer extends TypedEmitter<ProducerEvents> {
  readonly options: {
    brokers: string[];
    clientId: string;
    acks: ProducerAcks;
    lingerMs: number;
    maxBatchBytes: number;
    maxBatchRecords: number;
    maxBufferedBytes: number;
    maxInFlightPerPartition: number;
    requestTimeoutMs: number;
    stallTimeoutMs: number;
    retry: RetryOptions;
    idempotent: boolean;
    transactionalId: string | undefined;
    transactionTimeoutMs: number | undefined;
  };
  /** Idempotent producers: this producer's id (a random UUID); '' otherwise. */
  readonly producerId: string;
  private readonly cluster: Cluster;
  private readonly accumulator: RecordAccumulator;
  private readonly wireAcks: Acks;
  /** Aborted by a forced close: retries stop and everything pending fails with client_closed. */
  private readonly root = new AbortController();
  private readonly roundRobin = new Map<string, number>();
  private buffered = 0;
  private roomWaiter: { size: number; wake: () => void } | undefined;
  /** A send is queuing its records on the slow path (waiting for metadata or room); others wait their turn. */
  private admitting = false;
  private readonly admissionQueue: Array<() => void> = [];
  private readonly partitionCounts = new Map<string, number>();
  private stateValue: ProducerState = 'open';
  /** Transactional producers: the producer id and epoch from INIT_PRODUCER_ID (once per producer). */
  private txnIds: Promise<{ producerId: string; epoch: number }> | undefined;
  private openTxn: Transaction | undefined;
  /** Set once a transaction command was fenced: this producer may not write again. */
  private fencedBy: ProducerFencedError | undefined;
  private closePromise: Promise<void> | undefined;

  constructor(options: ProducerOptions) {
    super();
    validateProducerOptions(options);
    this.options = {
      brokers: options.brokers,
      clientId: options.clientId ?? 'tributary-producer',
      acks: options.acks ?? DEFAULTS.acks,
      lingerMs: options.lingerMs ?? DEFAULTS.lingerMs,
      maxBatchBytes: options.maxBatchBytes ?? DEFAULTS.maxBatchBytes,
      maxBatchRecords: options.maxBatchRecords ?? DEFAULTS.maxBatchRecords,
      maxBufferedBytes: options.maxBufferedBytes ?? DEFAULTS.maxBufferedBytes,
      maxInFlightPerPartition: options.maxInFlightPerPartition ?? DEFAULTS.maxInFlightPerPartition,
      requestTimeoutMs: options.requestTimeoutMs ?? DEFAULTS.requestTimeoutMs,
      stallTimeoutMs: options.stallTimeoutMs ?? DEFAULT_STALL_TIMEOUT_MS,
      retry: options.retry ?? {},
      idempotent: options.idempotent ?? false,
      transactionalId: options.transactionalId,
      transactionTimeoutMs: options.transactionTimeoutMs,
    };
    this.producerId = this.options.idempotent ? randomUUID() : '';
    this.cluster = new Cluster({ brokers: options.brokers, retry: options.retry, tls: options.tls, auth: options.auth, stallTimeoutMs: this.options.stallTimeoutMs });
    this.accumulator = new RecordAccumulator({ maxBatchBytes: this.options.maxBatchBytes, maxBatchRecords: this.options.maxBatchRecords });
    this.wireAcks = this.options.acks === 0 ? '0' : this.options.acks === 1 ? '1' : 'all';
    setMaxListeners(0, this.root.signal);
  }

  get state(): ProducerState {
    return this.stateValue;
  }

  /** Bytes of records accepted by send() and not yet acknowledged (or failed). */
  get bufferedBytes(): number {
    return this.buffered;
  }

  // ---- transactions ----

  /**
   * INIT_PRODUCER_ID, once per producer (transaction() runs it when needed): fences every older producer of
   * the transactional id and aborts a transaction one of them left open. Call it at startup so a restarted
   * process releases its predecessor's transaction at once, not when it first has something to write.
   */
  initTransactions(opts: { signal?: AbortSignal } = {}): Promise<{ producerId: string; epoch: number }> {
    const id = this.options.transactionalId;
    if (id === undefined) return Promise.reject(configError('transactionalId', 'initTransactions() needs a transactional producer'));
    if (this.fencedBy) return Promise.reject(this.fencedBy);
    if (!this.txnIds) {
      const init = this.txnCommand('INIT_PRODUCER_ID', { transactional_id: id, transaction_timeout_ms: this.options.transactionTimeoutMs }, opts.signal).then((r) => ({
        producerId: r.get('producerId')!,
        epoch: Number(r.get('epoch')),
      }));
      this.txnIds = init;
      init.catch(() => {
        if (this.txnIds === init) this.txnIds = undefined;
      });
    }
    return this.txnIds;
  }

  private async txnCommand(name: string, fields: Record<string, string | number | undefined>, signal: AbortSignal | undefined): Promise<Map<string, string>> {
    try {
      return parseLine(await this.cluster.coordinatorCommand({ transactional_id: this.options.transactionalId! }, name, fields, { signal })).params;
    } catch (err) {
      const e = typedTxnError(err);
      if (e instanceof ProducerFencedError) this.fencedBy ??= e;
      throw e;
    }
  }

  /**
   * Begins a transaction (the first call also runs INIT_PRODUCER_ID, which fences older producers of the
   * transactional id). One transaction at a time: end it with commit() or abort() before the next.
   * After a ProducerFencedError the producer cannot write again: create a new one.
   */
  async transaction(opts: { signal?: AbortSignal } = {}): Promise<Transaction> {
    const id = this.options.transactionalId;
    if (id === undefined) throw configError('transactionalId', 'transaction() needs a transactional producer');
    if (this.stateValue !== 'open') throw new TributaryError('client_closed');
    if (this.fencedBy) throw this.fencedBy;
    if (this.openTxn) throw new TransactionStateError('invalid_txn_state', { reason: 'a transaction is already open: commit or abort it first' });
    const ids = await this.initTransactions(opts);
    // Claimed before BEGIN is sent, so two concurrent calls cannot both begin.
    const placeholder = {} as Transaction;
    this.openTxn = placeholder;
    try {
      await this.txnCommand('BEGIN_TXN', { transactional_id: id, producerId: ids.producerId, epoch: ids.epoch }, opts.signal);
    } catch (err) {
      this.openTxn = undefined;
      throw err;
    }
    const txn = new Transaction(
      {
        cluster: this.cluster,
        ended: (t) => {
          if (this.openTxn === t) this.openTxn = undefined;
        },
        fenced: (e) => {
          this.fencedBy ??= e;
        },
      },
      id,
      ids.producerId,
      ids.epoch,
    );
    this.openTxn = txn;
    return txn;
  }

  // ---- sending ----

  /**
   * Queues the messages and resolves once every one is acknowledged (with `acks: 0`, once written to
   * the connection and answered), with one RecordMetadata per message in order. Rejects with the first
   * error of any of its records. Waits for buffer room when more than `maxBufferedBytes` is pending:
   * `buffer_full` after `requestTimeoutMs`. Aborting `signal` stops the waiting: messages not queued
   * yet are dropped, messages already queued may still be written.
   */
  async send(record: ProducerRecord, opts: { signal?: AbortSignal } = {}): Promise<RecordMetadata[]> {
    if (this.stateValue !== 'open') throw new TributaryError('client_closed');
    if (this.options.transactionalId !== undefined) {
      throw new TransactionStateError('invalid_txn_state', { reason: 'a transactional producer sends through producer.transaction()' });
    }
    const signal = opts.signal;
    signal?.throwIfAborted();
    if (!record || typeof record !== 'object') throw new TributaryError('invalid_parameter', { param: 'record', reason: 'required' });
    const { topic, messages } = record;
    if (typeof topic !== 'string' || topic.length === 0) throw new TributaryError('invalid_parameter', { param: 'topic', reason: 'required' });
    if (!Array.isArray(messages)) throw new TributaryError('invalid_parameter', { param: 'messages', reason: 'must be an array' });
    if (messages.length === 0) return [];
    // Every message is checked before any is queued: a bad one fails the send as a whole.
    const records = messages.map((m, i) => toBatchRecord(m, i));
    const sizes = records.map(recordSize);
    for (let i = 0; i < messages.length; i++) {
      const p = messages[i]!.partition;
      if (p !== undefined && (typeof p !== 'number' || !Number.isSafeInteger(p) || p < 0)) throw badMessage(i, 'partition must be a non-negative integer');
      if (sizes[i]! > this.options.maxBufferedBytes) {
        throw new TributaryError('record_too_large', { index: i, size: sizes[i]!, max: this.options.maxBufferedBytes, option: 'maxBufferedBytes' });
      }
    }

    const result = new SendResult(messages.length);
    const known = this.partitionCounts.get(topic);
    const total = sizes.reduce((a, b) => a + b, 0);
    if (!this.admitting && known !== undefined && this.buffered + total <= this.options.maxBufferedBytes) {
      // Fast path: nobody is queuing, the topic is known and there is room: queue everything now.
      this.checkPartitions(topic, messages, known);
      this.buffered += total;
      for (let i = 0; i < records.length; i++) this.appendRecord(topic, known, messages[i]!.partition, records[i]!, sizes[i]!, result, i);
    } else {
      await this.enterAdmission(signal);
      try {
        const partitions = await this.partitionCount(topic, signal);
        this.checkPartitions(topic, messages, partitions);
        for (let i = 0; i < records.length; i++) {
          await this.reserve(sizes[i]!, signal);
          if (this.root.signal.aborted) throw new TributaryError('client_closed');
          this.appendRecord(topic, partitions, messages[i]!.partition, records[i]!, sizes[i]!, result, i);
        }
      } catch (err) {
        // Messages queued before the failure may still be written; their outcome no longer matters here.
        result.fail(err as Error);
        throw err;
      } finally {
        this.leaveAdmission();
      }
    }
    return signal ? untilAborted(result.promise, signal) : result.promise;
  }

  private checkPartitions(topic: string, messages: ProducerMessage[], partitions: number): void {
    for (const m of messages) {
      if (m.partition !== undefined && m.partition >= partitions) throw new TributaryError('partition_not_found', { topic, partition: m.partition, partitions });
    }
  }

  private appendRecord(topic: string, partitions: number, explicit: number | undefined, rec: BatchRecord, size: number, sink: RecordSink, index: number): void {
    const partition = choosePartition(rec.key, explicit, partitions, () => this.nextRoundRobin(topic));
    const { batch, created, closed } = this.accumulator.append(topic, partition, rec, size, sink, index, Date.now());
    if (created) this.armLinger(batch);
    if (closed) this.pump(this.accumulator.queue(topic, partition));
  }

  /** The topic's partition count from METADATA, cached (forgotten when the topic turns out to be gone). */
  private async partitionCount(topic: string, signal: AbortSignal | undefined): Promise<number> {
    const known = this.partitionCounts.get(topic);
    if (known !== undefined) return known;
    const md = await this.cluster.metadata(topic, signal);
    if (!Number.isSafeInteger(md.partitions) || md.partitions < 1) throw new TributaryError('metadata_unavailable', { topic, reason: 'no partitions in METADATA' });
    this.partitionCounts.set(topic, md.partitions);
    return md.partitions;
  }

  /**
   * Queuing is one send at a time, in call order, so records are appended in the order send() was
   * called. Resolves when it is the caller's turn (at once when nobody queues); the wait is bounded by
   * the signal and by requestTimeoutMs (`buffer_full`: the sends ahead are stuck on a full buffer).
   */
  private enterAdmission(signal: AbortSignal | undefined, bounded = true): Promise<void> | void {
    if (!this.admitting) {
      this.admitting = true;
      return;
    }
    const started = Date.now();
    return new Promise<void>((resolve, reject) => {
      const turn = () => {
        cleanup();
        resolve();
      };
      const cancel = (err: unknown) => {
        const i = this.admissionQueue.indexOf(turn);
        if (i >= 0) this.admissionQueue.splice(i, 1);
        cleanup();
        reject(err);
      };
      const cleanup = () => {
        clearTimeout(timer);
        signal?.removeEventListener('abort', onAbort);
      };
      const onAbort = () => cancel(signal!.reason);
      const timer = bounded
        ? setTimeout(
            () => cancel(new TributaryError('buffer_full', { waitedMs: Date.now() - started, buffered: this.buffered, max: this.options.maxBufferedBytes })),
            this.options.requestTimeoutMs,
          )
        : undefined;
      signal?.addEventListener('abort', onAbort, { once: true });
      this.admissionQueue.push(turn);
    });
  }

  private leaveAdmission(): void {
    const next = this.admissionQueue.shift();
    if (next) next();
    else this.admitting = false;
  }

  /** Holds `size` bytes of buffer, waiting for acknowledgements to free room when the buffer is full. */
  private async reserve(size: number, signal: AbortSignal | undefined): Promise<void> {
    if (this.buffered + size <= this.options.maxBufferedBytes) {
      this.buffered += size;
      return;
    }
    // Full: whatever is lingering goes out now, so acknowledgements can make room.
    for (const q of this.accumulator.closeAll()) this.pump(q);
    const started = Date.now();
    await new Promise<void>((resolve, reject) => {
      const finish = (err?: unknown) => {
        clearTimeout(timer);
        signal?.removeEventListener('abort', onAbort);
        this.root.signal.removeEventListener('abort', onClose);
        this.roomWaiter = undefined;
        if (err) reject(err);
        else resolve();
      };
      const onAbort = () => finish(signal!.reason);
      const onClose = () => finish(new TributaryError('client_closed'));
      const timer = setTimeout(
        () => finish(new TributaryError('buffer_full', { waitedMs: Date.now() - started, buffered: this.buffered, max: this.options.maxBufferedBytes })),
        this.options.requestTimeoutMs,
      );
      signal?.addEventListener('abort', onAbort, { once: true });
      this.root.signal.addEventListener('abort', onClose, { once: true });
      this.roomWaiter = {
        size,
        wake: () => {
          if (this.buffered + size <= this.options.maxBufferedBytes) finish();
        },
      };
    });
    this.buffered += size;
  }

  private release(size: number): void {
    this.buffered -= size;
    this.roomWaiter?.wake();
  }

  private nextRoundRobin(topic: string): number {
    const n = this.roundRobin.get(topic) ?? 0;
    this.roundRobin.set(topic, (n + 1) % Number.MAX_SAFE_INTEGER);
    return n;
  }

  private armLinger(batch: ProducerBatch): void {
    batch.timer = setTimeout(() => {
      batch.timer = undefined;
      if (batch.closed) return;
      batch.closed = true;
      this.pump(this.accumulator.queue(batch.topic, batch.partition));
    }, this.options.lingerMs);
  }

  // ---- the sender ----

  /** Sends what the partition may send now. One pump per partition at a time keeps batches in order. */
  private pump(q: PartitionQueue): void {
    if (q.pumping) {
      q.again = true;
      return;
    }
    q.pumping = true;
    void this.pumpLoop(q);
  }

  private async pumpLoop(q: PartitionQueue): Promise<void> {
    const max = this.options.maxInFlightPerPartition;
    try {
      do {
        q.again = false;
        if (!this.accumulator.canSend(q, max)) continue;
        let conn: Connection;
        try {
          conn = await this.cluster.connection(await this.cluster.leaderFor(q.topic, q.partition, this.root.signal), this.root.signal);
        } catch (err) {
          // No route to the leader: the head batch takes the failure (and its retries), the rest wait behind it.
          const [head] = this.accumulator.takeReady(q, Math.min(max, q.inFlight.size + 1));
          if (head) {
            this.startBatch(head, q);
            this.onAttemptFailure(q, head, err);
          }
          continue;
        }
        // Written synchronously one after another: the connection keeps them in this order.
        for (const b of this.accumulator.takeReady(q, max)) {
          this.startBatch(b, q);
          this.transmit(conn, b).then(
            (ack) => this.complete(q, b, null, ack),
            (err) => this.onAttemptFailure(q, b, err),
          );
        }
      } while (q.again);
    } finally {
      // Cleared in the same turn the loop ends: a pump() after this point starts a new loop, none is lost.
      q.pumping = false;
    }
  }

  private startBatch(b: ProducerBatch, q: PartitionQueue): void {
    if (this.options.idempotent && b.firstSequence < 0) {
      // Numbered in send order; a retry sends the same numbers (that is what makes it detectable).
      if (q.bumpEpoch) {
        q.bumpEpoch = false;
        q.epoch++;
        q.nextSequence = 0;
      }
      this.number(q, b);
    }
    b.dispatched = true;
    b.startedAt = Date.now();
    if (b.timer) {
      clearTimeout(b.timer);
      b.timer = undefined;
    }
  }

  private number(q: PartitionQueue, b: ProducerBatch): void {
    b.firstSequence = q.nextSequence;
    b.epoch = q.epoch;
    q.nextSequence += b.records.length;
    for (let i = 0; i < b.records.length; i++) {
      const r = b.records[i]!;
      r.producerId = this.producerId;
      r.epoch = b.epoch;
      r.sequence = b.firstSequence + i;
    }
  }

  /**
   * New numbers for a batch the broker showed it never appended (and, by the sequence rule, nothing
   * numbered after it in that epoch either): the next ones of a newer epoch. Only the oldest unsettled
   * batch is renumbered, and new batches wait meanwhile, so send order holds and nothing is written twice.
   */
  private renumber(q: PartitionQueue, b: ProducerBatch): void {
    if (q.bumpEpoch || q.epoch <= b.epoch) {
      q.bumpEpoch = false;
      q.epoch = Math.max(q.epoch, b.epoch) + 1;
      q.nextSequence = 0;
    }
    this.number(q, b);
  }

  /** One attempt: the batch frame on `conn`, its reply parsed (with a reply deadline). */
  private async transmit(conn: Connection, b: ProducerBatch): Promise<BatchAck> {
    if (!conn.extensions && b.records.some((r) => r.headers.length > 0 || r.timestamp > 0)) {
      throw new TributaryError('UNSUPPORTED_FEATURE', { feature: 'record_extensions_v1', reason: 'the broker cannot carry record headers or timestamps' });
    }
    const frame = encodeBatch(
      b.firstSequence >= 0
        ? {
            topic: b.topic,
            partition: b.partition,
            acks: this.wireAcks,
            idempotent: true,
            firstSequence: b.firstSequence,
            lastSequence: b.firstSequence + b.records.length - 1,
            records: b.records,
          }
        : { topic: b.topic, partition: b.partition, acks: this.wireAcks, idempotent: false, firstSequence: 0, lastSequence: 0, records: b.records },
      { extensions: conn.extensions },
    );
    const request = conn.request(frame);
    request.catch(() => {}); // settled below or abandoned on timeout
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<never>((_, reject) => {
      timer = setTimeout(() => {
        reject(new TributaryError('request_timeout', { reason: 'no reply to the batch', timeoutMs: this.options.requestTimeoutMs }));
        // A reply that never comes blocks every reply behind it: drop the connection (its other
        // requests fail with connection_lost and are retried on a new one).
        conn.abandon(new TributaryError('connection_lost', { reason: 'no reply to an earlier batch', timeoutMs: this.options.requestTimeoutMs }));
      }, this.options.requestTimeoutMs);
    });
    try {
      const reply = await Promise.race([request, timeout]);
      if (reply.kind !== 'text') throw new TributaryError('internal_error', { reason: 'unexpected batch reply to a produce batch' });
      if (isErrorReply(reply.text)) throw parseError(reply.text);
      if (this.wireAcks === '0') return { partition: b.partition, base_offset: -1 };
      let ack: BatchAck;
      try {
        ack = JSON.parse(reply.text) as BatchAck;
      } catch {
        throw new TributaryError('internal_error', { reason: `unexpected reply ${reply.text.slice(0, 80)}` });
      }
      if (typeof ack.base_offset !== 'number') throw new TributaryError('internal_error', { reason: `unexpected reply ${reply.text.slice(0, 80)}` });
      return ack;
    } finally {
      clearTimeout(timer);
    }
  }

  /**
   * A failed attempt. Retriable errors make the batch wait for a retry; retries run one at a time, oldest
   * unsettled batch first, and while one waits the partition sends nothing new.
   */
  private onAttemptFailure(q: PartitionQueue, b: ProducerBatch, err: unknown): void {
    this.cluster.onLeaderError(q.topic, q.partition, err);
    if (err instanceof TributaryError && (err.code === 'topic_not_found' || err.code === 'partition_not_found')) {
      this.partitionCounts.delete(q.topic);
      this.cluster.invalidateMetadata(q.topic);
    }
    if (this.root.signal.aborted) {
      this.complete(q, b, new TributaryError('client_closed'));
      return;
    }
    const verdict = this.sequenceVerdict(q, b, err);
    if (verdict === 'final' || (verdict === undefined && !isRetriable(err))) {
      this.complete(q, b, err as Error);
      return;
    }
    b.awaitingRetry = true;
    b.retryError = err;
    b.resendAtOnce = verdict !== undefined;
    q.retrying++;
    this.runRetries(q);
  }

  /**
   * Idempotent batches refused for their numbers (out_of_order_sequence, or stale_producer_epoch for
   * numbers already given up): `wait` while an earlier batch of the partition is unsettled (it was sent
   * ahead of that one and fits once it is appended); for the oldest unsettled batch a gap before its
   * numbers proves nothing from it on was appended (`renumber`); anything else is `final`.
   */
  private sequenceVerdict(q: PartitionQueue, b: ProducerBatch, err: unknown): 'wait' | 'renumber' | 'final' | undefined {
    if (b.firstSequence < 0 || !(err instanceof TributaryError)) return undefined;
    const outOfOrder = err.code === 'out_of_order_sequence';
    if (!outOfOrder && !(err.code === 'stale_producer_epoch' && needsNewNumbers(q, b))) return undefined;
    if (needsNewNumbers(q, b)) return 'renumber';
    if (q.inFlight.values().next().value !== b) return 'wait';
    const expected = Number(err.fields.expected);
    if (outOfOrder && Number.isSafeInteger(expected) && expected <= b.firstSequence) {
      q.lost.set(b.epoch, Math.min(q.lost.get(b.epoch) ?? b.firstSequence, b.firstSequence));
      return 'renumber';
    }
    return 'final';
  }

  /** Retries waiting batches in send order: only the oldest unsettled batch, once its attempt failed. */
  private runRetries(q: PartitionQueue): void {
    if (q.retryRunning) return;
    q.retryRunning = true;
    void (async () => {
      try {
        for (;;) {
          const head = q.inFlight.values().next().value;
          if (!head?.awaitingRetry) break;
          await this.retryBatch(q, head);
        }
      } finally {
        q.retryRunning = false;
        this.pump(q);
      }
    })();
  }

  private async retryBatch(q: PartitionQueue, b: ProducerBatch): Promise<void> {
    const first = b.retryError;
    const atOnce = b.resendAtOnce;
    let error: Error | null = null;
    let ack: BatchAck | undefined;
    try {
      ack = await retry(
        async (attempt) => {
          // The attempt that already failed: retry() backs off before the next (unless it is to be resent now).
          if (attempt === 0 && !atOnce) throw first;
          return await this.resend(q, b);
        },
        {
          ...this.options.retry,
          signal: this.root.signal,
          onRetry: (e, attempt, delayMs) => {
            this.options.retry.onRetry?.(e, attempt, delayMs);
            this.emit('retry', { error: e as Error, topic: q.topic, partition: q.partition, attempt, delayMs });
          },
        },
      );
    } catch (err) {
      error = this.root.signal.aborted ? new TributaryError('client_closed') : (err as Error);
    } finally {
      b.awaitingRetry = false;
      b.retryError = undefined;
      q.retrying--;
    }
    this.complete(q, b, error, ack);
  }

  /** One retry of the oldest unsettled batch, with new numbers when the broker showed the old ones unusable. */
  private async resend(q: PartitionQueue, b: ProducerBatch): Promise<BatchAck> {
    for (let renumbered = 0; ; renumbered++) {
      if (needsNewNumbers(q, b)) this.renumber(q, b);
      try {
        const conn = await this.cluster.connection(await this.cluster.leaderFor(q.topic, q.partition, this.root.signal), this.root.signal);
        return await this.transmit(conn, b);
      } catch (err) {
        this.cluster.onLeaderError(q.topic, q.partition, err);
        // Renumbered at most twice in a row: the second time into a fresh epoch at 0, which fits.
        if (renumbered < 2 && this.sequenceVerdict(q, b, err) === 'renumber') continue;
        throw err;
      }
    }
  }

  /** A batch is done: settle its records, free its buffer, let the partition send more. */
  private complete(q: PartitionQueue, b: ProducerBatch, err: Error | null, ack?: BatchAck): void {
    if (b.completed) return;
    b.completed = true;
    if (b.timer) clearTimeout(b.timer);
    q.inFlight.delete(b);
    if (q.inFlight.size === 0) q.lost.clear();
    const durationMs = b.startedAt > 0 ? Date.now() - b.startedAt : 0;
    // Its numbers may or may not have reached the log: the partition continues in a new epoch.
    if (err && b.firstSequence >= 0 && b.epoch === q.epoch) q.bumpEpoch = true;
    if (err) {
      for (const s of b.sinks) s.sink.settle(s.index, err);
      if (this.listenerCount('error') > 0) this.emit('error', { error: err, topic: b.topic, partition: b.partition, records: b.records.length });
      publish(channels.producerSend, { topic: b.topic, partition: b.partition, records: b.records.length, bytes: b.bytes, durationMs, error: err });
    } else {
      const partition = ack?.partition ?? b.partition;
      const base = ack?.base_offset ?? -1;
      for (let i = 0; i < b.sinks.length; i++) {
        const s = b.sinks[i]!;
        s.sink.settle(s.index, null, { topic: b.topic, partition, offset: base < 0 ? -1 : base + i });
      }
      this.emit('send', { topic: b.topic, partition, records: b.records.length, durationMs, baseOffset: base });
      publish(channels.producerSend, { topic: b.topic, partition, records: b.records.length, bytes: b.bytes, durationMs, baseOffset: base });
    }
    this.release(b.reserved);
    b.markDone();
    // The next oldest batch may be waiting for its retry turn.
    if (q.retrying > 0) this.runRetries(q);
    if (b.dispatched) this.pump(q);
  }

  // ---- flush and close ----

  /**
   * Sends everything queued so far (without waiting for lingerMs) and waits until each of those batches
   * is acknowledged or failed for good. Failures are reported on the send() promises (and the `error`
   * event), not here. Aborting `signal` stops the waiting, not the sending.
   */
  async flush(opts: { signal?: AbortSignal } = {}): Promise<void> {
    opts.signal?.throwIfAborted();
    const wait = (async () => {
      // Sends still queuing when flush is called are part of what it waits for: take a turn behind them.
      await this.enterAdmission(undefined, false);
      this.leaveAdmission();
      for (const q of this.accumulator.closeAll()) this.pump(q);
      await Promise.all(this.accumulator.pending().map((b) => b.done));
    })();
    await (opts.signal ? untilAborted(wait, opts.signal) : wait);
  }

  /**
   * Flushes, then closes the connections. Idempotent; sends after it reject with `client_closed`.
   * Aborting `signal` stops the flush: records not yet acknowledged fail with `client_closed`.
   */
  close(opts: { signal?: AbortSignal } = {}): Promise<void> {
    this.closePromise ??= this.doClose();
    const signal = opts.signal;
    if (signal) {
      const force = () => this.forceClose();
      if (signal.aborted) force();
      else {
        signal.addEventListener('abort', force, { once: true });
        void this.closePromise.finally(() => signal.removeEventListener('abort', force));
      }
    }
    return this.closePromise;
  }

  private async doClose(): Promise<void> {
    if (this.stateValue !== 'open') return;
    this.stateValue = 'closing';
    try {
      // A transaction left open is aborted rather than left to the broker's timeout.
      const txn = this.openTxn;
      if (txn && txn.state === 'open') await txn.abort().catch(() => {});
      await this.flush();
    } finally {
      this.forceClose();
      await this.cluster.close();
      this.stateValue = 'closed';
    }
  }

  /** Stops retries and fails whatever is still pending with client_closed. */
  private forceClose(): void {
    if (this.root.signal.aborted) return;
    this.root.abort(new TributaryError('client_closed'));
    const closed = new TributaryError('client_closed');
    for (const q of this.accumulator.all()) {
      for (const b of q.batches.splice(0)) this.complete(q, b, closed);
      // In-flight batches fail when their connections close (and their retries see the abort).
    }
    void this.cluster.close();
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }
}

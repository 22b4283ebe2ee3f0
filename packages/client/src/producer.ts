/**
 * The SDK Producer: a facade over its parts (docs/sdk.md, "Producer"), and the entry that keeps every
 * producer export importable from `tributary-client/producer.js`. Options: producer-options.ts; messages
 * and their wire records: producer-messages.ts; batching: record-accumulator.ts; buffer memory and send
 * order: producer-buffer.ts; the idempotent producer id: producer-id.ts; sending, retries and idempotent numbering: producer-sender.ts;
 * what a send resolves with (per-message metadata or runs): send-result.ts.
 */
import { setMaxListeners } from 'node:events';
import { parseLine } from 'tributary-protocol/command.js';
import { TributaryError } from 'tributary-protocol/errors.js';
import { untilAborted } from './abort.js';
import { newTopicWait, settleTopicWait, type TopicWait, untilAbortedInOrder } from './topic-wait.js';
import { type Cluster, clientCluster } from './cluster.js';
import { TypedEmitter } from './events.js';
import { SendBuffer } from './producer-buffer.js';
import { type ProducerTopicState, forgetIdleTopics } from './idle-topics.js';
import { partitionForKey } from 'tributary-protocol/partitioner.js';
import { badMessage, checkMessage, type ProducerEvents, type ProducerMessage, type ProducerRecord, RECORD_BASE_BYTES, type RecordMetadata, messageHeaders, messageKey, plainRunEnd, snapshotMessage } from './producer-messages.js';
import { configError, type ProducerOptions, type ResolvedProducerOptions, resolveProducerOptions, validateProducerOptions } from './producer-options.js';
import { ProducerId } from './producer-id.js';
import { ProducerSender } from './producer-sender.js';
import { type SendOptions, SendResult, type SendRun, sendOptions } from './send-result.js';
import { APPENDED_CLOSED_BATCH, APPENDED_NEW_BATCH, RUN_COUNT_UNIT, type PartitionQueue, type ProducerBatch, RecordAccumulator, type RecordSink } from './record-accumulator.js';
import { ProducerFencedError, Transaction, TransactionStateError, typedTxnError } from './transaction.js';

export {
  batchOverhead,
  checkMessage,
  choosePartition,
  type HeaderValue,
  type ProducerEvents,
  type ProducerHeaders,
  type ProducerMessage,
  type ProducerRecord,
  type RecordMetadata,
  recordSize,
  toBatchRecord,
} from './producer-messages.js';
export type { SendMetadata, SendOptions, SendRun } from './send-result.js';
export { MAX_IDEMPOTENT_IN_FLIGHT, type ProducerAcks, type ProducerOptions, validateProducerOptions } from './producer-options.js';
export { type AccumulatorLimits, type PartitionQueue, ProducerBatch, RecordAccumulator, type RecordSink } from './record-accumulator.js';

export type ProducerState = 'open' | 'closing' | 'closed';

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
  readonly options: ResolvedProducerOptions;
  /** Idempotent producers: the id INIT_PRODUCER_ID gives, before the first record is queued. */
  private readonly ids: ProducerId;
  private readonly cluster: Cluster;
  private readonly accumulator: RecordAccumulator;
  private readonly sender: ProducerSender;
  private readonly buffer: SendBuffer;
  /** Aborted by a forced close: retries stop and everything pending fails with client_closed. */
  private readonly root = new AbortController();
  private readonly roundRobin = new Map<string, number>();
  /** Batches whose linger wait ends with this turn of the event loop, and the one setImmediate that ends it (armLinger). */
  private turnEndBatches: ProducerBatch[] = [];
  private turnEnd: NodeJS.Immediate | undefined;
  /** keylessPartitioning 'sticky': per topic, the batch keyless records go to until it closes. */
  private readonly sticky = new Map<string, ProducerBatch>();
  /** Per topic: its partition count from METADATA and when it came (metadataMaxAgeMs). */
  private readonly partitionCounts = new Map<string, { n: number; at: number }>();
  /**
   * Sends waiting for a topic's partition count, in call order: outside the admission queue, so sends to
   * topics already known are not held behind them (waitForTopic). Until the last of them has taken its
   * turn in that queue, sends to the topic take the slow path too: none may overtake them.
   */
  private readonly topicWaits = new Map<string, TopicWait>();
  /** The per-topic state above, for forgetIdleTopics (docs/sdk.md, "Producer"), and when that last ran. */
  private readonly topicState: ProducerTopicState = { partitionCounts: this.partitionCounts, roundRobin: this.roundRobin, sticky: this.sticky, topicWaits: this.topicWaits };
  private swept = performance.now();
  /** send()'s record sizes, reused by the next send (taken while in use, so a nested send gets its own). */
  private sizeScratch: number[] | undefined = [];
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
    this.options = resolveProducerOptions(options);
    this.cluster = clientCluster({ ...options, stallTimeoutMs: this.options.stallTimeoutMs }, (e) => this.emit(e.type, e));
    this.accumulator = new RecordAccumulator({
      maxBatchBytes: this.options.maxBatchBytes,
      maxBatchRecords: this.options.maxBatchRecords,
      maxBufferedBytes: this.options.maxBufferedBytes,
      acks: this.options.acks === 0 ? '0' : this.options.acks === 1 ? '1' : 'all',
    });
    this.sender = new ProducerSender({
      cluster: this.cluster,
      accumulator: this.accumulator,
      options: this.options,
      signal: this.root.signal,
      emit: (event, payload) => this.emit(event, payload),
      listenerCount: (event) => this.listenerCount(event),
      release: (bytes) => this.buffer.release(bytes),
      forgetPartitionCount: (topic) => this.partitionCounts.delete(topic),
    });
    this.buffer = new SendBuffer(this.options, this.root.signal, () => {
      for (const q of this.accumulator.closeAll()) this.sender.pump(q);
    });
    this.ids = new ProducerId(this.cluster, this.accumulator, this.root.signal);
    setMaxListeners(0, this.root.signal);
  }

  /** Idempotent producers: this producer's id, from a broker's INIT_PRODUCER_ID at the first send; '' until then and otherwise. */
  get producerId(): string {
    return this.ids.id;
  }

  get state(): ProducerState {
    return this.stateValue;
  }

  /** Bytes of records accepted by send() and not yet acknowledged (or failed). */
  get bufferedBytes(): number {
    return this.buffer.bytes;
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
   * the connection and answered), with one RecordMetadata per message in order, or with `metadata:
   * 'runs'` one SendRun per contiguous run of records (in message order; no object per message).
   * Rejects with the first error of any of its records. Waits for buffer room when more than
   * `maxBufferedBytes` is pending: `buffer_full` after `requestTimeoutMs`. Aborting `signal` stops the
   * waiting: messages not queued yet are dropped, messages already queued may still be written.
   */
  send(record: ProducerRecord, opts: SendOptions & { metadata: 'runs' }): Promise<SendRun[]>;
  send(record: ProducerRecord, opts?: SendOptions & { metadata?: 'records' }): Promise<RecordMetadata[]>;
  send(record: ProducerRecord, opts?: SendOptions): Promise<RecordMetadata[] | SendRun[]>;
  send(record: ProducerRecord, opts?: SendOptions): Promise<RecordMetadata[] | SendRun[]> {
    // Not an async function: the usual send queues its records synchronously and needs no async frame.
    try {
      const { signal, metadata } = sendOptions(opts);
      return this.enqueue(record, signal, metadata === 'runs');
    } catch (err) {
      return Promise.reject(err);
    }
  }

  private enqueue(record: ProducerRecord, signal: AbortSignal | undefined, runs: boolean): Promise<RecordMetadata[] | SendRun[]> {
    if (this.stateValue !== 'open') throw new TributaryError('client_closed');
    if (this.options.transactionalId !== undefined) {
      throw new TransactionStateError('invalid_txn_state', { reason: 'a transactional producer sends through producer.transaction()' });
    }
    signal?.throwIfAborted();
    if (!record || typeof record !== 'object') throw new TributaryError('invalid_parameter', { param: 'record', reason: 'required' });
    const { topic, messages } = record;
    // A record-level partition, key or acks (other clients' shapes) would otherwise be dropped silently.
    for (const k of Object.keys(record)) if (k !== 'topic' && k !== 'messages') throw new TributaryError('invalid_parameter', { param: k, reason: 'unknown field of a send (topic, messages): partition, key and headers go on each message, acks on the producer' });
    if (typeof topic !== 'string' || topic.length === 0) throw new TributaryError('invalid_parameter', { param: 'topic', reason: 'required' });
    if (!Array.isArray(messages)) throw new TributaryError('invalid_parameter', { param: 'messages', reason: 'must be an array' });
    const n = messages.length;
    if (n === 0) return Promise.resolve([]);
    // Every message is checked (and measured) before any is queued: a bad one fails the send as a whole.
    let sizes = this.sizeScratch;
    this.sizeScratch = undefined;
    sizes ??= [];
    let total = 0;
    let highest = -1;
    // One pass over the messages. A bad partition or a message larger than the buffer is reported only once
    // every message passed its own checks (as when these were a second pass): `late` is the first such.
    let late = -1;
    const maxBuffered = this.options.maxBufferedBytes;
    for (let i = 0; i < n; i++) {
      const m = messages[i]!;
      const size = checkMessage(m, i);
      sizes[i] = size;
      total += size;
      const p = m.partition;
      if (p !== undefined) {
        if (typeof p === 'number' && Number.isSafeInteger(p) && p >= 0) {
          if (p > highest) highest = p;
        } else if (late < 0) late = i;
      }
      if (size > maxBuffered && late < 0) late = i;
    }
    if (late >= 0) {
      const p = messages[late]!.partition;
      if (p !== undefined && (typeof p !== 'number' || !Number.isSafeInteger(p) || p < 0)) throw badMessage(late, 'partition must be a non-negative integer');
      throw new TributaryError('record_too_large', { index: late, size: sizes[late]!, max: maxBuffered, option: 'maxBufferedBytes' });
    }

    const result = new SendResult(n, runs);
    const known = this.knownPartitions(topic, highest);
    const ready = known !== undefined && (!this.options.idempotent || this.ids.ready);
    if (!this.buffer.admitting && ready && !this.topicWaits.has(topic) && this.buffer.bytes + total <= this.options.maxBufferedBytes) {
      // Fast path: nobody is queuing, the topic is known and there is room: encode everything into its batches now.
      // No checkPartitions: knownPartitions gave a count above `highest`, every explicit partition.
      this.buffer.hold(total);
      this.appendMessages(topic, known, messages, sizes, result, 0, n);
      this.sizeScratch = sizes;
      return signal ? untilAborted(result.promise, signal) : result.promise;
    }
    // Queued after waits: the messages are taken now, so what is queued is what send() was given.
    const copies = messages.map(snapshotMessage);
    const copySizes = sizes.slice(0, n);
    this.sizeScratch = sizes;
    return this.enqueueSlowly(topic, copies, copySizes, total, result, signal);
  }

  /** send() when it must wait: for its turn behind other sends, for the topic's metadata or for buffer room. */
  private async enqueueSlowly(topic: string, messages: ProducerMessage[], sizes: number[], total: number, result: SendResult, signal: AbortSignal | undefined): Promise<RecordMetadata[] | SendRun[]> {
    const wait = this.topicWaits.get(topic) ?? (this.partitionCounts.has(topic) ? undefined : this.startTopicWait(topic));
    if (wait) {
      wait.pending++;
      try {
        await untilAbortedInOrder(wait, signal);
      } catch (err) {
        result.fail(err as Error);
        throw err;
      } finally {
        // Synchronously before the admission queue is entered: a send arriving now cannot overtake it.
        if (--wait.pending === 0) {
          if (this.topicWaits.get(topic) === wait) this.topicWaits.delete(topic);
          wait.markDrained();
        }
      }
    }
    // Idempotent: then its turn among the sends waiting for the producer id (producer-id.ts), also in call order.
    const idWait = this.options.idempotent ? this.ids.join() : undefined;
    if (idWait) {
      try {
        await untilAbortedInOrder(idWait, signal);
      } catch (err) {
        result.fail(err as Error);
        throw err;
      } finally {
        this.ids.leave(idWait); // synchronously before the admission queue is entered, as above
      }
    }
    await this.buffer.enterAdmission(signal);
    try {
      const partitions = await this.partitionCount(topic, signal);
      this.checkPartitions(topic, messages, partitions);
      if (this.root.signal.aborted) throw new TributaryError('client_closed');
      if (this.buffer.bytes + total <= this.options.maxBufferedBytes) {
        // Room for all of it (the usual case once the metadata is in): as the fast path does.
        this.buffer.hold(total);
        this.appendMessages(topic, partitions, messages, sizes, result, 0, messages.length);
      } else {
        for (let i = 0; i < messages.length; i++) {
          const wait = this.buffer.reserve(sizes[i]!, signal);
          if (wait) await wait;
          if (this.root.signal.aborted) throw new TributaryError('client_closed');
          this.appendMessages(topic, partitions, messages, sizes, result, i, i + 1);
        }
      }
    } catch (err) {
      // Messages queued before the failure may still be written; their outcome no longer matters here.
      result.fail(err as Error);
      throw err;
    } finally {
      this.buffer.leaveAdmission();
    }
    return signal ? untilAborted(result.promise, signal) : result.promise;
  }

  private checkPartitions(topic: string, messages: ProducerMessage[], partitions: number): void {
    for (const m of messages) {
      if (m.partition !== undefined && m.partition >= partitions) throw new TributaryError('partition_not_found', { topic, partition: m.partition, partitions });
    }
  }

  /**
   * Messages `from` .. `to - 1`, checked, go straight into their partitions' batch frames (no record
   * object, no copy of the value besides the one into the frame); `sizes[i]` is message i's recordSize.
   */
  private appendMessages(topic: string, partitions: number, messages: ProducerMessage[], sizes: number[], sink: RecordSink, from: number, to: number): void {
    const acc = this.accumulator;
    const sticky = this.options.keylessPartitioning === 'sticky';
    // The previous record's queue: a run of records for one partition skips the lookup.
    let q: PartitionQueue | undefined;
    // Where the run of plain messages (value and maybe partition only) that message i is in ends: such a
    // run for one partition is appended in one call (RecordAccumulator.appendRun), not record by record.
    let runEnd = from;
    for (let i = from; i < to; ) {
      const m = messages[i]!;
      if (m.key == null && m.headers === undefined && m.timestamp === undefined) {
        const explicit = m.partition;
        if (explicit !== undefined || sticky) {
          if (runEnd <= i) runEnd = plainRunEnd(messages, i, to);
          const partition = explicit !== undefined ? explicit : this.keylessPartition(topic, partitions, true);
          if (q === undefined || q.partition !== partition) q = acc.queue(topic, partition);
          const r = acc.appendRun(q, messages, sizes, i, runEnd, sink);
          this.appended(q, r % RUN_COUNT_UNIT, explicit === undefined);
          i += Math.floor(r / RUN_COUNT_UNIT);
          continue;
        }
      }
      const key = messageKey(m.key);
      const explicit = m.partition;
      const keyless = explicit === undefined && key === null;
      const partition = explicit !== undefined ? explicit : key !== null ? partitionForKey(key, partitions) : this.keylessPartition(topic, partitions, sticky);
      if (q === undefined || q.partition !== partition) q = acc.queue(topic, partition);
      const v = m.value;
      const ts = m.timestamp === undefined ? 0 : m.timestamp instanceof Date ? m.timestamp.getTime() : m.timestamp;
      const headers = m.headers === undefined ? undefined : messageHeaders(m.headers, i);
      // A string's UTF-8 length without measuring it again: checkMessage's size is the value's plus fixed parts.
      const valueLen = typeof v !== 'string' ? v.length : headers === undefined ? sizes[i]! - RECORD_BASE_BYTES - (key === null ? 0 : key.length) : Buffer.byteLength(v, 'utf8');
      const outcome = acc.appendTo(q, key, v, valueLen, ts, headers, sizes[i]!, sink, i);
      this.appended(q, outcome, keyless && sticky);
      i++;
    }
  }

  /**
   * A record without key or partition: sticky, the partition whose batch keyless records are filling while
   * that batch is still open; else (or once it closed) the next one round-robin.
   */
  private keylessPartition(topic: string, partitions: number, sticky: boolean): number {
    if (sticky) {
      const stuck = this.sticky.get(topic);
      if (stuck && !stuck.closed && stuck.partition < partitions) return stuck.partition;
    }
    return this.nextRoundRobin(topic) % partitions;
  }

  /** After an append to `q`: arm a new batch's linger timer, send a closed one, follow a sticky batch. */
  private appended(q: PartitionQueue, outcome: number, stickyRecord: boolean): void {
    if (outcome === 0 && !stickyRecord) return;
    const batch = q.batches[q.batches.length - 1]!;
    if (stickyRecord && this.sticky.get(q.topic) !== batch) this.sticky.set(q.topic, batch);
    if ((outcome & APPENDED_NEW_BATCH) !== 0) this.armLinger(batch);
    if ((outcome & APPENDED_CLOSED_BATCH) !== 0) this.sender.pump(q);
  }

  /**
   * The cached partition count while it is younger than metadataMaxAgeMs and above `highest` (the highest
   * explicit partition of a send); else forgotten, with the cluster's metadata, so the send asks again:
   * partitions added to the topic are found (a count kept for good refused them as partition_not_found).
   */
  private knownPartitions(topic: string, highest: number): number | undefined {
    const now = performance.now();
    const maxAge = this.options.metadataMaxAgeMs;
    if (now - this.swept > maxAge) forgetIdleTopics(this.topicState, this.accumulator, this.cluster, (this.swept = now), maxAge, this.options.idempotent);
    const c = this.partitionCounts.get(topic);
    if (c === undefined) return undefined;
    if (highest < c.n && now - c.at < maxAge) return c.n;
    this.partitionCounts.delete(topic);
    this.cluster.invalidateMetadata(topic);
    return undefined;
  }

  /** The first send of a topic not known: one METADATA for it and every send that waits with it. */
  private startTopicWait(topic: string): TopicWait {
    const wait = newTopicWait();
    this.topicWaits.set(topic, wait);
    this.partitionCount(topic, this.root.signal).then(
      () => settleTopicWait(wait, null),
      (err: unknown) => settleTopicWait(wait, err as Error),
    );
    return wait;
  }

  /** The topic's partition count from METADATA, cached (forgotten when the topic turns out to be gone). */
  private async partitionCount(topic: string, signal: AbortSignal | undefined): Promise<number> {
    const known = this.partitionCounts.get(topic);
    if (known !== undefined) return known.n;
    const md = await this.cluster.metadata(topic, signal);
    if (!Number.isSafeInteger(md.partitions) || md.partitions < 1) throw new TributaryError('metadata_unavailable', { topic, reason: 'no partitions in METADATA' });
    this.partitionCounts.set(topic, { n: md.partitions, at: performance.now() });
    return md.partitions;
  }

  private nextRoundRobin(topic: string): number {
    // A random start (as KIP-480's sticky partitioner picks one): short-lived producers that each send a
    // few keyless records must not all start on partition 0.
    const n = this.roundRobin.get(topic) ?? Math.floor(Math.random() * 0x7fffffff);
    this.roundRobin.set(topic, (n + 1) % Number.MAX_SAFE_INTEGER);
    return n;
  }

  /**
   * `lingerMs` 0 waits for the end of the event-loop turn, not a timer (Node runs a 0 ms timer after 1 ms
   * at the soonest): the records of one synchronous burst share a batch, sent in the same turn of the loop.
   * One setImmediate ends the wait of every batch of the turn, and a batch whose `lingerMs` timer fired
   * joins it: with a callback each, Node ran the connection's uncork (a nextTick) between them, so each
   * batch left in a write call of its own, where together they leave in one writev per connection (a
   * producer with 64 sends in flight made 4.6 times the raw client's write calls; bench/README.md,
   * "produce-consume").
   */
  private armLinger(batch: ProducerBatch): void {
    if (this.options.lingerMs === 0) this.dueAtTurnEnd(batch);
    else
      batch.timer = setTimeout(() => {
        batch.timer = undefined;
        this.dueAtTurnEnd(batch);
      }, this.options.lingerMs);
  }

  private dueAtTurnEnd(batch: ProducerBatch): void {
    batch.lingersToTurnEnd = true;
    this.turnEndBatches.push(batch);
    this.turnEnd ??= setImmediate(this.endTurn);
  }

  private readonly endTurn = (): void => {
    this.turnEnd = undefined;
    const due = this.turnEndBatches;
    this.turnEndBatches = [];
    for (const batch of due) {
      // Not if the sender took it meanwhile (cancelLinger).
      if (!batch.lingersToTurnEnd) continue;
      batch.lingersToTurnEnd = false;
      this.lingerDone(batch);
    }
  };

  private lingerDone(batch: ProducerBatch): void {
    if (batch.closed) return;
    batch.ready = true; // sendable now; it keeps filling until the sender takes it
    this.sender.pump(this.accumulator.queue(batch.topic, batch.partition));
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
      // Sends still queuing when flush is called are part of what it waits for: take a turn behind them
      // (those waiting for their topic's METADATA first take theirs).
      await Promise.all([...this.topicWaits.values()].map((w) => w.drained));
      await this.ids.wait?.drained; // the sends that went on from there to wait for the producer id
      await this.buffer.enterAdmission(undefined, false);
      this.buffer.leaveAdmission();
      for (const q of this.accumulator.closeAll()) this.sender.pump(q);
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
      // A transaction left open is aborted rather than left to the broker's timeout; one being committed
      // or aborted is let finish first.
      await this.openTxn?.[Symbol.asyncDispose]();
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
    this.sender.failQueued(closed);
    void this.cluster.close();
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }
}


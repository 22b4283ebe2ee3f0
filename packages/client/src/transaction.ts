import { parseLine } from 'tributary-protocol/command.js';
import { TributaryError } from 'tributary-protocol/errors.js';
import type { Cluster } from './cluster.js';
import type { Batch } from 'tributary-protocol/batch.js';
import type { Connection } from 'tributary-protocol/connection.js';
import { type ProducerMessage, type RecordMetadata, badMessage, recordSize, toBatchRecord } from './producer-messages.js';
import { isRetriable } from './retry.js';
import { recordRuns, type SendOptions, type SendRun, sendOptions } from './send-result.js';

/** A newer producer of the transactional id exists (or the coordinator aborted a timed-out transaction): this producer can no longer write. */
export class ProducerFencedError extends TributaryError {}

/** The request does not fit the transaction's state (e.g. commit after a failed send, or after an abort). */
export class TransactionStateError extends TributaryError {}

/** Errors of the transaction commands, typed where the caller must act differently. */
export function typedTxnError(err: unknown): unknown {
  if (!(err instanceof TributaryError) || err instanceof ProducerFencedError || err instanceof TransactionStateError) return err;
  if (err.code === 'producer_fenced' || err.code === 'invalid_producer_epoch' || err.code === 'invalid_producer_id_mapping') return new ProducerFencedError(err.code, err.fields, err.message, err.extra);
  if (err.code === 'invalid_txn_state') return new TransactionStateError(err.code, err.fields, err.message, err.extra);
  return err;
}

/** What a Transaction needs of its producer. */
export interface TransactionHost {
  readonly cluster: Cluster;
  /** The transaction ended (committed or aborted) or failed for good: the producer may begin another. */
  ended(txn: Transaction): void;
  /** A fencing error: the producer is done for. */
  fenced(err: ProducerFencedError): void;
}

/** A message of a transaction: what a plain send takes (binary keys and values, headers, timestamps). */
export type TransactionalMessage = ProducerMessage;

/**
 * The key of GroupPosition's optional method that a committed transaction calls with the offsets it
 * moved. The SDK Consumer counts them as processed and committed, so a run({ eachBatch }) handler that
 * commits its offsets in a transaction does not get its batch again (docs/sdk.md, "Transactions").
 */
export const TRANSACTION_OFFSETS = Symbol('tributary.transactionOffsets');

/** Where an offset-consuming group stands: an SDK Consumer, or the same fields from elsewhere. */
export interface GroupPosition {
  readonly memberId: string | undefined;
  readonly generation: number;
  readonly options: { readonly groupId: string; readonly topic: string };
  readonly [TRANSACTION_OFFSETS]?: (offsets: ReadonlyArray<{ partition: number; offset: number }>) => void;
}

export type TransactionState = 'open' | 'committing' | 'aborting' | 'committed' | 'aborted';

/** Bytes of records in one transactional batch frame at most (a larger send() takes several frames). */
const MAX_FRAME_RECORD_BYTES = 1024 * 1024;

/** A transactional batch frame's acknowledgement (docs/protocol.md, section 5.3). */
interface TxnBatchAck {
  records: Array<{ partition: number; offset: number; duplicate?: boolean }>;
}

/**
 * One transaction of a transactional Producer (`producer.transaction()`): records sent with `send()` and
 * consumer offsets sent with `sendOffsets()` become visible together on `commit()`, or never after
 * `abort()`. Records of one transaction are numbered from 1 (seqNum) and pipelined on the coordinator's
 * connection; a send that lost its connection is retried in order, and the broker answers a record it
 * already has with its original offset, so retries never duplicate. `await using` aborts a transaction
 * left open.
 */
export class Transaction {
  private seq = 0;
  private stateValue: TransactionState = 'open';
  /** Sends run one after another (each pipelined), so their seqNums reach the broker in order. */
  private chain: Promise<unknown> = Promise.resolve();
  /** The first send or sendOffsets that failed for good: the transaction can then only be aborted. */
  private failure: Error | undefined;
  /** The commit or abort under way: one at a time (a second of the same kind shares it). */
  private ending: { result: 'commit' | 'abort'; done: Promise<void> } | undefined;
  /** What sendOffsets staged, told to its consumer once the transaction commits. */
  private readonly staged: Array<{ consumer: GroupPosition; offsets: Array<{ partition: number; offset: number }> }> = [];

  constructor(
    private readonly host: TransactionHost,
    readonly transactionalId: string,
    readonly producerId: string,
    readonly epoch: number,
  ) {}

  get state(): TransactionState {
    if (this.ending && this.stateValue === 'open') return this.ending.result === 'commit' ? 'committing' : 'aborting';
    return this.stateValue;
  }

  private get key(): { transactional_id: string } {
    return { transactional_id: this.transactionalId };
  }

  private ids(): { transactional_id: string; producerId: string; epoch: number } {
    return { transactional_id: this.transactionalId, producerId: this.producerId, epoch: this.epoch };
  }

  private checkOpen(): void {
    if (this.state !== 'open') throw new TransactionStateError('invalid_txn_state', { state: this.state, reason: 'the transaction is no longer open' });
  }

  /**
   * Appends the messages to the transaction; resolves with where each landed (not visible before commit):
   * one RecordMetadata per message, or with `metadata: 'runs'` one SendRun per run, as Producer.send().
   */
  send(record: { topic: string; messages: TransactionalMessage[] }, opts: SendOptions & { metadata: 'runs' }): Promise<SendRun[]>;
  send(record: { topic: string; messages: TransactionalMessage[] }, opts?: SendOptions & { metadata?: 'records' }): Promise<RecordMetadata[]>;
  send(record: { topic: string; messages: TransactionalMessage[] }, opts?: SendOptions): Promise<RecordMetadata[] | SendRun[]>;
  // async: bad input rejects; everything before the first await runs at call time, so seqNums follow call order.
  async send(record: { topic: string; messages: TransactionalMessage[] }, opts?: SendOptions): Promise<RecordMetadata[] | SendRun[]> {
    const { signal, metadata } = sendOptions(opts);
    this.checkOpen();
    if (this.failure) throw new TransactionStateError('invalid_txn_state', { reason: `an earlier send failed (${this.failure.message}); abort the transaction` });
    const { topic, messages } = record ?? {};
    for (const k of Object.keys(record ?? {})) if (k !== 'topic' && k !== 'messages') throw new TributaryError('invalid_parameter', { param: k, reason: 'unknown field of a send (topic, messages)' });
    if (typeof topic !== 'string' || topic.length === 0) throw new TributaryError('invalid_parameter', { param: 'topic', reason: 'required' });
    if (!Array.isArray(messages)) throw new TributaryError('invalid_parameter', { param: 'messages', reason: 'must be an array' });
    const frames = this.frames(topic, messages);
    const run = this.chain.then(() => this.publish(frames, signal));
    this.chain = run.catch(() => {});
    if (metadata !== 'runs') return run;
    return recordRuns(topic, await run);
  }

  /**
   * The messages as transactional batch frames: runs of messages with the same explicit partition (or
   * none), numbered with the transaction's seqNums. Every message is checked before any seqNum is taken.
   */
  private frames(topic: string, messages: TransactionalMessage[]): Batch[] {
    const checked = messages.map((m, i) => {
      const r = toBatchRecord(m, i);
      if (m.partition !== undefined && (!Number.isSafeInteger(m.partition) || m.partition < 0)) throw badMessage(i, 'partition must be a non-negative integer');
      return { partition: m.partition ?? -1, record: r, size: recordSize(r) };
    });
    const txn = { transactionalId: this.transactionalId, producerId: this.producerId, epoch: this.epoch, coordinatorPartition: -1, coordinatorEpoch: -1 };
    const frames: Batch[] = [];
    let bytes = 0;
    for (const c of checked) {
      let f = frames[frames.length - 1];
      if (!f || f.partition !== c.partition || bytes + c.size > MAX_FRAME_RECORD_BYTES) {
        f = { topic, partition: c.partition, acks: 'all', idempotent: false, firstSequence: this.seq + 1, lastSequence: this.seq, records: [], txn };
        frames.push(f);
        bytes = 0;
      }
      f.records.push(c.record);
      f.lastSequence = ++this.seq;
      bytes += c.size;
    }
    return frames;
  }

  private async publish(frames: Batch[], signal: AbortSignal | undefined): Promise<RecordMetadata[]> {
    if (frames.length === 0) return [];
    const cluster = this.host.cluster;
    const send = (conn: Connection, f: Batch): Promise<TxnBatchAck> => {
      if (!conn.extensions && f.records.some((r) => r.headers.length > 0 || r.timestamp > 0)) {
        return Promise.reject(new TributaryError('UNSUPPORTED_FEATURE', { feature: 'record_extensions_v1', reason: 'the broker cannot carry record headers or timestamps' }));
      }
      return conn.produceBatch<TxnBatchAck>(f);
    };
    const settled: Array<PromiseSettledResult<TxnBatchAck>> = [];
    try {
      const conn = await cluster.connection(await cluster.coordinator(this.key, signal), signal);
      // All on one connection without waiting: the broker keeps a connection's pipelined requests in order.
      settled.push(...(await Promise.allSettled(frames.map((f) => send(conn, f)))));
    } catch (err) {
      while (settled.length < frames.length) settled.push({ status: 'rejected', reason: err });
    }
    const acks: TxnBatchAck[] = new Array(frames.length);
    let redo = -1;
    for (let i = 0; i < frames.length; i++) {
      const s = settled[i]!;
      if (s.status === 'fulfilled') {
        if (redo < 0) acks[i] = s.value;
        continue;
      }
      // Behind a lost request, the next ones may be out of order at the broker: redo them all from here.
      if (redo < 0 && !isRetriable(s.reason)) throw this.fail(s.reason);
      if (redo < 0) {
        await cluster.onCoordinatorError(this.key, s.reason);
        redo = i;
      }
    }
    if (redo >= 0) {
      for (let i = redo; i < frames.length; i++) {
        try {
          acks[i] = await cluster.coordinatorRequest(this.key, (conn) => send(conn, frames[i]!), { signal });
        } catch (err) {
          throw this.fail(err);
        }
      }
    }
    return frames.flatMap((f, i) => acks[i]!.records.map((r) => ({ topic: f.topic, partition: r.partition, offset: r.offset })));
  }

  private fail(err: unknown): unknown {
    const e = typedTxnError(err);
    this.failure ??= e instanceof Error ? e : new Error(String(e));
    if (e instanceof ProducerFencedError) this.host.fenced(e);
    return e;
  }

  /**
   * Offsets of a consumer group (the next offset to read per partition) that move only if this
   * transaction commits: the consume-process-produce step of an exactly-once pipeline. Fenced like a
   * commit: the consumer must still own the partitions in its current generation.
   */
  async sendOffsets(args: { consumer: GroupPosition; offsets: Array<{ partition: number; offset: number }> }, opts: { signal?: AbortSignal } = {}): Promise<number> {
    this.checkOpen();
    const { consumer, offsets } = args ?? {};
    if (!consumer?.memberId) throw new TributaryError('invalid_parameter', { param: 'consumer', reason: 'the consumer has not joined its group' });
    if (!Array.isArray(offsets) || offsets.length === 0) throw new TributaryError('invalid_parameter', { param: 'offsets', reason: 'at least one { partition, offset }' });
    for (const o of offsets) {
      if (!Number.isSafeInteger(o?.partition) || o.partition < 0 || !Number.isSafeInteger(o?.offset) || o.offset < 0) {
        throw new TributaryError('invalid_parameter', { param: 'offsets', reason: 'partition and offset must be non-negative integers' });
      }
    }
    try {
      const reply = await this.host.cluster.coordinatorCommand(
        this.key,
        'SEND_OFFSETS_TO_TXN',
        { ...this.ids(), topic: consumer.options.topic, group: consumer.options.groupId, member: consumer.memberId, generation: consumer.generation },
        { positional: [offsets.map((o) => `P${o.partition}:${o.offset}`).join(',')], signal: opts.signal },
      );
      this.staged.push({ consumer, offsets: offsets.map((o) => ({ partition: o.partition, offset: o.offset })) });
      return Number(parseLine(reply).params.get('staged_offsets'));
    } catch (err) {
      // Staged or not, the offsets are not what the caller meant to commit with the output: as after a
      // failed send, the transaction can only be aborted (committing its output alone would process the
      // input twice).
      throw this.fail(err);
    }
  }

  /**
   * Commits: waits for the sends, then END_TXN commit, retried until the broker answers (a retry of a
   * commit that went through answers committed again). Once it resolves, read_committed readers see
   * every record and the offsets have moved, unless a marker failed after the decision: the broker then
   * answers committed and writes the marker again until done (docs/protocol.md, END_TXN).
   */
  commit(opts: { signal?: AbortSignal } = {}): Promise<void> {
    return this.finish('commit', opts.signal);
  }

  /** Aborts: nothing of the transaction becomes visible and its offsets do not move. */
  abort(opts: { signal?: AbortSignal } = {}): Promise<void> {
    return this.finish('abort', opts.signal);
  }

  /**
   * One end at a time, taken at call time: a commit and an abort racing (or close() during a commit) must
   * not both reach END_TXN, where the loser's refusal would reopen a decided transaction.
   */
  private finish(result: 'commit' | 'abort', signal: AbortSignal | undefined): Promise<void> {
    if (this.stateValue === (result === 'commit' ? 'committed' : 'aborted')) return Promise.resolve();
    if (this.ending) {
      if (this.ending.result === result) return this.ending.done;
      return Promise.reject(new TransactionStateError('invalid_txn_state', { state: this.state, reason: `the transaction is being ${this.ending.result === 'commit' ? 'committed' : 'aborted'}` }));
    }
    try {
      this.checkOpen();
    } catch (err) {
      return Promise.reject(err);
    }
    const done = (async () => {
      try {
        await this.chain;
        if (result === 'commit' && this.failure) throw new TransactionStateError('invalid_txn_state', { reason: `a send or sendOffsets failed (${this.failure.message}); abort the transaction` });
        await this.end(result, signal);
      } finally {
        this.ending = undefined;
      }
    })();
    this.ending = { result, done };
    return done;
  }

  private async end(result: 'commit' | 'abort', signal: AbortSignal | undefined): Promise<void> {
    this.stateValue = result === 'commit' ? 'committing' : 'aborting';
    try {
      await this.host.cluster.coordinatorCommand(this.key, 'END_TXN', { ...this.ids(), result }, { signal });
    } catch (err) {
      const e = typedTxnError(err);
      if (e instanceof ProducerFencedError) {
        this.host.fenced(e);
        this.stateValue = 'aborted';
        this.host.ended(this);
      } else {
        // Not decided as far as we know: the caller may retry commit() or abort().
        this.stateValue = 'open';
      }
      throw e;
    }
    this.stateValue = result === 'commit' ? 'committed' : 'aborted';
    this.host.ended(this);
    if (result === 'commit') for (const s of this.staged) s.consumer[TRANSACTION_OFFSETS]?.(s.offsets);
  }

  /** `await using txn = await producer.transaction()`: a transaction neither committed nor aborted is aborted. */
  async [Symbol.asyncDispose](): Promise<void> {
    // A commit or abort under way decides it; only a transaction still open after that is aborted.
    await this.ending?.done.catch(() => {});
    if (this.state === 'open') await this.abort().catch(() => {});
  }
}

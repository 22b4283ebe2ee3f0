import { isUtf8 } from 'node:buffer';
import { parseLine } from 'tributary-protocol/command.js';
import { TributaryError } from 'tributary-protocol/errors.js';
import type { Cluster } from './cluster.js';
import type { RecordMetadata } from './producer-messages.js';
import { isRetriable } from './retry.js';

/** A newer producer of the transactional id exists (or the coordinator aborted a timed-out transaction): this producer can no longer write. */
export class ProducerFencedError extends TributaryError {}

/** The request does not fit the transaction's state (e.g. commit after a failed send, or after an abort). */
export class TransactionStateError extends TributaryError {}

/** Errors of the transaction commands, typed where the caller must act differently. */
export function typedTxnError(err: unknown): unknown {
  if (!(err instanceof TributaryError) || err instanceof ProducerFencedError || err instanceof TransactionStateError) return err;
  if (err.code === 'producer_fenced' || err.code === 'invalid_producer_epoch') return new ProducerFencedError(err.code, err.fields, err.message, err.extra);
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

export interface TransactionalMessage {
  /** Text: TXN_PUBLISH carries UTF-8 keys and values. */
  key?: string | Buffer | null;
  value: string | Buffer;
  partition?: number;
}

/** Where an offset-consuming group stands: an SDK Consumer, or the same fields from elsewhere. */
export interface GroupPosition {
  readonly memberId: string | undefined;
  readonly generation: number;
  readonly options: { readonly groupId: string; readonly topic: string };
}

export type TransactionState = 'open' | 'committing' | 'aborting' | 'committed' | 'aborted';

interface PublishItem {
  topic: string;
  fields: Record<string, string | number | undefined>;
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
  /** The first send that failed for good: the transaction can then only be aborted. */
  private failure: Error | undefined;

  constructor(
    private readonly host: TransactionHost,
    readonly transactionalId: string,
    readonly producerId: string,
    readonly epoch: number,
  ) {}

  get state(): TransactionState {
    return this.stateValue;
  }

  private get key(): { transactional_id: string } {
    return { transactional_id: this.transactionalId };
  }

  private ids(): { transactional_id: string; producerId: string; epoch: number } {
    return { transactional_id: this.transactionalId, producerId: this.producerId, epoch: this.epoch };
  }

  private checkOpen(): void {
    if (this.stateValue !== 'open') throw new TransactionStateError('invalid_txn_state', { state: this.stateValue, reason: 'the transaction is no longer open' });
  }

  /** Appends the messages to the transaction; resolves with where each landed (not visible before commit). */
  // async: bad input rejects; everything before the first await runs at call time, so seqNums follow call order.
  async send(record: { topic: string; messages: TransactionalMessage[] }, opts: { signal?: AbortSignal } = {}): Promise<RecordMetadata[]> {
    this.checkOpen();
    if (this.failure) throw new TransactionStateError('invalid_txn_state', { reason: `an earlier send failed (${this.failure.message}); abort the transaction` });
    const { topic, messages } = record ?? {};
    if (typeof topic !== 'string' || topic.length === 0) throw new TributaryError('invalid_parameter', { param: 'topic', reason: 'required' });
    if (!Array.isArray(messages)) throw new TributaryError('invalid_parameter', { param: 'messages', reason: 'must be an array' });
    const items: PublishItem[] = messages.map((m, i) => ({ topic, fields: this.publishFields(topic, m, i) }));
    const run = this.chain.then(() => this.publish(items, opts.signal));
    this.chain = run.catch(() => {});
    return run;
  }

  private publishFields(topic: string, m: TransactionalMessage, i: number): Record<string, string | number | undefined> {
    const bad = (reason: string) => new TributaryError('invalid_parameter', { param: `messages[${i}]`, reason });
    if (!m || typeof m !== 'object') throw bad('must be an object');
    const text = (v: unknown, what: string): string | undefined => {
      if (v === undefined || v === null) return undefined;
      if (typeof v === 'string') return v;
      if (Buffer.isBuffer(v)) {
        if (!isUtf8(v)) throw bad(`${what} must be UTF-8 text in a transaction`);
        return v.toString('utf8');
      }
      throw bad(`${what} must be a string or Buffer`);
    };
    const value = text(m.value, 'value');
    if (value === undefined) throw bad('value is required');
    const key = text(m.key, 'key');
    if (m.partition !== undefined && (!Number.isSafeInteger(m.partition) || m.partition < 0)) throw bad('partition must be a non-negative integer');
    // The seqNum is taken when the message is accepted here, so send() calls keep their order.
    return { ...this.ids(), topic, partition: m.partition, key: key || undefined, seqNum: ++this.seq, message: value };
  }

  private async publish(items: PublishItem[], signal: AbortSignal | undefined): Promise<RecordMetadata[]> {
    if (items.length === 0) return [];
    const cluster = this.host.cluster;
    const out: RecordMetadata[] = new Array(items.length);
    const settled: Array<PromiseSettledResult<string>> = [];
    try {
      const conn = await cluster.connection(await cluster.coordinator(this.key, signal), signal);
      // All on one connection without waiting: the broker keeps a connection's pipelined requests in order.
      settled.push(...(await Promise.allSettled(items.map((it) => conn.command('TXN_PUBLISH', it.fields)))));
    } catch (err) {
      while (settled.length < items.length) settled.push({ status: 'rejected', reason: err });
    }
    let redo = -1;
    for (let i = 0; i < items.length; i++) {
      const s = settled[i]!;
      if (s.status === 'fulfilled') {
        if (redo < 0) out[i] = metadata(items[i]!.topic, s.value);
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
      for (let i = redo; i < items.length; i++) {
        try {
          out[i] = metadata(items[i]!.topic, await cluster.coordinatorCommand(this.key, 'TXN_PUBLISH', items[i]!.fields, { signal }));
        } catch (err) {
          throw this.fail(err);
        }
      }
    }
    return out;
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
      return Number(parseLine(reply).params.get('staged_offsets'));
    } catch (err) {
      const e = typedTxnError(err);
      if (e instanceof ProducerFencedError) this.host.fenced(e);
      throw e;
    }
  }

  /**
   * Commits: waits for the sends, then END_TXN commit, retried until the broker answers (a retry of a
   * commit that went through answers committed again). Once it resolves, read_committed readers see
   * every record and the offsets have moved.
   */
  async commit(opts: { signal?: AbortSignal } = {}): Promise<void> {
    if (this.stateValue === 'committed') return;
    this.checkOpen();
    await this.chain;
    if (this.failure) throw new TransactionStateError('invalid_txn_state', { reason: `a send failed (${this.failure.message}); abort the transaction` });
    await this.end('commit', opts.signal);
  }

  /** Aborts: nothing of the transaction becomes visible and its offsets do not move. */
  async abort(opts: { signal?: AbortSignal } = {}): Promise<void> {
    if (this.stateValue === 'aborted') return;
    this.checkOpen();
    await this.chain;
    await this.end('abort', opts.signal);
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
  }

  /** `await using txn = await producer.transaction()`: a transaction neither committed nor aborted is aborted. */
  async [Symbol.asyncDispose](): Promise<void> {
    if (this.stateValue === 'open') await this.abort().catch(() => {});
  }
}

function metadata(topic: string, reply: string): RecordMetadata {
  const p = parseLine(reply).params;
  return { topic, partition: Number(p.get('partition')), offset: Number(p.get('offset')) };
}

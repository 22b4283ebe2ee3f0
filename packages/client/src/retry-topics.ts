/**
 * run({ retryTopics }): a message whose handler throws is parked, in one transaction with its source
 * offset, on the next retry topic or, after its last attempt, on the dead-letter topic; one internal
 * consumer per retry topic delivers its messages no earlier than they are due (docs/sdk.md, "Retry and
 * dead-letter topics"). Parts: options (retry-topics-options.ts), headers (retry-headers.ts), the due
 * wait (retry-due.ts).
 */
import { randomUUID } from 'node:crypto';
import { TributaryError } from 'tributary-protocol/errors.js';
import { Admin } from './admin.js';
import type { ConsumedMessage } from './consumer-context.js';
import type { ResolvedConsumerOptions } from './consumer-options.js';
import type { EachMessagePayload } from './message-handlers.js';
import { Producer, type RecordMetadata } from './producer.js';
import { decodeRetryInfo, parkHeaders, type RetryInfo } from './retry-headers.js';
import { type RetryClock, waitUntilDue } from './retry-due.js';
import { parkTransactionalId, type ResolvedRetryTopics, retryTopicIndex } from './retry-topics-options.js';
import { ProducerFencedError, type GroupPosition, type Transaction } from './transaction.js';

/** Where a message was parked (`retry.parked` event). */
export interface ParkedEvent {
  /** The retry topic or the dead-letter topic it was written to. */
  topic: string;
  partition: number;
  offset: number;
  /** The attempt that failed. */
  attempt: number;
  deadLetter: boolean;
  /** Where it was first read. */
  source: { topic: string; partition: number; offset: number };
  error: string;
}

/** What a parker needs of the consumer it parks for. */
export interface ParkHost {
  readonly position: GroupPosition;
  readonly options: ResolvedConsumerOptions;
  /** Runs `fn` with the consumer's commits held off (OffsetCommitter.exclusive). */
  exclusive<T>(fn: () => Promise<T>): Promise<T>;
  committedByTransaction(partition: number, assignmentGeneration: number, offset: number): void;
  parked(e: ParkedEvent): void;
  /** An outcome the consumer cannot reconcile: it closes with this error. */
  fatal(err: Error): void;
}

/** The connection options a consumer's helper clients (Admin, Producer) share with it. */
export function connectionOptions(o: ResolvedConsumerOptions) {
  return {
    brokers: o.brokers,
    stallTimeoutMs: o.stallTimeoutMs,
    ...(o.connectTimeoutMs !== undefined ? { connectTimeoutMs: o.connectTimeoutMs } : {}),
    ...(o.bootstrapTimeoutMs !== undefined ? { bootstrapTimeoutMs: o.bootstrapTimeoutMs } : {}),
    ...(o.tls !== undefined ? { tls: o.tls } : {}),
    ...(o.auth !== undefined ? { auth: o.auth } : {}),
  };
}

/**
 * Checks (and unless `createTopics: false` creates, with the source topic's partition count) the retry
 * and dead-letter topics; returns every topic's partition count.
 */
export async function prepareRetryTopics(o: ResolvedConsumerOptions, r: ResolvedRetryTopics, signal?: AbortSignal): Promise<Map<string, number>> {
  const admin = new Admin(connectionOptions(o));
  try {
    const source = (await admin.describeTopic(r.topic, { signal })).partitions.length;
    const counts = new Map<string, number>([[r.topic, source]]);
    for (const topic of [...r.retryTopics, r.deadLetterTopic]) {
      let n: number | undefined;
      try {
        n = (await admin.describeTopic(topic, { signal })).partitions.length;
      } catch (err) {
        if (!(err instanceof TributaryError && err.code === 'topic_not_found')) throw err;
        if (!r.createTopics) throw new TributaryError('topic_not_found', { topic }, `retry topic ${topic} does not exist (retryTopics.createTopics is false: create it first)`);
        await admin.createTopic({ topic, partitions: source }, { signal }).catch((e: unknown) => {
          if (!(e instanceof TributaryError && e.code === 'topic_already_exists')) throw e;
        });
        n = (await admin.describeTopic(topic, { signal })).partitions.length;
      }
      counts.set(topic, n);
    }
    return counts;
  } finally {
    await admin.close();
  }
}

/**
 * Parks failed messages of one consumer. One transactional producer per consumer: its id is
 * `<group>.<topic>.park.<instanceId | random>`; zombies are fenced by the group (sendOffsets is checked
 * like a commit: member, generation, ownership) and by the coordinator holding FETCH_OFFSET of a
 * partition while a park transaction on it is open (docs/sdk.md).
 */
export class Parker {
  private producer: Producer | undefined;
  private readonly transactionalId: string;

  constructor(
    private readonly host: ParkHost,
    private readonly r: ResolvedRetryTopics,
    private readonly counts: Map<string, number>,
    private readonly clock: RetryClock,
  ) {
    const o = host.options;
    this.transactionalId = parkTransactionalId(o.groupId, o.topic, o.instanceId ?? randomUUID());
  }

  /** Parks `m` after attempt `info.attempt` failed with `err`; resolves once the park transaction committed. */
  park(m: ConsumedMessage, info: RetryInfo, err: unknown, signal: AbortSignal): Promise<void> {
    const r = this.r;
    const next = info.attempt + 1;
    const deadLetter = next > r.maxAttempts;
    const index = deadLetter ? -1 : retryTopicIndex(r, next);
    const topic = deadLetter ? r.deadLetterTopic : r.retryTopics[index]!;
    const partitions = this.counts.get(topic) ?? 1;
    return this.host.exclusive(async () => {
      const now = this.clock.now();
      const headers = parkHeaders(m, info, err, now, deadLetter ? undefined : now + r.delaysMs[index]!);
      // Same partition number as where it was read (modulo): with equal partition counts a key stays on
      // one partition of every retry topic, so a key's retries keep their order within one topic.
      const record = { key: m.key ?? undefined, value: m.value, headers: headers.map((h) => ({ key: h.key, value: h.value })), partition: m.partition % partitions };
      const producer = (this.producer ??= new Producer({
        ...connectionOptions(this.host.options),
        clientId: this.host.options.clientId,
        transactionalId: this.transactionalId,
        transactionTimeoutMs: r.transactionTimeoutMs,
      }));
      let txn: Transaction;
      try {
        txn = await producer.transaction({ signal });
      } catch (e) {
        // Refused for good (a transactionTimeoutMs above the broker's maximum, no transaction permission):
        // no park can work, and redelivering the message would only fail it again, for ever.
        if (!signal.aborted && e instanceof TributaryError && !e.retriable && !(e instanceof ProducerFencedError)) {
          this.dropProducer();
          this.host.fatal(e);
        }
        throw e;
      }
      let written: RecordMetadata | undefined;
      try {
        [written] = await txn.send({ topic, messages: [record] }, { signal });
        await txn.sendOffsets({ consumer: this.host.position, offsets: [{ partition: m.partition, offset: m.offset + 1 }] }, { signal });
      } catch (e) {
        // Nothing is visible and the offset did not move: the message is delivered again.
        await txn.abort().catch(() => this.dropProducer());
        if (e instanceof ProducerFencedError) this.dropProducer();
        throw e;
      }
      try {
        // Not cut short by the signal: END_TXN is retried until the broker answers, so we know the outcome.
        await txn.commit();
      } catch (e) {
        this.dropProducer();
        // Aborted for sure (fenced, timed out): the message is delivered again. Anything else leaves the
        // outcome unknown: redelivering could park it twice, so the consumer stops and a new one starts
        // from the committed offsets (which the coordinator holds until the transaction has ended).
        if (!(e instanceof ProducerFencedError)) this.host.fatal(e as Error);
        throw e;
      }
      this.host.committedByTransaction(m.partition, m.assignmentGeneration, m.offset + 1);
      this.host.parked({
        topic,
        partition: written!.partition,
        offset: written!.offset,
        attempt: info.attempt,
        deadLetter,
        source: { topic: info.topic, partition: info.partition, offset: info.offset },
        error: headers.find((h) => h.key === 'tributary.retry.error')!.value.toString(),
      });
    });
  }

  private dropProducer(): void {
    const p = this.producer;
    this.producer = undefined;
    void p?.close().catch(() => {});
  }

  async close(): Promise<void> {
    const p = this.producer;
    this.producer = undefined;
    await p?.close().catch(() => {});
  }
}

/**
 * The eachMessage of a consumer with retryTopics: on a retry topic, waits until the message is due; runs
 * the user's handler with `payload.retry`; parks the message when the handler throws (a handler that
 * stopped because its partition was revoked is not parked: it is delivered again to the new owner).
 * `retryDelayMs` is the delay of the retry topic read (undefined on the source topic): no message waits
 * longer than that from now, whatever its due header says (a message produced to the retry topic by
 * anyone else could otherwise hold the partition for ever). `sessionHeld` is the consumer's session guard
 * (session-guard.ts).
 */
export function parkingHandler(
  user: (p: EachMessagePayload) => Promise<void> | void,
  parker: Parker,
  clock: RetryClock,
  retryDelayMs: number | undefined,
  sessionHeld: (signal: AbortSignal) => Promise<boolean>,
): (p: EachMessagePayload) => Promise<void> {
  return async ({ message, signal }) => {
    const info: RetryInfo = retryDelayMs !== undefined ? decodeRetryInfo(message) : { attempt: 1, topic: message.topic, partition: message.partition, offset: message.offset };
    if (info.dueAt !== undefined && retryDelayMs !== undefined) {
      await waitUntilDue(Math.min(info.dueAt, clock.now() + retryDelayMs), clock, signal);
      // The session was checked before the wait, which can outlast it: the partition may be another
      // member's by now (docs/sdk.md, "Fenced reads"). Aborted meanwhile: not handled, not parked.
      if (!(await sessionHeld(signal))) throw signal.reason ?? new TributaryError('client_closed');
    }
    try {
      await user({ message, signal, retry: info });
    } catch (err) {
      if (signal.aborted) throw err;
      await parker.park(message, info, err, signal);
    }
  };
}

/**
 * `admin.replayDeadLetters()` (and `tributary dlq replay`): moves what a dead-letter topic holds back to
 * the topics its messages were first read from (docs/sdk.md, "Retry and dead-letter topics"). A consumer
 * group on the dead-letter topic reads it; each batch is written to the sources and its dead-letter
 * offsets committed in one transaction, so a replayer that crashes and runs again neither loses nor
 * repeats a message.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { TributaryError } from 'tributary-protocol/errors.js';
import type { Admin } from './admin.js';
import { Consumer } from './consumer.js';
import type { EachBatchPayload } from './message-handlers.js';
import { type Complete, refuseUnknownOptions } from './option-names.js';
import { Producer } from './producer.js';
import { decodeRetryInfo, withoutRetryHeaders } from './retry-headers.js';

export interface ReplayDeadLettersOptions {
  deadLetterTopic: string;
  /** The group whose committed offsets on the dead-letter topic say what was replayed; default `<deadLetterTopic>.replay`. */
  groupId?: string;
  /** Stable per replayer, so a restart fences a crashed one's open transaction at once; default `<groupId>.replayer`. */
  transactionalId?: string;
}

export interface ReplayDeadLettersResult {
  /** Messages written back, per source topic. */
  replayed: Record<string, number>;
  /** Messages without retry headers (not parked by the SDK): passed over, not written. */
  skipped: number;
}

const REPLAY_OPTION_NAMES = ['deadLetterTopic', 'groupId', 'transactionalId'] as const;
const replayComplete: Complete<ReplayDeadLettersOptions, typeof REPLAY_OPTION_NAMES> = true;
void replayComplete;

const invalid = (param: string, reason: string) => new TributaryError('invalid_parameter', { param, reason }, `invalid replayDeadLetters ${param}: ${reason}`);

/** The connection options of the Admin, for the consumer and the producer the replay runs. */
export interface ReplayConnection {
  brokers: string[];
  [k: string]: unknown;
}

/**
 * Replays every message the dead-letter topic held when the call started (later ones stay for the next
 * replay) and resolves once the group's offsets passed them all. A failure (e.g. a source topic that no
 * longer exists) stops the replay and rejects: what was committed before stays replayed.
 */
export async function replayDeadLetters(
  admin: Admin,
  connection: ReplayConnection,
  opts: ReplayDeadLettersOptions,
  signal?: AbortSignal,
): Promise<ReplayDeadLettersResult> {
  if (!opts || typeof opts !== 'object') throw invalid('options', 'expected { deadLetterTopic, groupId?, transactionalId? }');
  refuseUnknownOptions('replayDeadLetters', opts, REPLAY_OPTION_NAMES);
  const dlq = opts.deadLetterTopic;
  if (typeof dlq !== 'string' || dlq.length === 0) throw invalid('deadLetterTopic', 'required');
  const groupId = opts.groupId ?? `${dlq}.replay`;
  if (typeof groupId !== 'string' || !/^[A-Za-z0-9._-]{1,200}$/.test(groupId)) throw invalid('groupId', '1-200 characters of letters, digits, ".", "_", "-"');
  const transactionalId = opts.transactionalId ?? `${groupId}.replayer`;
  if (typeof transactionalId !== 'string' || transactionalId.length === 0 || transactionalId.length > 255 || /[\s"=]/.test(transactionalId)) {
    throw invalid('transactionalId', '1-255 characters without spaces, quotes or "="');
  }
  // What "everything" means: the read_committed end of each partition now.
  const ends = (await admin.listOffsets(dlq, undefined, { signal })).map((o) => o.latest);
  const result: ReplayDeadLettersResult = { replayed: {}, skipped: 0 };
  const partitionCounts = new Map<string, number>();
  const partitionsOf = async (topic: string) => {
    let n = partitionCounts.get(topic);
    if (n === undefined) partitionCounts.set(topic, (n = (await admin.describeTopic(topic, { signal })).partitions.length));
    return n;
  };

  const producer = new Producer({ ...connection, transactionalId, transactionTimeoutMs: 30_000 } as never);
  const consumer = new Consumer({ ...connection, groupId, topic: dlq, autoOffsetReset: 'earliest', autoCommit: false } as never);
  let failure: unknown;
  const stop = (err?: unknown) => {
    failure ??= err;
    void consumer.close();
  };
  const onAbort = () => stop(signal!.reason);
  signal?.addEventListener('abort', onAbort, { once: true });
  const done = new Set<number>();
  const watching = (async () => {
    // Done once the group's committed offset passed every record below the end taken at the start.
    while (!consumer.state.startsWith('clos')) {
      for (let p = 0; p < ends.length; p++) {
        if (done.has(p)) continue;
        try {
          const { offset } = await admin.fetchOffset(groupId, dlq, p, { signal });
          if (!(await recordsLeft(p, offset))) done.add(p);
        } catch (err) {
          // a park or replay transaction holds the partition's offsets: look again later
          if (!(err instanceof TributaryError && err.code === 'UNSTABLE_OFFSET_COMMIT')) throw err;
        }
      }
      if (done.size === ends.length) return stop();
      await sleep(100, undefined, { signal }).catch(() => {});
    }
  })().catch(stop);
  // Batches still finishing: the watcher may see a batch's offsets committed (and stop) while its
  // END_TXN reply, and so its count in the result, is still on the way.
  let handling: Promise<unknown> = Promise.resolve();
  try {
    await consumer.run({
      eachBatch: (batch) => {
        const work = replayBatch(batch);
        handling = handling.then(() => work.catch(() => {}));
        return work;
      },
    });
  } catch (err) {
    failure ??= err;
  } finally {
    signal?.removeEventListener('abort', onAbort);
    await consumer.close();
    await handling;
    await watching;
    await producer.close().catch(() => {});
  }
  if (failure !== undefined) throw failure;
  return result;

  /**
   * Whether a record lies in [from, end) of partition `p`. Every park is a transaction, so a committed
   * offset usually points at a marker, which a read passes over without a record: read on from where
   * each read ended until a record or the end.
   */
  async function recordsLeft(p: number, from: number): Promise<boolean> {
    for (let at = from; at < ends[p]!; ) {
      const r = await admin.readRecords({ topic: dlq, partition: p, offset: at, maxRecords: 1 }, { signal });
      if (r.records.length > 0) return r.records[0]!.offset < ends[p]!;
      if (r.nextOffset <= at) return true; // nothing readable there yet: look again later
      at = r.nextOffset;
    }
    return false;
  }

  async function replayBatch({ partition, messages, resolveOffset }: EachBatchPayload): Promise<void> {
    const todo = messages.filter((m) => m.offset < ends[partition]!);
    // What came after the start is the next replay's: left unresolved it would be delivered again at
    // once (docs/sdk.md, eachBatch), and this replay needs nothing more of the partition.
    if (todo.length < messages.length) consumer.pause([partition]);
    if (todo.length === 0) return;
    const txn = await producer.transaction();
    let skipped = 0;
    const counts: Record<string, number> = {};
    try {
      for (const m of todo) {
        const info = decodeRetryInfo(m);
        if (info.attempt === 1) {
          skipped++;
          continue;
        }
        const n = await partitionsOf(info.topic);
        const headers = withoutRetryHeaders(m.headers).map((h) => ({ key: h.key, value: h.value }));
        await txn.send({
          topic: info.topic,
          messages: [{ key: m.key ?? undefined, value: m.value, headers, ...(info.partition < n ? { partition: info.partition } : {}) }],
        });
        counts[info.topic] = (counts[info.topic] ?? 0) + 1;
      }
      await txn.sendOffsets({ consumer, offsets: [{ partition, offset: todo[todo.length - 1]!.offset + 1 }] });
      await txn.commit();
    } catch (err) {
      await txn.abort().catch(() => {});
      stop(err);
      throw err;
    }
    // Counted once committed, before anything else can throw: the watcher may have seen these offsets
    // committed and closed the consumer already, which refuses resolveOffset (the transaction committed
    // the offsets; the mark only matters to a consumer that goes on).
    result.skipped += skipped;
    for (const [t, c] of Object.entries(counts)) result.replayed[t] = (result.replayed[t] ?? 0) + c;
    try {
      resolveOffset(todo[todo.length - 1]!.offset);
    } catch (err) {
      if (!(err instanceof TributaryError && err.code === 'consumer_rebalancing')) throw err;
    }
  }
}

/**
 * ListOffsets (v1+): -2 is the log start, -1 the end a consumer of the isolation level may read to (the
 * high watermark, or the last stable offset under read_committed), any other timestamp the first record
 * stamped at or after it (offset and timestamp -1 when there is none below that end), as the main port's
 * LIST_OFFSETS `timestamp` finds it. As Kafka answers: a partition asked for twice is INVALID_REQUEST in
 * each entry, and a currentLeaderEpoch other than the partition's is FENCED_ or UNKNOWN_LEADER_EPOCH.
 */
import { TributaryError } from 'tributary-protocol/errors.js';
import { apiByKey } from '../protocol/apis.js';
import { ListOffsets } from '../protocol/messages/list-offsets.js';
import { saturatingInt64 } from '../protocol/reader.js';
import type { KafkaStruct } from '../protocol/schema.js';
import type { Partition } from '../../partition/partition.js';
import type { KafkaRequestContext } from '../context.js';
import { leaderEpochGate } from './cluster-gate.js';
import { duplicated, errorCodeOf, handler, isIsolationLevel, KafkaApiError, refusal } from './handler.js';
import { isUserTopic } from './metadata.js';

const LATEST = -1;
const EARLIEST = -2;

/** `timestamp` +Infinity (an int64 beyond 2^53) finds no record, -Infinity is refused as any other negative one. */
async function lookup(p: Partition, timestamp: number, committed: boolean): Promise<{ offset: number; timestamp: number }> {
  if (timestamp === EARLIEST) return { offset: p.earliest, timestamp: -1 };
  if (timestamp === LATEST) {
    // Until the transaction index is rebuilt after open, the LSO is only a lower bound (as LIST_OFFSETS waits).
    if (committed) await p.whenTxnIndexReady();
    return { offset: committed ? p.lastStableOffset : p.highWatermark, timestamp: -1 };
  }
  if (timestamp < 0) throw new TributaryError('invalid_parameter', { param: 'timestamp', reason: `${timestamp} is neither a time nor -1 or -2` });
  const offset = await p.log.offsetForTimestamp(timestamp);
  // Under read_committed only below the last stable offset, as Kafka answers: not into an open transaction.
  if (committed) await p.whenTxnIndexReady();
  if (offset >= (committed ? p.lastStableOffset : p.highWatermark)) return { offset: -1, timestamp: -1 };
  const found = await p.read(offset, { maxRecords: 1, maxBytes: 1, isolation: 'read_uncommitted' });
  return { offset, timestamp: found.records[0]?.timestamp ?? -1 };
}

async function listPartition(ctx: KafkaRequestContext, topic: string, q: KafkaStruct, committed: boolean, twice: boolean, badIsolation: boolean): Promise<KafkaStruct> {
  const partitionIndex = q.partitionIndex as number;
  try {
    // Neither 0 nor 1: refused in every partition, as Fetch refuses it (isIsolationLevel).
    if (badIsolation) throw new KafkaApiError('INVALID_REQUEST', 'the isolation level is neither 0 nor 1');
    const denied = ctx.authorize('LIST_OFFSETS', topic);
    if (denied) throw refusal(denied, 'topic');
    // As Kafka: a partition asked for twice is INVALID_REQUEST in each of its entries (after authorization).
    if (twice) throw new KafkaApiError('INVALID_REQUEST', `${topic}[${partitionIndex}] is asked for twice`);
    const t = isUserTopic(topic) ? ctx.broker.topics.get(topic) : undefined;
    if (!t) throw new TributaryError('topic_not_found', { topic });
    const p = t.partition(partitionIndex);
    // v4+: Kafka checks every currentLeaderEpoch but -1 (absent before v4).
    const requested = q.currentLeaderEpoch as number | undefined;
    const leaderEpoch = leaderEpochGate(ctx, p, requested === undefined || requested === -1 ? undefined : requested);
    const found = await lookup(p, saturatingInt64(q.timestamp as bigint), committed);
    return { partitionIndex, errorCode: 0, ...found, leaderEpoch };
  } catch (err) {
    return { partitionIndex, errorCode: errorCodeOf(err), timestamp: -1, offset: -1, leaderEpoch: -1 };
  }
}

/** A topic-partition as one key: the index first, so no topic name can make two keys alike. */
const partitionKey = (topic: string, partition: number) => `${partition}:${topic}`;

export const listOffsetsHandler = handler(apiByKey(ListOffsets.apiKey)!, async (ctx, _version, body) => {
  const committed = body.isolationLevel === 1;
  const badIsolation = !isIsolationLevel(body.isolationLevel);
  const asked = body.topics as KafkaStruct[];
  const keyOf = (t: KafkaStruct, q: KafkaStruct) => partitionKey(t.name as string, q.partitionIndex as number);
  const twice = duplicated(asked.flatMap((t) => (t.partitions as KafkaStruct[]).map((q) => keyOf(t, q))));
  const topics = await Promise.all(
    asked.map(async (t) => ({
      name: t.name,
      partitions: await Promise.all((t.partitions as KafkaStruct[]).map((q) => listPartition(ctx, t.name as string, q, committed, twice.has(keyOf(t, q)), badIsolation))),
    })),
  );
  return { throttleTimeMs: 0, topics };
});

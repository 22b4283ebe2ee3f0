/**
 * OffsetCommit and OffsetFetch (docs/kafka.md, "Consumer groups"): the same committed next offsets as
 * Tributary's COMMIT_OFFSET and FETCH_OFFSET, so a group committed through either port is seen by both.
 * Commits are fenced by the Kafka group's generation and never move an offset back
 * (coordinator/classic-groups.ts). Metadata strings and leader epochs are not kept: they read back as
 * empty and -1.
 */
import { apiByKey } from '../protocol/apis.js';
import { kafkaErrorCode } from '../protocol/error-codes.js';
import { OffsetCommit, OffsetFetch } from '../protocol/messages/offsets.js';
import { saturatingInt64 } from '../protocol/reader.js';
import type { KafkaStruct } from '../protocol/schema.js';
import { coordinatorErrorCodeOf, errorCodeOf, handler, refusal } from './handler.js';
import { isUserTopic } from './metadata.js';

/** Kafka's limit on a commit's metadata string (offset.metadata.max.bytes). */
const MAX_METADATA = 4096;

export const offsetCommitHandler = handler(apiByKey(OffsetCommit.apiKey)!, async (ctx, version, body) => {
  const topics = body.topics as KafkaStruct[];
  const group = body.groupId as string;
  // The group permission first (GROUP_AUTHORIZATION_FAILED for all), then each topic's read ACL.
  const groupDenied = ctx.authorize('COMMIT_OFFSET', undefined, { group });
  const groupCode = groupDenied ? errorCodeOf(refusal(groupDenied, 'group')) : 0;
  // Per partition, before anything is committed: what Kafka refuses partition by partition (0: fine).
  const codes: number[][] = topics.map((t) =>
    (t.partitions as KafkaStruct[]).map((p) => {
      if (groupCode) return groupCode;
      const topicDenied = ctx.authorize('COMMIT_OFFSET', t.name as string, { group });
      if (topicDenied) return errorCodeOf(refusal(topicDenied, 'topic'));
      if (!isUserTopic(t.name as string) || !ctx.broker.topics.tryGet(t.name as string)) return kafkaErrorCode('UNKNOWN_TOPIC_OR_PARTITION');
      const metadata = p.committedMetadata as string | null;
      if (metadata !== null && Buffer.byteLength(metadata) > MAX_METADATA) return kafkaErrorCode('OFFSET_METADATA_TOO_LARGE');
      return committedOffsetCode(p.committedOffset as bigint);
    }),
  );
  // A topic is one all-or-nothing commit: a refused partition keeps the topic's others from committing.
  const committing = topics.flatMap((t, i) => {
    const refused = codes[i]!.find((c) => c !== 0);
    if (refused !== undefined) {
      codes[i] = codes[i]!.map((c) => c || refused);
      return [];
    }
    const entries = (t.partitions as KafkaStruct[]).map((p) => ({ partition: p.partitionIndex as number, offset: saturatingInt64(p.committedOffset as bigint) }));
    return [{ index: i, topic: t.name as string, entries }];
  });
  const setTopic = (i: number, code: number) => {
    codes[i] = codes[i]!.map(() => code);
  };
  try {
    const errors = await ctx.broker.coordinator.classic.commit(
      {
        group: body.groupId as string,
        memberId: version >= 1 ? (body.memberId as string) : '',
        instanceId: (body.groupInstanceId as string | null) ?? null,
        generation: version >= 1 ? (body.generationId as number) : -1,
      },
      committing.map((c) => ({ topic: c.topic, entries: c.entries })),
    );
    committing.forEach((c, j) => {
      const err = errors[j];
      if (err) setTopic(c.index, coordinatorErrorCodeOf(err));
    });
  } catch (err) {
    const code = coordinatorErrorCodeOf(err);
    for (let i = 0; i < topics.length; i++) setTopic(i, code);
  }
  return {
    throttleTimeMs: 0,
    topics: topics.map((t, i) => ({
      name: t.name,
      partitions: (t.partitions as KafkaStruct[]).map((p, k) => ({ partitionIndex: p.partitionIndex, errorCode: codes[i]![k] })),
    })),
  };
});

/**
 * A committed offset (any int64) Tributary cannot take, for its partition: negative is INVALID_REQUEST;
 * 2^53 or more INVALID_COMMIT_OFFSET_SIZE, since offsets here are safe integers and no log reaches it
 * (Kafka would store it; rounding it would commit an offset the client did not send). 0: none.
 * OffsetCommit and TxnOffsetCommit alike.
 */
export function committedOffsetCode(committed: bigint | number): number {
  const offset = saturatingInt64(committed);
  if (offset < 0) return kafkaErrorCode('INVALID_REQUEST');
  return Number.isSafeInteger(offset) ? 0 : kafkaErrorCode('INVALID_COMMIT_OFFSET_SIZE');
}

export const offsetFetchHandler = handler(apiByKey(OffsetFetch.apiKey)!, (ctx, version, body) => {
  const requireStable = version >= 7 && body.requireStable === true;
  const fetchGroup = (groupId: string, topics: KafkaStruct[] | null) => {
    const denied = ctx.authorize('FETCH_OFFSET', undefined, { group: groupId });
    if (denied) throw refusal(denied, 'group');
    const asked = topics === null ? null : topics.map((t) => ({ topic: t.name as string, partitions: t.partitionIndexes as number[] }));
    const rows = ctx.broker.coordinator.classic.fetch(groupId, asked, requireStable);
    // All topics asked for: only those the principal may read are shown; named ones are refused.
    const readable = (topic: string) => ctx.authorize('FETCH_OFFSET', topic, { group: groupId });
    return rows
      .filter((t) => asked !== null || readable(t.topic) === undefined)
      .map((t) => {
        const topicDenied = readable(t.topic);
        const topicCode = topicDenied ? errorCodeOf(refusal(topicDenied, 'topic')) : 0;
        return {
          name: t.topic,
          partitions: t.partitions.map((p) => ({
            partitionIndex: p.partition,
            committedOffset: topicCode ? -1 : p.offset,
            committedLeaderEpoch: -1,
            metadata: '',
            errorCode: topicCode || (p.error ? errorCodeOf(p.error) : 0),
          })),
        };
      });
  };
  if (version >= 8) {
    return {
      throttleTimeMs: 0,
      groups: (body.groups as KafkaStruct[]).map((g) => {
        try {
          return { groupId: g.groupId, topics: fetchGroup(g.groupId as string, g.topics as KafkaStruct[] | null), errorCode: 0 };
        } catch (err) {
          return { groupId: g.groupId, topics: [], errorCode: errorCodeOf(err) };
        }
      }),
    };
  }
  try {
    return { throttleTimeMs: 0, topics: fetchGroup(body.groupId as string, body.topics as KafkaStruct[] | null), errorCode: 0 };
  } catch (err) {
    const code = errorCodeOf(err);
    // Before v2 there is no group-level error: every asked partition carries it.
    const topics = ((body.topics as KafkaStruct[] | null) ?? []).map((t) => ({
      name: t.name,
      partitions: (t.partitionIndexes as number[]).map((p) => ({ partitionIndex: p, committedOffset: -1, committedLeaderEpoch: -1, metadata: '', errorCode: code })),
    }));
    return { throttleTimeMs: 0, topics, errorCode: code };
  }
});


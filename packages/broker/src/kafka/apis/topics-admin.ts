/**
 * DeleteTopics and CreatePartitions: the main port's DELETE and ADD_PARTITIONS (docs/kafka.md). Topics are
 * named, not addressed by id (Tributary's topic ids are not Kafka's 16-byte ids): a DeleteTopics v6 entry
 * with only an id is UNKNOWN_TOPIC_ID. Internal topics are neither deleted nor grown. A topic named twice
 * in one request is INVALID_REQUEST and left as it is, as Kafka's controller answers.
 */
import { TributaryError } from 'tributary-protocol/errors.js';
import { apiByKey } from '../protocol/apis.js';
import { kafkaErrorCode } from '../protocol/error-codes.js';
import { CreatePartitions, DeleteTopics } from '../protocol/messages/topics-admin.js';
import { ZERO_UUID } from '../protocol/reader.js';
import type { KafkaStruct } from '../protocol/schema.js';
import type { KafkaRequestContext } from '../context.js';
import { Duplicates, errorCodeOf, handler, refusal } from './handler.js';
import { isUserTopic } from './metadata.js';

const message = (err: unknown) => (err instanceof Error ? err.message : String(err));

function userTopic(ctx: KafkaRequestContext, name: string) {
  if (!isUserTopic(name)) throw new TributaryError('topic_not_found', { topic: name });
  return ctx.broker.topics.get(name);
}

/** The DELETE of one user topic by name, with what DELETE removes along with it. */
async function deleteByName(ctx: KafkaRequestContext, name: string): Promise<void> {
  userTopic(ctx, name);
  const deleted = await ctx.broker.topics.delete(name);
  // As DELETE: standalone, the topic's committed offsets go before the reply (a cluster's on the event).
  if (!ctx.broker.cluster) {
    await ctx.broker.coordinator.deleteTopicOffsets(name).catch((err: unknown) => ctx.broker.logger.error({ err, topic: name }, 'deleting the committed offsets of a deleted topic failed'));
  }
  // As DELETE: reassignments of a deleted topic have nothing left to move (best effort).
  await ctx.broker.cluster?.reassignments.deleteTopic(name, ctx.broker.cluster.store.definitionKey(name)).catch(() => {});
  await ctx.broker.cluster?.states.deleteTopic(name, deleted.topicId).catch((err: unknown) => ctx.broker.logger.warn({ err, topic: name }, 'deleting the partition states of a deleted topic failed'));
}

interface Deletable {
  name: string | null;
  topicId: string;
}

/**
 * KRaft's ControllerApis.deleteTopics checks, before anything is deleted: an entry with both a name and an
 * id, or neither, and a name or id given twice are INVALID_REQUEST (one result per duplicated name or id).
 * Returns the refusal's message, '' for a later entry of a duplicate (no result), undefined when it may go on.
 */
function checkDeletable(w: Deletable, names: Duplicates<string>, ids: Duplicates<string>): string | undefined {
  if (w.name === null) {
    if (w.topicId === ZERO_UUID) return 'Neither topic name nor id were specified.';
    const dup = ids.of(w.topicId);
    return dup === 'unique' ? undefined : dup === 'first' ? 'Duplicate topic id.' : '';
  }
  if (w.topicId !== ZERO_UUID) return 'You may not specify both topic name and topic id.';
  const dup = names.of(w.name);
  return dup === 'unique' ? undefined : dup === 'first' ? 'Duplicate topic name.' : '';
}

export const deleteTopicsHandler = handler(apiByKey(DeleteTopics.apiKey)!, async (ctx, version, body) => {
  const wanted: Deletable[] =
    version >= 6
      ? (body.topics as KafkaStruct[]).map((t) => ({ name: t.name as string | null, topicId: t.topicId as string }))
      : (body.topicNames as string[]).map((name) => ({ name, topicId: ZERO_UUID }));
  const names = new Duplicates(wanted.flatMap((w) => (w.name !== null && w.topicId === ZERO_UUID ? [w.name] : [])));
  const ids = new Duplicates(wanted.flatMap((w) => (w.name === null && w.topicId !== ZERO_UUID ? [w.topicId] : [])));
  const responses: KafkaStruct[] = [];
  for (const w of wanted) {
    const invalid = checkDeletable(w, names, ids);
    if (invalid !== undefined) {
      if (invalid) responses.push({ name: w.name, topicId: w.topicId, errorCode: kafkaErrorCode('INVALID_REQUEST'), errorMessage: invalid });
      continue;
    }
    const denied = ctx.authorize('DELETE', w.name ?? undefined);
    if (denied) {
      responses.push({ name: w.name, topicId: w.topicId, errorCode: errorCodeOf(refusal(denied, 'topic')), errorMessage: denied.message });
      continue;
    }
    if (w.name === null) {
      responses.push({ name: null, topicId: w.topicId, errorCode: kafkaErrorCode('UNKNOWN_TOPIC_ID'), errorMessage: 'topics are deleted by name' });
      continue;
    }
    try {
      await deleteByName(ctx, w.name);
      responses.push({ name: w.name, topicId: w.topicId, errorCode: 0, errorMessage: null });
    } catch (err) {
      responses.push({ name: w.name, topicId: w.topicId, errorCode: errorCodeOf(err), errorMessage: message(err) });
    }
  }
  return { throttleTimeMs: 0, responses };
});

export const createPartitionsHandler = handler(apiByKey(CreatePartitions.apiKey)!, async (ctx, _version, body) => {
  const results: KafkaStruct[] = [];
  // As Kafka's controller: a name given twice is refused before authorization, and none of its entries is applied.
  const dups = new Duplicates((body.topics as KafkaStruct[]).map((t) => t.name as string));
  for (const t of body.topics as KafkaStruct[]) {
    const name = t.name as string;
    const count = t.count as number;
    const dup = dups.of(name);
    if (dup !== 'unique') {
      if (dup === 'first') results.push({ name, errorCode: kafkaErrorCode('INVALID_REQUEST'), errorMessage: 'Duplicate topic name.' });
      continue;
    }
    try {
      const denied = ctx.authorize('ADD_PARTITIONS', name);
      if (denied) throw refusal(denied, 'topic');
      const topic = userTopic(ctx, name);
      if (t.assignments !== null) throw Object.assign(new Error('manual replica assignment is not supported'), { kafka: 'INVALID_REQUEST' });
      if (count <= topic.partitions.length || count > ctx.broker.config.maxPartitions) {
        throw Object.assign(new Error(`count must be above the current ${topic.partitions.length} and at most ${ctx.broker.config.maxPartitions}`), { kafka: 'INVALID_PARTITIONS' });
      }
      if (body.validateOnly !== true) {
        const before = topic.partitions.length;
        const grown = await ctx.broker.topics.addPartitions(name, count);
        const cluster = ctx.broker.cluster;
        if (cluster) {
          await cluster.createPartitionStates(name, grown.def.partitions, grown.def.replicationFactor, grown.def.topicId);
          const added = grown.partitions.slice(before).map((p) => p.id);
          if ((body.timeoutMs as number) > 0) await cluster.awaitServing(name, added, Math.min(body.timeoutMs as number, 30_000));
        }
      }
      results.push({ name, errorCode: 0, errorMessage: null });
    } catch (err) {
      const kafka = (err as { kafka?: string }).kafka;
      results.push({ name, errorCode: kafka ? kafkaErrorCode(kafka) : errorCodeOf(err), errorMessage: message(err) });
    }
  }
  return { throttleTimeMs: 0, results };
});

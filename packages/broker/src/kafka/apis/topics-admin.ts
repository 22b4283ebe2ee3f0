/**
 * DeleteTopics and CreatePartitions: the main port's DELETE and ADD_PARTITIONS (docs/kafka.md). Topics are
 * named, not addressed by id (Tributary's topic ids are not Kafka's 16-byte ids): a DeleteTopics v6 entry
 * with only an id is UNKNOWN_TOPIC_ID. Internal topics are neither deleted nor grown.
 */
import { TributaryError } from 'tributary-protocol/errors.js';
import { apiByKey } from '../protocol/apis.js';
import { kafkaErrorCode } from '../protocol/error-codes.js';
import { CreatePartitions, DeleteTopics } from '../protocol/messages/topics-admin.js';
import type { KafkaStruct } from '../protocol/schema.js';
import type { KafkaRequestContext } from '../context.js';
import { errorCodeOf, handler, refusal } from './handler.js';
import { isUserTopic } from './metadata.js';

const message = (err: unknown) => (err instanceof Error ? err.message : String(err));

function userTopic(ctx: KafkaRequestContext, name: string) {
  if (!isUserTopic(name)) throw new TributaryError('topic_not_found', { topic: name });
  return ctx.broker.topics.get(name);
}

export const deleteTopicsHandler = handler(apiByKey(DeleteTopics.apiKey)!, async (ctx, version, body) => {
  const wanted: { name: string | null; topicId?: string }[] =
    version >= 6 ? (body.topics as KafkaStruct[]).map((t) => ({ name: t.name as string | null, topicId: t.topicId as string })) : (body.topicNames as string[]).map((name) => ({ name }));
  const responses: KafkaStruct[] = [];
  for (const w of wanted) {
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
      userTopic(ctx, w.name);
      const deleted = await ctx.broker.topics.delete(w.name);
      // As DELETE: standalone, the topic's committed offsets go before the reply (a cluster's on the event).
      if (!ctx.broker.cluster) {
        await ctx.broker.coordinator.deleteTopicOffsets(w.name).catch((err: unknown) => ctx.broker.logger.error({ err, topic: w.name }, 'deleting the committed offsets of a deleted topic failed'));
      }
      // As DELETE: reassignments of a deleted topic have nothing left to move (best effort).
      await ctx.broker.cluster?.reassignments.deleteTopic(w.name, ctx.broker.cluster.store.definitionKey(w.name)).catch(() => {});
      await ctx.broker.cluster?.states.deleteTopic(w.name, deleted.topicId).catch((err: unknown) => ctx.broker.logger.warn({ err, topic: w.name }, 'deleting the partition states of a deleted topic failed'));
      responses.push({ name: w.name, topicId: w.topicId, errorCode: 0, errorMessage: null });
    } catch (err) {
      responses.push({ name: w.name, topicId: w.topicId, errorCode: errorCodeOf(err), errorMessage: message(err) });
    }
  }
  return { throttleTimeMs: 0, responses };
});

export const createPartitionsHandler = handler(apiByKey(CreatePartitions.apiKey)!, async (ctx, _version, body) => {
  const results: KafkaStruct[] = [];
  for (const t of body.topics as KafkaStruct[]) {
    const name = t.name as string;
    const count = t.count as number;
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

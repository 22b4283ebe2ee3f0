/**
 * CreateTopics: the same topics CREATE makes (docs/kafka.md). Standalone, so a replication factor of 1
 * (or -1, the default); partition counts up to the broker's maximum (-1: the default); no manual replica
 * assignment. Topic configs map onto Tributary's policy: `retention.ms` (whole hours, or -1),
 * `retention.bytes`, `cleanup.policy=delete`; any other config is refused, never ignored. A topic that
 * exists is TOPIC_ALREADY_EXISTS, as Kafka answers.
 */
import { validateTopicName, type TopicSpec } from '../../partition/topic-manager.js';
import { apiByKey } from '../protocol/apis.js';
import { kafkaErrorCode } from '../protocol/error-codes.js';
import { CreateTopics } from '../protocol/messages/topics-admin.js';
import type { KafkaStruct } from '../protocol/schema.js';
import type { KafkaRequestContext } from '../context.js';
import { errorCodeOf, handler } from './handler.js';

const HOUR_MS = 3_600_000;

class TopicRefused extends Error {
  constructor(
    readonly kafkaError: string,
    message: string,
  ) {
    super(message);
  }
}

function applyConfig(spec: TopicSpec, name: string, value: string | null): void {
  const num = () => {
    if (value === null || !/^-?\d+$/.test(value)) throw new TopicRefused('INVALID_CONFIG', `${name} must be an integer`);
    return Number(value);
  };
  switch (name) {
    case 'retention.ms': {
      const ms = num();
      if (ms !== -1 && (ms <= 0 || ms % HOUR_MS !== 0)) throw new TopicRefused('INVALID_CONFIG', 'retention.ms must be -1 or a whole number of hours');
      spec.retentionHours = ms === -1 ? -1 : ms / HOUR_MS;
      return;
    }
    case 'retention.bytes': {
      const bytes = num();
      if (bytes < -1) throw new TopicRefused('INVALID_CONFIG', 'retention.bytes must be -1 or more');
      spec.retentionBytes = bytes;
      return;
    }
    case 'cleanup.policy':
      if (value !== 'delete') throw new TopicRefused('INVALID_CONFIG', 'cleanup.policy must be delete (compaction is for internal topics)');
      return;
    default:
      throw new TopicRefused('INVALID_CONFIG', `config ${name} is not supported`);
  }
}

function specOf(ctx: KafkaRequestContext, t: KafkaStruct): TopicSpec {
  const c = ctx.broker.config;
  const name = t.name as string;
  validateTopicName(name);
  const partitions = t.numPartitions as number;
  if (partitions !== -1 && (partitions < 1 || partitions > c.maxPartitions)) throw new TopicRefused('INVALID_PARTITIONS', `numPartitions must be 1..${c.maxPartitions} or -1`);
  const rf = t.replicationFactor as number;
  if (rf !== -1 && rf !== 1) throw new TopicRefused('INVALID_REPLICATION_FACTOR', 'a standalone broker has replication factor 1');
  if ((t.assignments as KafkaStruct[]).length > 0) throw new TopicRefused('INVALID_REQUEST', 'manual replica assignment is not supported');
  const spec: TopicSpec = {
    name,
    partitions: partitions === -1 ? c.defaultPartitions : partitions,
    replicationFactor: 1,
    idempotent: false,
    partitioner: 'hash_key',
    retentionHours: c.retentionHours,
    retentionBytes: c.retentionBytes,
    cleanupPolicy: 'delete',
  };
  for (const kv of t.configs as KafkaStruct[]) applyConfig(spec, kv.name as string, kv.value as string | null);
  return spec;
}

async function createOne(ctx: KafkaRequestContext, t: KafkaStruct, validateOnly: boolean): Promise<KafkaStruct> {
  const name = t.name as string;
  try {
    const spec = specOf(ctx, t);
    if (ctx.broker.topics.tryGet(name)) throw new TopicRefused('TOPIC_ALREADY_EXISTS', `topic ${name} already exists`);
    if (!validateOnly) await ctx.broker.topics.create(spec);
    return { name, errorCode: 0, errorMessage: null, numPartitions: spec.partitions, replicationFactor: 1, configs: null };
  } catch (err) {
    const errorCode = err instanceof TopicRefused ? kafkaErrorCode(err.kafkaError) : errorCodeOf(err);
    const errorMessage = err instanceof Error ? err.message : String(err);
    return { name, errorCode, errorMessage, numPartitions: -1, replicationFactor: -1, configs: null };
  }
}

export const createTopicsHandler = handler(apiByKey(CreateTopics.apiKey)!, async (ctx, _version, body) => {
  const topics: KafkaStruct[] = [];
  // One at a time: two entries of one request naming the same topic get one creation and one refusal.
  for (const t of body.topics as KafkaStruct[]) topics.push(await createOne(ctx, t, body.validateOnly === true));
  return { throttleTimeMs: 0, topics };
});

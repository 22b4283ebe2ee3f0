/**
 * CreateTopics: the same topics CREATE makes (docs/kafka.md): a replication factor up to the live brokers
 * (-1: the default; 1 standalone); partition counts up to the broker's maximum (-1: the default); no manual replica
 * assignment. Topic configs map onto Tributary's policy: `retention.ms` (whole hours, 0 or more, or -1),
 * `retention.bytes`, `cleanup.policy=delete`, `delete.retention.ms` (0 or more, stored; it does nothing on a
 * topic that is not compacted, but Kafka takes it there and so does this port, unlike CREATE); any other config is refused, never ignored, and so is a config given twice. A topic that
 * exists is TOPIC_ALREADY_EXISTS, as Kafka answers. A name given twice in one request is INVALID_REQUEST
 * (one result for it) and creates nothing, as Kafka's controller answers.
 */
import { RETENTION_RANGES } from '../../partition/metadata-store.js';
import { validateTopicName, type TopicSpec } from '../../partition/topic-manager.js';
import { apiByKey } from '../protocol/apis.js';
import { kafkaErrorCode } from '../protocol/error-codes.js';
import { CreateTopics } from '../protocol/messages/topics-admin.js';
import type { KafkaStruct } from '../protocol/schema.js';
import type { KafkaRequestContext } from '../context.js';
import { Duplicates, duplicated, errorCodeOf, handler, refusal } from './handler.js';

const HOUR_MS = 3_600_000;
/** The longest a CreateTopics waits for its leaders (CREATE's own bound). */
const MAX_WAIT_MS = 30_000;

/** A topic (or a resource of AlterConfigs) refused with this Kafka error. */
export class TopicRefused extends Error {
  constructor(
    readonly kafkaError: string,
    message: string,
  ) {
    super(message);
  }
}

/** Puts one topic config into `spec` as Tributary's setting (AlterConfigs and IncrementalAlterConfigs map theirs with it too). */
export function applyConfig(spec: Pick<TopicSpec, 'retentionHours' | 'retentionBytes' | 'deleteRetentionMs'>, name: string, value: string | null): void {
  const num = () => {
    if (value === null || !/^-?\d+$/.test(value)) throw new TopicRefused('INVALID_CONFIG', `${name} must be an integer`);
    return Number(value);
  };
  switch (name) {
    case 'retention.ms': {
      const ms = num();
      // As CREATE's retention_hours (docs/protocol.md): -1, or 0 to the most hours a topic may keep.
      const { max } = RETENTION_RANGES.retention_hours;
      if (ms !== -1 && (ms < 0 || ms % HOUR_MS !== 0 || ms / HOUR_MS > max)) {
        throw new TopicRefused('INVALID_CONFIG', `retention.ms must be -1 or a whole number of hours, 0 to ${max}`);
      }
      spec.retentionHours = ms === -1 ? -1 : ms / HOUR_MS;
      return;
    }
    case 'retention.bytes': {
      const bytes = num();
      // Kafka takes any long; the log keeps a safe integer. Refused here, so validateOnly says what a create does.
      const { min, max } = RETENTION_RANGES.retention_bytes;
      if (bytes < min || bytes > max) throw new TopicRefused('INVALID_CONFIG', `retention.bytes must be ${min} to ${max}`);
      spec.retentionBytes = bytes;
      return;
    }
    case 'delete.retention.ms': {
      const ms = num();
      const { min, max } = RETENTION_RANGES.delete_retention_ms;
      if (ms < min || ms > max) throw new TopicRefused('INVALID_CONFIG', `delete.retention.ms must be ${min} to ${max}`);
      spec.deleteRetentionMs = ms;
      return;
    }
    case 'message.timestamp.type':
      // Timestamps are kept as the producer gave them (produce.ts): the only type served, as DescribeConfigs says.
      if (value !== 'CreateTime') throw new TopicRefused('INVALID_CONFIG', 'message.timestamp.type must be CreateTime (LogAppendTime is not supported)');
      return;
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
  const cluster = ctx.broker.cluster;
  const live = cluster ? cluster.liveBrokers().length : 1;
  const replicationFactor = rf === -1 ? (cluster ? c.defaultReplicationFactor : 1) : rf;
  if (replicationFactor < 1 || replicationFactor > live) {
    throw new TopicRefused('INVALID_REPLICATION_FACTOR', cluster ? `replication factor ${replicationFactor} with ${live} live brokers` : 'a standalone broker has replication factor 1');
  }
  if ((t.assignments as KafkaStruct[]).length > 0) throw new TopicRefused('INVALID_REQUEST', 'manual replica assignment is not supported');
  const spec: TopicSpec = {
    name,
    partitions: partitions === -1 ? c.defaultPartitions : partitions,
    replicationFactor,
    idempotent: false,
    partitioner: 'hash_key',
    retentionHours: c.retentionHours,
    retentionBytes: c.retentionBytes,
    cleanupPolicy: 'delete',
  };
  // -1 takes --default-partitions, which is bound by the maximum too.
  if (spec.partitions > c.maxPartitions) throw new TopicRefused('INVALID_PARTITIONS', `numPartitions must be 1..${c.maxPartitions} or -1`);
  const configs = t.configs as KafkaStruct[];
  // A key given twice is refused, as Kafka's IncrementalAlterConfigs refuses one (its controller's CreateTopics
  // kept the last without a word): which of two values was meant is not ours to guess.
  const twice = duplicated(configs.map((kv) => kv.name as string));
  if (twice.size > 0) throw new TopicRefused('INVALID_REQUEST', `Error due to duplicate config keys: ${[...twice].join(', ')}`);
  for (const kv of configs) applyConfig(spec, kv.name as string, kv.value as string | null);
  return spec;
}

/** In a cluster, as CREATE: the partitions' replicas and leaders, then (within the request's timeout) every leader serving. */
async function create(ctx: KafkaRequestContext, spec: TopicSpec, timeoutMs: number): Promise<void> {
  const { topic, created } = await ctx.broker.topics.create(spec);
  // Made meanwhile by someone else (another request, another broker): Kafka says it exists.
  if (!created) throw new TopicRefused('TOPIC_ALREADY_EXISTS', `topic ${spec.name} already exists`);
  const cluster = ctx.broker.cluster;
  if (!cluster) return;
  await cluster.createPartitionStates(topic.name, topic.def.partitions, topic.def.replicationFactor, topic.def.topicId);
  // timeoutMs 0 or less: answer at once; the leaders answer retriably until they serve it.
  if (timeoutMs > 0) await cluster.awaitServing(topic.name, topic.partitions.map((p) => p.id), Math.min(timeoutMs, MAX_WAIT_MS));
}

async function createOne(ctx: KafkaRequestContext, t: KafkaStruct, validateOnly: boolean, timeoutMs: number): Promise<KafkaStruct> {
  const name = t.name as string;
  try {
    const denied = ctx.authorize('CREATE', name);
    if (denied) throw refusal(denied, 'topic');
    const spec = specOf(ctx, t);
    if (ctx.broker.topics.tryGet(name)) throw new TopicRefused('TOPIC_ALREADY_EXISTS', `topic ${name} already exists`);
    if (!validateOnly) await create(ctx, spec, timeoutMs);
    return { name, errorCode: 0, errorMessage: null, numPartitions: spec.partitions, replicationFactor: spec.replicationFactor, configs: null };
  } catch (err) {
    const errorCode = err instanceof TopicRefused ? kafkaErrorCode(err.kafkaError) : errorCodeOf(err);
    const errorMessage = err instanceof Error ? err.message : String(err);
    return { name, errorCode, errorMessage, numPartitions: -1, replicationFactor: -1, configs: null };
  }
}

export const createTopicsHandler = handler(apiByKey(CreateTopics.apiKey)!, async (ctx, _version, body) => {
  const asked = body.topics as KafkaStruct[];
  // As Kafka's controller: a name given twice is refused before authorization, and none of its entries is created.
  const dups = new Duplicates(asked.map((t) => t.name as string));
  const topics: KafkaStruct[] = [];
  for (const t of asked) {
    const name = t.name as string;
    const dup = dups.of(name);
    if (dup === 'unique') topics.push(await createOne(ctx, t, body.validateOnly === true, body.timeoutMs as number));
    else if (dup === 'first') {
      topics.push({ name, errorCode: kafkaErrorCode('INVALID_REQUEST'), errorMessage: 'Duplicate topic name.', numPartitions: -1, replicationFactor: -1, configs: null });
    }
  }
  return { throttleTimeMs: 0, topics };
});

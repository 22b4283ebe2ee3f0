/**
 * DescribeConfigs for topics and this broker (docs/kafka.md): Tributary's settings under the Kafka names
 * clients and tools look for. A topic's `cleanup.policy`, `retention.ms` (its retention hours),
 * `retention.bytes`, `delete.retention.ms` (the topic's own, else the broker's default), and the broker-wide `max.message.bytes` and `min.insync.replicas`; the broker's
 * `num.partitions`, `default.replication.factor`, `min.insync.replicas`, `message.max.bytes`. Only
 * `retention.ms`, `retention.bytes` and `delete.retention.ms` of a topic can change (AlterConfigs,
 * IncrementalAlterConfigs: alter-configs.ts); every other value is read-only here. Asking for other keys returns only the known ones,
 * as Kafka does; other resource types are INVALID_REQUEST.
 */
import { type TopicDefinition, deleteRetentionMs } from '../../partition/metadata-store.js';
import { apiByKey } from '../protocol/apis.js';
import { kafkaErrorCode } from '../protocol/error-codes.js';
import { DescribeConfigs } from '../protocol/messages/topics-admin.js';
import type { KafkaStruct } from '../protocol/schema.js';
import type { KafkaRequestContext } from '../context.js';
import { handler } from './handler.js';
import { isUserTopic } from './metadata.js';

const TOPIC = 2;
const BROKER = 4;
/** Kafka's config sources and types (the ones used here). */
const SOURCE = { topic: 1, staticBroker: 4 } as const;
const TYPE = { string: 2, int: 3, long: 5, list: 7 } as const;

interface Entry {
  name: string;
  value: string;
  source: number;
  type: number;
  /** Changeable with AlterConfigs (alter-configs.ts). */
  alterable?: boolean;
}

/**
 * Kafka's max.message.bytes is the largest record batch a producer may send. Here a record is bounded by
 * --max-record-bytes and what a Produce request's batches hold (inflated) by --max-batch-bytes (produce.ts).
 */
function largestBatch(c: KafkaRequestContext['broker']['config']): number {
  return Math.min(c.maxRecordBytes, c.maxBatchBytes > 0 ? Math.min(c.maxBatchBytes, c.maxFrameBytes) : c.maxFrameBytes);
}

function topicConfigs(ctx: KafkaRequestContext, d: TopicDefinition): Entry[] {
  const c = ctx.broker.config;
  return [
    { name: 'cleanup.policy', value: d.cleanupPolicy, source: SOURCE.topic, type: TYPE.list },
    { name: 'retention.ms', value: String(d.retentionHours < 0 ? -1 : d.retentionHours * 3_600_000), source: SOURCE.topic, type: TYPE.long, alterable: true },
    { name: 'retention.bytes', value: String(d.retentionBytes), source: SOURCE.topic, type: TYPE.long, alterable: true },
    {
      name: 'delete.retention.ms',
      value: String(deleteRetentionMs(d, c.deleteRetentionMs)),
      source: d.deleteRetentionMs === undefined ? SOURCE.staticBroker : SOURCE.topic,
      type: TYPE.long,
      alterable: true,
    },
    { name: 'max.message.bytes', value: String(largestBatch(c)), source: SOURCE.staticBroker, type: TYPE.int },
    { name: 'min.insync.replicas', value: String(c.minInsyncReplicas), source: SOURCE.staticBroker, type: TYPE.int },
    // Records keep the producer's timestamps (produce.ts), 0 and -1 included: Kafka's CreateTime.
    { name: 'message.timestamp.type', value: 'CreateTime', source: SOURCE.staticBroker, type: TYPE.string },
  ];
}

function brokerConfigs(ctx: KafkaRequestContext): Entry[] {
  const c = ctx.broker.config;
  return [
    { name: 'num.partitions', value: String(c.defaultPartitions), source: SOURCE.staticBroker, type: TYPE.int },
    { name: 'default.replication.factor', value: String(ctx.broker.cluster ? c.defaultReplicationFactor : 1), source: SOURCE.staticBroker, type: TYPE.int },
    { name: 'min.insync.replicas', value: String(c.minInsyncReplicas), source: SOURCE.staticBroker, type: TYPE.int },
    { name: 'message.max.bytes', value: String(largestBatch(c)), source: SOURCE.staticBroker, type: TYPE.int },
  ];
}

function describe(ctx: KafkaRequestContext, r: KafkaStruct): KafkaStruct {
  const resourceType = r.resourceType as number;
  const resourceName = r.resourceName as string;
  const fail = (name: string, message: string) => ({ errorCode: kafkaErrorCode(name), errorMessage: message, resourceType, resourceName, configs: [] });
  let entries: Entry[];
  if (resourceType === TOPIC) {
    // As the main port's DESCRIBE, which reports the same policy; refused before the topic is looked up.
    const denied = ctx.authorize('DESCRIBE', resourceName);
    if (denied) return fail('TOPIC_AUTHORIZATION_FAILED', denied.message);
    const topic = isUserTopic(resourceName) ? ctx.broker.topics.tryGet(resourceName) : undefined;
    if (!topic) return fail('UNKNOWN_TOPIC_OR_PARTITION', `no topic ${resourceName}`);
    entries = topicConfigs(ctx, topic.def);
  } else if (resourceType === BROKER) {
    // The broker's settings: for admins, as the main port's CLUSTER_STATUS.
    const denied = ctx.authorize('CLUSTER_STATUS');
    if (denied) return fail('CLUSTER_AUTHORIZATION_FAILED', denied.message);
    if (resourceName !== '' && resourceName !== String(ctx.broker.brokerId)) return fail('INVALID_REQUEST', `this is broker ${ctx.broker.brokerId}; ask broker ${resourceName} itself`);
    entries = brokerConfigs(ctx);
  } else {
    return fail('INVALID_REQUEST', `resource type ${resourceType} is not described (topics: 2, brokers: 4)`);
  }
  const keys = r.configurationKeys as string[] | null;
  if (keys !== null) entries = entries.filter((e) => keys.includes(e.name));
  return {
    errorCode: 0,
    errorMessage: null,
    resourceType,
    resourceName,
    configs: entries.map((e) => ({
      name: e.name,
      value: e.value,
      readOnly: e.alterable !== true,
      isDefault: e.source !== SOURCE.topic,
      configSource: e.source,
      isSensitive: false,
      synonyms: [],
      configType: e.type,
      documentation: null,
    })),
  };
}

export const describeConfigsHandler = handler(apiByKey(DescribeConfigs.apiKey)!, (ctx, _version, body) => ({
  throttleTimeMs: 0,
  results: (body.resources as KafkaStruct[]).map((r) => describe(ctx, r)),
}));

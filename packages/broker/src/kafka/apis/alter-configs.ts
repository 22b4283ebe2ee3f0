/**
 * AlterConfigs and IncrementalAlterConfigs for topics (docs/kafka.md): the main port's ALTER_TOPIC. Three
 * configs change: `retention.ms` (whole hours or -1, as CreateTopics maps it), `retention.bytes` and
 * `delete.retention.ms` (stored on any topic, as CreateTopics and Kafka take it). AlterConfigs sets a
 * topic's whole set, so the ones it leaves out go back to the broker's defaults, as in Kafka;
 * IncrementalAlterConfigs takes SET and DELETE (back to the default) per config. Anything else refuses its
 * resource and changes nothing of it, with the code Kafka's brokers give: another config name, APPEND or
 * SUBTRACT (not list configs) INVALID_CONFIG; a key twice, a null value to set, a resource twice (each entry)
 * INVALID_REQUEST; broker resources (no broker config is dynamic here) and other types INVALID_REQUEST.
 * Authorized as ALTER_TOPIC (admin) per topic, after the checks Kafka makes before authorizing.
 */
import type { RetentionChange } from '../../partition/metadata-store.js';
import { apiByKey } from '../protocol/apis.js';
import { kafkaErrorCode } from '../protocol/error-codes.js';
import { AlterConfigs, IncrementalAlterConfigs } from '../protocol/messages/alter-configs.js';
import type { KafkaStruct } from '../protocol/schema.js';
import type { KafkaRequestContext } from '../context.js';
import { TopicRefused, applyConfig } from './create-topics.js';
import { duplicated, errorCodeOf, handler, refusal } from './handler.js';
import { isUserTopic } from './metadata.js';

const TOPIC = 2;
const BROKER = 4;
const OP = { set: 0, delete: 1, append: 2, subtract: 3 } as const;
/** The topic configs that can change after creation. */
const ALTERABLE = new Set(['retention.ms', 'retention.bytes', 'delete.retention.ms']);

interface ConfigOp {
  name: string;
  op: number;
  value: string | null;
}

/** What Kafka's brokers check of any resource before anything else: a key given twice, a null value to set. */
function checkOps(ops: ConfigOp[]): void {
  const twice = duplicated(ops.map((o) => o.name));
  if (twice.size > 0) throw new TopicRefused('INVALID_REQUEST', `Error due to duplicate config keys: ${[...twice].join(', ')}`);
  const nulls = ops.filter((o) => o.op !== OP.delete && o.value === null).map((o) => o.name);
  if (nulls.length > 0) throw new TopicRefused('INVALID_REQUEST', `Null value not supported for : ${nulls.join(', ')}`);
}

/** The change `ops` make to a topic, checked whole before anything is stored. */
function changeOf(ctx: KafkaRequestContext, ops: ConfigOp[], incremental: boolean): RetentionChange {
  const c = ctx.broker.config;
  // AlterConfigs replaces the whole set: what it leaves out is back at the broker's defaults.
  const change: RetentionChange = incremental ? {} : { retentionHours: c.retentionHours, retentionBytes: c.retentionBytes, deleteRetentionMs: null };
  for (const { name, op, value } of ops) {
    if (op !== OP.set && op !== OP.delete && op !== OP.append && op !== OP.subtract) throw new TopicRefused('INVALID_REQUEST', `Unknown operations type ${op}`);
    if (!ALTERABLE.has(name)) throw new TopicRefused('INVALID_CONFIG', `config ${name} cannot be changed (${[...ALTERABLE].join(', ')} can)`);
    // None of the three is a list config, so neither appends nor subtracts (Kafka's message).
    if (op === OP.append || op === OP.subtract) throw new TopicRefused('INVALID_CONFIG', `Config value ${op === OP.append ? 'append' : 'subtract'} is not allowed for config key: ${name}`);
    if (op === OP.delete) {
      if (name === 'retention.ms') change.retentionHours = c.retentionHours;
      else if (name === 'retention.bytes') change.retentionBytes = c.retentionBytes;
      else change.deleteRetentionMs = null;
      continue;
    }
    // CreateTopics' mapping (whole hours, ranges), into a scratch spec.
    const spec: { retentionHours: number; retentionBytes: number; deleteRetentionMs?: number } = { retentionHours: 0, retentionBytes: 0 };
    applyConfig(spec, name, value);
    if (name === 'retention.ms') change.retentionHours = spec.retentionHours;
    else if (name === 'retention.bytes') change.retentionBytes = spec.retentionBytes;
    else change.deleteRetentionMs = spec.deleteRetentionMs;
  }
  return change;
}

async function alterOne(ctx: KafkaRequestContext, r: KafkaStruct, validateOnly: boolean, incremental: boolean): Promise<KafkaStruct> {
  const resourceType = r.resourceType as number;
  const resourceName = r.resourceName as string;
  const result = (code: string | number, errorMessage: string | null) => ({ errorCode: typeof code === 'number' ? code : kafkaErrorCode(code), errorMessage, resourceType, resourceName });
  try {
    const ops = (r.configs as KafkaStruct[]).map((x) => ({ name: x.name as string, op: incremental ? (x.configOperation as number) : OP.set, value: x.value as string | null }));
    checkOps(ops);
    if (resourceType === BROKER) {
      const denied = ctx.authorize('CLUSTER_STATUS');
      if (denied) throw refusal(denied, 'cluster');
      throw new TopicRefused('INVALID_REQUEST', 'no broker config can be changed while the broker runs: set it at start (docs/operations.md)');
    }
    if (resourceType !== TOPIC) throw new TopicRefused('INVALID_REQUEST', `Unknown resource type ${resourceType}`);
    const denied = ctx.authorize('ALTER_TOPIC', resourceName);
    if (denied) throw refusal(denied, 'topic');
    // Internal topics keep their settings, as on the main port; not shown to Kafka clients at all.
    if (!isUserTopic(resourceName) || !ctx.broker.topics.tryGet(resourceName)) throw new TopicRefused('UNKNOWN_TOPIC_OR_PARTITION', `no topic ${resourceName}`);
    const change = changeOf(ctx, ops, incremental);
    if (!validateOnly && Object.keys(change).length > 0) await ctx.broker.topics.alterTopic(resourceName, change);
    return result(0, null);
  } catch (err) {
    return result(err instanceof TopicRefused ? err.kafkaError : errorCodeOf(err), err instanceof Error ? err.message : String(err));
  }
}

async function alterAll(ctx: KafkaRequestContext, body: KafkaStruct, incremental: boolean): Promise<KafkaStruct> {
  const asked = body.resources as KafkaStruct[];
  const key = (r: KafkaStruct) => `${r.resourceType as number}:${r.resourceName as string}`;
  // As Kafka: every entry of a resource given twice is refused, and none of them is applied.
  const twice = duplicated(asked.map(key));
  const responses: KafkaStruct[] = [];
  for (const r of asked) {
    if (twice.has(key(r))) {
      responses.push({ errorCode: kafkaErrorCode('INVALID_REQUEST'), errorMessage: 'Each resource must appear at most once.', resourceType: r.resourceType, resourceName: r.resourceName });
    } else responses.push(await alterOne(ctx, r, body.validateOnly === true, incremental));
  }
  return { throttleTimeMs: 0, responses };
}

export const alterConfigsHandler = handler(apiByKey(AlterConfigs.apiKey)!, (ctx, _version, body) => alterAll(ctx, body, false));
export const incrementalAlterConfigsHandler = handler(apiByKey(IncrementalAlterConfigs.apiKey)!, (ctx, _version, body) => alterAll(ctx, body, true));

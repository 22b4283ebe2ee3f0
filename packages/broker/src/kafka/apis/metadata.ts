/**
 * Metadata: this broker as the only node and every user topic it holds (standalone; docs/kafka.md). The
 * internal topics (`__consumer_offsets`, `__transaction_state`) hold Tributary's own records and are
 * neither listed nor served. No topic is created by asking for it.
 */
import { apiByKey } from '../protocol/apis.js';
import { kafkaErrorCode } from '../protocol/error-codes.js';
import { Metadata } from '../protocol/messages/metadata.js';
import type { KafkaStruct } from '../protocol/schema.js';
import type { KafkaRequestContext } from '../context.js';
import { handler } from './handler.js';

/** Kafka's "unknown" for authorized-operation fields the listener does not compute. */
const UNKNOWN_OPERATIONS = -2147483648;

export function isUserTopic(name: string): boolean {
  return !name.startsWith('__');
}

function describeTopic(ctx: KafkaRequestContext, name: string): KafkaStruct {
  const topic = isUserTopic(name) ? ctx.broker.topics.tryGet(name) : undefined;
  if (!topic) return { errorCode: kafkaErrorCode('UNKNOWN_TOPIC_OR_PARTITION'), name, isInternal: false, partitions: [], topicAuthorizedOperations: UNKNOWN_OPERATIONS };
  const id = ctx.broker.brokerId;
  return {
    errorCode: 0,
    name,
    isInternal: false,
    partitions: topic.partitions.map((p) => ({
      errorCode: 0,
      partitionIndex: p.id,
      leaderId: id,
      leaderEpoch: 0,
      replicaNodes: [id],
      isrNodes: [id],
      offlineReplicas: [],
    })),
    topicAuthorizedOperations: UNKNOWN_OPERATIONS,
  };
}

export const metadataHandler = handler(apiByKey(Metadata.apiKey)!, (ctx, version, body) => {
  const asked = body.topics as KafkaStruct[] | null;
  // v0: an empty list means every topic; v1+: null does, and an empty list means none.
  const all = asked === null || (version === 0 && asked.length === 0);
  const names = all ? ctx.broker.topics.list().map((t) => t.name).filter(isUserTopic) : asked.map((t) => t.name as string);
  const id = ctx.broker.brokerId;
  return {
    throttleTimeMs: 0,
    brokers: [{ nodeId: id, host: ctx.advertised.host, port: ctx.advertised.port, rack: null }],
    clusterId: 'tributary',
    controllerId: id,
    topics: names.map((n) => describeTopic(ctx, n)),
    clusterAuthorizedOperations: UNKNOWN_OPERATIONS,
  };
});

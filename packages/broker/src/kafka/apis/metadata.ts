/**
 * Metadata: the nodes (this broker, or in a cluster every live broker with a Kafka listener) and every
 * user topic with its partitions' leaders, replicas and in-sync replicas (docs/kafka.md). The
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

function parseHostPort(address: string): { host: string; port: number } {
  const i = address.lastIndexOf(':');
  return { host: address.slice(0, i).replace(/^\[|\]$/g, ''), port: Number(address.slice(i + 1)) };
}

/** The nodes Kafka clients may dial: this broker alone, or every live broker of the cluster with a Kafka listener. */
export function kafkaNodes(ctx: KafkaRequestContext): KafkaStruct[] {
  const cluster = ctx.broker.cluster;
  if (!cluster) return [{ nodeId: ctx.broker.brokerId, host: ctx.advertised.host, port: ctx.advertised.port, rack: null }];
  return cluster
    .liveBrokers()
    .filter((b) => b.kafkaAddress !== undefined)
    .sort((a, b) => a.id - b.id)
    .map((b) => ({ nodeId: b.id, ...parseHostPort(b.kafkaAddress!), rack: null }));
}

function describePartition(ctx: KafkaRequestContext, topic: string, id: number, live: Set<number>): KafkaStruct {
  const cluster = ctx.broker.cluster;
  const self = ctx.broker.brokerId;
  if (!cluster) return { errorCode: 0, partitionIndex: id, leaderId: self, leaderEpoch: 0, replicaNodes: [self], isrNodes: [self], offlineReplicas: [] };
  const s = cluster.states.get(topic, id)?.value;
  const replicas = s?.replicas ?? [];
  // A leader that is not a live node with a Kafka listener cannot be dialled: the client waits and asks again.
  const leaderId = s && live.has(s.leader) ? s.leader : -1;
  return {
    errorCode: leaderId < 0 ? kafkaErrorCode('LEADER_NOT_AVAILABLE') : 0,
    partitionIndex: id,
    leaderId,
    leaderEpoch: s?.leaderEpoch ?? -1,
    replicaNodes: replicas,
    isrNodes: s?.isr ?? [],
    offlineReplicas: replicas.filter((r) => !live.has(r)),
  };
}

function describeTopic(ctx: KafkaRequestContext, name: string, live: Set<number>): KafkaStruct {
  // Refused before it is looked up, so a principal learns nothing of topics it may not describe, not even whether they exist.
  if (ctx.authorize('METADATA', name)) return { errorCode: kafkaErrorCode('TOPIC_AUTHORIZATION_FAILED'), name, isInternal: false, partitions: [], topicAuthorizedOperations: UNKNOWN_OPERATIONS };
  const topic = isUserTopic(name) ? ctx.broker.topics.tryGet(name) : undefined;
  if (!topic) return { errorCode: kafkaErrorCode('UNKNOWN_TOPIC_OR_PARTITION'), name, isInternal: false, partitions: [], topicAuthorizedOperations: UNKNOWN_OPERATIONS };
  return {
    errorCode: 0,
    name,
    isInternal: false,
    partitions: topic.partitions.map((p) => describePartition(ctx, name, p.id, live)),
    topicAuthorizedOperations: UNKNOWN_OPERATIONS,
  };
}

export const metadataHandler = handler(apiByKey(Metadata.apiKey)!, (ctx, version, body) => {
  const asked = body.topics as KafkaStruct[] | null;
  // v0: an empty list means every topic; v1+: null does, and an empty list means none.
  const all = asked === null || (version === 0 && asked.length === 0);
  // Every topic: those the principal may describe (as the main port's LIST lists them).
  const names = all
    ? ctx.broker.topics
        .list()
        .map((t) => t.name)
        .filter((n) => isUserTopic(n) && ctx.authorize('METADATA', n) === undefined)
    : // Each name once, as Kafka answers: a name repeated would repeat all its partitions in the response.
      [...new Set(asked.map((t) => t.name as string))];
  const brokers = kafkaNodes(ctx);
  const live = new Set(brokers.map((b) => b.nodeId as number));
  // Kafka admin clients send topic changes to the controller; any broker serves them here, so a controller
  // without a Kafka listener (or none, during an election) is stood in for by this broker.
  const elected = ctx.broker.cluster?.election.controllerId;
  const controller = elected !== undefined && live.has(elected) ? elected : ctx.broker.brokerId;
  return {
    throttleTimeMs: 0,
    brokers,
    clusterId: 'tributary',
    controllerId: controller,
    topics: names.map((n) => describeTopic(ctx, n, live)),
    clusterAuthorizedOperations: UNKNOWN_OPERATIONS,
  };
});

/** Topic administration and lookups: CREATE, DELETE, ADD_PARTITIONS, ALTER_TOPIC, LIST, DESCRIBE, METADATA, LIST_OFFSETS, CLUSTER_STATUS. */
import { type Params, formatOk } from 'tributary-protocol/command.js';
import { TributaryError, invalidParam } from 'tributary-protocol/errors.js';
import { type CleanupPolicy, RETENTION_RANGES, type TopicDefinition, deleteRetentionMs } from '../partition/metadata-store.js';
import { type BrokerContext, type CommandSpec, type ConnectionContext, type Reply, json, leaderAddress } from './command-context.js';
import { formatLogOffsets, localLogOffsets } from '../partition/log-offsets.js';
import type { Partition } from '../partition/partition.js';
import { partitionOffsets } from './partition-offsets.js';
import type { TopicSpec } from '../partition/topic-manager.js';
import { failpoint } from '../common/failpoints.js';

/**
 * How long CREATE and ADD_PARTITIONS wait, in a cluster, for every new partition's leader to serve it; then
 * a retriable request_timeout (CREATE is idempotent, so a retry waits again).
 */
const TOPIC_READY_TIMEOUT_MS = 30_000;

const range = (from: number, to: number): number[] => Array.from({ length: Math.max(0, to - from) }, (_, i) => from + i);

async function create(b: BrokerContext, _c: ConnectionContext, p: Params): Promise<Reply> {
  const spec: TopicSpec = {
    name: p.reqStr('topic', { maxLength: 100_000 }),
    partitions: p.int('partitions', { min: 1, max: b.config.maxPartitions }) ?? b.config.defaultPartitions,
    replicationFactor: b.cluster
      ? (p.int('replication_factor', { min: 1, max: 1000 }) ?? b.config.defaultReplicationFactor)
      : (p.int('replication_factor', { min: 1, max: 1 }) ?? 1),
    idempotent: p.bool('idempotent') ?? false,
    partitioner: p.oneOf('partitioner', ['hash_key', 'round_robin'] as const) ?? 'hash_key',
    retentionHours: p.int('retention_hours', RETENTION_RANGES.retention_hours) ?? b.config.retentionHours,
    retentionBytes: p.int('retention_bytes', RETENTION_RANGES.retention_bytes) ?? b.config.retentionBytes,
    cleanupPolicy: p.oneOf('cleanup_policy', ['delete', 'compact'] as const) ?? 'delete',
    // Stored only when given: without it the topic follows the broker's --delete-retention-ms.
    deleteRetentionMs: p.int('delete_retention_ms', RETENTION_RANGES.delete_retention_ms),
  };
  const wait = p.bool('wait') ?? true;
  if (spec.cleanupPolicy === 'compact') throw invalidParam('cleanup_policy', 'compaction is only available for internal topics in this version');
  // (cleanup_policy=compact, which would take it, is refused above for now.)
  checkDeleteRetention(spec.cleanupPolicy, spec.deleteRetentionMs);
  if (b.cluster && spec.replicationFactor > b.cluster.liveBrokers().length) {
    throw new TributaryError('NOT_ENOUGH_REPLICAS', { replication_factor: spec.replicationFactor, live_brokers: b.cluster.liveBrokers().length });
  }
  const { topic, created } = await b.topics.create(spec);
  // Cluster mode: the definition first, then who replicates and leads each partition.
  if (b.cluster) {
    await b.cluster.createPartitionStates(topic.name, topic.def.partitions, topic.def.replicationFactor, topic.def.topicId);
    if (wait) await b.cluster.awaitServing(topic.name, range(0, topic.def.partitions), TOPIC_READY_TIMEOUT_MS);
  }
  return formatOk({ topic: topic.name, partitions: topic.def.partitions, ...policyFields(b, topic.def), created });
}

/**
 * Tombstone retention does nothing on a topic that is not compacted, and no topic changes its cleanup policy
 * after creation: refused, not stored (docs/protocol.md, CREATE and ALTER_TOPIC). Kafka's CreateTopics and
 * AlterConfigs take it, as Kafka does.
 */
function checkDeleteRetention(policy: CleanupPolicy, ms: number | undefined): void {
  if (ms !== undefined && policy !== 'compact') throw invalidParam('delete_retention_ms', `only a compacted topic keeps tombstones; this one is cleanup_policy=${policy}`);
}

/**
 * ALTER_TOPIC: new retention settings for a topic, with CREATE's ranges and rules; the ones not given stay.
 * Stored as ADD_PARTITIONS stores a count (metadata.json, or etcd for every broker), then in effect on
 * every partition hosted here from the next retention pass.
 */
async function alterTopic(b: BrokerContext, _c: ConnectionContext, p: Params): Promise<Reply> {
  const name = p.reqStr('topic', { maxLength: 100_000 });
  const given = {
    retentionHours: p.int('retention_hours', RETENTION_RANGES.retention_hours),
    retentionBytes: p.int('retention_bytes', RETENTION_RANGES.retention_bytes),
    deleteRetentionMs: p.int('delete_retention_ms', RETENTION_RANGES.delete_retention_ms),
  };
  if (given.retentionHours === undefined && given.retentionBytes === undefined && given.deleteRetentionMs === undefined) {
    throw invalidParam('command', 'ALTER_TOPIC needs at least one of retention_hours, retention_bytes, delete_retention_ms');
  }
  if (name.startsWith('__')) throw new TributaryError('invalid_topic_name', { topic: name, reason: 'internal topics keep their settings' });
  checkDeleteRetention(b.topics.get(name).def.cleanupPolicy, given.deleteRetentionMs);
  const topic = await b.topics.alterTopic(name, given);
  const f = policyFields(b, topic.def);
  return formatOk({ topic: topic.name, retention_hours: f.retention_hours, retention_bytes: f.retention_bytes, delete_retention_ms: f.delete_retention_ms });
}

/** A topic's policy as CREATE and DESCRIBE report it. */
function policyFields(b: BrokerContext, d: TopicDefinition) {
  return {
    replication_factor: d.replicationFactor,
    idempotent: d.idempotent,
    partitioner: d.partitioner,
    retention_hours: d.retentionHours,
    retention_bytes: d.retentionBytes,
    cleanup_policy: d.cleanupPolicy,
    // In effect on this broker: the topic's own, else this broker's default.
    delete_retention_ms: deleteRetentionMs(d, b.config.deleteRetentionMs),
  };
}

/** ADD_PARTITIONS: more partitions for a topic (never fewer); in a cluster they get replicas and leaders. */
async function addPartitions(b: BrokerContext, _c: ConnectionContext, p: Params): Promise<Reply> {
  const name = p.reqStr('topic', { maxLength: 100_000 });
  if (name.startsWith('__')) throw new TributaryError('invalid_topic_name', { topic: name, reason: 'internal topics keep their partition count' });
  const partitions = p.reqInt('partitions', { min: 1, max: b.config.maxPartitions });
  const wait = p.bool('wait') ?? true;
  const before = b.topics.tryGet(name)?.partitions.length ?? 0;
  // Checked before the count is stored, as CREATE does: refused later, the count was raised all the same and
  // a retry of the same request was refused as not above it.
  const rf = b.topics.tryGet(name)?.def.replicationFactor ?? 1;
  if (b.cluster && rf > b.cluster.liveBrokers().length) {
    throw new TributaryError('NOT_ENOUGH_REPLICAS', { replication_factor: rf, live_brokers: b.cluster.liveBrokers().length });
  }
  const topic = await b.topics.addPartitions(name, partitions);
  if (b.cluster) {
    await b.cluster.createPartitionStates(topic.name, topic.def.partitions, topic.def.replicationFactor, topic.def.topicId);
    if (wait) await b.cluster.awaitServing(topic.name, range(before, topic.def.partitions), TOPIC_READY_TIMEOUT_MS);
  }
  return formatOk({ topic: topic.name, partitions: topic.def.partitions });
}

async function del(b: BrokerContext, _c: ConnectionContext, p: Params): Promise<Reply> {
  const name = p.reqStr('topic', { maxLength: 100_000 });
  const deleted = await b.topics.delete(name);
  // Standalone, its committed offsets are gone (durably) before the reply; a cluster's coordinators each
  // delete their groups' on the metadata store's event (broker.ts). A failure is logged: the coordinator
  // deletes them when it next loads them, if the topic is not back by then (docs/operations.md).
  if (!b.cluster) await b.coordinator.deleteTopicOffsets(name).catch((err: unknown) => b.logger.error({ err, topic: name }, 'deleting the committed offsets of a deleted topic failed'));
  // Fault tests crash the broker here: the definition is gone, its reassignments and states are not yet.
  if (b.cluster) failpoint(`topic.delete.cleanup:${name}`);
  // Reassignments of a deleted topic have nothing left to move (best effort: what a crash here leaves, the
  // controller removes, Controller.dropDeletedTopicLeftovers).
  await b.cluster?.reassignments.deleteTopic(name, b.cluster.store.definitionKey(name)).catch(() => {});
  // Nor its partition states, of its topic id only: a topic re-created meanwhile keeps its own (one left
  // behind is deleted when the name is created again: ClusterNode.createPartitionStates).
  await b.cluster?.states.deleteTopic(name, deleted.topicId).catch((err: unknown) => b.logger.warn({ err, topic: name }, 'deleting the partition states of a deleted topic failed'));
  return formatOk({ topic: name, deleted: true });
}

function list(b: BrokerContext, c: ConnectionContext): Reply {
  const names = b.topics.list().map((t) => t.name).filter((n) => b.security?.canDescribe(c, n) ?? true);
  return formatOk({ count: names.length, topics: names.join(',') });
}

function partitionState(b: BrokerContext, p: Partition) {
  const s = b.cluster?.states.get(p.topic, p.id)?.value;
  if (b.cluster && s) {
    // The answering broker's own copy (what a replica holds: reassignment shows catch-up and drop with it);
    // LIST_OFFSETS asks each partition's leader.
    return {
      id: p.id,
      leader: b.cluster.leaderAddress(p.topic, p.id)?.advertisedAddress ?? null,
      leader_id: s.leader,
      leader_epoch: s.leaderEpoch,
      replicas: s.replicas,
      isr: s.isr,
      earliest: p.earliest,
      leo: p.logEndOffset,
      hwm: p.highWatermark,
      lso: p.lastStableOffset,
      size_bytes: p.log.sizeBytes,
    };
  }
  return {
    id: p.id,
    leader: leaderAddress(b),
    leader_id: b.brokerId,
    leader_epoch: 0,
    replicas: [b.brokerId],
    isr: [b.brokerId],
    earliest: p.earliest,
    leo: p.logEndOffset,
    hwm: p.highWatermark,
    lso: p.lastStableOffset,
    size_bytes: p.log.sizeBytes,
  };
}

function describe(b: BrokerContext, _c: ConnectionContext, p: Params): Reply {
  const topic = b.topics.get(p.reqStr('topic', { maxLength: 100_000 }));
  const d = topic.def;
  return json({
    topic: d.name,
    topic_id: d.topicId,
    ...policyFields(b, d),
    partitions: topic.partitions.map((part) => partitionState(b, part)),
  });
}

/** Cluster mode: this broker is an in-sync replica of the partition, so its copy holds everything acknowledged. */
function inSyncHere(b: BrokerContext, p: Partition): boolean {
  return b.cluster?.states.get(p.topic, p.id)?.value.isr.includes(b.brokerId) ?? true;
}

function metadata(b: BrokerContext, _c: ConnectionContext, p: Params): Reply {
  const topic = b.topics.get(p.reqStr('topic', { maxLength: 100_000 }));
  if (b.cluster) {
    // Any broker answers from the partition states in etcd; `-` for a partition without a live leader.
    const cluster = b.cluster;
    const states = topic.partitions.map((x) => ({ leader: cluster.leaderAddress(topic.name, x.id), state: cluster.states.get(topic.name, x.id) }));
    return formatOk({
      topic: topic.name,
      partitions: topic.partitions.length,
      leaders: states.map((s) => s.leader?.advertisedAddress ?? '-').join(','),
      epochs: states.map((s) => s.state?.value.leaderEpoch ?? -1).join(','),
    });
  }
  const leader = leaderAddress(b);
  return formatOk({
    topic: topic.name,
    partitions: topic.partitions.length,
    leaders: topic.partitions.map(() => leader).join(','),
    epochs: topic.partitions.map(() => 0).join(','),
  });
}

async function listOffsets(b: BrokerContext, _c: ConnectionContext, p: Params): Promise<Reply> {
  const topic = b.topics.get(p.reqStr('topic', { maxLength: 100_000 }));
  const only = p.int('partition', { min: 0, max: 1_000_000 });
  const timestamp = p.int('timestamp', { min: 0 });
  const parts = only === undefined ? topic.partitions : [topic.partition(only)];
  // Cluster mode: partitions led elsewhere are asked of their leaders; when one cannot be asked, an
  // in-sync replica's own view (its HWM and LSO trail the leader's), and from any other broker (whose copy
  // may be empty) the leader's error: zeros there read as an empty partition.
  const offsets = await Promise.all(
    parts.map(async (x) =>
      formatLogOffsets(
        x.id,
        await partitionOffsets(b, topic.name, x.id, timestamp).catch((err: unknown) => {
          if (inSyncHere(b, x)) return localLogOffsets(x, timestamp);
          throw err instanceof TributaryError && err.retriable ? err : new TributaryError('NOT_LEADER', { topic: topic.name, partition: x.id, reason: 'no leader could be asked' });
        }),
      ),
    ),
  );
  return formatOk({ topic: topic.name, partitions: topic.partitions.length, offsets: offsets.join(',') });
}

function clusterStatus(b: BrokerContext): Reply {
  if (b.cluster) return json(b.cluster.status());
  const partitions = b.topics.list().flatMap((t) =>
    t.partitions.map((p) => ({ topic: t.name, partition: p.id, leader: b.brokerId, leader_epoch: 0, isr: [b.brokerId], hwm: p.highWatermark })),
  );
  return json({
    mode: 'standalone',
    controller: b.brokerId,
    brokers: [{ id: b.brokerId, host: b.advertised.host, port: b.advertised.port, alive: true }],
    partitions,
    under_replicated: 0,
    leaderless: 0,
  });
}


export const TOPIC_COMMANDS: Record<string, CommandSpec> = {
  CREATE: {
    handler: create,
    params: ['cleanup_policy', 'delete_retention_ms', 'idempotent', 'partitioner', 'partitions', 'replication_factor', 'retention_bytes', 'retention_hours', 'topic', 'wait'],
  },
  DELETE: { handler: del, params: ['topic'] },
  ADD_PARTITIONS: { handler: addPartitions, params: ['partitions', 'topic', 'wait'] },
  ALTER_TOPIC: { handler: alterTopic, params: ['delete_retention_ms', 'retention_bytes', 'retention_hours', 'topic'] },
  LIST: { handler: list, params: [] },
  DESCRIBE: { handler: describe, params: ['topic'] },
  METADATA: { handler: metadata, params: ['topic'] },
  LIST_OFFSETS: { handler: listOffsets, params: ['partition', 'timestamp', 'topic'] },
  CLUSTER_STATUS: { handler: clusterStatus, params: [] },
};

import { type Acks, type Batch, type ScannedBatch, decodeBatch, encodeBatch, logRecordsToBatch, scanBatch } from 'tributary-protocol/batch.js';
import type { RecordHeader } from 'tributary-protocol/record.js';
import { type Params, type ParsedLine, formatOk, parseLine } from 'tributary-protocol/command.js';
import { ERROR_CLASSES, TributaryError, invalidParam } from 'tributary-protocol/errors.js';
import { FEATURES, PROTOCOL_VERSION } from 'tributary-protocol/features.js';
import type { TopicDefinition } from '../cluster/metadata-store.js';
import type { GroupCoordinator } from '../coordinator/group-coordinator.js';
import type { TransactionCoordinator } from '../txn/txn-coordinator.js';
import type { ClusterNode } from '../cluster/cluster-node.js';
import type { BrokerConfig } from './config.js';
import { GROUP_COMMANDS } from './group-commands.js';
import { TXN_COMMANDS } from './txn-commands.js';
import { REPLICA_COMMANDS } from './replica-commands.js';
import type { Logger } from './logger.js';
import type { BrokerMetrics } from './metrics.js';
import type { Isolation, Partition } from './partition.js';
import type { TopicManager, TopicSpec } from './topic-manager.js';

/** What handlers may use of the broker. */
export interface BrokerContext {
  readonly config: BrokerConfig;
  readonly topics: TopicManager;
  readonly metrics: BrokerMetrics;
  readonly logger: Logger;
  readonly brokerId: number;
  /** host:port clients should use to reach this broker. */
  readonly advertised: { host: string; port: number };
  readonly coordinator: GroupCoordinator;
  readonly transactions: TransactionCoordinator;
  /** Cluster mode only: who leads what, replication, the controller. */
  readonly cluster?: ClusterNode;
  /** Authentication and authorization (src/broker/security.ts); absent in unit-test contexts. */
  readonly security?: import('./security.js').Security;
}

/** What handlers may use of the connection a request came on. */
export interface ConnectionContext {
  features: Set<string>;
  principal: string | undefined;
  readonly remote: string;
  /**
   * Cluster mode: committed offsets this connection's CONSUMEs asked other brokers (the groups'
   * coordinators) for, once per (group, topic, partition) for the connection's life.
   */
  remoteCommitted?: Map<string, number | undefined>;
}

export type Reply = string | Buffer;

export interface CommandSpec {
  handler: (b: BrokerContext, c: ConnectionContext, p: Params) => Promise<Reply> | Reply;
  /**
   * Pipelined commands may run while later requests of the same connection start (produce).
   * Others complete before the next request starts, so `CREATE` then `PUBLISH` sent back to back work.
   */
  pipelined?: boolean;
}

const MAX_CONSUME_RECORDS = 10_000;
const DEFAULT_CONSUME_RECORDS = 500;
const DEFAULT_CONSUME_BYTES = 1024 * 1024;

export function leaderAddress(b: BrokerContext): string {
  return `${b.advertised.host}:${b.advertised.port}`;
}

function json(obj: Record<string, unknown>): string {
  return JSON.stringify({ status: 'OK', ...obj });
}

// ---- connection ----

function protocolInfo(): Reply {
  return formatOk({
    protocol: 'tributary',
    min_version: PROTOCOL_VERSION,
    max_version: PROTOCOL_VERSION,
    features: FEATURES.join(','),
    error_classes: ERROR_CLASSES.join(','),
  });
}

function negotiate(_b: BrokerContext, c: ConnectionContext, p: Params): Reply {
  const version = p.reqInt('version', { min: 0, max: 1_000_000 });
  if (version !== PROTOCOL_VERSION) throw new TributaryError('unsupported_version', { requested: version, min_version: PROTOCOL_VERSION, max_version: PROTOCOL_VERSION });
  const requested = p.str('features', { allowEmpty: true }) ?? '';
  const wanted = requested === '*' ? [...FEATURES] : requested.split(',').map((f) => f.trim()).filter(Boolean);
  const known = new Set<string>(FEATURES);
  const enabled = wanted.filter((f) => known.has(f));
  const unsupported = wanted.filter((f) => !known.has(f));
  if (p.bool('require_features') && unsupported.length > 0) {
    throw new TributaryError('UNSUPPORTED_FEATURE', { unsupported: unsupported.join(',') });
  }
  c.features = new Set(enabled);
  return formatOk({ protocol_version: PROTOCOL_VERSION, enabled: enabled.join(','), unsupported: unsupported.join(',') });
}

function auth(b: BrokerContext, c: ConnectionContext, p: Params): Reply | Promise<Reply> {
  const principal = p.reqStr('principal', { maxLength: 256 });
  const token = p.str('token', { maxLength: 4096, allowEmpty: true });
  if (b.security?.enabled) return b.security.authenticate(c, principal, token ?? '');
  // Authentication is not configured on this broker: the connection is anonymous-with-a-name.
  c.principal = principal;
  return formatOk({ principal, authenticated: false });
}

// ---- topics ----

async function create(b: BrokerContext, _c: ConnectionContext, p: Params): Promise<Reply> {
  const spec: TopicSpec = {
    name: p.reqStr('topic', { maxLength: 100_000 }),
    partitions: p.int('partitions', { min: 1, max: b.config.maxPartitions }) ?? b.config.defaultPartitions,
    replicationFactor: b.cluster
      ? (p.int('replication_factor', { min: 1, max: 1000 }) ?? b.config.defaultReplicationFactor)
      : (p.int('replication_factor', { min: 1, max: 1 }) ?? 1),
    idempotent: p.bool('idempotent') ?? false,
    partitioner: p.oneOf('partitioner', ['hash_key', 'round_robin'] as const) ?? 'hash_key',
    retentionHours: p.int('retention_hours', { min: -1, max: 1_000_000 }) ?? b.config.retentionHours,
    retentionBytes: p.int('retention_bytes', { min: -1 }) ?? b.config.retentionBytes,
    cleanupPolicy: p.oneOf('cleanup_policy', ['delete', 'compact'] as const) ?? 'delete',
  };
  if (spec.cleanupPolicy === 'compact') throw invalidParam('cleanup_policy', 'compaction is only available for internal topics in this version');
  if (b.cluster && spec.replicationFactor > b.cluster.liveBrokers().length) {
    throw new TributaryError('NOT_ENOUGH_REPLICAS', { replication_factor: spec.replicationFactor, live_brokers: b.cluster.liveBrokers().length });
  }
  const { topic, created } = await b.topics.create(spec);
  // Cluster mode: the definition first, then who replicates and leads each partition.
  if (b.cluster) await b.cluster.createPartitionStates(topic.name, topic.def.partitions, topic.def.replicationFactor);
  return formatOk({ topic: topic.name, partitions: topic.def.partitions, ...policyFields(topic.def), created });
}

/** A topic's policy as CREATE and DESCRIBE report it. */
function policyFields(d: TopicDefinition) {
  return {
    replication_factor: d.replicationFactor,
    idempotent: d.idempotent,
    partitioner: d.partitioner,
    retention_hours: d.retentionHours,
    retention_bytes: d.retentionBytes,
    cleanup_policy: d.cleanupPolicy,
  };
}

/** ADD_PARTITIONS: more partitions for a topic (never fewer); in a cluster they get replicas and leaders. */
async function addPartitions(b: BrokerContext, _c: ConnectionContext, p: Params): Promise<Reply> {
  const name = p.reqStr('topic', { maxLength: 100_000 });
  if (name.startsWith('__')) throw new TributaryError('invalid_topic_name', { topic: name, reason: 'internal topics keep their partition count' });
  const partitions = p.reqInt('partitions', { min: 1, max: b.config.maxPartitions });
  const topic = await b.topics.addPartitions(name, partitions);
  if (b.cluster) await b.cluster.createPartitionStates(topic.name, topic.def.partitions, topic.def.replicationFactor);
  return formatOk({ topic: topic.name, partitions: topic.def.partitions });
}

async function del(b: BrokerContext, _c: ConnectionContext, p: Params): Promise<Reply> {
  const name = p.reqStr('topic', { maxLength: 100_000 });
  await b.topics.delete(name);
  return formatOk({ topic: name, deleted: true });
}

function list(b: BrokerContext, c: ConnectionContext): Reply {
  const names = b.topics.list().map((t) => t.name).filter((n) => b.security?.canDescribe(c, n) ?? true);
  return formatOk({ count: names.length, topics: names.join(',') });
}

function partitionState(b: BrokerContext, p: Partition) {
  const s = b.cluster?.states.get(p.topic, p.id)?.value;
  if (b.cluster && s) {
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
  };
}

function describe(b: BrokerContext, _c: ConnectionContext, p: Params): Reply {
  const topic = b.topics.get(p.reqStr('topic', { maxLength: 100_000 }));
  const d = topic.def;
  return json({
    topic: d.name,
    topic_id: d.topicId,
    ...policyFields(d),
    partitions: topic.partitions.map((part) => partitionState(b, part)),
  });
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
  const parts = only === undefined ? topic.partitions : [topic.partition(only)];
  // `latest` is the LSO: exact once the transaction index is rebuilt (just after open it is a lower bound).
  await Promise.all(parts.map((x) => x.whenTxnIndexReady()));
  const local = (x: Partition) => `P${x.id}:earliest=${x.earliest}:latest=${x.lastStableOffset}:leo=${x.logEndOffset}:hwm=${x.highWatermark}`;
  // Cluster mode: a follower's HWM and LSO trail its leader's, so partitions led elsewhere are asked of
  // their leaders (a follower's own view only when the leader cannot be asked).
  const offsets = await Promise.all(
    parts.map(async (x) => {
      const cluster = b.cluster;
      if (!cluster || cluster.isLeader(topic.name, x.id)) return local(x);
      try {
        const reply = await (await cluster.leaderPeer(topic.name, x.id)).command('LIST_OFFSETS', { topic: topic.name, partition: x.id });
        return parseLine(reply).params.get('offsets') ?? local(x);
      } catch {
        return local(x);
      }
    }),
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

// ---- produce ----

function checkRecordSize(b: BrokerContext, bytes: number): void {
  if (bytes > b.config.maxRecordBytes) throw new TributaryError('record_too_large', { size: bytes, max: b.config.maxRecordBytes });
}

const MAX_PRODUCER_ID_BYTES = 255;

/** PUBLISH's idempotent producer parameters: all three or none. */
function idempotenceParams(p: Params): { producerId: string; epoch: number; seqNum: number } | undefined {
  const given = ['producerId', 'epoch', 'seqNum'].filter((k) => p.has(k));
  if (given.length === 0) return undefined;
  for (const k of ['producerId', 'epoch', 'seqNum']) {
    if (!p.has(k)) throw invalidParam(k, 'producerId, epoch and seqNum go together');
  }
  const producerId = p.reqStr('producerId', { maxLength: MAX_PRODUCER_ID_BYTES });
  if (Buffer.byteLength(producerId, 'utf8') > MAX_PRODUCER_ID_BYTES) throw invalidParam('producerId', `at most ${MAX_PRODUCER_ID_BYTES} bytes`);
  const epoch = p.reqInt('epoch', { min: 0, max: 2 ** 31 - 1 });
  const seqNum = p.reqInt('seqNum', { min: 0 });
  return { producerId, epoch, seqNum };
}

/** The idempotent fields of a decoded batch, validated (one producer id and epoch, lastSequence = first + count - 1). */
function batchIdempotence(batch: Batch): { producerId: string; epoch: number; firstSequence: number; lastSequence: number } {
  const records = batch.records;
  const first = records[0]!;
  const producerId = first.producerId;
  const epoch = first.epoch;
  if (producerId === '') throw new TributaryError('invalid_batch', { reason: 'idempotent batch without a producer id' });
  if (Buffer.byteLength(producerId, 'utf8') > MAX_PRODUCER_ID_BYTES) throw new TributaryError('invalid_batch', { reason: `producer id longer than ${MAX_PRODUCER_ID_BYTES} bytes` });
  if (!Number.isSafeInteger(epoch) || epoch < 0 || epoch > 2 ** 31 - 1) throw new TributaryError('invalid_batch', { reason: 'idempotent batch with an invalid epoch' });
  for (const r of records) {
    if (r.producerId !== producerId || r.epoch !== epoch) throw new TributaryError('invalid_batch', { reason: 'records of an idempotent batch must share one producer id and epoch' });
  }
  if (!Number.isSafeInteger(batch.firstSequence) || !Number.isSafeInteger(batch.lastSequence) || batch.lastSequence !== batch.firstSequence + records.length - 1) {
    throw new TributaryError('invalid_batch', { reason: 'last sequence must be first sequence + record count - 1' });
  }
  return { producerId, epoch, firstSequence: batch.firstSequence, lastSequence: batch.lastSequence };
}

/**
 * Cluster mode: only the partition's leader appends (NOT_LEADER LEADER_IS otherwise), and acks=all is
 * refused up front below min_insync_replicas. Returns the leader epoch the append is made under (for
 * replicated()); standalone: always the leader, undefined.
 */
export function leaderGate(b: BrokerContext, partition: Partition, acks?: string): number | undefined {
  if (!b.cluster) return undefined;
  const replica = b.cluster.requireLeader(partition.topic, partition.id);
  if (acks === 'all' || acks === '-1') b.cluster.replicas.checkMinIsr(replica);
  return replica.leaderEpoch;
}

/**
 * acks=all in a cluster: answers once the HWM passed the record (every in-sync replica has it) while this
 * broker still leads at `epoch`, the epoch leaderGate() returned before the append; a leadership change
 * fails it at once with NOT_LEADER.
 */
export async function replicated(b: BrokerContext, partition: Partition, lastOffset: number, epoch: number | undefined): Promise<void> {
  if (!b.cluster) return;
  if (epoch === undefined) throw new TributaryError('internal_error', { reason: 'a replicated append without its leader epoch' });
  await b.cluster.replicas.waitReplicated(partition.topic, partition.id, epoch, lastOffset, b.config.replicationTimeoutMs);
}

/**
 * The reply's gate after the append: acks=all waits for replication (replicated()); acks=1 in a cluster
 * is refused with NOT_LEADER if leadership moved while the record was being written, since the new
 * leader may not have it (it still may be lost later: that is acks=1).
 */
async function acknowledged(b: BrokerContext, partition: Partition, lastOffset: number, acks: string, epoch: number | undefined): Promise<void> {
  if (acks === 'all' || acks === '-1') return replicated(b, partition, lastOffset, epoch);
  if (b.cluster && epoch !== undefined && !b.cluster.replicas.leadsAt(partition.topic, partition.id, epoch)) throw b.cluster.replicas.notLeader(partition.topic, partition.id);
}

function refuseInternal(topic: string): void {
  if (topic.startsWith('__')) throw new TributaryError('invalid_topic_name', { topic, reason: 'internal topics are written by the broker only' });
}

async function publish(b: BrokerContext, _c: ConnectionContext, p: Params): Promise<Reply> {
  const topic = b.topics.get(p.reqStr('topic', { maxLength: 100_000 }));
  refuseInternal(topic.name);
  const explicit = p.int('partition', { min: 0, max: 1_000_000 });
  const keyStr = p.str('key', { maxLength: 65_535, allowEmpty: true });
  const acks = p.oneOf('acks', ['0', '1', 'all', '-1'] as const) ?? '1';
  const idem = idempotenceParams(p);
  const message = p.str('message', { required: true, allowEmpty: true }) as string;
  const key = keyStr ? Buffer.from(keyStr, 'utf8') : null;
  const value = Buffer.from(message, 'utf8');
  checkRecordSize(b, value.length + (key?.length ?? 0));
  const partition = topic.partition(topic.choosePartition(explicit, key));
  const epoch = leaderGate(b, partition, acks);
  const appended = idem
    ? partition.appendIdempotent([{ key, value, producerId: idem.producerId, epoch: idem.epoch, sequence: idem.seqNum }], {
        producerId: idem.producerId,
        epoch: idem.epoch,
        firstSequence: idem.seqNum,
        lastSequence: idem.seqNum,
      })
    : partition.append([{ key, value }]);
  countIn(b, topic.name, 1, value.length);
  if (acks === '0') {
    appended.catch((err) => b.logger.warn({ err, topic: topic.name }, 'acks=0 append failed'));
    return 'OK';
  }
  const res = await appended;
  await acknowledged(b, partition, res.lastOffset, acks, epoch);
  return JSON.stringify({ status: 'OK', partition: partition.id, offset: res.baseOffset, leader: leaderAddress(b) });
}

function countIn(b: BrokerContext, topic: string, records: number, bytes: number): void {
  b.metrics.recordsIn.inc({ topic }, records);
  b.metrics.bytesIn.inc({ topic }, bytes);
}

/** No headers: shared by the records handed to the log (it only reads them), so none keeps an array alive. */
const NO_HEADERS: RecordHeader[] = Object.freeze([]) as unknown as RecordHeader[];

/** A binary batch frame: one append of all its records to one partition. */
export async function produceBatch(b: BrokerContext, c: ConnectionContext, body: Buffer): Promise<Reply> {
  // The synchronous part keeps the decoded batch in its own frame, so the records are not held here while
  // the append waits for the fsync (only the log holds them, and only until they are written).
  const { partition, appended, count, acks, topic, epoch } = startAppend(b, c, body);
  if (acks === '0') {
    appended.catch((err) => b.logger.warn({ err, topic }, 'acks=0 append failed'));
    return 'OK';
  }
  const res = await appended;
  await acknowledged(b, partition, res.lastOffset, acks, epoch);
  return JSON.stringify({ status: 'OK', partition: partition.id, base_offset: res.baseOffset, last_offset: res.lastOffset, count });
}

function startAppend(
  b: BrokerContext,
  c: ConnectionContext,
  body: Buffer,
): { partition: Partition; appended: Promise<{ baseOffset: number; lastOffset: number }>; count: number; acks: Acks; topic: string; epoch: number | undefined } {
  const ext = c.features.has('record_extensions_v1');
  // Fast path: validate without a record object per record, and encode the log's records straight from
  // the wire bytes (the same stored bytes as the records below would give). Header keys that are not
  // valid UTF-8 take the decoding path, which stores them as decoded strings.
  const scan = scanBatch(body, { extensions: ext });
  // Idempotent batches take the decoding path: their records keep producer id, epoch and sequence.
  if (scan.verbatim && !scan.idempotent) return startWireAppend(b, scan);
  const batch: Batch = decodeBatch(body, { extensions: ext });
  const topic = b.topics.get(batch.topic);
  refuseInternal(topic.name);
  const records = batch.records;
  const n = records.length;
  if (n === 0) throw new TributaryError('invalid_batch', { reason: 'empty batch' });
  const idem = batch.idempotent ? batchIdempotence(batch) : undefined;
  // The decoded records go to the log as they are (a BatchRecord is a RecordInput), without copying:
  // - only key, value, timestamp and headers come from the producer; the other fields are reset to the
  //   log's defaults here (the same values the log uses when a RecordInput leaves them out);
  // - key/value/header buffers are views into the frame body. That is safe: the body is a Buffer of its
  //   own (a socket read chunk or the frame decoder's allocation) that nothing writes to again, and Node
  //   never reuses memory a live Buffer references; the log only reads these views while encoding the
  //   append into its own write buffer, and its tail cache holds that write buffer, never the caller's
  //   records (PartitionLog.writeGroup, TailCache). So the body lives until the append settles. Even a
  //   cache that kept these views would be safe (it would only pin the body's memory). Should the frame
  //   decoder ever reuse a read buffer (e.g. a socket `onread` buffer), copy the records here again.
  let bytes = 0;
  for (let i = 0; i < n; i++) {
    const r = records[i]!;
    const size = r.value.length;
    checkRecordSize(b, size + (r.key === null ? 0 : r.key.length));
    bytes += size;
    if (r.timestamp < 0) r.timestamp = 0;
    if (idem) {
      // Stored as sent (producer id and epoch validated above); sequences numbered from the batch header.
      r.sequence = idem.firstSequence + i;
    } else {
      r.producerId = '';
      r.epoch = -1;
      r.sequence = -1;
    }
    r.attributes = 0;
    if (r.headers.length === 0) r.headers = NO_HEADERS;
  }
  // partition -1: the broker picks one partition for the whole batch (first record's key, else round-robin).
  const partition = topic.partition(topic.choosePartition(batch.partition >= 0 ? batch.partition : undefined, records[0]!.key));
  const epoch = leaderGate(b, partition, batch.acks);
  const appended = idem ? partition.appendIdempotent(records, idem) : partition.append(records);
  countIn(b, topic.name, n, bytes);
  return { partition, appended, count: n, acks: batch.acks, topic: topic.name, epoch };
}

/** startAppend for a batch scanBatch validated: the same checks, in the same order, with the same errors. */
function startWireAppend(
  b: BrokerContext,
  batch: ScannedBatch,
): { partition: Partition; appended: Promise<{ baseOffset: number; lastOffset: number }>; count: number; acks: Acks; topic: string; epoch: number | undefined } {
  const topic = b.topics.get(batch.topic);
  refuseInternal(topic.name);
  const n = batch.count;
  if (n === 0) throw new TributaryError('invalid_batch', { reason: 'empty batch' });
  const body = batch.body;
  const starts = batch.starts;
  let bytes = 0;
  let firstKey: Buffer | null = null;
  for (let i = 0; i < n; i++) {
    // Record layout: offset u64, sequence u64, producer id u16 + bytes, key u16 + bytes, epoch i64, value u32 + bytes.
    const s = starts[i]!;
    const k = s + 18 + ((body[s + 16]! << 8) | body[s + 17]!);
    const keyLen = (body[k]! << 8) | body[k + 1]!;
    const v = k + 10 + keyLen;
    const size = body[v]! * 0x1000000 + ((body[v + 1]! << 16) | (body[v + 2]! << 8) | body[v + 3]!);
    checkRecordSize(b, size + keyLen);
    bytes += size;
    if (i === 0 && keyLen > 0) firstKey = body.subarray(k + 2, k + 2 + keyLen);
  }
  const partition = topic.partition(topic.choosePartition(batch.partition >= 0 ? batch.partition : undefined, firstKey));
  const epoch = leaderGate(b, partition, batch.acks);
  const appended = partition.appendWire(batch);
  countIn(b, topic.name, n, bytes);
  return { partition, appended, count: n, acks: batch.acks, topic: topic.name, epoch };
}

// ---- consume ----

export interface ReadRequest {
  topic: string;
  partition: Partition;
  offset: number;
  /** Cluster mode: the group whose committed offset another broker (its coordinator) holds. */
  remoteGroup?: string;
  reset?: 'earliest' | 'latest' | 'error';
  isolation: Isolation;
  maxRecords: number;
  maxBytes: number;
}

/** Parse the parameters CONSUME and STREAM share, and resolve the start offset. */
export function parseReadRequest(b: BrokerContext, p: Params): ReadRequest {
  const topic = b.topics.get(p.reqStr('topic', { maxLength: 100_000 }));
  const partition = topic.partition(p.reqInt('partition', { min: 0, max: 1_000_000 }));
  leaderGate(b, partition);
  let offset = p.reqInt('offset', { min: 0 });
  const group = p.str('group', { maxLength: 255 });
  p.str('member', { maxLength: 255 });
  p.int('generation', { min: 0, max: 2 ** 31 - 1 });
  // The broker-owned committed offset is authoritative: a lower requested offset starts there instead.
  let remoteGroup: string | undefined;
  if (group !== undefined) {
    if (b.cluster && !b.coordinator.coordinates(group)) {
      remoteGroup = group;
    } else {
      const committed = b.coordinator.committedOffset(group, topic.name, partition.id);
      if (committed !== undefined && committed > offset) offset = committed;
    }
  }
  const isolation = p.oneOf('isolation', ['read_committed', 'read_uncommitted'] as const) ?? 'read_committed';
  const maxRecords = p.int('batch', { min: 1, max: MAX_CONSUME_RECORDS }) ?? DEFAULT_CONSUME_RECORDS;
  const maxBytes = Math.min(p.int('max_bytes', { min: 1 }) ?? DEFAULT_CONSUME_BYTES, b.config.maxFrameBytes - 1024 * 1024);
  const reset = p.oneOf('autoOffsetReset', ['earliest', 'latest', 'error'] as const) ?? 'error';
  if (offset < partition.earliest || offset > partition.logEndOffset) {
    if (reset === 'earliest') offset = partition.earliest;
    else if (reset === 'latest') offset = partition.lastStableOffset;
    else partition.checkOffset(offset);
  }
  if (remoteGroup !== undefined) return { topic: topic.name, partition, offset, isolation, maxRecords, maxBytes, remoteGroup, reset };
  return { topic: topic.name, partition, offset, isolation, maxRecords, maxBytes };
}

/**
 * Cluster mode, CONSUME/STREAM with a group this broker does not coordinate: the start is still
 * max(requested, committed), with the committed offset asked of the group's coordinator once per
 * connection (consumer session), not per request.
 */
export async function resolveRemoteStart(b: BrokerContext, c: ConnectionContext, req: ReadRequest): Promise<void> {
  if (req.remoteGroup === undefined || !b.cluster) return;
  const key = `${req.remoteGroup}\u0000${req.topic}\u0000${req.partition.id}`;
  c.remoteCommitted ??= new Map();
  let committed: number | undefined;
  if (c.remoteCommitted.has(key)) committed = c.remoteCommitted.get(key);
  else {
    committed = await b.cluster.fetchCommitted(req.remoteGroup, b.coordinator.partitionFor(req.remoteGroup), req.topic, req.partition.id);
    c.remoteCommitted.set(key, committed);
  }
  if (committed !== undefined && committed > req.offset) {
    req.offset = committed;
    if (req.offset > req.partition.logEndOffset) {
      if (req.reset === 'earliest') req.offset = req.partition.earliest;
      else if (req.reset === 'latest') req.offset = req.partition.lastStableOffset;
      else req.partition.checkOffset(req.offset);
    }
  }
}

export async function readBatch(b: BrokerContext, c: ConnectionContext, req: ReadRequest, offset: number): Promise<{ frame: Buffer; nextOffset: number; count: number }> {
  const ext = c.features.has('record_extensions_v1');
  const opts = { maxRecords: req.maxRecords, maxBytes: req.maxBytes, isolation: req.isolation };
  // Fast path: the tail cache writes the reply batch directly (the same bytes as below).
  const wire = req.partition.readWire(offset, opts, { topic: req.topic, extensions: ext });
  if (wire) {
    if (wire.count > 0) {
      b.metrics.recordsOut.inc({ topic: req.topic }, wire.count);
      b.metrics.bytesOut.inc({ topic: req.topic }, wire.valueBytes);
    }
    return { frame: wire.frame, nextOffset: wire.nextOffset, count: wire.count };
  }
  const res = await req.partition.read(offset, opts);
  const trailer = ext ? { nextOffset: res.nextOffset, highWatermark: req.partition.highWatermark, logStartOffset: req.partition.earliest } : undefined;
  const frame = encodeBatch(logRecordsToBatch(req.topic, req.partition.id, res.records, trailer), { extensions: ext });
  if (res.records.length > 0) {
    let bytes = 0;
    for (const r of res.records) bytes += r.value.length;
    b.metrics.recordsOut.inc({ topic: req.topic }, res.records.length);
    b.metrics.bytesOut.inc({ topic: req.topic }, bytes);
  }
  return { frame, nextOffset: res.nextOffset, count: res.records.length };
}

async function consume(b: BrokerContext, c: ConnectionContext, p: Params): Promise<Reply> {
  const req = parseReadRequest(b, p);
  await resolveRemoteStart(b, c, req);
  const waitMs = Math.min(p.int('wait_ms', { min: 0 }) ?? 0, b.config.maxWaitMs);
  let out = await readBatch(b, c, req, req.offset);
  if (out.count === 0 && waitMs > 0) {
    const deadline = Date.now() + waitMs;
    let offset = out.nextOffset;
    // Loop: data past the HWM may be filtered (control records), so keep waiting until the deadline.
    while (out.count === 0 && !req.partition.isClosed) {
      const left = deadline - Date.now();
      if (left <= 0) break;
      await req.partition.waitForData(offset, left, undefined, req.isolation);
      out = await readBatch(b, c, req, offset);
      offset = out.nextOffset;
    }
  }
  return out.frame;
}

function help(): Reply {
  return formatOk({ commands: [...Object.keys(COMMANDS), 'STREAM', 'STREAM_CONTROL'].sort().join(',') });
}

export const COMMANDS: Record<string, CommandSpec> = {
  PROTOCOL_INFO: { handler: protocolInfo },
  NEGOTIATE: { handler: negotiate },
  AUTH: { handler: auth },
  HELP: { handler: help },
  CREATE: { handler: create },
  DELETE: { handler: del },
  ADD_PARTITIONS: { handler: addPartitions },
  LIST: { handler: list },
  DESCRIBE: { handler: describe },
  METADATA: { handler: metadata },
  LIST_OFFSETS: { handler: listOffsets },
  CLUSTER_STATUS: { handler: clusterStatus },
  PUBLISH: { handler: publish, pipelined: true },
  // Not pipelined: reads see earlier appends of the connection, and one reply is built at a time.
  CONSUME: { handler: consume },
  ...GROUP_COMMANDS,
  ...TXN_COMMANDS,
  ...REPLICA_COMMANDS,
};

export function lookupCommand(line: ParsedLine): { name: string; spec: CommandSpec } {
  const name = line.head.toUpperCase();
  const spec = Object.hasOwn(COMMANDS, name) ? COMMANDS[name] : undefined;
  if (!spec) throw new TributaryError('unknown_command', { command: line.head.length > 64 ? `${line.head.slice(0, 64)}...` : line.head });
  return { name, spec };
}

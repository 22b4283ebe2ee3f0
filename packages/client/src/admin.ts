import { type FieldValue, parseLine } from 'tributary-protocol/command.js';
import { TributaryError } from 'tributary-protocol/errors.js';
import { type Cluster, clientCluster, type ConnectionEvents } from './cluster.js';
import {
  ALTER_TOPIC_OPTION_NAMES,
  type AdminOptions,
  type AlterTopicOptions,
  type AlterTopicResult,
  type CallOptions,
  LIST_OFFSETS_OPTION_NAMES,
  LIST_TOPICS_OPTION_NAMES,
  type ListOffsetsOptions,
  type ListTopicsOptions,
  validateAdminOptions,
  DEFAULT_ADMIN_REQUEST_TIMEOUT_MS,
} from './admin-options.js';
import { type Send, withDeadline } from './call-deadline.js';
import { TypedEmitter } from './events.js';
import { type RetryOptions, retry } from './retry.js';
import { RecordAttr } from 'tributary-protocol/record.js';

export type { AdminOptions, AlterTopicOptions, AlterTopicResult, CallOptions, ListOffsetsOptions, ListTopicsOptions } from './admin-options.js';
import { callOptions, type Complete, refuseUnknownOptions } from './option-names.js';
import type { ReplayConnection, ReplayDeadLettersOptions, ReplayDeadLettersResult } from './dead-letter-replay.js';

const CREATE_TOPIC_OPTION_NAMES = ['topic', 'partitions', 'retentionHours', 'retentionBytes', 'replicationFactor', 'partitioner'] as const;
const createTopicComplete: Complete<CreateTopicOptions, typeof CREATE_TOPIC_OPTION_NAMES> = true;
void createTopicComplete;
const READ_RECORDS_OPTION_NAMES = ['topic', 'partition', 'offset', 'maxRecords', 'maxBytes', 'isolation', 'waitMs'] as const;
const readRecordsComplete: Complete<ReadRecordsOptions, typeof READ_RECORDS_OPTION_NAMES> = true;
void readRecordsComplete;
const RESET_OFFSETS_OPTION_NAMES = ['group', 'topic', 'partition', 'to', 'dryRun'] as const;
const resetOffsetsComplete: Complete<ResetOffsetsOptions, typeof RESET_OFFSETS_OPTION_NAMES> = true;
void resetOffsetsComplete;

export interface CreateTopicOptions {
  topic: string;
  /** Default: the broker's `--default-partitions` (4). */
  partitions?: number;
  /** -1: unlimited. Default: the broker's setting. */
  retentionHours?: number;
  /** Per partition; -1: unlimited. Default: the broker's setting. */
  retentionBytes?: number;
  replicationFactor?: number;
  partitioner?: 'hash_key' | 'round_robin';
}

export interface TopicConfig {
  topic: string;
  partitions: number;
  replicationFactor: number;
  idempotent: boolean;
  partitioner: string;
  retentionHours: number;
  retentionBytes: number;
  cleanupPolicy: string;
  /** Compacted topics: how long a tombstone stays, in ms (absent from a broker of an older version). */
  deleteRetentionMs?: number;
}

export interface CreateTopicResult extends TopicConfig {
  /** false: an identical topic already existed (CREATE is idempotent for the same definition). */
  created: boolean;
}

/** DESCRIBE's JSON, field names as on the wire. */
export interface TopicDescription {
  topic: string;
  topic_id: string;
  replication_factor: number;
  idempotent: boolean;
  partitioner: string;
  retention_hours: number;
  retention_bytes: number;
  cleanup_policy: string;
  /** Compacted topics: how long a tombstone stays, in ms (absent from a broker of an older version). */
  delete_retention_ms?: number;
  partitions: Array<{
    id: number;
    leader: string;
    leader_id: number | string;
    leader_epoch: number;
    replicas: Array<number | string>;
    isr: Array<number | string>;
    /** The answering broker's own copy (in a cluster it may trail, or hold nothing): listOffsets asks the leaders. */
    earliest: number;
    leo: number;
    hwm: number;
    lso: number;
    /** The answering broker's replica on disk (absent from older brokers). */
    size_bytes?: number;
  }>;
}

/** CLUSTER_STATUS's JSON, field names as on the wire (docs/protocol.md, "Cluster mode"). */
export interface ClusterStatus {
  mode: 'standalone' | 'cluster';
  controller: number | null;
  broker_id?: number;
  brokers: Array<{ id: number; address?: string; host?: string; port?: number; alive?: boolean; started_at?: number }>;
  partitions: Array<{ topic: string; partition: number; leader: number; leader_epoch: number; replicas?: number[]; isr: number[] }>;
  under_replicated: number;
  leaderless: number;
}

export interface PartitionOffsets {
  partition: number;
  /** First retained offset. */
  earliest: number;
  /** Next offset readable under read_committed (the last stable offset). */
  latest: number;
  /** Log end offset. */
  leo: number;
  /** High-water mark. */
  hwm: number;
  /** With `listOffsets(..., { timestamp })`: the first offset stamped at or after it (the log end when none is). */
  at?: number;
}

export interface ReadRecordsOptions {
  topic: string;
  partition: number;
  /** The first offset to read. */
  offset: number;
  /** At most this many records (default 100, at most 10000). */
  maxRecords?: number;
  /** About this many bytes at most (at least one record is returned when one is readable); default 1 MiB. */
  maxBytes?: number;
  /** Default read_committed: open and aborted transactions are not shown. */
  isolation?: 'read_committed' | 'read_uncommitted';
  /** Wait up to this long for a record when none is readable yet (default 0). */
  waitMs?: number;
}

/** One record as `readRecords` returns it (transaction markers are left out). */
export interface ReadRecord {
  offset: number;
  timestamp: number;
  key: Buffer | null;
  value: Buffer;
  headers: Array<{ key: string; value: Buffer }>;
  /** Written inside a transaction. */
  transactional: boolean;
}

export interface ReadRecordsResult {
  records: ReadRecord[];
  /** Where the next read should start (past markers and filtered records). */
  nextOffset: number;
  highWatermark: number;
  logStartOffset: number;
}

/** GROUP_STATUS's JSON, field names as on the wire (docs/protocol.md, "Consumer groups"). */
export interface GroupDescription {
  /** `kafka` for a group of Kafka clients (docs/kafka.md): `topic` lists its topics, `protocol` is its protocol type. */
  kind?: 'kafka';
  group: string;
  topic: string;
  state: 'Empty' | 'PreparingRebalance' | 'CompletingRebalance' | 'Stable' | 'Dead' | string;
  generation: number;
  leader: string | null;
  assignor: string;
  protocol: string;
  coordinator_partition?: number;
  members: Array<{
    member_id: string;
    client_id: string;
    instance: string | null;
    host: string;
    generation: number;
    last_heartbeat: string;
    last_heartbeat_ms_ago: number;
    session_timeout_ms: number;
    assignments: number[];
    target: number[];
    pending: number[];
    needs_rejoin: boolean;
    /** Kafka groups: the member's partitions as `topic:partition`. */
    assigned?: string[];
    /** Kafka groups: the member's assignment as sent (base64) when it is not shown as `assigned`. */
    assignment_bytes?: string;
    /** Kafka groups: the size of an assignment shown neither way (past the status's 8 MiB budget). */
    assignment_size?: number;
  }>;
  offsets: Array<{ topic?: string; partition: number; committed: number | null; log_end: number | null; lag: number | null; owner: string | null }>;
  total_lag: number;
  history: Array<{ generation: number; reasons: Array<{ cause: string; member: string; missedByMs?: number }>; at: number; rebalanceMs?: number; moved?: number[] }>;
}

export type ResetTarget = 'earliest' | 'latest' | { offset: number } | { timestamp: number | Date };

export interface ResetOffsetsOptions {
  group: string;
  topic: string;
  /** Default: every partition of the topic. */
  partition?: number;
  to: ResetTarget;
  /** Compute the new offsets and change nothing (a preview). */
  dryRun?: boolean;
}

function invalid(param: string, reason: string): TributaryError {
  return new TributaryError('invalid_parameter', { param, reason });
}

function requireString(param: string, v: unknown): string {
  if (typeof v !== 'string' || v.length === 0) throw invalid(param, 'must be a non-empty string');
  return v;
}

function optionalInt(param: string, v: unknown, min: number): number | undefined {
  if (v === undefined) return undefined;
  if (typeof v !== 'number' || !Number.isSafeInteger(v) || v < min) throw invalid(param, `must be an integer >= ${min}`);
  return v;
}

function requireInt(param: string, v: unknown, min: number): number {
  if (v === undefined) throw invalid(param, 'required');
  return optionalInt(param, v, min)!;
}

function num(v: string | undefined): number {
  return v === undefined ? Number.NaN : Number(v);
}

/** `offsets=P0:earliest=0:latest=5:leo=5:hwm=5,P1:...` */
export function parseOffsetsList(csv: string): PartitionOffsets[] {
  const out: PartitionOffsets[] = [];
  for (const entry of csv.split(',')) {
    if (entry === '') continue;
    const [head, ...pairs] = entry.split(':');
    const vals: Record<string, number> = {};
    for (const pair of pairs) {
      const i = pair.indexOf('=');
      if (i > 0) vals[pair.slice(0, i)] = Number(pair.slice(i + 1));
    }
    const partition = Number(head?.replace(/^P/, ''));
    if (!Number.isSafeInteger(partition)) throw new TributaryError('internal_error', { reason: `unexpected LIST_OFFSETS entry ${entry.slice(0, 80)}` });
    const o: PartitionOffsets = { partition, earliest: vals.earliest ?? Number.NaN, latest: vals.latest ?? Number.NaN, leo: vals.leo ?? Number.NaN, hwm: vals.hwm ?? Number.NaN };
    if (vals.at !== undefined) o.at = vals.at;
    out.push(o);
  }
  return out;
}

/** `P0:12,P3:40` */
function parsePartitionOffsets(csv: string): Array<{ partition: number; offset: number }> {
  return csv
    .split(',')
    .filter(Boolean)
    .map((e) => {
      const m = /^P(\d+):(\d+)$/.exec(e);
      if (!m) throw new TributaryError('internal_error', { reason: `unexpected offsets entry ${e.slice(0, 80)}` });
      return { partition: Number(m[1]), offset: Number(m[2]) };
    });
}

/**
 * Topic and consumer-group administration. Topic commands go to any bootstrap broker, group commands to
 * the group's coordinator (FIND_COORDINATOR, following NOT_COORDINATOR redirects); retriable failures are
 * retried with the retry module. A broker `ERROR:` surfaces as the TributaryError the connection raises
 * (`topic_not_found`, `group_not_empty`, ...).
 */
export class Admin extends TypedEmitter<ConnectionEvents> {
  private readonly cluster: Cluster;
  private readonly retryOptions: RetryOptions | undefined;
  private readonly requestTimeoutMs: number;
  /** What replayDeadLetters() gives the consumer and producer it runs. */
  private readonly connection: ReplayConnection;
  private closed = false;
  private closePromise: Promise<void> | undefined;

  constructor(options: AdminOptions) {
    super();
    validateAdminOptions(options);
    this.cluster = clientCluster(options, (e) => this.emit(e.type, e));
    this.retryOptions = options.retry;
    this.requestTimeoutMs = options.requestTimeoutMs ?? DEFAULT_ADMIN_REQUEST_TIMEOUT_MS;
    // The replay's consumer and producer take the connection options, not the Admin's own.
    const { retry: _retry, requestTimeoutMs: _requestTimeoutMs, ...connection } = options;
    this.connection = connection;
  }

  private assertOpen(): void {
    if (this.closed) throw new TributaryError('client_closed');
  }

  /**
   * One call: bounded by requestTimeoutMs (plus `ownWaitMs`, a long poll's own wait), retries and
   * dials included; `run` gets the call's signal and puts its requests on the wire with `send`.
   */
  private call<T>(what: string, signal: AbortSignal | undefined, run: (signal: AbortSignal, send: Send) => Promise<T>, ownWaitMs = 0): Promise<T> {
    this.assertOpen();
    return withDeadline(this.requestTimeoutMs + ownWaitMs, `admin ${what}`, signal, run);
  }

  /** A command to any broker, within a call. */
  private anyIn(signal: AbortSignal, send: Send, name: string, fields: Record<string, FieldValue | undefined> = {}): Promise<string> {
    return this.cluster.anyRequest((conn) => send(conn, conn.command(name, fields)), signal);
  }

  private any(name: string, fields: Record<string, FieldValue | undefined> = {}, signal?: AbortSignal): Promise<string> {
    return this.call(name, signal, (s, send) => this.anyIn(s, send, name, fields));
  }

  private group(group: string, name: string, fields: Record<string, FieldValue | undefined>, signal?: AbortSignal): Promise<string> {
    return this.call(name, signal, (s, send) => this.cluster.coordinatorRequest({ group }, (conn) => send(conn, conn.command(name, fields)), { signal: s }));
  }

  // ---- topics ----

  async createTopic(opts: CreateTopicOptions, o?: CallOptions): Promise<CreateTopicResult> {
    const { signal } = callOptions('createTopic', o);
    const topic = requireString('topic', opts?.topic);
    refuseUnknownOptions('createTopic', opts, CREATE_TOPIC_OPTION_NAMES);
    const reply = await this.any(
      'CREATE',
      {
        topic,
        partitions: optionalInt('partitions', opts.partitions, 1),
        replication_factor: optionalInt('replicationFactor', opts.replicationFactor, 1),
        partitioner: opts.partitioner,
        retention_hours: optionalInt('retentionHours', opts.retentionHours, -1),
        retention_bytes: optionalInt('retentionBytes', opts.retentionBytes, -1),
      },
      signal,
    );
    const p = parseLine(reply).params;
    return {
      topic: p.get('topic') ?? topic,
      partitions: num(p.get('partitions')),
      replicationFactor: num(p.get('replication_factor')),
      idempotent: p.get('idempotent') === 'true',
      partitioner: p.get('partitioner') ?? '',
      retentionHours: num(p.get('retention_hours')),
      retentionBytes: num(p.get('retention_bytes')),
      cleanupPolicy: p.get('cleanup_policy') ?? '',
      ...(p.has('delete_retention_ms') ? { deleteRetentionMs: num(p.get('delete_retention_ms')) } : {}),
      created: p.get('created') !== 'false',
    };
  }

  /** Raises a topic's partition count to `partitions` (never lowers it); keys may map to other partitions from then on. */
  async addPartitions(topic: string, partitions: number, o?: CallOptions): Promise<{ topic: string; partitions: number }> {
    const { signal } = callOptions('addPartitions', o);
    const reply = await this.any('ADD_PARTITIONS', { topic: requireString('topic', topic), partitions: requireInt('partitions', partitions, 1) }, signal);
    return { topic, partitions: num(parseLine(reply).params.get('partitions')) };
  }

  /** Changes a topic's retention (ALTER_TOPIC); the settings not given stay. Resolves with the ones now in effect. */
  async alterTopic(topic: string, opts: AlterTopicOptions, o?: CallOptions): Promise<AlterTopicResult> {
    const { signal } = callOptions('alterTopic', o);
    requireString('topic', topic);
    if (typeof opts !== 'object' || opts === null) throw invalid('opts', 'must be an object');
    refuseUnknownOptions('alterTopic', opts, ALTER_TOPIC_OPTION_NAMES);
    const fields = {
      topic,
      retention_hours: optionalInt('retentionHours', opts.retentionHours, -1),
      retention_bytes: optionalInt('retentionBytes', opts.retentionBytes, -1),
      delete_retention_ms: optionalInt('deleteRetentionMs', opts.deleteRetentionMs, 0),
    };
    if (fields.retention_hours === undefined && fields.retention_bytes === undefined && fields.delete_retention_ms === undefined) {
      throw invalid('opts', 'give at least one of retentionHours, retentionBytes, deleteRetentionMs');
    }
    const p = parseLine(await this.any('ALTER_TOPIC', fields, signal)).params;
    return { topic, retentionHours: num(p.get('retention_hours')), retentionBytes: num(p.get('retention_bytes')), deleteRetentionMs: num(p.get('delete_retention_ms')) };
  }

  async deleteTopic(topic: string, o?: CallOptions): Promise<void> {
    const { signal } = callOptions('deleteTopic', o);
    await this.any('DELETE', { topic: requireString('topic', topic) }, signal);
  }

  /** Topic names, sorted; internal topics (`__` prefix) only with `includeInternal`. */
  async listTopics(o?: ListTopicsOptions): Promise<string[]> {
    const { signal, includeInternal } = callOptions('listTopics', o, LIST_TOPICS_OPTION_NAMES);
    const reply = await this.any('LIST', {}, signal);
    const names = (parseLine(reply).params.get('topics') ?? '').split(',').filter(Boolean);
    return names.filter((n) => includeInternal || !n.startsWith('__')).sort();
  }

  async describeTopic(topic: string, o?: CallOptions): Promise<TopicDescription> {
    const { signal } = callOptions('describeTopic', o);
    const reply = await this.any('DESCRIBE', { topic: requireString('topic', topic) }, signal);
    const { status: _status, ...rest } = JSON.parse(reply) as TopicDescription & { status?: string };
    return rest;
  }

  /** Offsets of every partition (or one); with `timestamp` (ms), also the first offset stamped at or after it. */
  async listOffsets(topic: string, partition?: number, o?: ListOffsetsOptions): Promise<PartitionOffsets[]> {
    const { signal, timestamp } = callOptions('listOffsets', o, LIST_OFFSETS_OPTION_NAMES);
    const fields = { topic: requireString('topic', topic), partition: optionalInt('partition', partition, 0), timestamp: optionalInt('timestamp', timestamp, 0) };
    const reply = await this.any('LIST_OFFSETS', fields, signal);
    return parseOffsetsList(parseLine(reply).params.get('offsets') ?? '');
  }

  /**
   * Reads records of one partition from its leader, without a group (a browser, an export, a tool):
   * CONSUME, following NOT_LEADER and retrying what is retriable. Transaction markers are left out;
   * `nextOffset` says where to continue.
   */
  async readRecords(opts: ReadRecordsOptions, o?: CallOptions): Promise<ReadRecordsResult> {
    const { signal } = callOptions('readRecords', o);
    const topic = requireString('topic', opts?.topic);
    refuseUnknownOptions('readRecords', opts, READ_RECORDS_OPTION_NAMES);
    const partition = requireInt('partition', opts.partition, 0);
    const offset = requireInt('offset', opts.offset, 0);
    const maxRecords = optionalInt('maxRecords', opts.maxRecords, 1) ?? 100;
    if (maxRecords > 10_000) throw invalid('maxRecords', 'at most 10000');
    const maxBytes = optionalInt('maxBytes', opts.maxBytes, 1);
    const waitMs = optionalInt('waitMs', opts.waitMs, 0);
    if (opts.isolation !== undefined && opts.isolation !== 'read_committed' && opts.isolation !== 'read_uncommitted') throw invalid('isolation', 'expected read_committed or read_uncommitted');
    const fields = { topic, partition, offset, batch: maxRecords, max_bytes: maxBytes, isolation: opts.isolation, wait_ms: waitMs || undefined };
    const read = (s: AbortSignal, send: Send) =>
      retry(
        async () => {
          const addr = await this.cluster.leaderFor(topic, partition, s);
          try {
            const conn = await this.cluster.connection(addr, s);
            return await send(conn, conn.consume(fields));
          } catch (err) {
            this.cluster.onLeaderError(topic, partition, err);
            throw err;
          }
        },
        { ...this.retryOptions, signal: s },
      );
    const batch = await this.call('CONSUME', signal, read, waitMs ?? 0);
    const records = batch.records
      .filter((r) => (r.attributes & RecordAttr.CONTROL) === 0)
      .map((r) => ({ offset: r.offset, timestamp: r.timestamp, key: r.key, value: r.value, headers: r.headers, transactional: (r.attributes & RecordAttr.TRANSACTIONAL) !== 0 }));
    const last = batch.records.at(-1);
    return {
      records,
      nextOffset: batch.trailer?.nextOffset ?? (last ? last.offset + 1 : offset),
      highWatermark: batch.trailer?.highWatermark ?? Number.NaN,
      logStartOffset: batch.trailer?.logStartOffset ?? Number.NaN,
    };
  }

  /** CLUSTER_STATUS's JSON (needs `admin` when authentication is on): brokers, controller, partition states. */
  async clusterStatus(o?: CallOptions): Promise<ClusterStatus> {
    const { signal } = callOptions('clusterStatus', o);
    const { status: _status, ...rest } = JSON.parse(await this.any('CLUSTER_STATUS', {}, signal)) as ClusterStatus & { status?: string };
    return rest;
  }

  // ---- consumer groups ----

  /**
   * Group names (live groups and groups with committed offsets), sorted. A broker lists the groups it
   * coordinates, so in a cluster every live broker is asked; CLUSTER_STATUS names them, which needs `admin`
   * when authentication is on: without it, only the answering broker's groups are listed.
   */
  async listGroups(o?: CallOptions): Promise<string[]> {
    const { signal } = callOptions('listGroups', o);
    const names = new Set<string>();
    const add = (reply: string) => {
      for (const g of (parseLine(reply).params.get('groups') ?? '').split(',')) if (g) names.add(g);
    };
    await this.call('LIST_GROUPS', signal, async (s, send) => {
      const brokers = await this.liveBrokers(s, send);
      if (brokers.length <= 1) add(await this.anyIn(s, send, 'LIST_GROUPS'));
      else {
        const ask = (address: string) =>
          retry(async () => {
            const conn = await this.cluster.connection(address, s);
            return send(conn, conn.command('LIST_GROUPS'));
          }, { ...this.retryOptions, signal: s });
        for (const reply of await Promise.all(brokers.map(ask))) add(reply);
      }
    });
    return [...names].sort();
  }

  /** The addresses of a cluster's live brokers; none for a standalone broker or a principal without `admin`. */
  private async liveBrokers(signal: AbortSignal, send: Send): Promise<string[]> {
    let s: ClusterStatus;
    try {
      s = JSON.parse(await this.anyIn(signal, send, 'CLUSTER_STATUS')) as ClusterStatus;
    } catch (err) {
      if (err instanceof TributaryError && err.errorClass === 'authorization') return [];
      throw err;
    }
    if (s.mode !== 'cluster') return [];
    return s.brokers.filter((b) => b.alive !== false).map((b) => b.address ?? `${b.host}:${b.port}`);
  }

  async describeGroup(group: string, o?: CallOptions): Promise<GroupDescription> {
    const { signal } = callOptions('describeGroup', o);
    const reply = await this.group(requireString('group', group), 'GROUP_STATUS', { group }, signal);
    const { status: _status, ...rest } = JSON.parse(reply) as GroupDescription & { status?: string };
    return rest;
  }

  /** The group's committed offset (the next offset to read); `committed: false` and 0 when none. */
  async fetchOffset(group: string, topic: string, partition: number, o?: CallOptions): Promise<{ offset: number; committed: boolean }> {
    const { signal } = callOptions('fetchOffset', o);
    requireString('group', group);
    const reply = await this.group(
      group,
      'FETCH_OFFSET',
      { group, topic: requireString('topic', topic), partition: requireInt('partition', partition, 0) },
      signal,
    );
    const p = parseLine(reply).params;
    return { offset: num(p.get('offset')), committed: p.get('committed') === 'true' };
  }

  /** Deletes a group without members and its committed offsets (`group_not_empty` while it has members). */
  async deleteGroup(group: string, o?: CallOptions): Promise<void> {
    const { signal } = callOptions('deleteGroup', o);
    await this.group(requireString('group', group), 'DELETE_GROUP', { group }, signal);
  }

  /**
   * Moves a group's committed offsets; may move them backwards. On a group with members the coordinator
   * fences them for the reset partitions and starts a new generation: they rejoin and resume at the new
   * offsets (docs/sdk.md, "Offsets"). Returns the new offset of every partition it set (or, with
   * `dryRun`, would set).
   */
  async resetOffsets(opts: ResetOffsetsOptions, o?: CallOptions): Promise<Array<{ partition: number; offset: number }>> {
    const { signal } = callOptions('resetOffsets', o);
    const group = requireString('group', opts?.group);
    refuseUnknownOptions('resetOffsets', opts, RESET_OFFSETS_OPTION_NAMES);
    const topic = requireString('topic', opts.topic);
    const partition = optionalInt('partition', opts.partition, 0);
    if (opts.dryRun !== undefined && typeof opts.dryRun !== 'boolean') throw invalid('dryRun', 'must be a boolean');
    const fields: Record<string, FieldValue | undefined> = { group, topic, partition, dry_run: opts.dryRun ? true : undefined };
    const to = opts.to;
    if (to === 'earliest' || to === 'latest') fields.to = to;
    else if (to && typeof to === 'object' && 'offset' in to) {
      fields.to = 'offset';
      fields.offset = requireInt('to.offset', to.offset, 0);
    } else if (to && typeof to === 'object' && 'timestamp' in to) {
      const ts = to.timestamp instanceof Date ? to.timestamp.getTime() : to.timestamp;
      fields.to = 'timestamp';
      fields.timestamp = requireInt('to.timestamp', ts, 0);
    } else {
      throw invalid('to', "expected 'earliest', 'latest', { offset } or { timestamp }");
    }
    const reply = await this.group(group, 'RESET_OFFSETS', fields, signal);
    return parsePartitionOffsets(parseLine(reply).params.get('offsets') ?? '');
  }

  // ---- dead letters ----

  /**
   * Moves the messages a dead-letter topic of run({ retryTopics }) holds back to their source topics
   * (original key, value and headers, without the retry ones), exactly once even if the replayer
   * crashes: each batch and the dead-letter offsets commit in one transaction (docs/sdk.md, "Retry and
   * dead-letter topics"). Replays what the topic held at the call and resolves with the counts.
   */
  async replayDeadLetters(opts: ReplayDeadLettersOptions, o?: CallOptions): Promise<ReplayDeadLettersResult> {
    const { signal } = callOptions('replayDeadLetters', o);
    this.assertOpen();
    // Loaded when used: the replay runs a Consumer, which the Admin does not otherwise need.
    const { replayDeadLetters } = await import('./dead-letter-replay.js');
    return replayDeadLetters(this, this.connection, opts, signal);
  }

  // ---- lifecycle ----

  /** Closes the connections. Idempotent; later calls reject with `client_closed`. */
  close(): Promise<void> {
    this.closed = true;
    this.closePromise ??= this.cluster.close();
    return this.closePromise;
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }
}

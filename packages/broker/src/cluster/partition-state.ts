import { EventEmitter } from 'node:events';
import { TributaryError } from 'tributary-protocol/errors.js';
import type { Etcd3, IKeyValue } from 'etcd3';
import { type EtcdSource, deleteAsRead, normalizePrefix, resolveClient, withMetadataErrors } from './etcd-client.js';
import { countByTopic, listPartitionRecords, splitKey } from './partition-keys.js';
import type { ReassignmentProgress } from './reassignment.js';
import { type Versioned, WatchedPrefix } from './watched-prefix.js';

/** What every broker must agree on about one partition. */
export interface PartitionState {
  /** Broker ids holding a replica, preferred leader first. */
  replicas: number[];
  /** Broker id of the leader, -1 while leaderless. */
  leader: number;
  /** Bumped on every leader change; replicas and clients reject requests from an older epoch. */
  leaderEpoch: number;
  /** In-sync replicas (leader included). */
  isr: number[];
  /** Committed high-water mark as last published by the leader. */
  hwm: number;
  /** A reassignment in progress (reassignment.ts): written by the controller only. */
  reassign?: ReassignmentProgress;
  /**
   * The topic id (TopicDefinition.topicId) the state belongs to: a state left by a deleted topic of the same
   * name is not the re-created topic's (states written before topic ids were recorded have none).
   */
  topicId?: string;
}

export interface PartitionStateEntry extends Versioned<PartitionState> {
  topic: string;
  partition: number;
}

/** The version a compareAndSet must replace: exact (modRevision) or any with this leader epoch. */
export type PartitionExpectation = { modRevision: number } | { leaderEpoch: number };

export type CompareAndSetResult = { ok: true; modRevision: number } | { ok: false; current: PartitionStateEntry | undefined };

export interface PartitionStateStoreOptions {
  etcd: EtcdSource;
  /** Root of every Tributary key, default '/tributary/'. Records live under `<prefix>partitions/<topic>/<n>`. */
  prefix?: string;
}

/** etcd refuses transactions with more operations than --max-txn-ops (default 128). */
const TXN_CHUNK = 100;
/** Bounded retries while others change fields of the record but not the expected leader epoch. */
const CAS_ATTEMPTS = 5;

function isIdList(v: unknown): v is number[] {
  return Array.isArray(v) && v.every((x) => Number.isInteger(x));
}

function parseState(text: string): PartitionState | undefined {
  try {
    const s = JSON.parse(text) as PartitionState;
    const ok =
      s !== null &&
      typeof s === 'object' &&
      isIdList(s.replicas) &&
      isIdList(s.isr) &&
      Number.isInteger(s.leader) &&
      Number.isSafeInteger(s.leaderEpoch) &&
      Number.isSafeInteger(s.hwm) &&
      (s.topicId === undefined || typeof s.topicId === 'string') &&
      (s.reassign === undefined ||
        (s.reassign !== null &&
          isIdList(s.reassign.target) &&
          isIdList(s.reassign.adding) &&
          isIdList(s.reassign.removing) &&
          Number.isSafeInteger(s.reassign.throttle)));
    return ok ? s : undefined;
  } catch {
    return undefined;
  }
}

/** Invariants no writer may break, whatever it compared against. */
function checkTransition(from: PartitionState, to: PartitionState): void {
  if (to.leaderEpoch < from.leaderEpoch) throw new Error(`leader epoch may not go back (${from.leaderEpoch} -> ${to.leaderEpoch})`);
  if (to.leader !== from.leader && to.leaderEpoch === from.leaderEpoch) {
    throw new Error(`a leader change (${from.leader} -> ${to.leader}) must bump the leader epoch (${from.leaderEpoch})`);
  }
}

/**
 * Per-partition state records in etcd, cached in memory and kept current by a watch. Every write is a
 * compare-and-set on the record's etcd revision, so of two brokers that both try to move a partition to
 * the next leader epoch, exactly one succeeds and the other gets the winner's record back.
 * Events: 'changed' (PartitionStateEntry) and 'deleted' (PartitionStateEntry, the last known state).
 */
export class PartitionStateStore {
  readonly events = new EventEmitter();
  readonly prefix: string;
  private readonly client: Etcd3;
  private readonly ownsClient: boolean;
  private readonly records: WatchedPrefix<PartitionState>;

  constructor(opts: PartitionStateStoreOptions) {
    ({ client: this.client, owned: this.ownsClient } = resolveClient(opts.etcd));
    this.prefix = normalizePrefix(opts.prefix);
    this.records = new WatchedPrefix(this.client, `${this.prefix}partitions/`, (text) => parseState(text));
    this.records.events.on('put', (key: string, entry: Versioned<PartitionState>) => this.events.emit('changed', { ...splitKey(key), ...entry }));
    this.records.events.on('delete', (key: string, previous: Versioned<PartitionState>) => this.events.emit('deleted', { ...splitKey(key), ...previous }));
  }

  async open(): Promise<void> {
    await withMetadataErrors('open', () => this.records.start());
  }

  /** The last known record (from the watch); may lag etcd by a moment. */
  get(topic: string, partition: number): PartitionStateEntry | undefined {
    const entry = this.records.get(this.relative(topic, partition));
    return entry && { topic, partition, ...entry };
  }

  /** Every known record, or one topic's, ordered by topic (code point) and partition. */
  list(topic?: string): PartitionStateEntry[] {
    return listPartitionRecords(this.records, topic);
  }

  /** How many partitions of each topic have a state: one pass over the cache, for the controller's every tick. */
  countsByTopic(): Map<string, number> {
    return countByTopic(this.records);
  }

  /** Reads the record from etcd itself (not the cache). */
  async read(topic: string, partition: number): Promise<PartitionStateEntry | undefined> {
    const key = this.relative(topic, partition);
    const res = await withMetadataErrors('read_partition_state', () => this.client.get(this.absolute(key)).exec());
    const kv = res.kvs[0];
    if (!kv) {
      this.records.applyDelete(key, Number(res.header.revision));
      return undefined;
    }
    return this.remember(topic, partition, kv);
  }

  /**
   * Creates records for partitions `first..first+states.length-1` of a topic, only if none of them exists.
   * Atomic up to 100 partitions; larger sets are created in chunks, each all-or-nothing.
   * Resolves false (creating nothing more) as soon as one chunk finds an existing record.
   */
  async create(topic: string, states: PartitionState[], first = 0): Promise<boolean> {
    for (let start = 0; start < states.length; start += TXN_CHUNK) {
      const chunk = states.slice(start, start + TXN_CHUNK);
      const keys = chunk.map((_, i) => this.absolute(this.relative(topic, first + start + i)));
      const res = await withMetadataErrors('create_partition_state', () => {
        let txn = this.client.if(keys[0], 'Create', '==', 0);
        for (const k of keys.slice(1)) txn = txn.and(k, 'Create', '==', 0);
        return txn.then(...keys.map((k, i) => this.client.put(k).value(JSON.stringify(chunk[i])))).commit();
      });
      if (!res.succeeded) return false;
      const revision = Number(res.header.revision);
      for (const [i, s] of chunk.entries()) this.records.applyPut(this.relative(topic, first + start + i), s, revision, revision);
    }
    return true;
  }

  /**
   * Replaces the record if it is still the expected version: the one at `modRevision`, or (with
   * `leaderEpoch`) whichever version still has that leader epoch. Resolves `{ ok: false, current }` when
   * someone else changed it first (or it does not exist). Throws if `next` would move the leader epoch
   * back or change the leader without bumping it, and metadata_unavailable when etcd is unreachable.
   */
  async compareAndSet(topic: string, partition: number, expected: PartitionExpectation, next: PartitionState): Promise<CompareAndSetResult> {
    if (!parseState(JSON.stringify(next))) throw new Error(`invalid partition state ${JSON.stringify(next)}`);
    const key = this.relative(topic, partition);
    const matches = (e: PartitionStateEntry) =>
      'modRevision' in expected ? e.modRevision === expected.modRevision : e.value.leaderEpoch === expected.leaderEpoch;
    let base = this.get(topic, partition);
    let fresh = false;
    for (let attempt = 0; attempt < CAS_ATTEMPTS; attempt++) {
      if (!base || !matches(base)) {
        // The cache can lag the watch: only etcd's own answer may fail the compare.
        if (fresh) return { ok: false, current: base };
        base = await this.read(topic, partition);
        fresh = true;
        continue;
      }
      checkTransition(base.value, next);
      const expectedRevision = base.modRevision;
      const res = await withMetadataErrors('update_partition_state', () =>
        this.client
          .if(this.absolute(key), 'Mod', '==', expectedRevision)
          .then(this.client.put(this.absolute(key)).value(JSON.stringify(next)))
          .else(this.client.get(this.absolute(key)))
          .commit(),
      );
      if (res.succeeded) {
        const revision = Number(res.header.revision);
        this.records.applyPut(key, next, revision, base.createRevision);
        return { ok: true, modRevision: revision };
      }
      const kv = res.responses[0]?.response_range.kvs[0];
      base = kv ? this.remember(topic, partition, kv) : undefined;
      fresh = true;
    }
    return { ok: false, current: base };
  }

  /**
   * A compare-and-set on the exact version `modRevision` that deletes the key `also` (absolute) in the
   * same etcd transaction, if that key is still at `also.modRevision`: both or neither. Resolves the
   * revision written, or undefined when either changed (the caller decides again from what is there now).
   */
  async compareAndSetDeleting(topic: string, partition: number, modRevision: number, next: PartitionState, also: { key: string; modRevision: number }): Promise<number | undefined> {
    if (!parseState(JSON.stringify(next))) throw new Error(`invalid partition state ${JSON.stringify(next)}`);
    const key = this.relative(topic, partition);
    let base = this.get(topic, partition);
    // The cache can lag the watch: only etcd's own answer may fail the compare.
    if (!base || base.modRevision !== modRevision) base = await this.read(topic, partition);
    if (!base || base.modRevision !== modRevision) return undefined;
    checkTransition(base.value, next);
    const res = await withMetadataErrors('update_partition_state', () =>
      this.client
        .if(this.absolute(key), 'Mod', '==', modRevision)
        .and(also.key, 'Mod', '==', also.modRevision)
        .then(this.client.put(this.absolute(key)).value(JSON.stringify(next)), { request_delete_range: { key: Buffer.from(also.key) } })
        .commit(),
    );
    if (!res.succeeded) return undefined;
    const revision = Number(res.header.revision);
    this.records.applyPut(key, next, revision, base.createRevision);
    return revision;
  }

  /**
   * Deletes the partition records of the topic id `topicId` (after that topic was deleted), and those with
   * no topic id (written before ids). Read from etcd and deleted only at the revision read, so a topic
   * re-created under the name meanwhile, by another broker, keeps its records: a delete of the name's
   * whole prefix wiped them until the controller wrote them again. A record changed in between (a leader
   * election of the old topic) is read again.
   */
  async deleteTopic(topic: string, topicId: string): Promise<void> {
    for (let attempt = 0; attempt < CAS_ATTEMPTS; attempt++) {
      const res = await withMetadataErrors('delete_partition_state', () => this.client.getAll().prefix(this.absolute(`${topic}/`)).exec());
      const doomed = res.kvs.filter((kv) => {
        const s = parseState(kv.value.toString('utf8'));
        return s !== undefined && (s.topicId === undefined || s.topicId === topicId);
      });
      if (await deleteAsRead(this.client, 'delete_partition_state', doomed, (key, rev) => this.records.applyDelete(key.slice(this.records.prefix.length), rev))) return;
    }
    throw new TributaryError('metadata_unavailable', { operation: 'delete_partition_state', topic, reason: 'concurrent changes' });
  }

  async close(): Promise<void> {
    await this.records.close();
    if (this.ownsClient) this.client.close();
  }

  private relative(topic: string, partition: number): string {
    return `${topic}/${partition}`;
  }

  private absolute(relative: string): string {
    return `${this.records.prefix}${relative}`;
  }

  private remember(topic: string, partition: number, kv: IKeyValue): PartitionStateEntry | undefined {
    const key = this.relative(topic, partition);
    this.records.applyKv(key, kv);
    const value = parseState(kv.value.toString('utf8'));
    return value && { topic, partition, value, modRevision: Number(kv.mod_revision), createRevision: Number(kv.create_revision), lease: String(kv.lease) };
  }
}

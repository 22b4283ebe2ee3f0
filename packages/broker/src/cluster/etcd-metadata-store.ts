import { randomBytes } from 'node:crypto';
import { EventEmitter } from 'node:events';
import type { Etcd3, IKeyValue } from 'etcd3';
import { TributaryError } from 'tributary-protocol/errors.js';
import { type Clock, systemClock } from '../common/clock.js';
import { DELETED_TOPICS, TOMBSTONE_PAGE, readDeletedTopics, tombstoneValue } from './deleted-topics.js';
import { type EtcdSource, normalizePrefix, resolveClient, withMetadataErrors } from './etcd-client.js';
import {
  type DeletedTopic,
  type MetadataStore,
  type RetentionChange,
  type TopicDefinition,
  alteredDefinition,
  checkGrowth,
  checkReservation,
  sameDefinition,
} from '../partition/metadata-store.js';
import { topicDirName } from '../partition/metadata-file.js';
import type { GuardedPut } from './reassignment.js';
import { WatchedPrefix } from './watched-prefix.js';

export interface EtcdMetadataStoreOptions {
  /** A shared client (left open on close) or endpoints for a private one. */
  etcd: EtcdSource;
  /** Root of every Tributary key, default '/tributary/'. Topics live under `<prefix>topics/<name>`. */
  prefix?: string;
  /** The time a delete's tombstone records (deleted-topics.ts); default the system clock. */
  clock?: Pick<Clock, 'now'>;
  /** Tombstones read per etcd call at open (tests make it small). */
  tombstonePage?: number;
}

/** Bounded retries for a delete that keeps losing its compare to concurrent rewrites of the same topic. */
const DELETE_ATTEMPTS = 5;
/** Brokers reserve producer id blocks rarely; a compare lost this often means something is wrong. */
const RESERVE_ATTEMPTS = 20;

function parseTopic(text: string, name: string): TopicDefinition | undefined {
  try {
    const t = JSON.parse(text) as TopicDefinition;
    const ok =
      t !== null &&
      typeof t === 'object' &&
      t.name === name &&
      Number.isSafeInteger(t.partitions) &&
      typeof t.topicId === 'string' &&
      Number.isSafeInteger(t.replicationFactor);
    return ok ? t : undefined;
  } catch {
    return undefined;
  }
}

/**
 * Topic definitions in etcd, one JSON value per topic. Reads come from an in-memory copy kept current by a
 * watch (so they keep answering, with the last known state, while etcd is unreachable); every change is
 * one etcd transaction guarded by a compare, so two brokers racing to create or delete a topic cannot
 * both win. Remote changes surface as the same 'topic-created' / 'topic-deleted' events as local ones
 * (plus 'topic-updated' when a definition changes in place).
 */
export class EtcdMetadataStore implements MetadataStore {
  readonly events = new EventEmitter();
  readonly prefix: string;
  private readonly client: Etcd3;
  private readonly ownsClient: boolean;
  private readonly topics: WatchedPrefix<TopicDefinition>;
  private readonly clock: Pick<Clock, 'now'>;
  private readonly tombstonePage: number;
  /** Deleted topics as of open (their tombstones under `<prefix>deleted-topics/`). */
  private deleted: DeletedTopic[] = [];

  constructor(opts: EtcdMetadataStoreOptions) {
    ({ client: this.client, owned: this.ownsClient } = resolveClient(opts.etcd));
    this.prefix = normalizePrefix(opts.prefix);
    this.clock = opts.clock ?? systemClock;
    this.tombstonePage = opts.tombstonePage ?? TOMBSTONE_PAGE;
    this.topics = new WatchedPrefix(this.client, `${this.prefix}topics/`, parseTopic);
    this.topics.events.on('put', (_name: string, entry: { value: TopicDefinition }, previous?: { value: TopicDefinition }) => {
      if (!previous) {
        this.events.emit('topic-created', entry.value);
      } else if (previous.value.topicId !== entry.value.topicId) {
        // Deleted and re-created between two observations: the old topic's data must go.
        this.events.emit('topic-deleted', previous.value);
        this.events.emit('topic-created', entry.value);
      } else {
        this.events.emit('topic-updated', entry.value);
      }
    });
    this.topics.events.on('delete', (_name: string, previous: { value: TopicDefinition }) => this.events.emit('topic-deleted', previous.value));
  }

  async open(): Promise<void> {
    await withMetadataErrors('open', () => this.topics.start());
    // Paged: one response per page, however many topics were deleted within the retention.
    this.deleted = await readDeletedTopics(this.client, `${this.prefix}${DELETED_TOPICS}`, this.tombstonePage);
  }

  /**
   * Topics deleted, by any broker, as of open: each delete leaves a tombstone (`<prefix>deleted-topics/
   * <name>~<topicId>`, in the same transaction), so a broker that was down meanwhile removes the
   * directory at its next start. Tombstones stay in etcd for --deleted-topic-retention-ms (any broker
   * may still hold such a directory); the controller removes them after that (deleted-topics.ts).
   */
  deletedTopics(): DeletedTopic[] {
    return [...this.deleted];
  }

  /** Their directories are gone here: dropped from memory only (other brokers may still hold theirs). */
  async forgetDeletedTopics(topics: DeletedTopic[]): Promise<void> {
    const gone = new Set(topics.map(topicDirName));
    this.deleted = this.deleted.filter((d) => !gone.has(topicDirName(d)));
  }

  listTopics(): TopicDefinition[] {
    return this.topics
      .values()
      .map(([, e]) => e.value)
      .sort((a, b) => a.name.localeCompare(b.name));
  }

  getTopic(name: string): TopicDefinition | undefined {
    return this.topics.get(name)?.value;
  }

  /**
   * The key of a topic's definition and the revision it was created at, as this broker knows it: a
   * transaction comparing it fails if the topic was deleted (or deleted and re-created) meanwhile.
   */
  topicGuard(name: string): { key: string; createRevision: number } | undefined {
    const e = this.topics.get(name);
    return e && { key: this.key(name), createRevision: e.createRevision };
  }

  /** The definition as etcd has it now, read past the watched copy (which may lag behind). */
  async readTopic(name: string): Promise<TopicDefinition | undefined> {
    const text = await withMetadataErrors('read_topic', () => this.client.get(this.key(name)).string());
    return text === null ? undefined : parseTopic(text, name);
  }

  async createTopic(def: Omit<TopicDefinition, 'topicId' | 'createdAt'>): Promise<{ topic: TopicDefinition; created: boolean }> {
    const key = this.key(def.name);
    const topic: TopicDefinition = { ...def, topicId: randomBytes(8).toString('hex'), createdAt: Date.now() };
    // Create only if absent (createRevision 0); otherwise read what is there, in the same transaction.
    const res = await withMetadataErrors('create_topic', () =>
      this.client
        .if(key, 'Create', '==', 0)
        .then(this.client.put(key).value(JSON.stringify(topic)))
        .else(this.client.get(key))
        .commit(),
    );
    if (res.succeeded) {
      const revision = Number(res.header.revision);
      this.topics.applyPut(def.name, topic, revision, revision);
      return { topic, created: true };
    }
    const kv = res.responses[0]?.response_range.kvs[0];
    const existing = kv ? this.remember(def.name, kv) : undefined;
    // A timed-out create that did apply, retried, lands here too and is answered as an identical topic.
    if (existing && sameDefinition(def, existing)) return { topic: existing, created: false };
    throw new TributaryError('topic_already_exists', { topic: def.name, partitions: existing?.partitions ?? -1 });
  }

  async deleteTopic(name: string): Promise<TopicDefinition | undefined> {
    const key = this.key(name);
    // Delete exactly the version we know (modRevision; 0 = absent), never one re-created meanwhile unseen.
    let expected = this.topics.get(name)?.modRevision ?? 0;
    let topicId = this.topics.get(name)?.value.topicId;
    for (let attempt = 0; attempt < DELETE_ATTEMPTS; attempt++) {
      const ops: Parameters<ReturnType<Etcd3['if']>['then']> = [{ request_delete_range: { key: Buffer.from(key), prev_kv: true } }];
      // The tombstone of exactly the version deleted: a start removes only directories a tombstone names.
      // Its value is the time of the delete, from which the controller expires it (deleted-topics.ts).
      if (topicId !== undefined) ops.push(this.client.put(`${this.prefix}${DELETED_TOPICS}${name}~${topicId}`).value(tombstoneValue(this.clock.now())));
      const res = await withMetadataErrors('delete_topic', () =>
        this.client
          .if(key, 'Mod', '==', expected)
          .then(...ops)
          .else(this.client.get(key))
          .commit(),
      );
      const revision = Number(res.header.revision);
      if (res.succeeded) {
        const prev = res.responses[0]?.response_delete_range.prev_kvs[0];
        this.topics.applyDelete(name, revision);
        return prev ? parseTopic(prev.value.toString('utf8'), name) : undefined;
      }
      const kv = res.responses[0]?.response_range.kvs[0];
      if (!kv) {
        this.topics.applyDelete(name, revision);
        return undefined;
      }
      topicId = this.remember(name, kv)?.topicId;
      expected = Number(kv.mod_revision);
    }
    throw new TributaryError('metadata_unavailable', { operation: 'delete_topic', topic: name, reason: 'concurrent changes' });
  }

  /** Raises the partition count by compare-and-set on the definition's revision (retried on a race). */
  async addPartitions(name: string, partitions: number): Promise<TopicDefinition> {
    return this.changeDefinition(name, 'add_partitions', (cur) => {
      checkGrowth(cur, partitions);
      return { ...cur, partitions };
    });
  }

  /**
   * ALTER_TOPIC: new retention settings by compare-and-set on the definition's revision (retried on a race);
   * every broker applies them on the watch's 'topic-updated', and one that starts later reads them at open.
   */
  async alterTopic(name: string, change: RetentionChange): Promise<TopicDefinition> {
    return this.changeDefinition(name, 'alter_topic', (cur) => alteredDefinition(cur, change));
  }

  /**
   * The replication factor new partitions of the topic get, by compare-and-set on the definition
   * (ALTER_REPLICATION_FACTOR when no partition needs to move; otherwise replicationFactorPut).
   */
  async setReplicationFactor(name: string, replicationFactor: number): Promise<TopicDefinition> {
    return this.changeDefinition(name, 'alter_replication_factor', withReplicationFactor(replicationFactor));
  }

  /**
   * The definition with a new replication factor as a put guarded by the revision this broker knows, for
   * ALTER_REPLICATION_FACTOR to write in the one transaction that stores the topic's reassignment plan
   * (ReassignmentPlans.store): both or neither, whenever the broker dies or etcd becomes unreachable.
   * Undefined when the definition has that factor already.
   */
  replicationFactorPut(name: string, replicationFactor: number): GuardedPut | undefined {
    return this.definitionPut(name, withReplicationFactor(replicationFactor))?.put;
  }

  /**
   * The definition `change` makes of the current one, as a put guarded by the revision this broker knows;
   * undefined when `change` answers null (nothing to change). Every change of a definition is one of these.
   */
  private definitionPut(name: string, change: (cur: TopicDefinition) => TopicDefinition | null): { put: GuardedPut; topic: TopicDefinition } | undefined {
    const cur = this.topics.get(name);
    if (!cur) throw new TributaryError('topic_not_found', { topic: name });
    const topic = change(cur.value);
    if (topic === null) return undefined;
    const put: GuardedPut = {
      key: this.key(name),
      modRevision: cur.modRevision,
      value: JSON.stringify(topic),
      applied: (revision) => this.topics.applyPut(name, topic, revision, cur.createRevision),
      raced: (kv) => void this.remember(name, kv),
    };
    return { put, topic };
  }

  /**
   * A change of a topic's definition by compare-and-set on its revision, computed again from the current
   * definition after a race; `change` answering null: nothing to change (the current one is returned).
   */
  private async changeDefinition(name: string, operation: string, change: (cur: TopicDefinition) => TopicDefinition | null): Promise<TopicDefinition> {
    for (let attempt = 0; attempt < DELETE_ATTEMPTS; attempt++) {
      const next = this.definitionPut(name, change);
      if (next === undefined) return this.topics.get(name)!.value;
      const { put, topic } = next;
      const res = await withMetadataErrors(operation, () =>
        this.client.if(put.key, 'Mod', '==', put.modRevision).then(this.client.put(put.key).value(put.value)).else(this.client.get(put.key)).commit(),
      );
      if (res.succeeded) {
        put.applied(Number(res.header.revision));
        return topic;
      }
      const kv = res.responses[0]?.response_range.kvs[0];
      if (!kv) throw new TributaryError('topic_not_found', { topic: name });
      put.raced(kv);
    }
    throw new TributaryError('metadata_unavailable', { operation, topic: name, reason: 'concurrent changes' });
  }

  /**
   * `<prefix>producer-ids` holds the first id no broker has reserved; a reservation moves it by
   * compare-and-set on its revision (created when absent), so two brokers never get the same range.
   */
  async reserveProducerIds(count: number): Promise<number> {
    for (let attempt = 0; attempt < RESERVE_ATTEMPTS; attempt++) {
      const { kv, first } = await this.producerIdsKv('reserve_producer_ids');
      checkReservation(first, count);
      const key = `${this.prefix}producer-ids`;
      const guard = kv ? this.client.if(key, 'Mod', '==', Number(kv.mod_revision)) : this.client.if(key, 'Create', '==', 0);
      const res = await withMetadataErrors('reserve_producer_ids', () => guard.then(this.client.put(key).value(String(first + count))).commit());
      if (res.succeeded) return first;
    }
    throw new TributaryError('metadata_unavailable', { operation: 'reserve_producer_ids', reason: 'concurrent changes' });
  }

  async reservedProducerIds(): Promise<number> {
    return (await this.producerIdsKv('reserved_producer_ids')).first;
  }

  private async producerIdsKv(operation: string): Promise<{ kv: IKeyValue | undefined; first: number }> {
    const key = `${this.prefix}producer-ids`;
    const kv = await withMetadataErrors(operation, async () => (await this.client.get(key).exec()).kvs[0]);
    const first = kv ? Number(kv.value.toString('utf8')) : 0;
    if (!Number.isSafeInteger(first) || first < 0) throw new TributaryError('metadata_unavailable', { operation, reason: `bad value at ${key}` });
    return { kv, first };
  }

  /**
   * The value at `<prefix><name>`, put there as `value` if the key is absent (by a transaction guarded by its
   * absence): every broker of the cluster gets the value the first of them put, and keeps getting it.
   */
  async keptValue(name: string, value: string): Promise<string> {
    const key = `${this.prefix}${name}`;
    for (let attempt = 0; attempt < RESERVE_ATTEMPTS; attempt++) {
      const put = await withMetadataErrors('kept_value', () => this.client.if(key, 'Create', '==', 0).then(this.client.put(key).value(value)).commit());
      if (put.succeeded) return value;
      const kept = await withMetadataErrors('kept_value', () => this.client.get(key).string());
      if (kept !== null) return kept;
    }
    throw new TributaryError('metadata_unavailable', { operation: 'kept_value', reason: 'concurrent changes' });
  }

  async close(): Promise<void> {
    await this.topics.close();
    if (this.ownsClient) this.client.close();
  }

  /** The etcd key of a topic's definition (which other stores compare their records' revisions with). */
  definitionKey(name: string): string {
    return this.key(name);
  }

  private key(name: string): string {
    return `${this.prefix}topics/${name}`;
  }

  /** Folds a value read from etcd into the cache (it is at least as new as what the watch delivered). */
  private remember(name: string, kv: IKeyValue): TopicDefinition | undefined {
    this.topics.applyKv(name, kv);
    return parseTopic(kv.value.toString('utf8'), name);
  }
}

/** ALTER_REPLICATION_FACTOR's change of a definition (null: it has that factor already). */
function withReplicationFactor(replicationFactor: number): (cur: TopicDefinition) => TopicDefinition | null {
  return (cur) => (cur.replicationFactor === replicationFactor ? null : { ...cur, replicationFactor });
}

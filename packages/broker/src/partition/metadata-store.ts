import { EventEmitter } from 'node:events';
import { TributaryError } from 'tributary-protocol/errors.js';
import { randomBytes } from 'node:crypto';
import { readSmallFile, writeFileAtomic } from '../storage/atomic-file.js';
import { MAX_RETENTION_HOURS } from '../common/config.js';
import fs from 'node:fs/promises';
import path from 'node:path';
import {
  type DeletedTopic,
  isTopicDirEntry,
  LOGS_DIR,
  type MetadataFile,
  MetadataFileError,
  PRODUCER_IDS_FILE,
  parseMetadataFile,
  parseProducerIdsFile,
  producerIdsText,
  topicDirName,
} from './metadata-file.js';

export type { DeletedTopic } from './metadata-file.js';

export type CleanupPolicy = 'delete' | 'compact';
export type Partitioner = 'hash_key' | 'round_robin';

/** A topic's definition; everything the broker must agree on across restarts (and, later, brokers). */
export interface TopicDefinition {
  name: string;
  partitions: number;
  replicationFactor: number;
  idempotent: boolean;
  partitioner: Partitioner;
  /** -1 = unlimited. */
  retentionHours: number;
  /** -1 = unlimited. */
  retentionBytes: number;
  cleanupPolicy: CleanupPolicy;
  /**
   * How long a tombstone stays once it is its key's latest record, when the topic is compacted (Kafka's
   * delete.retention.ms). Absent: the broker's --delete-retention-ms (definitions written before it existed
   * have none).
   */
  deleteRetentionMs?: number;
  /** Distinguishes a re-created topic from the one deleted before it (its data dirs are not reused). */
  topicId: string;
  createdAt: number;
}

/**
 * Where topic definitions live. The standalone broker uses a local file; cluster mode implements the same
 * interface on etcd, so nothing above this interface branches on the mode.
 */
export interface MetadataStore {
  open(): Promise<void>;
  listTopics(): TopicDefinition[];
  getTopic(name: string): TopicDefinition | undefined;
  /** Resolves with the stored definition; `created` false when an identical topic already existed. */
  createTopic(def: Omit<TopicDefinition, 'topicId' | 'createdAt'>): Promise<{ topic: TopicDefinition; created: boolean }>;
  deleteTopic(name: string): Promise<TopicDefinition | undefined>;
  /**
   * Raises a topic's partition count (never lowers it: records are placed by partition). Resolves with
   * the stored definition; topic_not_found, invalid_parameter for a count not above the current one.
   */
  addPartitions(name: string, partitions: number): Promise<TopicDefinition>;
  /**
   * Changes a topic's retention settings in place (ALTER_TOPIC; the caller validated the values). Resolves
   * with the stored definition; topic_not_found.
   */
  alterTopic(name: string, change: RetentionChange): Promise<TopicDefinition>;
  /**
   * Reserves `count` producer ids for this broker: resolves with the first of [first, first + count), a
   * range no earlier call on any broker got, across restarts (ProducerIdAllocator, docs/architecture.md
   * "Producer ids").
   */
  reserveProducerIds(count: number): Promise<number>;
  /** The first producer id no broker has reserved yet: every id below it was handed to some broker. */
  reservedProducerIds(): Promise<number>;
  /**
   * Topics the store says were deleted and whose directories may still be on disk (a crash or a failed
   * removal after the delete): the start removes those. A directory of a topic neither defined nor listed
   * here is never deleted (TopicManager moves it aside), so a lost or wrong metadata store cannot make a
   * start delete topic data.
   */
  deletedTopics(): DeletedTopic[];
  /** The directories of these deleted topics are gone: the store may forget them. */
  forgetDeletedTopics(topics: DeletedTopic[]): Promise<void>;
  close(): Promise<void>;
  /** 'topic-created' / 'topic-deleted' / 'topic-updated' events, for watchers (cluster mode pushes remote changes here). */
  readonly events: EventEmitter;
}

export function sameDefinition(a: Omit<TopicDefinition, 'topicId' | 'createdAt'>, b: TopicDefinition): boolean {
  return (
    a.partitions === b.partitions &&
    a.replicationFactor === b.replicationFactor &&
    a.idempotent === b.idempotent &&
    a.partitioner === b.partitioner &&
    a.retentionHours === b.retentionHours &&
    a.retentionBytes === b.retentionBytes &&
    a.cleanupPolicy === b.cleanupPolicy &&
    a.deleteRetentionMs === b.deleteRetentionMs
  );
}

/** A topic's tombstone retention: its own delete_retention_ms, else the broker's --delete-retention-ms. */
export function deleteRetentionMs(def: TopicDefinition, brokerDefault: number): number {
  const own = def.deleteRetentionMs;
  return typeof own === 'number' && Number.isSafeInteger(own) && own >= 0 ? own : brokerDefault;
}

/**
 * What ALTER_TOPIC may change after creation: each setting given replaces the topic's. A null
 * deleteRetentionMs drops the topic's own, so it follows the broker's --delete-retention-ms again.
 */
export interface RetentionChange {
  retentionHours?: number;
  retentionBytes?: number;
  deleteRetentionMs?: number | null;
}

/** The ranges of a topic's retention settings: CREATE and ALTER_TOPIC parse with them, alteredDefinition guards with them. */
export const RETENTION_RANGES = {
  retention_hours: { min: -1, max: MAX_RETENTION_HOURS },
  retention_bytes: { min: -1, max: Number.MAX_SAFE_INTEGER },
  delete_retention_ms: { min: 0, max: Number.MAX_SAFE_INTEGER },
} as const;

function checkRetentionRange(param: keyof typeof RETENTION_RANGES, v: number): void {
  const { min, max } = RETENTION_RANGES[param];
  if (!Number.isSafeInteger(v) || v < min || v > max) throw new TributaryError('invalid_parameter', { param, reason: `must be an integer from ${min} to ${max}` });
}

/** `def` with `change` applied (a new object: the old one may still be shared, e.g. by log options). */
export function alteredDefinition(def: TopicDefinition, change: RetentionChange): TopicDefinition {
  const next: TopicDefinition = { ...def };
  if (change.retentionHours !== undefined) next.retentionHours = change.retentionHours;
  if (change.retentionBytes !== undefined) next.retentionBytes = change.retentionBytes;
  if (change.deleteRetentionMs === null) delete next.deleteRetentionMs;
  else if (change.deleteRetentionMs !== undefined) next.deleteRetentionMs = change.deleteRetentionMs;
  // A last guard on what is stored: metadata.json with a bad value would stop the next start.
  checkRetentionRange('retention_hours', next.retentionHours);
  checkRetentionRange('retention_bytes', next.retentionBytes);
  if (next.deleteRetentionMs !== undefined) checkRetentionRange('delete_retention_ms', next.deleteRetentionMs);
  return next;
}

/** Whether two definitions of a topic differ in what ALTER_TOPIC changes. */
export function sameRetention(a: TopicDefinition, b: TopicDefinition): boolean {
  return a.retentionHours === b.retentionHours && a.retentionBytes === b.retentionBytes && a.deleteRetentionMs === b.deleteRetentionMs;
}

/** A partition count may only go up. */
export function checkGrowth(existing: TopicDefinition, partitions: number): void {
  if (!Number.isSafeInteger(partitions) || partitions <= existing.partitions) {
    throw new TributaryError('invalid_parameter', { param: 'partitions', reason: `must be above the current ${existing.partitions} (partitions can only be added)` });
  }
}

/** Checks a reservation: a positive count whose range stays within safe integers. */
export function checkReservation(next: number, count: number): void {
  if (!Number.isSafeInteger(count) || count < 1) throw new TributaryError('invalid_parameter', { param: 'count', reason: 'must be a positive integer' });
  if (!Number.isSafeInteger(next + count)) throw new TributaryError('internal_error', { reason: 'producer ids exhausted', next });
}

/** The space held back for metadata.json's writes (docs/operations.md, "A full disk"). */
export const METADATA_RESERVE_FILE = 'metadata.reserve';
const RESERVE_BYTES = 1 << 20;

/**
 * Topic definitions in `<dataDir>/metadata.json`, replaced atomically on every change. A reserve file holds
 * space back for those writes: a write that finds the disk full releases it and tries once more, so a
 * topic can still be deleted to free space (the reserve is made again once a write succeeds).
 */
export class LocalMetadataStore implements MetadataStore {
  readonly events = new EventEmitter();
  private topics = new Map<string, TopicDefinition>();
  private nextProducerId = 0;
  /** Deleted topics whose directories may remain (MetadataFile.deleting). */
  private deleting: DeletedTopic[] = [];
  private readonly file: string;
  /** The producer id counter's own file (PRODUCER_IDS_FILE). */
  private readonly idsFile: string;
  private readonly reserve: string;
  private reserveMissing = true;
  /** Serializes writes so two concurrent changes cannot interleave their renames. */
  private chain: Promise<unknown> = Promise.resolve();

  constructor(
    private readonly dataDir: string,
    /** How the file is replaced (tests stand in a full disk). */
    private readonly writeFile: (file: string, data: string) => Promise<void> = writeFileAtomic,
  ) {
    this.file = path.join(dataDir, 'metadata.json');
    this.idsFile = path.join(dataDir, PRODUCER_IDS_FILE);
    this.reserve = path.join(dataDir, METADATA_RESERVE_FILE);
  }

  async open(): Promise<void> {
    await fs.mkdir(this.dataDir, { recursive: true });
    await this.makeReserve();
    let text: string | undefined;
    try {
      text = await readSmallFile(this.file, 'utf8');
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw new MetadataFileError(this.file, `cannot be read (${(err as Error).message})`);
    }
    if (text === undefined) await this.checkNew();
    else {
      // A file that cannot be taken whole stops the broker: never start empty, or half, over existing data.
      const parsed = parseMetadataFile(this.file, text);
      for (const t of parsed.topics) this.topics.set(t.name, t);
      this.nextProducerId = parsed.nextProducerId ?? 0;
      this.deleting = parsed.deleting ?? [];
    }
    // The higher of the two counters: metadata.json may be an older copy put back (absent: a data
    // directory from before the counter had its own file).
    this.nextProducerId = Math.max(this.nextProducerId, await this.readIdsFile());
  }

  private async readIdsFile(): Promise<number> {
    let text: string;
    try {
      text = await readSmallFile(this.idsFile, 'utf8');
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') return 0;
      throw new MetadataFileError(this.idsFile, `cannot be read (${(err as Error).message})`);
    }
    return parseProducerIdsFile(this.idsFile, text);
  }

  /**
   * No metadata.json: a new broker, unless `logs/` holds topic directories. Then the file was lost (moved,
   * a restore without it), and starting as new would know none of those topics: their data, the
   * committed offsets in `__consumer_offsets` among it, would be written over or moved aside.
   */
  private async checkNew(): Promise<void> {
    const logs = path.join(this.dataDir, LOGS_DIR);
    let entries: string[];
    try {
      entries = await fs.readdir(logs);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') return;
      throw new MetadataFileError(this.file, `is missing and ${logs} cannot be listed (${(err as Error).message})`);
    }
    const topicDirs: string[] = [];
    for (const e of entries) if (await isTopicDirEntry(logs, e)) topicDirs.push(e);
    entries = topicDirs;
    if (entries.length === 0) return;
    entries.sort();
    const shown = entries.length > 10 ? `${entries.slice(0, 10).join(', ')}, and ${entries.length - 10} more` : entries.join(', ');
    throw new MetadataFileError(
      this.file,
      `is missing, but ${logs} holds ${entries.length} ${entries.length === 1 ? 'entry' : 'entries'} (${shown}): topic data the broker would not know. Restore the file from a backup; to start with no topics instead, move ${logs} away first`,
    );
  }

  listTopics(): TopicDefinition[] {
    return [...this.topics.values()].sort((a, b) => a.name.localeCompare(b.name));
  }

  getTopic(name: string): TopicDefinition | undefined {
    return this.topics.get(name);
  }

  createTopic(def: Omit<TopicDefinition, 'topicId' | 'createdAt'>): Promise<{ topic: TopicDefinition; created: boolean }> {
    return this.serialize(async () => {
      const existing = this.topics.get(def.name);
      // Compared here, not only by the caller before: two CREATEs of one name wait for each other in here.
      if (existing && sameDefinition(def, existing)) return { topic: existing, created: false };
      if (existing) throw new TributaryError('topic_already_exists', { topic: def.name, partitions: existing.partitions });
      const topic: TopicDefinition = { ...def, topicId: randomBytes(8).toString('hex'), createdAt: Date.now() };
      const next = new Map(this.topics).set(def.name, topic);
      await this.persist(next);
      this.topics = next;
      this.events.emit('topic-created', topic);
      return { topic, created: true };
    });
  }

  deleteTopic(name: string): Promise<TopicDefinition | undefined> {
    return this.serialize(async () => {
      const existing = this.topics.get(name);
      if (!existing) return undefined;
      const next = new Map(this.topics);
      next.delete(name);
      // In the same write as the removal: a crash before its directory is gone leaves it listed, and the
      // next start removes it (TopicManager), where an unlisted one would only be moved aside.
      const deleting = [...this.deleting, { name, topicId: existing.topicId }];
      await this.persist(next, this.nextProducerId, deleting);
      this.topics = next;
      this.deleting = deleting;
      this.events.emit('topic-deleted', existing);
      return existing;
    });
  }

  addPartitions(name: string, partitions: number): Promise<TopicDefinition> {
    return this.serialize(async () => {
      const existing = this.topics.get(name);
      if (!existing) throw new TributaryError('topic_not_found', { topic: name });
      checkGrowth(existing, partitions);
      const topic: TopicDefinition = { ...existing, partitions };
      const next = new Map(this.topics).set(name, topic);
      await this.persist(next);
      this.topics = next;
      this.events.emit('topic-updated', topic);
      return topic;
    });
  }

  alterTopic(name: string, change: RetentionChange): Promise<TopicDefinition> {
    return this.serialize(async () => {
      const existing = this.topics.get(name);
      if (!existing) throw new TributaryError('topic_not_found', { topic: name });
      const topic = alteredDefinition(existing, change);
      // In metadata.json (replaced atomically) before it is in effect: a crash keeps the old or the new, whole.
      const next = new Map(this.topics).set(name, topic);
      await this.persist(next);
      this.topics = next;
      this.events.emit('topic-updated', topic);
      return topic;
    });
  }

  /** Durable before it resolves: a crash after it never hands the same range out again. */
  reserveProducerIds(count: number): Promise<number> {
    return this.serialize(async () => {
      const first = this.nextProducerId;
      checkReservation(first, count);
      // Its own file first, then metadata.json: a start takes the higher, so neither a crash between the
      // two writes nor an older metadata.json put back later hands out an id of this range again.
      await this.writeReserved(this.idsFile, producerIdsText(first + count));
      await this.persist(this.topics, first + count);
      this.nextProducerId = first + count;
      return first;
    });
  }

  async reservedProducerIds(): Promise<number> {
    return this.nextProducerId;
  }

  deletedTopics(): DeletedTopic[] {
    return [...this.deleting];
  }

  forgetDeletedTopics(topics: DeletedTopic[]): Promise<void> {
    return this.serialize(async () => {
      const gone = new Set(topics.map(topicDirName));
      const deleting = this.deleting.filter((d) => !gone.has(topicDirName(d)));
      if (deleting.length === this.deleting.length) return;
      await this.persist(this.topics, this.nextProducerId, deleting);
      this.deleting = deleting;
    });
  }

  async close(): Promise<void> {
    await this.chain.catch(() => {});
  }

  private serialize<T>(fn: () => Promise<T>): Promise<T> {
    const run = this.chain.then(fn, fn);
    this.chain = run.catch(() => {});
    return run;
  }

  private async persist(topics: Map<string, TopicDefinition>, nextProducerId = this.nextProducerId, deleting = this.deleting): Promise<void> {
    const body: MetadataFile = { version: 1, topics: [...topics.values()], nextProducerId, deleting };
    await this.writeReserved(this.file, `${JSON.stringify(body, null, 2)}\n`);
  }

  /** Replaces `file` with `text`; a disk found full releases the reserve and tries once more. */
  private async writeReserved(file: string, text: string): Promise<void> {
    try {
      await this.writeFile(file, text);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'ENOSPC' || this.reserveMissing) throw writeFailed(file, err);
      // The disk is full: the reserve makes room for this write.
      await fs.rm(this.reserve, { force: true });
      this.reserveMissing = true;
      try {
        await this.writeFile(file, text);
      } catch (again) {
        throw writeFailed(file, again);
      }
    }
    if (this.reserveMissing) await this.makeReserve();
  }

  /** Best effort: a disk too full for it leaves none, and the next successful write tries again. */
  private async makeReserve(): Promise<void> {
    try {
      await fs.writeFile(this.reserve, Buffer.alloc(RESERVE_BYTES), { flag: 'wx' });
      this.reserveMissing = false;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'EEXIST') this.reserveMissing = false;
      else await fs.rm(this.reserve, { force: true }).catch(() => {});
    }
  }
}

/** A write of metadata.json (or the producer id counter) that failed: nothing changed, and a retry may succeed (space freed). */
function writeFailed(file: string, err: unknown): TributaryError {
  return new TributaryError('storage_error', { reason: `could not write ${path.basename(file)}: ${err instanceof Error ? err.message : String(err)}` });
}

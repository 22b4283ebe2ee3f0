import { mapBounded } from '../common/bounded.js';
import { FdBudget } from '../storage/fd-budget.js';
import { Journal } from '../storage/journal.js';
import { LogTicker } from '../storage/log-ticker.js';
import type { FramePool } from '../storage/frame-pool.js';
import { TailCacheBudget } from '../storage/tail-cache-budget.js';
import { failpointDelay } from '../common/failpoints.js';
import fs from 'node:fs/promises';
import client from 'prom-client';
import path from 'node:path';
import { type MetadataStore, type RetentionChange, type TopicDefinition, alteredDefinition, deleteRetentionMs, sameDefinition, sameRetention } from './metadata-store.js';
import { TributaryError } from 'tributary-protocol/errors.js';
import { partitionForKey } from 'tributary-protocol/partitioner.js';
import { type LogOptions, PartitionLog } from '../storage/partition-log.js';
import { resolveOptions } from '../storage/log-options.js';
import { DEFAULT_LOG_OPTIONS } from '../storage/log-options.js';
import type { BrokerConfig } from '../common/config.js';
import { type Logger, lazyChild } from '../common/logger.js';
import type { BrokerMetrics } from '../common/metrics.js';
import { MAX_TOPIC_NAME_LENGTH, TOPIC_NAME_RE } from 'tributary-protocol/topic-name.js';
import { Partition } from './partition.js';
import { SNAPSHOT_INTERVAL_MS } from './partition-snapshots.js';
import { isTopicDirEntry, LOGS_DIR, topicDirName } from './metadata-file.js';
import { fsyncDir } from '../storage/log-fs.js';

/** Where a start moves log directories of no known topic (`<dataDir>/orphaned/<time>/<dir>`). */
export const ORPHANED_DIR = 'orphaned';

const INTERNAL_SEGMENT_BYTES = 16 * 1024 * 1024;

/**
 * Topic names: 1-238 of letters, digits, `.`, `_`, `-` (tributary-protocol/topic-name.ts: a longer name
 * failed to open with ENAMETOOLONG after it was stored); `.`/`..` reserved; `__` for internal topics.
 */
export function validateTopicName(name: string, opts: { allowInternal?: boolean } = {}): void {
  const bad = (reason: string) => new TributaryError('invalid_topic_name', { topic: name.length > 256 ? `${name.slice(0, 256)}...` : name, reason });
  if (!TOPIC_NAME_RE.test(name)) throw bad(`1-${MAX_TOPIC_NAME_LENGTH} characters of letters, digits, ".", "_" and "-"`);
  if (name === '.' || name === '..') throw bad('reserved name');
  if (name.startsWith('__') && !opts.allowInternal) throw bad('the "__" prefix is reserved for internal topics');
}

/** A topic's retention as its logs take it. */
function logRetention(def: TopicDefinition): { retentionMs: number; retentionBytes: number } {
  return { retentionMs: def.retentionHours < 0 ? -1 : def.retentionHours * 3600 * 1000, retentionBytes: def.retentionBytes };
}

/** What CREATE asks for: a definition before the broker gives it its id and creation time. */
export type TopicSpec = Omit<TopicDefinition, 'topicId' | 'createdAt'>;

export class Topic {
  private rr = 0;

  constructor(
    public def: TopicDefinition,
    readonly partitions: Partition[],
  ) {}

  get name(): string {
    return this.def.name;
  }

  partition(id: number): Partition {
    const p = this.partitions[id];
    if (!p) throw new TributaryError('partition_not_found', { topic: this.def.name, partition: id, partitions: this.partitions.length });
    return p;
  }

  /** Explicit partition, else FNV-1a 64 of the key, else round-robin (docs/protocol.md, "Producing"). */
  choosePartition(explicit: number | undefined, key: Buffer | null): number {
    if (explicit !== undefined && explicit >= 0) {
      this.partition(explicit);
      return explicit;
    }
    if (key && key.length > 0 && this.def.partitioner === 'hash_key') return partitionForKey(key, this.partitions.length);
    const p = this.rr % this.partitions.length;
    this.rr = (this.rr + 1) % this.partitions.length;
    return p;
  }
}

/**
 * `tributary_log_size_bytes`, one sample per partition, made straight from the partitions at each scrape:
 * set() per labelled sample hashes its labels, and with 10,000 partitions a scrape held the event loop
 * for 25-92 ms against 12-20 this way (most of what is left is prom-client writing the text).
 */
class LogSizeGauge extends client.Gauge<'topic' | 'partition'> {
  constructor(
    registry: client.Registry,
    private readonly topics: ReadonlyMap<string, Topic>,
    private readonly hosts: (topic: string, partition: number) => boolean,
  ) {
    super({ name: 'tributary_log_size_bytes', help: "Bytes of this broker's replica of each partition on disk", labelNames: ['topic', 'partition'], registers: [registry] });
  }

  override async get(): Promise<client.MetricObjectWithValues<client.MetricValue<'topic' | 'partition'>>> {
    const values: client.MetricValue<'topic' | 'partition'>[] = [];
    for (const t of this.topics.values()) for (const p of t.partitions) if (!p.isClosed && this.hosts(t.name, p.id)) values.push({ value: p.log.sizeBytes, labels: { topic: t.name, partition: String(p.id) } });
    const base = await super.get();
    return { ...base, values };
  }
}

/** Owns topic definitions (through the MetadataStore) and the partition logs on disk. */
export class TopicManager {
  private readonly topics = new Map<string, Topic>();
  /** Topics being opened, by topic id: a second open of the same directories must not start. */
  private readonly opening = new Map<string, Promise<Topic>>();
  /** Topic ids whose DELETE is under way: a growth stored before it must not open them again. */
  private readonly deleting = new Set<string>();
  private applying: Promise<unknown> = Promise.resolve();
  private readonly logsDir: string;
  private retentionTimer: NodeJS.Timeout | undefined;
  /** The bound on open segment files that every partition's log shares. */
  private readonly fdBudget: FdBudget;
  /** The bound on tail cache memory that every partition's log shares. */
  private readonly tailCacheBudget: TailCacheBudget;
  /** The flush timer every partition's log shares (only logs with timed work wait on it). */
  private readonly ticker: LogTicker;
  /** The broker's journal (--journal), from open() on: every log under flush=always writes to it. */
  private journal: Journal | undefined;
  /** The timer of every partition's snapshot checks (producer state, transactions). */
  private readonly snapshotTicker = new LogTicker(SNAPSHOT_INTERVAL_MS);
  private readonly optionsByTopic = new WeakMap<TopicDefinition, Readonly<LogOptions>>();
  /**
   * Whether this broker holds a replica of a partition (every one standalone; cluster mode sets it):
   * the per-broker figures are its own, so a sum over brokers counts each replica once (docs/operations.md).
   */
  hosts: (topic: string, partition: number) => boolean = () => true;

  constructor(
    private readonly store: MetadataStore,
    private readonly config: BrokerConfig,
    private readonly logger: Logger,
    private readonly metrics: BrokerMetrics,
    /** Where the connections assemble produce frames; the tail caches hold what they keep of it. */
    private readonly framePool?: FramePool,
  ) {
    this.logsDir = path.join(config.dataDir, LOGS_DIR);
    this.ticker = new LogTicker(config.flushIntervalMs);
    // An open waits at most 100 ms for a slot (FdBudget: partitions written without pause cannot let go),
    // then goes past the bound by at most 64 files (within the spare fds docs/operations.md advises).
    const budget = (this.fdBudget = new FdBudget(config.maxOpenSegmentFiles, 100, Math.min(64, config.maxOpenSegmentFiles)));
    new client.Gauge({
      name: 'tributary_open_segment_files',
      help: 'Segment files held open, opening or closing (at most --max-open-segment-files: past it an open waits)',
      registers: [metrics.registry],
      collect() {
        this.set(budget.open);
      },
    });
    const tailCache = (this.tailCacheBudget = new TailCacheBudget(config.tailCacheBytes));
    new client.Gauge({
      name: 'tributary_tail_cache_bytes',
      help: "Memory the partitions' tail caches keep alive: the blocks and buffers of their cached writes plus a fixed cost per chunk (at most --tail-cache-bytes)",
      registers: [metrics.registry],
      collect() {
        this.set(tailCache.bytes);
      },
    });
    new LogSizeGauge(metrics.registry, this.topics, (t, p) => this.hosts(t, p));
    metrics.hostedPartitions = () => {
      let n = 0;
      for (const t of this.topics.values()) for (const p of t.partitions) if (!p.isClosed && this.hosts(t.name, p.id)) n++;
      return n;
    };
  }

  /** Opens (and recovers) every partition log; the broker is not ready before this resolves. */
  async open(): Promise<void> {
    await fs.mkdir(this.logsDir, { recursive: true });
    // Read before any log opens: each replays its entries as it does (storage/journal-replay.ts). Read even
    // with --journal false, so entries written before the setting changed are not lost.
    const journal = await Journal.open(this.config.dataDir, this.logger.child({ component: 'journal' }), {
      onWrite: (seconds) => this.metrics.journalWriteDuration.observe(seconds),
    });
    if (this.config.journal || journal.hasRecovered) this.journal = journal;
    const defs = this.store.listTopics();
    // Every partition of every topic, a bounded number at once: recovery is mostly waiting on the disk.
    const all = defs.flatMap((def) => Array.from({ length: def.partitions }, (_, i) => ({ def, i })));
    const opened = await mapBounded(all, this.config.partitionOpenConcurrency, ({ def, i }) => this.openPartition(def, i));
    let at = 0;
    for (const def of defs) {
      this.topics.set(def.name, new Topic(def, opened.slice(at, at + def.partitions)));
      at += def.partitions;
    }
    await this.tidyLogsDir(defs);
    // Off (--journal false): every log replayed its entries and fsynced them; the old files go, and no new one comes.
    await journal.endRecovery(this.config.journal);
    if (!this.config.journal) this.journal = undefined;
    this.updateGauges();
    this.retentionTimer = setInterval(() => void this.applyRetention(), this.config.retentionCheckMs);
    this.retentionTimer.unref();
  }

  list(): Topic[] {
    return [...this.topics.values()].sort((a, b) => a.name.localeCompare(b.name));
  }

  get(name: string): Topic {
    const t = this.topics.get(name);
    if (!t) throw new TributaryError('topic_not_found', { topic: name });
    return t;
  }

  tryGet(name: string): Topic | undefined {
    return this.topics.get(name);
  }

  async create(spec: TopicSpec, opts: { allowInternal?: boolean } = {}): Promise<{ topic: Topic; created: boolean }> {
    validateTopicName(spec.name, opts);
    const existing = this.store.getTopic(spec.name);
    if (existing) {
      if (!sameDefinition(spec, existing)) {
        throw new TributaryError('topic_already_exists', { topic: spec.name, partitions: existing.partitions });
      }
      // Defined but not open here (an open that failed before it could be undone): opened now.
      return { topic: this.topics.get(spec.name) ?? (await this.ensureOpen(existing)), created: false };
    }
    // Whatever the count's source (the request's, or --default-partitions): a topic gets at most the maximum.
    if (!opts.allowInternal && spec.partitions > this.config.maxPartitions) throw new TributaryError('invalid_parameter', { param: 'partitions', reason: `at most ${this.config.maxPartitions}` });
    const { topic: def, created } = await this.store.createTopic(spec);
    let topic: Topic;
    try {
      topic = await this.ensureOpen(def);
    } catch (err) {
      // Not left defined and unopened: a topic nobody could use, nor delete (DELETE finds no open topic).
      if (created) await this.store.deleteTopic(def.name).catch((e: unknown) => this.logger.error({ err: e, topic: def.name }, 'undoing a topic whose open failed failed'));
      throw err;
    }
    this.updateGauges();
    this.logger.info({ topic: def.name, partitions: def.partitions }, 'topic created');
    return { topic, created };
  }

  /** ADD_PARTITIONS: raises the count in the store, then opens the new partitions here. */
  async addPartitions(name: string, partitions: number): Promise<Topic> {
    this.get(name);
    if (partitions > this.config.maxPartitions) throw new TributaryError('invalid_parameter', { param: 'partitions', reason: `at most ${this.config.maxPartitions}` });
    const def = await this.store.addPartitions(name, partitions);
    return this.applyDefinition(def);
  }

  /** ALTER_TOPIC: new retention settings in the store, then in effect on every partition open here. */
  async alterTopic(name: string, change: RetentionChange): Promise<Topic> {
    this.get(name);
    const def = await this.store.alterTopic(name, change);
    // Through the definition queue, as a change seen on the store's watch goes: one at a time, in order.
    return this.applyDefinition(def);
  }

  /**
   * Brings the open topic up to a changed definition (a local change or the store's watch): opens the
   * partitions it has beyond the open topic's, and takes its replication factor and retention settings.
   */
  private applyDefinition(def: TopicDefinition): Promise<Topic> {
    const run = async () => {
      let t = this.topics.get(def.name);
      // Not open yet: the open under way may be of the definition before this growth (a watch delivers
      // the creation and the growth back to back), so the partitions it lacks are opened after it. Unless
      // the topic was deleted since the growth was stored: opening it would bring back a topic the store
      // no longer has, whose acknowledged writes the next start removes as an orphan directory.
      if (!t || t.def.topicId !== def.topicId) {
        if (!this.stillStored(def)) throw new TributaryError('topic_not_found', { topic: def.name });
        t = await this.ensureOpen(def);
      }
      const had = t.partitions.length;
      for (let i = had; i < def.partitions; i++) {
        const p = await this.openPartition(def, i);
        // Deleted while it opened: the delete destroyed the partitions it saw, so this one goes too.
        if (!this.stillStored(def) || this.topics.get(def.name) !== t) {
          await p.destroy();
          throw new TributaryError('topic_not_found', { topic: def.name });
        }
        t.partitions.push(p);
      }
      // More partitions, or a new replication factor for the next ones (ALTER_REPLICATION_FACTOR).
      if (def.partitions > t.def.partitions || (def.partitions === t.def.partitions && def.replicationFactor !== t.def.replicationFactor)) t.def = def;
      this.retune(t);
      this.updateGauges();
            if (t.partitions.length > had) this.logger.info({ topic: def.name, partitions: def.partitions }, 'partitions added');
      return t;
    };
    // One change at a time: a local change and its watch event must not open a partition twice.
    const p = this.applying.then(run, run);
    this.applying = p.catch(() => undefined);
    return p;
  }

  /**
   * Puts the store's latest retention settings of `t` (ALTER_TOPIC) into its definition and the logs of its
   * open partitions, in effect from the next retention pass. The latest, not the one a change came with:
   * a local change and the watch's events may arrive in either order.
   */
  private retune(t: Topic): void {
    const latest = this.store.getTopic(t.name);
    if (!latest || latest.topicId !== t.def.topicId) return;
    if (!sameRetention(latest, t.def)) {
      t.def = alteredDefinition(t.def, { retentionHours: latest.retentionHours, retentionBytes: latest.retentionBytes, deleteRetentionMs: latest.deleteRetentionMs ?? null });
      this.logger.info({ topic: t.name, retentionHours: t.def.retentionHours, retentionBytes: t.def.retentionBytes, deleteRetentionMs: t.def.deleteRetentionMs }, 'topic retention changed');
    }
    // Every log, not only when the definition changed: a partition just opened from an older definition
    // (a growth seen after the change) has that one's limits.
    const want = logRetention(t.def);
    for (const p of t.partitions) {
      const have = p.log.retention;
      if (have.retentionMs !== want.retentionMs || have.retentionBytes !== want.retentionBytes) p.log.setRetention(want);
    }
  }

  /** Resolves with the definition deleted (the store's: the one it found, if it moved on meanwhile). */
  async delete(name: string): Promise<TopicDefinition> {
    const topic = this.get(name);
    if (name.startsWith('__')) throw new TributaryError('invalid_topic_name', { topic: name, reason: 'internal topics cannot be deleted' });
    // Definition first, which lists the topic as deleted: a crash between the two steps leaves its
    // directory listed, and the next open() removes it. Out of the map before: the store's own delete
    // event (cluster mode) must not destroy it a second time.
    this.topics.delete(name);
    this.deleting.add(topic.def.topicId);
    let deleted: TopicDefinition | undefined;
    try {
      deleted = await this.store.deleteTopic(name);
    } catch (err) {
      this.topics.set(name, topic);
      throw err;
    } finally {
      this.deleting.delete(topic.def.topicId);
    }
    // Deleted from here on, whatever the files do: a failure to remove them is logged, not answered (the
    // caller would skip the rest of the delete), and the next start removes them (the store lists them).
    try {
      await Promise.all(topic.partitions.map((p) => p.destroy()));
      await fs.rm(this.topicDir(topic.def), { recursive: true, force: true, maxRetries: 5, retryDelay: 20 });
      await this.store
        .forgetDeletedTopics([{ name, topicId: topic.def.topicId }])
        .catch((err: unknown) => this.logger.warn({ err, topic: name }, 'could not drop a deleted topic from the metadata; the next start does'));
    } catch (err) {
      this.logger.error({ err, topic: name }, 'removing the files of a deleted topic failed; the next start removes them');
    }
    this.metrics.forgetTopic(name);
    this.updateGauges();
    this.logger.info({ topic: name }, 'topic deleted');
    return deleted ?? topic.def;
  }

  /** Time/size retention for 'delete' topics, compaction for 'compact' topics (run on the retention timer). */
  async applyRetention(now = Date.now()): Promise<void> {
    const started = performance.now();
    for (const topic of this.topics.values()) {
      const compact = topic.def.cleanupPolicy === 'compact';
      for (const p of topic.partitions) {
        if (p.isClosed) continue;
        try {
          if (compact) {
            // The internal topics' tombstones are empty values; a user topic's are null values only (docs/kafka.md).
            const nullTombstonesOnly = !topic.name.startsWith('__');
            const res = await p.log.compact({ now, tombstoneRetentionMs: deleteRetentionMs(topic.def, this.config.deleteRetentionMs), nullTombstonesOnly });
            if (res.recordsRemoved > 0) {
              this.logger.info({ topic: topic.name, partition: p.id, ...res }, 'compacted log');
            }
          } else {
            const res = await p.applyRetention(now);
            if (res.deletedSegments > 0) {
              this.logger.info({ topic: topic.name, partition: p.id, ...res, earliest: p.earliest }, 'retention deleted segments');
            }
          }
        } catch (err) {
          if (p.isClosed) continue;
          this.logger.error({ err, topic: topic.name, partition: p.id }, compact ? 'compaction failed' : 'retention failed');
        }
      }
    }
    this.metrics.retentionPass.observe((performance.now() - started) / 1000);
  }

  /** First step of shutdown: long polls and streams return now instead of at their deadlines. */
  beginClose(): void {
    for (const t of this.topics.values()) for (const p of t.partitions) p.beginClose();
  }

  /** The broker is stopping: a journal write waiting for space gets one last try (Journal.giveUpWhenFull). */
  giveUpJournalWhenFull(): void {
    this.journal?.giveUpWhenFull();
  }

  async close(): Promise<void> {
    clearInterval(this.retentionTimer);
    // The logs' closes wait for their appends' journal writes: one waiting for space on a full disk gives up.
    this.journal?.giveUpWhenFull();
    const all = [...this.topics.values()].flatMap((t) => t.partitions);
    // Bounded: each close writes its index, checkpoints and marker, a few files open at once.
    await mapBounded(all, this.config.partitionOpenConcurrency, (p) => p.close());
    await this.journal?.close();
  }

  /** The store still holds this definition (by topic id) and no delete of it is under way. */
  private stillStored(def: TopicDefinition): boolean {
    return !this.deleting.has(def.topicId) && this.store.getTopic(def.name)?.topicId === def.topicId;
  }

  /** Opens a topic once, whether its definition came from a local CREATE or from the store's watch. */
  private ensureOpen(def: TopicDefinition): Promise<Topic> {
    const open = this.topics.get(def.name);
    if (open && open.def.topicId === def.topicId) return Promise.resolve(open);
    let p = this.opening.get(def.topicId);
    if (!p) {
      p = this.openTopic(def).then((t) => {
        this.topics.set(def.name, t);
        this.opening.delete(def.topicId);
        this.updateGauges();
        return t;
      });
      p.catch(() => this.opening.delete(def.topicId));
      this.opening.set(def.topicId, p);
    }
    return p;
  }

  /**
   * Cluster mode: topics created and deleted by other brokers (the store's watch) are opened and removed
   * here too. `onOpened` runs once a remotely created topic's partitions are open.
   */
  followStore(onOpened: (topic: Topic) => void): void {
    this.store.events.on('topic-created', (def: TopicDefinition) => {
      // `topic.open:<name>@ms` holds the opening back, as a slow broker would (test/integration/cluster/create-ready.test.ts).
      const held = failpointDelay(`topic.open:${def.name}`) ?? Promise.resolve();
      held
        .then(() => this.ensureOpen(def))
        .then(onOpened, (err: unknown) => this.logger.error({ err, topic: def.name }, 'opening a topic created elsewhere failed'));
    });
    this.store.events.on('topic-updated', (def: TopicDefinition) => {
      this.applyDefinition(def).then(onOpened, (err: unknown) => this.logger.error({ err, topic: def.name }, 'applying a topic changed elsewhere failed'));
    });
    this.store.events.on('topic-deleted', (def: TopicDefinition) => {
      const t = this.topics.get(def.name);
      if (!t || t.def.topicId !== def.topicId) return;
      this.topics.delete(def.name);
      this.metrics.forgetTopic(def.name);
      void Promise.all(t.partitions.map((p) => p.destroy()))
        .then(() => fs.rm(this.topicDir(t.def), { recursive: true, force: true }))
        .catch((err: unknown) => this.logger.error({ err, topic: def.name }, 'removing a topic deleted elsewhere failed'));
      this.updateGauges();
    });
  }

  private topicDir(def: TopicDefinition): string {
    // The topic id keeps a re-created topic from ever picking up a deleted one's files.
    return path.join(this.logsDir, topicDirName(def));
  }

  /** One resolved object per topic definition, shared by its partitions' logs (resolveOptions). */
  private logOptions(def: TopicDefinition): Readonly<LogOptions> {
    let opts = this.optionsByTopic.get(def);
    if (!opts) {
      opts = resolveOptions(this.unresolvedLogOptions(def));
      this.optionsByTopic.set(def, opts);
    }
    return opts;
  }

  private unresolvedLogOptions(def: TopicDefinition): Partial<LogOptions> {
    const internal = def.name.startsWith('__');
    return {
      fdBudget: this.fdBudget,
      ticker: this.ticker,
      tailCacheBudget: this.tailCacheBudget,
      framePool: this.framePool,
      // No cache may hold more than the budget (one large write would otherwise empty every other cache
      // before its own cap dropped it); --tail-cache-bytes 0 turns every cache off.
      tailCacheBytes: Math.min(DEFAULT_LOG_OPTIONS.tailCacheBytes ?? 0, this.config.tailCacheBytes),
      // Compaction only rewrites closed segments: internal (compacted, small) topics roll sooner.
      segmentBytes: internal ? Math.min(this.config.segmentBytes, INTERNAL_SEGMENT_BYTES) : this.config.segmentBytes,
      segmentMs: this.config.segmentMs,
      storedLayout: this.config.storedLayout,
      ...logRetention(def),
      // Group state and commits are acknowledged only once durable, whatever the data flush policy.
      flush: internal ? 'always' : this.config.flush,
      // Every log replays what an earlier run journaled, whatever its flush mode now; only flush=always journals.
      journal: this.journal,
      flushIntervalMs: this.config.flushIntervalMs,
      // Standalone, a partition's HWM is its log end on open (Partition): only a replica needs the checkpoint.
      checkpointHwmOnTimer: this.config.cluster,
      // A limit for what clients write: the coordinators' own records (a group snapshot of a few hundred
      // bytes and up) are never refused by it, or a small --max-record-bytes left every JOIN unanswered.
      maxRecordBytes: internal ? undefined : this.config.maxRecordBytes,
      onSync: (seconds) => this.metrics.fsyncDuration.observe(seconds),
      // Recovery takes a gap after a segment whose index was lost as compaction's only on a compacted topic.
      cleanupPolicy: def.cleanupPolicy,
    };
  }

  private async openTopic(def: TopicDefinition): Promise<Topic> {
    const partitions = await mapBounded(
      Array.from({ length: def.partitions }, (_, i) => i),
      this.config.partitionOpenConcurrency,
      (i) => this.openPartition(def, i),
    );
    return new Topic(def, partitions);
  }

  private async openPartition(def: TopicDefinition, i: number): Promise<Partition> {
    // Lazy: a partition never written here, or not hosted here, has no files (docs/architecture.md, "Hosted partitions").
    const log = await PartitionLog.open(path.join(this.topicDir(def), String(i)), this.logOptions(def), lazyChild(this.logger, { topic: def.name, partition: i }), {
      lazy: true,
    });
    return new Partition(def.name, i, log, { replicated: this.config.cluster, snapshotTicker: this.snapshotTicker });
  }

  /**
   * Tidies `logs/` at open. The directory of a topic the store lists as deleted is removed (a crash or a
   * failed removal after its delete left it). Any other directory no topic defines is moved aside into
   * `<dataDir>/orphaned/`, never deleted: a metadata file restored from an older backup, or one edited
   * by hand, must not cost the data of the topics it lacks (docs/operations.md, "The metadata file").
   */
  private async tidyLogsDir(defs: TopicDefinition[]): Promise<void> {
    const known = new Set(defs.map(topicDirName));
    const deleted = this.store.deletedTopics();
    const deletedDirs = new Set(deleted.map(topicDirName));
    let aside: string | undefined;
    for (const entry of (await fs.readdir(this.logsDir)).sort()) {
      if (known.has(entry) || !(await isTopicDirEntry(this.logsDir, entry))) continue;
      if (deletedDirs.has(entry)) {
        this.logger.warn({ dir: entry }, 'removing log directory of a deleted topic');
        await fs.rm(path.join(this.logsDir, entry), { recursive: true, force: true });
        continue;
      }
      aside ??= await this.orphanedDir(path.join(this.config.dataDir, ORPHANED_DIR));
      let to = path.join(aside, entry);
      try {
        await fs.rename(path.join(this.logsDir, entry), to);
      } catch (err) {
        // logs/ on a file system of its own (a mount, a symlink to another disk): aside within it instead.
        if ((err as NodeJS.ErrnoException).code !== 'EXDEV') throw err;
        aside = await this.orphanedDir(path.join(this.logsDir, `.${ORPHANED_DIR}`));
        to = path.join(aside, entry);
        await fs.rename(path.join(this.logsDir, entry), to);
      }
      this.logger.warn(
        { dir: path.join(this.logsDir, entry), movedTo: to },
        'moved aside a log directory of no known topic (not in the metadata, nor listed there as deleted); nothing was deleted: restore its topic or remove it',
      );
    }
    if (aside) {
      await fsyncDir(aside);
      await fsyncDir(this.logsDir);
    }
    // Each listed directory is gone now (removed here, or never made): the list may drop them. Best
    // effort (a full disk must not stop the start): still listed, they are looked for at the next one.
    if (deleted.length > 0) {
      await this.store
        .forgetDeletedTopics(deleted)
        .catch((err: unknown) => this.logger.warn({ err }, 'could not drop the removed directories of deleted topics from the metadata; the next start does'));
    }
  }

  /** A new directory under `<dataDir>/orphaned/` for this start's unknown log directories. */
  private async orphanedDir(under: string): Promise<string> {
    const dir = path.join(under, new Date().toISOString().replace(/[:.]/g, '-'));
    await fs.mkdir(dir, { recursive: true });
    return dir;
  }

  private updateGauges(): void {
    this.metrics.topics.set(this.topics.size);
  }
}

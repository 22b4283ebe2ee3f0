import { TributaryError } from 'tributary-protocol/errors.js';
import { partitionForKey } from 'tributary-protocol/partitioner.js';
import type { RecordInput } from 'tributary-protocol/record.js';
import type { Partition } from '../partition/partition.js';
import { type InternalAppend, localAppend, replayJson, replicatedPast, unconfirmedAppend } from '../partition/internal-log.js';
import type { ClassicSnapshot } from './classic-group.js';
import { type Clock, systemClock } from '../common/clock.js';
import type { AssignmentProtocol, ChangeReason, GenerationChange } from './group.js';
import { type OffsetEntry, type OffsetStore, type StoredOffset, checkCommit, checkDeleteTopic, checkFetch, checkName, checkNoRegression, outcomeUnknown } from './offset-store.js';

export const OFFSETS_TOPIC = '__consumer_offsets';

/** A group as written to `__consumer_offsets`: everything but heartbeat times, which restart on load. */
export interface GroupSnapshot {
  group: string;
  topic: string;
  generation: number;
  leader: string | null;
  assignor: string;
  protocol: AssignmentProtocol;
  planGeneration: number;
  members: Array<{
    id: string;
    clientId: string;
    instance: string | null;
    host: string;
    sessionTimeoutMs: number;
    rebalanceTimeoutMs: number;
    generation: number;
    owned: number[];
    target: number[];
    needsRejoin: boolean;
    /** Member.reset (absent in older snapshots and when empty). */
    reset?: number[];
  }>;
  history: GenerationChange[];
  /** ConsumerGroup.topicShape (absent in older snapshots: taken from the topic as found at load). */
  topicShape?: string;
  /**
   * Membership changes whose join window had not closed yet (absent in older snapshots): without them a
   * crash inside the window would lose the rebalance, e.g. leave a leaver's partitions unassigned.
   */
  pendingCauses?: ChangeReason[];
  /** ConsumerGroup.emptiedAt: when the group last became empty (wall, epoch ms; absent while it has members and in older snapshots). */
  emptiedAt?: number;
}

type Key = ['g', string] | ['o', string, string, number];

function encodeKey(k: Key): Buffer {
  return Buffer.from(JSON.stringify(k), 'utf8');
}

export interface ReplayResult {
  /** Latest snapshot per group (a Tributary or a Kafka classic group); null where the group was deleted. */
  groups: Map<string, GroupSnapshot | ClassicSnapshot | null>;
  offsets: Map<string, StoredOffset>;
  /**
   * The offset keys whose latest record (a commit or a tombstone) lies at or past the partition's HWM, with
   * that record's offset: not on the in-sync replicas yet, so a change of leader may still lose it.
   */
  unreplicated: Map<string, Unconfirmed>;
  /** The groups whose latest snapshot record (or tombstone) lies at or past the HWM, with its offset (GroupLog.checkConfirmed). */
  unreplicatedGroups: Map<string, number>;
}

/** An offset key whose latest record may still be lost (LogOffsetStore `unconfirmed`). */
export interface Unconfirmed {
  group: string;
  topic: string;
  partition: number;
  /** The offset of that record (of its append's last record, for one this leader appended). */
  lastOffset: number;
}

/** A storage_error whose write is known to have left nothing in the log (storage/log-fs.ts, writeFailed). */
export function notWritten(err: unknown): boolean {
  return err instanceof TributaryError && err.code === 'storage_error' && err.fields.outcome === 'not_written';
}

function offsetKey(group: string, topic: string, partition: number): string {
  return `${group}\u0000${topic}\u0000${partition}`;
}


/**
 * The coordinator's durable state in the internal topic: group snapshots keyed `["g", group]` and offset
 * commits keyed `["o", group, topic, partition]`, JSON values, an empty value as tombstone. Keys make the
 * topic compactable: only the latest value per key matters.
 */
export class GroupLog {
  private readonly written = new Map<string, string>();
  /**
   * Groups loaded from a replay whose latest snapshot record (or tombstone) lay at or past the HWM, with its
   * offset: another change of leader may still lose it, and the next coordinator serve the state before it
   * (a generation it never had), so the group is not served until the HWM passes it (checkConfirmed).
   */
  private readonly unconfirmed = new Map<string, number>();

  constructor(
    private readonly partitionsOf: () => Partition[],
    private readonly appendTo: InternalAppend = localAppend,
  ) {}

  get partitionCount(): number {
    return this.partitionsOf().length;
  }

  partitionFor(group: string): number {
    return partitionForKey(Buffer.from(group, 'utf8'), this.partitionCount);
  }

  private partition(group: string): Partition {
    return this.partitionsOf()[this.partitionFor(group)]!;
  }

  /** One append, so a crash keeps all of it or none (the log's appends are atomic). */
  private async append(group: string, records: RecordInput[]): Promise<void> {
    try {
      await this.appendTo(this.partition(group), records);
    } catch (err) {
      if (err instanceof TributaryError) throw err;
      throw new TributaryError('storage_error', { reason: (err as Error).message });
    }
  }

  async writeGroup(snapshot: GroupSnapshot | ClassicSnapshot): Promise<void> {
    const json = JSON.stringify(snapshot);
    await this.append(snapshot.group, [{ key: encodeKey(['g', snapshot.group]), value: Buffer.from(json, 'utf8') }]);
    this.written.set(snapshot.group, json);
    // Replicated (cluster mode's appends wait for it), so is every record before it.
    this.unconfirmed.delete(snapshot.group);
  }

  /** Tombstone for the group's snapshot. */
  async deleteGroup(group: string): Promise<void> {
    await this.append(group, [{ key: encodeKey(['g', group]), value: Buffer.alloc(0) }]);
    this.written.delete(group);
    this.unconfirmed.delete(group);
  }

  /**
   * The group's snapshot as last written or loaded here (undefined: none in the log), so a change the log
   * refused without writing any of it (a full disk) is undone for that group alone (group-coordinator.ts).
   */
  lastWritten(group: string): GroupSnapshot | ClassicSnapshot | undefined {
    const json = this.written.get(group);
    return json === undefined ? undefined : (JSON.parse(json) as GroupSnapshot | ClassicSnapshot);
  }

  /** A snapshot loaded from the log (the coordinator's restore). */
  loaded(snapshot: GroupSnapshot | ClassicSnapshot): void {
    this.written.set(snapshot.group, JSON.stringify(snapshot));
  }

  /** The groups `drop` picks are no longer served here. */
  forgetWritten(drop: (group: string) => boolean): void {
    for (const group of [...this.written.keys()]) if (drop(group)) this.written.delete(group);
    for (const group of [...this.unconfirmed.keys()]) if (drop(group)) this.unconfirmed.delete(group);
  }

  /** A replay's groups found past the HWM (ReplayResult.unreplicatedGroups), applied with its snapshots. */
  loadedUnconfirmed(groups: Map<string, number>): void {
    for (const [group, offset] of groups) this.unconfirmed.set(group, offset);
  }

  /** Whether the group was replayed from past the HWM and the HWM has not passed it yet (see `unconfirmed`). */
  groupUnconfirmed(group: string): boolean {
    const at = this.unconfirmed.get(group);
    if (at === undefined) return false;
    if (!this.replicatedPast(group, at)) return true;
    this.unconfirmed.delete(group);
    return false;
  }

  /**
   * Throws the retriable COORDINATOR_LOADING while the group's state was replayed from past the HWM (Kafka's
   * coordinator likewise exposes no state loaded past the HWM; docs/architecture.md, "Cluster mode", Coordinators).
   */
  checkConfirmed(group: string): void {
    if (!this.groupUnconfirmed(group)) return;
    throw new TributaryError('COORDINATOR_LOADING', {
      group,
      partition: this.partitionFor(group),
      reason: "the group's last change is not on the in-sync replicas yet; retry",
    });
  }

  /** Whether the high-water mark of the group's partition has passed `offset`: every in-sync replica has it. */
  replicatedPast(group: string, offset: number): boolean {
    return replicatedPast(this.partition(group), offset);
  }

  /** Tombstones for offsets, so compaction can drop them. */
  deleteOffsets(group: string, offsets: Array<{ topic: string; partition: number }>): Promise<void> {
    if (offsets.length === 0) return Promise.resolve();
    return this.append(group, offsets.map((o) => ({ key: encodeKey(['o', group, o.topic, o.partition]), value: Buffer.alloc(0) })));
  }

  writeOffsets(group: string, topic: string, entries: OffsetEntry[], ts: number): Promise<void> {
    return this.append(
      group,
      entries.map((e) => ({
        key: encodeKey(['o', group, topic, e.partition]),
        value: Buffer.from(JSON.stringify({ offset: e.offset, ts }), 'utf8'),
        timestamp: ts,
      })),
    );
  }

  /**
   * Rebuild state from one partition. A record that does not parse stops the replay with an error: the
   * broker must stay unready rather than serve groups with offsets missing.
   */
  async replay(partitionIndex: number): Promise<ReplayResult> {
    const part = this.partitionsOf()[partitionIndex]!;
    const groups = new Map<string, GroupSnapshot | ClassicSnapshot | null>();
    const offsets = new Map<string, StoredOffset>();
    const unreplicated = new Map<string, Unconfirmed>();
    const unreplicatedGroups = new Map<string, number>();
    await replayJson(part, `${OFFSETS_TOPIC}[${partitionIndex}]`, (key, value, at, offset, confirmed) => {
      if (!Array.isArray(key)) throw new Error(`${at}: bad key`);
      if (key[0] === 'g' && typeof key[1] === 'string') {
        groups.set(key[1], value as GroupSnapshot | ClassicSnapshot | null);
        if (!confirmed) unreplicatedGroups.set(key[1], offset);
      } else if (key[0] === 'o' && typeof key[1] === 'string' && typeof key[2] === 'string' && Number.isInteger(key[3])) {
        const k = offsetKey(key[1], key[2], key[3]);
        if (!confirmed) unreplicated.set(k, { group: key[1], topic: key[2], partition: key[3], lastOffset: offset });
        if (value === null) offsets.delete(k);
        else {
          const v = value as { offset: number; ts: number };
          if (!Number.isSafeInteger(v.offset)) throw new Error(`${at}: bad offset value`);
          offsets.set(k, { group: key[1], topic: key[2], partition: key[3], offset: v.offset, commitTimestamp: v.ts });
        }
      } else {
        throw new Error(`${at}: unknown key`);
      }
    });
    return { groups, offsets, unreplicated, unreplicatedGroups };
  }
}

/** The default OffsetStore: commits are records in `__consumer_offsets`, durable once the append is. */
export class LogOffsetStore implements OffsetStore {
  readonly kind = 'log';
  private readonly cache = new Map<string, StoredOffset>();
  /**
   * Commits appended but not yet durable. A topic deleted meanwhile tombstones their keys too (the log
   * keeps the tombstones after them) and voids them, so they do not come back into the cache.
   */
  private readonly writing = new Set<{ group: string; topic: string; partitions: number[]; voided: boolean }>();
  /**
   * Offsets (offsetKey) whose latest record is not confirmed by the in-sync replicas: appended here with
   * outcome unknown, or replayed from past the HWM (loadPartition). Until the HWM passes the record a change
   * of leader may still lose it, so a read of one, and a commit below one, get the retriable storage_error
   * rather than an answer or a check against it (docs/architecture.md, "Cluster mode", Coordinators).
   */
  private readonly unconfirmed = new Map<string, Unconfirmed>();

  constructor(
    private readonly log: GroupLog,
    /** Stamps commits (their wall time counts down the offsets retention after a restart: group-expiry.ts). */
    private readonly clock: Pick<Clock, 'now'> = systemClock,
  ) {}

  async open(): Promise<void> {}

  async loadAll(): Promise<StoredOffset[]> {
    this.cache.clear();
    this.unconfirmed.clear();
    for (let p = 0; p < this.log.partitionCount; p++) {
      const { offsets, unreplicated } = await this.log.replay(p);
      for (const [k, v] of offsets) this.cache.set(k, v);
      for (const [k, u] of unreplicated) this.unconfirmed.set(k, u);
    }
    return [...this.cache.values()];
  }

  /**
   * Cluster mode: the offsets of one partition's groups, when this broker takes it over (or reloads it).
   * Those whose latest record lies past the HWM are unconfirmed (unconfirmedIn): the caller must not answer
   * them as committed.
   */
  async loadPartition(partition: number): Promise<StoredOffset[]> {
    const { offsets, unreplicated } = await this.log.replay(partition);
    // The log replayed is the truth from now on, whatever this broker appended while it led before.
    for (const [k, u] of this.unconfirmed) if (this.log.partitionFor(u.group) === partition) this.unconfirmed.delete(k);
    for (const [k, v] of offsets) this.cache.set(k, v);
    for (const [k, u] of unreplicated) this.unconfirmed.set(k, u);
    return [...offsets.values()];
  }

  /** The offsets of a partition's groups not confirmed by the in-sync replicas yet (see `unconfirmed`), a tombstone's included. */
  unconfirmedIn(partition: number): Unconfirmed[] {
    return [...this.unconfirmed].filter(([k, u]) => this.log.partitionFor(u.group) === partition && this.notConfirmed(k)).map(([, u]) => u);
  }

  /** Cluster mode: forgets the offsets of groups whose partition moved to another broker. */
  unloadGroups(groups: Set<string>): void {
    for (const [k, v] of this.cache) if (groups.has(v.group)) this.cache.delete(k);
    for (const [k, u] of this.unconfirmed) if (groups.has(u.group)) this.unconfirmed.delete(k);
  }

  /** Whether the offset cached for `key` may still be lost (see `unconfirmed`). */
  private notConfirmed(key: string): boolean {
    const u = this.unconfirmed.get(key);
    if (u === undefined) return false;
    if (!this.log.replicatedPast(u.group, u.lastOffset)) return true;
    this.unconfirmed.delete(key);
    return false;
  }

  private refuseUnconfirmed(op: string, partition: number): TributaryError {
    return new TributaryError('storage_error', { op, partition, reason: 'the last commit of this offset is not confirmed by the in-sync replicas yet; try again' });
  }

  async commit(group: string, topic: string, entries: OffsetEntry[], opts: { force?: boolean } = {}): Promise<void> {
    checkCommit(group, topic, entries);
    if (entries.length === 0) return;
    if (!opts.force) {
      // Below an offset that may still be lost: neither a regression nor not one yet (refused, not written).
      const unsure = entries.find((e) => e.offset < (this.cache.get(offsetKey(group, topic, e.partition))?.offset ?? 0) && this.notConfirmed(offsetKey(group, topic, e.partition)));
      if (unsure) throw this.refuseUnconfirmed('commit', unsure.partition);
      checkNoRegression(entries, (p) => this.cache.get(offsetKey(group, topic, p))?.offset);
    }
    const ts = this.clock.now();
    const write = { group, topic, partitions: entries.map((e) => e.partition), voided: false };
    this.writing.add(write);
    try {
      await this.log.writeOffsets(group, topic, entries, ts);
    } catch (err) {
      // Written to this leader's log, its replication not confirmed: a replay here reads it (replayJson reads
      // to the log end), so the cache holds it too, marked unconfirmed until the HWM passes it.
      if (outcomeUnknown(err)) this.cached(write, ts, entries, unconfirmedAppend(err));
      throw err;
    } finally {
      this.writing.delete(write);
    }
    this.cached(write, ts, entries);
  }

  private cached(write: { group: string; topic: string; voided: boolean }, ts: number, entries: OffsetEntry[], unconfirmedAt?: number): void {
    if (write.voided) return;
    const { group, topic } = write;
    for (const e of entries) {
      const k = offsetKey(group, topic, e.partition);
      this.cache.set(k, { group, topic, partition: e.partition, offset: e.offset, commitTimestamp: ts });
      // Confirmed (an append after the unconfirmed one was replicated, so that one was too), or not yet.
      if (unconfirmedAt === undefined) this.unconfirmed.delete(k);
      else this.unconfirmed.set(k, { group, topic, partition: e.partition, lastOffset: unconfirmedAt });
    }
  }

  async fetch(group: string, topic: string, partition: number): Promise<number | undefined> {
    checkFetch(group, topic, partition);
    const k = offsetKey(group, topic, partition);
    if (this.notConfirmed(k)) throw this.refuseUnconfirmed('fetch', partition);
    return this.cache.get(k)?.offset;
  }

  /**
   * Tombstones of unknown outcome (written here, their replication not confirmed) delete the offsets from
   * the cache and mark them unconfirmed at the tombstones' append: until the HWM passes it they are
   * refused as an unconfirmed commit is (the log may yet keep the old offset, or drop it), never answered.
   */
  private deleted(group: string, keys: Map<string, { topic: string; partition: number }>, err?: unknown): void {
    const at = err === undefined ? undefined : unconfirmedAppend(err);
    for (const [k, o] of keys) {
      this.cache.delete(k);
      if (at === undefined) this.unconfirmed.delete(k);
      else this.unconfirmed.set(k, { group, topic: o.topic, partition: o.partition, lastOffset: at });
    }
  }

  /** Tombstones for the group's offsets: those cached, and those whose deletion is not confirmed yet (a retry's). */
  async deleteGroup(group: string): Promise<void> {
    checkName('group', group);
    const mine = new Map<string, { topic: string; partition: number }>();
    for (const m of [this.cache, this.unconfirmed]) for (const [k, o] of m) if (o.group === group) mine.set(k, { topic: o.topic, partition: o.partition });
    try {
      await this.log.deleteOffsets(group, [...mine.values()]);
    } catch (err) {
      if (outcomeUnknown(err)) this.deleted(group, mine, err);
      throw err;
    }
    this.deleted(group, mine);
  }

  /**
   * Tombstones, one append per group (its partition), for the cached offsets, those being written and those
   * whose deletion is not confirmed yet; of unknown outcome, as deleteGroup's.
   */
  async deleteTopic(topic: string, groups?: readonly string[]): Promise<void> {
    checkDeleteTopic(topic, groups);
    const only = groups && new Set(groups);
    const picked = (group: string, t: string) => t === topic && (!only || only.has(group));
    const keys = new Map<string, Map<string, { topic: string; partition: number }>>();
    const add = (group: string, partition: number) => {
      let mine = keys.get(group);
      if (!mine) keys.set(group, (mine = new Map()));
      mine.set(offsetKey(group, topic, partition), { topic, partition });
    };
    for (const m of [this.cache, this.unconfirmed]) for (const o of m.values()) if (picked(o.group, o.topic)) add(o.group, o.partition);
    const writes = [...this.writing].filter((w) => picked(w.group, w.topic));
    for (const w of writes) for (const p of w.partitions) add(w.group, p);
    const results = await Promise.allSettled(
      [...keys].map(async ([group, mine]) => {
        try {
          await this.log.deleteOffsets(group, [...mine.values()]);
        } catch (err) {
          if (!outcomeUnknown(err)) throw err;
          // Maybe in the log, after the commits being written: those are gone with it, or lost before it.
          this.deleted(group, mine, err);
          for (const w of writes) if (w.group === group) w.voided = true;
          throw err;
        }
        this.deleted(group, mine);
        for (const w of writes) if (w.group === group) w.voided = true;
      }),
    );
    const failed = results.find((r): r is PromiseRejectedResult => r.status === 'rejected');
    if (failed) throw failed.reason;
  }

  async close(): Promise<void> {}
}

import type client from 'prom-client';
import type { Logger } from '../common/logger.js';
import type { TopicManager } from '../partition/topic-manager.js';
import { type LogOffsetsOf, localLogOffsets } from '../partition/log-offsets.js';
import { TributaryError, invalidParam } from 'tributary-protocol/errors.js';
import { ConsumerGroup, type Member, topicShape } from './group.js';
import { type ClassicGroup, type ClassicSnapshot, isClassicSnapshot } from './classic-group.js';
import { ClassicGroups } from './classic-groups.js';
import { type GroupLog, type GroupSnapshot, LogOffsetStore, notWritten } from './group-log.js';
import { snapshotOf } from './group-snapshot.js';
import { RateLimitedLog } from '../common/rate-limited-log.js';
import { type OffsetEntry, type OffsetStore, type StoredOffset, outcomeUnknown } from './offset-store.js';
import { KeyedLock } from '../common/keyed-lock.js';
import { PartitionOwnership } from '../common/partition-ownership.js';
import { type Clock, systemClock } from '../common/clock.js';
import { Scheduler } from './scheduler.js';
import { type CoordinatorConfig, type GroupContext, requireGroup, requireMember } from './group-context.js';
import { GroupMembership, type JoinRequest, type MemberView, type SyncRequest } from './group-membership.js';
import { Rebalancer } from './rebalance.js';
import { GroupOffsets } from './group-offsets.js';
import { GroupAdmin, type ResetRequest } from './group-admin.js';
import { GroupExpiry } from './group-expiry.js';
import { type MemberStanding, checkGeneration, checkPartition, standingOf } from './member-fencing.js';
import { type StoreWait, waitForStore } from '../common/wait-for-store.js';

export { type CoordinatorConfig, validateId } from './group-context.js';
export type { MemberStanding } from './member-fencing.js';
export type { JoinRequest, MemberView, SyncRequest } from './group-membership.js';

/**
 * The broker-side group coordinator: membership, generations, incremental rebalancing and fenced,
 * monotonic offset commits. Every change to a group runs under that group's lock; waits (join windows,
 * long-poll heartbeats, client-side plans) happen outside it.
 *
 * This class keeps the lifecycle, cluster ownership of `__consumer_offsets` partitions and persistence of
 * group snapshots; the commands are carried out by its parts, which share one GroupContext
 * (group-context.ts): membership (group-membership.ts), timers and generations (rebalance.ts), offsets
 * (group-offsets.ts) and admin (group-admin.ts).
 */
export class GroupCoordinator {
  private readonly groups = new Map<string, ConsumerGroup>();
  private readonly classicGroups = new Map<string, ClassicGroup>();
  /** The Kafka classic-protocol groups (classic-groups.ts), served by the Kafka listener. */
  readonly classic: ClassicGroups;
  private ownership: PartitionOwnership | null = null;
  /**
   * Cluster mode: whether this broker leads a `__consumer_offsets` partition (to reload it after a refused
   * write); undefined while it cannot tell yet (its lease unconfirmed after a pause).
   */
  private leads: ((partition: number) => boolean | undefined) | undefined;
  /** Cluster mode: whether etcd confirmed this broker's lease within its TTL (fences non-log offset stores). */
  private leaseConfirmed?: () => boolean;
  private readonly locks = new KeyedLock();
  /**
   * Standalone: `__consumer_offsets` partitions being reloaded after a refused write. Their groups answer
   * COORDINATOR_LOADING meanwhile: a request must not create a group the replay is about to restore.
   */
  private readonly reloading = new Map<number, object>();
  /** Session expiry, join windows and rebalance timeouts. */
  readonly scheduler: Scheduler;
  /** Every time the coordinator reads and every timer it arms. */
  private readonly clock: Clock;
  private readonly rebalancer: Rebalancer;
  private readonly membership: GroupMembership;
  private readonly offsets: GroupOffsets;
  private readonly admin: GroupAdmin;
  private readonly expiry: GroupExpiry;
  /** Fenced streams of each group, told of every change to it (docs/architecture.md, "Fenced reads"). */
  private readonly watchers = new Map<string, Set<() => void>>();
  private stopped = false;
  /** Storage failures of group writes, which a full disk repeats on every try (docs/operations.md, "A full disk"). */
  private readonly refusedLog = new RateLimitedLog(() => this.deps.logger);

  constructor(
    private readonly deps: {
      topics: TopicManager;
      groupLog: GroupLog;
      offsetStore: OffsetStore;
      config: CoordinatorConfig;
      logger: Logger;
      registry: client.Registry;
      /** Defaults to the real clock; tests pass a fake one. */
      clock?: Clock;
      /**
       * Whether a topic is defined (default: open in `topics`). A cluster broker asks the metadata store,
       * which knows of a topic created elsewhere before its partitions are open here.
       */
      topicExists?: (topic: string) => boolean;
      /** Default: this broker's copies. A cluster broker asks partitions' leaders (broker/partition-offsets.ts). */
      logOffsets?: LogOffsetsOf;
    },
  ) {
    this.clock = deps.clock ?? systemClock;
    this.scheduler = new Scheduler(this.clock);
    const ctx: GroupContext = {
      topics: deps.topics,
      groupLog: deps.groupLog,
      offsetStore: deps.offsetStore,
      get config() {
        return deps.config;
      },
      logger: deps.logger,
      logFailure: (err, fields, msg) => this.refusedLog.failure(err, fields, msg),
      logOffsets: deps.logOffsets ?? ((topic, partition, timestamp) => localLogOffsets(deps.topics.get(topic).partition(partition), timestamp)),
      clock: this.clock,
      scheduler: this.scheduler,
      groups: this.groups,
      classicGroups: this.classicGroups,
      stopped: () => this.stopped,
      withGroup: (groupId, fn) => this.withGroup(groupId, fn),
      withOwnedGroup: (groupId, fn) =>
        this.withGroup(groupId, () => {
          this.checkOwner(groupId);
          return fn();
        }),
      checkOwner: (group) => this.checkOwner(group),
      canAct: () => this.canAct(),
      checkStoreWrite: () => {
        if (this.leaseConfirmed && !this.leaseConfirmed()) {
          throw new TributaryError('COORDINATOR_NOT_AVAILABLE', { reason: "this broker's lease is not confirmed by etcd: a commit to the offset store is not fenced" });
        }
      },
      partitionFor: (group) => this.partitionFor(group),
      persist: (g) => this.persist(g),
      countRebalance: (groupId) => this.rebalancer.rebalances.inc({ group: groupId }),
      expiry: { committed: (group) => this.expiry.committed(group), removed: (group) => this.expiry.forget(group) },
    };
    // Metrics register in this order: the rebalance counter and histogram, then the lag and member gauges.
    this.rebalancer = new Rebalancer(ctx, deps.registry);
    this.membership = new GroupMembership(ctx, this.rebalancer);
    this.offsets = new GroupOffsets(ctx);
    this.admin = new GroupAdmin(ctx, this.offsets, this.rebalancer, deps.registry);
    this.classic = new ClassicGroups(ctx, this.offsets);
    this.expiry = new GroupExpiry(ctx, this.offsets, (id) => this.admin.removeEmpty(id), deps.registry);
  }

  // ---- lifecycle ----

  /**
   * Rebuild every group and offset from the log (and the offset store); the broker is unready until then.
   * An offset store that cannot be reached (retriable storage_error: PostgreSQL down) is retried with
   * backoff until it answers or `signal` aborts; `onStoreUnavailable` hears each failure (the broker
   * logs it and reports it on /ready).
   */
  async start(opts: StoreWait = {}): Promise<void> {
    const now = this.clock.monotonic();
    const snaps: Array<GroupSnapshot | ClassicSnapshot | null> = [];
    for (let p = 0; p < this.deps.groupLog.partitionCount; p++) snaps.push(...(await this.deps.groupLog.replay(p)).groups.values());
    for (const snap of snaps) if (snap) this.restore(snap, now);
    await waitForStore(async () => {
      await this.deps.offsetStore.open();
      const { offsets, unsure } = await this.withoutDeletedTopics(await this.deps.offsetStore.loadAll());
      this.offsets.loaded(offsets, unsure);
      this.expiry.load(snaps, offsets);
    }, opts);
    this.deps.logger.info({ groups: this.groups.size, offsetStore: this.deps.offsetStore.kind }, 'group coordinator loaded');
  }

  async stop(): Promise<void> {
    this.stopped = true;
    this.ownership?.close();
    this.scheduler.stop();
    const r = this.rebalancer;
    for (const set of [...r.wakers.sets(), ...r.windowWaiters.sets(), ...r.planWaiters.sets()]) for (const w of set) w();
    for (const id of [...this.classicGroups.keys()]) this.classic.forget(id, new TributaryError('COORDINATOR_NOT_AVAILABLE', { reason: 'shutting down' }));
    await this.locks.idle();
    await this.deps.offsetStore.close();
  }

  /** The partition of `__consumer_offsets` a group's state lives in. */
  partitionFor(group: string): number {
    return this.deps.groupLog.partitionFor(group);
  }

  // ---- cluster mode: coordinating only the partitions this broker leads ----

  /**
   * Cluster mode: groups are served only for the `__consumer_offsets` partitions this broker leads and has
   * loaded; others get `notCoordinator(partition)` (NOT_COORDINATOR naming the leader), loading ones
   * COORDINATOR_LOADING.
   */
  enableOwnership(
    notCoordinator: (partition: number) => TributaryError,
    offsetsTopicExists: () => boolean,
    leaseHeld?: () => boolean,
    leads?: (partition: number) => boolean | undefined,
    leaseConfirmed?: () => boolean,
  ): void {
    this.ownership = new PartitionOwnership('__consumer_offsets', notCoordinator, offsetsTopicExists, leaseHeld, (partition, err, attempt, delayMs) =>
      this.deps.logger.warn({ err, partition, attempt, delayMs }, 'loading a coordinator partition failed; trying again'),
    );
    this.leads = leads;
    this.leaseConfirmed = leaseConfirmed;
  }

  /** Whether timers may take decisions now (false from a cluster broker's pause until etcd confirms its lease). */
  private canAct(): boolean {
    return this.ownership?.canAct() ?? true;
  }

  /** Whether this broker coordinates the group now (always, standalone). */
  coordinates(group: string): boolean {
    return this.ownership?.owns(() => this.partitionFor(group)) ?? true;
  }

  private checkOwner(group: string): void {
    if (this.reloading.size > 0 && this.reloading.has(this.partitionFor(group))) throw new TributaryError('COORDINATOR_LOADING', { partition: this.partitionFor(group) });
    this.ownership?.check(() => this.partitionFor(group));
    this.deps.groupLog.checkConfirmed(group);
  }

  /**
   * This broker became leader of a `__consumer_offsets` partition: replay it (groups, then offsets) and serve its groups only after
   * (one replayed from past the HWM once the HWM passes it: GroupLog.checkConfirmed). Members get a full session timeout before
   * expiry (restore()), so they rediscover the coordinator and resume with their member ids and generations.
   */
  async loadPartition(partition: number): Promise<void> {
    await this.ownership?.load(partition, async (current) => {
      const groups = await this.replayPartition(partition, current);
      if (current()) this.deps.logger.info({ partition, groups }, 'took over coordinator partition');
    });
  }

  /**
   * Groups and offsets of one `__consumer_offsets` partition from the log (and the offset store), applied at once after every read and only if
   * `current()` still holds then: a replay overtaken by a newer one (two reloads, leadership lost and back) read state older than commits acknowledged since.
   */
  private async replayPartition(partition: number, current: () => boolean): Promise<number> {
    const { groups, unreplicatedGroups } = await this.deps.groupLog.replay(partition);
    const store = this.deps.offsetStore;
    const loaded =
      store instanceof LogOffsetStore ? await store.loadPartition(partition) : (await store.loadAll({ partition })).filter((x) => this.partitionFor(x.group) === partition);
    const { offsets, unsure } = await this.withoutDeletedTopics(loaded);
    if (!current()) return 0;
    const now = this.clock.monotonic();
    for (const snap of groups.values()) if (snap) this.restore(snap, now);
    this.deps.groupLog.loadedUnconfirmed(unreplicatedGroups);
    this.offsets.loaded(offsets, store instanceof LogOffsetStore ? [...unsure, ...store.unconfirmedIn(partition)] : unsure);
    this.expiry.load(groups.values(), offsets);
    return groups.size;
  }

  /**
   * Loaded offsets of topics that no longer exist are a deletion this coordinator did not carry out (the group's partition was led
   * elsewhere, or loading, or the store failed): deleted now, as then. Best effort: offsets the store fails to delete stay loaded, as
   * the store still has them, for the next load; `unsure` if it may have deleted them (outcomeUnknown: not answered until read back).
   */
  private async withoutDeletedTopics(offsets: StoredOffset[]): Promise<{ offsets: StoredOffset[]; unsure: StoredOffset[] }> {
    const exists = this.deps.topicExists ?? ((t: string) => this.deps.topics.tryGet(t) !== undefined);
    const orphans = new Map<string, Set<string>>();
    for (const o of offsets) {
      if (exists(o.topic)) continue;
      let groups = orphans.get(o.topic);
      if (!groups) orphans.set(o.topic, (groups = new Set()));
      groups.add(o.group);
    }
    const [gone, unsure] = [new Set<string>(), [] as StoredOffset[]];
    for (const [topic, groups] of orphans) {
      try {
        await this.deps.offsetStore.deleteTopic(topic, [...groups]);
        gone.add(topic);
      } catch (err) {
        if (outcomeUnknown(err)) unsure.push(...offsets.filter((o) => o.topic === topic && groups.has(o.group)));
        this.deps.logger.warn({ err, topic }, 'deleting the committed offsets of a deleted topic failed; kept until the next load');
      }
    }
    if (gone.size > 0) this.deps.logger.info({ topics: [...gone] }, 'deleted the committed offsets of topics deleted meanwhile');
    return { offsets: offsets.filter((o) => !gone.has(o.topic)), unsure };
  }

  /** Leadership of the partition moved away: forget its groups (their new coordinator replays them). */
  unloadPartition(partition: number): void {
    if (!this.ownership) return;
    this.ownership.unload(partition);
    this.dropPartition(partition);
    // The lead moved: the transactions holding offsets of these groups end at the new coordinator.
    this.offsets.forgetPending((group) => this.partitionFor(group) === partition);
  }

  /** Forgets the groups and offsets of one `__consumer_offsets` partition. */
  private dropPartition(partition: number): void {
    const gone = new Set<string>();
    for (const g of [...this.groups.values()]) {
      if (this.partitionFor(g.groupId) !== partition) continue;
      for (const m of g.members.values()) {
        this.scheduler.cancel(`expire:${g.groupId}:${m.memberId}`);
        this.scheduler.cancel(`rebalance:${g.groupId}:${m.memberId}`);
      }
      this.groups.delete(g.groupId);
      gone.add(g.groupId);
      this.notifyWatchers(g.groupId);
    }
    for (const id of [...this.classicGroups.keys()]) {
      if (this.partitionFor(id) !== partition) continue;
      this.classic.forget(id, new TributaryError('NOT_COORDINATOR', { partition }));
      gone.add(id);
    }
    for (const name of this.offsets.groupsWithOffsets()) if (this.partitionFor(name) === partition) gone.add(name);
    for (const name of gone) this.offsets.forget(name);
    this.expiry.forgetWhere((group) => this.partitionFor(group) === partition);
    this.deps.groupLog.forgetWritten((group) => this.partitionFor(group) === partition);
    if (this.deps.offsetStore instanceof LogOffsetStore) this.deps.offsetStore.unloadGroups(gone);
  }

  /** Cluster mode: opens the offset store (retried as in start()), loading nothing: partitions load as they are led. */
  async startOwned(opts: StoreWait = {}): Promise<void> {
    await waitForStore(() => this.deps.offsetStore.open(), opts);
  }

  /** A group as its snapshot in the log has it, its timers armed again. */
  private restore(s: GroupSnapshot | ClassicSnapshot, now: number): void {
    this.deps.groupLog.loaded(s);
    if (isClassicSnapshot(s)) {
      this.classic.restore(s);
      return;
    }
    const g = new ConsumerGroup(s.group, s.topic, s.assignor, s.protocol);
    g.generation = s.generation;
    g.leaderId = s.leader ?? undefined;
    g.planGeneration = s.planGeneration;
    g.history = s.history ?? [];
    g.topicShape = s.topicShape ?? (s.generation > 0 ? topicShape(this.deps.topics.tryGet(s.topic)) : undefined);
    g.emptiedAt = s.emptiedAt;
    for (const ms of s.members) {
      // A coordinator that just loaded a group gives every member a full session before expiring it.
      const m: Member = {
        memberId: ms.id,
        clientId: ms.clientId,
        instanceId: ms.instance ?? undefined,
        host: ms.host,
        sessionTimeoutMs: ms.sessionTimeoutMs,
        rebalanceTimeoutMs: ms.rebalanceTimeoutMs,
        lastHeartbeat: now,
        generation: ms.generation,
        owned: new Set(ms.owned),
        target: ms.target,
        needsRejoin: ms.needsRejoin,
        notifiedAt: now,
        awaitingSync: false,
        joinedAt: now,
        reset: new Set(ms.reset ?? []),
      };
      g.members.set(m.memberId, m);
      if (m.instanceId) g.instances.set(m.instanceId, m.memberId);
      for (const p of m.owned) g.owners.set(p, m.memberId);
      this.rebalancer.scheduleExpiry(g, m);
      if (m.needsRejoin) this.rebalancer.scheduleRebalanceTimeout(g, m);
    }
    this.groups.set(g.groupId, g);
    // A join window that was open at the crash closes now, one window after the restart.
    g.pendingCauses = s.pendingCauses ?? [];
    if (g.pendingCauses.length > 0) this.rebalancer.scheduleWindow(g);
  }

  // ---- persistence ----

  /**
   * Writes the group's snapshot. The change is already in memory (the lock keeps anyone from seeing it
   * in between), so a refused or failed write must not leave it there: memory would then differ from
   * the log, and a paused coordinator resumed after losing its partition would answer from a state no
   * one else has. The partition is dropped and, if still led here, replayed from the log, which holds
   * exactly what was accepted (a write whose outcome is unknown included); a write known not to be in the
   * log (revert()) undoes the group alone.
   */
  private async persist(g: ConsumerGroup | ClassicGroup): Promise<void> {
    // Every change goes through here, before it is durable or answered: a fenced stream stops serving a
    // partition its member lost before the new owner can hear that it may read it.
    this.notifyWatchers(g.groupId);
    // An emptied group's time goes into its snapshot; a failed write reloads (or reverts) it, waits and all.
    this.expiry.persisting(g);
    try {
      await this.deps.groupLog.writeGroup(g instanceof ConsumerGroup ? snapshotOf(g) : g.snapshot());
    } catch (err) {
      if (notWritten(err)) this.revert(g, err);
      else this.resync(this.partitionFor(g.groupId), err);
      throw err;
    }
  }

  /** Refused, nothing written (a full disk: docs/operations.md): no replay, no COORDINATOR_LOADING. An empty group's retention waits from now. */
  private revert(g: ConsumerGroup | ClassicGroup, err: unknown): void {
    const id = g.groupId;
    const at = { partition: this.partitionFor(id), reason: (err as TributaryError).fields.reason };
    this.refusedLog.warn(`group-write:${at.partition}`, at, 'a group change was not written (refused by the log); the group keeps its last written state');
    if (g instanceof ConsumerGroup) g.refused = err as Error;
    if (this.groups.get(id) === g) {
      for (const m of g.members.values()) for (const k of ['expire', 'rebalance']) this.scheduler.cancel(`${k}:${id}:${m.memberId}`);
      this.scheduler.cancel(`window:${id}`);
      this.groups.delete(id);
      this.notifyWatchers(id);
    }
    // Kafka members take only coordinator errors as retriable (classic-membership.ts asCoordinatorError).
    this.classic.forget(id, new TributaryError('NOT_COORDINATOR', { reason: 'storage_error' }));
    const s = this.deps.groupLog.lastWritten(id);
    if (s) this.restore(s, this.clock.monotonic());
    if ((this.groups.get(id)?.members.size ?? this.classicGroups.get(id)?.members.size ?? 0) > 0) this.expiry.forget(id);
    else this.expiry.committed(id);
  }

  private resync(partition: number, cause: unknown): void {
    this.deps.logger.warn({ err: cause, partition }, 'a group change was not accepted by the log; reloading the partition from it');
    if (this.ownership) {
      // Still led here (a refused write): the transactions' pending offsets stay (they end here).
      this.ownership.unload(partition);
      this.dropPartition(partition);
      // Leadership changes load and unload partitions by themselves; a write refused while the lead stayed
      // here (a pause shorter than the lease, an fsync error) needs a reload of its own.
      const reload = () => {
        if (this.stopped || !this.ownership || this.ownership.has(partition)) return;
        const leads = this.leads?.(partition);
        if (leads === undefined) this.clock.setTimeout(reload, 250).unref();
        else if (leads) this.loadPartition(partition).catch((err: unknown) => this.deps.logger.error({ err, partition }, 'reloading a coordinator partition failed'));
      };
      reload();
      return;
    }
    // Standalone: the same, requests for its groups held off (COORDINATOR_LOADING) until the replay is done.
    // Two refused writes reload twice: only the last replay applies, and the groups wait for it.
    const token = {};
    const current = () => this.reloading.get(partition) === token;
    this.reloading.set(partition, token);
    this.dropPartition(partition);
    // A replay that fails is tried again: serving the groups without their offsets would reset consumers.
    const attempt = (): void => {
      this.replayPartition(partition, current).then(
        () => {
          if (current()) this.reloading.delete(partition);
        },
        (err: unknown) => {
          this.deps.logger.error({ err, partition }, 'reloading a coordinator partition failed; trying again');
          if (current() && !this.stopped) this.clock.setTimeout(attempt, 1000).unref();
        },
      );
    };
    attempt();
  }

  // ---- locking ----

  private withGroup<T>(groupId: string, fn: () => Promise<T> | T): Promise<T> {
    return this.locks.run(groupId, () => {
      if (this.stopped) throw new TributaryError('shutting_down');
      return fn();
    });
  }

  // ---- commands: membership (group-membership.ts) ----

  join(req: JoinRequest): Promise<MemberView> {
    return this.membership.join(req);
  }

  sync(req: SyncRequest): Promise<MemberView> {
    return this.membership.sync(req);
  }

  heartbeat(req: { topic: string; group: string; member: string; generation: number; waitMs?: number; afterWait?: () => void }, signal?: AbortSignal): Promise<{ generation: number; memberId: string }> {
    return this.membership.heartbeat(req, signal);
  }

  leave(req: { topic: string; group: string; member: string }): Promise<void> {
    return this.membership.leave(req);
  }

  // ---- commands: offsets (group-offsets.ts) ----

  fetchOffset(group: string, topic: string, partition: number): { offset: number; committed: boolean } {
    return this.offsets.fetchOffset(group, topic, partition);
  }

  /** For CONSUME with a group: the committed offset wins over a lower requested one; none while not known (GroupOffsets.knownOffset). */
  committedOffset(group: string, topic: string, partition: number): number | undefined {
    const k = this.offsets.knownOffset(group, topic, partition);
    return k.known ? k.offset : undefined;
  }

  commit(req: { topic: string; group: string; member: string; generation: number; entries: OffsetEntry[] }): Promise<number> {
    return this.offsets.commit(req);
  }

  /**
   * A topic was deleted: the groups coordinated here forget their committed offsets of it, in the offset
   * store and then in memory, as Kafka does (docs/operations.md, "Deleting a topic"). Each group under its
   * lock: a commit accepted before is deleted with the rest; one checked after finds no topic
   * (topic_not_found) or a re-created one, and commits to that. Rejects with the first group's failure,
   * after trying every group (a group that failed keeps its offsets, in memory as in the store).
   */
  async deleteTopicOffsets(topic: string): Promise<void> {
    const groups = [...this.offsets.groupsWithTopic(topic)].filter((g) => this.coordinates(g));
    const results = await Promise.allSettled(
      groups.map((group) =>
        this.withGroup(group, async () => {
          // Its partition may have moved while the lock was awaited: the new coordinator deletes them.
          if (!this.coordinates(group)) return;
          await this.offsets.deleteTopic(group, topic);
        }),
      ),
    );
    const failed = results.find((r): r is PromiseRejectedResult => r.status === 'rejected');
    if (failed) throw failed.reason;
    if (groups.length > 0) this.deps.logger.info({ topic, groups: groups.length }, 'deleted the committed offsets of a deleted topic');
  }

  // ---- offsets of transactions (src/txn) ----

  /** SEND_OFFSETS_TO_TXN: checked as a commit, then pending until the transaction ends. */
  stageTxnOffsets(txn: string, req: { topic: string; group: string; member: string; generation: number; entries: OffsetEntry[] }): Promise<void> {
    return this.offsets.stageTxnOffsets(txn, req);
  }

  /** TxnOffsetCommit: as stageTxnOffsets, the member checked by `checkMember` (a Kafka classic group's check). */
  stageTxnOffsetsChecked(txn: string, req: { topic: string; group: string; entries: OffsetEntry[] }, checkMember: () => void): Promise<void> {
    return this.offsets.stageChecked(txn, req, checkMember);
  }

  /** Pending transaction offsets restored at start (the transaction was open before a restart). */
  markPending(txn: string, group: string, topic: string, partitions: number[]): void {
    this.offsets.markPending(txn, group, topic, partitions);
  }

  /** The transaction ended (aborted, or its offsets applied): the partitions are stable again. */
  clearPending(txn: string, group: string, topic: string, partitions: number[]): void {
    this.offsets.clearPending(txn, group, topic, partitions);
  }

  /** A committed transaction's offsets, applied without fencing and never moving an offset back. */
  applyTxnOffsets(txn: string, group: string, topic: string, entries: OffsetEntry[]): Promise<void> {
    return this.offsets.applyTxnOffsets(txn, group, topic, entries);
  }

  // ---- fenced reads (member-fencing.ts; docs/protocol.md, "Fenced reads") ----

  /**
   * A member's standing for reads of `topic`, refused as its commits would be (unknown group or member,
   * a fenced static id, another topic), and how long its session has left on this coordinator's clock:
   * the bound of a cluster leader's cached copy (cluster/member-leases.ts).
   */
  memberStanding(group: string, topic: string, member: string): { standing: MemberStanding; sessionLeftMs: number } {
    this.checkOwner(group);
    const g = requireGroup(this.groups, group);
    if (g.topic !== topic) throw invalidParam('topic', `group ${group} consumes topic ${g.topic}`);
    const m = requireMember(g, member);
    return { standing: standingOf(g, m, this.deps.topics.tryGet(topic)?.def.topicId), sessionLeftMs: m.lastHeartbeat + m.sessionTimeoutMs - this.clock.monotonic() };
  }

  /**
   * CONSUME/STREAM with a member: served only if a commit of the partition by it would pass the fence. Without a generation (a running
   * stream, checked at its start) the member's rejoins do not matter, only whether it still owns the partition.
   */
  checkRead(req: { group: string; topic: string; member: string; generation?: number; partition: number }): void {
    const { standing } = this.memberStanding(req.group, req.topic, req.member);
    if (req.generation !== undefined) checkGeneration(standing, req.generation);
    checkPartition(standing, req.partition);
  }

  /**
   * Calls `fn` on every change to the group (membership, ownership, resets; its partition given up) until
   * the returned function is called. A fenced STREAM checks its member again then, so it ends the moment
   * its partition moves; `fn` runs synchronously inside the change, so it must only wake something.
   */
  watchGroup(group: string, fn: () => void): () => void {
    let set = this.watchers.get(group);
    if (!set) this.watchers.set(group, (set = new Set()));
    set.add(fn);
    return () => {
      set.delete(fn);
      if (set.size === 0 && this.watchers.get(group) === set) this.watchers.delete(group);
    };
  }

  private notifyWatchers(group: string): void {
    const set = this.watchers.get(group);
    if (set) for (const fn of [...set]) fn();
  }

  // ---- commands: admin (group-admin.ts) ----

  listGroups(): string[] {
    return this.admin.listGroups();
  }

  deleteGroup(groupId: string): Promise<void> {
    return this.admin.deleteGroup(groupId);
  }

  /** Admin reset of an inactive group's offsets (may move them backwards). */
  resetOffsets(req: ResetRequest): Promise<OffsetEntry[]> {
    return this.admin.resetOffsets(req);
  }

  /** GROUP_STATUS with this broker's copies of the log ends (tests); statusWithLogEnds for clients. */
  status(groupId: string): Record<string, unknown> {
    return this.admin.status(groupId);
  }

  statusWithLogEnds(groupId: string): Promise<Record<string, unknown>> {
    return this.admin.statusWithLogEnds(groupId);
  }
}

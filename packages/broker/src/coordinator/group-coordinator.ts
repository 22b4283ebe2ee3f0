import { randomUUID } from 'node:crypto';
import client from 'prom-client';
import type { Logger } from '../common/logger.js';
import type { TopicManager } from '../partition/topic-manager.js';
import { TributaryError, invalidParam } from 'tributary-protocol/errors.js';
import { type Assignment, type AssignorName, assign, isAssignorName, validatePlan } from 'tributary-protocol/assignors.js';
import { type AssignmentProtocol, type ChangeCause, type ChangeReason, ConsumerGroup, type Member } from './group.js';
import { type GroupLog, type GroupSnapshot, LogOffsetStore } from './group-log.js';
import type { OffsetEntry, OffsetStore } from './offset-store.js';
import { KeyedLock } from '../common/keyed-lock.js';
import { PartitionOwnership } from '../common/partition-ownership.js';
import { type Clock, systemClock } from '../common/clock.js';
import { Scheduler } from './scheduler.js';

export interface CoordinatorConfig {
  /** Joins and leaves that arrive within this window share one new generation. */
  joinWindowMs: number;
  defaultSessionTimeoutMs: number;
  minSessionTimeoutMs: number;
  maxSessionTimeoutMs: number;
  defaultRebalanceTimeoutMs: number;
  defaultAssignor: AssignorName;
}

export interface JoinRequest {
  topic: string;
  group: string;
  member: string;
  generation?: number;
  sessionTimeoutMs?: number;
  rebalanceTimeoutMs?: number;
  assignor?: string;
  instance?: string;
  protocol?: AssignmentProtocol;
  host: string;
}

export interface MemberView {
  generation: number;
  memberId: string;
  leader: string;
  assignments: number[];
  protocol: AssignmentProtocol;
  /** Client-side assignment, to the leader only: every member and what it owns. */
  members?: Array<{ memberId: string; owned: number[] }>;
}

/** `[a-zA-Z0-9._-]`, 1-255 characters: ids travel unquoted in replies and plans. */
const ID_RE = /^[A-Za-z0-9._-]{1,255}$/;

export function validateId(param: string, v: string): void {
  if (!ID_RE.test(v)) throw invalidParam(param, v.length === 0 ? 'must not be empty' : v.length > 255 ? 'longer than 255 characters' : 'only letters, digits, ".", "_" and "-" are allowed');
}

type OffsetMap = Map<string, Map<string, Map<number, number>>>;

function getOffset(m: OffsetMap, group: string, topic: string, partition: number): number | undefined {
  return m.get(group)?.get(topic)?.get(partition);
}

function setOffset(m: OffsetMap, group: string, topic: string, partition: number, offset: number): void {
  let byTopic = m.get(group);
  if (!byTopic) m.set(group, (byTopic = new Map()));
  let byPart = byTopic.get(topic);
  if (!byPart) byTopic.set(topic, (byPart = new Map()));
  byPart.set(partition, offset);
}

function pendingKey(group: string, topic: string, partition: number): string {
  return `${group}\u0000${topic}\u0000${partition}`;
}

/**
 * The broker-side group coordinator: membership, generations, incremental rebalancing and fenced,
 * monotonic offset commits. Every change to a group runs under that group's lock; waits (join windows,
 * long-poll heartbeats, client-side plans) happen outside it.
 */
export class GroupCoordinator {
  private readonly groups = new Map<string, ConsumerGroup>();
  /** Durable committed offsets: what FETCH_OFFSET and CONSUME see. */
  private readonly committed: OffsetMap = new Map();
  /** Highest offset accepted per partition, durable or in flight: what monotonicity is checked against. */
  private readonly reserved: OffsetMap = new Map();
  /** Partitions (pendingKey) with offsets sent to transactions that have not ended: the transactional ids. */
  private readonly pending = new Map<string, Set<string>>();
  private ownership: PartitionOwnership | null = null;
  /**
   * Cluster mode: whether this broker leads a `__consumer_offsets` partition (to reload it after a refused
   * write); undefined while it cannot tell yet (its lease unconfirmed after a pause).
   */
  private leads: ((partition: number) => boolean | undefined) | undefined;
  private readonly locks = new KeyedLock();
  private readonly wakers = new Map<string, Set<() => void>>();
  private readonly windowWaiters = new Map<string, Set<() => void>>();
  private readonly planWaiters = new Map<string, Set<() => void>>();
  /** Session expiry, join windows and rebalance timeouts. */
  readonly scheduler: Scheduler;
  /** Every time the coordinator reads and every timer it arms. */
  private readonly clock: Clock;
  private readonly rebalances: client.Counter;
  private readonly rebalanceSeconds: client.Histogram;
  private stopped = false;

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
    },
  ) {
    this.clock = deps.clock ?? systemClock;
    this.scheduler = new Scheduler(this.clock);
    const registry = deps.registry;
    this.rebalances = new client.Counter({ name: 'tributary_group_rebalances_total', help: 'New generations by group', labelNames: ['group'], registers: [registry] });
    this.rebalanceSeconds = new client.Histogram({
      name: 'tributary_group_rebalance_seconds',
      help: 'Time from a membership change to every member synced and every partition owned',
      buckets: [0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60],
      registers: [registry],
    });
    const self = this;
    new client.Gauge({
      name: 'tributary_group_lag',
      help: 'Records between the committed offset and the last stable offset, per group partition',
      labelNames: ['group', 'topic', 'partition'],
      registers: [registry],
      collect() {
        this.reset();
        for (const row of self.lagRows()) this.set({ group: row.group, topic: row.topic, partition: String(row.partition) }, row.lag);
      },
    });
    new client.Gauge({
      name: 'tributary_group_members',
      help: 'Live members per group',
      labelNames: ['group'],
      registers: [registry],
      collect() {
        this.reset();
        for (const g of self.groups.values()) if (!g.deleted) this.set({ group: g.groupId }, g.members.size);
      },
    });
  }

  private get config(): CoordinatorConfig {
    return this.deps.config;
  }

  // ---- lifecycle ----

  /** Rebuild every group and offset from the log (and the offset store); the broker is unready until then. */
  async start(): Promise<void> {
    const now = this.clock.now();
    for (let p = 0; p < this.deps.groupLog.partitionCount; p++) {
      const { groups } = await this.deps.groupLog.replay(p);
      for (const snap of groups.values()) if (snap) this.restore(snap, now);
    }
    await this.deps.offsetStore.open();
    for (const o of await this.deps.offsetStore.loadAll()) {
      setOffset(this.committed, o.group, o.topic, o.partition, o.offset);
      setOffset(this.reserved, o.group, o.topic, o.partition, o.offset);
    }
    this.deps.logger.info({ groups: this.groups.size, offsetStore: this.deps.offsetStore.kind }, 'group coordinator loaded');
  }

  async stop(): Promise<void> {
    this.stopped = true;
    this.scheduler.stop();
    for (const set of [...this.wakers.values(), ...this.windowWaiters.values(), ...this.planWaiters.values()]) for (const w of set) w();
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
  ): void {
    this.ownership = new PartitionOwnership('__consumer_offsets', notCoordinator, offsetsTopicExists, leaseHeld);
    this.leads = leads;
  }

  /** Whether timers may take decisions now (false while a cluster broker's lease is unconfirmed). */
  private canAct(): boolean {
    return this.ownership?.canAct() ?? true;
  }

  /** Whether this broker coordinates the group now (always, standalone). */
  coordinates(group: string): boolean {
    return this.ownership?.owns(() => this.partitionFor(group)) ?? true;
  }

  private checkOwner(group: string): void {
    this.ownership?.check(() => this.partitionFor(group));
  }

  /**
   * This broker became leader of a `__consumer_offsets` partition: replay it (groups, then offsets) and
   * serve its groups only after. Members get a full session timeout before expiry (restore()), so they
   * rediscover the coordinator and resume with their member ids and generations.
   */
  async loadPartition(partition: number): Promise<void> {
    await this.ownership?.load(partition, async () => {
      const groups = await this.replayPartition(partition);
      this.deps.logger.info({ partition, groups }, 'took over coordinator partition');
    });
  }

  /** Groups and offsets of one `__consumer_offsets` partition from the log (and the offset store). */
  private async replayPartition(partition: number): Promise<number> {
    const now = this.clock.now();
    const { groups } = await this.deps.groupLog.replay(partition);
    for (const snap of groups.values()) if (snap) this.restore(snap, now);
    const store = this.deps.offsetStore;
    const offsets =
      store instanceof LogOffsetStore ? await store.loadPartition(partition) : (await store.loadAll()).filter((x) => this.partitionFor(x.group) === partition);
    for (const x of offsets) {
      setOffset(this.committed, x.group, x.topic, x.partition, x.offset);
      setOffset(this.reserved, x.group, x.topic, x.partition, x.offset);
    }
    return groups.size;
  }

  /** Leadership of the partition moved away: forget its groups (their new coordinator replays them). */
  unloadPartition(partition: number): void {
    if (!this.ownership) return;
    this.ownership.unload(partition);
    this.dropPartition(partition);
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
    }
    for (const name of [...this.committed.keys()]) if (this.partitionFor(name) === partition) gone.add(name);
    for (const name of gone) {
      this.committed.delete(name);
      this.reserved.delete(name);
    }
    if (this.deps.offsetStore instanceof LogOffsetStore) this.deps.offsetStore.unloadGroups(gone);
  }

  /** Cluster mode: opens the offset store without loading anything (partitions load as they are led). */
  async startOwned(): Promise<void> {
    await this.deps.offsetStore.open();
  }

  private restore(s: GroupSnapshot, now: number): void {
    const g = new ConsumerGroup(s.group, s.topic, s.assignor, s.protocol);
    g.generation = s.generation;
    g.leaderId = s.leader ?? undefined;
    g.planGeneration = s.planGeneration;
    g.history = s.history ?? [];
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
      };
      g.members.set(m.memberId, m);
      if (m.instanceId) g.instances.set(m.instanceId, m.memberId);
      for (const p of m.owned) g.owners.set(p, m.memberId);
      this.scheduleExpiry(g, m);
      if (m.needsRejoin) this.scheduleRebalanceTimeout(g, m);
    }
    this.groups.set(g.groupId, g);
    // A join window that was open at the crash closes now, one window after the restart.
    g.pendingCauses = s.pendingCauses ?? [];
    if (g.pendingCauses.length > 0) this.scheduleWindow(g);
  }

  private snapshot(g: ConsumerGroup): GroupSnapshot {
    return {
      group: g.groupId,
      topic: g.topic,
      generation: g.generation,
      leader: g.leaderId ?? null,
      assignor: g.assignor,
      protocol: g.protocol,
      planGeneration: g.planGeneration,
      members: [...g.members.values()].map((m) => ({
        id: m.memberId,
        clientId: m.clientId,
        instance: m.instanceId ?? null,
        host: m.host,
        sessionTimeoutMs: m.sessionTimeoutMs,
        rebalanceTimeoutMs: m.rebalanceTimeoutMs,
        generation: m.generation,
        owned: [...m.owned].sort((a, b) => a - b),
        target: m.target,
        needsRejoin: m.needsRejoin,
      })),
      history: g.history,
      pendingCauses: g.pendingCauses,
    };
  }

  /**
   * Writes the group's snapshot. The change is already in memory (the lock keeps anyone from seeing it
   * in between), so a refused or failed write must not leave it there: memory would then differ from
   * the log, and a paused coordinator resumed after losing its partition would answer from a state no
   * one else has. The partition is dropped and, if still led here, replayed from the log, which holds
   * exactly what was accepted (a write whose outcome is unknown included).
   */
  private async persist(g: ConsumerGroup): Promise<void> {
    try {
      await this.deps.groupLog.writeGroup(this.snapshot(g));
    } catch (err) {
      this.resync(this.partitionFor(g.groupId), err);
      throw err;
    }
  }

  private resync(partition: number, cause: unknown): void {
    this.deps.logger.warn({ err: cause, partition }, 'a group change was not accepted by the log; reloading the partition from it');
    if (this.ownership) {
      this.unloadPartition(partition);
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
    // Standalone: the same, without an ownership to hold requests meanwhile (they see group_not_found).
    this.dropPartition(partition);
    this.replayPartition(partition).catch((err: unknown) => this.deps.logger.error({ err, partition }, 'reloading a coordinator partition failed'));
  }

  // ---- locking and waiting ----

  private withGroup<T>(groupId: string, fn: () => Promise<T> | T): Promise<T> {
    return this.locks.run(groupId, () => {
      if (this.stopped) throw new TributaryError('shutting_down');
      return fn();
    });
  }

  private wait(registry: Map<string, Set<() => void>>, key: string, timeoutMs: number, signal?: AbortSignal): Promise<void> {
    if (timeoutMs <= 0 || this.stopped || signal?.aborted) return Promise.resolve();
    return new Promise<void>((resolve) => {
      let set = registry.get(key);
      if (!set) registry.set(key, (set = new Set()));
      const done = () => {
        this.clock.clearTimeout(timer);
        signal?.removeEventListener('abort', done);
        set!.delete(done);
        if (set!.size === 0 && registry.get(key) === set) registry.delete(key);
        resolve();
      };
      const timer = this.clock.setTimeout(done, timeoutMs);
      signal?.addEventListener('abort', done, { once: true });
      set.add(done);
    });
  }

  private wakeAll(registry: Map<string, Set<() => void>>, key: string): void {
    const set = registry.get(key);
    if (set) for (const w of [...set]) w();
  }

  // ---- timers ----

  private scheduleExpiry(g: ConsumerGroup, m: Member): void {
    const key = `expire:${g.groupId}:${m.memberId}`;
    this.scheduler.schedule(key, m.lastHeartbeat + m.sessionTimeoutMs, () => {
      if (!this.canAct()) {
        // This coordinator was paused (its members could not reach it): once its lease is confirmed they
        // get a full session again, as after a failover.
        m.lastHeartbeat = this.clock.now();
        this.scheduleExpiry(g, m);
        return;
      }
      void this.withGroup(g.groupId, async () => {
        const cur = g.members.get(m.memberId);
        if (cur !== m || this.groups.get(g.groupId) !== g) return;
        const late = this.clock.now() - (m.lastHeartbeat + m.sessionTimeoutMs);
        if (late < 0) {
          this.scheduleExpiry(g, m);
          return;
        }
        this.deps.logger.info({ group: g.groupId, member: m.memberId, missedByMs: late }, 'member session expired');
        await this.removeMember(g, m, 'expired', late);
      }).catch((err) => this.deps.logger.error({ err, group: g.groupId }, 'session expiry failed'));
    });
  }

  private scheduleRebalanceTimeout(g: ConsumerGroup, m: Member): void {
    const key = `rebalance:${g.groupId}:${m.memberId}`;
    const notifiedAt = m.notifiedAt;
    this.scheduler.schedule(key, notifiedAt + m.rebalanceTimeoutMs, () => {
      if (!this.canAct()) {
        m.notifiedAt = this.clock.now();
        this.scheduleRebalanceTimeout(g, m);
        return;
      }
      void this.withGroup(g.groupId, async () => {
        if (g.members.get(m.memberId) !== m || m.notifiedAt !== notifiedAt) return;
        if (!m.needsRejoin && !m.awaitingSync) return;
        this.deps.logger.info({ group: g.groupId, member: m.memberId }, 'member missed the rebalance timeout');
        await this.removeMember(g, m, 'rebalance_timeout');
      }).catch((err) => this.deps.logger.error({ err, group: g.groupId }, 'rebalance timeout failed'));
    });
  }

  private scheduleWindow(g: ConsumerGroup): void {
    const key = `window:${g.groupId}`;
    if (g.rebalanceStartedAt === 0) g.rebalanceStartedAt = this.clock.now();
    if (this.scheduler.has(key)) return;
    this.scheduler.schedule(key, this.clock.now() + this.config.joinWindowMs, () => {
      if (!this.canAct()) {
        this.scheduler.cancel(key);
        this.scheduleWindow(g);
        return;
      }
      void this.withGroup(g.groupId, () => this.rebalance(g)).catch((err) => this.deps.logger.error({ err, group: g.groupId }, 'rebalance failed'));
    });
  }

  // ---- rebalancing ----

  private notify(g: ConsumerGroup, m: Member, now: number): void {
    m.needsRejoin = true;
    m.notifiedAt = now;
    this.scheduleRebalanceTimeout(g, m);
    this.wakeAll(this.wakers, m.memberId);
  }

  /** Close the join window: one new generation for every change batched in it, new targets, notify. */
  private async rebalance(g: ConsumerGroup): Promise<void> {
    if (g.pendingCauses.length === 0 || this.groups.get(g.groupId) !== g) return;
    const reasons = g.pendingCauses;
    g.pendingCauses = [];
    const now = this.clock.now();
    g.generation++;
    const joined = new Set(reasons.filter((r) => r.cause === 'join').map((r) => r.member));
    const topic = this.deps.topics.tryGet(g.topic);
    const partitions = topic ? topic.partitions.length : 0;
    g.clampToPartitions(partitions);
    if (g.protocol === 'server') this.applyPlan(g, assign(g.assignor as AssignorName, this.assignmentInput(g, partitions)));
    for (const m of g.members.values()) {
      if (joined.has(m.memberId)) {
        m.generation = g.generation;
        m.awaitingSync = true;
        m.notifiedAt = now;
        this.scheduleRebalanceTimeout(g, m);
      } else {
        this.notify(g, m, now);
      }
    }
    g.recordChange({ generation: g.generation, reasons, at: g.rebalanceStartedAt || now });
    this.rebalances.inc({ group: g.groupId });
    this.deps.logger.info({ group: g.groupId, generation: g.generation, reasons, members: g.members.size }, 'new generation');
    this.checkSettled(g);
    await this.persist(g);
    this.wakeAll(this.windowWaiters, g.groupId);
  }

  private assignmentInput(g: ConsumerGroup, partitions: number) {
    return {
      members: [...g.members.values()].map((m) => ({
        memberId: m.memberId,
        topics: [g.topic],
        owned: [...m.owned].map((p) => ({ topic: g.topic, partition: p })),
        instanceId: m.instanceId,
      })),
      partitions: { [g.topic]: partitions },
    };
  }

  private applyPlan(g: ConsumerGroup, plan: Assignment): void {
    for (const m of g.members.values()) m.target = (plan.get(m.memberId) ?? []).map((tp) => tp.partition).sort((a, b) => a - b);
  }

  private checkSettled(g: ConsumerGroup): void {
    if (g.rebalanceStartedAt === 0 || g.pendingCauses.length > 0 || !g.isSettled()) return;
    const ms = this.clock.now() - g.rebalanceStartedAt;
    g.rebalanceStartedAt = 0;
    const last = g.history[g.history.length - 1];
    if (last && last.generation === g.generation) last.rebalanceMs = ms;
    this.rebalanceSeconds.observe(ms / 1000);
  }

  private async removeMember(g: ConsumerGroup, m: Member, cause: ChangeCause, missedByMs?: number): Promise<void> {
    g.removeMember(m.memberId);
    this.scheduler.cancel(`expire:${g.groupId}:${m.memberId}`);
    this.scheduler.cancel(`rebalance:${g.groupId}:${m.memberId}`);
    const reason: ChangeReason = { cause, member: m.memberId };
    if (missedByMs !== undefined) reason.missedByMs = missedByMs;
    g.pendingCauses.push(reason);
    this.scheduleWindow(g);
    await this.persist(g);
    this.wakeAll(this.wakers, m.memberId);
  }

  private group(groupId: string): ConsumerGroup {
    const g = this.groups.get(groupId);
    if (!g || g.deleted) throw new TributaryError('group_not_found', { group: groupId });
    return g;
  }

  private member(g: ConsumerGroup, memberId: string): Member {
    if (g.fencedIds.has(memberId)) throw new TributaryError('FENCED_INSTANCE_ID', { member: memberId });
    const m = g.members.get(memberId);
    if (!m) throw new TributaryError('member_not_found', { member: memberId });
    return m;
  }

  private view(g: ConsumerGroup, m: Member, owned: boolean): MemberView {
    const v: MemberView = {
      generation: m.generation,
      memberId: m.memberId,
      leader: g.leaderId ?? m.memberId,
      assignments: owned ? [...m.owned].sort((a, b) => a - b) : g.entitlement(m),
      protocol: g.protocol,
    };
    if (g.protocol === 'client' && g.leaderId === m.memberId) {
      v.members = [...g.members.values()].map((x) => ({ memberId: x.memberId, owned: [...x.owned].sort((a, b) => a - b) }));
    }
    return v;
  }

  // ---- commands ----

  async join(req: JoinRequest): Promise<MemberView> {
    this.checkOwner(req.group);
    validateId('group', req.group);
    validateId('member', req.member);
    if (req.instance !== undefined) validateId('instance', req.instance);
    this.deps.topics.get(req.topic);
    if (req.assignor !== undefined && !isAssignorName(req.assignor)) throw invalidParam('assignor', 'expected range, roundrobin, sticky or cooperative-sticky');
    const session = req.sessionTimeoutMs ?? this.config.defaultSessionTimeoutMs;
    if (session < this.config.minSessionTimeoutMs || session > this.config.maxSessionTimeoutMs) {
      throw invalidParam('session_timeout_ms', `must be between ${this.config.minSessionTimeoutMs} and ${this.config.maxSessionTimeoutMs}`);
    }
    const rebalanceTimeout = req.rebalanceTimeoutMs ?? Math.max(this.config.defaultRebalanceTimeoutMs, session);

    let fresh: Member | undefined;
    const view = await this.withGroup(req.group, async (): Promise<MemberView | undefined> => {
      let g = this.groups.get(req.group);
      // Refuse an unknown member id before touching anything: a refused join must neither create the group
      // nor rewrite an empty group's topic, assignor or protocol.
      const live = g && !g.deleted ? g : undefined;
      if (req.generation !== undefined && req.generation > 0 && !live?.members.has(req.member) && !live?.fencedIds.has(req.member)) {
        throw new TributaryError('member_not_found', { member: req.member });
      }
      if (!g || g.deleted) {
        g = new ConsumerGroup(req.group, req.topic, req.assignor ?? this.config.defaultAssignor, req.protocol ?? 'server');
        this.groups.set(req.group, g);
      }
      if (g.members.size === 0 && g.pendingCauses.length === 0) {
        g.topic = req.topic;
        if (req.assignor) g.assignor = req.assignor;
        if (req.protocol) g.protocol = req.protocol;
      } else if (g.topic !== req.topic) {
        throw invalidParam('topic', `group ${req.group} consumes topic ${g.topic}`);
      }
      if (g.fencedIds.has(req.member)) throw new TributaryError('FENCED_INSTANCE_ID', { member: req.member });
      const now = this.clock.now();
      const existing = g.members.get(req.member);
      if (existing) {
        // Resume (same generation) or catch up (stale generation): same member id, no new generation.
        existing.lastHeartbeat = now;
        existing.generation = g.generation;
        existing.needsRejoin = false;
        existing.awaitingSync = true;
        existing.notifiedAt = now;
        this.scheduleRebalanceTimeout(g, existing);
        await this.persist(g);
        return this.view(g, existing, false);
      }
      if (req.generation !== undefined && req.generation > 0) throw new TributaryError('member_not_found', { member: req.member });
      if (req.instance !== undefined) {
        const prevId = g.instances.get(req.instance);
        const prev = prevId ? g.members.get(prevId) : undefined;
        if (prev) return this.replaceStatic(g, prev, req, now);
      }
      const m: Member = {
        memberId: `${req.member}-${randomUUID()}`,
        clientId: req.member,
        instanceId: req.instance,
        host: req.host,
        sessionTimeoutMs: session,
        rebalanceTimeoutMs: rebalanceTimeout,
        lastHeartbeat: now,
        generation: g.generation,
        owned: new Set(),
        target: [],
        needsRejoin: false,
        notifiedAt: now,
        awaitingSync: true,
        joinedAt: now,
      };
      g.members.set(m.memberId, m);
      if (m.instanceId) g.instances.set(m.instanceId, m.memberId);
      if (!g.leaderId || !g.members.has(g.leaderId)) g.leaderId = m.memberId;
      g.pendingCauses.push({ cause: 'join', member: m.memberId });
      this.scheduleExpiry(g, m);
      this.scheduleWindow(g);
      fresh = m;
      return undefined;
    });
    if (view) return view;
    // A new member's reply waits for its generation: the join window batches joins that arrive together.
    const m = fresh!;
    const deadline = this.clock.now() + m.rebalanceTimeoutMs;
    for (;;) {
      const g = this.groups.get(req.group);
      if (!g || g.members.get(m.memberId) !== m) throw new TributaryError('member_not_found', { member: m.memberId });
      if (!g.pendingCauses.some((r) => r.member === m.memberId)) return this.view(g, m, false);
      if (this.clock.now() >= deadline || this.stopped) throw new TributaryError('REBALANCE_IN_PROGRESS', { group: req.group });
      await this.wait(this.windowWaiters, req.group, deadline - this.clock.now());
    }
  }

  /** A static member back under a new member id: it takes the old id's place, assignment and generation. */
  private async replaceStatic(g: ConsumerGroup, prev: Member, req: JoinRequest, now: number): Promise<MemberView> {
    const m: Member = {
      ...prev,
      memberId: `${req.member}-${randomUUID()}`,
      clientId: req.member,
      host: req.host,
      lastHeartbeat: now,
      owned: new Set(prev.owned),
      target: [...prev.target],
      awaitingSync: true,
      needsRejoin: false,
      notifiedAt: now,
      generation: g.generation,
    };
    g.members.delete(prev.memberId);
    g.members.set(m.memberId, m);
    g.instances.set(req.instance!, m.memberId);
    for (const p of m.owned) g.owners.set(p, m.memberId);
    if (g.leaderId === prev.memberId) g.leaderId = m.memberId;
    g.fencedIds.add(prev.memberId);
    this.scheduler.cancel(`expire:${g.groupId}:${prev.memberId}`);
    this.scheduler.cancel(`rebalance:${g.groupId}:${prev.memberId}`);
    this.scheduleExpiry(g, m);
    this.scheduleRebalanceTimeout(g, m);
    this.wakeAll(this.wakers, prev.memberId);
    this.deps.logger.info({ group: g.groupId, instance: req.instance, old: prev.memberId, member: m.memberId }, 'static member replaced');
    await this.persist(g);
    return this.view(g, m, false);
  }

  async sync(req: { topic: string; group: string; member: string; generation: number; plan?: string }): Promise<MemberView> {
    this.checkOwner(req.group);
    validateId('group', req.group);
    validateId('member', req.member);
    for (;;) {
      const result = await this.withGroup(req.group, async (): Promise<MemberView | 'wait'> => {
        const g = this.group(req.group);
        if (g.topic !== req.topic) throw invalidParam('topic', `group ${req.group} consumes topic ${g.topic}`);
        const m = this.member(g, req.member);
        m.lastHeartbeat = this.clock.now();
        if (m.needsRejoin || req.generation < m.generation) throw new TributaryError('REBALANCE_IN_PROGRESS', { group: g.groupId, generation: g.generation });
        if (req.generation !== m.generation) throw new TributaryError('GEN_MISMATCH', { current: g.generation, requested: req.generation });
        if (req.plan !== undefined) this.acceptPlan(g, m, req.plan);
        if (g.protocol === 'client' && g.planGeneration !== g.generation) return 'wait';
        const freed = g.applySync(m);
        m.awaitingSync = false;
        this.scheduler.cancel(`rebalance:${g.groupId}:${m.memberId}`);
        const now = this.clock.now();
        // A member that joined but has not synced yet takes the freed partitions at its SYNC (which may be
        // waiting for a client-side plan right now): telling it to rejoin would fail that SYNC for nothing.
        for (const w of g.waitingFor(freed)) if (w !== m && !w.awaitingSync) this.notify(g, w, now);
        this.checkSettled(g);
        await this.persist(g);
        return this.view(g, m, true);
      });
      if (result !== 'wait') return result;
      const g = this.group(req.group);
      const m = this.member(g, req.member);
      const before = g.planGeneration;
      await this.wait(this.planWaiters, req.group, m.rebalanceTimeoutMs);
      if (g.planGeneration === before) throw new TributaryError('REBALANCE_IN_PROGRESS', { group: req.group, reason: 'no plan from the leader' });
    }
  }

  /** Client-side assignment: the leader's plan becomes every member's target. */
  private acceptPlan(g: ConsumerGroup, m: Member, text: string): void {
    if (g.protocol !== 'client') throw invalidParam('plan', 'this group uses server-side assignment');
    if (g.leaderId !== m.memberId) throw invalidParam('plan', 'only the group leader submits a plan');
    const plan: Assignment = new Map();
    for (const id of g.members.keys()) plan.set(id, []);
    for (const part of text.split(';')) {
      if (part.length === 0) continue;
      const colon = part.lastIndexOf(':');
      if (colon <= 0) throw invalidParam('plan', 'expected member:p,p;member:p');
      const id = part.slice(0, colon);
      const list = part.slice(colon + 1);
      if (!plan.has(id)) throw invalidParam('plan', `unknown member ${id}`);
      const ps = list.length === 0 ? [] : list.split(',').map((x) => {
        if (!/^\d{1,9}$/.test(x)) throw invalidParam('plan', `bad partition ${x}`);
        return { topic: g.topic, partition: Number(x) };
      });
      plan.set(id, [...plan.get(id)!, ...ps]);
    }
    const topic = this.deps.topics.tryGet(g.topic);
    const problem = validatePlan(this.assignmentInput(g, topic ? topic.partitions.length : 0), plan);
    if (problem) throw invalidParam('plan', problem);
    this.applyPlan(g, plan);
    g.planGeneration = g.generation;
    const now = this.clock.now();
    for (const x of g.members.values()) if (x !== m && !x.needsRejoin && !x.awaitingSync) this.notify(g, x, now);
    this.wakeAll(this.planWaiters, g.groupId);
  }

  async heartbeat(req: { topic: string; group: string; member: string; generation: number; waitMs?: number }, signal?: AbortSignal): Promise<{ generation: number; memberId: string }> {
    this.checkOwner(req.group);
    validateId('group', req.group);
    validateId('member', req.member);
    const check = () => {
      const g = this.group(req.group);
      const m = this.member(g, req.member);
      m.lastHeartbeat = this.clock.now();
      if (m.needsRejoin || req.generation < m.generation) throw new TributaryError('REBALANCE_IN_PROGRESS', { group: g.groupId, generation: g.generation });
      if (req.generation !== m.generation) throw new TributaryError('GEN_MISMATCH', { current: g.generation, requested: req.generation });
      return m;
    };
    let m = check();
    const waitMs = Math.min(req.waitMs ?? 0, Math.floor(m.sessionTimeoutMs / 2));
    if (waitMs > 0) {
      await this.wait(this.wakers, m.memberId, waitMs, signal);
      m = check();
    }
    return { generation: m.generation, memberId: m.memberId };
  }

  async leave(req: { topic: string; group: string; member: string }): Promise<void> {
    this.checkOwner(req.group);
    validateId('group', req.group);
    validateId('member', req.member);
    await this.withGroup(req.group, async () => {
      const g = this.group(req.group);
      const m = this.member(g, req.member);
      await this.removeMember(g, m, 'leave');
    });
  }

  fetchOffset(group: string, topic: string, partition: number): { offset: number; committed: boolean } {
    this.checkOwner(group);
    validateId('group', group);
    this.deps.topics.get(topic).partition(partition);
    const txns = this.pending.get(pendingKey(group, topic, partition));
    if (txns && txns.size > 0) throw new TributaryError('UNSTABLE_OFFSET_COMMIT', { partition, transactions: txns.size });
    const o = getOffset(this.committed, group, topic, partition);
    return o === undefined ? { offset: 0, committed: false } : { offset: o, committed: true };
  }

  /** For CONSUME with a group: the broker-owned committed offset wins over a lower requested one. */
  committedOffset(group: string, topic: string, partition: number): number | undefined {
    return getOffset(this.committed, group, topic, partition);
  }

  commit(req: { topic: string; group: string; member: string; generation: number; entries: OffsetEntry[] }): Promise<number> {
    this.checkOwner(req.group);
    return this.commitEntries(req);
  }

  /** All entries or none: every check runs before anything is written, and one append holds them all. */
  private async commitEntries(req: { topic: string; group: string; member: string; generation: number; entries: OffsetEntry[] }): Promise<number> {
    validateId('group', req.group);
    validateId('member', req.member);
    if (req.entries.length === 0) throw invalidParam('entries', 'no offsets to commit');
    const store = this.deps.offsetStore;
    let previous: Array<number | undefined> = [];
    let changed: OffsetEntry[] = [];
    const run = async () => {
      this.checkCommit(req);
      changed = req.entries.filter((e) => getOffset(this.reserved, req.group, req.topic, e.partition) !== e.offset);
      previous = changed.map((e) => getOffset(this.reserved, req.group, req.topic, e.partition));
      for (const e of changed) setOffset(this.reserved, req.group, req.topic, e.partition, e.offset);
      if (changed.length === 0) return { write: undefined };
      // Wrapped so the lock is released before durability: the log keeps appends in order, so the next
      // commit may start while this one is being fsynced (and share its fsync).
      return { write: store.commit(req.group, req.topic, changed) };
    };
    const { write } = await this.withGroup(req.group, async () => {
      const out = await run();
      // Other stores (PostgreSQL) may finish transactions out of order: keep them serialized per group.
      if (store.kind !== 'log') await out.write;
      return out;
    });
    try {
      await write;
    } catch (err) {
      // Not durable: give the reservation back so a retry writes again.
      changed.forEach((e, i) => {
        if (getOffset(this.reserved, req.group, req.topic, e.partition) === e.offset) {
          const prev = previous[i];
          if (prev === undefined) this.reserved.get(req.group)?.get(req.topic)?.delete(e.partition);
          else setOffset(this.reserved, req.group, req.topic, e.partition, prev);
        }
      });
      throw err;
    }
    for (const e of changed) {
      const cur = getOffset(this.committed, req.group, req.topic, e.partition);
      if (cur === undefined || e.offset > cur) setOffset(this.committed, req.group, req.topic, e.partition, e.offset);
    }
    return req.entries.length;
  }

  /** Fencing, ownership and monotonicity of a commit (or of offsets sent to a transaction); throws. */
  private checkCommit(req: { topic: string; group: string; member: string; generation: number; entries: OffsetEntry[] }): void {
    const g = this.group(req.group);
    if (g.topic !== req.topic) throw invalidParam('topic', `group ${req.group} consumes topic ${g.topic}`);
    const m = this.member(g, req.member);
    if (req.generation !== m.generation) throw new TributaryError('GEN_MISMATCH', { current: g.generation, requested: req.generation });
    const topic = this.deps.topics.get(req.topic);
    const seen = new Set<number>();
    for (const e of req.entries) {
      if (seen.has(e.partition)) throw invalidParam('entries', `partition ${e.partition} given twice`);
      seen.add(e.partition);
      const part = topic.partition(e.partition);
      if (g.owners.get(e.partition) !== m.memberId) throw new TributaryError('NOT_OWNER', { partition: e.partition, member: m.memberId });
      if (e.offset > part.logEndOffset) throw invalidParam('offset', `partition ${e.partition}: ${e.offset} is beyond the log end ${part.logEndOffset}`);
      const cur = getOffset(this.reserved, req.group, req.topic, e.partition);
      if (cur !== undefined && e.offset < cur) {
        throw new TributaryError('offset_regression', { partition: e.partition, current: cur, requested: e.offset });
      }
    }
  }

  // ---- offsets of transactions (src/txn) ----

  /**
   * SEND_OFFSETS_TO_TXN: checked exactly as a commit (member, generation, ownership, monotonicity), then
   * held as pending under the transaction. Until it ends, FETCH_OFFSET of those partitions answers
   * UNSTABLE_OFFSET_COMMIT, so a member that takes a partition over waits for the transaction instead of
   * starting from an offset the commit is about to move.
   */
  async stageTxnOffsets(txn: string, req: { topic: string; group: string; member: string; generation: number; entries: OffsetEntry[] }): Promise<void> {
    this.checkOwner(req.group);
    validateId('group', req.group);
    validateId('member', req.member);
    if (req.entries.length === 0) throw invalidParam('entries', 'no offsets to send');
    await this.withGroup(req.group, () => {
      this.checkCommit(req);
      this.markPending(txn, req.group, req.topic, req.entries.map((e) => e.partition));
    });
  }

  /** Pending transaction offsets restored at start (the transaction was open before a restart). */
  markPending(txn: string, group: string, topic: string, partitions: number[]): void {
    for (const p of partitions) {
      const k = pendingKey(group, topic, p);
      let set = this.pending.get(k);
      if (!set) this.pending.set(k, (set = new Set()));
      set.add(txn);
    }
  }

  /** The transaction ended (aborted, or its offsets applied): the partitions are stable again. */
  clearPending(txn: string, group: string, topic: string, partitions: number[]): void {
    for (const p of partitions) {
      const k = pendingKey(group, topic, p);
      const set = this.pending.get(k);
      if (!set) continue;
      set.delete(txn);
      if (set.size === 0) this.pending.delete(k);
    }
  }

  /**
   * A committed transaction's offsets: applied without fencing (the commit decision is already durable;
   * the checks ran when they were sent), never moving an offset back, durable when resolved. Applying the
   * same offsets again (recovery finishing a commit) changes nothing.
   */
  async applyTxnOffsets(txn: string, group: string, topic: string, entries: OffsetEntry[]): Promise<void> {
    await this.withGroup(group, async () => {
      const forward = entries.filter((e) => {
        const cur = getOffset(this.reserved, group, topic, e.partition);
        return cur === undefined || e.offset > cur;
      });
      if (forward.length > 0) {
        await this.deps.offsetStore.commit(group, topic, forward);
        for (const e of forward) {
          setOffset(this.reserved, group, topic, e.partition, e.offset);
          setOffset(this.committed, group, topic, e.partition, e.offset);
        }
      }
      this.clearPending(txn, group, topic, entries.map((e) => e.partition));
    });
  }

  listGroups(): string[] {
    const names = new Set<string>();
    for (const g of this.groups.values()) if (!g.deleted) names.add(g.groupId);
    for (const name of this.committed.keys()) names.add(name);
    return [...names].sort();
  }

  async deleteGroup(groupId: string): Promise<void> {
    this.checkOwner(groupId);
    validateId('group', groupId);
    await this.withGroup(groupId, async () => {
      const g = this.groups.get(groupId);
      if ((!g || g.deleted) && !this.committed.has(groupId)) throw new TributaryError('group_not_found', { group: groupId });
      // Pending causes without members are only departures waiting for the join window: nothing can use the
      // group's offsets any more, and GROUP_STATUS already says Empty.
      if (g && g.members.size > 0) throw new TributaryError('group_not_empty', { group: groupId, members: g.members.size });
      await this.deps.offsetStore.deleteGroup(groupId);
      await this.deps.groupLog.deleteGroup(groupId);
      this.committed.delete(groupId);
      this.reserved.delete(groupId);
      if (g) {
        g.deleted = true;
        this.groups.delete(groupId);
      }
      this.scheduler.cancel(`window:${groupId}`);
    });
  }

  /** Admin reset of an inactive group's offsets (may move them backwards). */
  async resetOffsets(req: { group: string; topic: string; partition?: number; to: 'earliest' | 'latest' | 'offset' | 'timestamp'; value?: number }): Promise<OffsetEntry[]> {
    this.checkOwner(req.group);
    validateId('group', req.group);
    const topic = this.deps.topics.get(req.topic);
    const parts = req.partition === undefined ? topic.partitions : [topic.partition(req.partition)];
    return this.withGroup(req.group, async () => {
      const g = this.groups.get(req.group);
      if (g && !g.deleted && g.members.size > 0) throw new TributaryError('group_not_empty', { group: req.group, members: g.members.size });
      const entries: OffsetEntry[] = [];
      for (const p of parts) {
        let offset: number;
        if (req.to === 'earliest') offset = p.earliest;
        else if (req.to === 'latest') offset = p.lastStableOffset;
        else if (req.to === 'timestamp') offset = await p.log.offsetForTimestamp(req.value ?? 0);
        else {
          offset = req.value ?? 0;
          if (offset < p.earliest || offset > p.logEndOffset) throw new TributaryError('OFFSET_OUT_OF_RANGE', { requested: offset, earliest: p.earliest, latest: p.logEndOffset, partition: p.id });
        }
        entries.push({ partition: p.id, offset });
      }
      await this.deps.offsetStore.commit(req.group, req.topic, entries, { force: true });
      for (const e of entries) {
        setOffset(this.committed, req.group, req.topic, e.partition, e.offset);
        setOffset(this.reserved, req.group, req.topic, e.partition, e.offset);
      }
      return entries;
    });
  }

  private lagRows(): Array<{ group: string; topic: string; partition: number; committed: number; logEnd: number; lag: number }> {
    const rows = [];
    for (const [group, byTopic] of this.committed) {
      for (const [topicName, byPart] of byTopic) {
        const topic = this.deps.topics.tryGet(topicName);
        if (!topic) continue;
        for (const [p, committed] of byPart) {
          const part = topic.partitions[p];
          if (!part) continue;
          rows.push({ group, topic: topicName, partition: p, committed, logEnd: part.lastStableOffset, lag: Math.max(0, part.lastStableOffset - committed) });
        }
      }
    }
    return rows;
  }

  status(groupId: string): Record<string, unknown> {
    this.checkOwner(groupId);
    validateId('group', groupId);
    const g = this.groups.get(groupId);
    if ((!g || g.deleted) && !this.committed.has(groupId)) throw new TributaryError('group_not_found', { group: groupId });
    const topicName = g?.topic ?? [...(this.committed.get(groupId)?.keys() ?? [])][0] ?? '';
    const topic = this.deps.topics.tryGet(topicName);
    const now = this.clock.now();
    const offsets = (topic?.partitions ?? []).map((p) => {
      const committed = getOffset(this.committed, groupId, topicName, p.id);
      return {
        partition: p.id,
        committed: committed ?? null,
        log_end: p.lastStableOffset,
        lag: committed === undefined ? null : Math.max(0, p.lastStableOffset - committed),
        owner: g?.owners.get(p.id) ?? null,
      };
    });
    return {
      status: 'OK',
      group: groupId,
      topic: topicName,
      state: g ? g.state : 'Empty',
      generation: g?.generation ?? 0,
      leader: g?.leaderId ?? null,
      assignor: g?.assignor ?? this.config.defaultAssignor,
      protocol: g?.protocol ?? 'server',
      coordinator_partition: this.partitionFor(groupId),
      members: [...(g?.members.values() ?? [])].map((m) => ({
        member_id: m.memberId,
        client_id: m.clientId,
        instance: m.instanceId ?? null,
        host: m.host,
        generation: m.generation,
        last_heartbeat: new Date(m.lastHeartbeat).toISOString(),
        last_heartbeat_ms_ago: now - m.lastHeartbeat,
        session_timeout_ms: m.sessionTimeoutMs,
        assignments: [...m.owned].sort((a, b) => a - b),
        target: m.target,
        pending: m.target.filter((p) => !m.owned.has(p)),
        needs_rejoin: m.needsRejoin,
      })),
      offsets,
      total_lag: offsets.reduce((n, o) => n + (o.lag ?? 0), 0),
      history: g?.history ?? [],
    };
  }
}

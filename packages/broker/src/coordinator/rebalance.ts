import client from 'prom-client';
import { type Assignment, type AssignorName, assign } from 'tributary-protocol/assignors.js';
import { type ChangeCause, type ChangeReason, type ConsumerGroup, type Member, topicShape } from './group.js';
import type { GroupContext } from './group-context.js';
import { wallTimeOf } from '../common/clock.js';
import { Waiters } from './waiters.js';

/**
 * The timers of the group coordinator and what they decide (docs/architecture.md, "Group coordinator"):
 * session expiry, rebalance timeouts and the join window that batches membership changes into one new
 * generation with new targets. Every decision runs under the group's lock, and only while this broker may
 * act (a cluster broker postpones them from a pause of its process until etcd confirms its lease).
 */
export class Rebalancer {
  /** Members parked in a long-poll heartbeat, by member id: woken when they must rejoin. */
  readonly wakers: Waiters;
  /** New members waiting for their join window to close, by group. */
  readonly windowWaiters: Waiters;
  /** Members of a client-side group waiting for the leader's plan, by group. */
  readonly planWaiters: Waiters;
  readonly rebalances: client.Counter;
  private readonly rebalanceSeconds: client.Histogram;

  constructor(
    private readonly ctx: GroupContext,
    registry: client.Registry,
  ) {
    const stopped = () => ctx.stopped();
    this.wakers = new Waiters(ctx.clock, stopped);
    this.windowWaiters = new Waiters(ctx.clock, stopped);
    this.planWaiters = new Waiters(ctx.clock, stopped);
    this.rebalances = new client.Counter({ name: 'tributary_group_rebalances_total', help: 'New generations by group', labelNames: ['group'], registers: [registry] });
    this.rebalanceSeconds = new client.Histogram({
      name: 'tributary_group_rebalance_seconds',
      help: 'Time from a membership change to every member synced and every partition owned',
      buckets: [0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60],
      registers: [registry],
    });
  }

  // ---- timers ----

  scheduleExpiry(g: ConsumerGroup, m: Member): void {
    const key = `expire:${g.groupId}:${m.memberId}`;
    this.ctx.scheduler.schedule(key, m.lastHeartbeat + m.sessionTimeoutMs, () => {
      if (!this.ctx.canAct()) {
        // This coordinator was paused (its members could not reach it): once its lease is confirmed they
        // get a full session again, as after a failover.
        m.lastHeartbeat = this.ctx.clock.monotonic();
        this.scheduleExpiry(g, m);
        return;
      }
      void this.ctx.withGroup(g.groupId, async () => {
        const cur = g.members.get(m.memberId);
        if (cur !== m || this.ctx.groups.get(g.groupId) !== g) return;
        const late = this.ctx.clock.monotonic() - (m.lastHeartbeat + m.sessionTimeoutMs);
        if (late < 0) {
          this.scheduleExpiry(g, m);
          return;
        }
        this.ctx.logger.info({ group: g.groupId, member: m.memberId, missedByMs: late }, 'member session expired');
        await this.removeMember(g, m, 'expired', late);
      }).catch((err) => this.ctx.logFailure(err, { group: g.groupId }, 'session expiry failed'));
    });
  }

  scheduleRebalanceTimeout(g: ConsumerGroup, m: Member): void {
    const key = `rebalance:${g.groupId}:${m.memberId}`;
    const notifiedAt = m.notifiedAt;
    this.ctx.scheduler.schedule(key, notifiedAt + m.rebalanceTimeoutMs, () => {
      if (!this.ctx.canAct()) {
        m.notifiedAt = this.ctx.clock.monotonic();
        this.scheduleRebalanceTimeout(g, m);
        return;
      }
      void this.ctx.withGroup(g.groupId, async () => {
        if (g.members.get(m.memberId) !== m || m.notifiedAt !== notifiedAt) return;
        if (!m.needsRejoin && !m.awaitingSync) return;
        this.ctx.logger.info({ group: g.groupId, member: m.memberId }, 'member missed the rebalance timeout');
        await this.removeMember(g, m, 'rebalance_timeout');
      }).catch((err) => this.ctx.logFailure(err, { group: g.groupId }, 'rebalance timeout failed'));
    });
  }

  scheduleWindow(g: ConsumerGroup): void {
    const key = `window:${g.groupId}`;
    if (g.rebalanceStartedAt === 0) g.rebalanceStartedAt = this.ctx.clock.monotonic();
    if (this.ctx.scheduler.has(key)) return;
    this.ctx.scheduler.schedule(key, this.ctx.clock.monotonic() + this.ctx.config.joinWindowMs, () => {
      if (!this.ctx.canAct()) {
        this.ctx.scheduler.cancel(key);
        this.scheduleWindow(g);
        return;
      }
      void this.ctx.withGroup(g.groupId, () => this.rebalance(g)).catch((err) => this.ctx.logFailure(err, { group: g.groupId }, 'rebalance failed'));
    });
  }

  // ---- rebalancing ----

  /**
   * Called on each heartbeat (members heartbeat every few seconds): the group's topic changed since its
   * generation was assigned (partitions added, the topic deleted or re-created), so a new generation gives
   * out the new partitions and drops missing ones; without this nothing changed until a member came or went.
   */
  checkTopic(g: ConsumerGroup): void {
    if (g.topicShape === undefined || g.pendingCauses.length > 0 || topicShape(this.ctx.topics.tryGet(g.topic)) === g.topicShape) return;
    void this.ctx
      .withGroup(g.groupId, async () => {
        if (this.ctx.groups.get(g.groupId) !== g || g.pendingCauses.some((c) => c.cause === 'subscription')) return;
        if (topicShape(this.ctx.topics.tryGet(g.topic)) === g.topicShape) return;
        this.ctx.logger.info({ group: g.groupId, topic: g.topic }, "the group's topic changed: a new generation");
        g.pendingCauses.push({ cause: 'subscription', member: g.topic });
        this.scheduleWindow(g);
        await this.ctx.persist(g);
      })
      .catch((err) => this.ctx.logFailure(err, { group: g.groupId }, 'starting a rebalance for a topic change failed'));
  }

  notify(g: ConsumerGroup, m: Member, now: number): void {
    m.needsRejoin = true;
    m.notifiedAt = now;
    this.scheduleRebalanceTimeout(g, m);
    this.wakers.wake(m.memberId);
  }

  /** Close the join window: one new generation for every change batched in it, new targets, notify. */
  private async rebalance(g: ConsumerGroup): Promise<void> {
    if (g.pendingCauses.length === 0 || this.ctx.groups.get(g.groupId) !== g) return;
    const reasons = g.pendingCauses;
    g.pendingCauses = [];
    const now = this.ctx.clock.monotonic();
    g.generation++;
    const joined = new Set(reasons.filter((r) => r.cause === 'join').map((r) => r.member));
    const topic = this.ctx.topics.tryGet(g.topic);
    const partitions = topic ? topic.partitions.length : 0;
    // Deleted and created again under the name since the last generation (a new topic id): its partitions
    // are new logs. Every member gives up what it owns and is told to read it anew (reset=, as after an
    // admin RESET_OFFSETS), and its commits there are refused until it has: readers positioned in the old
    // log would skip the new one's records up to there, and commit the old one's offsets into it.
    if (g.assignedForOtherTopic(topic?.def.topicId)) {
      for (const m of g.members.values()) {
        for (const p of m.owned) m.reset.add(p);
        m.owned.clear();
      }
      g.owners.clear();
    }
    g.topicShape = topicShape(topic);
    g.clampToPartitions(partitions);
    const before = new Map<number, string>();
    for (const m of g.members.values()) for (const p of m.target) before.set(p, m.memberId);
    for (const [p, id] of g.owners) if (!before.has(p)) before.set(p, id);
    if (g.protocol === 'server') this.applyPlan(g, assign(g.assignor as AssignorName, this.assignmentInput(g, partitions)));
    // Which partitions this generation gives to another member (or to one at all): the rebalance timeline.
    const moved: number[] = [];
    for (const m of g.members.values()) for (const p of m.target) if (before.get(p) !== m.memberId) moved.push(p);
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
    g.recordChange({ generation: g.generation, reasons, at: wallTimeOf(this.ctx.clock, g.rebalanceStartedAt || now), moved: moved.sort((a, b) => a - b) });
    this.ctx.countRebalance(g.groupId);
    this.ctx.logger.info({ group: g.groupId, generation: g.generation, reasons, members: g.members.size }, 'new generation');
    this.checkSettled(g);
    try {
      await this.ctx.persist(g);
    } finally {
      // Also when the write was refused: the joins waiting for this window hear it now (their group was
      // dropped for a reload), not at their rebalance timeout.
      this.windowWaiters.wake(g.groupId);
    }
  }

  assignmentInput(g: ConsumerGroup, partitions: number) {
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

  applyPlan(g: ConsumerGroup, plan: Assignment): void {
    for (const m of g.members.values()) m.target = (plan.get(m.memberId) ?? []).map((tp) => tp.partition).sort((a, b) => a - b);
  }

  checkSettled(g: ConsumerGroup): void {
    if (g.rebalanceStartedAt === 0 || g.pendingCauses.length > 0 || !g.isSettled()) return;
    const ms = this.ctx.clock.monotonic() - g.rebalanceStartedAt;
    g.rebalanceStartedAt = 0;
    const last = g.history[g.history.length - 1];
    if (last && last.generation === g.generation) last.rebalanceMs = ms;
    this.rebalanceSeconds.observe(ms / 1000);
  }

  async removeMember(g: ConsumerGroup, m: Member, cause: ChangeCause, missedByMs?: number): Promise<void> {
    g.removeMember(m.memberId);
    this.ctx.scheduler.cancel(`expire:${g.groupId}:${m.memberId}`);
    this.ctx.scheduler.cancel(`rebalance:${g.groupId}:${m.memberId}`);
    const reason: ChangeReason = { cause, member: m.memberId };
    if (missedByMs !== undefined) reason.missedByMs = missedByMs;
    g.pendingCauses.push(reason);
    this.scheduleWindow(g);
    await this.ctx.persist(g);
    this.wakers.wake(m.memberId);
  }
}

import { randomUUID } from 'node:crypto';
import { TributaryError, invalidParam } from 'tributary-protocol/errors.js';
import { type Assignment, isAssignorName, validatePlan } from 'tributary-protocol/assignors.js';
import { type AssignmentProtocol, ConsumerGroup, type Member } from './group.js';
import { type GroupContext, requireGroup, requireMember, validateId } from './group-context.js';
import type { Rebalancer } from './rebalance.js';

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
  /**
   * The requester's connection: closed while a new member's reply waits for its generation, the member is
   * removed, since nobody can learn its id to sync, heartbeat or leave (a consumer closed or killed during
   * its first JOIN held a share of the partitions for a whole session).
   */
  signal?: AbortSignal;
  /**
   * The requester's rights again once a wait ends (a SIGHUP may have withdrawn them meanwhile: docs/security.md,
   * "Group ACLs"); throws the refusal. Also on SyncRequest and the HEARTBEAT request.
   */
  afterWait?: () => void;
}

export type SyncRequest = { topic: string; group: string; member: string; generation: number; plan?: string; afterWait?: () => void };

export interface MemberView {
  generation: number;
  memberId: string;
  leader: string;
  assignments: number[];
  protocol: AssignmentProtocol;
  /** Client-side assignment, to the leader only: every member and what it owns. */
  members?: Array<{ memberId: string; owned: number[] }>;
  /** Partitions whose offsets an admin reset: the member drops its readers of them and fetches their offsets again. */
  reset?: number[];
}

/**
 * A member of a group with members must ask for the group's protocol and assignor, or name none (it takes
 * the group's): another would hand it an assignment computed by rules it does not expect (docs/protocol.md,
 * "Consumer groups"; Kafka's INCONSISTENT_GROUP_PROTOCOL).
 */
function checkSameProtocol(g: ConsumerGroup, req: JoinRequest): void {
  if (req.protocol !== undefined && req.protocol !== g.protocol) {
    throw new TributaryError('inconsistent_group_protocol', { group: g.groupId, protocol: g.protocol, requested: req.protocol });
  }
  if (req.assignor !== undefined && req.assignor !== g.assignor) {
    throw new TributaryError('inconsistent_group_protocol', { group: g.groupId, assignor: g.assignor, requested: req.assignor });
  }
}

/**
 * The membership commands of the group coordinator (JOIN_GROUP, SYNC_GROUP, HEARTBEAT, LEAVE_GROUP; see
 * docs/protocol.md): each change runs under the group's lock, and the waits (join windows, long-poll
 * heartbeats, client-side plans) happen outside it. The timers and the new generations are the
 * Rebalancer's.
 */
export class GroupMembership {
  constructor(
    private readonly ctx: GroupContext,
    private readonly rebalancer: Rebalancer,
  ) {}

  private view(g: ConsumerGroup, m: Member, owned: boolean): MemberView {
    const v: MemberView = {
      generation: m.generation,
      memberId: m.memberId,
      leader: g.leaderId ?? m.memberId,
      assignments: owned ? [...m.owned].sort((a, b) => a - b) : g.entitlement(m),
      protocol: g.protocol,
    };
    if (m.reset.size > 0) v.reset = [...m.reset].sort((a, b) => a - b);
    if (g.protocol === 'client' && g.leaderId === m.memberId) {
      v.members = [...g.members.values()].map((x) => ({ memberId: x.memberId, owned: [...x.owned].sort((a, b) => a - b) }));
    }
    return v;
  }

  async join(req: JoinRequest): Promise<MemberView> {
    this.ctx.checkOwner(req.group);
    validateId('group', req.group);
    validateId('member', req.member);
    if (req.instance !== undefined) validateId('instance', req.instance);
    this.ctx.topics.get(req.topic);
    if (req.assignor !== undefined && !isAssignorName(req.assignor)) throw invalidParam('assignor', 'expected range, roundrobin, sticky or cooperative-sticky');
    const session = req.sessionTimeoutMs ?? this.ctx.config.defaultSessionTimeoutMs;
    if (session < this.ctx.config.minSessionTimeoutMs || session > this.ctx.config.maxSessionTimeoutMs) {
      throw invalidParam('session_timeout_ms', `must be between ${this.ctx.config.minSessionTimeoutMs} and ${this.ctx.config.maxSessionTimeoutMs}`);
    }
    const rebalanceTimeout = req.rebalanceTimeoutMs ?? Math.max(this.ctx.config.defaultRebalanceTimeoutMs, session);

    let fresh: Member | undefined;
    let joined: ConsumerGroup | undefined;
    const view = await this.ctx.withOwnedGroup(req.group, async (): Promise<MemberView | undefined> => {
      // One id, one kind of group: a Kafka group of the id in use refuses the join; an empty one is replaced
      // (this group's snapshot overwrites its own in the log; the id's committed offsets stay), below.
      const classic = this.ctx.classicGroups.get(req.group);
      if (classic && (classic.members.size > 0 || classic.pendingMembers.size > 0)) throw invalidParam('group', 'a Kafka consumer group of this id is in use');
      let g = this.ctx.groups.get(req.group);
      // Every refusal before anything is touched: a refused join must neither create the group, nor add a
      // member or start a rebalance, nor rewrite an empty group's topic, assignor or protocol.
      const live = g && !g.deleted ? g : undefined;
      if (req.generation !== undefined && req.generation > 0 && !live?.members.has(req.member) && !live?.fencedIds.has(req.member)) {
        throw new TributaryError('member_not_found', { member: req.member });
      }
      if (live && (live.members.size > 0 || live.pendingCauses.length > 0) && live.topic !== req.topic) {
        throw invalidParam('topic', `group ${req.group} consumes topic ${live.topic}`);
      }
      if (live && live.members.size > 0) checkSameProtocol(live, req);
      if (live?.fencedIds.has(req.member)) throw new TributaryError('FENCED_INSTANCE_ID', { member: req.member });
      if (classic) this.ctx.classicGroups.delete(req.group);
      if (!g || g.deleted) {
        g = new ConsumerGroup(req.group, req.topic, req.assignor ?? this.ctx.config.defaultAssignor, req.protocol ?? 'server');
        this.ctx.groups.set(req.group, g);
      }
      if (g.members.size === 0 && g.pendingCauses.length === 0) g.topic = req.topic;
      if (g.members.size === 0) {
        // A group without members takes the joining member's (as Kafka's empty group takes its first member's).
        if (req.assignor) g.assignor = req.assignor;
        if (req.protocol) g.protocol = req.protocol;
      }
      const now = this.ctx.clock.monotonic();
      const existing = g.members.get(req.member);
      if (existing) {
        // Resume (same generation) or catch up (stale generation): same member id, no new generation. The
        // timeouts are the latest JOIN's, as Kafka's; one it does not name stays (docs/protocol.md, "Sessions").
        if (req.sessionTimeoutMs !== undefined) existing.sessionTimeoutMs = req.sessionTimeoutMs;
        if (req.rebalanceTimeoutMs !== undefined) existing.rebalanceTimeoutMs = req.rebalanceTimeoutMs;
        existing.lastHeartbeat = now;
        existing.generation = g.generation;
        existing.needsRejoin = false;
        existing.awaitingSync = true;
        existing.notifiedAt = now;
        // Again from now under the new session: the expiry set under a longer one would come too late.
        this.rebalancer.scheduleExpiry(g, existing);
        this.rebalancer.scheduleRebalanceTimeout(g, existing);
        await this.ctx.persist(g);
        return this.view(g, existing, false);
      }
      if (req.generation !== undefined && req.generation > 0) throw new TributaryError('member_not_found', { member: req.member });
      if (req.instance !== undefined) {
        const prevId = g.instances.get(req.instance);
        const prev = prevId ? g.members.get(prevId) : undefined;
        if (prev) return this.replaceStatic(g, prev, req, now, session, rebalanceTimeout);
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
        reset: new Set(),
      };
      g.members.set(m.memberId, m);
      if (m.instanceId) g.instances.set(m.instanceId, m.memberId);
      if (!g.leaderId || !g.members.has(g.leaderId)) g.leaderId = m.memberId;
      g.pendingCauses.push({ cause: 'join', member: m.memberId });
      this.rebalancer.scheduleExpiry(g, m);
      this.rebalancer.scheduleWindow(g);
      fresh = m;
      joined = g;
      return undefined;
    });
    if (view) return view;
    // A new member's reply waits for its generation: the join window batches joins that arrive together.
    const m = fresh!;
    const deadline = this.ctx.clock.monotonic() + m.rebalanceTimeoutMs;
    for (;;) {
      const g = this.ctx.groups.get(req.group);
      if (!g || g.members.get(m.memberId) !== m) {
        // A refused group write dropped the group for a reload (GroupCoordinator.resync): retriable. One
        // that wrote nothing (a full disk) undid it: that error, as the client can do nothing but wait.
        if (joined?.refused) throw joined.refused;
        this.ctx.checkOwner(req.group);
        throw new TributaryError('member_not_found', { member: m.memberId });
      }
      if (!g.pendingCauses.some((r) => r.member === m.memberId)) {
        try {
          req.afterWait?.();
        } catch (err) {
          // Refused: nobody learns the member's id, so it would hold its share of the partitions for a session.
          await this.abandon(req.group, m);
          throw err;
        }
        return this.view(g, m, false);
      }
      if (req.signal?.aborted) {
        await this.abandon(req.group, m);
        throw new TributaryError('request_timeout', { reason: 'connection closed before the join reply' });
      }
      if (this.ctx.clock.monotonic() >= deadline || this.ctx.stopped()) throw new TributaryError('REBALANCE_IN_PROGRESS', { group: req.group });
      await this.rebalancer.windowWaiters.wait(req.group, deadline - this.ctx.clock.monotonic(), req.signal);
    }
  }

  /** A new member whose JOIN reply can no longer reach anyone leaves (JoinRequest.signal). */
  private async abandon(group: string, m: Member): Promise<void> {
    await this.ctx.withOwnedGroup(group, async () => {
      const g = this.ctx.groups.get(group);
      if (g && g.members.get(m.memberId) === m) await this.rebalancer.removeMember(g, m, 'leave');
    });
  }

  /** A static member back under a new member id: it takes the old id's place, assignment and generation. */
  private async replaceStatic(g: ConsumerGroup, prev: Member, req: JoinRequest, now: number, sessionTimeoutMs: number, rebalanceTimeoutMs: number): Promise<MemberView> {
    const m: Member = {
      ...prev,
      // The new process's own timeouts, as a fresh join's (the old process may have had others).
      sessionTimeoutMs,
      rebalanceTimeoutMs,
      memberId: `${req.member}-${randomUUID()}`,
      clientId: req.member,
      host: req.host,
      lastHeartbeat: now,
      owned: new Set(prev.owned),
      target: [...prev.target],
      reset: new Set(prev.reset),
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
    this.ctx.scheduler.cancel(`expire:${g.groupId}:${prev.memberId}`);
    this.ctx.scheduler.cancel(`rebalance:${g.groupId}:${prev.memberId}`);
    this.rebalancer.scheduleExpiry(g, m);
    this.rebalancer.scheduleRebalanceTimeout(g, m);
    this.rebalancer.wakers.wake(prev.memberId);
    this.ctx.logger.info({ group: g.groupId, instance: req.instance, old: prev.memberId, member: m.memberId }, 'static member replaced');
    await this.ctx.persist(g);
    return this.view(g, m, false);
  }

  async sync(req: SyncRequest): Promise<MemberView> {
    this.ctx.checkOwner(req.group);
    validateId('group', req.group);
    validateId('member', req.member);
    for (;;) {
      const result = await this.ctx.withOwnedGroup(req.group, async (): Promise<MemberView | 'wait'> => {
        const g = requireGroup(this.ctx.groups, req.group);
        if (g.topic !== req.topic) throw invalidParam('topic', `group ${req.group} consumes topic ${g.topic}`);
        const m = requireMember(g, req.member);
        m.lastHeartbeat = this.ctx.clock.monotonic();
        if (m.needsRejoin || req.generation < m.generation) throw new TributaryError('REBALANCE_IN_PROGRESS', { group: g.groupId, generation: g.generation });
        if (req.generation !== m.generation) throw new TributaryError('GEN_MISMATCH', { current: g.generation, requested: req.generation });
        if (req.plan !== undefined) this.acceptPlan(g, m, req.plan);
        if (g.protocol === 'client' && g.planGeneration !== g.generation) return 'wait';
        const freed = g.applySync(m);
        m.awaitingSync = false;
        this.ctx.scheduler.cancel(`rebalance:${g.groupId}:${m.memberId}`);
        const now = this.ctx.clock.monotonic();
        // A member that joined but has not synced yet takes the freed partitions at its SYNC (which may be
        // waiting for a client-side plan right now): telling it to rejoin would fail that SYNC for nothing.
        for (const w of g.waitingFor(freed)) if (w !== m && !w.awaitingSync) this.rebalancer.notify(g, w, now);
        this.rebalancer.checkSettled(g);
        await this.ctx.persist(g);
        return this.view(g, m, true);
      });
      if (result !== 'wait') return result;
      this.ctx.checkOwner(req.group);
      const g = requireGroup(this.ctx.groups, req.group);
      const m = requireMember(g, req.member);
      const before = g.planGeneration;
      await this.rebalancer.planWaiters.wait(req.group, m.rebalanceTimeoutMs);
      req.afterWait?.();
      if (g.planGeneration === before) throw new TributaryError('REBALANCE_IN_PROGRESS', { group: req.group, reason: 'no plan from the leader' });
    }
  }

  /** Client-side assignment: the leader's plan becomes every member's target. */
  private acceptPlan(g: ConsumerGroup, m: Member, text: string): void {
    if (g.protocol !== 'client') throw invalidParam('plan', 'this group uses server-side assignment');
    if (g.leaderId !== m.memberId) throw invalidParam('plan', 'only the group leader submits a plan');
    const topic = this.ctx.topics.tryGet(g.topic);
    const count = topic ? topic.partitions.length : 0;
    const plan: Assignment = new Map();
    for (const id of g.members.keys()) plan.set(id, []);
    // Read in place, each partition pushed onto its member's list: no array of the whole text, no copy per
    // part (80,000 parts once took 42 s), and refused at the first partition past the topic's count.
    let named = 0;
    for (let from = 0; from <= text.length; ) {
      let end = text.indexOf(';', from);
      if (end < 0) end = text.length;
      const colon = text.lastIndexOf(':', end - 1);
      const start = from;
      from = end + 1;
      if (end === start) continue;
      if (colon < start + 1) throw invalidParam('plan', 'expected member:p,p;member:p');
      const id = text.slice(start, colon);
      const list = plan.get(id);
      if (!list) throw invalidParam('plan', `unknown member ${id.length > 300 ? `${id.slice(0, 300)}...` : id}`);
      // Its own string (a slice, not a copy): a search for the next comma stops at the part's end.
      const ps = text.slice(colon + 1, end);
      if (ps.length === 0) continue; // a member given nothing
      for (let at = 0; ; ) {
        let comma = ps.indexOf(',', at);
        if (comma < 0) comma = ps.length;
        if (++named > count) throw invalidParam('plan', `more than ${count} partitions (topic ${g.topic} has ${count})`);
        const x = ps.slice(at, comma);
        if (!/^\d{1,9}$/.test(x)) throw invalidParam('plan', `bad partition ${x.length > 20 ? `${x.slice(0, 20)}...` : x}`);
        list.push({ topic: g.topic, partition: Number(x) });
        if (comma === ps.length) break;
        at = comma + 1;
      }
    }
    const problem = validatePlan(this.rebalancer.assignmentInput(g, count), plan);
    if (problem) throw invalidParam('plan', problem);
    this.rebalancer.applyPlan(g, plan);
    g.planGeneration = g.generation;
    const now = this.ctx.clock.monotonic();
    for (const x of g.members.values()) if (x !== m && !x.needsRejoin && !x.awaitingSync) this.rebalancer.notify(g, x, now);
    this.rebalancer.planWaiters.wake(g.groupId);
  }

  async heartbeat(req: { topic: string; group: string; member: string; generation: number; waitMs?: number; afterWait?: () => void }, signal?: AbortSignal): Promise<{ generation: number; memberId: string }> {
    this.ctx.checkOwner(req.group);
    validateId('group', req.group);
    validateId('member', req.member);
    const check = () => {
      // Again after the wait: the group's partition may have been given up or dropped meanwhile.
      this.ctx.checkOwner(req.group);
      const g = requireGroup(this.ctx.groups, req.group);
      // The topic the request was authorized for (docs/security.md) must be the group's.
      if (g.topic !== req.topic) throw invalidParam('topic', `group ${req.group} consumes topic ${g.topic}`);
      const m = requireMember(g, req.member);
      m.lastHeartbeat = this.ctx.clock.monotonic();
      this.rebalancer.checkTopic(g);
      if (m.needsRejoin || req.generation < m.generation) throw new TributaryError('REBALANCE_IN_PROGRESS', { group: g.groupId, generation: g.generation });
      if (req.generation !== m.generation) throw new TributaryError('GEN_MISMATCH', { current: g.generation, requested: req.generation });
      return m;
    };
    let m = check();
    const waitMs = Math.min(req.waitMs ?? 0, Math.floor(m.sessionTimeoutMs / 2));
    if (waitMs > 0) {
      await this.rebalancer.wakers.wait(m.memberId, waitMs, signal);
      // The caller's rights again (a SIGHUP may have withdrawn them): a refusal must not refresh the session.
      req.afterWait?.();
      m = check();
    }
    return { generation: m.generation, memberId: m.memberId };
  }

  async leave(req: { topic: string; group: string; member: string }): Promise<void> {
    this.ctx.checkOwner(req.group);
    validateId('group', req.group);
    validateId('member', req.member);
    await this.ctx.withOwnedGroup(req.group, async () => {
      const g = requireGroup(this.ctx.groups, req.group);
      if (g.topic !== req.topic) throw invalidParam('topic', `group ${req.group} consumes topic ${g.topic}`);
      const m = requireMember(g, req.member);
      await this.rebalancer.removeMember(g, m, 'leave');
    });
  }
}

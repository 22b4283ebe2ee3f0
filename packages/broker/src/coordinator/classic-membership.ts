import { randomUUID } from 'node:crypto';
import { TributaryError } from 'tributary-protocol/errors.js';
import { ClassicGroup, ClassicGroupError, type ClassicMember, type ClassicMemberSpec, type ClassicProtocol, type JoinResult } from './classic-group.js';
import { type GroupContext, validateId } from './group-context.js';

/**
 * JoinGroup, SyncGroup, Heartbeat and LeaveGroup of the Kafka classic protocol (docs/kafka.md,
 * "Consumer groups"), as Kafka's own coordinator answers them: a change of membership starts a
 * rebalance (PreparingRebalance), which completes once every member has joined again or the longest
 * rebalance timeout has passed (members that did not come are removed); the new generation is durable
 * before any member hears of it; the leader's SyncGroup makes the group Stable. Every change runs under
 * the group's lock; JoinGroup and SyncGroup wait outside it for the others.
 */

export interface ClassicJoinRequest extends ClassicMemberSpec {
  group: string;
  /** JoinGroup v4+: a member without an id first gets one (MEMBER_ID_REQUIRED) and joins again with it (KIP-394). */
  requireKnownMemberId: boolean;
}

export interface ClassicMemberRef {
  group: string;
  memberId: string;
  instanceId: string | null;
  generation: number;
}

/** JoinGroup's answer: the generation it joined, or (v4+) the member id to join again with. */
export type ClassicJoinAnswer = JoinResult | { memberIdRequired: string };

/** A request waiting for others, wrapped so the lock's promise does not wait for it. */
type Parked<T> = { wait: Promise<T> };

const fail = (name: ConstructorParameters<typeof ClassicGroupError>[0], fields: Record<string, string | number> = {}) => new ClassicGroupError(name, fields);

/** A write of the group that failed or was refused (its partition moved, the disk, the replicas). */
const WRITE_FAILURES = new Set(['storage_error', 'NOT_LEADER', 'FENCED_LEADER_EPOCH', 'NOT_ENOUGH_REPLICAS', 'metadata_unavailable', 'request_timeout']);
/** Characters of a client id kept in the member ids made from it (Kafka's are client id + '-' + UUID). */
const MAX_CLIENT_ID_IN_MEMBER_ID = 255;

/**
 * What a Kafka member hears when the coordinator could not act on its request: Kafka's clients treat
 * other codes from the group APIs as fatal, these as "find the coordinator again".
 */
function asCoordinatorError(err: unknown): unknown {
  if (!(err instanceof TributaryError) || err instanceof ClassicGroupError) return err;
  if (err.code === 'shutting_down') return new ClassicGroupError('COORDINATOR_NOT_AVAILABLE', { reason: 'shutting down' });
  if (WRITE_FAILURES.has(err.code)) return new ClassicGroupError('NOT_COORDINATOR', { reason: err.code });
  return err;
}

const rethrow = (err: unknown): never => {
  throw asCoordinatorError(err);
};

export class ClassicMembership {
  constructor(private readonly ctx: GroupContext) {}

  private get groups(): Map<string, ClassicGroup> {
    return this.ctx.classicGroups;
  }

  private validate(req: ClassicJoinRequest): void {
    this.ctx.checkOwner(req.group);
    this.validateGroupId(req.group);
    const { minSessionTimeoutMs: min, maxSessionTimeoutMs: max } = this.ctx.config;
    if (req.sessionTimeoutMs < min || req.sessionTimeoutMs > max) throw fail('INVALID_SESSION_TIMEOUT', { min, max });
    if (req.protocolType.length === 0 || req.protocols.length === 0) throw fail('INCONSISTENT_GROUP_PROTOCOL', { reason: 'no protocol offered' });
  }

  validateGroupId(group: string): void {
    try {
      validateId('group', group);
    } catch {
      throw fail('INVALID_GROUP_ID', { group });
    }
  }

  /**
   * One id, one kind of group: a Tributary group of the id with members (or a membership change still in
   * its join window) refuses the Kafka join; an idle one is replaced (its snapshot in the log is overwritten
   * by this group's, and its committed offsets stay the id's).
   */
  private takeOverTributaryGroup(group: string): void {
    const t = this.ctx.groups.get(group);
    if (!t || t.deleted) return;
    if (t.members.size > 0 || t.pendingCauses.length > 0) throw fail('INCONSISTENT_GROUP_PROTOCOL', { reason: 'a Tributary group of this id is in use' });
    this.ctx.groups.delete(group);
    this.ctx.scheduler.cancel(`window:${group}`);
  }

  join(req: ClassicJoinRequest): Promise<ClassicJoinAnswer> {
    return this.joinOnce(req).catch(rethrow);
  }

  private async joinOnce(req: ClassicJoinRequest): Promise<ClassicJoinAnswer> {
    this.validate(req);
    const answer = await this.ctx.withOwnedGroup(req.group, async (): Promise<ClassicJoinAnswer | Parked<JoinResult>> => {
      const t = this.ctx.groups.get(req.group);
      if (t && !t.deleted && (t.members.size > 0 || t.pendingCauses.length > 0)) throw fail('INCONSISTENT_GROUP_PROTOCOL', { reason: 'a Tributary group of this id is in use' });
      const g = this.groups.get(req.group) ?? new ClassicGroup(req.group);
      if (!g.supports(req.protocolType, req.protocols)) throw fail('INCONSISTENT_GROUP_PROTOCOL');
      const now = this.ctx.clock.monotonic();
      if (req.memberId === '') {
        // The client id is the client's to choose, up to 32767 bytes: cut, so that the member id (and the
        // leader's JoinGroup answer and DescribeGroups, which carry it) still encodes.
        const memberId = `${[...(req.clientId || 'member')].slice(0, MAX_CLIENT_ID_IN_MEMBER_ID).join('')}-${randomUUID()}`;
        if (req.instanceId !== null && g.instances.has(req.instanceId)) return this.replaceStatic(g, g.instances.get(req.instanceId)!, memberId, req);
        if (req.instanceId === null && req.requireKnownMemberId) {
          this.groups.set(g.groupId, g);
          g.pendingMembers.add(memberId);
          this.ctx.scheduler.schedule(`cpend:${g.groupId}:${memberId}`, now + req.sessionTimeoutMs, () => this.expirePending(g, memberId));
          return { memberIdRequired: memberId };
        }
        return this.addAndRebalance(g, memberId, req);
      }
      if (g.pendingMembers.delete(req.memberId)) {
        this.ctx.scheduler.cancel(`cpend:${g.groupId}:${req.memberId}`);
        return this.addAndRebalance(g, req.memberId, req);
      }
      const m = this.member(g, req.memberId, req.instanceId);
      const changed = !sameProtocols(m.protocols, req.protocols);
      Object.assign(m, { protocols: req.protocols, sessionTimeoutMs: req.sessionTimeoutMs, rebalanceTimeoutMs: req.rebalanceTimeoutMs, lastHeartbeat: now });
      // Its expiry again from now under the session it just named: one set under a longer session comes too late.
      this.scheduleExpiry(g, m);
      if (g.state === 'PreparingRebalance') return this.park(g, m);
      if (g.state === 'CompletingRebalance' && !changed) return this.result(g, m);
      if (g.state === 'Stable' && !changed && g.leaderId !== m.memberId) return this.result(g, m);
      // The leader joining again (it wants to assign anew) or a changed subscription: a new generation.
      this.prepareRebalance(g);
      return this.park(g, m);
    });
    // The wait for the others happens outside the lock (their joins need it).
    return 'wait' in answer ? answer.wait : answer;
  }

  /** A member's join as the current generation has it (the leader gets every member's metadata). */
  private result(g: ClassicGroup, m: ClassicMember): JoinResult {
    const protocol = g.protocolName ?? '';
    return {
      generation: g.generation,
      protocolType: g.protocolType ?? '',
      protocolName: protocol,
      leader: g.leaderId ?? '',
      memberId: m.memberId,
      members: g.leaderId === m.memberId ? [...g.members.values()].map((x) => ({ memberId: x.memberId, instanceId: x.instanceId, metadata: g.metadataFor(x, protocol) })) : [],
    };
  }

  private newMember(memberId: string, req: ClassicJoinRequest): ClassicMember {
    const { group: _group, requireKnownMemberId: _v4, ...spec } = req;
    return { ...spec, memberId, assignment: Buffer.alloc(0), lastHeartbeat: this.ctx.clock.monotonic() };
  }

  private async addAndRebalance(g: ClassicGroup, memberId: string, req: ClassicJoinRequest): Promise<Parked<JoinResult>> {
    // Only now, with a member really added: a refused join, or one asked for its member id that never
    // comes back, leaves an idle Tributary group of the id as it was.
    this.takeOverTributaryGroup(g.groupId);
    this.groups.set(g.groupId, g);
    const m = this.newMember(memberId, req);
    g.add(m);
    this.scheduleExpiry(g, m);
    if (g.state !== 'PreparingRebalance') this.prepareRebalance(g);
    return this.park(g, m);
  }

  /**
   * A static member (group.instance.id) came back under a new member id: the old id is fenced
   * (FENCED_INSTANCE_ID from now on) and the new one takes its place. In a Stable group where it was not
   * the leader it keeps its assignment and the others are not disturbed; otherwise a rebalance follows.
   */
  private async replaceStatic(g: ClassicGroup, oldId: string, memberId: string, req: ClassicJoinRequest): Promise<ClassicJoinAnswer | Parked<JoinResult>> {
    const old = g.members.get(oldId)!;
    this.ctx.scheduler.cancel(`cexp:${g.groupId}:${oldId}`);
    old.awaitingJoin?.(fail('FENCED_INSTANCE_ID'));
    old.awaitingSync?.(fail('FENCED_INSTANCE_ID'));
    const wasLeader = g.leaderId === oldId;
    const unchanged = sameProtocols(old.protocols, req.protocols);
    g.members.delete(oldId);
    const m: ClassicMember = { ...this.newMember(memberId, req), assignment: old.assignment };
    g.members.set(memberId, m);
    g.instances.set(req.instanceId!, memberId);
    if (wasLeader) g.leaderId = memberId;
    this.scheduleExpiry(g, m);
    if (g.state === 'Stable' && !wasLeader && unchanged) {
      await this.ctx.persist(g);
      return this.result(g, m);
    }
    if (g.state !== 'PreparingRebalance') this.prepareRebalance(g);
    return this.park(g, m);
  }

  /**
   * The member, checked as every request of it is (as Kafka's validateMember): a static one by its instance
   * id, which must name a member (UNKNOWN_MEMBER_ID) and this one (FENCED_INSTANCE_ID: a newer one took
   * it); a dynamic one by its member id.
   */
  private member(g: ClassicGroup, memberId: string, instanceId: string | null): ClassicMember {
    if (instanceId !== null) {
      const current = g.instances.get(instanceId);
      if (current === undefined) throw fail('UNKNOWN_MEMBER_ID', { member: memberId, instance: instanceId });
      if (current !== memberId) throw fail('FENCED_INSTANCE_ID', { member: memberId });
    }
    const m = g.members.get(memberId);
    if (!m) throw fail('UNKNOWN_MEMBER_ID', { member: memberId });
    return m;
  }

  /** Parks the member's JoinGroup until the rebalance completes; may complete it now (all have joined). */
  private async park(g: ClassicGroup, m: ClassicMember): Promise<Parked<JoinResult>> {
    const parked = new Promise<JoinResult>((resolve, reject) => {
      m.awaitingJoin?.(fail('REBALANCE_IN_PROGRESS'));
      m.awaitingJoin = (r) => (r instanceof Error ? reject(r) : resolve(r));
    });
    parked.catch(() => {});
    await this.tryCompleteJoin(g, false);
    return { wait: parked };
  }

  /** A membership change: every member must join again (parked syncs hear REBALANCE_IN_PROGRESS). */
  prepareRebalance(g: ClassicGroup): void {
    const now = this.ctx.clock.monotonic();
    for (const m of g.members.values()) {
      m.awaitingSync?.(fail('REBALANCE_IN_PROGRESS'));
      m.awaitingSync = undefined;
    }
    g.state = 'PreparingRebalance';
    g.rebalanceStartedAt = now;
    // Joins arriving within the window share the generation (an empty group's first members, mostly).
    g.joinNotBefore = now + this.ctx.config.joinWindowMs;
    const deadline = now + g.rebalanceTimeoutMs(this.ctx.config.defaultRebalanceTimeoutMs);
    this.ctx.scheduler.schedule(`cjoin:${g.groupId}`, deadline, () => this.onTimer(g, `cjoin:${g.groupId}`, true));
    if (this.ctx.config.joinWindowMs > 0) this.ctx.scheduler.schedule(`cwin:${g.groupId}`, g.joinNotBefore, () => this.onTimer(g, `cwin:${g.groupId}`, false));
  }

  /** Runs `fn` now if this broker may take decisions, else tries again later under the same timer `key`. */
  private whenCanAct(key: string, fn: () => void): void {
    if (this.ctx.canAct()) fn();
    // Not sure this broker still coordinates the group: decide later (the key keeps each timer its own).
    else this.ctx.scheduler.schedule(key, this.ctx.clock.monotonic() + 250, () => this.whenCanAct(key, fn));
  }

  private onTimer(g: ClassicGroup, key: string, force: boolean): void {
    this.whenCanAct(key, () =>
      this.ctx
        .withGroup(g.groupId, () => (this.groups.get(g.groupId) === g ? this.tryCompleteJoin(g, force) : undefined))
        .catch((err: unknown) => this.ctx.logFailure(err, { group: g.groupId }, 'completing a Kafka group rebalance failed')),
    );
  }


  /**
   * Completes the rebalance once everyone joined and the window closed, or when `force`d by the rebalance
   * timeout: members without a parked join are removed, the generation moves on and is written before the
   * joins are answered (a lost write must not let a generation number be handed out twice).
   */
  async tryCompleteJoin(g: ClassicGroup, force: boolean): Promise<void> {
    if (g.state !== 'PreparingRebalance') return;
    const now = this.ctx.clock.monotonic();
    if (!force && g.members.size > 0 && !(g.allJoined() && now >= g.joinNotBefore)) return;
    this.ctx.scheduler.cancel(`cjoin:${g.groupId}`);
    this.ctx.scheduler.cancel(`cwin:${g.groupId}`);
    // Members that did not join again are removed; static ones stay until their session ends (KIP-345):
    // they come back under their instance id and keep their assignment.
    for (const m of [...g.members.values()]) if (!m.awaitingJoin && m.instanceId === null) this.removeMember(g, m, 'UNKNOWN_MEMBER_ID');
    for (const id of g.pendingMembers) this.ctx.scheduler.cancel(`cpend:${g.groupId}:${id}`);
    g.pendingMembers.clear();
    g.generation++;
    this.ctx.countRebalance(g.groupId);
    const parked = [...g.members.values()].filter((m) => m.awaitingJoin);
    if (parked.length === 0) {
      for (const m of [...g.members.values()]) this.removeMember(g, m, 'UNKNOWN_MEMBER_ID');
      // The protocol type stays (Kafka's describe shows an empty consumer group as one); the protocol goes.
      Object.assign(g, { state: 'Empty', protocolName: null, leaderId: null });
    } else {
      g.protocolName = g.selectProtocol();
      // The leader assigns: it must be one that joined.
      if (!parked.some((m) => m.memberId === g.leaderId)) g.leaderId = parked[0]!.memberId;
      g.state = 'CompletingRebalance';
      for (const m of parked) m.assignment = Buffer.alloc(0);
    }
    // A refused write drops the group (its waiting requests hear NOT_COORDINATOR) and reloads it from the log.
    await this.ctx.persist(g);
    // Dropped while writing (its partition moved): the new coordinator has it; nothing more to do here.
    if (this.groups.get(g.groupId) !== g) return;
    this.ctx.logger.info({ group: g.groupId, generation: g.generation, members: parked.length, protocol: g.protocolName, ms: now - g.rebalanceStartedAt }, 'Kafka group rebalanced');
    for (const m of parked) {
      m.lastHeartbeat = now;
      this.scheduleExpiry(g, m);
      this.answerJoin(m, this.result(g, m));
    }
    if (parked.length > 0) {
      // Members that never send SyncGroup (the leader above all) must not hold the group forever.
      const generation = g.generation;
      const key = `csync:${g.groupId}`;
      this.ctx.scheduler.schedule(key, now + g.rebalanceTimeoutMs(this.ctx.config.defaultRebalanceTimeoutMs), () =>
        this.whenCanAct(key, () =>
          this.ctx
            .withGroup(g.groupId, () => this.syncExpired(g, generation))
            .catch((err: unknown) => this.ctx.logFailure(err, { group: g.groupId }, 'ending a stalled Kafka group sync failed')),
        ),
      );
    }
  }

  private answerJoin(m: ClassicMember, r: JoinResult | Error): void {
    const answer = m.awaitingJoin;
    m.awaitingJoin = undefined;
    answer?.(r);
  }

  private async syncExpired(g: ClassicGroup, generation: number): Promise<void> {
    if (this.groups.get(g.groupId) !== g || g.state !== 'CompletingRebalance' || g.generation !== generation) return;
    for (const m of [...g.members.values()]) if (!m.awaitingSync) this.removeMember(g, m, 'UNKNOWN_MEMBER_ID');
    this.prepareRebalance(g);
    await this.tryCompleteJoin(g, false);
  }

  sync(req: ClassicMemberRef & { assignments: Array<{ memberId: string; assignment: Buffer }>; protocolType: string | null; protocolName: string | null }): Promise<Buffer> {
    return this.syncOnce(req).catch(rethrow);
  }

  private async syncOnce(req: ClassicMemberRef & { assignments: Array<{ memberId: string; assignment: Buffer }>; protocolType: string | null; protocolName: string | null }): Promise<Buffer> {
    this.ctx.checkOwner(req.group);
    this.validateGroupId(req.group);
    const answer = await this.ctx.withOwnedGroup(req.group, async (): Promise<Buffer | Parked<Buffer>> => {
      const g = this.groups.get(req.group);
      if (!g) throw fail('UNKNOWN_MEMBER_ID', { member: req.memberId });
      const m = this.member(g, req.memberId, req.instanceId);
      if (req.generation !== g.generation) throw fail('ILLEGAL_GENERATION', { current: g.generation, requested: req.generation });
      if ((req.protocolType !== null && req.protocolType !== g.protocolType) || (req.protocolName !== null && req.protocolName !== g.protocolName)) {
        throw fail('INCONSISTENT_GROUP_PROTOCOL');
      }
      m.lastHeartbeat = this.ctx.clock.monotonic();
      if (g.state === 'PreparingRebalance') throw fail('REBALANCE_IN_PROGRESS');
      if (g.state === 'Stable') return m.assignment;
      const parked = new Promise<Buffer>((resolve, reject) => {
        m.awaitingSync?.(fail('REBALANCE_IN_PROGRESS'));
        m.awaitingSync = (r) => (r instanceof Error ? reject(r) : resolve(r));
      });
      parked.catch(() => {});
      if (g.leaderId === m.memberId) await this.complete(g, req.assignments);
      return { wait: parked };
    });
    return Buffer.isBuffer(answer) ? answer : answer.wait;
  }

  /** The leader's assignments: stored, written, and handed to every member waiting in SyncGroup. */
  private async complete(g: ClassicGroup, assignments: Array<{ memberId: string; assignment: Buffer }>): Promise<void> {
    const given = new Map(assignments.map((a) => [a.memberId, a.assignment]));
    for (const m of g.members.values()) m.assignment = given.get(m.memberId) ?? Buffer.alloc(0);
    g.state = 'Stable';
    this.ctx.scheduler.cancel(`csync:${g.groupId}`);
    const waiting = [...g.members.values()].filter((m) => m.awaitingSync);
    await this.ctx.persist(g);
    if (this.groups.get(g.groupId) !== g) return;
    for (const m of waiting) this.answerSync(m, m.assignment);
  }

  private answerSync(m: ClassicMember, r: Buffer | Error): void {
    const answer = m.awaitingSync;
    m.awaitingSync = undefined;
    answer?.(r);
  }

  /** The member's standing for a heartbeat or a commit: known, not fenced, at the group's generation. */
  check(g: ClassicGroup | undefined, ref: ClassicMemberRef): ClassicMember {
    if (!g) throw fail('UNKNOWN_MEMBER_ID', { member: ref.memberId });
    const m = this.member(g, ref.memberId, ref.instanceId);
    if (ref.generation !== g.generation) throw fail('ILLEGAL_GENERATION', { current: g.generation, requested: ref.generation });
    return m;
  }

  async heartbeat(ref: ClassicMemberRef): Promise<void> {
    this.ctx.checkOwner(ref.group);
    this.validateGroupId(ref.group);
    await this.ctx.withOwnedGroup(ref.group, () => {
      const g = this.groups.get(ref.group);
      const m = this.check(g, ref);
      m.lastHeartbeat = this.ctx.clock.monotonic();
      if (g!.state === 'PreparingRebalance') throw fail('REBALANCE_IN_PROGRESS');
    }).catch(rethrow);
  }

  /** LeaveGroup: the error of each member that asked to leave (null where it left). */
  async leave(group: string, members: Array<{ memberId: string; instanceId: string | null }>): Promise<Array<ClassicGroupError | null>> {
    this.ctx.checkOwner(group);
    this.validateGroupId(group);
    return this.leaveLocked(group, members).catch(rethrow);
  }

  private leaveLocked(group: string, members: Array<{ memberId: string; instanceId: string | null }>): Promise<Array<ClassicGroupError | null>> {
    return this.ctx.withOwnedGroup(group, async () => {
      const g = this.groups.get(group);
      const out: Array<ClassicGroupError | null> = [];
      let removed = 0;
      let pendingLeft = 0;
      for (const who of members) {
        try {
          if (!g) throw fail('UNKNOWN_MEMBER_ID', { member: who.memberId });
          // A member id handed out (KIP-394) that never joined: forgotten, so the rebalance does not wait for it.
          if (g.pendingMembers.delete(who.memberId)) {
            this.ctx.scheduler.cancel(`cpend:${g.groupId}:${who.memberId}`);
            pendingLeft++;
            out.push(null);
            continue;
          }
          // v3+: a static member may leave by its instance id alone.
          const id = who.memberId === '' && who.instanceId !== null ? (g.instances.get(who.instanceId) ?? '') : who.memberId;
          const m = this.member(g, id, who.instanceId);
          this.removeMember(g, m, 'UNKNOWN_MEMBER_ID');
          removed++;
          out.push(null);
        } catch (err) {
          if (!(err instanceof ClassicGroupError)) throw err;
          out.push(err);
        }
      }
      if (g && removed > 0) await this.membersChanged(g);
      else if (g && pendingLeft > 0) await this.tryCompleteJoin(g, false);
      return out;
    });
  }

  private removeMember(g: ClassicGroup, m: ClassicMember, why: 'UNKNOWN_MEMBER_ID'): void {
    g.remove(m.memberId);
    this.ctx.scheduler.cancel(`cexp:${g.groupId}:${m.memberId}`);
    this.answerJoin(m, fail(why));
    this.answerSync(m, fail(why));
  }

  /** After members left or expired: the others rebalance (an emptied group completes at once). */
  private async membersChanged(g: ClassicGroup): Promise<void> {
    if (g.state === 'PreparingRebalance') return this.tryCompleteJoin(g, false);
    if (g.state === 'Empty' || g.state === 'Dead') return;
    this.prepareRebalance(g);
    await this.tryCompleteJoin(g, false);
  }

  scheduleExpiry(g: ClassicGroup, m: ClassicMember): void {
    this.ctx.scheduler.schedule(`cexp:${g.groupId}:${m.memberId}`, m.lastHeartbeat + m.sessionTimeoutMs, () => this.onExpiry(g, m));
  }

  private onExpiry(g: ClassicGroup, m: ClassicMember): void {
    if (!this.ctx.canAct()) {
      this.whenCanAct(`cexp:${g.groupId}:${m.memberId}`, () => this.onExpiry(g, m));
      return;
    }
    this.ctx
      .withGroup(g.groupId, async () => {
        if (this.groups.get(g.groupId) !== g || g.members.get(m.memberId) !== m) return;
        const now = this.ctx.clock.monotonic();
        // A member waiting in JoinGroup or SyncGroup is alive: its request is the heartbeat.
        if (m.awaitingJoin || m.awaitingSync || now < m.lastHeartbeat + m.sessionTimeoutMs) {
          const next = Math.max(now, m.lastHeartbeat) + m.sessionTimeoutMs;
          this.ctx.scheduler.schedule(`cexp:${g.groupId}:${m.memberId}`, next, () => this.onExpiry(g, m));
          return;
        }
        this.ctx.logger.info({ group: g.groupId, member: m.memberId, missedByMs: now - m.lastHeartbeat - m.sessionTimeoutMs }, 'Kafka group member expired');
        this.removeMember(g, m, 'UNKNOWN_MEMBER_ID');
        await this.membersChanged(g);
      })
      .catch((err: unknown) => this.ctx.logFailure(err, { group: g.groupId }, 'expiring a Kafka group member failed'));
  }

  private expirePending(g: ClassicGroup, memberId: string): void {
    this.whenCanAct(`cpend:${g.groupId}:${memberId}`, () =>
      this.ctx
        .withGroup(g.groupId, async () => {
          if (!g.pendingMembers.delete(memberId) || this.groups.get(g.groupId) !== g) return;
          // A group that only ever handed out member ids (never joined, never written) is not kept: ids
          // asked for and never used must not pile up groups in memory.
          if (g.generation === 0 && g.members.size === 0 && g.pendingMembers.size === 0) {
            this.groups.delete(g.groupId);
            return;
          }
          await this.tryCompleteJoin(g, false);
        })
        .catch((err: unknown) => this.ctx.logFailure(err, { group: g.groupId }, 'dropping a pending Kafka group member failed')),
    );
  }

  /** The group is no longer served here (partition moved, coordinator stopping): its waiting requests end. */
  forgetGroup(g: ClassicGroup, why: TributaryError): void {
    this.ctx.scheduler.cancel(`cjoin:${g.groupId}`);
    this.ctx.scheduler.cancel(`cwin:${g.groupId}`);
    this.ctx.scheduler.cancel(`csync:${g.groupId}`);
    for (const id of g.pendingMembers) this.ctx.scheduler.cancel(`cpend:${g.groupId}:${id}`);
    for (const m of g.members.values()) {
      this.ctx.scheduler.cancel(`cexp:${g.groupId}:${m.memberId}`);
      const join = m.awaitingJoin;
      const sync = m.awaitingSync;
      m.awaitingJoin = m.awaitingSync = undefined;
      join?.(why);
      sync?.(why);
    }
  }
}

function sameProtocols(a: ClassicProtocol[], b: ClassicProtocol[]): boolean {
  return a.length === b.length && a.every((p, i) => p.name === b[i]!.name && p.metadata.equals(b[i]!.metadata));
}

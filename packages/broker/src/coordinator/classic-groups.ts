import { TributaryError } from 'tributary-protocol/errors.js';
import { wallTimeOf } from '../common/clock.js';
import { ClassicGroup, ClassicGroupError, type ClassicSnapshot } from './classic-group.js';
import { type ClassicJoinAnswer, type ClassicJoinRequest, ClassicMembership, type ClassicMemberRef } from './classic-membership.js';
import type { GroupContext } from './group-context.js';
import type { GroupOffsets } from './group-offsets.js';
import type { OffsetEntry } from './offset-store.js';

export type { ClassicJoinAnswer, ClassicJoinRequest, ClassicMemberRef } from './classic-membership.js';
export { ClassicGroupError } from './classic-group.js';

/** One member of a classic group as DescribeGroups and GROUP_STATUS show it. */
export interface ClassicMemberDescription {
  memberId: string;
  instanceId: string | null;
  clientId: string;
  clientHost: string;
  /** Its metadata for the group's protocol. */
  metadata: Buffer;
  assignment: Buffer;
  /** Wall time (epoch ms). */
  lastHeartbeat: number;
  sessionTimeoutMs: number;
}

export interface ClassicGroupDescription {
  groupId: string;
  state: string;
  protocolType: string;
  protocolName: string;
  generation: number;
  leader: string | null;
  members: ClassicMemberDescription[];
}

/**
 * The Kafka classic-protocol groups of the coordinator (docs/kafka.md, "Consumer groups"): membership
 * (classic-membership.ts), generation-fenced commits into the same offsets as Tributary groups
 * (group-offsets.ts), and what DescribeGroups, ListGroups and GROUP_STATUS show of them.
 */
export class ClassicGroups {
  readonly membership: ClassicMembership;

  constructor(
    private readonly ctx: GroupContext,
    private readonly offsets: GroupOffsets,
  ) {
    this.membership = new ClassicMembership(ctx);
  }

  join(req: ClassicJoinRequest): Promise<ClassicJoinAnswer> {
    return this.membership.join(req);
  }

  sync(req: ClassicMemberRef & { assignments: Array<{ memberId: string; assignment: Buffer }>; protocolType: string | null; protocolName: string | null }): Promise<Buffer> {
    return this.membership.sync(req);
  }

  heartbeat(ref: ClassicMemberRef): Promise<void> {
    return this.membership.heartbeat(ref);
  }

  leave(group: string, members: Array<{ memberId: string; instanceId: string | null }>): Promise<Array<ClassicGroupError | null>> {
    return this.membership.leave(group, members);
  }

  /**
   * OffsetCommit: a member commits under the generation it joined (UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID,
   * ILLEGAL_GENERATION otherwise; REBALANCE_IN_PROGRESS while the leader's assignment is awaited); a
   * client outside any group (generation -1, no member id) only into a group without members. The
   * offsets are those of every group: durable, never moving back. Each topic is one all-or-nothing commit.
   */
  async commit(ref: ClassicMemberRef, topics: Array<{ topic: string; entries: OffsetEntry[] }>): Promise<Array<Error | null>> {
    this.membership.validateGroupId(ref.group);
    const checkMember = this.memberCheck(ref);
    const out: Array<Error | null> = [];
    for (const t of topics) {
      try {
        await this.offsets.commitChecked({ group: ref.group, topic: t.topic, entries: t.entries }, checkMember);
        out.push(null);
      } catch (err) {
        if (!(err instanceof Error)) throw err;
        out.push(err);
      }
    }
    return out;
  }

  /**
   * The check of a commit's member, to run under the group's lock (GroupOffsets.commitChecked; a
   * transaction's TxnOffsetCommit stages offsets under the same check, with `transactional`). As in Kafka,
   * a transactional commit without a member (TxnOffsetCommit v0-2 carries none) is not checked against
   * the members, and one with a member is not refused while the group completes a rebalance: the
   * transaction's producer fencing guards it.
   */
  memberCheck(ref: ClassicMemberRef, opts: { transactional?: boolean } = {}): () => void {
    return () => {
      const t = this.ctx.groups.get(ref.group);
      if (t && !t.deleted && t.members.size > 0) throw new ClassicGroupError('INCONSISTENT_GROUP_PROTOCOL', { reason: 'a Tributary group of this id has members' });
      const g = this.ctx.classicGroups.get(ref.group);
      // A client outside any group (generation -1): only while the group has no members, as Kafka allows;
      // a transactional commit that names no member, whatever the members.
      const memberless = ref.memberId === '' && ref.instanceId === null;
      if (ref.generation < 0 && (!g || g.members.size === 0 || (opts.transactional && memberless))) return;
      const m = this.membership.check(g, ref);
      if (g!.state === 'CompletingRebalance' && !opts.transactional) throw new ClassicGroupError('REBALANCE_IN_PROGRESS');
      m.lastHeartbeat = this.ctx.clock.monotonic();
    };
  }

  /**
   * OffsetFetch: the committed next offset of each partition, -1 where none is. `requireStable` (v7+)
   * answers UNSTABLE_OFFSET_COMMIT for a partition a transaction holds offsets of; without it the last
   * committed offset is answered, as Kafka does for older clients. Null topics: every committed one.
   */
  fetch(group: string, topics: Array<{ topic: string; partitions: number[] }> | null, requireStable: boolean): Array<{ topic: string; partitions: Array<{ partition: number; offset: number; error: Error | null }> }> {
    this.ctx.checkOwner(group);
    this.membership.validateGroupId(group);
    const asked = topics ?? this.offsets.committedPartitions(group);
    // A write of unknown outcome left an offset the store may not hold (group-offsets.ts, `uncertain`): the
    // group is refused with an error clients retry, at group level (a partition-level one they do not).
    const known = asked.map((t) =>
      t.partitions.map((p) => {
        const k = this.offsets.knownOffset(group, t.topic, p);
        if (!k.known) throw new TributaryError('COORDINATOR_LOADING', { group, reason: `the outcome of the last write of ${t.topic}[${p}]'s offset is not known yet` });
        return k.offset;
      }),
    );
    return asked.map((t, i) => ({
      topic: t.topic,
      partitions: t.partitions.map((p, j) => {
        if (requireStable && this.offsets.hasPending(group, t.topic, p)) return { partition: p, offset: -1, error: new TributaryError('UNSTABLE_OFFSET_COMMIT', { partition: p }) };
        return { partition: p, offset: known[i]![j] ?? -1, error: null };
      }),
    }));
  }

  /** DescribeGroups: a classic group, a Tributary group (protocol type `tributary`), or Dead when unknown. */
  describe(groupId: string): ClassicGroupDescription {
    this.ctx.checkOwner(groupId);
    const g = this.ctx.classicGroups.get(groupId);
    if (g) {
      const protocol = g.protocolName ?? '';
      return {
        groupId,
        state: g.state,
        protocolType: g.protocolType ?? '',
        protocolName: protocol,
        generation: g.generation,
        leader: g.leaderId,
        members: [...g.members.values()].map((m) => ({
          memberId: m.memberId,
          instanceId: m.instanceId,
          clientId: m.clientId,
          clientHost: m.clientHost,
          // As Kafka: a member's metadata and assignment are shown once the group is Stable.
          metadata: g.state === 'Stable' ? g.metadataFor(m, protocol) : Buffer.alloc(0),
          assignment: g.state === 'Stable' ? m.assignment : Buffer.alloc(0),
          lastHeartbeat: wallTimeOf(this.ctx.clock, m.lastHeartbeat),
          sessionTimeoutMs: m.sessionTimeoutMs,
        })),
      };
    }
    const t = this.ctx.groups.get(groupId);
    if (t && !t.deleted) return { groupId, state: t.state, protocolType: 'tributary', protocolName: t.assignor, generation: t.generation, leader: t.leaderId ?? null, members: [] };
    const state = this.offsets.hasOffsets(groupId) ? 'Empty' : 'Dead';
    return { groupId, state, protocolType: '', protocolName: '', generation: 0, leader: null, members: [] };
  }

  /** ListGroups: every group this coordinator serves, of either kind, and groups that only have offsets. */
  list(): Array<{ groupId: string; protocolType: string; state: string }> {
    const out = new Map<string, { groupId: string; protocolType: string; state: string }>();
    for (const name of this.offsets.groupsWithOffsets()) out.set(name, { groupId: name, protocolType: '', state: 'Empty' });
    for (const g of this.ctx.groups.values()) if (!g.deleted) out.set(g.groupId, { groupId: g.groupId, protocolType: 'tributary', state: g.state });
    for (const g of this.ctx.classicGroups.values()) out.set(g.groupId, { groupId: g.groupId, protocolType: g.protocolType ?? '', state: g.state });
    return [...out.values()].sort((a, b) => (a.groupId < b.groupId ? -1 : a.groupId > b.groupId ? 1 : 0));
  }

  /** A group loaded from its snapshot: sessions armed again, and a rebalance under way at the crash redone. */
  restore(s: ClassicSnapshot): void {
    // Whatever is in memory under the id is older than the log: its timers and waiting requests end first.
    this.forget(s.group, new TributaryError('NOT_COORDINATOR', { reason: 'the group was reloaded' }));
    const g = ClassicGroup.restore(s, this.ctx.clock.monotonic());
    this.ctx.classicGroups.set(g.groupId, g);
    for (const m of g.members.values()) this.membership.scheduleExpiry(g, m);
    // Its waiting requests died with the old coordinator: the members learn of the rebalance and join again.
    if (g.state === 'PreparingRebalance' || g.state === 'CompletingRebalance') this.membership.prepareRebalance(g);
  }

  /**
   * What names a group's topics, for the topic ACLs' view of groups (docs/security.md, "Groups and topic
   * ACLs"): the Tributary group's topic and every topic it has offsets in, and for a classic group its
   * members' protocol metadata and assignments (the broker layer reads the consumer protocol's).
   * Undefined when no group of that name is known here.
   */
  footprint(groupId: string): { topics: string[]; protocolType: string; subscriptions: Buffer[]; assignments: Buffer[] } | undefined {
    const topics = this.offsets.committedPartitions(groupId).map((t) => t.topic);
    const classic = this.ctx.classicGroups.get(groupId);
    if (classic) {
      const members = [...classic.members.values()];
      return { topics, protocolType: classic.protocolType ?? '', subscriptions: members.flatMap((m) => m.protocols.map((p) => p.metadata)), assignments: members.map((m) => m.assignment) };
    }
    const g = this.ctx.groups.get(groupId);
    if (g && !g.deleted) return { topics: [g.topic, ...topics], protocolType: 'tributary', subscriptions: [], assignments: [] };
    return topics.length > 0 ? { topics, protocolType: '', subscriptions: [], assignments: [] } : undefined;
  }

  /** The group is no longer served here: its waiting requests hear `why`, its timers stop. */
  forget(groupId: string, why: TributaryError): void {
    const g = this.ctx.classicGroups.get(groupId);
    if (!g) return;
    this.ctx.classicGroups.delete(groupId);
    this.membership.forgetGroup(g, why);
  }
}

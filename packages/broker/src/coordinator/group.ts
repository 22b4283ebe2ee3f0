/**
 * One consumer group's state and the incremental rebalance rules (docs/architecture.md, "Group coordinator"), with no I/O:
 * the coordinator persists and notifies around these transitions.
 *
 * Ownership is the safety property: `owners` maps each partition to at most one member. A partition leaves
 * its owner only when that member acknowledges an assignment without it (SYNC_GROUP), leaves, or expires;
 * only then can the member it is targeted to take it. Members whose partitions do not move are never
 * stopped: their commits stay valid under their own generation until they rejoin.
 */
import type { Topic } from '../partition/topic-manager.js';

/** What a group's assignment depends on of its topic: its id (a re-created topic is another) and partition count. */
export function topicShape(topic: Topic | undefined): string {
  return topic ? `${topic.def.topicId}/${topic.partitions.length}` : 'none';
}

export type GroupState = 'Empty' | 'PreparingRebalance' | 'CompletingRebalance' | 'Stable' | 'Dead';
export type AssignmentProtocol = 'server' | 'client';

export interface Member {
  memberId: string;
  clientId: string;
  instanceId: string | undefined;
  host: string;
  sessionTimeoutMs: number;
  rebalanceTimeoutMs: number;
  /** Like every time of a member here, a `clock.monotonic()` reading: never shown or persisted as is. */
  lastHeartbeat: number;
  /** The generation this member last joined at: its commits are fenced against it. */
  generation: number;
  /** Partitions the coordinator considers owned by this member. */
  owned: Set<number>;
  /** Partitions the current plan gives this member (some may still be owned by others). */
  target: number[];
  /** Set when the member must rejoin: a new generation, or partitions it waits for became free. */
  needsRejoin: boolean;
  /** When needsRejoin was set, for the rebalance timeout. */
  notifiedAt: number;
  /** Joined (or rejoined) but has not yet confirmed its assignment with SYNC_GROUP. */
  awaitingSync: boolean;
  joinedAt: number;
  /**
   * Partitions whose committed offsets an admin reset while this member was in the group: it may hold a
   * reader positioned before the reset, so its JOIN replies name them (`reset=`) until it has synced a
   * later generation, and its commits for them are refused (docs/protocol.md, RESET_OFFSETS).
   */
  reset: Set<number>;
}

export type ChangeCause = 'join' | 'leave' | 'expired' | 'rebalance_timeout' | 'static_replace' | 'subscription' | 'deleted' | 'offsets_reset';

export interface ChangeReason {
  cause: ChangeCause;
  member: string;
  /** For expiries: how far past its session timeout the member's last heartbeat was. */
  missedByMs?: number;
}

export interface GenerationChange {
  generation: number;
  /** Every membership change batched into this generation by the join window. */
  reasons: ChangeReason[];
  /** When the first of those changes happened (wall time, epoch ms). */
  at: number;
  /** Filled when every member has synced the generation and every transfer is done. */
  rebalanceMs?: number;
  /** Partitions the new targets give to another member than before (server-side assignment; absent in older snapshots). */
  moved?: number[];
}

export const HISTORY_LIMIT = 20;

export class ConsumerGroup {
  topic: string;
  generation = 0;
  leaderId: string | undefined;
  assignor: string;
  protocol: AssignmentProtocol;
  readonly members = new Map<string, Member>();
  /** partition → owning member id. */
  readonly owners = new Map<number, string>();
  /** Static instance id → member id. */
  readonly instances = new Map<string, string>();
  /** Member ids replaced by a newer member with the same static instance id. */
  readonly fencedIds = new Set<string>();
  history: GenerationChange[] = [];
  /** Membership changes waiting for the join window to close. */
  pendingCauses: ChangeReason[] = [];
  /** Client-side assignment: the generation whose plan the leader has submitted. */
  planGeneration = 0;
  /**
   * The topic the current generation was assigned over (its id and partition count, topicShape()): a
   * change (partitions added, the topic deleted or re-created) starts a new generation (rebalance.ts).
   */
  topicShape: string | undefined;
  /** Monotonic; 0 while no rebalance is under way. */
  rebalanceStartedAt = 0;
  deleted = false;
  /**
   * When the group last became empty (wall, epoch ms), persisted with its snapshot so that the offsets
   * retention counts from it after a restart (group-expiry.ts); undefined while it has members.
   */
  emptiedAt: number | undefined;
  /** Why this object was dropped: a write of it the log refused, nothing written (GroupCoordinator.revert). */
  refused: Error | undefined;

  constructor(
    readonly groupId: string,
    topic: string,
    assignor: string,
    protocol: AssignmentProtocol,
  ) {
    this.topic = topic;
    this.assignor = assignor;
    this.protocol = protocol;
  }

  get state(): GroupState {
    if (this.deleted) return 'Dead';
    if (this.members.size === 0) return 'Empty';
    if (this.pendingCauses.length > 0) return 'PreparingRebalance';
    if (!this.isSettled()) return 'CompletingRebalance';
    return 'Stable';
  }

  /**
   * Whether `topicId`, the id of the group's topic now, is another than the one the current generation was
   * assigned for: the topic was deleted and created again under its name since (a new log). False when
   * either is unknown (no generation yet, no topic then or now).
   */
  assignedForOtherTopic(topicId: string | undefined): boolean {
    const assignedFor = this.topicShape?.split('/')[0];
    return topicId !== undefined && assignedFor !== undefined && assignedFor !== 'none' && assignedFor !== topicId;
  }

  /** Every member synced at the current generation and owns exactly its target. */
  isSettled(): boolean {
    if (this.protocol === 'client' && this.planGeneration !== this.generation && this.members.size > 0) return false;
    for (const m of this.members.values()) {
      if (m.needsRejoin || m.awaitingSync || m.generation !== this.generation) return false;
      if (m.owned.size !== m.target.length) return false;
      for (const p of m.target) if (!m.owned.has(p)) return false;
    }
    return true;
  }

  /** What the member may own right now: its current partitions plus free partitions of its target. */
  entitlement(m: Member): number[] {
    const out = new Set<number>();
    const target = new Set(m.target);
    for (const p of m.owned) if (target.has(p)) out.add(p);
    for (const p of m.target) if (!this.owners.has(p)) out.add(p);
    return [...out].sort((a, b) => a - b);
  }

  /**
   * SYNC_GROUP's effect: the member has installed its new assignment, so it gives up what is no longer
   * its target and takes the free partitions of its target. Returns the partitions freed by the revocation.
   */
  applySync(m: Member): number[] {
    // Synced a generation that began after the reset: the member fetched the reset partitions' offsets anew.
    m.reset.clear();
    const target = new Set(m.target);
    const freed: number[] = [];
    for (const p of [...m.owned]) {
      if (!target.has(p)) {
        m.owned.delete(p);
        if (this.owners.get(p) === m.memberId) this.owners.delete(p);
        freed.push(p);
      }
    }
    for (const p of m.target) {
      if (!this.owners.has(p)) {
        this.owners.set(p, m.memberId);
        m.owned.add(p);
      }
    }
    m.needsRejoin = false;
    return freed;
  }

  /** Drop a member; its partitions become free. Returns them. */
  removeMember(memberId: string): number[] {
    const m = this.members.get(memberId);
    if (!m) return [];
    this.members.delete(memberId);
    if (m.instanceId && this.instances.get(m.instanceId) === memberId) this.instances.delete(m.instanceId);
    const freed: number[] = [];
    for (const p of m.owned) {
      if (this.owners.get(p) === memberId) {
        this.owners.delete(p);
        freed.push(p);
      }
    }
    if (this.leaderId === memberId) this.leaderId = this.members.keys().next().value;
    return freed;
  }

  /** Members whose target includes one of `freed` and who do not own it: they must come and take it. */
  waitingFor(freed: number[]): Member[] {
    if (freed.length === 0) return [];
    const set = new Set(freed);
    const out: Member[] = [];
    for (const m of this.members.values()) {
      if (m.target.some((p) => set.has(p) && !this.owners.has(p))) out.push(m);
    }
    return out;
  }

  /** Drop partitions beyond the topic's partition count (a topic re-created smaller). */
  clampToPartitions(count: number): void {
    for (const [p, id] of [...this.owners]) {
      if (p >= count) {
        this.owners.delete(p);
        this.members.get(id)?.owned.delete(p);
      }
    }
    for (const m of this.members.values()) m.target = m.target.filter((p) => p < count);
  }

  recordChange(change: GenerationChange): void {
    this.history.push(change);
    if (this.history.length > HISTORY_LIMIT) this.history = this.history.slice(-HISTORY_LIMIT);
  }
}

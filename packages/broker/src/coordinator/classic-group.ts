/**
 * A consumer group of the Kafka classic protocol (docs/kafka.md, "Consumer groups"): the group members
 * Kafka clients form through JoinGroup and SyncGroup. Unlike a Tributary group (group.ts) it may subscribe
 * to many topics and the coordinator does not assign: it picks a protocol every member supports, hands the
 * leader every member's metadata, and passes the leader's assignments (opaque bytes) to the members. Its
 * safety is the generation: a member's commits carry the generation it joined, and every completed join
 * is durable before it is answered, so a generation number is never handed out twice.
 *
 * This file is the state with no I/O; classic-membership.ts carries out the requests around it.
 */
import { TributaryError } from 'tributary-protocol/errors.js';

export type ClassicState = 'Empty' | 'PreparingRebalance' | 'CompletingRebalance' | 'Stable' | 'Dead';

/** The classic protocol's own errors, by their Kafka names (the Kafka listener maps them to codes). */
export const CLASSIC_ERROR_NAMES = [
  'UNKNOWN_MEMBER_ID',
  'ILLEGAL_GENERATION',
  'REBALANCE_IN_PROGRESS',
  'FENCED_INSTANCE_ID',
  'INCONSISTENT_GROUP_PROTOCOL',
  'INVALID_SESSION_TIMEOUT',
  'INVALID_GROUP_ID',
  'GROUP_MAX_SIZE_REACHED',
  'NOT_COORDINATOR',
  'COORDINATOR_NOT_AVAILABLE',
] as const;
export type ClassicErrorName = (typeof CLASSIC_ERROR_NAMES)[number];

/** A classic group error's code, also after a broker-to-broker reply turned it into a plain TributaryError. */
export function isClassicErrorName(code: string): code is ClassicErrorName {
  return (CLASSIC_ERROR_NAMES as readonly string[]).includes(code);
}

export class ClassicGroupError extends TributaryError {
  constructor(
    readonly kafkaName: ClassicErrorName,
    fields: Record<string, string | number | boolean> = {},
  ) {
    super(kafkaName, fields);
  }
}

export interface ClassicProtocol {
  name: string;
  metadata: Buffer;
}

/** What a parked JoinGroup is answered with. */
export interface JoinResult {
  generation: number;
  protocolType: string;
  protocolName: string;
  leader: string;
  memberId: string;
  /** The leader's answer lists every member with its metadata for the chosen protocol; others get none. */
  members: Array<{ memberId: string; instanceId: string | null; metadata: Buffer }>;
}

/** Who a member is and what it offers, as its JoinGroup says. */
export interface ClassicMemberSpec {
  memberId: string;
  instanceId: string | null;
  clientId: string;
  clientHost: string;
  sessionTimeoutMs: number;
  rebalanceTimeoutMs: number;
  protocolType: string;
  protocols: ClassicProtocol[];
}

export interface ClassicMember extends ClassicMemberSpec {
  /** The leader's assignment for this member at the current generation (empty until it synced). */
  assignment: Buffer;
  /** A `clock.monotonic()` reading, as the group's other times here. */
  lastHeartbeat: number;
  /** A JoinGroup waiting for the rebalance to complete (not persisted). */
  awaitingJoin?: (r: JoinResult | Error) => void;
  /** A SyncGroup waiting for the leader's assignments (not persisted). */
  awaitingSync?: (r: Buffer | Error) => void;
}

/** A classic group as written to `__consumer_offsets` (the `kind` tells it from a Tributary group). */
export interface ClassicSnapshot {
  kind: 'classic';
  group: string;
  generation: number;
  state: ClassicState;
  protocolType: string | null;
  protocolName: string | null;
  leader: string | null;
  members: Array<{
    id: string;
    instance: string | null;
    clientId: string;
    host: string;
    sessionTimeoutMs: number;
    rebalanceTimeoutMs: number;
    protocolType: string;
    /** base64 metadata per protocol name. */
    protocols: Array<{ name: string; metadata: string }>;
    assignment: string;
  }>;
  /** ClassicGroup.emptiedAt (absent while it has members and in older snapshots). */
  emptiedAt?: number;
}

export class ClassicGroup {
  generation = 0;
  state: ClassicState = 'Empty';
  protocolType: string | null = null;
  protocolName: string | null = null;
  leaderId: string | null = null;
  readonly members = new Map<string, ClassicMember>();
  /** group.instance.id → member id. */
  readonly instances = new Map<string, string>();
  /** Member ids handed out with MEMBER_ID_REQUIRED whose JoinGroup has not come yet. */
  readonly pendingMembers = new Set<string>();
  /** While PreparingRebalance: the join completes no earlier than this (the initial delay of an empty group). */
  joinNotBefore = 0;
  rebalanceStartedAt = 0;
  /** When the group last became empty (wall, epoch ms; undefined while it has members): group-expiry.ts. */
  emptiedAt: number | undefined;

  constructor(readonly groupId: string) {}

  /** Whether every member (and every member id handed out) has a JoinGroup parked. */
  allJoined(): boolean {
    if (this.pendingMembers.size > 0) return false;
    for (const m of this.members.values()) if (!m.awaitingJoin) return false;
    return true;
  }

  /** The longest rebalance timeout of the members: how long a rebalance waits for them. */
  rebalanceTimeoutMs(fallback: number): number {
    let t = 0;
    for (const m of this.members.values()) t = Math.max(t, m.rebalanceTimeoutMs);
    return t > 0 ? t : fallback;
  }

  /** Protocols every member supports (all of them when the group is empty). */
  commonProtocols(): Set<string> | null {
    let common: Set<string> | null = null;
    for (const m of this.members.values()) {
      const names = new Set(m.protocols.map((p) => p.name));
      const prev = common as Set<string> | null;
      common = prev === null ? names : new Set([...prev].filter((n) => names.has(n)));
    }
    return common;
  }

  /** Whether a member with these protocols could join: same protocol type, one protocol in common. */
  supports(protocolType: string, protocols: ClassicProtocol[]): boolean {
    if (this.members.size === 0) return true;
    if (protocolType !== this.protocolType) return false;
    const common = this.commonProtocols();
    return protocols.some((p) => common?.has(p.name));
  }

  /** The protocol of the new generation: among those all support, the one most members prefer (Kafka's vote). */
  selectProtocol(): string {
    const common = this.commonProtocols() ?? new Set<string>();
    const votes = new Map<string, number>();
    for (const m of this.members.values()) {
      const choice = m.protocols.find((p) => common.has(p.name));
      if (choice) votes.set(choice.name, (votes.get(choice.name) ?? 0) + 1);
    }
    let best = '';
    let bestVotes = -1;
    // Ties go to the first member's preference order, so the choice does not depend on map order alone.
    const first = [...this.members.values()][0];
    for (const p of first?.protocols ?? []) {
      const v = votes.get(p.name) ?? 0;
      if (common.has(p.name) && v > bestVotes) {
        best = p.name;
        bestVotes = v;
      }
    }
    return best;
  }

  metadataFor(m: ClassicMember, protocol: string): Buffer {
    return m.protocols.find((p) => p.name === protocol)?.metadata ?? Buffer.alloc(0);
  }

  /** Removes a member (left, expired, or not rejoined in time); the leader passes to another. */
  remove(memberId: string): ClassicMember | undefined {
    const m = this.members.get(memberId);
    if (!m) return undefined;
    this.members.delete(memberId);
    if (m.instanceId !== null && this.instances.get(m.instanceId) === memberId) this.instances.delete(m.instanceId);
    if (this.leaderId === memberId) this.leaderId = this.members.keys().next().value ?? null;
    return m;
  }

  add(m: ClassicMember): void {
    this.members.set(m.memberId, m);
    if (m.instanceId !== null) this.instances.set(m.instanceId, m.memberId);
    if (this.leaderId === null) this.leaderId = m.memberId;
    if (this.members.size === 1) this.protocolType = m.protocolType;
  }

  snapshot(): ClassicSnapshot {
    return {
      kind: 'classic',
      group: this.groupId,
      generation: this.generation,
      state: this.state,
      protocolType: this.protocolType,
      protocolName: this.protocolName,
      leader: this.leaderId,
      members: [...this.members.values()].map((m) => ({
        id: m.memberId,
        instance: m.instanceId,
        clientId: m.clientId,
        host: m.clientHost,
        sessionTimeoutMs: m.sessionTimeoutMs,
        rebalanceTimeoutMs: m.rebalanceTimeoutMs,
        protocolType: m.protocolType,
        protocols: m.protocols.map((p) => ({ name: p.name, metadata: p.metadata.toString('base64') })),
        assignment: m.assignment.toString('base64'),
      })),
      ...(this.emptiedAt === undefined ? {} : { emptiedAt: this.emptiedAt }),
    };
  }

  /**
   * A group as its snapshot has it, every member given a full session from `now`. A rebalance that was
   * under way restarts: its members must join again (their parked requests died with the old coordinator).
   */
  static restore(s: ClassicSnapshot, now: number): ClassicGroup {
    const g = new ClassicGroup(s.group);
    g.generation = s.generation;
    g.state = s.state;
    g.protocolType = s.protocolType;
    g.protocolName = s.protocolName;
    g.leaderId = s.leader;
    for (const ms of s.members) {
      g.add({
        memberId: ms.id,
        instanceId: ms.instance,
        clientId: ms.clientId,
        clientHost: ms.host,
        sessionTimeoutMs: ms.sessionTimeoutMs,
        rebalanceTimeoutMs: ms.rebalanceTimeoutMs,
        protocolType: ms.protocolType,
        protocols: ms.protocols.map((p) => ({ name: p.name, metadata: Buffer.from(p.metadata, 'base64') })),
        assignment: Buffer.from(ms.assignment, 'base64'),
        lastHeartbeat: now,
      });
    }
    g.leaderId = s.leader;
    g.emptiedAt = s.emptiedAt;
    if (g.members.size === 0) g.state = 'Empty';
    return g;
  }
}

export function isClassicSnapshot(s: unknown): s is ClassicSnapshot {
  return typeof s === 'object' && s !== null && (s as { kind?: unknown }).kind === 'classic';
}

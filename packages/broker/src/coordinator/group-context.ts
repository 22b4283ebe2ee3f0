import type { Logger } from '../common/logger.js';
import type { Clock } from '../common/clock.js';
import type { TopicManager } from '../partition/topic-manager.js';
import type { LogOffsetsOf } from '../partition/log-offsets.js';
import { TributaryError, invalidParam } from 'tributary-protocol/errors.js';
import type { AssignorName } from 'tributary-protocol/assignors.js';
import type { ClassicGroup } from './classic-group.js';
import type { ConsumerGroup, Member } from './group.js';
import type { GroupLog } from './group-log.js';
import type { OffsetStore } from './offset-store.js';
import type { Scheduler } from './scheduler.js';

/**
 * What the parts of the group coordinator share (docs/architecture.md, "Group coordinator"): the
 * coordinator (group-coordinator.ts) builds one of these and hands it to its membership, rebalance,
 * offsets and admin parts, which never import the coordinator itself.
 */

export interface CoordinatorConfig {
  /** Joins and leaves that arrive within this window share one new generation. */
  joinWindowMs: number;
  defaultSessionTimeoutMs: number;
  minSessionTimeoutMs: number;
  maxSessionTimeoutMs: number;
  defaultRebalanceTimeoutMs: number;
  defaultAssignor: AssignorName;
  /** An empty group is deleted, offsets and all, this long after it emptied or last committed; 0: never (group-expiry.ts). */
  offsetsRetentionMs: number;
}

/** `[a-zA-Z0-9._-]`, 1-255 characters: ids travel unquoted in replies and plans. */
const ID_RE = /^[A-Za-z0-9._-]{1,255}$/;

export function validateId(param: string, v: string): void {
  if (!ID_RE.test(v)) throw invalidParam(param, v.length === 0 ? 'must not be empty' : v.length > 255 ? 'longer than 255 characters' : 'only letters, digits, ".", "_" and "-" are allowed');
}

export interface GroupContext {
  readonly topics: TopicManager;
  readonly groupLog: GroupLog;
  readonly offsetStore: OffsetStore;
  readonly config: CoordinatorConfig;
  readonly logger: Logger;
  /** Logs a failed timer-driven change; a storage_error rate-limited, as a full disk repeats it (docs/operations.md). */
  readonly logFailure: (err: unknown, fields: Record<string, unknown>, msg: string) => void;
  /** Log ends and starts as the partitions' leaders see them: lag and offset resets (partition/log-offsets.ts). */
  readonly logOffsets: LogOffsetsOf;
  /**
   * Every time the coordinator reads and every timer it arms: no part reads time any other way. Deadlines
   * and durations use `monotonic()`, shown or persisted timestamps `now()`.
   */
  readonly clock: Clock;
  /** Session expiry, join windows and rebalance timeouts. */
  readonly scheduler: Scheduler;
  /** The groups this coordinator serves, by id. */
  readonly groups: Map<string, ConsumerGroup>;
  /** The Kafka classic-protocol groups it serves (classic-group.ts); a group id names one kind or the other. */
  readonly classicGroups: Map<string, ClassicGroup>;
  /** Whether the coordinator has been stopped. */
  stopped(): boolean;
  /** Runs `fn` under the group's lock; refused once stopped. */
  withGroup<T>(groupId: string, fn: () => Promise<T> | T): Promise<T>;
  /**
   * withGroup for a request: ownership is checked again once the lock is held, because a refused write
   * ahead in the queue drops the group's partition (GroupCoordinator.resync) and the request must then
   * hear COORDINATOR_LOADING or NOT_COORDINATOR (retriable), not group_not_found.
   */
  withOwnedGroup<T>(groupId: string, fn: () => Promise<T> | T): Promise<T>;
  /** Throws NOT_COORDINATOR / COORDINATOR_LOADING unless this broker coordinates the group (cluster mode). */
  checkOwner(group: string): void;
  /** Whether timers may take decisions now (false from a cluster broker's pause until etcd confirms its lease). */
  canAct(): boolean;
  /**
   * Before a write to an offset store outside the log (PostgreSQL), which no partition leader fences: in a
   * cluster, throws unless etcd confirmed this broker's lease within its TTL (docs/architecture.md).
   */
  checkStoreWrite(): void;
  /** The partition of `__consumer_offsets` a group's state lives in. */
  partitionFor(group: string): number;
  /** Writes the group's snapshot; a refused write reloads its partition from the log, then rethrows. */
  persist(g: ConsumerGroup | ClassicGroup): Promise<void>;
  /** Offsets retention (group-expiry.ts): told of each commit or reset of a group's offsets, and of a group deleted. */
  readonly expiry: { committed(group: string): void; removed(group: string): void };
  /** A new generation of the group, of either kind (`tributary_group_rebalances_total`). */
  countRebalance(groupId: string): void;
}

export function requireGroup(groups: Map<string, ConsumerGroup>, groupId: string): ConsumerGroup {
  const g = groups.get(groupId);
  if (!g || g.deleted) throw new TributaryError('group_not_found', { group: groupId });
  return g;
}

export function requireMember(g: ConsumerGroup, memberId: string): Member {
  if (g.fencedIds.has(memberId)) throw new TributaryError('FENCED_INSTANCE_ID', { member: memberId });
  const m = g.members.get(memberId);
  if (!m) throw new TributaryError('member_not_found', { member: memberId });
  return m;
}

/**
 * Where committed offsets live (docs/architecture.md, "Group coordinator"). The group coordinator keeps every committed
 * offset in memory and checks fencing and monotonicity before it calls the store; the store makes a commit
 * durable before its promise resolves. The default store appends to the internal `__consumer_offsets`
 * topic; the PostgreSQL store keeps them in a table of the team's own database; the memory store keeps
 * them only as long as the process lives (tests, throwaway brokers).
 */
import { TributaryError, invalidParam } from 'tributary-protocol/errors.js';

export interface OffsetEntry {
  partition: number;
  /** The next offset to read (last processed + 1). */
  offset: number;
}

export interface StoredOffset extends OffsetEntry {
  group: string;
  topic: string;
  commitTimestamp: number;
}

export interface OffsetStore {
  readonly kind: string;
  open(): Promise<void>;
  /**
   * Every committed offset, to fill the coordinator's cache on start or when it takes over groups. With
   * `partition`, the caller keeps only the groups of that `__consumer_offsets` partition: a store may then
   * skip waiting for writes of other groups (the PostgreSQL store does).
   */
  loadAll(opts?: { partition?: number }): Promise<StoredOffset[]>;
  /**
   * All entries or none, durable when resolved. Without `force`, an entry lower than the stored offset is
   * refused by the store itself too (a second line of defence against a stale coordinator), rejecting with
   * a TributaryError `offset_regression`. `force` is for admin resets.
   */
  commit(group: string, topic: string, entries: OffsetEntry[], opts?: { force?: boolean }): Promise<void>;
  fetch(group: string, topic: string, partition: number): Promise<number | undefined>;
  deleteGroup(group: string): Promise<void>;
  /**
   * Forgets every committed offset of a deleted topic, of `groups` only when given (a cluster's coordinator
   * deletes those of the groups it coordinates), as Kafka does (docs/operations.md, "Deleting a topic").
   * Durable when resolved: a reloaded store does not bring them back, and a commit of a topic re-created
   * under the same name starts over (no offset_regression against the forgotten offsets).
   */
  deleteTopic(topic: string, groups?: readonly string[]): Promise<void>;
  close(): Promise<void>;
}

/**
 * A store failure after which the write may or may not have happened: a PostgreSQL COMMIT whose answer was
 * lost (storage_error), or in a cluster a log append the leader wrote whose replication then failed
 * (request_timeout, NOT_LEADER, NOT_ENOUGH_REPLICAS: internal-log.ts, replicatedAppend).
 */
export function outcomeUnknown(err: unknown): boolean {
  return err instanceof TributaryError && err.fields.outcome === 'unknown';
}

/** The int4 column of the PostgreSQL store bounds every store alike. */
export const MAX_STORED_PARTITION = 0x7fffffff;

/**
 * What every store refuses before it stores anything (the contract is the same whatever the store):
 * empty names, partitions outside 0..2^31-1, offsets that are not non-negative safe integers, and a
 * partition given twice in one commit.
 */
export function checkCommit(group: unknown, topic: unknown, entries: unknown): asserts entries is OffsetEntry[] {
  checkName('group', group);
  checkName('topic', topic);
  if (!Array.isArray(entries)) throw invalidParam('entries', 'must be an array');
  const seen = new Set<number>();
  for (const e of entries as Array<Partial<OffsetEntry> | undefined>) {
    checkPartition(e?.partition);
    checkOffset(e!.offset);
    if (seen.has(e!.partition!)) throw invalidParam('partition', `partition ${e!.partition} appears more than once in one commit`);
    seen.add(e!.partition!);
  }
}

/** What every store refuses of a fetch: the same name and partition checks as a commit's. */
export function checkFetch(group: unknown, topic: unknown, partition: unknown): void {
  checkName('group', group);
  checkName('topic', topic);
  checkPartition(partition);
}

/**
 * The stores' own monotonicity check (unless forced), for the stores that keep offsets in memory:
 * offset_regression for the first entry below what `current` holds. PostgreSQL checks it in SQL.
 */
export function checkNoRegression(entries: OffsetEntry[], current: (partition: number) => number | undefined): void {
  for (const e of entries) {
    const cur = current(e.partition);
    if (cur !== undefined && e.offset < cur) throw new TributaryError('offset_regression', { partition: e.partition, current: cur, requested: e.offset });
  }
}

/** What every store refuses of a topic deletion: an empty topic name or group name. */
export function checkDeleteTopic(topic: unknown, groups: unknown): void {
  checkName('topic', topic);
  if (groups === undefined) return;
  if (!Array.isArray(groups)) throw invalidParam('groups', 'must be an array');
  for (const g of groups) checkName('group', g);
}

export function checkName(param: string, value: unknown): asserts value is string {
  if (typeof value !== 'string' || value.length === 0) throw invalidParam(param, 'must be a non-empty string');
}

export function checkPartition(value: unknown): asserts value is number {
  if (typeof value !== 'number' || !Number.isInteger(value) || value < 0 || value > MAX_STORED_PARTITION) {
    throw invalidParam('partition', `must be an integer between 0 and ${MAX_STORED_PARTITION}`);
  }
}

function checkOffset(value: unknown): asserts value is number {
  if (typeof value !== 'number' || !Number.isSafeInteger(value) || value < 0) {
    throw invalidParam('offset', 'must be a non-negative safe integer');
  }
}

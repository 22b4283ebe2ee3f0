/**
 * Where committed offsets live (docs/architecture.md, "Group coordinator"). The group coordinator keeps every committed
 * offset in memory and checks fencing and monotonicity before it calls the store; the store makes a commit
 * durable before its promise resolves. The default store appends to the internal `__consumer_offsets`
 * topic; the PostgreSQL store keeps them in a table of the team's own database.
 */
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
  /** Every committed offset, to fill the coordinator's cache on start or when it takes over groups. */
  loadAll(): Promise<StoredOffset[]>;
  /**
   * All entries or none, durable when resolved. Without `force`, an entry lower than the stored offset is
   * refused by the store itself too (a second line of defence against a stale coordinator), rejecting with
   * a TributaryError `offset_regression`. `force` is for admin resets.
   */
  commit(group: string, topic: string, entries: OffsetEntry[], opts?: { force?: boolean }): Promise<void>;
  fetch(group: string, topic: string, partition: number): Promise<number | undefined>;
  deleteGroup(group: string): Promise<void>;
  close(): Promise<void>;
}

/**
 * Committed offsets in this process's memory only (`--offset-store memory`): for tests and throwaway
 * brokers. Not durable: a restart forgets every commit and groups start over from their
 * autoOffsetReset (docs/architecture.md, "Group coordinator"). It keeps the stores' contract otherwise:
 * monotonic unless forced, all or nothing, the same input checks (offset-store.ts).
 */
import { TributaryError } from 'tributary-protocol/errors.js';
import { type Clock, systemClock } from '../common/clock.js';
import { type OffsetEntry, type OffsetStore, type StoredOffset, checkCommit, checkDeleteTopic, checkFetch, checkName, checkNoRegression } from './offset-store.js';

export class MemoryOffsetStore implements OffsetStore {
  readonly kind = 'memory';
  private readonly offsets = new Map<string, StoredOffset>();
  private closed = false;

  constructor(private readonly clock: Pick<Clock, 'now'> = systemClock) {}

  private static key(group: string, topic: string, partition: number): string {
    return JSON.stringify([group, topic, partition]);
  }

  private assertOpen(): void {
    if (this.closed) throw new TributaryError('storage_error', { op: 'commit', reason: 'the offset store is closed' });
  }

  async open(): Promise<void> {
    this.closed = false;
  }

  async loadAll(): Promise<StoredOffset[]> {
    return [...this.offsets.values()].map((o) => ({ ...o }));
  }

  async commit(group: string, topic: string, entries: OffsetEntry[], opts: { force?: boolean } = {}): Promise<void> {
    checkCommit(group, topic, entries);
    this.assertOpen();
    if (!opts.force) checkNoRegression(entries, (p) => this.offsets.get(MemoryOffsetStore.key(group, topic, p))?.offset);
    const commitTimestamp = this.clock.now();
    for (const e of entries) this.offsets.set(MemoryOffsetStore.key(group, topic, e.partition), { group, topic, partition: e.partition, offset: e.offset, commitTimestamp });
  }

  async fetch(group: string, topic: string, partition: number): Promise<number | undefined> {
    checkFetch(group, topic, partition);
    return this.offsets.get(MemoryOffsetStore.key(group, topic, partition))?.offset;
  }

  async deleteGroup(group: string): Promise<void> {
    checkName('group', group);
    for (const [k, o] of this.offsets) if (o.group === group) this.offsets.delete(k);
  }

  async deleteTopic(topic: string, groups?: readonly string[]): Promise<void> {
    checkDeleteTopic(topic, groups);
    const only = groups && new Set(groups);
    for (const [k, o] of this.offsets) if (o.topic === topic && (!only || only.has(o.group))) this.offsets.delete(k);
  }

  async close(): Promise<void> {
    this.closed = true;
  }
}

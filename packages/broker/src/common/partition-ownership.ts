import { TributaryError } from 'tributary-protocol/errors.js';
import { backoffDelay, isRetriable } from 'tributary-client/retry.js';

/**
 * Cluster mode: which partitions of a coordinator's internal topic (`__consumer_offsets`,
 * `__transaction_state`) this broker leads and has replayed. A key whose partition is elsewhere gets
 * NOT_COORDINATOR (naming the leader), one being replayed COORDINATOR_LOADING. Standalone coordinators
 * have none of this: they own everything.
 */
export class PartitionOwnership {
  private readonly owned = new Set<number>();
  /** Partitions being replayed, each with its load's token: a load overtaken by an unload and a newer load is not current. */
  private readonly loading = new Map<number, object>();

  constructor(
    private readonly topic: string,
    private readonly notCoordinator: (partition: number) => TributaryError,
    private readonly topicExists: () => boolean,
    /**
     * False while this broker may not act on what it owns: from a detected pause of its own process until
     * etcd confirms its lease (docs/architecture.md, "Cluster mode"). Its partitions may have moved meanwhile.
     */
    private readonly leaseHeld: () => boolean = () => true,
    /** Hears each failed replay that will be tried again (logged by the broker). */
    private readonly onRetry: (partition: number, err: unknown, attempt: number, delayMs: number) => void = () => {},
  ) {}

  private closed = false;

  owns(partition: () => number): boolean {
    return this.topicExists() && this.owned.has(partition()) && this.leaseHeld();
  }

  /** Owned or being loaded. */
  has(partition: number): boolean {
    return this.owned.has(partition) || this.loading.has(partition);
  }

  /** Whether decisions (expiries, timeouts) may be taken now; false from a pause until etcd confirms the lease. */
  canAct(): boolean {
    return this.leaseHeld();
  }

  /** Throws unless the key's partition is owned (`partition` is evaluated only once the topic exists). */
  check(partition: () => number): void {
    if (!this.topicExists()) throw new TributaryError('COORDINATOR_LOADING', { reason: `the cluster has not created ${this.topic} yet` });
    const p = partition();
    if (this.owned.has(p) && this.leaseHeld()) return;
    if (this.loading.has(p)) throw new TributaryError('COORDINATOR_LOADING', { partition: p });
    throw this.notCoordinator(p);
  }

  /**
   * Runs `replay` for a partition just led, once; it is owned from then on unless it was lost meanwhile.
   * `replay` applies what it read only while `current()` holds: an unload (and perhaps a newer load)
   * overtook a replay still reading, whose state would bring back what it read before newer commits.
   */
  async load(partition: number, replay: (current: () => boolean) => Promise<void>): Promise<void> {
    if (this.closed || this.owned.has(partition) || this.loading.has(partition)) return;
    const token = {};
    const current = () => !this.closed && this.loading.get(partition) === token;
    this.loading.set(partition, token);
    try {
      for (let attempt = 1; ; attempt++) {
        try {
          await replay(current);
          break;
        } catch (err) {
          // A store that cannot be reached (PostgreSQL down) is tried again while this broker still leads
          // the partition; meanwhile its keys answer COORDINATOR_LOADING. Given up, they answered
          // NOT_COORDINATOR naming this very broker until the next leadership change.
          if (!current() || !isRetriable(err)) throw err;
          const delayMs = backoffDelay(Math.min(attempt, 8), { initialDelayMs: 250, maxDelayMs: 10_000 });
          this.onRetry(partition, err, attempt, delayMs);
          await new Promise<void>((resolve) => setTimeout(resolve, delayMs).unref());
          if (!current()) return;
        }
      }
      if (current()) this.owned.add(partition);
    } finally {
      if (current()) this.loading.delete(partition);
    }
  }

  unload(partition: number): void {
    this.owned.delete(partition);
    this.loading.delete(partition);
  }

  /** The coordinator stops: loads still retrying give up. */
  close(): void {
    this.closed = true;
  }
}

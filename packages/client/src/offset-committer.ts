/**
 * Commits: what handlers mark processed, the auto-commit worker and BATCH_COMMIT of
 * `lastProcessedOffset + 1` for every partition that moved (docs/sdk.md, "Offsets"). A commit the
 * coordinator refuses because the group moved on asks the membership for a rebalance.
 */
import { TributaryError } from 'tributary-protocol/errors.js';
import type { ConsumerContext } from './consumer-context.js';
import { channels, publish } from './events.js';
import type { PartitionWorker } from './partition-worker.js';
import { Signal } from './wake-signal.js';

/** Commit refusals that mean the group moved on (a rebalance), not a failure of the consumer. */
const GROUP_MOVED: ReadonlySet<string> = new Set(['GEN_MISMATCH', 'REBALANCE_IN_PROGRESS', 'member_not_found']);

/** What a refused commit tells the group membership (passed in: the membership itself commits). */
export interface CommitOutcomes {
  requestRebalance(reason: string): void;
  memberLost(): void;
}

export class OffsetCommitter {
  private readonly commitWake = new Signal();
  /**
   * Commits and park transactions (run()'s retryTopics) one at a time: a BATCH_COMMIT still in flight
   * must not land after a park transaction moved the same partition's offset further (docs/sdk.md,
   * "Retry and dead-letter topics").
   */
  private chain: Promise<unknown> = Promise.resolve();

  constructor(
    private readonly ctx: ConsumerContext,
    private readonly group: CommitOutcomes,
  ) {}

  /** The commit worker: with autoCommit, commits what was processed every autoCommitIntervalMs. */
  async loop(): Promise<void> {
    const signal = this.ctx.root.signal;
    const o = this.ctx.options;
    while (!signal.aborted) {
      await this.commitWake.wait(signal, o.autoCommit ? o.autoCommitIntervalMs : undefined);
      if (signal.aborted) break;
      if (!o.autoCommit) continue;
      // With the consumer's signal: close() must not wait out the retries of a commit to a frozen coordinator.
      await this.commitProcessed([...this.ctx.workers.values()], { signal }).catch((err) => {
        // A refusal because the group moved on is a rebalance, which commitNow already asked for and the
        // rebalance events report; only other failures are the consumer's trouble (docs/sdk.md, "Offsets").
        if (!signal.aborted && !GROUP_MOVED.has((err as TributaryError).code)) this.ctx.emit('crash', { error: err as Error, fatal: false });
      });
    }
  }

  /** Marks a message processed; rejects work whose partition was revoked since it was fetched. */
  markProcessed(partition: number, assignmentGeneration: number, offset: number): void {
    const w = this.ctx.workers.get(partition);
    if (!w || w.assignmentGeneration !== assignmentGeneration || w.signal.aborted) {
      throw new TributaryError('consumer_rebalancing', { partition, assignmentGeneration, current: this.ctx.assignmentGeneration });
    }
    if (offset + 1 > w.processed) w.processed = offset + 1;
  }

  /** Runs `fn` when no commit or other exclusive work runs, and holds both off until it settles. */
  exclusive<T>(fn: () => Promise<T>): Promise<T> {
    const run = this.chain.then(fn);
    this.chain = run.catch(() => {});
    return run;
  }

  /**
   * A transaction committed this partition's offset (a park): it is processed and committed up to there,
   * so the next commit does not send it again. Ignored for a partition revoked meanwhile.
   */
  committedByTransaction(partition: number, assignmentGeneration: number, offset: number): void {
    const w = this.ctx.workers.get(partition);
    if (!w || w.assignmentGeneration !== assignmentGeneration) return;
    if (offset > w.processed) w.processed = offset;
    if (offset > w.committed) w.committed = offset;
  }

  commitProcessed(workers: PartitionWorker[], opts: { final?: boolean; signal?: AbortSignal } = {}): Promise<void> {
    return this.exclusive(() => this.commitNow(workers, opts));
  }

  private async commitNow(workers: PartitionWorker[], opts: { final?: boolean; signal?: AbortSignal }): Promise<void> {
    const ctx = this.ctx;
    // `workers` were taken when the commit was asked for: one lost or reset since is not committed.
    const dirty = workers.filter((w) => w.processed > w.committed && !w.discarded);
    if (dirty.length === 0 || !ctx.memberId) return;
    const entries = dirty.map((w) => ({ w, offset: w.processed, gen: w.assignmentGeneration }));
    const o = ctx.options;
    const member = ctx.memberId;
    const generation = ctx.generation;
    const send = () =>
      ctx.cluster.coordinatorCommand(
        ctx.group,
        'BATCH_COMMIT',
        { topic: o.topic, group: o.groupId, member, generation },
        { positional: [entries.map((e) => `P${e.w.partition}:${e.offset}`).join(',')], signal: opts.signal, retry: opts.final ? { retries: 2 } : undefined },
      );
    // Until it is answered, seek() treats the offset as committed: once it lands, the broker starts the
    // partition's reads there whatever position they ask for.
    for (const e of entries) if (e.offset > e.w.committing) e.w.committing = e.offset;
    try {
      await send();
    } catch (err) {
      const e = err as TributaryError;
      // The generation moved on while we sent: the commit fails and the member rejoins. Nothing is marked
      // committed, so a later commit sends these offsets again (for the partitions the member still owns).
      // A refusal of a generation a JOIN since replaced asks for nothing: that JOIN answered it.
      const current = member === ctx.memberId && generation === ctx.generation;
      if (e.code === 'GEN_MISMATCH' && !opts.final) {
        if (current) this.group.requestRebalance('generation mismatch on commit');
        throw e;
      }
      if (e.code === 'REBALANCE_IN_PROGRESS' && current) this.group.requestRebalance('rebalance in progress');
      // Only about the member still current: a commit sent before a rejoin says nothing of the new one.
      if (e.code === 'member_not_found' && member === ctx.memberId) {
        this.group.memberLost();
        this.group.requestRebalance('member expired');
      }
      throw e;
    }
    // A failed commit stays in `committing`: an attempt may have reached the broker (a lost connection, a
    // timeout, an abort) and land later. Answered, it is committed; a later answered commit covers it.
    for (const e of entries) {
      if (e.offset > e.w.committed) e.w.committed = e.offset;
      if (e.w.committing <= e.w.committed) e.w.committing = -1;
    }
    const offsets = entries.map((e) => ({ partition: e.w.partition, offset: e.offset }));
    // The generation the commit carried: a rejoin while it was unanswered may have moved ctx.generation on.
    ctx.emit('commit', { offsets, generation });
    publish(channels.consumerCommit, { group: o.groupId, offsets });
  }
}

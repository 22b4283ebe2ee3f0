/**
 * The SDK Consumer (docs/sdk.md, "Consumer"): the public class and its processing APIs (run(), the
 * async iterator, commit(), flow control) over the parts in their own modules: options
 * (consumer-options.ts), group membership (group-membership.ts), the partition readers
 * (partition-fetcher.ts), commits (offset-committer.ts) and run()'s handlers (message-handlers.ts).
 */
import { setMaxListeners } from 'node:events';
import { TributaryError } from 'tributary-protocol/errors.js';
import { untilAborted } from './abort.js';
import { clientCluster } from './cluster.js';
import { resolveConcurrency, RUN_OPTION_NAMES } from './concurrency-options.js';
import { type ConsumedMessage, ConsumerContext, type ConsumerEvents, type ConsumerState } from './consumer-context.js';
import { configError, type ConsumerOptions, type ResolvedConsumerOptions, resolveConsumerOptions, validateConsumerOptions } from './consumer-options.js';
import { TypedEmitter } from './events.js';
import { GroupMembership } from './group-membership.js';
import { handlerSink, type RunOptions, windowedSink } from './message-handlers.js';
import { OffsetCommitter } from './offset-committer.js';
import { callOptions, type Complete, refuseUnknownOptions } from './option-names.js';
import { PartitionFetcher } from './partition-fetcher.js';
import { sessionHeld } from './session-guard.js';
import { systemRetryClock } from './retry-due.js';
import { Parker, parkingHandler, prepareRetryTopics } from './retry-topics.js';
import { type ResolvedRetryTopics, resolveRetryTopics, retryGroupId } from './retry-topics-options.js';
import type { PartitionWorker } from './partition-worker.js';
import { TRANSACTION_OFFSETS } from './transaction.js';
import { Signal } from './wake-signal.js';

export type { ConsumedMessage, ConsumerEvents, ConsumerState } from './consumer-context.js';
export { type AutoOffsetReset, type ConsumerOptions, heartbeatStallMs, type Isolation, validateConsumerOptions } from './consumer-options.js';
export { parseAssignments } from './group-membership.js';
export type { ConcurrencyOptions } from './concurrency-options.js';
export type { Ordering } from './key-scheduler.js';
export type { EachBatchPayload, EachMessagePayload, RunOptions } from './message-handlers.js';
export type { RetryInfo } from './retry-headers.js';
export type { RetryTopicsOptions } from './retry-topics-options.js';
export type { ParkedEvent } from './retry-topics.js';

export interface StartOptions {
  /** Aborting it rejects start() with the signal's reason (the consumer goes on starting). */
  signal?: AbortSignal;
}
const START_OPTION_NAMES = ['signal'] as const;
const startOptionsComplete: Complete<StartOptions, typeof START_OPTION_NAMES> = true;
void startOptionsComplete;

export interface CommitOptions {
  signal?: AbortSignal;
  /** An async-iterator message to count as processed before the commit. */
  message?: ConsumedMessage;
}
const COMMIT_OPTION_NAMES = ['signal', 'message'] as const;
const commitOptionsComplete: Complete<CommitOptions, typeof COMMIT_OPTION_NAMES> = true;
void commitOptionsComplete;

/**
 * A group member with the lifecycle of docs/sdk.md: `new → running ⇄ rebalancing → closing → closed`.
 * One root AbortController owns every loop (heartbeat, commit worker, partition readers, handlers).
 * A rebalance stops and joins the readers of revoked partitions, commits them, confirms with SYNC_GROUP
 * and starts readers for new partitions; partitions it keeps are never interrupted. Each installed
 * partition carries the local assignment generation it was installed under, and work from an older
 * installation is rejected with `consumer_rebalancing` before any commit is sent.
 */
export class Consumer extends TypedEmitter<ConsumerEvents> implements AsyncIterable<ConsumedMessage> {
  readonly options: ResolvedConsumerOptions;
  private readonly ctx: ConsumerContext;
  private readonly fetcher: PartitionFetcher;
  private readonly committer: OffsetCommitter;
  private readonly membership: GroupMembership;
  private startPromise: Promise<void> | undefined;
  /** The first rebalance of start(): what close() waits for (start() itself may be waiting for close()). */
  private startRebalance: Promise<void> | undefined;
  private closePromise: Promise<void> | undefined;
  private loops: Promise<void>[] = [];
  /**
   * Who consumes this consumer (claimed before run() first awaits): the partition readers hold their
   * batches until the sink is set, so a claim must not be a sink that would take them.
   */
  private consumedBy: 'run' | 'iterator' | undefined;

  constructor(options: ConsumerOptions) {
    super();
    validateConsumerOptions(options);
    this.options = resolveConsumerOptions(options);
    const cluster = clientCluster({ ...options, stallTimeoutMs: this.options.stallTimeoutMs }, (e) => this.emit(e.type, e));
    this.ctx = new ConsumerContext(
      this.options,
      cluster,
      (event, payload) => this.emit(event, payload),
      () => this.close(),
    );
    // Every partition reader and loop listens on the root signal: a large assignment is not a leak.
    setMaxListeners(0, this.ctx.root.signal);
    // A read refused as fenced loses the partition or the member; the membership owns both.
    this.fetcher = new PartitionFetcher(this.ctx, {
      requestRebalance: (reason) => this.membership.requestRebalance(reason),
      memberLost: (reason) => this.membership.memberLost(reason),
      partitionLost: (w, reason) => this.membership.partitionLost(w, reason),
    });
    // A refused commit can expire the member or ask for a rebalance; the membership commits revoked
    // partitions itself, so the committer reaches it through these two calls only.
    this.committer = new OffsetCommitter(this.ctx, {
      requestRebalance: (reason) => this.membership.requestRebalance(reason),
      memberLost: () => this.membership.memberLost(),
    });
    this.membership = new GroupMembership(this.ctx, this.fetcher, this.committer);
  }

  get state(): ConsumerState {
    return this.ctx.state;
  }

  get memberId(): string | undefined {
    return this.ctx.memberId;
  }

  /** The broker's group generation this member last joined. */
  get generation(): number {
    return this.ctx.generation;
  }

  /** The local assignment generation: bumped by every rebalance. */
  get assignmentGeneration(): number {
    return this.ctx.assignmentGeneration;
  }

  /** Partitions currently installed (being read). */
  assignment(): number[] {
    return [...this.ctx.workers.keys()].sort((a, b) => a - b);
  }

  // ---- lifecycle ----

  /** Joins the group and starts reading. Resolves once the first assignment is installed. */
  start(opts?: StartOptions): Promise<void> {
    let signal: AbortSignal | undefined;
    try {
      // A misspelt option would be ignored, a signal that is none would throw only later (docs/sdk.md, "Options").
      ({ signal } = callOptions('start', opts, START_OPTION_NAMES));
    } catch (err) {
      return Promise.reject(err);
    }
    if (this.ctx.closing) return Promise.reject(new TributaryError('client_closed'));
    this.startPromise ??= this.doStart();
    return signal ? untilAborted(this.startPromise, signal) : this.startPromise;
  }

  private async doStart(): Promise<void> {
    this.ctx.state = 'rebalancing';
    try {
      await (this.startRebalance = this.membership.rebalance('start', true));
    } catch (err) {
      await this.close();
      throw err;
    }
    if (this.ctx.fatal) throw this.ctx.fatal;
    if (this.ctx.closing) throw new TributaryError('client_closed');
    this.loops.push(this.membership.heartbeatLoop(), this.committer.loop());
  }

  /** Close wins over every transition and is idempotent: commit what was processed, leave, release. */
  close(): Promise<void> {
    this.closePromise ??= this.doClose();
    return this.closePromise;
  }

  private async doClose(): Promise<void> {
    const ctx = this.ctx;
    if (ctx.state === 'closed') return;
    const wasActive = ctx.state !== 'new';
    ctx.state = 'closing';
    ctx.root.abort(new TributaryError('client_closed'));
    this.fetcher.slots.wake();
    await Promise.allSettled([this.startRebalance, this.membership.rebalanceChain]);
    const workers = [...ctx.workers.values()];
    await Promise.allSettled([...workers.map((w) => w.loop), this.membership.lostStopping]);
    if (workers.length > 0) this.emit('partitions.revoked', { partitions: workers.map((w) => w.partition), generation: ctx.generation });
    await Promise.allSettled(this.loops);
    if (wasActive && ctx.memberId) {
      // A coordinator that stopped answering must not hold close() forever: the final commit and the
      // leave get at most a session timeout (capped at 5 s), after which the session ends them anyway.
      const deadline = new AbortController();
      const timer = setTimeout(() => deadline.abort(new TributaryError('request_timeout', { reason: 'close' })), Math.min(this.options.sessionTimeoutMs, 5000));
      try {
        // Also partitions a rebalance revoked while this close() cut its commit short: their handled records.
        const processed = [...workers, ...this.membership.revokedAtClose];
        await this.committer
          .commitProcessed(processed, { final: true, signal: deadline.signal })
          .catch(async (err: unknown) => {
            // A generation this consumer never learnt (its rejoin cut off by this close): learn it, commit again.
            if (!(err instanceof TributaryError && err.code === 'GEN_MISMATCH')) return;
            const reset = await this.membership.joinToCommit(deadline.signal);
            await this.committer.commitProcessed(processed.filter((w) => !reset.has(w.partition)), { final: true, signal: deadline.signal });
          })
          .catch(() => {});
        await this.membership.leave(deadline.signal);
      } finally {
        clearTimeout(timer);
      }
    }
    ctx.workers.clear();
    await ctx.cluster.close();
    ctx.state = 'closed';
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }

  // ---- processing APIs ----

  /** Runs handlers until the consumer closes (or `signal` aborts, which closes it). */
  async run(opts: RunOptions): Promise<void> {
    if (!opts || typeof opts !== 'object') throw configError('run', 'expected { eachMessage | eachBatch, signal?, concurrency?, retryTopics? }');
    refuseUnknownOptions('run', opts, RUN_OPTION_NAMES);
    if ((opts.eachMessage === undefined) === (opts.eachBatch === undefined)) throw configError('run', 'give exactly one of eachMessage or eachBatch');
    for (const k of ['eachMessage', 'eachBatch'] as const) if (opts[k] !== undefined && typeof opts[k] !== 'function') throw configError(k, 'must be a function');
    if (opts.signal !== undefined && !(opts.signal instanceof AbortSignal)) throw configError('signal', 'must be an AbortSignal');
    const concurrency = resolveConcurrency(opts.concurrency, opts.eachBatch !== undefined);
    const o = this.options;
    const names = { topic: o.topic, groupId: o.groupId, instanceId: o.instanceId };
    const retryTopics = resolveRetryTopics(opts.retryTopics, { ...names, eachBatch: opts.eachBatch !== undefined, concurrency: concurrency !== undefined });
    if (this.consumedBy) throw configError('run', 'the consumer is already being consumed');
    this.consumedBy = 'run';
    // An abort closes the consumer and run() resolves; one that came before run() did too.
    if (opts.signal?.aborted) return this.close();
    if (retryTopics) return this.runWithRetryTopics(opts.eachMessage!, retryTopics, opts.signal);
    if (concurrency) this.fetcher.setSink(windowedSink(this.ctx, this.committer, opts.eachMessage!, concurrency), { slotted: false });
    else this.fetcher.setSink(handlerSink(this.ctx, this.committer, opts));
    await this.runSink(opts.signal);
  }

  /** Starts with the sink set and runs until the consumer closes (or `signal` aborts, which closes it). */
  private async runSink(signal: AbortSignal | undefined): Promise<void> {
    const onAbort = () => void this.close();
    signal?.addEventListener('abort', onAbort, { once: true });
    const wasClosed = this.ctx.closing;
    if (signal?.aborted) void this.close(); // aborted while run() set up (the listener came too late)
    try {
      // close() while starting ends run() like a close after the start; a failed start still rejects
      await this.start().catch((err: unknown) => {
        if (wasClosed || !(err instanceof TributaryError && err.code === 'client_closed')) throw err;
      });
      const root = this.ctx.root.signal;
      if (!root.aborted) await new Promise<void>((resolve) => root.addEventListener('abort', () => resolve(), { once: true }));
      await this.close();
      if (this.ctx.fatal) throw this.ctx.fatal;
    } finally {
      signal?.removeEventListener('abort', onAbort);
    }
  }

  /**
   * run({ retryTopics }): this consumer parks what fails; one internal consumer per retry topic (group
   * `<groupId>.retry.<n>`) delivers it again when due and parks it further. They close with this one.
   */
  private async runWithRetryTopics(handler: NonNullable<RunOptions['eachMessage']>, r: ResolvedRetryTopics, signal: AbortSignal | undefined): Promise<void> {
    let counts: Map<string, number>;
    try {
      counts = await prepareRetryTopics(this.options, r, signal);
    } catch (err) {
      await this.close();
      if (signal?.aborted) return; // stopped by its signal, not failed
      throw err;
    }
    // Closed while the topics were set up: run() ends as after a close once started (docs/sdk.md,
    // "Lifecycle"), and no retry consumer starts after the close.
    if (this.ctx.closing) return this.close();
    const o = this.options;
    const retryConsumers = r.retryTopics.map(
      (topic, i) =>
        new Consumer({
          ...o,
          groupId: retryGroupId(o.groupId, i + 1),
          topic,
          // A new retry group must not skip what was parked before it first joined.
          autoOffsetReset: 'earliest',
          // Waiting for a message to fall due is not a slow handler.
          processingTimeoutMs: Math.min(2 ** 31 - 1, o.processingTimeoutMs + r.delaysMs[i]!), // a timer's limit
        }),
    );
    // Before they start: any close() from here on closes them.
    const closeRetries = () => void Promise.allSettled(retryConsumers.map((c) => c.close()));
    this.ctx.root.signal.addEventListener('abort', closeRetries, { once: true });
    for (const c of retryConsumers) {
      c.on('retry.parked', (e) => this.emit('retry.parked', e));
      c.on('crash', (e) => (e.fatal ? this.ctx.crash(e.error, true) : this.emit('crash', e)));
    }
    const runs = retryConsumers.map((c, i) =>
      c.runParking(handler, r, counts, r.delaysMs[i]!).catch((err: unknown) => {
        if (!this.ctx.closing) this.ctx.crash(err as Error, true);
      }),
    );
    try {
      await this.runParking(handler, r, counts, undefined, signal);
    } finally {
      closeRetries();
      await Promise.allSettled(runs);
    }
  }

  /** Runs `handler` with failed messages parked (`retryDelayMs`: this consumer reads the retry topic of that delay). */
  private async runParking(handler: NonNullable<RunOptions['eachMessage']>, r: ResolvedRetryTopics, counts: Map<string, number>, retryDelayMs: number | undefined, signal?: AbortSignal): Promise<void> {
    const parker = new Parker(
      {
        position: this,
        options: this.options,
        exclusive: (fn) => this.committer.exclusive(fn),
        committedByTransaction: (p, gen, offset) => this.committer.committedByTransaction(p, gen, offset),
        parked: (e) => this.emit('retry.parked', e),
        fatal: (err) => this.ctx.crash(err, true),
      },
      r,
      counts,
      systemRetryClock,
    );
    const eachMessage = parkingHandler(handler, parker, systemRetryClock, retryDelayMs, (s) => sessionHeld(this.ctx, s));
    this.fetcher.setSink(handlerSink(this.ctx, this.committer, { eachMessage }));
    try {
      await this.runSink(signal);
    } finally {
      await parker.close();
    }
  }

  /**
   * `for await (const message of consumer)`: a message counts as processed when the loop asks for the
   * next one. Leaving the loop (`break`, `return`, a throw) closes the consumer and counts nothing more:
   * return() cannot tell a break from a throw, and a failed message must not be committed. A loop that
   * stops after handling a message counts it with `commit({ message })` first.
   */
  [Symbol.asyncIterator](): AsyncIterator<ConsumedMessage> {
    if (this.consumedBy) throw configError('iterator', 'the consumer is already being consumed');
    this.consumedBy = 'iterator';
    const queue: Array<{ w: PartitionWorker; messages: ConsumedMessage[]; done: () => void }> = [];
    const avail = new Signal();
    let last: ConsumedMessage | undefined;
    let current: { w: PartitionWorker; messages: ConsumedMessage[]; done: () => void; i: number } | undefined;
    this.fetcher.setSink(
      (w, messages) =>
        new Promise<void>((resolve) => {
          const root = this.ctx.root.signal;
          const release = () => resolve();
          const onAbort = () => {
            // The loop body is still at work on a message of this batch: a revocation (or loss) waits for it
            // to ask for the next one or leave, as it waits for run()'s handlers, so the partition's next
            // owner never has it at the same time (docs/sdk.md, "Rebalancing"); a close does not wait.
            if (!this.ctx.closing && last?.signal === w.signal) root.addEventListener('abort', release, { once: true });
            else release();
          };
          w.signal.addEventListener('abort', onAbort, { once: true });
          queue.push({
            w,
            messages,
            done: () => {
              w.signal.removeEventListener('abort', onAbort);
              root.removeEventListener('abort', release);
              resolve();
            },
          });
          avail.wake();
        }),
    );
    const markLast = () => {
      if (!last) return;
      const m = last;
      last = undefined;
      // A seek() back to or below it while it was out: the processed offset stays at the sought one.
      const seekTo = this.ctx.workers.get(m.partition)?.seekTo;
      if (seekTo !== undefined && m.offset >= seekTo) return;
      try {
        this.committer.markProcessed(m.partition, m.assignmentGeneration, m.offset);
      } catch {
        // the partition was revoked meanwhile: its work is dropped, as the lifecycle requires
      }
    };
    return {
      next: async (): Promise<IteratorResult<ConsumedMessage>> => {
        markLast();
        // closed by someone else (before or while starting): the loop below ends the iteration
        await this.start().catch((err: unknown) => {
          if (!(err instanceof TributaryError && err.code === 'client_closed')) throw err;
        });
        for (;;) {
          if (this.ctx.fatal) throw this.ctx.fatal;
          if (this.ctx.closing) return { done: true, value: undefined };
          // seek() while this batch was being handed out: the rest of it is dropped (docs/sdk.md, seek()).
          if (current && current.i < current.messages.length && current.w.seekTo !== undefined) current.i = current.messages.length;
          if (current && current.i < current.messages.length && !current.w.signal.aborted && current.w.paused) {
            // paused with messages of this batch left: they are read again after resume()
            current.w.seekTo ??= current.messages[current.i]!.offset;
            current.i = current.messages.length;
          }
          if (current && current.i < current.messages.length && !current.w.signal.aborted && !this.ctx.sessionLive) {
            // a pause past the session: the next heartbeat says whether the partition is still ours
            await sessionHeld(this.ctx, current.w.signal);
            continue;
          }
          if (current && current.i < current.messages.length && !current.w.signal.aborted) {
            const m = current.messages[current.i++]!;
            last = m;
            return { done: false, value: m };
          }
          if (current) {
            current.done();
            current = undefined;
          }
          const next = queue.shift();
          if (next) {
            current = { ...next, i: 0 };
            continue;
          }
          await avail.wait(this.ctx.root.signal);
        }
      },
      return: async (): Promise<IteratorResult<ConsumedMessage>> => {
        last = undefined; // not counted: the loop may have left because its handling failed
        current?.done();
        for (const q of queue.splice(0)) q.done();
        await this.close();
        return { done: true, value: undefined };
      },
    };
  }

  /**
   * Commits everything processed so far (manual commit). `message`, a message the async iterator handed
   * out, is counted as processed first: how a loop that stops after handling it gets it committed.
   */
  async commit(options?: CommitOptions): Promise<void> {
    // `{ mesage: m }` would commit without m, silently (docs/sdk.md, "Options").
    const opts = callOptions('commit', options, COMMIT_OPTION_NAMES);
    if (this.ctx.closing) throw new TributaryError('client_closed');
    if (opts.message !== undefined) this.countIterated(opts.message);
    // Under the consumer's signal too: commits run one at a time, so one retrying against a coordinator
    // that stopped answering would hold close() (whose final commit queues behind it) for its whole retry
    // budget. close() ends it (client_closed) and commits what was processed itself.
    const root = this.ctx.root.signal;
    const signal = opts.signal ? AbortSignal.any([root, opts.signal]) : root;
    await this.committer.commitProcessed([...this.ctx.workers.values()], { signal }).catch((err: unknown) => {
      throw root.aborted && !opts.signal?.aborted ? new TributaryError('client_closed') : err;
    });
  }

  private countIterated(m: ConsumedMessage): void {
    // run()'s handlers are counted when they return; under `concurrency` a message marked out of turn
    // would move the processed offset past records still running.
    if (this.consumedBy !== 'iterator') throw configError('commit.message', 'commit({ message }) is for messages of the async iterator');
    // Another consumer's message (another topic, a partition this one does not hold) or a made-up one:
    // refused as documented (docs/sdk.md, "Consumer"), not taken for one of a revoked partition.
    const own = typeof m === 'object' && m !== null && m.topic === this.options.topic && this.ctx.installations.has(m.signal);
    if (!own) throw configError('commit.message', 'not a message this consumer handed out');
    const w = this.ctx.workers.get(m.partition);
    // As the iterator counts it: handed out before a seek() back to or below it, it is to be read again.
    if (w?.signal === m.signal && w.seekTo !== undefined && m.offset >= w.seekTo) return;
    // A partition revoked since: consumer_rebalancing.
    this.committer.markProcessed(m.partition, m.assignmentGeneration, m.offset);
  }

  /**
   * Offsets a committed transaction moved for this consumer (`txn.sendOffsets`): the group's committed
   * offset is there now, so they count as processed and committed, as a park's do (docs/sdk.md, "Transactions").
   */
  [TRANSACTION_OFFSETS](offsets: ReadonlyArray<{ partition: number; offset: number }>): void {
    for (const { partition, offset } of offsets) {
      const w = this.ctx.workers.get(partition);
      if (w && !w.signal.aborted) this.committer.committedByTransaction(partition, w.assignmentGeneration, offset);
    }
  }

  // ---- flow control ----

  pause(partitions: number[]): void {
    this.fetcher.pause(partitions);
  }

  resume(partitions: number[]): void {
    this.fetcher.resume(partitions);
  }

  paused(): number[] {
    return this.fetcher.paused();
  }

  /** Moves a partition's read position; messages already fetched past it are dropped. */
  seek(partition: number, offset: number): void {
    this.fetcher.seek(partition, offset);
  }
}

import { setMaxListeners } from 'node:events';
import type { Batch } from 'tributary-protocol/batch.js';
import { parseLine } from 'tributary-protocol/command.js';
import { TributaryError } from 'tributary-protocol/errors.js';
import type { RecordHeader } from 'tributary-protocol/record.js';
import { untilAborted } from './abort.js';
import { Cluster } from './cluster.js';
import { configError, type ConsumerOptions, heartbeatStallMs, type ResolvedConsumerOptions, resolveConsumerOptions, validateConsumerOptions } from './consumer-options.js';
import type { Connection } from 'tributary-protocol/connection.js';
import { channels, publish, TypedEmitter } from './events.js';
import { abortableSleep, backoffSleep, isRetriable, retry } from './retry.js';

export { type AutoOffsetReset, type ConsumerOptions, heartbeatStallMs, type Isolation, validateConsumerOptions } from './consumer-options.js';

export type ConsumerState = 'new' | 'running' | 'rebalancing' | 'closing' | 'closed';
export interface ConsumedMessage {
  topic: string;
  partition: number;
  offset: number;
  key: Buffer | null;
  value: Buffer;
  timestamp: number;
  headers: RecordHeader[];
  /** The local assignment generation of the partition when this message was fetched. */
  assignmentGeneration: number;
}

export interface ConsumerEvents {
  'group.join': { memberId: string; generation: number; leader: string; assignments: number[] };
  'rebalance.start': { reason: string; generation: number };
  'rebalance.end': { generation: number; assignmentGeneration: number; assigned: number[]; revoked: number[]; kept: number[]; durationMs: number };
  commit: { offsets: Array<{ partition: number; offset: number }>; generation: number };
  heartbeat: { memberId: string; generation: number };
  crash: { error: Error; fatal: boolean };
  'handler.slow': { partition: number; offset: number; elapsedMs: number };
  /** Readers and handlers of these partitions have stopped (before the revocation is confirmed). */
  'partitions.revoked': { partitions: number[]; generation: number };
  /**
   * The coordinator no longer knows this member (its session expired): these partitions are another
   * member's now. Their readers and handlers were stopped and nothing of theirs is committed.
   */
  'partitions.lost': { partitions: number[]; generation: number };
  /** Readers of these partitions have started. */
  'partitions.assigned': { partitions: number[]; generation: number; assignmentGeneration: number };
}

export interface EachMessagePayload {
  message: ConsumedMessage;
  /** Aborted when the partition is revoked or the consumer closes. */
  signal: AbortSignal;
}

export interface EachBatchPayload {
  topic: string;
  partition: number;
  messages: ConsumedMessage[];
  signal: AbortSignal;
  /** Marks messages up to this one as processed (committed by auto-commit or `commit()`). */
  resolveOffset(offset: number): void;
}

export interface RunOptions {
  eachMessage?: (p: EachMessagePayload) => Promise<void> | void;
  eachBatch?: (p: EachBatchPayload) => Promise<void> | void;
  signal?: AbortSignal;
}

/** Pauses a loop until woken (or aborted); wakes that arrive early are not lost. */
class Signal {
  private waiter: (() => void) | undefined;
  private pending = false;

  wake(): void {
    this.pending = true;
    this.waiter?.();
  }

  wait(abort: AbortSignal, timeoutMs?: number): Promise<void> {
    if (this.pending || abort.aborted) {
      this.pending = false;
      return Promise.resolve();
    }
    return new Promise<void>((resolve) => {
      const done = () => {
        clearTimeout(timer);
        abort.removeEventListener('abort', done);
        this.waiter = undefined;
        this.pending = false;
        resolve();
      };
      const timer = timeoutMs === undefined ? undefined : setTimeout(done, timeoutMs);
      abort.addEventListener('abort', done, { once: true });
      this.waiter = done;
    });
  }
}

/** One installed partition: its reader, its position and what has been processed. */
class PartitionWorker {
  readonly ac: AbortController;
  /** Next offset to fetch. */
  position: number;
  /** Next offset to commit (last processed + 1); -1 until something is processed. */
  processed = -1;
  committed: number;
  paused = false;
  readonly resumed = new Signal();
  loop: Promise<void> = Promise.resolve();
  conn: Connection | undefined;
  /** Set by seek(): the reader restarts from here. */
  seekTo: number | undefined;
  /** Consecutive handler failures, for the retry backoff. */
  failures = 0;
  /** Consecutive failed reads, for the re-route backoff; reset by any read that delivers. */
  readFailures = 0;

  constructor(
    readonly partition: number,
    readonly assignmentGeneration: number,
    start: number,
    committed: number,
    parent: AbortSignal,
  ) {
    this.ac = new AbortController();
    this.position = start;
    this.committed = committed;
    parent.addEventListener('abort', () => this.ac.abort(), { once: true, signal: this.ac.signal });
  }

  get signal(): AbortSignal {
    return this.ac.signal;
  }
}

type Sink = (worker: PartitionWorker, messages: ConsumedMessage[]) => Promise<void>;

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
  private readonly cluster: Cluster;
  private readonly root = new AbortController();
  private stateValue: ConsumerState = 'new';
  private memberIdValue: string | undefined;
  private generationValue = 0;
  private assignmentGenerationValue = 0;
  private readonly workers = new Map<number, PartitionWorker>();
  /** Readers and handlers of lost partitions still finishing: the next JOIN_GROUP waits for them. */
  private lostStopping: Promise<void> = Promise.resolve();
  private startPromise: Promise<void> | undefined;
  /** The first rebalance of start(): what close() waits for (start() itself may be waiting for close()). */
  private startRebalance: Promise<void> | undefined;
  private closePromise: Promise<void> | undefined;
  private rebalanceChain: Promise<void> = Promise.resolve();
  private rebalancePending = false;
  private loops: Promise<void>[] = [];
  private sink: Sink | undefined;
  private readonly commitWake = new Signal();
  private fatal: Error | undefined;
  private running = 0;
  private readonly slots = new Signal();

  constructor(options: ConsumerOptions) {
    super();
    validateConsumerOptions(options);
    this.options = resolveConsumerOptions(options);
    this.cluster = new Cluster({ brokers: options.brokers, retry: options.retry, tls: options.tls, auth: options.auth, stallTimeoutMs: this.options.stallTimeoutMs });
    // Every partition reader and loop listens on the root signal: a large assignment is not a leak.
    setMaxListeners(0, this.root.signal);
  }

  get state(): ConsumerState {
    return this.stateValue;
  }

  get memberId(): string | undefined {
    return this.memberIdValue;
  }

  /** The broker's group generation this member last joined. */
  get generation(): number {
    return this.generationValue;
  }

  /** The local assignment generation: bumped by every rebalance. */
  get assignmentGeneration(): number {
    return this.assignmentGenerationValue;
  }

  /** Partitions currently installed (being read). */
  assignment(): number[] {
    return [...this.workers.keys()].sort((a, b) => a - b);
  }

  private get group() {
    return { group: this.options.groupId };
  }

  private get closing(): boolean {
    return this.stateValue === 'closing' || this.stateValue === 'closed';
  }

  // ---- lifecycle ----

  /** Joins the group and starts reading. Resolves once the first assignment is installed. */
  start(opts: { signal?: AbortSignal } = {}): Promise<void> {
    if (this.closing) return Promise.reject(new TributaryError('client_closed'));
    this.startPromise ??= this.doStart();
    return opts.signal ? untilAborted(this.startPromise, opts.signal) : this.startPromise;
  }

  private async doStart(): Promise<void> {
    this.stateValue = 'rebalancing';
    try {
      await (this.startRebalance = this.rebalance('start'));
    } catch (err) {
      await this.close();
      throw err;
    }
    if (this.fatal) throw this.fatal;
    if (this.closing) throw new TributaryError('client_closed');
    this.loops.push(this.heartbeatLoop(), this.commitLoop());
  }

  /** Close wins over every transition and is idempotent: commit what was processed, leave, release. */
  close(): Promise<void> {
    this.closePromise ??= this.doClose();
    return this.closePromise;
  }

  private async doClose(): Promise<void> {
    if (this.stateValue === 'closed') return;
    const wasActive = this.stateValue !== 'new';
    this.stateValue = 'closing';
    this.root.abort(new TributaryError('client_closed'));
    this.slots.wake();
    await Promise.allSettled([this.startRebalance, this.rebalanceChain]);
    const workers = [...this.workers.values()];
    await Promise.allSettled([...workers.map((w) => w.loop), this.lostStopping]);
    if (workers.length > 0) this.emit('partitions.revoked', { partitions: workers.map((w) => w.partition), generation: this.generationValue });
    await Promise.allSettled(this.loops);
    if (wasActive && this.memberIdValue) {
      // A coordinator that stopped answering must not hold close() forever: the final commit and the
      // leave get at most a session timeout (capped at 5 s), after which the session ends them anyway.
      const deadline = new AbortController();
      const timer = setTimeout(() => deadline.abort(new TributaryError('request_timeout', { reason: 'close' })), Math.min(this.options.sessionTimeoutMs, 5000));
      try {
        await this.commitProcessed(workers, { final: true, signal: deadline.signal }).catch(() => {});
        if (!this.options.instanceId) {
          // A static member does not leave: a restart within its session gets the same partitions back.
          await this.cluster
            .coordinatorCommand(this.group, 'LEAVE_GROUP', { topic: this.options.topic, group: this.options.groupId, member: this.memberIdValue }, { signal: deadline.signal, retry: { retries: 2, maxElapsedMs: 3000 } })
            .catch(() => {});
        }
      } finally {
        clearTimeout(timer);
      }
    }
    this.workers.clear();
    await this.cluster.close();
    this.stateValue = 'closed';
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }

  private crash(error: Error, fatal: boolean): void {
    this.emit('crash', { error, fatal });
    if (fatal) {
      this.fatal = error;
      void this.close();
    }
  }

  // ---- rebalancing ----

  private requestRebalance(reason: string): void {
    if (this.closing || this.rebalancePending) return;
    this.rebalancePending = true;
    this.rebalanceChain = this.rebalanceChain.then(() => {
      this.rebalancePending = false;
      return this.rebalance(reason);
    });
  }

  private async rebalance(reason: string): Promise<void> {
    if (this.closing) return;
    const started = Date.now();
    this.stateValue = 'rebalancing';
    this.emit('rebalance.start', { reason, generation: this.generationValue });
    publish(channels.consumerRebalance, { phase: 'start', group: this.options.groupId, reason });
    const signal = this.root.signal;
    const initial = this.workers.size === 0 && !this.memberIdValue;
    try {
      for (let attempt = 0; ; attempt++) {
        try {
          await this.rejoin(signal, started, reason);
          return;
        } catch (err) {
          if (this.closing || signal.aborted) return;
          const e = err as TributaryError;
          if (e.code === 'member_not_found') this.memberLost();
          const again = isRetriable(e) || e.code === 'member_not_found' || e.code === 'REBALANCE_IN_PROGRESS' || e.code === 'GEN_MISMATCH';
          if (!again) {
            // Not something waiting fixes (a missing topic, a fenced static id, autoOffsetReset=error):
            // the first start rejects; later, the consumer crashes and closes.
            if (initial && e.code !== 'FENCED_INSTANCE_ID') throw e;
            this.crash(e, true);
            return;
          }
          await backoffSleep(Math.min(attempt, 6), { initialDelayMs: 20, maxDelayMs: 1000 }, signal);
        }
      }
    } finally {
      if (!this.closing) this.stateValue = 'running';
    }
  }

  /** Group command on its own connection, so closing the consumer can abandon a long JOIN at once. */
  private async groupCall(name: string, fields: Record<string, string | number | undefined>, signal: AbortSignal): Promise<string> {
    return retry(
      async () => {
        const addr = await this.cluster.coordinator(this.group, signal);
        let conn: Connection | undefined;
        const onAbort = () => void conn?.close();
        signal.addEventListener('abort', onAbort, { once: true });
        try {
          conn = await this.cluster.dedicated(addr, signal);
          return await conn.command(name, fields);
        } catch (err) {
          await this.cluster.onCoordinatorError(this.group, err);
          if (signal.aborted) throw new TributaryError('client_closed');
          throw err;
        } finally {
          signal.removeEventListener('abort', onAbort);
          if (conn) await this.cluster.release(conn);
        }
      },
      { ...this.options.retry, signal },
    );
  }

  private async rejoin(signal: AbortSignal, started: number, reason: string): Promise<void> {
    const o = this.options;
    // A lost partition may come back in this generation: its old handler must not run beside the new one.
    await this.lostStopping;
    const joinReply = await this.groupCall(
      'JOIN_GROUP',
      {
        topic: o.topic,
        group: o.groupId,
        member: this.memberIdValue ?? o.clientId,
        generation: this.memberIdValue ? this.generationValue : undefined,
        session_timeout_ms: o.sessionTimeoutMs,
        rebalance_timeout_ms: o.rebalanceTimeoutMs,
        assignor: o.assignor,
        instance: o.instanceId,
      },
      signal,
    );
    const j = parseLine(joinReply).params;
    const memberId = j.get('member')!;
    const generation = Number(j.get('generation'));
    const entitled = new Set(parseAssignments(j.get('assignments')));
    this.memberIdValue = memberId;
    this.generationValue = generation;
    this.emit('group.join', { memberId, generation, leader: j.get('leader') ?? '', assignments: [...entitled] });

    // Revoke first: stop and join the readers and handlers of partitions we no longer hold, commit them.
    const revoked = [...this.workers.values()].filter((w) => !entitled.has(w.partition));
    for (const w of revoked) w.ac.abort(new TributaryError('consumer_rebalancing'));
    await Promise.allSettled(revoked.map((w) => w.loop));
    if (revoked.length > 0) this.emit('partitions.revoked', { partitions: revoked.map((w) => w.partition), generation });
    await this.commitProcessed(revoked).catch(() => {});
    for (const w of revoked) this.workers.delete(w.partition);

    const syncReply = await this.groupCall('SYNC_GROUP', { topic: o.topic, group: o.groupId, member: memberId, generation }, signal);
    const owned = parseAssignments(parseLine(syncReply).params.get('assignments'));
    const ownedSet = new Set(owned);
    for (const w of [...this.workers.values()]) {
      if (!ownedSet.has(w.partition)) {
        w.ac.abort(new TributaryError('consumer_rebalancing'));
        await w.loop.catch(() => {});
        this.workers.delete(w.partition);
        revoked.push(w);
        this.emit('partitions.revoked', { partitions: [w.partition], generation });
      }
    }
    const added = owned.filter((p) => !this.workers.has(p));
    this.assignmentGenerationValue++;
    // The committed offset of every new partition is fetched before reading it (docs/sdk.md, "Offsets").
    const starts = await Promise.all(added.map((p) => this.startingOffset(p, signal)));
    if (signal.aborted) return;
    const fresh = added.map((p, i) => new PartitionWorker(p, this.assignmentGenerationValue, starts[i]!.position, starts[i]!.committed, this.root.signal));
    for (const w of fresh) this.workers.set(w.partition, w);
    if (added.length > 0) this.emit('partitions.assigned', { partitions: added, generation, assignmentGeneration: this.assignmentGenerationValue });
    for (const w of fresh) w.loop = this.readLoop(w);
    const kept = owned.filter((p) => !added.includes(p));
    this.stateValue = 'running';
    this.emit('rebalance.end', {
      generation,
      assignmentGeneration: this.assignmentGenerationValue,
      assigned: added,
      revoked: revoked.map((w) => w.partition),
      kept,
      durationMs: Date.now() - started,
    });
    publish(channels.consumerRebalance, { phase: 'end', group: o.groupId, reason, generation, assigned: added, revoked: revoked.map((w) => w.partition) });
  }

  /**
   * The coordinator no longer knows this member (its session expired while it was paused or cut off):
   * every partition it held is another member's now. Their readers and handlers stop at once, without
   * a commit; a reader left running would keep delivering a partition it lost, and a read carrying the
   * group starts at the new owner's committed offset, so it would skip records (docs/sdk.md, "Rebalancing").
   */
  private memberLost(): void {
    this.memberIdValue = undefined;
    if (this.workers.size === 0) return;
    const lost = [...this.workers.values()];
    this.workers.clear();
    for (const w of lost) w.ac.abort(new TributaryError('consumer_rebalancing'));
    const stopped = Promise.allSettled(lost.map((w) => w.loop));
    const before = this.lostStopping;
    this.lostStopping = Promise.all([before, stopped]).then(() => {});
    this.emit('partitions.lost', { partitions: lost.map((w) => w.partition).sort((a, b) => a - b), generation: this.generationValue });
  }

  private async startingOffset(partition: number, signal: AbortSignal): Promise<{ position: number; committed: number }> {
    const o = this.options;
    const reply = await this.cluster.coordinatorCommand(this.group, 'FETCH_OFFSET', { topic: o.topic, group: o.groupId, partition }, { signal });
    const p = parseLine(reply).params;
    if (p.get('committed') === 'true') {
      const offset = Number(p.get('offset'));
      return { position: offset, committed: offset };
    }
    if (o.autoOffsetReset === 'error') {
      throw new TributaryError('OFFSET_OUT_OF_RANGE', { partition, reason: 'no committed offset and autoOffsetReset=error' });
    }
    return { position: await this.resetOffset(partition, signal), committed: -1 };
  }

  private async resetOffset(partition: number, signal: AbortSignal): Promise<number> {
    const reply = await this.cluster.anyCommand('LIST_OFFSETS', { topic: this.options.topic, partition }, signal);
    const offsets = parseLine(reply).params.get('offsets') ?? '';
    const m = /earliest=(\d+):latest=(\d+)/.exec(offsets);
    if (!m) throw new TributaryError('internal_error', { reason: `unexpected LIST_OFFSETS reply ${reply}` });
    return this.options.autoOffsetReset === 'earliest' ? Number(m[1]) : Number(m[2]);
  }

  // ---- heartbeats ----

  /** Its own loop and connection: a slow handler never costs the member its session. */
  private async heartbeatLoop(): Promise<void> {
    const signal = this.root.signal;
    const o = this.options;
    let conn: Connection | undefined;
    let failures = 0;
    const stallTimeoutMs = heartbeatStallMs(o.sessionTimeoutMs, o.heartbeatIntervalMs);
    const onAbort = () => void conn?.close();
    signal.addEventListener('abort', onAbort, { once: true });
    try {
      while (!signal.aborted) {
        // The member this heartbeat speaks for: a reply about it is stale once the consumer rejoined.
        let member: string | undefined;
        try {
          if (!conn || conn.closed) conn = await this.cluster.dedicated(await this.cluster.coordinator(this.group, signal), signal, { stallTimeoutMs });
          member = this.memberIdValue;
          await conn.command('HEARTBEAT', {
            topic: o.topic,
            group: o.groupId,
            member,
            generation: this.generationValue,
            wait_ms: o.heartbeatIntervalMs,
          });
          failures = 0;
          this.emit('heartbeat', { memberId: this.memberIdValue ?? '', generation: this.generationValue });
        } catch (err) {
          if (signal.aborted) break;
          const e = err as TributaryError;
          if (e.code === 'member_not_found' && member !== this.memberIdValue) continue; // about a member id given up since
          if (e.code === 'REBALANCE_IN_PROGRESS' || e.code === 'GEN_MISMATCH' || e.code === 'member_not_found') {
            if (e.code === 'member_not_found') this.memberLost();
            this.requestRebalance(e.code === 'member_not_found' ? 'member expired' : e.code === 'GEN_MISMATCH' ? 'generation mismatch' : 'rebalance in progress');
            // Keep heartbeating during a long rebalance (revocation waits for handlers), but do not spin.
            await Promise.race([this.rebalanceChain.catch(() => {}), abortableSleep(o.heartbeatIntervalMs, signal)]);
            continue;
          }
          if (e.code === 'FENCED_INSTANCE_ID') {
            this.crash(e, true);
            break;
          }
          await this.cluster.onCoordinatorError(this.group, e);
          if (conn) await this.cluster.release(conn).catch(() => {});
          conn = undefined;
          failures++;
          await backoffSleep(Math.min(failures, 6), { initialDelayMs: 50, maxDelayMs: o.heartbeatIntervalMs }, signal);
        }
      }
    } finally {
      signal.removeEventListener('abort', onAbort);
      if (conn) await this.cluster.release(conn).catch(() => {});
    }
  }

  // ---- reading ----

  private async readLoop(w: PartitionWorker): Promise<void> {
    const o = this.options;
    const onAbort = () => void w.conn?.close();
    w.signal.addEventListener('abort', onAbort, { once: true });
    try {
      while (!w.signal.aborted) {
        if (w.paused) {
          await w.resumed.wait(w.signal);
          continue;
        }
        if (!this.sink) {
          await this.slots.wait(w.signal, 100);
          continue;
        }
        try {
          if (!w.conn || w.conn.closed) w.conn = await this.cluster.dedicated(await this.cluster.leaderFor(o.topic, w.partition, w.signal), w.signal);
          if (o.mode === 'stream') await this.streamOnce(w);
          else await this.pollOnce(w);
          w.readFailures = 0;
        } catch (err) {
          if (w.signal.aborted) break;
          const e = err as TributaryError;
          if (e.code === 'OFFSET_OUT_OF_RANGE') {
            if (o.autoOffsetReset === 'error') {
              this.crash(e, false);
              await w.resumed.wait(w.signal);
              continue;
            }
            w.position = await this.resetOffset(w.partition, w.signal).catch(() => w.position);
            continue;
          }
          if (e.code === 'consumer_rebalancing' || e.code === 'client_closed') break;
          this.cluster.onLeaderError(o.topic, w.partition, e);
          if (w.conn) await this.cluster.release(w.conn).catch(() => {});
          w.conn = undefined;
          if (!isRetriable(e)) this.crash(e, false);
          w.readFailures++;
          await backoffSleep(Math.min(w.readFailures, 6), { initialDelayMs: 50, maxDelayMs: 2000 }, w.signal);
        }
      }
    } finally {
      w.signal.removeEventListener('abort', onAbort);
      if (w.conn) await this.cluster.release(w.conn).catch(() => {});
      w.conn = undefined;
    }
  }

  private fetchFields(w: PartitionWorker): Record<string, string | number | undefined> {
    const o = this.options;
    return {
      topic: o.topic,
      partition: w.partition,
      offset: w.position,
      group: o.groupId,
      member: this.memberIdValue,
      generation: this.generationValue,
      isolation: o.isolation,
      batch: o.maxBatchRecords,
      max_bytes: o.maxBatchBytes,
    };
  }

  private toMessages(w: PartitionWorker, batch: Batch): ConsumedMessage[] {
    return batch.records.map((r) => ({
      topic: batch.topic,
      partition: w.partition,
      offset: r.offset,
      key: r.key,
      value: r.value,
      timestamp: r.timestamp,
      headers: r.headers,
      assignmentGeneration: w.assignmentGeneration,
    }));
  }

  private async pollOnce(w: PartitionWorker): Promise<void> {
    const batch = await w.conn!.consume({ ...this.fetchFields(w), wait_ms: this.options.maxWaitMs });
    if (w.signal.aborted) return;
    if (w.seekTo !== undefined) return this.applySeek(w);
    if (w.paused) return; // paused while the poll was in flight: the batch is read again after resume()
    publish(channels.consumerFetch, { group: this.options.groupId, partition: w.partition, offset: w.position, records: batch.records.length });
    const messages = this.toMessages(w, batch);
    const next = batch.trailer?.nextOffset ?? (messages.length > 0 ? messages[messages.length - 1]!.offset + 1 : w.position);
    if (messages.length > 0) await this.deliver(w, messages);
    if (w.seekTo !== undefined) return this.applySeek(w);
    w.position = Math.max(w.position, next);
  }

  /** STREAM: a graceful CLOSE ends this round; a socket loss throws and the loop resumes from `position`. */
  private async streamOnce(w: PartitionWorker): Promise<void> {
    const conn = w.conn!;
    w.conn = undefined; // a stream connection cannot be reused
    try {
      // Keepalives at the long-poll interval: a stream that stays silent past it plus the stall bound is
      // dropped and the partition re-routed, as a long poll would be (docs/sdk.md, "Routing").
      const keepaliveMs = Math.max(200, this.options.maxWaitMs);
      const it = conn.stream({ ...this.fetchFields(w), keepalive_ms: keepaliveMs }, w.signal, { silenceMs: keepaliveMs + this.options.stallTimeoutMs });
      for (;;) {
        const n = await it.next();
        if (n.done) {
          if (n.value?.reason === 'offset_out_of_range') throw new TributaryError('OFFSET_OUT_OF_RANGE', { partition: w.partition });
          return;
        }
        // seek() or pause() while the stream was open: drop this batch, it is read again from the new
        // position or after resume()
        if (w.seekTo !== undefined || w.paused) {
          if (w.seekTo !== undefined) this.applySeek(w);
          await it.return({} as Record<string, string>);
          return;
        }
        // A stream ends only by failing: its deliveries are what shows the route works again.
        w.readFailures = 0;
        const messages = this.toMessages(w, n.value);
        if (messages.length > 0) await this.deliver(w, messages);
        if (w.seekTo !== undefined) {
          this.applySeek(w);
          await it.return({} as Record<string, string>);
          return;
        }
        w.position = n.value.trailer?.nextOffset ?? messages[messages.length - 1]!.offset + 1;
      }
    } finally {
      await this.cluster.release(conn).catch(() => {});
    }
  }

  private applySeek(w: PartitionWorker): void {
    w.position = w.seekTo!;
    w.seekTo = undefined;
  }

  /** Hands a batch to the sink, holding one of `partitionsConsumedConcurrently` slots. */
  private async deliver(w: PartitionWorker, messages: ConsumedMessage[]): Promise<void> {
    while (this.running >= this.options.partitionsConsumedConcurrently && !w.signal.aborted) await this.slots.wait(w.signal, 50);
    if (w.signal.aborted) return;
    this.running++;
    try {
      await this.sink!(w, messages);
    } finally {
      this.running--;
      this.slots.wake();
    }
  }

  /** Marks a message processed; rejects work whose partition was revoked since it was fetched. */
  private markProcessed(partition: number, assignmentGeneration: number, offset: number): void {
    const w = this.workers.get(partition);
    if (!w || w.assignmentGeneration !== assignmentGeneration || w.signal.aborted) {
      throw new TributaryError('consumer_rebalancing', { partition, assignmentGeneration, current: this.assignmentGenerationValue });
    }
    if (offset + 1 > w.processed) w.processed = offset + 1;
  }

  // ---- processing APIs ----

  /** Runs handlers until the consumer closes (or `signal` aborts, which closes it). */
  async run(opts: RunOptions): Promise<void> {
    if (!opts.eachMessage === !opts.eachBatch) throw configError('run', 'give exactly one of eachMessage or eachBatch');
    if (this.sink) throw configError('run', 'the consumer is already being consumed');
    const onAbort = () => void this.close();
    opts.signal?.addEventListener('abort', onAbort, { once: true });
    this.sink = async (w, messages) => {
      if (opts.eachBatch) {
        await this.timed(w, messages[0]!.offset, () =>
          opts.eachBatch!({
            topic: this.options.topic,
            partition: w.partition,
            messages,
            signal: w.signal,
            resolveOffset: (offset) => this.markProcessed(w.partition, w.assignmentGeneration, offset),
          }),
        );
        return;
      }
      for (const message of messages) {
        if (w.signal.aborted || w.seekTo !== undefined) return;
        if (w.paused) {
          w.seekTo = message.offset; // paused mid-batch: the rest is read again after resume()
          return;
        }
        if (!(await this.timed(w, message.offset, () => opts.eachMessage!({ message, signal: w.signal })))) return;
        this.markProcessed(w.partition, w.assignmentGeneration, message.offset);
      }
    };
    this.slots.wake();
    const wasClosed = this.closing;
    try {
      // close() while starting ends run() like a close after the start; a failed start still rejects
      await this.start().catch((err: unknown) => {
        if (wasClosed || !(err instanceof TributaryError && err.code === 'client_closed')) throw err;
      });
      if (!this.root.signal.aborted) await new Promise<void>((resolve) => this.root.signal.addEventListener('abort', () => resolve(), { once: true }));
      await this.close();
      if (this.fatal) throw this.fatal;
    } finally {
      opts.signal?.removeEventListener('abort', onAbort);
    }
  }

  /** Runs a handler; false when it threw (its message is then read again after a pause). */
  private async timed(w: PartitionWorker, offset: number, fn: () => Promise<void> | void): Promise<boolean> {
    const t0 = Date.now();
    const timer = setTimeout(() => this.emit('handler.slow', { partition: w.partition, offset, elapsedMs: Date.now() - t0 }), this.options.processingTimeoutMs);
    try {
      await fn();
      w.failures = 0;
      return true;
    } catch (err) {
      if (w.signal.aborted) return false;
      this.crash(err as Error, false);
      w.seekTo = w.processed >= 0 ? w.processed : offset;
      w.failures++;
      await backoffSleep(Math.min(w.failures, 8), { initialDelayMs: 100, maxDelayMs: 5000 }, w.signal);
      return false;
    } finally {
      clearTimeout(timer);
    }
  }

  /**
   * `for await (const message of consumer)`: a message counts as processed when the loop asks for the
   * next one; `break` counts the last one as processed and closes the consumer.
   */
  [Symbol.asyncIterator](): AsyncIterator<ConsumedMessage> {
    if (this.sink) throw configError('iterator', 'the consumer is already being consumed');
    const queue: Array<{ w: PartitionWorker; messages: ConsumedMessage[]; done: () => void }> = [];
    const avail = new Signal();
    let last: ConsumedMessage | undefined;
    let current: { w: PartitionWorker; messages: ConsumedMessage[]; done: () => void; i: number } | undefined;
    this.sink = (w, messages) =>
      new Promise<void>((resolve) => {
        const onAbort = () => resolve();
        w.signal.addEventListener('abort', onAbort, { once: true });
        queue.push({
          w,
          messages,
          done: () => {
            w.signal.removeEventListener('abort', onAbort);
            resolve();
          },
        });
        avail.wake();
      });
    this.slots.wake();
    const markLast = () => {
      if (!last) return;
      const m = last;
      last = undefined;
      try {
        this.markProcessed(m.partition, m.assignmentGeneration, m.offset);
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
          if (this.fatal) throw this.fatal;
          if (this.closing) return { done: true, value: undefined };
          if (current && current.i < current.messages.length && !current.w.signal.aborted && current.w.paused) {
            // paused with messages of this batch left: they are read again after resume()
            current.w.seekTo ??= current.messages[current.i]!.offset;
            current.i = current.messages.length;
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
          await avail.wait(this.root.signal);
        }
      },
      return: async (): Promise<IteratorResult<ConsumedMessage>> => {
        markLast();
        current?.done();
        for (const q of queue.splice(0)) q.done();
        await this.close();
        return { done: true, value: undefined };
      },
    };
  }

  // ---- commits ----

  private async commitLoop(): Promise<void> {
    const signal = this.root.signal;
    while (!signal.aborted) {
      await this.commitWake.wait(signal, this.options.autoCommit ? this.options.autoCommitIntervalMs : undefined);
      if (signal.aborted) break;
      if (!this.options.autoCommit) continue;
      await this.commitProcessed([...this.workers.values()]).catch((err) => {
        if (!signal.aborted) this.emit('crash', { error: err as Error, fatal: false });
      });
    }
  }

  /** Commits everything processed so far (manual commit). */
  async commit(opts: { signal?: AbortSignal } = {}): Promise<void> {
    if (this.closing) throw new TributaryError('client_closed');
    await this.commitProcessed([...this.workers.values()], { signal: opts.signal });
  }

  private async commitProcessed(workers: PartitionWorker[], opts: { final?: boolean; signal?: AbortSignal } = {}): Promise<void> {
    const dirty = workers.filter((w) => w.processed > w.committed);
    if (dirty.length === 0 || !this.memberIdValue) return;
    const entries = dirty.map((w) => ({ w, offset: w.processed, gen: w.assignmentGeneration }));
    const o = this.options;
    const member = this.memberIdValue;
    const send = () =>
      this.cluster.coordinatorCommand(
        this.group,
        'BATCH_COMMIT',
        { topic: o.topic, group: o.groupId, member, generation: this.generationValue },
        { positional: [entries.map((e) => `P${e.w.partition}:${e.offset}`).join(',')], signal: opts.signal, retry: opts.final ? { retries: 2 } : undefined },
      );
    try {
      await send();
    } catch (err) {
      const e = err as TributaryError;
      // The generation moved on while we sent: retry once under the new one if nothing was revoked.
      if (e.code === 'GEN_MISMATCH' && !opts.final) {
        this.requestRebalance('generation mismatch on commit');
        throw e;
      }
      if (e.code === 'REBALANCE_IN_PROGRESS') this.requestRebalance('rebalance in progress');
      // Only about the member still current: a commit sent before a rejoin says nothing of the new one.
      if (e.code === 'member_not_found' && member === this.memberIdValue) {
        this.memberLost();
        this.requestRebalance('member expired');
      }
      throw e;
    }
    for (const e of entries) if (e.offset > e.w.committed) e.w.committed = e.offset;
    const offsets = entries.map((e) => ({ partition: e.w.partition, offset: e.offset }));
    this.emit('commit', { offsets, generation: this.generationValue });
    publish(channels.consumerCommit, { group: o.groupId, offsets });
  }

  // ---- flow control ----

  pause(partitions: number[]): void {
    for (const p of partitions) {
      const w = this.workers.get(p);
      if (w) w.paused = true;
    }
  }

  resume(partitions: number[]): void {
    for (const p of partitions) {
      const w = this.workers.get(p);
      if (w) {
        w.paused = false;
        w.resumed.wake();
      }
    }
  }

  paused(): number[] {
    return [...this.workers.values()].filter((w) => w.paused).map((w) => w.partition);
  }

  /** Moves a partition's read position; messages already fetched past it are dropped. */
  seek(partition: number, offset: number): void {
    if (!Number.isSafeInteger(offset) || offset < 0) throw configError('offset', 'must be a non-negative integer');
    const w = this.workers.get(partition);
    if (!w) throw new TributaryError('NOT_OWNER', { partition }, `partition ${partition} is not assigned to this consumer`);
    w.seekTo = offset;
    w.processed = Math.min(w.processed, offset);
    w.resumed.wake();
  }
}

export function parseAssignments(v: string | undefined): number[] {
  if (!v) return [];
  const inner = v.replace(/^\[|\]$/g, '');
  return inner.length === 0 ? [] : inner.split(',').map(Number).filter((n) => Number.isInteger(n) && n >= 0);
}

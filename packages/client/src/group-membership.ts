/**
 * Group membership: JOIN_GROUP / SYNC_GROUP rebalances, the heartbeat loop and a member the
 * coordinator no longer knows (docs/sdk.md, "Rebalancing"; the commands are docs/protocol.md's
 * "Consumer groups"). A rebalance stops and joins the readers of revoked partitions, commits them,
 * confirms with SYNC_GROUP and starts readers for new partitions; partitions it keeps are never
 * interrupted.
 */
import { parseLine } from 'tributary-protocol/command.js';
import type { Connection } from 'tributary-protocol/connection.js';
import { TributaryError } from 'tributary-protocol/errors.js';
import type { ConsumerContext } from './consumer-context.js';
import { heartbeatStallMs } from './consumer-options.js';
import { channels, publish } from './events.js';
import type { OffsetCommitter } from './offset-committer.js';
import type { PartitionFetcher } from './partition-fetcher.js';
import { PartitionWorker } from './partition-worker.js';
import { abortableSleep, backoffSleep, isRetriable, retry } from './retry.js';

export class GroupMembership {
  /** Readers and handlers of lost partitions still finishing: the next JOIN_GROUP waits for them. */
  lostStopping: Promise<void> = Promise.resolve();
  rebalanceChain: Promise<void> = Promise.resolve();
  private rebalancePending = false;
  /**
   * This member's JOIN_GROUP is on its way: whatever the coordinator refused meanwhile (a read, commit or
   * heartbeat of the generation being replaced) is what that JOIN answers, so it asks for no other. A change
   * after the JOIN shows on a later heartbeat.
   */
  private joinInFlight = false;
  /**
   * Partitions revoked while close() aborted their commit (docs/sdk.md, "Lifecycle"): no longer
   * installed, but close()'s final commit sends what their handlers processed.
   */
  readonly revokedAtClose: PartitionWorker[] = [];

  constructor(
    private readonly ctx: ConsumerContext,
    private readonly fetcher: PartitionFetcher,
    private readonly committer: OffsetCommitter,
  ) {}

  // ---- rebalancing ----

  requestRebalance(reason: string): void {
    if (this.ctx.closing || this.rebalancePending || this.joinInFlight) return;
    this.rebalancePending = true;
    this.rebalanceChain = this.rebalanceChain.then(() => {
      this.rebalancePending = false;
      return this.rebalance(reason);
    });
  }

  /**
   * `initial`: start()'s rebalance, whose failure start() reports (it rejects). Any other rebalance,
   * also a member's fresh rejoin after it was lost (no partitions, no member id, as at the start), is
   * awaited by no caller: a failure there crashes the consumer.
   */
  async rebalance(reason: string, initial = false): Promise<void> {
    const ctx = this.ctx;
    if (ctx.closing) return;
    const started = performance.now();
    ctx.state = 'rebalancing';
    ctx.emit('rebalance.start', { reason, generation: ctx.generation });
    publish(channels.consumerRebalance, { phase: 'start', group: ctx.options.groupId, reason });
    const signal = ctx.root.signal;
    let reportedAt = started;
    try {
      for (let attempt = 0; ; attempt++) {
        try {
          await this.rejoin(signal, started, reason);
          return;
        } catch (err) {
          if (ctx.closing || signal.aborted) return;
          const e = err as TributaryError;
          if (e.code === 'member_not_found') this.memberLost();
          const again = isRetriable(e) || e.code === 'member_not_found' || e.code === 'REBALANCE_IN_PROGRESS' || e.code === 'GEN_MISMATCH';
          if (!again) {
            // Not something waiting fixes (a missing topic, a fenced static id, autoOffsetReset=error):
            // the first start rejects; later, the consumer crashes and closes.
            if (initial && e.code !== 'FENCED_INSTANCE_ID') throw e;
            ctx.crash(e, true);
            return;
          }
          // A failure the group's own moves do not explain (a broker that does not answer) that outlasts a
          // session is reported, and again each session it lasts: retried silently, a consumer whose broker
          // stopped answering waited for ever without a word (docs/sdk.md, "Rebalancing"). A failover's
          // brief failures are not.
          const now = performance.now();
          if (e.code !== 'REBALANCE_IN_PROGRESS' && e.code !== 'GEN_MISMATCH' && e.code !== 'member_not_found' && now - reportedAt >= ctx.options.sessionTimeoutMs) {
            reportedAt = now;
            ctx.crash(e, false);
          }
          await backoffSleep(Math.min(attempt, 6), { initialDelayMs: 20, maxDelayMs: 1000 }, signal);
        }
      }
    } finally {
      if (!ctx.closing) ctx.state = 'running';
    }
  }

  /** Group command on its own connection, so closing the consumer can abandon a long JOIN at once. */
  private async groupCall(name: string, fields: Record<string, string | number | undefined>, signal: AbortSignal): Promise<string> {
    const ctx = this.ctx;
    const cluster = ctx.cluster;
    return retry(
      async () => {
        const addr = await cluster.coordinator(ctx.group, signal);
        let conn: Connection | undefined;
        const onAbort = () => void conn?.close();
        signal.addEventListener('abort', onAbort, { once: true });
        try {
          conn = await cluster.dedicated(addr, signal);
          return await conn.command(name, fields);
        } catch (err) {
          await cluster.onCoordinatorError(ctx.group, err);
          if (signal.aborted) throw new TributaryError('client_closed');
          throw err;
        } finally {
          signal.removeEventListener('abort', onAbort);
          if (conn) await cluster.release(conn);
        }
      },
      { ...ctx.options.retry, signal },
    );
  }

  private async rejoin(signal: AbortSignal, started: number, reason: string): Promise<void> {
    const ctx = this.ctx;
    const o = ctx.options;
    // A lost partition may come back in this generation: its old handler must not run beside the new one.
    await this.lostSettled();
    this.joinInFlight = true;
    const joinReply = await this.groupCall('JOIN_GROUP', this.joinFields(), signal).finally(() => {
      this.joinInFlight = false;
    });
    const j = parseLine(joinReply).params;
    const memberId = j.get('member')!;
    const generation = Number(j.get('generation'));
    const entitled = new Set(parseAssignments(j.get('assignments')));
    ctx.memberId = memberId;
    ctx.generation = generation;
    ctx.emit('group.join', { memberId, generation, leader: j.get('leader') ?? '', assignments: [...entitled] });

    // Offsets an admin reset (RESET_OFFSETS on a live group): their readers stop without a commit (it would
    // overwrite the reset, and the coordinator refuses it) and, if still assigned, start again from the
    // committed offset, as a new partition does.
    const resetSet = new Set(parseAssignments(j.get('reset')));
    const reset = [...ctx.workers.values()].filter((w) => resetSet.has(w.partition));
    for (const w of reset) {
      w.discarded = true;
      w.ac.abort(new TributaryError('consumer_rebalancing'));
    }
    await Promise.allSettled(reset.map((w) => w.loop));
    for (const w of reset) ctx.workers.delete(w.partition);
    if (reset.length > 0) ctx.emit('partitions.revoked', { partitions: reset.map((w) => w.partition), generation });

    // Revoke first: stop and join the readers and handlers of partitions we no longer hold, commit them.
    const revoked = [...ctx.workers.values()].filter((w) => !entitled.has(w.partition));
    for (const w of revoked) w.ac.abort(new TributaryError('consumer_rebalancing'));
    await Promise.allSettled(revoked.map((w) => w.loop));
    if (revoked.length > 0) ctx.emit('partitions.revoked', { partitions: revoked.map((w) => w.partition), generation });
    // Under the consumer's signal: a close() meanwhile does not wait out a frozen coordinator's retries.
    await this.committer.commitProcessed(revoked, { signal }).catch(() => {});
    for (const w of revoked) ctx.workers.delete(w.partition);
    if (signal.aborted) this.revokedAtClose.push(...revoked);
    revoked.push(...reset);

    const syncSentAt = performance.now();
    const syncReply = await this.groupCall('SYNC_GROUP', { topic: o.topic, group: o.groupId, member: memberId, generation }, signal);
    ctx.proveSession(syncSentAt);
    const owned = parseAssignments(parseLine(syncReply).params.get('assignments'));
    const ownedSet = new Set(owned);
    for (const w of [...ctx.workers.values()]) {
      if (!ownedSet.has(w.partition)) {
        w.discarded = true; // not this member's, whatever its JOIN said: nothing of it is committed
        w.ac.abort(new TributaryError('consumer_rebalancing'));
        await w.loop.catch(() => {});
        ctx.workers.delete(w.partition);
        revoked.push(w);
        ctx.emit('partitions.revoked', { partitions: [w.partition], generation });
      }
    }
    // A partition lost while the JOIN was out (a read refused meanwhile) may be ours again: its old
    // handlers must have returned before a new reader delivers it (the wait before the JOIN missed them).
    await this.lostSettled();
    if (signal.aborted) return;
    const added = owned.filter((p) => !ctx.workers.has(p));
    ctx.assignmentGeneration++;
    // The committed offset of every new partition is fetched before reading it (docs/sdk.md, "Offsets").
    const starts = await Promise.all(added.map((p) => this.fetcher.startingOffset(p, signal)));
    if (signal.aborted) return;
    const fresh = added.map((p, i) => new PartitionWorker(p, ctx.assignmentGeneration, starts[i]!.position, starts[i]!.committed, ctx.root.signal));
    for (const w of fresh) {
      ctx.workers.set(w.partition, w);
      ctx.installations.add(w.signal);
    }
    if (added.length > 0) ctx.emit('partitions.assigned', { partitions: added, generation, assignmentGeneration: ctx.assignmentGeneration });
    for (const w of fresh) w.loop = this.fetcher.readLoop(w);
    const kept = owned.filter((p) => !added.includes(p));
    ctx.state = 'running';
    ctx.emit('rebalance.end', {
      generation,
      assignmentGeneration: ctx.assignmentGeneration,
      assigned: added,
      revoked: revoked.map((w) => w.partition),
      kept,
      durationMs: Math.round(performance.now() - started),
    });
    publish(channels.consumerRebalance, { phase: 'end', group: o.groupId, reason, generation, assigned: added, revoked: revoked.map((w) => w.partition) });
  }

  /** JOIN_GROUP as this member: its id and generation (resume), or its client id (fresh). */
  private joinFields(): Record<string, string | number | undefined> {
    const ctx = this.ctx;
    const o = ctx.options;
    return {
      topic: o.topic,
      group: o.groupId,
      member: ctx.memberId ?? o.clientId,
      generation: ctx.memberId ? ctx.generation : undefined,
      session_timeout_ms: o.sessionTimeoutMs,
      rebalance_timeout_ms: o.rebalanceTimeoutMs,
      assignor: o.assignor,
      // The coordinator assigns (this consumer submits no plans): a client-assigned group refuses it rather
      // than leave its SYNC waiting for a plan (docs/protocol.md, "Consumer groups").
      protocol: 'server',
      instance: o.instanceId,
    };
  }

  /**
   * close()'s final commit was refused with GEN_MISMATCH: the coordinator moved this member to a
   * generation whose JOIN_GROUP reply the consumer never read (the close cut its rejoin off after the
   * coordinator took it). One more JOIN learns that generation; the partitions stay this member's until
   * it syncs, so what was processed is committed under it (docs/sdk.md, "Lifecycle"). Returns the
   * partitions an admin reset meanwhile: their offsets must not be committed over the reset.
   */
  async joinToCommit(signal: AbortSignal): Promise<Set<number>> {
    const ctx = this.ctx;
    if (!ctx.memberId) return new Set();
    const j = parseLine(await this.groupCall('JOIN_GROUP', this.joinFields(), signal)).params;
    ctx.memberId = j.get('member')!;
    ctx.generation = Number(j.get('generation'));
    return new Set(parseAssignments(j.get('reset')));
  }

  /** Every lost partition's readers and handlers stopped, also those lost while this waited. */
  private async lostSettled(): Promise<void> {
    for (let waited: Promise<void> | undefined; waited !== this.lostStopping; ) {
      waited = this.lostStopping;
      await waited;
    }
  }

  /**
   * The coordinator no longer knows this member (its session expired while it was paused or cut off):
   * every partition it held is another member's now. Their readers and handlers stop at once, without
   * a commit; a reader left running would keep delivering a partition it lost, and a read carrying the
   * group starts at the new owner's committed offset, so it would skip records (docs/sdk.md, "Rebalancing").
   */
  memberLost(reason?: TributaryError): void {
    const ctx = this.ctx;
    const member = ctx.memberId;
    ctx.memberId = undefined;
    if (ctx.workers.size === 0) return;
    const lost = [...ctx.workers.values()];
    ctx.workers.clear();
    // The partitions' signals carry why (docs/sdk.md, "Fenced reads"): handlers can tell a loss from a revocation.
    const why = reason ?? new TributaryError('member_not_found', { member: member ?? '' }, 'the coordinator no longer knows this member: its partitions are other members’ now');
    for (const w of lost) {
      w.discarded = true;
      w.ac.abort(why);
    }
    const stopped = Promise.allSettled(lost.map((w) => w.loop));
    const before = this.lostStopping;
    this.lostStopping = Promise.all([before, stopped]).then(() => {});
    ctx.emit('partitions.lost', { partitions: lost.map((w) => w.partition).sort((a, b) => a - b), generation: ctx.generation });
  }

  /**
   * A read of one partition was refused as fenced (NOT_OWNER, or REBALANCE_IN_PROGRESS after an offset
   * reset): the partition is not this member's any more, whatever the last SYNC said. Its reader and
   * handler stop at once (its signal aborts with `reason`), what was fetched and not handled is dropped,
   * nothing of it is committed, and the member rejoins (docs/sdk.md, "Fenced reads").
   */
  partitionLost(w: PartitionWorker, reason: TributaryError): void {
    const ctx = this.ctx;
    if (ctx.workers.get(w.partition) !== w) return;
    ctx.workers.delete(w.partition);
    w.discarded = true;
    w.ac.abort(reason);
    this.lostStopping = Promise.all([this.lostStopping, w.loop.catch(() => {})]).then(() => {});
    ctx.emit('partitions.lost', { partitions: [w.partition], generation: ctx.generation });
    this.requestRebalance(`partition ${w.partition} fenced (${reason.code})`);
  }

  /** LEAVE_GROUP on close, within the close deadline `signal`; a static member does not leave. */
  async leave(signal: AbortSignal): Promise<void> {
    const o = this.ctx.options;
    if (!o.instanceId) {
      // A static member does not leave: a restart within its session gets the same partitions back.
      await this.ctx.cluster
        .coordinatorCommand(this.ctx.group, 'LEAVE_GROUP', { topic: o.topic, group: o.groupId, member: this.ctx.memberId }, { signal, retry: { retries: 2, maxElapsedMs: 3000 } })
        .catch(() => {});
    }
  }

  // ---- heartbeats ----

  /** Its own loop and connection: a slow handler never costs the member its session. */
  async heartbeatLoop(): Promise<void> {
    const ctx = this.ctx;
    const signal = ctx.root.signal;
    const o = ctx.options;
    let conn: Connection | undefined;
    let failures = 0;
    const stallTimeoutMs = heartbeatStallMs(o.sessionTimeoutMs, o.heartbeatIntervalMs);
    const onAbort = () => void conn?.close();
    signal.addEventListener('abort', onAbort, { once: true });
    try {
      while (!signal.aborted) {
        // The member and generation this heartbeat speaks for: a reply about them is stale once the consumer rejoined.
        let member: string | undefined;
        let generation = -1;
        let sentAt = 0;
        try {
          if (!conn || conn.closed) conn = await ctx.cluster.dedicated(await ctx.cluster.coordinator(ctx.group, signal), signal, { stallTimeoutMs });
          member = ctx.memberId;
          generation = ctx.generation;
          sentAt = performance.now();
          await conn.command('HEARTBEAT', {
            topic: o.topic,
            group: o.groupId,
            member,
            generation,
            wait_ms: o.heartbeatIntervalMs,
          });
          failures = 0;
          if (member === ctx.memberId) ctx.proveSession(sentAt);
          ctx.emit('heartbeat', { memberId: ctx.memberId ?? '', generation: ctx.generation });
        } catch (err) {
          if (signal.aborted) break;
          const e = err as TributaryError;
          if (e.code === 'member_not_found' && member !== ctx.memberId) continue; // about a member id given up since
          // About the generation a JOIN since replaced: that JOIN answered it.
          if ((e.code === 'REBALANCE_IN_PROGRESS' || e.code === 'GEN_MISMATCH') && (member !== ctx.memberId || generation !== ctx.generation)) continue;
          if (e.code === 'REBALANCE_IN_PROGRESS' || e.code === 'GEN_MISMATCH' || e.code === 'member_not_found') {
            // The coordinator knows the member (it refreshed its session before answering this).
            if (e.code !== 'member_not_found' && member === ctx.memberId) ctx.proveSession(sentAt);
            if (e.code === 'member_not_found') this.memberLost(e);
            this.requestRebalance(e.code === 'member_not_found' ? 'member expired' : e.code === 'GEN_MISMATCH' ? 'generation mismatch' : 'rebalance in progress');
            // Keep heartbeating during a long rebalance (revocation waits for handlers), but do not spin.
            await Promise.race([this.rebalanceChain.catch(() => {}), abortableSleep(o.heartbeatIntervalMs, signal)]);
            continue;
          }
          if (e.code === 'FENCED_INSTANCE_ID') {
            ctx.crash(e, true);
            break;
          }
          await ctx.cluster.onCoordinatorError(ctx.group, e);
          if (conn) await ctx.cluster.release(conn).catch(() => {});
          conn = undefined;
          failures++;
          await backoffSleep(Math.min(failures, 6), { initialDelayMs: 50, maxDelayMs: o.heartbeatIntervalMs }, signal);
        }
      }
    } finally {
      signal.removeEventListener('abort', onAbort);
      if (conn) await ctx.cluster.release(conn).catch(() => {});
    }
  }
}

/** The partition list of a JOIN_GROUP or SYNC_GROUP reply (`assignments=[0,2]`). */
export function parseAssignments(v: string | undefined): number[] {
  if (!v) return [];
  const inner = v.replace(/^\[|\]$/g, '');
  return inner.length === 0 ? [] : inner.split(',').map(Number).filter((n) => Number.isInteger(n) && n >= 0);
}

import { EventEmitter } from 'node:events';
import type { Logger } from '../common/logger.js';
import { failpointDelay, failpointRefuse } from '../common/failpoints.js';
import type { TopicManager } from '../partition/topic-manager.js';
import type { Connection } from 'tributary-protocol/connection.js';
import { parseLine } from 'tributary-protocol/command.js';
import { TributaryError } from 'tributary-protocol/errors.js';
import { followerTruncationOffset } from '../storage/leader-epoch-cache.js';
import { ReplicationThrottle } from './reassignment.js';
import { eachInChunks } from './chunked.js';
import { dropLocalData, syncFollowers, throttleRate } from './replica-moves.js';
import { abortable, sleep } from './abortable.js';
import { FetchWatch, type MarkedPartition } from './fetch-watch.js';
import { fetchFromLeader, storedFetchParams } from './replica-wire.js';
import { LeaderLinks } from './leader-links.js';
import { askParkedFollowersBack } from './isr-rejoin.js';
import type { BrokerRegistration, BrokerRegistry } from './broker-registry.js';
import type { PartitionState, PartitionStateEntry, PartitionStateStore } from './partition-state.js';
import { failAckWaiters, releaseAckWaiters, waitReplicated } from './ack-waiters.js';
import { type Replica, type ReplicationConfig, type Role, loadEpochs, newReplica, notEnoughReplicas } from './replica-types.js';
import { type HorizonWatch, followLeaderHorizon, horizonParam, newHorizonWatch, onFetchText, parseHorizon } from './tombstone-horizon.js';

export type { ReplicationConfig, Role, Replica } from './replica-types.js';

function key(topic: string, partition: number): string {
  return `${topic}\u0000${partition}`;
}

/**
 * Cluster mode: applies the partition states in etcd to this broker's partitions. A leader takes writes
 * and moves the high-water mark to the lowest log end among its in-sync replicas; a follower fetches from
 * its leader (REPLICA_FETCH, fenced by leader epoch), after truncating to where its log and the leader's
 * agree (leader-epoch based). The leader shrinks the ISR for a follower that stays behind and expands it
 * on catch-up, by compare-and-set in etcd. A broker whose etcd lease may have expired stops leading at
 * once (its writes are refused), before another broker can be given its partitions.
 * Events: 'role' (Replica) after every role change.
 */
export class ReplicaManager {
  readonly events = new EventEmitter();
  private readonly replicas = new Map<string, Replica>();
  private readonly pending = new Map<string, PartitionStateEntry>();
  private readonly lagTimer: NodeJS.Timeout;
  private closed = false;
  /** The reassignment throttle's byte budget, shared by every replica this broker is adding. */
  readonly throttle = new ReplicationThrottle({ now: () => performance.now() });
  /** Leader side: parked followers' marks (fetch-watch.ts). */
  private readonly fetchWatch = new FetchWatch();
  /** Follower side: shared connections and REPLICA_WAIT per leader (leader-links.ts). */
  private readonly links: LeaderLinks;

  constructor(
    private readonly deps: {
      brokerId: number;
      topics: TopicManager;
      states: PartitionStateStore;
      registry: BrokerRegistry;
      config: ReplicationConfig;
      logger: Logger;
      /** Options for broker-to-broker connections (TLS, auth). */
      connect: (host: string, port: number, signal: AbortSignal, leaderFrameBytes?: number) => Promise<Connection>;
      /** Told of each ISR change this broker made as leader (the metrics). */
      onIsrChange?: (topic: string, kind: 'shrink' | 'expand') => void;
    },
  ) {
    this.links = new LeaderLinks({ brokerId: deps.brokerId, registry: deps.registry, logger: deps.logger, waitMs: Math.max(deps.config.fetchWaitMs, 1000), connect: deps.connect });
    deps.states.events.on('changed', (e: PartitionStateEntry) => this.apply(e));
    // The topic was deleted: its replicas stop (a re-created topic of the name gets new ones).
    deps.states.events.on('deleted', (e: PartitionStateEntry) => {
      this.pending.delete(key(e.topic, e.partition));
      const r = this.replicas.get(key(e.topic, e.partition));
      if (r) this.retire(r);
    });
    askParkedFollowersBack({ registry: deps.registry, states: deps.states, replicas: () => this.replicas.values(), get: (t, p) => this.get(t, p), mark: (id, t, p) => this.fetchWatch.mark(id, t, p) });
    this.lagTimer = setInterval(() => this.checkLag(), Math.max(100, Math.floor(deps.config.replicaLagMaxMs / 4)));
    this.lagTimer.unref();
  }

  /** The partitions this broker leads, with each follower's position (for the metrics). */
  led(): Array<{ topic: string; partition: number; isr: number[]; replicas: number[]; logEnd: number; followers: Array<{ id: number; offset: number; caughtUpMs: number }> }> {
    const out = [];
    for (const r of this.replicas.values()) {
      if (r.role !== 'leader') continue;
      out.push({
        topic: r.topic,
        partition: r.id,
        isr: r.isr,
        replicas: r.replicas,
        logEnd: r.partition.logEndOffset,
        followers: [...r.followers].map(([id, f]) => ({ id, offset: f.offset, caughtUpMs: f.caughtUpMs })),
      });
    }
    return out;
  }

  /** Applies every known state, as it is when its turn comes (call once the topics are open; chunked.ts); later changes arrive by the watch. */
  async start(): Promise<void> {
    await eachInChunks(this.deps.states.list(), (e) => this.apply(this.deps.states.get(e.topic, e.partition) ?? e), () => this.closed);
  }

  async close(): Promise<void> {
    this.closed = true;
    clearInterval(this.lagTimer);
    for (const r of this.replicas.values()) failAckWaiters(r, () => new TributaryError('shutting_down'));
    for (const r of this.replicas.values()) r.stop?.abort();
    this.links.closeAll();
    await Promise.all([...this.replicas.values()].map((r) => r.epochs.flush().catch(() => {})));
  }

  get(topic: string, partition: number): Replica | undefined {
    return this.replicas.get(key(topic, partition));
  }

  /** Leader of a partition per etcd, with its address; undefined while leaderless or unknown. */
  leaderOf(topic: string, partition: number): BrokerRegistration | undefined {
    const s = this.deps.states.get(topic, partition);
    if (!s || s.value.leader < 0) return undefined;
    return this.deps.registry.get(s.value.leader);
  }

  /** True when this broker may take writes and serve reads for the partition now. */
  isLeader(topic: string, partition: number): boolean {
    const r = this.replicas.get(key(topic, partition));
    return r?.role === 'leader' && this.deps.registry.alive;
  }

  /** Throws NOT_LEADER (naming the leader when known) unless this broker leads the partition. */
  requireLeader(topic: string, partition: number): Replica {
    const r = this.replicas.get(key(topic, partition));
    if (r?.role === 'leader' && this.deps.registry.alive) return r;
    throw this.notLeader(topic, partition);
  }

  /** requireLeader for a follower's request, which also names the leader epoch it follows. */
  private requireLeaderAt(topic: string, partition: number, leaderEpoch: number): Replica {
    const r = this.requireLeader(topic, partition);
    if (leaderEpoch !== r.leaderEpoch) throw new TributaryError('FENCED_LEADER_EPOCH', { topic, partition, leader_epoch: r.leaderEpoch, requested: leaderEpoch });
    return r;
  }

  /** Whether this broker leads the partition at exactly `epoch` now. */
  leadsAt(topic: string, partition: number, epoch: number): boolean {
    const r = this.replicas.get(key(topic, partition));
    return r?.role === 'leader' && r.leaderEpoch === epoch && this.deps.registry.alive;
  }

  /**
   * An acks=1 reply's check after the append: NOT_LEADER unless this broker still leads at `epoch`. After a pause of this process
   * (a long append: LeaseKeeper.settled false) it waits for etcd to confirm the lease and reads the partition's state from etcd
   * itself, as a leadership change made meanwhile may not have come through the watch yet. Synchronous otherwise.
   */
  checkLeadsAfterAppend(topic: string, partition: number, epoch: number): Promise<void> | undefined {
    if (!this.deps.registry.settled) return this.checkLeadsAfterPause(topic, partition, epoch);
    if (!this.leadsAt(topic, partition, epoch)) throw this.notLeader(topic, partition);
    return undefined;
  }

  private async checkLeadsAfterPause(topic: string, partition: number, epoch: number): Promise<void> {
    const s = (await this.deps.registry.whenSettled()) ? (await this.deps.states.read(topic, partition).catch(() => undefined))?.value : undefined;
    if (s?.leader !== this.deps.brokerId || s.leaderEpoch !== epoch || !this.leadsAt(topic, partition, epoch)) throw this.notLeader(topic, partition);
  }

  /**
   * NOT_LEADER naming the leader whenever this broker knows it, and `reason` for why (docs/protocol.md,
   * "Produce"): `follower` (LEADER_IS the leader); `taking_over` (the partition state names this broker,
   * which is still catching up to lead it: LEADER_IS itself, retry here); `lease_unconfirmed` (it leads
   * but cannot confirm its etcd lease); `no_live_leader` (the named leader is gone from the registry and
   * the controller has not elected the next one yet: refresh METADATA with backoff).
   */
  notLeader(topic: string, partition: number): TributaryError {
    const s = this.deps.states.get(topic, partition);
    const leader = this.leaderOf(topic, partition);
    const r = this.replicas.get(key(topic, partition));
    let reason: string;
    let named: BrokerRegistration | undefined;
    if (!leader) reason = 'no_live_leader';
    else if (leader.id !== this.deps.brokerId) {
      reason = 'follower';
      named = leader;
    } else if (r?.role === 'leader') {
      reason = 'lease_unconfirmed';
    } else {
      reason = 'taking_over';
      named = leader;
    }
    const fields = { topic, partition, reason, ...(s ? { leader_epoch: s.value.leaderEpoch } : {}) };
    return new TributaryError('NOT_LEADER', fields, undefined, named ? [`LEADER_IS ${named.advertisedAddress}`] : []);
  }

  /** acks=all: refused before the append when the ISR is below min_insync_replicas. */
  checkMinIsr(r: Replica): void {
    const few = notEnoughReplicas(r, this.deps.config.minInsyncReplicas);
    if (few) throw few;
  }

  // ---- applying states ----

  private apply(e: PartitionStateEntry): void {
    if (this.closed) return;
    const topic = this.deps.topics.tryGet(e.topic);
    const part = topic?.partitions[e.partition];
    // The topic is not open here yet (its definition arrives by another watch), or the one open is a
    // deleted namesake of the state's: try again shortly, unless the state is gone by then.
    if (!part || (e.value.topicId !== undefined && topic!.def.topicId !== e.value.topicId)) {
      this.pending.set(key(e.topic, e.partition), e);
      setTimeout(() => {
        const p = this.pending.get(key(e.topic, e.partition));
        if (p === e) {
          this.pending.delete(key(e.topic, e.partition));
          const now = this.deps.states.get(e.topic, e.partition);
          if (now) this.apply(now);
        }
      }, 100).unref();
      return;
    }
    const s = e.value;
    let r = this.replicas.get(key(e.topic, e.partition));
    // Another incarnation of the topic: its replica (and its fetch loop, its waiters) must not serve this one.
    if (r && r.partition !== part) {
      this.retire(r);
      r = undefined;
    }
    if (!r) {
      part.enableReplication(() => this.onLocalDurable(r!));
      r = newReplica(e.topic, e.partition, part, topic!.def.topicId);
      this.replicas.set(key(e.topic, e.partition), r);
      r.epochsLoaded = loadEpochs(r, this.deps.logger);
      r.epochsLoaded.catch((err: unknown) => this.deps.logger.error({ err, topic: e.topic, partition: e.partition }, 'leader epoch cache unreadable'));
    }
    const me = this.deps.brokerId;
    const wanted: Role = s.leader === me ? 'leader' : s.replicas.includes(me) ? 'follower' : 'none';
    const role = r.promoting === r.leaderEpoch ? 'leader' : r.role;
    const changed = wanted !== role || s.leaderEpoch !== r.leaderEpoch || s.leader !== r.leaderId;
    r.isr = s.isr;
    r.replicas = s.replicas;
    if (r.isrAdding && (changed || e.modRevision > r.isrAdding.afterRevision)) r.isrAdding = null;
    if (!changed) {
      if (r.role === 'leader') {
        syncFollowers(r, this.deps.brokerId);
        this.updateHighWatermark(r);
      }
      return;
    }
    r.stop?.abort();
    r.stop = null;
    // Before anything else moves (a follower truncates, takes the new leader's HWM): a record appended
    // under the old epoch may be truncated, so no waiter of that epoch may ever be answered OK.
    failAckWaiters(r, () => this.notLeader(r!.topic, r!.id));
    r.leaderEpoch = s.leaderEpoch;
    r.leaderId = s.leader;
    r.promoting = null;
    if (wanted === 'leader') {
      this.promote(r);
      return;
    }
    r.role = wanted;
    if (wanted === 'follower') this.becomeFollower(r);
    else dropLocalData(r, this.deps.brokerId, () => this.closed, this.deps.logger);
    this.roleApplied(r);
  }

  /** Stops a replica whose topic was deleted (or re-created): no fetching, no waiter answered OK. */
  private retire(r: Replica): void {
    r.stop?.abort();
    r.stop = null;
    r.promoting = null;
    r.role = 'none';
    failAckWaiters(r, () => new TributaryError('NOT_LEADER', { topic: r.topic, partition: r.id, reason: 'topic_deleted' }));
    if (this.replicas.get(key(r.topic, r.id)) === r) this.replicas.delete(key(r.topic, r.id));
  }

  private roleApplied(r: Replica): void {
    this.deps.logger.info({ topic: r.topic, partition: r.id, role: r.role, leaderEpoch: r.leaderEpoch, leader: r.leaderId }, 'partition role');
    this.events.emit('role', r);
  }

  /**
   * A replica takes the lead once its fetch loop has exited, every append it began has landed (else the
   * producer state would miss it, and the new epoch start below records of the old one) and the new epoch
   * is on disk; until then it answers NOT_LEADER (docs/architecture.md, "Taking the lead").
   */
  private promote(r: Replica): void {
    const epoch = r.leaderEpoch;
    const current = () => !this.closed && r.promoting === epoch && r.leaderEpoch === epoch;
    r.promoting = epoch;
    r.role = 'none';
    const fetcher = r.fetcher ?? Promise.resolve();
    void fetcher
      .then(() => r.partition.quiesced())
      .then(() => r.epochsLoaded)
      .then(() => {
        if (!current()) return;
        r.epochs.assign(epoch, r.partition.logEndOffset); // on disk first: see leader-epoch-cache.ts
        return r.epochs.flush();
      })
      .then(
        () => current() && this.becomeLeader(r),
        (err: unknown) => this.deps.logger.error({ err, topic: r.topic, partition: r.id }, 'taking the lead failed'),
      );
  }

  private becomeLeader(r: Replica): void {
    r.promoting = null;
    r.role = 'leader';
    const now = performance.now();
    r.followers = new Map(r.replicas.filter((id) => id !== this.deps.brokerId).map((id) => [id, { offset: -1, caughtUpMs: now, parked: false, sentEnd: -1, sentHwm: -1 }]));
    this.updateHighWatermark(r);
    this.roleApplied(r);
  }

  private becomeFollower(r: Replica): void {
    r.followers.clear();
    const stop = new AbortController();
    r.stop = stop;
    const fetcher: Promise<void> = this.fetchLoop(r, stop.signal)
      .catch((err: unknown) => this.deps.logger.error({ err, topic: r.topic, partition: r.id }, 'replica fetch loop failed'))
      .finally(() => {
        if (r.fetcher === fetcher) r.fetcher = null;
      });
    r.fetcher = fetcher;
  }

  // ---- leader side ----

  /** HWM = the lowest log end among the in-sync replicas (the leader's own durable end included). */
  private updateHighWatermark(r: Replica): void {
    if (r.role !== 'leader') return;
    let hwm = r.partition.localEnd;
    const adding = r.isrAdding?.ids;
    for (const ids of adding ? [r.isr, adding] : [r.isr]) {
      for (const id of ids) {
        if (id === this.deps.brokerId) continue;
        const f = r.followers.get(id);
        hwm = Math.min(hwm, f ? Math.max(f.offset, 0) : 0);
      }
    }
    if (hwm > r.partition.highWatermark) r.partition.setReplicatedHighWatermark(hwm);
    releaseAckWaiters(r, this.deps.config.minInsyncReplicas);
    this.markParked(r);
  }

  /** Parked followers with news (a longer log, a higher HWM) are told through their REPLICA_WAIT. */
  private markParked(r: Replica): void {
    const end = r.partition.localEnd;
    const hwm = r.partition.highWatermark;
    for (const [id, f] of r.followers) {
      if (f.parked && (end > f.sentEnd || hwm > f.sentHwm)) {
        f.parked = false;
        this.fetchWatch.mark(id, r.topic, r.id);
      }
    }
  }

  /**
   * A `park=true` fetch of `replicaId` found nothing past `end` (its HWM `hwm`): the follower waits for a
   * mark. Anything already newer marks it at once.
   */
  parkFollower(r: Replica, replicaId: number, end: number, hwm: number): void {
    const f = r.followers.get(replicaId);
    if (!f || r.role !== 'leader') return;
    f.parked = true;
    f.sentEnd = end;
    f.sentHwm = hwm;
    this.markParked(r);
  }

  /** REPLICA_WAIT: the partitions marked for `replicaId` (fetch-watch.ts). */
  waitMarked(replicaId: number, waitMs: number, signal?: AbortSignal): Promise<MarkedPartition[]> {
    return this.fetchWatch.wait(replicaId, waitMs, signal);
  }

  /** Resolves once the HWM passed `lastOffset`, appended while this broker led at `epoch` (ack-waiters.ts). */
  waitReplicated(topic: string, partition: number, epoch: number, lastOffset: number, timeoutMs: number): Promise<void> {
    return waitReplicated(this.replicas.get(key(topic, partition)), epoch, lastOffset, timeoutMs, this.deps.config.minInsyncReplicas, () => this.notLeader(topic, partition));
  }


  private onLocalDurable(r: Replica): void {
    if (r.role === 'leader') this.updateHighWatermark(r);
  }

  /**
   * A follower's REPLICA_FETCH at `offset` (its log end): checks the epoch, records its position, moves the
   * HWM and, on catch-up, brings it back into the ISR.
   */
  followerFetch(topic: string, partition: number, replicaId: number, leaderEpoch: number, offset: number, topicId?: string): Replica {
    const r = this.requireLeaderAt(topic, partition, leaderEpoch);
    // A follower still on a deleted namesake's partition (same name, epochs starting again at 0).
    if (topicId !== undefined && r.topicId !== undefined && topicId !== r.topicId) throw new TributaryError('NOT_LEADER', { topic, partition, reason: 'topic_id_mismatch' });
    const f = r.followers.get(replicaId);
    if (!f) throw new TributaryError('invalid_parameter', { param: 'replica', reason: `broker ${replicaId} is not a replica of ${topic}[${partition}]` });
    if (offset > r.partition.logEndOffset) {
      throw new TributaryError('OFFSET_OUT_OF_RANGE', { requested: offset, earliest: r.partition.earliest, latest: r.partition.logEndOffset });
    }
    f.offset = offset;
    f.parked = false;
    if (offset >= r.partition.logEndOffset) f.caughtUpMs = performance.now();
    this.updateHighWatermark(r);
    // Only a registered broker rejoins the ISR: else it and the controller (which drops it) undo each other.
    const caughtUp = offset >= r.partition.highWatermark && offset >= (r.epochs.latestEntry?.[1] ?? 0); // epoch start: KAFKA-7128
    if (!r.isr.includes(replicaId) && caughtUp && this.deps.registry.get(replicaId)) {
      this.changeIsr(r, [...r.isr, replicaId], 'caught up');
    }
    return r;
  }

  /** Followers that stayed behind longer than replicaLagMaxMs leave the ISR; not right after a pause of this process, whose queued fetches are unread. */
  private checkLag(): void {
    if (!this.deps.registry.settled) return;
    const now = performance.now();
    for (const r of this.replicas.values()) {
      if (r.role !== 'leader' || r.isrChange) continue;
      const lagging = r.isr.filter((id) => {
        if (id === this.deps.brokerId) return false;
        const f = r.followers.get(id);
        // Caught up as of its last fetch and nothing new since: in sync however long it has been.
        if (f && f.offset >= r.partition.logEndOffset) {
          f.caughtUpMs = now;
          return false;
        }
        return !f || now - f.caughtUpMs > this.deps.config.replicaLagMaxMs;
      });
      if (lagging.length > 0) this.changeIsr(r, r.isr.filter((id) => !lagging.includes(id)), 'lagging');
    }
  }

  private changeIsr(r: Replica, isr: number[], reason: string): void {
    const epoch = r.leaderEpoch;
    // One change at a time. An expansion dropped meanwhile (two followers catching up together) or one that
    // did not land (a lost compare-and-set, etcd away) is retried by the follower's next fetch: ask for it.
    const askBack = () => {
      const back = isr.filter((id) => !r.isr.includes(id) && id !== this.deps.brokerId);
      const ask = () => {
        if (r.role === 'leader' && r.leaderEpoch === epoch) for (const id of back) this.fetchWatch.mark(id, r.topic, r.id);
      };
      setTimeout(ask, 100).unref();
    };
    if (r.isrChange) {
      if (reason === 'caught up') void r.isrChange.finally(askBack);
      return;
    }
    let landed = false;
    r.isrChange = (async () => {
      const cur = this.deps.states.get(r.topic, r.id);
      if (!cur || cur.value.leader !== this.deps.brokerId || cur.value.leaderEpoch !== epoch) return;
      const next: PartitionState = { ...cur.value, isr: [...new Set(isr)].sort((a, b) => a - b), hwm: r.partition.highWatermark };
      // Fault tests: a slow expansion (`isr.expand:<topic>@ms`), a refused one (`isr.expand:<topic>!n`).
      if (reason === 'caught up') await failpointDelay(`isr.expand:${r.topic}`);
      if (reason === 'caught up' && failpointRefuse(`isr.expand:${r.topic}`)) return;
      const added = next.isr.filter((id) => !cur.value.isr.includes(id));
      if (added.length > 0 && r.leaderEpoch === epoch) r.isrAdding = { ids: added, afterRevision: cur.modRevision };
      const res = await this.deps.states.compareAndSet(r.topic, r.id, { modRevision: cur.modRevision }, next);
      // A refused compare-and-set wrote nothing; a failed request (thrown) may have: the watch will tell.
      if (!res.ok && r.isrAdding?.afterRevision === cur.modRevision) r.isrAdding = null;
      landed = res.ok;
      if (res.ok) {
        this.deps.logger.info({ topic: r.topic, partition: r.id, isr: next.isr, reason }, 'ISR changed');
        if (next.isr.length !== cur.value.isr.length) this.deps.onIsrChange?.(r.topic, next.isr.length < cur.value.isr.length ? 'shrink' : 'expand');
        // The watch brings it too; applying now lets the HWM move without waiting for it.
        if (r.leaderEpoch === epoch) {
          r.isr = next.isr;
          if (r.isrAdding?.afterRevision === cur.modRevision) r.isrAdding = null;
          this.updateHighWatermark(r);
        }
      }
    })()
      .catch((err: unknown) => {
        this.deps.logger.warn({ err, topic: r.topic, partition: r.id }, 'ISR change failed (etcd unavailable?); will retry');
        // Waiters for a lagging follower can complete only once it leaves the ISR, which needs etcd: fail
        // them (retriably) now rather than at the replication timeout, so a producer's pipeline on this
        // broker does not stall behind them (this broker may be cut off, its followers gone to a new leader).
        if (reason === 'lagging' && r.leaderEpoch === epoch) {
          failAckWaiters(r, () => new TributaryError('NOT_ENOUGH_REPLICAS', { topic: r.topic, partition: r.id, reason: 'a lagging replica cannot leave the ISR while etcd is unreachable' }));
        }
      })
      .finally(() => {
        r.isrChange = null;
        if (reason === 'caught up' && !landed) askBack();
      });
  }

  // ---- follower side ----

  /** Fetches over the leader's shared connections without waiting there; an empty answer parks (leader-links.ts). */
  private async fetchLoop(r: Replica, signal: AbortSignal): Promise<void> {
    const link = this.links.acquire(r.leaderId, r.topic, r.id);
    let failures = 0;
    let truncated = false;
    /** What REPLICA_FETCH asks beyond the batch frame: what the leader offered in LEADER_EPOCHS (replica-wire.ts). */
    let stored = '';
    const epoch = r.leaderEpoch;
    const horizon = newHorizonWatch();
    try {
      // Removed and added back: the old copy is gone before fetching starts again.
      if (r.dropping) await r.dropping;
      while (!signal.aborted && !this.closed) {
        let conn: Connection | null = null;
        try {
          // A promotion must not wait for a request on a shared connection: the answer is then ignored.
          conn = await abortable(link.connection(), signal);
          if (!truncated) {
            stored = await this.truncateToLeader(r, conn, epoch, horizon, signal);
            if (signal.aborted) break;
            truncated = true;
          }
          // A replica being added catches up within the reassignment throttle (docs/operations.md "Throttle").
          let rate = throttleRate(this.deps.states.get(r.topic, r.id)?.value, this.deps.brokerId, r.isr);
          if (rate > 0 && this.throttle.pending() > 0) {
            await sleep(this.throttle.pending(), signal);
            if (signal.aborted) break;
            rate = throttleRate(this.deps.states.get(r.topic, r.id)?.value, this.deps.brokerId, r.isr);
          }
          const maxBytes = rate > 0 ? Math.max(1, Math.min(this.deps.config.fetchMaxBytes, rate)) : this.deps.config.fetchMaxBytes;
          const offset = r.partition.localEnd; // not the log end: the leader counts it as held here ("Cluster mode")
          const sentAt = performance.now();
          const got = await abortable(
            fetchFromLeader(
              conn,
              `REPLICA_FETCH topic=${r.topic} partition=${r.id} offset=${offset} leader_epoch=${epoch} replica=${this.deps.brokerId} max_bytes=${maxBytes} park=true${r.topicId ? ` topic_id=${r.topicId}` : ''}${horizonParam(horizon)}${stored}`,
              stored !== '',
            ),
            signal,
          );
          if (signal.aborted) break;
          if (got.kind === 'text') {
            await onFetchText(r, got.text, horizon, this.deps.logger); // the leader's horizon, or an error
            continue;
          }
          if (rate > 0 && got.count > 0) this.throttle.consume(got.bytes, rate, sentAt);
          if (got.count > 0) await r.partition.appendReplica(got.records);
          if (got.highWatermark !== undefined) r.partition.setReplicatedHighWatermark(Math.min(got.highWatermark, r.partition.localEnd));
          failures = 0;
          if (got.count === 0) await link.park(r.topic, r.id, signal);
        } catch (err) {
          if (signal.aborted || this.closed) break;
          failures++;
          // A leader that moved answers NOT_LEADER on a healthy connection, which the other partitions keep.
          if (conn && (conn.closed || !(err instanceof TributaryError) || err.code === 'connection_lost' || err.code === 'request_timeout')) link.failed(conn);
          truncated = false;
          // A leader that just died or moved is routine: warned about once per leader, when fetches keep failing.
          link.fetchFailed(err, r.topic, r.id, failures);
          await sleep(Math.min(1000, 50 * failures), signal);
        }
      }
    } finally {
      link.release(r.topic, r.id);
    }
  }

  /**
   * Leader-epoch truncation: the leader's epoch history tells where this replica's latest epoch ended on
   * the leader; anything past that here was never the leader's and goes. Then this replica takes the
   * leader's history as its own. Returns the REPLICA_FETCH parameters of the formats the leader offers.
   */
  private async truncateToLeader(r: Replica, conn: Connection, epoch: number, horizon: HorizonWatch, signal: AbortSignal): Promise<string> {
    await r.epochsLoaded;
    // A demoted leader's appends begun before the new state arrived must land first, or one landing after
    // the decision stays as a divergent record at an offset the new leader gave to an acknowledged one.
    await r.partition.quiesced();
    // Abortable: a promotion waits for this loop, and a frozen leader would hold it to the request timeout.
    const reply = await abortable(conn.command('LEADER_EPOCHS', { topic: r.topic, partition: r.id, leader_epoch: epoch }), signal);
    // No longer this leader's follower (maybe the leader now): its history is not ours to take.
    if (signal.aborted) return '';
    const p = parseLine(reply).params;
    const leaderEnd = Number(p.get('log_end'));
    const entries = (p.get('epochs') ?? '')
      .split(',')
      .filter(Boolean)
      .map((e) => e.split(':').map(Number) as [number, number]);
    const end = followerTruncationOffset(
      { entries, logEndOffset: leaderEnd },
      { entries: r.epochs.entries(), logEndOffset: r.partition.logEndOffset, fallbackOffset: r.partition.highWatermark },
    );
    if (end < r.partition.logEndOffset) {
      this.deps.logger.warn({ topic: r.topic, partition: r.id, from: r.partition.logEndOffset, to: end }, 'truncating to the leader');
      await r.partition.truncateTo(end);
      if (r.partition.highWatermark > end) r.partition.setReplicatedHighWatermark(end);
    }
    const h = parseHorizon(p.get('tombstone_horizon'));
    if (h !== undefined) await followLeaderHorizon(r, h, horizon, this.deps.logger);
    r.epochs.replaceWith(entries);
    // The leader's history starts at its own log start; this log may start later (retention here).
    r.epochs.truncateFromStart(r.partition.earliest);
    await r.epochs.flush();
    // Fault tests (`replica.truncated:<topic>@ms`): a follower slow to fetch after deciding its truncation.
    await abortable(failpointDelay(`replica.truncated:${r.topic}`) ?? Promise.resolve(), signal).catch(() => {});
    return storedFetchParams(p);
  }

  /** LEADER_EPOCHS on the leader: its epoch history, log end and tombstone horizon. */
  epochHistory(topic: string, partition: number, leaderEpoch: number): { epochs: Array<[number, number]>; logEnd: number; tombstoneHorizon: number } {
    const r = this.requireLeaderAt(topic, partition, leaderEpoch);
    return { epochs: r.epochs.entries(), logEnd: r.partition.logEndOffset, tombstoneHorizon: r.partition.log.tombstoneHorizon };
  }

  /** Every replica of this broker (for CLUSTER_STATUS and metrics). */
  all(): Replica[] {
    return [...this.replicas.values()];
  }
}

import type { EventEmitter } from 'node:events';
import type tls from 'node:tls';
import { failpointDelay } from '../common/failpoints.js';
import type { Logger } from '../common/logger.js';
import { TributaryError } from 'tributary-protocol/errors.js';
import type { BrokerRegistry } from './broker-registry.js';
import { leadershipPass } from './leadership-pass.js';
import { LivenessProbe } from './liveness-probe.js';
import type { ControllerElection } from './controller-election.js';
import type { PartitionState, PartitionStateEntry, PartitionStateStore } from './partition-state.js';
import { type ReassignmentEntry, type ReassignmentStore, nextReassignmentStep } from './reassignment.js';

/** How often the controller looks for deleted topics' leftovers with no event saying there may be some. */
const LEFTOVER_BACKSTOP_MS = 60_000;
/** A reassignment plan left unchanged this long by the registered broker that stored it: the controller finishes it. */
export const PLAN_TAKEOVER_MS = 5_000;

/**
 * Replicas for a new topic's partitions: partition i starts at the (i mod n)-th live broker and takes the
 * next `rf` in id order, so leaders (the first replica) spread evenly.
 */
export function assignReplicas(partitions: number, replicationFactor: number, brokerIds: number[], first = 0): PartitionState[] {
  const ids = [...brokerIds].sort((a, b) => a - b);
  if (replicationFactor > ids.length) {
    throw new TributaryError('NOT_ENOUGH_REPLICAS', { replication_factor: replicationFactor, live_brokers: ids.length, reason: 'fewer live brokers than the replication factor' });
  }
  const out: PartitionState[] = [];
  for (let p = first; p < first + partitions; p++) {
    const replicas = Array.from({ length: replicationFactor }, (_, k) => ids[(p + k) % ids.length]!);
    out.push({ replicas, leader: replicas[0]!, leaderEpoch: 0, isr: [...replicas], hwm: 0 });
  }
  return out;
}

/**
 * The next state of a partition given the live brokers, or undefined when nothing must change: a leader
 * that is gone is replaced by the first live in-sync replica (in replica order) with the epoch bumped;
 * with none, the partition is leaderless until one returns (an out-of-sync replica only when
 * `unclean` allows it). The ISR loses dead brokers other than the leader's last witness.
 */
export function nextLeadership(s: PartitionState, live: Set<number>, unclean: boolean): PartitionState | undefined {
  if (s.leader >= 0 && live.has(s.leader)) {
    // A dead follower leaves the ISR now rather than after the leader's lag bound, so acks=all does not
    // stall on it (the leader adds it back once it has caught up again).
    const isr = s.isr.filter((id) => live.has(id));
    return isr.length === s.isr.length ? undefined : { ...s, isr };
  }
  const inSync = s.replicas.filter((id) => s.isr.includes(id) && live.has(id));
  let leader: number | undefined = inSync[0];
  if (leader === undefined && unclean) leader = s.replicas.find((id) => live.has(id));
  if (leader === undefined) {
    // Keep the ISR as it was: the first of its members to come back is the one with every acknowledged record.
    return s.leader === -1 ? undefined : { ...s, leader: -1, leaderEpoch: s.leaderEpoch + 1 };
  }
  const isr = inSync.length > 0 ? inSync : [leader];
  return { ...s, leader, leaderEpoch: s.leaderEpoch + 1, isr };
}

/**
 * Preferred-leader election: a partition whose live leader is not its first replica gets that replica
 * back as leader (epoch bumped, ISR unchanged) once it is live, in the ISR, and `ready` (registered long
 * enough not to flap). An in-sync replica holds every record below the HWM, so no acknowledged record
 * can be lost by the move. Undefined when nothing must change.
 */
export function preferredLeadership(s: PartitionState, ready: (id: number) => boolean): PartitionState | undefined {
  const preferred = s.replicas[0];
  if (preferred === undefined || s.leader < 0 || s.leader === preferred) return undefined;
  if (!s.isr.includes(preferred) || !ready(preferred)) return undefined;
  return { ...s, leader: preferred, leaderEpoch: s.leaderEpoch + 1 };
}

/**
 * The elected controller's work: moves leadership off brokers whose lease expired (and onto a returning
 * in-sync replica of a leaderless partition). Every change is a compare-and-set on the partition's
 * record, so a controller that lost its role mid-way cannot overwrite its successor's decisions.
 */
export class Controller {
  private timer: NodeJS.Timeout | undefined;
  private probe: LivenessProbe | undefined;
  private running: Promise<void> | null = null;
  private again = false;
  /** When each broker that is not registered now left (its key expired, was revoked or deleted). */
  private readonly departed = new Map<number, number>();
  /** Brokers whose process the liveness probe found gone: no grace for them. */
  private readonly dead = new Set<number>();
  /** When each broker joined, as this controller saw it (absent: registered before it started). */
  private readonly joined = new Map<number, number>();
  /**
   * Whether what a deleted topic left behind may be there to remove (dropDeletedTopicLeftovers): its walk
   * of every partition is for the passes after something that can leave it, not for every pass.
   */
  private leftoversDue = true;
  private leftoversSweptAt = Number.NEGATIVE_INFINITY;
  /** Each stored reassignment plan's revision and when this controller first saw it there. */
  private readonly plansSeen = new Map<string, { modRevision: number; at: number }>();

  constructor(
    private readonly deps: {
      election: ControllerElection;
      registry: BrokerRegistry;
      states: PartitionStateStore;
      /** Reassignment requests (reassignment.ts); the controller carries them out. */
      reassignments?: ReassignmentStore;
      logger: Logger;
      uncleanLeaderElection: boolean;
      /** Preferred-leader election (see preferredLeadership); off when undefined. */
      preferredLeader?: { delayMs: number };
      /** Inter-broker TLS: the liveness probe's connections complete a handshake, as peers' do. */
      peerTls?: tls.ConnectionOptions;
      /**
       * What the controller needs of topic definitions to remove what a deleted topic left behind: a
       * definition's etcd key (ReassignmentStore.deleteTopic spares requests newer than it), and a topic's
       * id as this broker's cache has it and as etcd has it now (undefined: no such topic).
       */
      topics?: {
        definitionKey(topic: string): string;
        cachedId(topic: string): string | undefined;
        readId(topic: string): Promise<string | undefined>;
        /** Emits 'topic-created' and 'topic-deleted' as this broker's cache learns of them. */
        events?: EventEmitter;
      };
      /** Extra work while controller (e.g. creating internal topics once enough brokers are up). */
      onTick?: () => Promise<void>;
      /** The controller took brokers out of a partition's ISR (tributary_isr_shrinks_total, docs/operations.md). */
      onIsrShrink?: (topic: string) => void;
    },
  ) {
    const kick = () => this.kick();
    deps.registry.events.on('broker-left', (b: { id: number }) => {
      if (!deps.registry.get(b.id)) this.departed.set(b.id, performance.now());
      kick();
    });
    deps.registry.events.on('broker-joined', (b: { id: number }) => {
      this.departed.delete(b.id);
      this.dead.delete(b.id);
      this.joined.set(b.id, performance.now());
      kick();
    });
    const leftovers = () => {
      this.leftoversDue = true;
    };
    deps.election.events.on('change', () => {
      leftovers();
      kick();
    });
    deps.states.events.on('changed', (e: PartitionStateEntry) => {
      if (e.value.topicId !== undefined && deps.topics?.cachedId(e.topic) !== e.value.topicId) leftovers();
      // A reassignment moves on as its replicas join the ISR.
      if (e.value.leader < 0 || !deps.registry.get(e.value.leader) || e.value.reassign) kick();
    });
    deps.reassignments?.events.on('changed', () => {
      leftovers();
      kick();
    });
    deps.reassignments?.plans.events.on('changed', kick);
    deps.topics?.events?.on('topic-deleted', leftovers);
    deps.topics?.events?.on('topic-created', leftovers);
    this.timer = setInterval(kick, 1000);
    this.timer.unref();
    // Every broker probes (a dead controller must be noticed too); revoking a lease twice is harmless.
    this.probe = new LivenessProbe({
      selfId: deps.election.brokerId,
      active: () => true,
      brokers: () => deps.registry.list(),
      logger: deps.logger,
      lease: (id) => deps.registry.leaseOf(id),
      tls: deps.peerTls,
      onDead: (b) => {
        const lease = deps.registry.leaseOf(b.id);
        // Only the registration the probe looked at: a restarted broker's new lease is not touched.
        if (!lease || lease !== b.lease) return;
        deps.logger.warn({ broker: b.id }, 'broker process is gone (connection refused): revoking its lease');
        this.dead.add(b.id);
        deps.registry.revokeLease(lease).catch(() => {});
        // A dead controller's role goes with it, so the next election need not wait for its TTL.
        const role = deps.election.controllerLease;
        if (deps.election.controllerId === b.id && role) deps.registry.revokeLease(role).catch(() => {});
      },
    });
  }

  close(): void {
    clearInterval(this.timer);
    this.probe?.close();
  }

  /** Runs a pass now (or right after the one running). */
  kick(): void {
    if (!this.deps.election.isController) return;
    if (this.running) {
      this.again = true;
      return;
    }
    this.running = this.pass()
      .catch((err: unknown) => this.deps.logger.warn({ err }, 'controller pass failed; retrying'))
      .finally(() => {
        this.running = null;
        if (this.again) {
          this.again = false;
          this.kick();
        }
      });
  }

  /**
   * How long, after etcd comes back from an outage of a lease TTL or more, a broker whose registration
   * expired meanwhile counts as live: etcd expires every lease it finds past its TTL when it resumes,
   * though every broker may be running; they re-register within moments (docs/architecture.md,
   * "Cluster mode"). A broker the liveness probe found dead gets no grace.
   */
  get outageGraceMs(): number {
    return Math.max(2 * this.deps.registry.leaseTtlSeconds * 1000, 3000);
  }

  /** Registered brokers, plus those that left during or just after an etcd outage (see outageGraceMs). */
  private liveBrokers(now: number): Set<number> {
    const live = new Set(this.deps.registry.list().map((b) => b.id));
    const outage = this.deps.registry.etcdOutage();
    const grace = this.outageGraceMs;
    if (!outage.unreachable && now - outage.recoveredAt >= grace) {
      this.departed.clear();
      return live;
    }
    for (const [id, at] of this.departed) {
      if (this.dead.has(id) || live.has(id)) continue;
      if (outage.unreachable || now - at < grace) live.add(id);
    }
    return live;
  }

  private async pass(): Promise<void> {
    const now = performance.now();
    const preferred = this.deps.preferredLeader;
    // Registered (not merely in the outage grace) for the delay: a broker that just came back is not
    // handed leadership while it may still flap.
    const ready = (id: number) => {
      if (!preferred || !this.deps.registry.get(id)) return false;
      const at = this.joined.get(id);
      return at === undefined || now - at >= preferred.delayMs;
    };
    await this.dropDeletedTopicLeftovers();
    await leadershipPass({
      entries: this.deps.states.list(),
      live: () => this.liveBrokers(performance.now()),
      active: () => this.deps.election.isController,
      decide: (e, live) => {
        const failover = nextLeadership(e.value, live, this.deps.uncleanLeaderElection);
        // Failover first; a reassignment takes its next step on the following pass, from the new state.
        if (!failover && (e.value.reassign || this.requestOf(e))) return 'reassign';
        if (failover) return { next: failover, reason: 'failover' };
        const next = preferred ? preferredLeadership(e.value, ready) : undefined;
        return next && { next, reason: 'preferred leader' };
      },
      reassign: (e, live) => this.reassignStep(e, this.requestOf(e), live),
      move: async (e, { next, reason }) => {
        const res = await this.deps.states.compareAndSet(e.topic, e.partition, { modRevision: e.modRevision }, next);
        if (!res.ok) return;
        const removed = e.value.isr.filter((id) => !next.isr.includes(id));
        // The leader never learns of this shrink as one it made: counted here, once (docs/operations.md).
        if (removed.length > 0) this.deps.onIsrShrink?.(e.topic);
        const where = { topic: e.topic, partition: e.partition, leaderEpoch: next.leaderEpoch, isr: next.isr };
        if (next.leader === e.value.leader) this.deps.logger.info({ ...where, leader: next.leader, removed, reason }, 'isr shrunk');
        else this.deps.logger.info({ ...where, from: e.value.leader, to: next.leader, reason }, 'leader moved');
      },
    });
    // After the failover pass, which must not wait on it (the requests it writes are taken up next pass).
    await this.finishPlans(now);
    if (this.deps.election.isController) await this.deps.onTick?.();
  }

  /**
   * The request for a partition, unless it is older than the partition's state: a request is stored only
   * for a partition whose state exists, so an older one was made for a deleted topic of the same name
   * and left behind (dropDeletedTopicLeftovers removes it); carried out, it would move the new topic's replicas.
   */
  private requestOf(e: PartitionStateEntry): ReassignmentEntry | undefined {
    const r = this.deps.reassignments?.get(e.topic, e.partition);
    return r && r.createRevision > e.createRevision ? r : undefined;
  }

  /**
   * Removes what deleted topics left behind. DELETE removes a topic's reassignment requests and partition
   * states after its definition, best effort: a broker killed between the two, or etcd unreachable then,
   * leaves them, for CLUSTER_STATUS to go on listing, REASSIGN_CANCEL to "cancel", and a topic re-created
   * under the name to inherit (its partitions refused to REASSIGN as in progress, or moved by the old
   * request). Candidates come from the caches; what goes is decided on etcd's own answers: states of a
   * topic id that is not the name's current one, and requests older than the name's current definition.
   */
  private async dropDeletedTopicLeftovers(): Promise<void> {
    const topics = this.deps.topics;
    if (!topics) return;
    // Also once a minute whatever happened: a backstop for a way of leaving something that no event marks.
    const now = performance.now();
    if (!this.leftoversDue && now - this.leftoversSweptAt < LEFTOVER_BACKSTOP_MS) return;
    this.leftoversDue = false;
    this.leftoversSweptAt = now;
    const stale = new Map<string, Set<string>>();
    for (const e of this.deps.states.list()) {
      const id = e.value.topicId;
      if (id === undefined || topics.cachedId(e.topic) === id) continue;
      stale.set(e.topic, (stale.get(e.topic) ?? new Set()).add(id));
    }
    const store = this.deps.reassignments;
    const requestTopics = new Set<string>();
    for (const r of store?.list() ?? []) {
      const s = this.deps.states.get(r.topic, r.partition);
      if (!s || r.createRevision < s.createRevision) requestTopics.add(r.topic);
    }
    try {
      for (const [topic, ids] of stale) {
        if (!this.deps.election.isController) return this.sweepAgain();
        const current = await topics.readId(topic);
        for (const id of ids) {
          if (id === current) continue;
          await this.deps.states.deleteTopic(topic, id);
          this.deps.logger.info({ topic, topicId: id }, 'partition states of a deleted topic removed');
        }
      }
      for (const topic of requestTopics) {
        if (!store || !this.deps.election.isController) return this.sweepAgain();
        const before = store.list(topic).length;
        await store.deleteTopic(topic, topics.definitionKey(topic));
        const removed = before - store.list(topic).length;
        if (removed > 0) this.deps.logger.info({ topic, removed }, 'reassignment requests of a deleted topic removed');
      }
    } catch (err) {
      // The failover pass must not wait on this: it is tried again on the next pass.
      this.sweepAgain();
      this.deps.logger.warn({ err }, 'removing what a deleted topic left behind failed; retrying on the next pass');
    }
  }

  /**
   * Writes the requests of reassignment plans (reassignment-plans.ts) that the broker which stored them
   * left unfinished: it is no longer registered (it died part-way), or it left the plan unchanged for
   * PLAN_TAKEOVER_MS (etcd unreachable then). Expanding a plan twice at once writes nothing twice.
   */
  private async finishPlans(now: number): Promise<void> {
    const plans = this.deps.reassignments?.plans;
    if (!plans) return;
    const present = new Set<string>();
    for (const e of plans.list()) {
      const { id, broker } = e.value;
      present.add(id);
      const seen = this.plansSeen.get(id);
      if (seen?.modRevision !== e.modRevision) this.plansSeen.set(id, { modRevision: e.modRevision, at: now });
      const at = this.plansSeen.get(id)!.at;
      if (this.deps.registry.get(broker) && now - at < PLAN_TAKEOVER_MS) continue;
      if (!this.deps.election.isController) return;
      try {
        await plans.expand(id);
        this.deps.logger.info({ plan: id, broker, moves: e.value.moves.length }, 'reassignment plan finished by the controller');
      } catch (err) {
        this.deps.logger.warn({ err, plan: id }, 'finishing a reassignment plan failed; retrying on the next pass');
      }
    }
    for (const id of this.plansSeen.keys()) if (!present.has(id)) this.plansSeen.delete(id);
  }

  private sweepAgain(): void {
    this.leftoversDue = true;
  }

  /** One step of a partition's reassignment (reassignment.ts), by compare-and-set on its state. */
  private async reassignStep(e: PartitionStateEntry, request: ReassignmentEntry | undefined, live: Set<number>): Promise<void> {
    const store = this.deps.reassignments;
    if (!store) return;
    const step = nextReassignmentStep(e.value, request?.value, live);
    const where = { topic: e.topic, partition: e.partition };
    if (step.kind === 'wait') return;
    if (step.kind === 'delete') {
      if (request && (await store.remove(e.topic, e.partition, request.modRevision))) this.deps.logger.info({ ...where, reason: step.why }, 'reassignment request removed');
      return;
    }
    // Fault tests hold a decided completion or cancel here, so an admin command can race its write.
    if (step.finished) await failpointDelay(`reassign.finish:${e.topic}`);
    if (step.finished && request) {
      // The last step and the request's removal are one transaction, on the request as read: a cancel or
      // throttle change written since fails it, so a cancel answered OK never meets a completion already
      // written (and a completion never lands after a cancel), and no request outlives its reassignment.
      const key = store.keyOf(e.topic, e.partition);
      const revision = await this.deps.states.compareAndSetDeleting(e.topic, e.partition, e.modRevision, step.state, { key, modRevision: request.modRevision });
      if (revision === undefined) return;
      store.forget(e.topic, e.partition, revision);
    } else {
      const res = await this.deps.states.compareAndSet(e.topic, e.partition, { modRevision: e.modRevision }, step.state);
      if (!res.ok) return; // changed meanwhile (an ISR change): the next pass decides again
    }
    this.deps.logger.info(
      { ...where, step: step.why, replicas: step.state.replicas, isr: step.state.isr, leader: step.state.leader, leaderEpoch: step.state.leaderEpoch, reassign: step.state.reassign },
      'reassignment step',
    );
  }
}

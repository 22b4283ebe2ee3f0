/**
 * Partition reassignment (docs/architecture.md "Reassignment", docs/operations.md "Moving replicas"):
 * KIP-455 in shape. An admin command stores a plan (reassignment-plans.ts), expanded into a request per
 * partition under `<prefix>reassignments/<topic>/<n>` (one at a time per partition); the controller
 * alone turns requests into partition-state changes, one compare-and-set per step:
 *
 *   start     replicas = original ++ (target - original), `reassign` = {target, adding, removing, throttle}
 *   catch up  the adding replicas fetch from the leader (throttled while out of the ISR) and join the ISR
 *   complete  once every target replica is in the ISR: replicas = target, ISR = ISR ∩ target, the leader
 *             moved to an in-sync target replica (epoch bumped) if it was being removed; request deleted
 *   cancel    replicas = original, ISR = ISR ∩ original, the leader moved back to an in-sync original
 *             replica if it had moved; request deleted
 *
 * Every step is decided from etcd alone (the request and the partition state), so a new controller picks
 * up where the last one stopped. The pure functions here decide; the controller writes.
 */
import { EventEmitter } from 'node:events';
import type { Etcd3, IKeyValue } from 'etcd3';
import { TributaryError } from 'tributary-protocol/errors.js';
import type { Clock } from '../common/clock.js';
import { type EtcdSource, deleteAsRead, normalizePrefix, resolveClient, withMetadataErrors } from './etcd-client.js';
import { listPartitionRecords, splitKey } from './partition-keys.js';
import type { PartitionState } from './partition-state.js';
import { ReassignmentPlans } from './reassignment-plans.js';
import { type Versioned, WatchedPrefix } from './watched-prefix.js';

/** What an operator asked for one partition. */
export interface ReassignmentRequest {
  /** The replicas wanted at the end, preferred leader first. */
  target: number[];
  /** Bytes/s each receiving broker may fetch for the replicas it is adding while they catch up; 0: none. */
  throttle: number;
  /** Set by a cancel: go back to the original replicas. */
  cancel?: boolean;
  requestedAt: number;
}

/** The reassignment fields of a partition state while one is in progress (written by the controller only). */
export interface ReassignmentProgress {
  target: number[];
  adding: number[];
  removing: number[];
  throttle: number;
}

export interface ReassignmentEntry extends Versioned<ReassignmentRequest> {
  topic: string;
  partition: number;
}

export { MAX_TXN_OPS } from './reassignment-plans.js';

/** An etcd key a transaction requires to be the one checked: created at `createRevision` (so neither deleted nor re-created). */
export interface KeyGuard {
  key: string;
  createRevision: number;
}

/**
 * One more key a plan's transaction writes, only if it is still at `modRevision` (a topic's definition with
 * its new replication factor: ALTER_REPLICATION_FACTOR). `applied` gets the revision it was written at;
 * `raced` what etcd has there now when the transaction failed (not called when the key is gone).
 */
export interface GuardedPut {
  key: string;
  modRevision: number;
  value: string;
  applied(revision: number): void;
  raced(kv: IKeyValue): void;
}

/** Why a plan was not stored (ReassignmentPlans.store): partitions that have a request now, guarded keys that changed. */
export interface PlanConflict {
  busy: Array<{ topic: string; partition: number }>;
  changed: string[];
}

function isIdList(v: unknown): v is number[] {
  return Array.isArray(v) && v.every((x) => Number.isInteger(x) && x >= 0);
}

function parseRequest(text: string): ReassignmentRequest | undefined {
  try {
    const r = JSON.parse(text) as ReassignmentRequest;
    const ok = r !== null && typeof r === 'object' && isIdList(r.target) && r.target.length > 0 && Number.isSafeInteger(r.throttle) && r.throttle >= 0;
    return ok ? r : undefined;
  } catch {
    return undefined;
  }
}

/**
 * The reassignment requests in etcd, cached by a watch. Written by admin commands (create, cancel,
 * throttle) and deleted by the controller when a partition's reassignment completes or is cancelled.
 * Events: 'changed' (ReassignmentEntry) and 'deleted' (ReassignmentEntry).
 */
export class ReassignmentStore {
  readonly events = new EventEmitter();
  private readonly client: Etcd3;
  private readonly ownsClient: boolean;
  private readonly records: WatchedPrefix<ReassignmentRequest>;

  /** Whole reassignments waiting to be written as these requests. */
  readonly plans: ReassignmentPlans;

  constructor(opts: { etcd: EtcdSource; prefix?: string }) {
    ({ client: this.client, owned: this.ownsClient } = resolveClient(opts.etcd));
    this.records = new WatchedPrefix(this.client, `${normalizePrefix(opts.prefix)}reassignments/`, (text) => parseRequest(text));
    this.plans = new ReassignmentPlans(this.client, normalizePrefix(opts.prefix), this);
    this.records.events.on('put', (key: string, e: Versioned<ReassignmentRequest>) => this.events.emit('changed', { ...splitKey(key), ...e }));
    this.records.events.on('delete', (key: string, e: Versioned<ReassignmentRequest>) => this.events.emit('deleted', { ...splitKey(key), ...e }));
  }

  async open(): Promise<void> {
    await withMetadataErrors('open', () => this.records.start());
    await withMetadataErrors('open', () => this.plans.start());
  }

  async close(): Promise<void> {
    await this.records.close();
    await this.plans.close();
    if (this.ownsClient) this.client.close();
  }

  get(topic: string, partition: number): ReassignmentEntry | undefined {
    const e = this.records.get(`${topic}/${partition}`);
    return e && { topic, partition, ...e };
  }

  list(topic?: string): ReassignmentEntry[] {
    return listPartitionRecords(this.records, topic);
  }

  /** A request written by a plan's expansion (ReassignmentPlans.expand) in a transaction at `revision`. */
  applyStored(topic: string, partition: number, request: ReassignmentRequest, revision: number): void {
    this.records.applyPut(`${topic}/${partition}`, request, revision, revision);
  }

  get requestPrefix(): string {
    return this.records.prefix;
  }

  /** Replaces a request if it is still at `modRevision`; false when it changed or went away meanwhile. */
  async update(topic: string, partition: number, modRevision: number, next: ReassignmentRequest): Promise<boolean> {
    const key = this.absolute(topic, partition);
    const res = await withMetadataErrors('update_reassignment', () =>
      this.client.if(key, 'Mod', '==', modRevision).then(this.client.put(key).value(JSON.stringify(next))).else(this.client.get(key)).commit(),
    );
    const rel = `${topic}/${partition}`;
    if (res.succeeded) {
      const revision = Number(res.header.revision);
      this.records.applyPut(rel, next, revision, this.get(topic, partition)?.createRevision ?? revision);
    } else {
      // What is there now (or that it is gone), so a caller retrying reads the current version.
      const kv = res.responses[0]?.response_range.kvs[0];
      if (kv) this.records.applyKv(rel, kv);
      else this.records.applyDelete(rel, Number(res.header.revision));
    }
    return res.succeeded;
  }

  /** Deletes a request if it is still at `modRevision` (a cancel written meanwhile is not lost). */
  async remove(topic: string, partition: number, modRevision: number): Promise<boolean> {
    const key = this.absolute(topic, partition);
    const res = await withMetadataErrors('delete_reassignment', () =>
      this.client.if(key, 'Mod', '==', modRevision).then({ request_delete_range: { key: Buffer.from(key) } }).commit(),
    );
    if (res.succeeded) this.records.applyDelete(`${topic}/${partition}`, Number(res.header.revision));
    return res.succeeded;
  }

  /** The etcd key of a partition's request (for a transaction that deletes it with another write). */
  keyOf(topic: string, partition: number): string {
    return this.absolute(topic, partition);
  }

  /** A request deleted at `revision` by a transaction of someone else's (the watch confirms it later). */
  forget(topic: string, partition: number, revision: number): void {
    this.records.applyDelete(`${topic}/${partition}`, revision);
  }

  /**
   * Deletes the requests of a deleted topic (after its definition went): those created before the name's
   * definition at `definitionKey` now, all when there is none. A request for the topic re-created under the
   * name meanwhile (maybe on another broker) is newer than that definition and stays. Each goes at the
   * revision read; a request changed meanwhile makes it read again.
   */
  async deleteTopic(topic: string, definitionKey: string): Promise<void> {
    for (let attempt = 0; attempt < 5; attempt++) {
      // One read (a transaction whose compare always holds) sees the requests and the definition at one revision.
      const read = await withMetadataErrors('delete_reassignment', () =>
        this.client.if(definitionKey, 'Version', '>', -1).then(this.client.getAll().prefix(this.absolute(topic, '')), this.client.get(definitionKey)).commit(),
      );
      const requests = read.responses[0]!.response_range.kvs;
      const recreated = Number(read.responses[1]!.response_range.kvs[0]?.create_revision ?? 0);
      const doomed = requests.filter((kv) => recreated === 0 || Number(kv.create_revision) < recreated);
      if (await deleteAsRead(this.client, 'delete_reassignment', doomed, (key, rev) => this.records.applyDelete(key.slice(this.records.prefix.length), rev))) return;
    }
    throw new TributaryError('metadata_unavailable', { operation: 'delete_reassignment', topic, reason: 'concurrent changes' });
  }

  private absolute(topic: string, partition: number | ''): string {
    return `${this.records.prefix}${topic}/${partition}`;
  }
}

// ---------------------------------------------------------------- deciding the steps

const sameList = (a: readonly number[], b: readonly number[]) => a.length === b.length && a.every((x, i) => x === b[i]);

/** The replicas a partition had before its reassignment began (what a cancel goes back to). */
export function originalReplicas(s: PartitionState): number[] {
  const adding = s.reassign?.adding ?? [];
  return s.replicas.filter((id) => !adding.includes(id));
}

/** The first state of a reassignment: the target's new replicas join `replicas`, marked adding. */
export function startReassignment(s: PartitionState, target: number[], throttle: number): PartitionState {
  const adding = target.filter((id) => !s.replicas.includes(id));
  const removing = s.replicas.filter((id) => !target.includes(id));
  return { ...s, replicas: [...s.replicas, ...adding], reassign: { target: [...target], adding, removing, throttle } };
}

/**
 * A state whose replicas become `replicas`: the ISR keeps only those, and a leader outside them hands over
 * to the first of them (in their order) that is in the ISR and live, with the epoch bumped. Undefined when
 * none can take over yet: nothing may move until one can, or acknowledged records could be lost.
 */
function settle(s: PartitionState, replicas: number[], live: Set<number>): PartitionState | undefined {
  const isr = s.isr.filter((id) => replicas.includes(id));
  let leader = s.leader;
  let leaderEpoch = s.leaderEpoch;
  if (!replicas.includes(s.leader)) {
    const next = replicas.find((id) => isr.includes(id) && live.has(id));
    if (next === undefined) return undefined;
    leader = next;
    leaderEpoch = s.leaderEpoch + 1;
  }
  if (isr.length === 0) return undefined;
  const { reassign: _done, ...rest } = s;
  return { ...rest, replicas: [...replicas], isr, leader, leaderEpoch };
}

export type ReassignmentStep =
  /** Write this state (and, with `finished`, delete the request once written). */
  | { kind: 'write'; state: PartitionState; finished: boolean; why: string }
  /** Nothing to write; delete the request (nothing to do, or a step already written). */
  | { kind: 'delete'; why: string }
  /** Waiting (replicas catching up, no in-sync replica to lead). */
  | { kind: 'wait'; why: string };

/**
 * The controller's next step for a partition, from its state, its request (if any) and the live brokers.
 * A state with `reassign` but no request (deleted by hand) continues towards its target.
 */
export function nextReassignmentStep(s: PartitionState, request: ReassignmentRequest | undefined, live: Set<number>): ReassignmentStep {
  const r = s.reassign;
  if (request?.cancel) {
    if (!r) return { kind: 'delete', why: 'cancelled before it started' };
    const back = settle(s, originalReplicas(s), live);
    if (!back) return { kind: 'wait', why: 'cancel: no original replica is in sync and live to lead' };
    return { kind: 'write', state: back, finished: true, why: 'cancelled' };
  }
  if (!r) {
    if (!request) return { kind: 'wait', why: 'no reassignment' };
    if (sameList(request.target, s.replicas)) return { kind: 'delete', why: 'replicas already as requested' };
    return { kind: 'write', state: startReassignment(s, request.target, request.throttle), finished: false, why: 'started' };
  }
  if (request && request.throttle !== r.throttle) {
    return { kind: 'write', state: { ...s, reassign: { ...r, throttle: request.throttle } }, finished: false, why: 'throttle changed' };
  }
  // Every target replica in sync: removing the others leaves an ISR of the whole target, so acks=all
  // keeps its min_insync_replicas through the change (docs/architecture.md, "Reassignment").
  const caughtUp = r.target.every((id) => s.isr.includes(id) && live.has(id));
  if (!caughtUp) return { kind: 'wait', why: 'target replicas catching up' };
  const done = settle(s, r.target, live);
  if (!done) return { kind: 'wait', why: 'no target replica is in sync and live to lead' };
  return { kind: 'write', state: done, finished: true, why: 'completed' };
}

// ---------------------------------------------------------------- plans

/**
 * Checks a requested replica list: non-empty, no duplicates, every id a live broker. `what` names it in
 * the error (`replicas of orders[3]`).
 */
export function checkTarget(target: number[], live: Set<number>, what: string): void {
  if (target.length === 0) throw new TributaryError('invalid_parameter', { param: 'replicas', reason: `${what}: empty replica list` });
  const dup = target.find((id, i) => target.indexOf(id) !== i);
  if (dup !== undefined) throw new TributaryError('invalid_parameter', { param: 'replicas', reason: `${what}: broker ${dup} listed twice` });
  const unknown = target.filter((id) => !live.has(id));
  if (unknown.length > 0) {
    throw new TributaryError('invalid_parameter', { param: 'replicas', reason: `${what}: broker(s) ${unknown.join(',')} not registered (live: ${[...live].sort((a, b) => a - b).join(',')})` });
  }
}

/** Replicas per broker over every partition (targets of reassignments in progress counted as placed). */
export function replicaLoad(states: Array<{ value: PartitionState }>, live: Iterable<number>): Map<number, number> {
  const load = new Map<number, number>([...live].map((id) => [id, 0]));
  for (const e of states) for (const id of e.value.reassign?.target ?? e.value.replicas) load.set(id, (load.get(id) ?? 0) + 1);
  return load;
}

/** The least loaded live broker not in `exclude` (ties: lowest id); the load is taken into account as it goes. */
function pickBroker(load: Map<number, number>, candidates: number[], exclude: number[]): number | undefined {
  let best: number | undefined;
  for (const id of candidates) {
    if (exclude.includes(id)) continue;
    if (best === undefined || load.get(id)! < load.get(best)! || (load.get(id) === load.get(best) && id < best)) best = id;
  }
  if (best !== undefined) load.set(best, load.get(best)! + 1);
  return best;
}

/**
 * A drain: every partition replicated on `broker` gets, in its place, the least loaded live broker not
 * already a replica (so replicas spread evenly). The replacement takes the drained broker's position, so
 * a partition it preferred-led gets a new preferred leader; leadership moves off at completion.
 * Throws NOT_ENOUGH_REPLICAS when a partition has no broker to move to.
 */
export function drainPlan(states: Array<{ topic: string; partition: number; value: PartitionState }>, broker: number, live: number[]): Array<{ topic: string; partition: number; target: number[] }> {
  const others = live.filter((id) => id !== broker).sort((a, b) => a - b);
  const load = replicaLoad(states, others);
  const out = [];
  for (const e of states) {
    if (!e.value.replicas.includes(broker)) continue;
    const current = e.value.reassign?.target ?? e.value.replicas;
    const to = pickBroker(load, others, current);
    if (to === undefined) {
      throw new TributaryError('NOT_ENOUGH_REPLICAS', {
        topic: e.topic,
        partition: e.partition,
        reason: `no live broker to move broker ${broker}'s replica to (replicas ${current.join(',')}, live ${live.join(',')})`,
      });
    }
    out.push({ topic: e.topic, partition: e.partition, target: current.map((id) => (id === broker ? to : id)) });
  }
  return out;
}

/**
 * A topic's partitions at replication factor `rf`: more replicas come from the least loaded live brokers
 * (appended, so preferred leaders stay); fewer drop the last replicas in order, keeping the preferred
 * leader. Partitions already at `rf` are left out.
 */
export function replicationFactorPlan(states: Array<{ topic: string; partition: number; value: PartitionState }>, topic: string, rf: number, live: number[]): Array<{ topic: string; partition: number; target: number[] }> {
  if (rf > live.length) throw new TributaryError('NOT_ENOUGH_REPLICAS', { replication_factor: rf, live_brokers: live.length, reason: 'fewer live brokers than the replication factor' });
  const load = replicaLoad(states, live);
  const out = [];
  for (const e of states.filter((x) => x.topic === topic)) {
    const current = e.value.replicas;
    if (current.length === rf) continue;
    // Shrinking keeps live in-sync replicas first, then live ones, each in replica order (the preferred
    // leader first when it qualifies): the first `rf` alone could keep a dead broker and drop the live copy.
    const isr = new Set(e.value.isr);
    const liveSet = new Set(live);
    const rank = (id: number) => (liveSet.has(id) ? (isr.has(id) ? 0 : 1) : 2);
    const target = [...current].sort((a, b) => rank(a) - rank(b)).slice(0, rf);
    while (target.length < rf) target.push(pickBroker(load, [...live].sort((a, b) => a - b), target)!);
    out.push({ topic, partition: e.partition, target });
  }
  return out;
}

// ---------------------------------------------------------------- the throttle

/**
 * A byte budget shared by every replica one broker is adding (docs/operations.md "Throttle"): each fetch
 * of `bytes` at `rate` bytes/s pushes the next allowed fetch `bytes / rate` seconds further, so over any
 * stretch the bytes fetched stay within rate × time plus one fetch. Time comes from `clock`.
 */
export class ReplicationThrottle {
  private nextFree = 0;
  /** Bytes counted against the throttle, for the metrics and tests. */
  throttledBytes = 0;

  constructor(private readonly clock: Pick<Clock, 'now'>) {}

  /**
   * Counts a fetch of `bytes` that was sent at `startedAt` (its round trip is part of its time budget)
   * and returns how long to wait before the next one (0: none).
   */
  consume(bytes: number, rate: number, startedAt = this.clock.now()): number {
    if (!(rate > 0)) return 0;
    this.throttledBytes += bytes;
    const now = this.clock.now();
    this.nextFree = Math.max(this.nextFree, Math.min(startedAt, now)) + (bytes * 1000) / rate;
    return Math.max(0, this.nextFree - now);
  }

  /** How long until a fetch may start now (a previous one's debt). */
  pending(): number {
    return Math.max(0, this.nextFree - this.clock.now());
  }
}

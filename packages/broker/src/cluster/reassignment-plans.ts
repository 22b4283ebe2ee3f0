/**
 * Reassignment plans (docs/architecture.md "Reassignment"): how REASSIGN, DRAIN_BROKER and
 * ALTER_REPLICATION_FACTOR store their requests all or nothing whatever their size. etcd refuses a
 * transaction of more than MAX_TXN_OPS operations, so a whole operation's requests cannot be written in
 * one; its plan can, as one key `<prefix>reassignment-plans/<id>` (the moves, the throttle, the topic
 * definitions it was computed from), with a topic definition's new replication factor in the same
 * transaction. The plan is then expanded into the per-partition requests a chunk at a time, each chunk
 * with the plan's progress (`expanded`) in one transaction guarded by the plan's revision, so expanding
 * twice writes nothing twice; the last chunk deletes the plan. The broker that stored a plan expands it
 * before answering; the controller finishes a plan whose broker died or gave up (Controller.finishPlans).
 * A crash at any point leaves no plan, or a whole plan that is finished: every move requested, or none.
 *
 * One at a time per partition: every plan is stored only if `<prefix>reassignment-claims` is still at the
 * revision read with the requests and plans the plan was checked against (and bumps it), so two plans
 * stored at once cannot both claim a partition.
 */
import { randomBytes } from 'node:crypto';
import { EventEmitter } from 'node:events';
import type { Etcd3, IKeyValue } from 'etcd3';
import { TributaryError } from 'tributary-protocol/errors.js';
import { withMetadataErrors } from './etcd-client.js';
import type { GuardedPut, PlanConflict, ReassignmentRequest } from './reassignment.js';
import { type Versioned, WatchedPrefix } from './watched-prefix.js';

export interface PlanMove {
  topic: string;
  partition: number;
  target: number[];
}

/** A topic definition a plan was computed from: its moves of that topic stand only while it is the one created at `createRevision`. */
export interface TopicGuard {
  topic: string;
  key: string;
  createRevision: number;
}

export interface ReassignmentPlan {
  id: string;
  moves: PlanMove[];
  throttle: number;
  requestedAt: number;
  guards: TopicGuard[];
  /** moves[0, expanded) have their requests stored. */
  expanded: number;
  /** The broker that stored it (the controller leaves it to that broker while it is registered and at work). */
  broker: number;
}

/**
 * etcd's default --max-txn-ops: it refuses a transaction with more compares, or more operations in either
 * branch, than this. So a reassignment is stored as one plan key, then expanded.
 */
export const MAX_TXN_OPS = 128;

/** Requests per expansion transaction: each takes a compare and a put, its topic a compare, the plan one more of each. */
const EXPAND_CHUNK = 60;
/** Rounds of a store or an expansion that lost a race before it gives up (something keeps changing). */
const ATTEMPTS = 8;

const pkey = (topic: string, partition: number) => `${topic}\u0000${partition}`;

function parsePlan(text: string): ReassignmentPlan | undefined {
  try {
    const p = JSON.parse(text) as ReassignmentPlan;
    const ok = p !== null && typeof p === 'object' && typeof p.id === 'string' && Array.isArray(p.moves) && Array.isArray(p.guards) && Number.isInteger(p.expanded);
    return ok ? p : undefined;
  } catch {
    return undefined;
  }
}

/** Where a plan's requests go: the request store's keys and cache (ReassignmentStore). */
export interface RequestKeys {
  readonly requestPrefix: string;
  keyOf(topic: string, partition: number): string;
  applyStored(topic: string, partition: number, request: ReassignmentRequest, revision: number): void;
}

/** The plans in etcd, cached by a watch. Events: 'changed' (id) when one is stored, progresses or goes. */
export class ReassignmentPlans {
  readonly events = new EventEmitter();
  private readonly records: WatchedPrefix<ReassignmentPlan>;
  private readonly claimsKey: string;

  constructor(
    private readonly client: Etcd3,
    prefix: string,
    private readonly requests: RequestKeys,
  ) {
    this.records = new WatchedPrefix(client, `${prefix}reassignment-plans/`, (text) => parsePlan(text));
    this.claimsKey = `${prefix}reassignment-claims`;
    this.records.events.on('put', (id: string) => this.events.emit('changed', id));
    this.records.events.on('delete', (id: string) => this.events.emit('changed', id));
  }

  start(): Promise<void> {
    return this.records.start();
  }

  close(): Promise<void> {
    return this.records.close();
  }

  list(): Array<Versioned<ReassignmentPlan>> {
    return this.records.values().map(([, e]) => e);
  }

  get(id: string): Versioned<ReassignmentPlan> | undefined {
    return this.records.get(id);
  }

  /** The moves of stored plans whose requests are not written yet, by partition (as this broker's cache has them). */
  pending(): Map<string, PlanMove> {
    const out = new Map<string, PlanMove>();
    for (const [, e] of this.records.each()) for (const m of e.value.moves.slice(e.value.expanded)) out.set(pkey(m.topic, m.partition), m);
    return out;
  }

  pendingMove(topic: string, partition: number): PlanMove | undefined {
    return this.pending().get(pkey(topic, partition));
  }

  /**
   * Stores a plan of `moves` in one transaction, if no partition of it has a request or is claimed by
   * another plan, the first guards (as many as fit) still hold and `also` (a definition put) is unchanged.
   * Resolves the plan stored, or what was in the way (nothing busy or changed: `also` changed).
   */
  async store(moves: PlanMove[], throttle: number, guards: TopicGuard[], broker: number, also?: GuardedPut): Promise<{ plan: Versioned<ReassignmentPlan> } | PlanConflict> {
    const plan: ReassignmentPlan = { id: randomBytes(8).toString('hex'), moves, throttle, requestedAt: Date.now(), guards, expanded: 0, broker };
    const key = this.records.prefix + plan.id;
    // The guards checked here are a refusal up front; each chunk's expansion checks its own again.
    const checked = guards.slice(0, MAX_TXN_OPS - 3);
    for (let attempt = 0; attempt < ATTEMPTS; attempt++) {
      // What is claimed now, and the claims key's revision, in one read (a transaction whose compare always holds).
      const read = await withMetadataErrors('create_reassignment', () =>
        this.client
          .if(this.claimsKey, 'Version', '>', -1)
          .then(this.client.get(this.claimsKey), this.client.getAll().prefix(this.requests.requestPrefix), this.client.getAll().prefix(this.records.prefix))
          .commit(),
      );
      const claimsRevision = Number(read.responses[0]!.response_range.kvs[0]?.mod_revision ?? 0);
      const busy = new Set(read.responses[1]!.response_range.kvs.map((kv) => kv.key.toString('utf8').slice(this.requests.requestPrefix.length)));
      for (const kv of read.responses[2]!.response_range.kvs) {
        const other = parsePlan(kv.value.toString('utf8'));
        for (const m of other?.moves.slice(other.expanded) ?? []) busy.add(`${m.topic}/${m.partition}`);
      }
      const inTheWay = moves.filter((m) => busy.has(`${m.topic}/${m.partition}`)).map((m) => ({ topic: m.topic, partition: m.partition }));
      if (inTheWay.length > 0) return { busy: inTheWay, changed: [] };
      const value = JSON.stringify(plan);
      const res = await withMetadataErrors('create_reassignment', () => {
        let txn = this.client.if(this.claimsKey, 'Mod', '==', claimsRevision);
        for (const g of checked) txn = txn.and(g.key, 'Create', '==', g.createRevision);
        if (also) txn = txn.and(also.key, 'Mod', '==', also.modRevision);
        return txn
          .then(this.client.put(key).value(value), this.client.put(this.claimsKey).value(plan.id), ...(also ? [this.client.put(also.key).value(also.value)] : []))
          .else(...checked.map((g) => this.client.get(g.key)), ...(also ? [this.client.get(also.key)] : []))
          .commit();
      });
      if (res.succeeded) {
        const revision = Number(res.header.revision);
        this.records.applyPut(plan.id, plan, revision, revision);
        also?.applied(revision);
        return { plan: this.records.get(plan.id) ?? { value: plan, modRevision: revision, createRevision: revision, lease: '0' } };
      }
      const changed = checked.filter((g, i) => Number(res.responses[i]?.response_range.kvs[0]?.create_revision ?? 0) !== g.createRevision).map((g) => g.key);
      if (changed.length > 0) return { busy: [], changed };
      const alsoKv = also && res.responses[checked.length]?.response_range.kvs[0];
      if (alsoKv && Number(alsoKv.mod_revision) !== also.modRevision) {
        also.raced(alsoKv);
        return { busy: [], changed: [] };
      }
      if (also && !alsoKv) return { busy: [], changed: [also.key] };
      // Only the claims moved (another plan stored meanwhile): check again against what is claimed now.
    }
    throw new TributaryError('metadata_unavailable', { operation: 'reassign', reason: 'other reassignments kept being stored meanwhile; nothing was stored' });
  }

  /**
   * Writes the requests of a stored plan not yet written, a chunk per transaction, and deletes the plan with
   * the last. Moves of a topic deleted or re-created since the plan was stored are dropped (as DELETE drops
   * a topic's requests); so is a move whose partition has a request of its own (only one written by hand
   * can be there). `afterChunk` runs after each chunk that leaves more to write. Safe to run on two brokers
   * at once: each chunk is written once, by whichever gets to the plan's revision first.
   */
  async expand(id: string, afterChunk?: () => void): Promise<void> {
    const key = this.records.prefix + id;
    let cur = this.records.get(id);
    // Each round writes a chunk, drops moves or finds another broker's chunk written: bounded by the plan's size.
    const rounds = cur ? 2 * Math.ceil(cur.value.moves.length / EXPAND_CHUNK) + ATTEMPTS : 0;
    for (let round = 0; cur && round < rounds; round++) {
      const plan = cur.value;
      const chunk = plan.moves.slice(plan.expanded, plan.expanded + EXPAND_CHUNK);
      const done = plan.expanded + chunk.length >= plan.moves.length;
      const next: ReassignmentPlan = { ...plan, expanded: plan.expanded + chunk.length };
      const topics = new Set(chunk.map((m) => m.topic));
      const guards = plan.guards.filter((g) => topics.has(g.topic));
      const keys = chunk.map((m) => this.requests.keyOf(m.topic, m.partition));
      const request = { throttle: plan.throttle, requestedAt: plan.requestedAt };
      const modRevision = cur.modRevision;
      const res = await withMetadataErrors('create_reassignment', () => {
        let txn = this.client.if(key, 'Mod', '==', modRevision);
        for (const k of keys) txn = txn.and(k, 'Create', '==', 0);
        for (const g of guards) txn = txn.and(g.key, 'Create', '==', g.createRevision);
        const puts = chunk.map((m, i) => this.client.put(keys[i]!).value(JSON.stringify({ target: m.target, ...request })));
        const last = done ? { request_delete_range: { key: Buffer.from(key) } } : this.client.put(key).value(JSON.stringify(next));
        return txn
          .then(...puts, last)
          .else(this.client.get(key), ...guards.map((g) => this.client.get(g.key)), ...keys.map((k) => this.client.get(k)))
          .commit();
      });
      const revision = Number(res.header.revision);
      if (res.succeeded) {
        for (const m of chunk) this.requests.applyStored(m.topic, m.partition, { target: m.target, ...request }, revision);
        if (done) {
          this.records.applyDelete(id, revision);
          return;
        }
        this.records.applyPut(id, next, revision, cur.createRevision);
        cur = this.records.get(id);
        afterChunk?.();
        continue;
      }
      const planKv = res.responses[0]!.response_range.kvs[0];
      if (!planKv) {
        this.records.applyDelete(id, revision); // finished by another broker
        return;
      }
      if (Number(planKv.mod_revision) !== modRevision) {
        this.records.applyKv(id, planKv); // another broker wrote a chunk: go on from there
        cur = this.records.get(id);
        continue;
      }
      const at = (i: number): IKeyValue | undefined => res.responses[i]?.response_range.kvs[0];
      const gone = new Set(guards.filter((g, i) => Number(at(1 + i)?.create_revision ?? 0) !== g.createRevision).map((g) => g.topic));
      const taken = new Set(chunk.filter((_, i) => at(1 + guards.length + i) !== undefined).map((m) => pkey(m.topic, m.partition)));
      const rest = plan.moves.slice(plan.expanded).filter((m) => !gone.has(m.topic) && !taken.has(pkey(m.topic, m.partition)));
      const dropped: ReassignmentPlan = { ...plan, moves: [...plan.moves.slice(0, plan.expanded), ...rest] };
      const rewrite = await withMetadataErrors('create_reassignment', () =>
        this.client.if(key, 'Mod', '==', modRevision).then(this.client.put(key).value(JSON.stringify(dropped))).else(this.client.get(key)).commit(),
      );
      if (rewrite.succeeded) this.records.applyPut(id, dropped, Number(rewrite.header.revision), cur.createRevision);
      else if (rewrite.responses[0]?.response_range.kvs[0]) this.records.applyKv(id, rewrite.responses[0].response_range.kvs[0]);
      else this.records.applyDelete(id, Number(rewrite.header.revision));
      cur = this.records.get(id);
    }
    if (cur) throw new TributaryError('metadata_unavailable', { operation: 'reassign', plan: id, reason: 'the plan kept changing while its requests were written; the controller finishes it' });
  }
}

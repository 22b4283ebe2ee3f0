/**
 * Moving replicas in cluster mode (docs/protocol.md "Reassignment"): REASSIGN, REASSIGN_CANCEL,
 * REASSIGN_THROTTLE, REASSIGNMENTS, DRAIN_BROKER, ALTER_REPLICATION_FACTOR (admin), and REPLICA_POSITIONS
 * (broker to broker, for the progress view). The handlers only check and store requests; the controller
 * carries them out (cluster/reassignment.ts).
 */
import { type Params, formatOk } from 'tributary-protocol/command.js';
import { TributaryError, invalidParam } from 'tributary-protocol/errors.js';
import type { ClusterNode } from '../cluster/cluster-node.js';
import { byTopicPartition } from '../cluster/partition-keys.js';
import type { PartitionStateEntry } from '../cluster/partition-state.js';
import { type GuardedPut, checkTarget, drainPlan, replicationFactorPlan } from '../cluster/reassignment.js';
import { failpoint } from '../common/failpoints.js';
import { type BrokerContext, type CommandSpec, type ConnectionContext, type Reply, json } from './command-context.js';

function cluster(b: BrokerContext, command: string): ClusterNode {
  if (!b.cluster) throw new TributaryError('unknown_command', { command, reason: 'this broker is not in cluster mode' });
  return b.cluster;
}

/** A plan's last transaction lost only its definition compare this often: something keeps changing it. */
const CHANGED_ATTEMPTS = 5;

/** At most this many bytes/s (1 TiB/s): anything larger is a typo. */
const MAX_THROTTLE = 2 ** 40;

function throttleParam(p: Params): number {
  return p.int('throttle', { min: 0, max: MAX_THROTTLE }) ?? 0;
}

function liveIds(node: ClusterNode): Set<number> {
  return new Set(node.liveBrokers().map((x) => x.id));
}

/** A comma-separated list of broker ids. */
function idList(text: string, param: string): number[] {
  const parts = text.split(',');
  if (!parts.every((x) => /^[0-9]{1,9}$/.test(x))) throw invalidParam(param, 'a comma-separated list of broker ids');
  return parts.map(Number);
}

/** One partition's new replicas, as asked. */
interface Move {
  topic: string;
  partition: number;
  target: number[];
}

/**
 * The checks every new reassignment passes, from this broker's copy of the cluster state: a state for
 * each partition, none already moving, a replica count acks=all can work with.
 */
function checkRequests(b: BrokerContext, node: ClusterNode, plan: Move[]): void {
  const busy: string[] = [];
  const pending = node.reassignments.plans.pending();
  for (const x of plan) {
    const s = node.states.get(x.topic, x.partition);
    if (!s) throw new TributaryError('topic_loading', { topic: x.topic, partition: x.partition, reason: 'no partition state yet' });
    if (s.value.reassign || node.reassignments.get(x.topic, x.partition) || pending.has(`${x.topic}\u0000${x.partition}`)) busy.push(`${x.topic}[${x.partition}]`);
    if (x.target.length < b.config.minInsyncReplicas) {
      throw invalidParam('replicas', `${x.topic}[${x.partition}]: ${x.target.length} replica(s) is fewer than min_insync_replicas (${b.config.minInsyncReplicas}): acks=all could never be answered`);
    }
  }
  if (busy.length > 0) throw new TributaryError('reassignment_in_progress', { partitions: busy.slice(0, 20).join(','), count: busy.length });
}

/**
 * A REASSIGN's entries, `<partition>:<ids>` of `topic` or `<topic>:<partition>:<ids>` of a plan, checked in
 * order against the topics and live brokers this broker knows: the first bad one is named.
 */
function parseMoves(b: BrokerContext, node: ClusterNode, text: string, param: 'assignments' | 'plan', topic?: string): Move[] {
  const live = liveIds(node);
  const seen = new Set<string>();
  const pattern = topic === undefined ? /^([^:]{1,300}):([0-9]{1,7}):(.+)$/ : /^()([0-9]{1,7}):(.+)$/;
  const moves = text.split(';').map((entry) => {
    const m = pattern.exec(entry);
    if (!m) throw invalidParam(param, `"${entry.slice(0, 50)}": expected ${topic === undefined ? '<topic>:' : ''}<partition>:<broker>,<broker>...`);
    return { topic: topic ?? m[1]!, partition: Number(m[2]), ids: m[3]! };
  });
  return moves.map((x) => {
    const where = `${x.topic}[${x.partition}]`;
    if (x.partition >= b.topics.get(x.topic).partitions.length) throw new TributaryError('partition_not_found', { topic: x.topic, partition: x.partition });
    if (seen.has(where)) throw invalidParam(param, `${where} given twice`);
    seen.add(where);
    const target = idList(x.ids, param);
    checkTarget(target, live, where);
    return { topic: x.topic, partition: x.partition, target };
  });
}

/**
 * Stores the moves (checked already) as one plan, all or nothing whatever their number, then writes its
 * requests (reassignment-plans.ts; docs/architecture.md "Reassignment"): refused if a partition got a
 * reassignment meanwhile or a topic was deleted or re-created since the check. `also`, when given (a
 * definition's new replication factor), is written with the plan if unchanged since it was read (asked
 * for again, and the plan tried again, when it changed meanwhile). Once the plan is stored, a broker dying
 * or etcd becoming unreachable leaves it for the controller to finish.
 */
async function storeMoves(node: ClusterNode, command: string, moves: Move[], throttle: number, also?: () => GuardedPut | undefined): Promise<void> {
  const guards = [...new Set(moves.map((x) => x.topic))].map((t) => {
    const g = node.store.topicGuard(t);
    if (!g) throw new TributaryError('topic_not_found', { topic: t });
    return { topic: t, ...g };
  });
  for (let attempt = 1; ; attempt++) {
    const put = also?.();
    const res = await node.reassignments.plans.store(moves, throttle, guards, node.brokerId, put);
    if ('plan' in res) {
      const id = res.plan.value.id;
      try {
        // Fault tests crash the broker after a chunk of the plan's requests (the controller finishes it).
        await node.reassignments.plans.expand(id, () => failpoint(`reassign.partly_stored:${command}`));
      } catch (err) {
        // Stored whole: the controller writes the rest (docs/operations.md "Adding, draining and moving").
        if (!(err instanceof TributaryError)) throw err;
        throw new TributaryError(err.code, { ...err.fields, plan: id, reason: `${String(err.fields.reason ?? err.code)}; the reassignment is stored whole and the controller carries it out` });
      }
      return;
    }
    if (res.busy.length > 0) throw new TributaryError('reassignment_in_progress', { partitions: res.busy.slice(0, 20).map((x) => `${x.topic}[${x.partition}]`).join(','), count: res.busy.length });
    // Only `also` changed (an ALTER_TOPIC or ADD_PARTITIONS meanwhile): again, on what etcd has now.
    if (put && res.changed.length === 0 && attempt < CHANGED_ATTEMPTS) continue;
    const topics = guards.filter((g) => res.changed.includes(g.key)).map((g) => g.topic);
    const reason = topics.length > 0 ? 'deleted or re-created while the reassignment was checked' : 'changed concurrently';
    throw new TributaryError('metadata_unavailable', { operation: 'reassign', topic: topics.join(','), reason: `${reason}; nothing was stored` });
  }
}

/**
 * REASSIGN topic=T assignments=0:1,2,3;1:2,3,4 [throttle=BYTES_PER_S], or REASSIGN plan=T:0:1,2,3;U:1:2,3,4
 * [throttle=...] across topics: all or nothing, whatever its size. Everything is checked before anything is
 * stored, then it is stored as one plan (storeMoves), so the controller carries out all of it or none.
 */
async function reassign(b: BrokerContext, _c: ConnectionContext, p: Params): Promise<Reply> {
  const node = cluster(b, 'REASSIGN');
  const planText = p.str('plan', { maxLength: 1_000_000 });
  let name: string | undefined;
  let moves: Move[];
  if (planText !== undefined) {
    if (p.str('topic') !== undefined || p.str('assignments') !== undefined) throw invalidParam('plan', 'takes no topic or assignments');
    moves = parseMoves(b, node, planText, 'plan');
  } else {
    name = p.reqStr('topic', { maxLength: 100_000 });
    moves = parseMoves(b, node, p.reqStr('assignments', { maxLength: 1_000_000 }), 'assignments', name);
  }
  const throttle = throttleParam(p);
  checkRequests(b, node, moves);
  await storeMoves(node, 'REASSIGN', moves, throttle);
  if (name !== undefined) return formatOk({ topic: name, partitions: moves.map((x) => x.partition).join(','), throttle });
  return formatOk({ partitions: moves.map((x) => `${x.topic}[${x.partition}]`).join(','), count: moves.length, throttle });
}

/**
 * The requests a cancel or throttle change applies to: one topic, one partition of it, or all. A stored
 * plan with moves of them not written yet (its broker died, or is still writing it) is finished first, so
 * none of its moves is written after the change and escapes it (the expansion is safe on any broker).
 */
async function selected(b: BrokerContext, node: ClusterNode, p: Params) {
  const topic = p.str('topic', { maxLength: 100_000 });
  const partition = p.int('partition', { min: 0, max: 1_000_000 });
  if (partition !== undefined && topic === undefined) throw invalidParam('partition', 'needs topic');
  if (topic !== undefined) b.topics.get(topic);
  const mine = (m: { topic: string; partition: number }) => (topic === undefined || m.topic === topic) && (partition === undefined || m.partition === partition);
  for (const e of node.reassignments.plans.list()) {
    if (e.value.moves.slice(e.value.expanded).some(mine)) await node.reassignments.plans.expand(e.value.id);
  }
  return node.reassignments.list(topic).filter((e) => partition === undefined || e.partition === partition);
}

/** REASSIGN_CANCEL [topic=T [partition=N]]: back to the original replicas (nothing if none in progress). */
async function cancel(b: BrokerContext, _c: ConnectionContext, p: Params): Promise<Reply> {
  const node = cluster(b, 'REASSIGN_CANCEL');
  const entries = await selected(b, node, p);
  if (entries.length === 0) throw new TributaryError('no_reassignment', { ...(p.str('topic') ? { topic: p.str('topic')! } : {}) });
  const done: string[] = [];
  for (const first of entries) {
    // A lost race (the controller finishing it, a throttle change) is tried again on what is there now.
    for (let e = node.reassignments.get(first.topic, first.partition), n = 0; e && n < 3; e = node.reassignments.get(first.topic, first.partition), n++) {
      if (e.value.cancel || (await node.reassignments.update(e.topic, e.partition, e.modRevision, { ...e.value, cancel: true }))) {
        done.push(`${e.topic}[${e.partition}]`);
        break;
      }
    }
  }
  // Every one of them ended (completed or cancelled) before this cancel was written: nothing was cancelled.
  if (done.length === 0) throw new TributaryError('no_reassignment', { ...(p.str('topic') ? { topic: p.str('topic')! } : {}), reason: 'it ended before the cancel was written' });
  return formatOk({ cancelled: done.join(','), count: done.length });
}

/** REASSIGN_THROTTLE throttle=BYTES_PER_S [topic=T [partition=N]]: a new throttle for reassignments in progress (0: none). */
async function setThrottle(b: BrokerContext, _c: ConnectionContext, p: Params): Promise<Reply> {
  const node = cluster(b, 'REASSIGN_THROTTLE');
  const throttle = p.reqInt('throttle', { min: 0, max: MAX_THROTTLE });
  const entries = await selected(b, node, p);
  if (entries.length === 0) throw new TributaryError('no_reassignment', {});
  let n = 0;
  for (const e of entries) if (!e.value.cancel && (await node.reassignments.update(e.topic, e.partition, e.modRevision, { ...e.value, throttle }))) n++;
  return formatOk({ throttle, count: n });
}

/** DRAIN_BROKER broker=N [throttle=BYTES_PER_S]: every replica of broker N moves to the other live brokers, balanced. */
async function drain(b: BrokerContext, _c: ConnectionContext, p: Params): Promise<Reply> {
  const node = cluster(b, 'DRAIN_BROKER');
  const broker = p.reqInt('broker', { min: 0, max: 1_000_000_000 });
  const throttle = throttleParam(p);
  const states = node.states.list();
  const live = [...liveIds(node)];
  if (!live.includes(broker) && !states.some((e) => e.value.replicas.includes(broker))) {
    throw invalidParam('broker', `broker ${broker} is neither registered nor a replica of any partition`);
  }
  const plan = drainPlan(states, broker, live);
  if (plan.length > 0) {
    checkRequests(b, node, plan);
    await storeMoves(node, 'DRAIN_BROKER', plan, throttle);
  }
  const leading = states.filter((e) => e.value.leader === broker).length;
  return formatOk({ broker, partitions: plan.length, leading, throttle });
}

/** ALTER_REPLICATION_FACTOR topic=T replication_factor=N [throttle=BYTES_PER_S]: every partition of T to N replicas. */
async function alterReplicationFactor(b: BrokerContext, _c: ConnectionContext, p: Params): Promise<Reply> {
  const node = cluster(b, 'ALTER_REPLICATION_FACTOR');
  const name = p.reqStr('topic', { maxLength: 100_000 });
  const rf = p.reqInt('replication_factor', { min: 1, max: 1000 });
  const throttle = throttleParam(p);
  b.topics.get(name);
  const states = node.states.list();
  const plan = replicationFactorPlan(states, name, rf, [...liveIds(node)]);
  if (plan.length > 0) {
    checkRequests(b, node, plan);
    // The plan and the definition's new factor (which partitions added later get) in one transaction: a
    // broker dying, or etcd becoming unreachable, cannot leave the moves under the old factor, or some moved.
    await storeMoves(node, 'ALTER_REPLICATION_FACTOR', plan, throttle, () => node.store.replicationFactorPut(name, rf));
  } else {
    if (rf < b.config.minInsyncReplicas) throw invalidParam('replication_factor', `fewer than min_insync_replicas (${b.config.minInsyncReplicas})`);
    await node.store.setReplicationFactor(name, rf);
  }
  // Stored: a broker dying here leaves the change whole (the admin-operations fault test crashes it here).
  failpoint(`topic.rf.definition:${name}`);
  return formatOk({ topic: name, replication_factor: rf, partitions: plan.map((x) => x.partition).join(','), throttle });
}

interface Positions {
  partition: number;
  leader_log_end: number;
  followers: Array<{ id: number; offset: number }>;
}

/** As leader, each follower's log end as of its last fetch, for those of `partitions` this broker leads. */
function localPositions(node: ClusterNode, topic: string, partitions: ReadonlySet<number>): Positions[] {
  return node.replicas
    .led()
    .filter((x) => x.topic === topic && partitions.has(x.partition))
    .map((x) => ({ partition: x.partition, leader_log_end: x.logEnd, followers: x.followers.map((f) => ({ id: f.id, offset: f.offset })) }));
}

/** REPLICA_POSITIONS topic=T partitions=0,1: localPositions for another broker's progress view (broker to broker). */
function replicaPositions(b: BrokerContext, _c: ConnectionContext, p: Params): Reply {
  const node = cluster(b, 'REPLICA_POSITIONS');
  const topic = p.reqStr('topic', { maxLength: 100_000 });
  const partitions = p
    .reqStr('partitions', { maxLength: 100_000 })
    .split(',')
    .map((x) => {
      if (!/^[0-9]{1,7}$/.test(x)) throw invalidParam('partitions', 'a comma-separated list of partition numbers');
      return Number(x);
    });
  return json({ topic, partitions: localPositions(node, topic, new Set(partitions)) });
}

/** Follower positions of partitions, asked of their leaders (this broker's own directly); missing when a leader cannot say. */
async function positionsOf(b: BrokerContext, node: ClusterNode, entries: PartitionStateEntry[]): Promise<Map<string, Positions>> {
  const out = new Map<string, Positions>();
  const groups = new Map<string, { leader: number; topic: string; partitions: number[] }>();
  for (const e of entries) {
    const k = `${e.value.leader}\u0000${e.topic}`;
    const g = groups.get(k) ?? { leader: e.value.leader, topic: e.topic, partitions: [] };
    g.partitions.push(e.partition);
    groups.set(k, g);
  }
  await Promise.all(
    [...groups.values()].map(async (g) => {
      if (g.leader < 0) return;
      let found: Positions[];
      try {
        if (g.leader === b.brokerId) found = localPositions(node, g.topic, new Set(g.partitions));
        else {
          const address = node.leaderAddress(g.topic, g.partitions[0]!)?.advertisedAddress;
          if (!address) return;
          const conn = await node.peer(address);
          found = (JSON.parse(await conn.command('REPLICA_POSITIONS', { topic: g.topic, partitions: g.partitions.join(',') })) as { partitions: Positions[] }).partitions;
        }
      } catch {
        return; // the view goes without positions for these partitions
      }
      for (const x of found) out.set(`${g.topic}\u0000${x.partition}`, x);
    }),
  );
  return out;
}

/**
 * REASSIGNMENTS [topic=T]: every reassignment in progress (JSON): target, the replicas being added and
 * removed, its phase and throttle, and how far each replica being added is behind the leader's log end.
 */
async function reassignments(b: BrokerContext, _c: ConnectionContext, p: Params): Promise<Reply> {
  const node = cluster(b, 'REASSIGNMENTS');
  const topic = p.str('topic', { maxLength: 100_000 });
  if (topic !== undefined) b.topics.get(topic);
  const keys = new Map<string, { topic: string; partition: number }>();
  for (const e of node.reassignments.list(topic)) keys.set(`${e.topic}\u0000${e.partition}`, e);
  for (const e of node.states.list(topic)) if (e.value.reassign) keys.set(`${e.topic}\u0000${e.partition}`, e);
  // Moves of a stored plan whose requests are not written yet (reassignment-plans.ts): requested too.
  const pending = node.reassignments.plans.pending();
  for (const [k, m] of pending) if (topic === undefined || m.topic === topic) keys.set(k, m);
  const entries = [...keys.values()]
    .map((k) => node.states.get(k.topic, k.partition))
    .filter((e): e is PartitionStateEntry => e !== undefined)
    .sort(byTopicPartition);
  const positions = await positionsOf(b, node, entries.filter((e) => e.value.reassign));
  const list = entries.map((e) => {
    const s = e.value;
    const req = node.reassignments.get(e.topic, e.partition)?.value;
    const r = s.reassign;
    const pos = positions.get(`${e.topic}\u0000${e.partition}`);
    const phase = req?.cancel ? 'cancelling' : !r ? 'requested' : r.target.every((id) => s.isr.includes(id)) ? 'completing' : 'catching_up';
    return {
      topic: e.topic,
      partition: e.partition,
      phase,
      target: r?.target ?? req?.target ?? pending.get(`${e.topic}\u0000${e.partition}`)?.target ?? s.replicas,
      replicas: s.replicas,
      adding: r?.adding ?? [],
      removing: r?.removing ?? [],
      isr: s.isr,
      leader: s.leader,
      leader_epoch: s.leaderEpoch,
      throttle: req?.throttle ?? r?.throttle ?? 0,
      leader_log_end: pos?.leader_log_end ?? null,
      // Offsets behind the leader's log end, per replica being added (null: not known yet).
      behind: (r?.adding ?? []).map((id) => {
        const f = pos?.followers.find((x) => x.id === id);
        return { id, offset: f && f.offset >= 0 ? f.offset : null, behind: f && f.offset >= 0 && pos ? Math.max(0, pos.leader_log_end - f.offset) : null, in_sync: s.isr.includes(id) };
      }),
    };
  });
  return json({ count: list.length, reassignments: list });
}

export const REASSIGN_COMMANDS: Record<string, CommandSpec> = {
  REASSIGN: { handler: reassign, params: ['assignments', 'plan', 'throttle', 'topic'] },
  REASSIGN_CANCEL: { handler: cancel, params: ['partition', 'topic'] },
  REASSIGN_THROTTLE: { handler: setThrottle, params: ['partition', 'throttle', 'topic'] },
  REASSIGNMENTS: { handler: reassignments, params: ['topic'] },
  DRAIN_BROKER: { handler: drain, params: ['broker', 'throttle'] },
  ALTER_REPLICATION_FACTOR: { handler: alterReplicationFactor, params: ['replication_factor', 'throttle', 'topic'] },
  REPLICA_POSITIONS: { handler: replicaPositions, params: ['partitions', 'topic'] },
};

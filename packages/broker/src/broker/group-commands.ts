import { type Params, formatOk } from 'tributary-protocol/command.js';
import { TributaryError, invalidParam } from 'tributary-protocol/errors.js';
import { OFFSETS_TOPIC } from '../coordinator/group-log.js';
import { parseAddress } from 'tributary-protocol/address.js';
import { TXN_STATE_TOPIC } from '../txn/txn-log.js';
import type { MemberView } from '../coordinator/group-coordinator.js';
import type { OffsetEntry } from '../coordinator/offset-store.js';
import { decodeAssignment } from '../kafka/protocol/consumer-protocol.js';
import { type DecodeBudget, decodeBudget } from '../kafka/protocol/reader.js';
import type { KafkaStruct } from '../kafka/protocol/schema.js';
import type { BrokerContext, CommandSpec, ConnectionContext } from './command-context.js';
import { hiddenGroup } from '../kafka/group-visibility.js';

const MAX_ID = 100_000;
const GENERATION = { min: 0, max: 2 ** 31 - 1 };

function assignments(ps: number[]): string {
  return `[${ps.join(',')}]`;
}

function memberReply(v: MemberView): string {
  const fields: Record<string, string | number> = {
    generation: v.generation,
    member: v.memberId,
    leader: v.leader,
    assignments: assignments(v.assignments),
  };
  if (v.protocol === 'client') fields.protocol = 'client';
  if (v.reset) fields.reset = assignments(v.reset);
  if (v.members) fields.members = v.members.map((m) => `${m.memberId}:${m.owned.join(',')}`).join(';');
  return formatOk(fields);
}

/**
 * The coordinator of a group or transactional id: standalone, this broker; the partition (of
 * `__consumer_offsets` or `__transaction_state`) tells where its state lives.
 */
function findCoordinator(b: BrokerContext, _c: ConnectionContext, p: Params): string {
  const group = p.str('group', { maxLength: MAX_ID });
  const txn = p.str('transactional_id', { maxLength: MAX_ID });
  if ((group === undefined) === (txn === undefined)) throw invalidParam('group', 'give exactly one of group or transactional_id');
  const key = (group ?? txn)!;
  if (b.cluster) {
    // Any broker answers: the coordinator is the leader of the key's internal partition.
    const topic = group !== undefined ? OFFSETS_TOPIC : TXN_STATE_TOPIC;
    if (!b.topics.tryGet(topic)) throw new TributaryError('COORDINATOR_LOADING', { reason: `the cluster has not created ${topic} yet` });
    const partition = group !== undefined ? b.coordinator.partitionFor(key) : b.transactions.partitionFor(key);
    const leader = b.cluster.leaderAddress(topic, partition);
    if (!leader) throw new TributaryError('COORDINATOR_LOADING', { reason: `${topic}[${partition}] has no leader` });
    const { host, port } = parseAddress(leader.advertisedAddress);
    return formatOk({ coordinator_id: leader.id, host, port, partition });
  }
  return formatOk({
    coordinator_id: b.brokerId,
    host: b.advertised.host,
    port: b.advertised.port,
    partition: group !== undefined ? b.coordinator.partitionFor(key) : b.transactions.partitionFor(key),
  });
}

/**
 * A request that waits (a JOIN for its generation, a SYNC for the leader's plan, a long-poll HEARTBEAT) is held
 * to the rules in force when its wait ends, as a long-poll CONSUME is: a principal a SIGHUP withdrew from the
 * group meanwhile is refused, rather than answered with a member, an assignment or a refreshed session.
 */
function recheck(b: BrokerContext, c: ConnectionContext, command: 'JOIN_GROUP' | 'SYNC_GROUP' | 'HEARTBEAT', p: Params): () => void {
  return () => {
    const refused = b.security?.authorize(command, c, p.line);
    if (refused) throw refused;
  };
}

async function joinGroup(b: BrokerContext, c: ConnectionContext, p: Params): Promise<string> {
  const view = await b.coordinator.join({
    topic: p.reqStr('topic', { maxLength: MAX_ID }),
    group: p.reqStr('group', { maxLength: MAX_ID, allowEmpty: true }),
    member: p.reqStr('member', { maxLength: MAX_ID, allowEmpty: true }),
    generation: p.int('generation', GENERATION),
    sessionTimeoutMs: p.int('session_timeout_ms', { min: 1, max: 3_600_000 }),
    rebalanceTimeoutMs: p.int('rebalance_timeout_ms', { min: 1, max: 3_600_000 }),
    assignor: p.str('assignor', { maxLength: 64 }),
    instance: p.str('instance', { maxLength: MAX_ID, allowEmpty: true }),
    protocol: p.oneOf('protocol', ['server', 'client'] as const),
    host: c.remote,
    signal: c.closedSignal,
    afterWait: recheck(b, c, 'JOIN_GROUP', p),
  });
  return memberReply(view);
}

/**
 * The longest plan a legal SYNC_GROUP needs: each of the topic's partitions (at most --max-partitions) once,
 * each in a part of its own, `<member id>:<p>;`, where a member id is a client id (at most 255 characters),
 * `-` and a 36-character UUID, and a partition number below 100,000 has at most 5 digits: 299 characters a
 * partition. A member given nothing need not be named (it gets nothing).
 */
export function maxPlanLength(maxPartitions: number): number {
  return maxPartitions * (255 + 1 + 36 + 1 + 5 + 1);
}

async function syncGroup(b: BrokerContext, c: ConnectionContext, p: Params): Promise<string> {
  const view = await b.coordinator.sync({
    topic: p.reqStr('topic', { maxLength: MAX_ID }),
    group: p.reqStr('group', { maxLength: MAX_ID, allowEmpty: true }),
    member: p.reqStr('member', { maxLength: MAX_ID, allowEmpty: true }),
    generation: p.reqInt('generation', GENERATION),
    plan: p.str('plan', { maxLength: maxPlanLength(b.config.maxPartitions), allowEmpty: true }),
    afterWait: recheck(b, c, 'SYNC_GROUP', p),
  });
  return memberReply(view);
}

async function heartbeat(b: BrokerContext, c: ConnectionContext, p: Params): Promise<string> {
  const res = await b.coordinator.heartbeat({
    topic: p.reqStr('topic', { maxLength: MAX_ID }),
    group: p.reqStr('group', { maxLength: MAX_ID, allowEmpty: true }),
    member: p.reqStr('member', { maxLength: MAX_ID, allowEmpty: true }),
    generation: p.reqInt('generation', GENERATION),
    waitMs: p.int('wait_ms', { min: 0, max: 3_600_000 }),
    afterWait: recheck(b, c, 'HEARTBEAT', p),
  });
  return formatOk({ member: res.memberId, generation: res.generation });
}

async function leaveGroup(b: BrokerContext, _c: ConnectionContext, p: Params): Promise<string> {
  const group = p.reqStr('group', { maxLength: MAX_ID, allowEmpty: true });
  const member = p.reqStr('member', { maxLength: MAX_ID, allowEmpty: true });
  await b.coordinator.leave({ topic: p.reqStr('topic', { maxLength: MAX_ID }), group, member });
  return formatOk({ group, member, left: true });
}

function fetchOffset(b: BrokerContext, _c: ConnectionContext, p: Params): string {
  const res = b.coordinator.fetchOffset(
    p.reqStr('group', { maxLength: MAX_ID, allowEmpty: true }),
    p.reqStr('topic', { maxLength: MAX_ID }),
    p.reqInt('partition', { min: 0, max: 1_000_000 }),
  );
  return formatOk({ offset: res.offset, committed: res.committed });
}

async function commitOffset(b: BrokerContext, _c: ConnectionContext, p: Params): Promise<string> {
  await b.coordinator.commit({
    topic: p.reqStr('topic', { maxLength: MAX_ID }),
    group: p.reqStr('group', { maxLength: MAX_ID, allowEmpty: true }),
    member: p.reqStr('member', { maxLength: MAX_ID, allowEmpty: true }),
    generation: p.reqInt('generation', GENERATION),
    entries: [{ partition: p.reqInt('partition', { min: 0, max: 1_000_000 }), offset: p.reqInt('offset', { min: 0 }) }],
  });
  return 'OK';
}

/**
 * The most entries one offset list may hold: a topic has at most 100,000 partitions (--max-partitions'
 * ceiling), and a legal list names each partition once.
 */
export const MAX_OFFSET_ENTRIES = 100_000;

/**
 * `P0:12,P3:40` (one or more positional tokens): partition and next offset per entry. At most `max` entries
 * (and as many empty items between commas): the tokens are scanned in place and refused at the first item
 * past it, as one token may hold millions (13M entries in 64 MiB once took 9.7 s and 2 GB to split).
 */
export function parseBatchEntries(tokens: string[], max = MAX_OFFSET_ENTRIES): OffsetEntry[] {
  const entries: OffsetEntry[] = [];
  let empty = 0;
  for (const token of tokens) {
    for (let from = 0; from <= token.length; ) {
      let to = token.indexOf(',', from);
      if (to < 0) to = token.length;
      if (to === from) {
        if (++empty > max) throw invalidParam('entries', `more than ${max} empty entries`);
      } else {
        if (entries.length >= max) throw invalidParam('entries', `more than ${max} entries${max < MAX_OFFSET_ENTRIES ? ` (the topic has ${max} partitions)` : ''}`);
        entries.push(parseEntry(token.slice(from, to)));
      }
      from = to + 1;
    }
  }
  if (entries.length === 0) throw invalidParam('entries', 'expected P<partition>:<offset>,...');
  return entries;
}

function parseEntry(item: string): OffsetEntry {
  // 26 characters hold the longest well-formed entry: the pattern is not run over a long item.
  const m = item.length <= 26 ? /^P(\d{1,7}):(\d{1,16})$/.exec(item) : null;
  if (!m) throw invalidParam('entries', `malformed entry ${item.length > 40 ? `${item.slice(0, 40)}...` : item}`);
  const offset = Number(m[2]);
  if (!Number.isSafeInteger(offset)) throw invalidParam('entries', `offset beyond 2^53 in ${item}`);
  return { partition: Number(m[1]), offset };
}

async function batchCommit(b: BrokerContext, _c: ConnectionContext, p: Params): Promise<string> {
  // The named parameters first, then the entries: a legal list names each of the topic's partitions once.
  const topic = p.reqStr('topic', { maxLength: MAX_ID });
  const group = p.reqStr('group', { maxLength: MAX_ID, allowEmpty: true });
  const member = p.reqStr('member', { maxLength: MAX_ID, allowEmpty: true });
  const generation = p.reqInt('generation', GENERATION);
  const partitions = b.topics.tryGet(topic)?.partitions.length;
  const entries = parseBatchEntries(p.line.positional, partitions === undefined ? MAX_OFFSET_ENTRIES : Math.max(1, Math.min(partitions, MAX_OFFSET_ENTRIES)));
  const n = await b.coordinator.commit({ topic, group, member, generation, entries });
  return formatOk({ batched: n });
}

/** Whether `c` sees the group (security.ts `groupVisible`); every group in a context without security (unit tests). */
function visible(b: BrokerContext, c: ConnectionContext, group: string): boolean {
  return b.security?.groupVisible(c, b.coordinator.classic, group) ?? true;
}

async function groupStatus(b: BrokerContext, c: ConnectionContext, p: Params): Promise<string> {
  const group = p.reqStr('group', { maxLength: MAX_ID, allowEmpty: true });
  // Refused as DESCRIBE of a topic it may not describe is (docs/security.md, "Groups and topic ACLs").
  if (!visible(b, c, group)) throw hiddenGroup('GROUP_STATUS', group, c.principal);
  const status = await b.coordinator.statusWithLogEnds(group);
  if (status.kind === 'kafka') readKafkaAssignments(status, status.protocol === 'consumer');
  return JSON.stringify(status);
}

/**
 * How much of a GROUP_STATUS a Kafka group's assignments may take, in characters: the `assigned` strings
 * and the raw `assignment_bytes` together. Members' bytes are their leader's, and one partition's 4 bytes
 * named a 32,000-character topic: 272 KB of them made a 2 GB reply the broker could not build.
 */
export const MAX_STATUS_ASSIGNMENT_CHARS = 8 * 1024 * 1024;
/** Kafka's longest topic name (and more than a topic here may have): a longer one names no topic. */
const MAX_KAFKA_TOPIC_NAME = 249;
/** A topic has at most 100,000 partitions (--max-partitions' ceiling). */
const MAX_TOPIC_PARTITIONS = 100_000;

/**
 * A Kafka group's members' assignments as `topic:partition` (its GROUP_STATUS carries the raw bytes):
 * readable when the group speaks the consumer protocol, within the bounds of a legal assignment and what is
 * left of the status's budget; else the raw bytes when they fit, else only their size (docs/kafka.md, "Bad input").
 */
function readKafkaAssignments(status: Record<string, unknown>, consumerProtocol: boolean): void {
  // One decode budget for the whole group: the leader wrote every member's bytes (up to a frame's worth).
  const budget = decodeBudget();
  let left = MAX_STATUS_ASSIGNMENT_CHARS;
  for (const m of status.members as Array<Record<string, unknown>>) {
    const base64 = m.assignment_bytes as string;
    const readable = consumerProtocol ? readAssignment(Buffer.from(base64, 'base64'), budget, left) : undefined;
    if (readable) {
      m.assigned = readable.assigned;
      delete m.assignment_bytes;
      left -= readable.chars;
    } else if (base64.length + 3 <= left) {
      left -= base64.length + 3;
    } else {
      delete m.assignment_bytes;
      m.assignment_size = Buffer.byteLength(base64, 'base64');
    }
  }
}

/** The `topic:partition` strings of one consumer-protocol assignment and an upper bound of their characters in the reply; undefined when it does not parse, names what no topic can be, or does not fit `left`. */
function readAssignment(bytes: Buffer, budget: DecodeBudget, left: number): { assigned: string[]; chars: number } | undefined {
  let topics: KafkaStruct[];
  try {
    topics = decodeAssignment(bytes, budget).value.assignedPartitions as KafkaStruct[];
  } catch {
    return undefined; // not the consumer protocol's layout after all
  }
  let chars = 0;
  for (const t of topics) {
    const name = t.topic as string;
    const ps = t.partitions as number[];
    if (name.length > MAX_KAFKA_TOPIC_NAME || ps.length > MAX_TOPIC_PARTITIONS) return undefined;
    // `"<topic>:<int32>",`: at most 11 characters of digits and sign, 4 of quotes, colon and comma.
    chars += ps.length * (name.length + 15);
    if (chars > left) return undefined;
  }
  return { assigned: topics.flatMap((t) => (t.partitions as number[]).map((x) => `${t.topic as string}:${x}`)), chars };
}

function listGroups(b: BrokerContext, c: ConnectionContext): string {
  const groups = b.coordinator.listGroups().filter((g) => visible(b, c, g));
  return formatOk({ count: groups.length, groups: groups.join(',') });
}

async function deleteGroup(b: BrokerContext, _c: ConnectionContext, p: Params): Promise<string> {
  const group = p.reqStr('group', { maxLength: MAX_ID, allowEmpty: true });
  await b.coordinator.deleteGroup(group);
  return formatOk({ group, deleted: true });
}

async function resetOffsets(b: BrokerContext, c: ConnectionContext, p: Params): Promise<string> {
  const to = p.oneOf('to', ['earliest', 'latest', 'offset', 'timestamp'] as const);
  if (!to) throw invalidParam('to', 'required: earliest, latest, offset or timestamp');
  let value: number | undefined;
  if (to === 'offset') value = p.reqInt('offset', { min: 0 });
  if (to === 'timestamp') value = p.reqInt('timestamp', { min: 0 });
  // Refused rather than ignored, as the HTTP API refuses them.
  for (const k of ['offset', 'timestamp'] as const) if (k !== to && p.has(k)) throw invalidParam(k, `only with to=${k}`);
  const group = p.reqStr('group', { maxLength: MAX_ID, allowEmpty: true });
  const topic = p.reqStr('topic', { maxLength: MAX_ID });
  const dryRun = p.bool('dry_run') ?? false;
  const entries = await b.coordinator.resetOffsets({ group, topic, partition: p.int('partition', { min: 0, max: 1_000_000 }), to, value, dryRun, by: c.principal });
  return formatOk({ group, topic, reset: dryRun ? 0 : entries.length, dry_run: dryRun, offsets: entries.map((e) => `P${e.partition}:${e.offset}`).join(',') });
}

/**
 * Brokers only: a member's standing for fenced reads at a partition leader that does not coordinate the
 * group (cluster/member-leases.ts). Refused as the member's commits would be; `session_left_ms` bounds how
 * long the leader may trust the answer.
 */
function memberLease(b: BrokerContext, _c: ConnectionContext, p: Params): string {
  const group = p.reqStr('group', { maxLength: MAX_ID });
  const topic = p.reqStr('topic', { maxLength: MAX_ID });
  const member = p.reqStr('member', { maxLength: MAX_ID });
  const { standing: s, sessionLeftMs } = b.coordinator.memberStanding(group, topic, member);
  const parts = b.topics.get(topic).partitions.map((x) => x.id);
  return formatOk({
    group,
    member: s.memberId,
    generation: s.generation,
    group_generation: s.groupGeneration,
    owned: assignments(parts.filter((x) => s.owns(x))),
    reset: assignments(parts.filter((x) => s.isReset(x))),
    session_left_ms: Math.floor(sessionLeftMs),
  });
}

export const GROUP_COMMANDS: Record<string, CommandSpec> = {
  FIND_COORDINATOR: { handler: findCoordinator, params: ['group', 'transactional_id'] },
  JOIN_GROUP: { handler: joinGroup, params: ['assignor', 'generation', 'group', 'instance', 'member', 'protocol', 'rebalance_timeout_ms', 'session_timeout_ms', 'topic'], pipelined: true },
  SYNC_GROUP: { handler: syncGroup, params: ['generation', 'group', 'member', 'plan', 'topic'], pipelined: true },
  HEARTBEAT: { handler: heartbeat, params: ['generation', 'group', 'member', 'topic', 'wait_ms'], pipelined: true },
  LEAVE_GROUP: { handler: leaveGroup, params: ['group', 'member', 'topic'] },
  FETCH_OFFSET: { handler: fetchOffset, params: ['group', 'partition', 'topic'] },
  COMMIT_OFFSET: { handler: commitOffset, params: ['generation', 'group', 'member', 'offset', 'partition', 'topic'], pipelined: true },
  BATCH_COMMIT: { handler: batchCommit, params: ['generation', 'group', 'member', 'topic'], positional: true, pipelined: true },
  GROUP_STATUS: { handler: groupStatus, params: ['group'] },
  LIST_GROUPS: { handler: listGroups, params: [] },
  DELETE_GROUP: { handler: deleteGroup, params: ['group'] },
  MEMBER_LEASE: { handler: memberLease, params: ['group', 'member', 'topic'] },
  RESET_OFFSETS: { handler: resetOffsets, params: ['dry_run', 'group', 'offset', 'partition', 'timestamp', 'to', 'topic'] },
};

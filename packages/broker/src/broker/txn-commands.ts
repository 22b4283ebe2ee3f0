import { type Params, formatOk } from 'tributary-protocol/command.js';
import { TributaryError, invalidParam } from 'tributary-protocol/errors.js';
import type { BrokerContext, CommandSpec, ConnectionContext } from './command-context.js';
import { leaderGate, replicated } from './produce-commands.js';
import { appendNext } from '../txn/txn-targets.js';
import { OFFSETS_TOPIC } from '../coordinator/group-log.js';
import { parseBatchEntries } from './group-commands.js';

const MAX_ID = 100_000;
const EPOCH = { min: 0, max: 2 ** 31 - 1 };

function txnId(p: Params): string {
  return p.reqStr('transactional_id', { maxLength: 255 });
}

function producer(p: Params): { producerId: string; epoch: number } {
  return { producerId: p.reqStr('producerId', { maxLength: 255 }), epoch: p.reqInt('epoch', EPOCH) };
}

async function initProducerId(b: BrokerContext, _c: ConnectionContext, p: Params): Promise<string> {
  const id = txnId(p);
  const timeout = p.int('transaction_timeout_ms', { min: 1, max: 2 ** 31 - 1 });
  const r = await b.transactions.initProducerId(id, timeout);
  return formatOk({ transactional_id: id, producerId: r.producerId, epoch: r.epoch });
}

async function beginTxn(b: BrokerContext, _c: ConnectionContext, p: Params): Promise<string> {
  const id = txnId(p);
  const { producerId, epoch } = producer(p);
  await b.transactions.begin(id, producerId, epoch);
  return formatOk({ transactional_id: id, state: 'open' });
}

async function txnPublish(b: BrokerContext, _c: ConnectionContext, p: Params): Promise<string> {
  const id = txnId(p);
  const { producerId, epoch } = producer(p);
  const topic = p.reqStr('topic', { maxLength: MAX_ID });
  if (topic.startsWith('__')) throw new TributaryError('invalid_topic_name', { topic, reason: 'internal topics are written by the broker only' });
  const explicit = p.int('partition', { min: 0, max: 1_000_000 });
  const keyStr = p.str('key', { maxLength: 65_535, allowEmpty: true });
  // Sequence numbers count a transaction's records from 1.
  const seqNum = p.reqInt('seqNum', { min: 1 });
  const message = p.str('message', { required: true, allowEmpty: true }) as string;
  const key = keyStr ? Buffer.from(keyStr, 'utf8') : null;
  const value = Buffer.from(message, 'utf8');
  const size = value.length + (key?.length ?? 0);
  if (size > b.config.maxRecordBytes) throw new TributaryError('record_too_large', { size, max: b.config.maxRecordBytes });
  const r = await b.transactions.publish(id, producerId, epoch, topic, explicit, { key, value }, seqNum);
  if (!r.duplicate) {
    b.metrics.recordsIn.inc({ topic }, 1);
    b.metrics.bytesIn.inc({ topic }, value.length);
  }
  return formatOk({ transactional_id: id, topic, partition: r.partition, offset: r.offset, ...(r.duplicate ? { duplicate: true } : {}) });
}

async function sendOffsetsToTxn(b: BrokerContext, _c: ConnectionContext, p: Params): Promise<string> {
  const id = txnId(p);
  const { producerId, epoch } = producer(p);
  const entries = parseBatchEntries(p.line.positional);
  const n = await b.transactions.sendOffsets(id, producerId, epoch, {
    topic: p.reqStr('topic', { maxLength: MAX_ID }),
    group: p.reqStr('group', { maxLength: MAX_ID }),
    member: p.reqStr('member', { maxLength: MAX_ID }),
    generation: p.reqInt('generation', { min: 0, max: 2 ** 31 - 1 }),
    entries,
  });
  return formatOk({ transactional_id: id, staged_offsets: n });
}

async function endTxn(b: BrokerContext, _c: ConnectionContext, p: Params): Promise<string> {
  const id = txnId(p);
  const { producerId, epoch } = producer(p);
  const result = p.oneOf('result', ['commit', 'abort'] as const);
  if (!result) throw invalidParam('result', 'required: commit or abort');
  const state = await b.transactions.endTxn(id, producerId, epoch, result);
  return formatOk({ transactional_id: id, state });
}

function txnStatus(b: BrokerContext, _c: ConnectionContext, p: Params): string {
  const id = txnId(p);
  const s = b.transactions.status(id);
  return formatOk({
    transactional_id: id,
    state: s.state,
    producerId: s.producerId,
    epoch: s.epoch,
    partitions: s.partitions,
    offsets: s.offsets,
    timeout_ms: s.timeoutMs,
    ...(s.abortReason ? { abort_reason: s.abortReason } : {}),
  });
}

// ---- broker to broker (cluster mode): a transaction coordinator reaching other brokers ----

/** The sending coordinator: its `__transaction_state` partition and its leader epoch there. */
function coordinatorOf(p: Params): { partition: number; epoch: number } {
  return { partition: p.reqInt('coordinator_partition', { min: 0, max: 1_000_000 }), epoch: p.reqInt('coordinator_epoch', { min: -1, max: 2 ** 31 - 1 }) };
}

/** TXN_APPEND: one record of a transaction, appended by the partition's leader with its next sequence. */
async function txnAppend(b: BrokerContext, _c: ConnectionContext, p: Params): Promise<string> {
  const topic = p.reqStr('topic', { maxLength: MAX_ID });
  const partition = p.reqInt('partition', { min: 0, max: 1_000_000 });
  const { producerId, epoch } = producer(p);
  const keyStr = p.str('key', { maxLength: 65_535, allowEmpty: true });
  const message = p.str('message', { required: true, allowEmpty: true }) as string;
  const coordinator = coordinatorOf(p);
  const part = b.topics.get(topic).partition(partition);
  const leaderEpoch = leaderGate(b, part);
  b.cluster?.checkTxnCoordinator(coordinator.partition, coordinator.epoch);
  // No await before appendNext: pipelined appends of one producer take sequences in arrival order.
  const appended = appendNext(b.topics, topic, partition, { key: keyStr ? Buffer.from(keyStr, 'utf8') : null, value: Buffer.from(message, 'utf8') }, producerId, epoch);
  const res = await appended;
  await replicated(b, part, res.offset, leaderEpoch);
  return formatOk({ topic, partition, offset: res.offset });
}

/** TXN_MARKER: a commit or abort marker written by the partition's leader. */
async function txnMarker(b: BrokerContext, _c: ConnectionContext, p: Params): Promise<string> {
  const topic = p.reqStr('topic', { maxLength: MAX_ID });
  const partition = p.reqInt('partition', { min: 0, max: 1_000_000 });
  const { producerId, epoch } = producer(p);
  const result = p.oneOf('result', ['commit', 'abort'] as const);
  if (!result) throw invalidParam('result', 'required: commit or abort');
  const coordinator = coordinatorOf(p);
  const part = b.topics.get(topic).partition(partition);
  const leaderEpoch = leaderGate(b, part);
  // A replaced coordinator's marker may still be on its way; landing after the producer's next
  // transaction began here, it would end that one (docs/architecture.md, "Cluster mode").
  b.cluster?.checkTxnCoordinator(coordinator.partition, coordinator.epoch);
  b.cluster?.noteTxnCoordinator(coordinator.partition, coordinator.epoch);
  const m = await part.writeMarker(producerId, epoch, result);
  await replicated(b, part, m.offset, leaderEpoch);
  return formatOk({ topic, partition, offset: m.offset });
}

/** TXN_GROUP_OFFSETS op=stage|apply|clear|restore: a transaction's offsets at the group's coordinator. */
async function txnGroupOffsets(b: BrokerContext, _c: ConnectionContext, p: Params): Promise<string> {
  const op = p.oneOf('op', ['stage', 'apply', 'clear', 'restore'] as const);
  if (!op) throw invalidParam('op', 'required: stage, apply, clear or restore');
  const id = txnId(p);
  const group = p.reqStr('group', { maxLength: MAX_ID });
  const topic = p.reqStr('topic', { maxLength: MAX_ID });
  const entries = parseBatchEntries(p.line.positional);
  if (!b.coordinator.coordinates(group)) {
    if (!b.cluster) throw new TributaryError('NOT_COORDINATOR', { group });
    throw b.cluster.notCoordinator(OFFSETS_TOPIC, b.coordinator.partitionFor(group));
  }
  const parts = entries.map((e) => e.partition);
  if (op === 'stage') {
    await b.coordinator.stageTxnOffsets(id, { group, topic, member: p.reqStr('member', { maxLength: MAX_ID }), generation: p.reqInt('generation', EPOCH), entries });
  } else if (op === 'apply') {
    await b.coordinator.applyTxnOffsets(id, group, topic, entries);
  } else if (op === 'clear') {
    b.coordinator.clearPending(id, group, topic, parts);
  } else {
    b.coordinator.markPending(id, group, topic, parts);
  }
  return formatOk({ transactional_id: id, group, op, entries: entries.length });
}

export const TXN_COMMANDS: Record<string, CommandSpec> = {
  INIT_PRODUCER_ID: { handler: initProducerId, params: ['transactional_id', 'transaction_timeout_ms'] },
  BEGIN_TXN: { handler: beginTxn, params: ['transactional_id', 'producerId', 'epoch'] },
  // Pipelined like PUBLISH: the coordinator keeps a transaction's records in seqNum order.
  TXN_PUBLISH: { handler: txnPublish, params: ['transactional_id', 'producerId', 'epoch', 'key', 'message', 'partition', 'seqNum', 'topic'], pipelined: true },
  SEND_OFFSETS_TO_TXN: { handler: sendOffsetsToTxn, params: ['transactional_id', 'producerId', 'epoch', 'generation', 'group', 'member', 'topic'], positional: true },
  END_TXN: { handler: endTxn, params: ['transactional_id', 'producerId', 'epoch', 'result'] },
  TXN_STATUS: { handler: txnStatus, params: ['transactional_id'] },
  TXN_APPEND: { handler: txnAppend, params: ['producerId', 'epoch', 'coordinator_epoch', 'coordinator_partition', 'key', 'message', 'partition', 'topic'], pipelined: true },
  TXN_MARKER: { handler: txnMarker, params: ['producerId', 'epoch', 'coordinator_epoch', 'coordinator_partition', 'partition', 'result', 'topic'], pipelined: true },
  TXN_GROUP_OFFSETS: { handler: txnGroupOffsets, params: ['transactional_id', 'generation', 'group', 'member', 'op', 'topic'], positional: true },
};

import { type BatchTxn, decodeBatch, decodeBatchHeader } from 'tributary-protocol/batch.js';
import { type Params, formatOk } from 'tributary-protocol/command.js';
import { TributaryError, invalidParam } from 'tributary-protocol/errors.js';
import { MAX_PRODUCER_EPOCH, type RecordHeader, type RecordInput } from 'tributary-protocol/record.js';
import type { BrokerContext, CommandSpec, ConnectionContext } from './command-context.js';
import { checkRecordSize, leaderGate, refuseInternal, replicated } from './produce-commands.js';
import { appendNext, stageLocally } from '../txn/txn-targets.js';
import { OFFSETS_TOPIC } from '../coordinator/group-log.js';
import { type TxnCaller, commitCheck } from '../txn/txn-coordinator.js';
import { parseBatchEntries } from './group-commands.js';

const MAX_ID = 100_000;
const EPOCH = { min: 0, max: MAX_PRODUCER_EPOCH };

function txnId(p: Params): string {
  return p.reqStr('transactional_id', { maxLength: 255 });
}

/** Who names the id: its owner check (docs/security.md, "Transactional ids"); undefined with authentication off. */
function caller(b: BrokerContext, c: ConnectionContext): TxnCaller | undefined {
  return b.security?.txnCaller(c);
}

/** Refuses the request unless the connection's principal owns the id (or is an admin). */
function owned(b: BrokerContext, c: ConnectionContext, command: string, id: string): void {
  b.transactions.checkCaller(id, command, caller(b, c));
}

function producer(p: Params): { producerId: string; epoch: number } {
  return { producerId: p.reqStr('producerId', { maxLength: 255 }), epoch: p.reqInt('epoch', EPOCH) };
}

async function initProducerId(b: BrokerContext, c: ConnectionContext, p: Params): Promise<string> {
  if (!p.has('transactional_id')) {
    // An idempotent producer: a fresh id at epoch 0, from any broker (no coordinator owns it).
    if (p.has('transaction_timeout_ms')) throw invalidParam('transaction_timeout_ms', 'only with a transactional_id');
    return formatOk({ producerId: await b.producerIds.allocate(), epoch: 0 });
  }
  const id = txnId(p);
  const timeout = p.int('transaction_timeout_ms', { min: 1, max: 2 ** 31 - 1 });
  const r = await b.transactions.initProducerId(id, timeout, caller(b, c));
  return formatOk({ transactional_id: id, producerId: r.producerId, epoch: r.epoch });
}

async function beginTxn(b: BrokerContext, c: ConnectionContext, p: Params): Promise<string> {
  const id = txnId(p);
  owned(b, c, 'BEGIN_TXN', id);
  const { producerId, epoch } = producer(p);
  await b.transactions.begin(id, producerId, epoch);
  return formatOk({ transactional_id: id, state: 'open' });
}

async function txnPublish(b: BrokerContext, c: ConnectionContext, p: Params): Promise<string> {
  const id = txnId(p);
  owned(b, c, 'TXN_PUBLISH', id);
  const { producerId, epoch } = producer(p);
  const topic = p.reqStr('topic', { maxLength: MAX_ID });
  refuseInternal(topic);
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
  if (!r.duplicate) b.metrics.countIn(topic, 1, value.length);
  return formatOk({ transactional_id: id, topic, partition: r.partition, offset: r.offset, ...(r.duplicate ? { duplicate: true } : {}) });
}

async function sendOffsetsToTxn(b: BrokerContext, c: ConnectionContext, p: Params): Promise<string> {
  const id = txnId(p);
  owned(b, c, 'SEND_OFFSETS_TO_TXN', id);
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

async function endTxn(b: BrokerContext, c: ConnectionContext, p: Params): Promise<string> {
  const id = txnId(p);
  owned(b, c, 'END_TXN', id);
  const { producerId, epoch } = producer(p);
  const result = p.oneOf('result', ['commit', 'abort'] as const);
  if (!result) throw invalidParam('result', 'required: commit or abort');
  // The staged offsets are held to SEND_OFFSETS_TO_TXN's rules in force when the commit is decided (a
  // SIGHUP may have withdrawn the group since): NOT_AUTHORIZED_FOR_GROUP, and the transaction stays open.
  const check = commitCheck((group, topic) =>
    b.security?.authorize('SEND_OFFSETS_TO_TXN', c, { head: 'SEND_OFFSETS_TO_TXN', params: new Map([['transactional_id', id], ['group', group], ['topic', topic]]), positional: [] }),
  );
  const state = await b.transactions.endTxn(id, producerId, epoch, result, check);
  return formatOk({ transactional_id: id, state });
}

function txnStatus(b: BrokerContext, c: ConnectionContext, p: Params): string {
  const id = txnId(p);
  owned(b, c, 'TXN_STATUS', id);
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

/**
 * The broker-to-broker commands exist only between the brokers of a cluster: on a standalone broker they
 * would let any client write markers or records for transactions it does not own (the coordinator is
 * local there and uses none of them).
 */
function clusterOnly(b: BrokerContext, command: string): void {
  if (!b.cluster) throw new TributaryError('unknown_command', { command, reason: 'a broker-to-broker command; this broker is not in cluster mode' });
}

/** The sending coordinator: its `__transaction_state` partition and its leader epoch there. */
function coordinatorOf(p: Params): { partition: number; epoch: number } {
  return { partition: p.reqInt('coordinator_partition', { min: 0, max: 1_000_000 }), epoch: p.reqInt('coordinator_epoch', { min: -1, max: 2 ** 31 - 1 }) };
}

/** TXN_APPEND: one record of a transaction, appended by the partition's leader with its next sequence. */
async function txnAppend(b: BrokerContext, _c: ConnectionContext, p: Params): Promise<string> {
  clusterOnly(b, 'TXN_APPEND');
  const topic = p.reqStr('topic', { maxLength: MAX_ID });
  const partition = p.reqInt('partition', { min: 0, max: 1_000_000 });
  const { producerId, epoch } = producer(p);
  const keyStr = p.str('key', { maxLength: 65_535, allowEmpty: true });
  const message = p.str('message', { required: true, allowEmpty: true }) as string;
  const record = { key: keyStr ? Buffer.from(keyStr, 'utf8') : null, value: Buffer.from(message, 'utf8') };
  const res = await leaderAppend(b, topic, partition, producerId, epoch, coordinatorOf(p), () => [record]);
  return formatOk({ topic, partition, offset: res.offset });
}

/**
 * A coordinator's records of one producer epoch at the partition's leader (TXN_APPEND, text or batch).
 * `records` are made once the append passed its checks (a batch's are decoded then).
 */
async function leaderAppend(
  b: BrokerContext,
  topic: string,
  partition: number,
  producerId: string,
  epoch: number,
  coordinator: { partition: number; epoch: number },
  records: () => RecordInput[],
): Promise<{ offset: number; lastOffset: number }> {
  // Coordinators append only to user topics: a forged broker-to-broker append must not reach the internal ones.
  refuseInternal(topic);
  const part = b.topics.get(topic).partition(partition);
  const leaderEpoch = leaderGate(b, part);
  b.cluster?.checkTxnCoordinator(coordinator.partition, coordinator.epoch);
  // No await before appendNext: pipelined appends of one producer take sequences in arrival order.
  const res = await appendNext(b.topics, topic, partition, records(), producerId, epoch);
  await replicated(b, part, res.lastOffset, leaderEpoch);
  return res;
}

const NO_HEADERS: RecordHeader[] = [];

/** What decoding a record or a header object costs, as charged against the frame limit (DecodeOptions.maxObjects). */
const DECODED_OBJECT_BYTES = 100;

/**
 * A transactional batch frame (docs/protocol.md, section 5.3): binary keys, values, headers and timestamps
 * inside a transaction. A producer's frame (coordinator partition -1) is TXN_PUBLISH for each record, with
 * seqNums firstSequence.. in order; a coordinator's frame (broker to broker) is TXN_APPEND. Everything that
 * can refuse the frame from its header runs before its records are decoded, and they are decoded within
 * one object per DECODED_OBJECT_BYTES of the frame limit: decoded first, a 64 MiB frame of 11M empty
 * headers took 1.9 GB to be told its transactional id was unknown.
 */
export async function txnBatch(b: BrokerContext, c: ConnectionContext, body: Buffer): Promise<string> {
  const opts = { extensions: c.features.has('record_extensions_v1'), request: true, maxObjects: Math.floor(b.config.maxFrameBytes / DECODED_OBJECT_BYTES) };
  const head = decodeBatchHeader(body, opts);
  const txn = head.txn;
  const n = head.count;
  if (!txn) throw new TributaryError('invalid_batch', { reason: 'not a transactional batch' });
  if (n === 0) throw new TributaryError('invalid_batch', { reason: 'empty batch' });
  checkTxnSection(txn);
  // A transaction's records are answered once in-sync replicas have them (docs/protocol.md 5.3), as Kafka's
  // producer allows transactions only with acks=all: any other acks is refused, not quietly taken as all.
  if (head.acks !== 'all' && head.acks !== '-1') throw new TributaryError('invalid_batch', { reason: `a transactional batch needs acks=all (or -1), not ${head.acks}` });
  // Only key, value, timestamp and headers come from the sender; producer fields are the transaction's.
  const decode = (): RecordInput[] => {
    const records = decodeBatch(body, opts, (_offset, key, value, timestamp, _attributes, headers) => ({
      key,
      value,
      timestamp: Math.max(0, timestamp),
      headers: headers.length > 0 ? headers : NO_HEADERS,
    })).records;
    for (const r of records) checkRecordSize(b, r.value.length + (r.key?.length ?? 0));
    return records;
  };
  if (txn.coordinatorPartition >= 0) {
    clusterOnly(b, 'TXN_APPEND');
    if (head.partition < 0) throw new TributaryError('invalid_batch', { reason: 'a coordinator append names its partition' });
    const coordinator = { partition: txn.coordinatorPartition, epoch: txn.coordinatorEpoch };
    const res = await leaderAppend(b, head.topic, head.partition, txn.producerId, txn.epoch, coordinator, decode);
    return JSON.stringify({ status: 'OK', partition: head.partition, base_offset: res.offset, last_offset: res.lastOffset, count: n });
  }
  refuseInternal(head.topic);
  if (txn.transactionalId.length === 0) throw new TributaryError('invalid_batch', { reason: 'empty transactional id' });
  // Sequence numbers count a transaction's records from 1, one per record of the frame.
  if (head.firstSequence < 1 || head.lastSequence !== head.firstSequence + n - 1) {
    throw new TributaryError('invalid_batch', { reason: 'sequences must number the records from firstSequence >= 1' });
  }
  const explicit = head.partition >= 0 ? head.partition : undefined;
  const { transactionalId: id, producerId, epoch } = txn;
  owned(b, c, 'TXN_PUBLISH', id);
  b.transactions.checkRun(id, producerId, epoch, head.topic, explicit, n, head.firstSequence);
  const records = decode();
  // Registered with the coordinator before the first await, whole, so the frame keeps its order.
  const settled = await b.transactions.publishRun(id, producerId, epoch, head.topic, explicit, records, head.firstSequence);
  let fresh = 0;
  let bytes = 0;
  settled.forEach((r, i) => {
    if (r.duplicate) return;
    fresh++;
    bytes += records[i]!.value.length;
  });
  if (fresh > 0) b.metrics.countIn(head.topic, fresh, bytes);
  return JSON.stringify({
    status: 'OK',
    transactional_id: id,
    topic: head.topic,
    records: settled.map((r) => (r.duplicate ? { partition: r.partition, offset: r.offset, duplicate: true } : { partition: r.partition, offset: r.offset })),
  });
}

function checkTxnSection(txn: BatchTxn): void {
  const idBytes = Buffer.byteLength(txn.transactionalId, 'utf8');
  const pidBytes = Buffer.byteLength(txn.producerId, 'utf8');
  if (idBytes > 255) throw new TributaryError('invalid_batch', { reason: 'transactional id longer than 255 bytes' });
  if (pidBytes === 0 || pidBytes > 255) throw new TributaryError('invalid_batch', { reason: 'producer id must be 1-255 bytes' });
  if (txn.epoch < 0 || txn.epoch > MAX_PRODUCER_EPOCH) throw new TributaryError('invalid_batch', { reason: `producer epoch must be 0..${MAX_PRODUCER_EPOCH}` });
  if (txn.coordinatorPartition < -1 || txn.coordinatorEpoch < -1) throw new TributaryError('invalid_batch', { reason: 'coordinator partition and epoch are -1 or more' });
}

/** TXN_MARKER: a commit or abort marker written by the partition's leader. */
async function txnMarker(b: BrokerContext, _c: ConnectionContext, p: Params): Promise<string> {
  clusterOnly(b, 'TXN_MARKER');
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
  clusterOnly(b, 'TXN_GROUP_OFFSETS');
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
  // Only staging checks a member: the other operations refuse its parameters rather than ignore them.
  if (op !== 'stage') for (const k of ['kind', 'member', 'instance', 'generation']) if (p.has(k)) throw invalidParam(k, `not a parameter of op=${op}`);
  if (op === 'stage') {
    const kind = p.oneOf('kind', ['tributary', 'classic'] as const) ?? 'tributary';
    if (kind === 'tributary' && p.has('instance')) throw invalidParam('instance', 'only with kind=classic');
    if (kind === 'classic') {
      // A Kafka group's TxnOffsetCommit (v0-2 name no member: generation -1, as Kafka leaves them unchecked).
      const classic = { memberId: p.str('member', { maxLength: MAX_ID, allowEmpty: true }) ?? '', instanceId: p.str('instance', { maxLength: MAX_ID }) ?? null, generation: p.reqInt('generation', { min: -1, max: 2 ** 31 - 1 }) };
      await stageLocally(b.coordinator, id, { group, topic, member: '', generation: -1, entries, classic });
    } else {
      await b.coordinator.stageTxnOffsets(id, { group, topic, member: p.reqStr('member', { maxLength: MAX_ID }), generation: p.reqInt('generation', EPOCH), entries });
    }
  } else if (op === 'apply') {
    await b.coordinator.applyTxnOffsets(id, group, topic, entries);
  } else if (op === 'clear') {
    b.coordinator.clearPending(id, group, topic, parts);
  } else {
    b.coordinator.markPending(id, group, topic, parts);
  }
  return formatOk({ transactional_id: id, group, op, entries: entries.length });
}

/**
 * The owner check of a Kafka request another broker passes on (TXN_VERIFY, TXN_OFFSETS): `principal` is
 * the client's, not an admin (the sending broker checked that); absent, the client was an admin or
 * authentication is off. Only brokers send these commands (docs/security.md, "Transactional ids").
 */
function forwardedCaller(b: BrokerContext, p: Params, command: string, id: string): void {
  const principal = p.str('principal', { maxLength: 255 });
  if (principal !== undefined) b.transactions.checkCaller(id, command, { principal, admin: false });
}

/**
 * TXN_VERIFY: a partition's leader asks the transactional id's coordinator whether a Kafka transactional
 * batch may be appended (kafka/apis/txn-produce.ts): OK once the partition is durably in the id's open
 * transaction at this producer epoch.
 */
async function txnVerify(b: BrokerContext, _c: ConnectionContext, p: Params): Promise<string> {
  clusterOnly(b, 'TXN_VERIFY');
  const id = txnId(p);
  const topic = p.reqStr('topic', { maxLength: MAX_ID });
  const partition = p.reqInt('partition', { min: 0, max: 1_000_000 });
  const { producerId, epoch } = producer(p);
  forwardedCaller(b, p, 'TXN_PUBLISH', id);
  await b.transactions.kafka.verify(id, producerId, epoch, topic, partition);
  return formatOk({ transactional_id: id, topic, partition });
}

/**
 * TXN_OFFSETS: a Kafka group's coordinator passes a TxnOffsetCommit on to the transactional id's
 * coordinator, which records the offsets in the transaction and stages them back at the group's
 * coordinator with the group's member check (kafka/apis/transactions.ts).
 */
async function txnOffsets(b: BrokerContext, _c: ConnectionContext, p: Params): Promise<string> {
  clusterOnly(b, 'TXN_OFFSETS');
  const id = txnId(p);
  const { producerId, epoch } = producer(p);
  const group = p.reqStr('group', { maxLength: MAX_ID });
  const topic = p.reqStr('topic', { maxLength: MAX_ID });
  const entries = parseBatchEntries(p.line.positional);
  const classic = { memberId: p.str('member', { maxLength: MAX_ID, allowEmpty: true }) ?? '', instanceId: p.str('instance', { maxLength: MAX_ID }) ?? null, generation: p.reqInt('generation', { min: -1, max: 2 ** 31 - 1 }) };
  forwardedCaller(b, p, 'SEND_OFFSETS_TO_TXN', id);
  const n = await b.transactions.sendOffsets(id, producerId, epoch, { group, topic, member: '', generation: -1, entries, classic });
  return formatOk({ transactional_id: id, group, entries: n });
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
  TXN_GROUP_OFFSETS: { handler: txnGroupOffsets, params: ['transactional_id', 'generation', 'group', 'instance', 'kind', 'member', 'op', 'topic'], positional: true },
  // Pipelined: brokers share one connection per peer, and a request held there would hold every later one.
  TXN_VERIFY: { handler: txnVerify, params: ['transactional_id', 'producerId', 'epoch', 'partition', 'principal', 'topic'], pipelined: true },
  TXN_OFFSETS: { handler: txnOffsets, params: ['transactional_id', 'producerId', 'epoch', 'generation', 'group', 'instance', 'member', 'principal', 'topic'], positional: true, pipelined: true },
};

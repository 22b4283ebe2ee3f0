/**
 * Kafka transactions (docs/kafka.md, "Transactions") on Tributary's transaction coordinator
 * (txn/txn-coordinator.ts, txn/txn-kafka.ts): InitProducerId with a transactional id, AddPartitionsToTxn,
 * AddOffsetsToTxn, TxnOffsetCommit and EndTxn (transactional Produce: apis/produce.ts, txn-produce.ts).
 * In a cluster the id's coordinator serves all but TxnOffsetCommit, which goes to the group's coordinator
 * and from there (TXN_OFFSETS) to the id's.
 */
import { TributaryError } from 'tributary-protocol/errors.js';
import { ConcurrentTransactionsError } from '../../txn/txn-kafka.js';
import { commitCheck } from '../../txn/txn-entry.js';
import { TXN_STATE_TOPIC } from '../../txn/txn-log.js';
import type { StageRequest } from '../../txn/txn-targets.js';
import { apiByKey } from '../protocol/apis.js';
import { type KafkaErrorName, kafkaErrorCode } from '../protocol/error-codes.js';
import { TxnOffsetCommit } from '../protocol/messages/offsets.js';
import { AddOffsetsToTxn, AddPartitionsToTxn, EndTxn } from '../protocol/messages/transactions.js';
import { saturatingInt64 } from '../protocol/reader.js';
import type { KafkaStruct } from '../protocol/schema.js';
import type { KafkaRequestContext } from '../context.js';
import { committedOffsetCode } from './group-offsets.js';
import { coordinatorCode, errorCodeOf, handler, refusal } from './handler.js';
import { isUserTopic } from './metadata.js';

/** Kafka's limit on a commit's metadata string (offset.metadata.max.bytes). */
const MAX_METADATA = 4096;

/**
 * The Kafka code of a transactional request's failure. PRODUCER_FENCED exists from InitProducerId v4,
 * AddPartitionsToTxn, AddOffsetsToTxn and EndTxn v2 on (KIP-588); older versions, TxnOffsetCommit and
 * Produce get INVALID_PRODUCER_EPOCH, as from a Kafka broker (kafkajs 2.2.4 does not know the newer code).
 */
export function txnErrorCode(err: unknown, fencedKnown = false): number {
  if (err instanceof ConcurrentTransactionsError) return kafkaErrorCode('CONCURRENT_TRANSACTIONS');
  const c = errorCodeOf(err);
  return !fencedKnown && c === kafkaErrorCode('PRODUCER_FENCED') ? kafkaErrorCode('INVALID_PRODUCER_EPOCH') : c;
}

/**
 * The transaction permission on the id (main port: BEGIN_TXN / END_TXN need `transaction`), and that the
 * principal owns the id or is an admin (docs/security.md, "Transactional ids").
 */
export function txnRefusal(ctx: KafkaRequestContext, command: string, id: string): ReturnType<typeof refusal> | undefined {
  const denied = ctx.authorize(command, undefined, { transactional_id: id }) ?? notOwner(ctx, command, id);
  return denied ? refusal(denied, 'transactional_id') : undefined;
}

/** The coordinator's owner check of the id, as its refusal (undefined: the principal may use the id). */
function notOwner(ctx: KafkaRequestContext, command: string, id: string): TributaryError | undefined {
  try {
    ctx.broker.transactions.checkCaller(id, command, ctx.broker.security.txnCaller(ctx.identity));
    return undefined;
  } catch (err) {
    if (err instanceof TributaryError) return err;
    throw err;
  }
}

const code = (name: KafkaErrorName) => kafkaErrorCode(name);

/** A coordinator request's failure (not Produce's): storage trouble as the coordinator's (handler.ts). */
const coordinatorTxnCode = (err: unknown, fencedKnown = false) => coordinatorCode(txnErrorCode(err, fencedKnown));

/** InitProducerId with a transactional id: the coordinator's INIT_PRODUCER_ID (fences older epochs). */
export async function initTransactional(ctx: KafkaRequestContext, version: number, body: KafkaStruct): Promise<KafkaStruct> {
  const fail = (errorCode: number) => ({ throttleTimeMs: 0, errorCode, producerId: -1n, producerEpoch: -1 });
  const id = body.transactionalId as string;
  // The coordinator was asked: only its failures may stand for a pending finish (not a refusal or a check).
  let asked = false;
  try {
    const denied = txnRefusal(ctx, 'INIT_PRODUCER_ID', id);
    if (denied) throw denied;
    if (id === '') return fail(code('INVALID_REQUEST'));
    const timeout = body.transactionTimeoutMs as number;
    if (!(timeout > 0) || timeout > ctx.broker.config.maxTransactionTimeoutMs) return fail(code('INVALID_TRANSACTION_TIMEOUT'));
    const txns = ctx.broker.transactions;
    // v3+ (KIP-360): a producer that names its id and epoch must hold them, or be resending the request
    // that bumped them (its answer lost), or it is a zombie: the coordinator checks under the id's lock.
    // As Kafka's KafkaApis: half a pair (-1 on one side only) is INVALID_REQUEST.
    const given = version >= 3 ? (body.producerId as bigint) : -1n;
    const givenEpoch = version >= 3 ? (body.producerEpoch as number) : -1;
    if ((given === -1n) !== (givenEpoch === -1)) return fail(code('INVALID_REQUEST'));
    const expected = given === -1n ? undefined : { producerId: String(given), epoch: givenEpoch };
    asked = true;
    const r = await txns.initProducerId(id, timeout, ctx.broker.security.txnCaller(ctx.identity), expected);
    return { throttleTimeMs: 0, errorCode: 0, producerId: BigInt(r.producerId), producerEpoch: r.epoch };
  } catch (err) {
    // The id's previous transaction is decided but not finished (its markers or offsets failed; the
    // coordinator retries them): Kafka's coordinator answers an id in PrepareCommit or PrepareAbort
    // CONCURRENT_TRANSACTIONS, on which clients back off and retry. The storage failure under it would
    // map to NOT_COORDINATOR or COORDINATOR_NOT_AVAILABLE, sending them to look for another coordinator.
    // A refusal (no permission on the id) or a broker shutting down keeps its own answer.
    // Another principal's id, found under the coordinator's lock (initialized meanwhile).
    if (err instanceof TributaryError && err.code === 'NOT_AUTHORIZED_FOR_OPERATION') return fail(code('TRANSACTIONAL_ID_AUTHORIZATION_FAILED'));
    // A named pair refused (KIP-360) is the answer whatever the id's transaction is doing.
    if (err instanceof TributaryError && (err.code === 'invalid_producer_id_mapping' || err.code === 'producer_fenced')) return fail(coordinatorTxnCode(err, version >= 4));
    const stopping = err instanceof TributaryError && err.code === 'shutting_down';
    if (asked && !stopping && finishPending(ctx, id)) return fail(code('CONCURRENT_TRANSACTIONS'));
    return fail(coordinatorTxnCode(err, version >= 4));
  }
}

/** Whether this broker coordinates the id and its transaction is decided but not finished yet. */
function finishPending(ctx: KafkaRequestContext, id: string): boolean {
  try {
    const state = ctx.broker.transactions.status(id).state;
    return state === 'committing' || state === 'aborting';
  } catch {
    return false; // not this broker's id (any more), or an unknown one
  }
}

/** Whether the topic's partition exists (and is a user topic). */
function exists(ctx: KafkaRequestContext, topic: string, partition: number): boolean {
  const t = isUserTopic(topic) ? ctx.broker.topics.tryGet(topic) : undefined;
  return t !== undefined && partition >= 0 && partition < t.partitions.length;
}

/**
 * AddPartitionsToTxn v0-3: the partitions join the id's open transaction (begun if none is), durably.
 * A partition refused (authorization, unknown) refuses the request: the others get OPERATION_NOT_ATTEMPTED.
 */
export const addPartitionsToTxnHandler = handler(apiByKey(AddPartitionsToTxn.apiKey)!, async (ctx, version, body) => {
  const topics = body.topics as KafkaStruct[];
  const id = body.transactionalId as string;
  const answer = (codeOf: (t: number, p: number) => number) => ({
    throttleTimeMs: 0,
    results: topics.map((t, i) => ({ name: t.name, results: (t.partitions as number[]).map((p, k) => ({ partitionIndex: p, errorCode: codeOf(i, k) })) })),
  });
  const denied = txnRefusal(ctx, 'TXN_PUBLISH', id);
  if (denied) return answer(() => errorCodeOf(denied));
  const codes = topics.map((t) => {
    const name = t.name as string;
    // Refused before it is looked up, so a principal cannot tell whether a topic it may not write exists.
    const topicDenied = ctx.authorize('TXN_PUBLISH', name, { transactional_id: id });
    return (t.partitions as number[]).map((p) => {
      if (topicDenied) return code('TOPIC_AUTHORIZATION_FAILED');
      return exists(ctx, name, p) ? 0 : code('UNKNOWN_TOPIC_OR_PARTITION');
    });
  });
  if (codes.some((list) => list.some((c) => c !== 0))) return answer((i, k) => codes[i]![k] || code('OPERATION_NOT_ATTEMPTED'));
  const partitions = topics.flatMap((t) => (t.partitions as number[]).map((partition) => ({ topic: t.name as string, partition })));
  try {
    await ctx.broker.transactions.kafka.addPartitions(id, String(body.producerId as bigint), body.producerEpoch as number, partitions);
    return answer(() => 0);
  } catch (err) {
    const c = coordinatorTxnCode(err, version >= 2);
    return answer(() => c);
  }
});

/** AddOffsetsToTxn v0-3: the group's offsets may join the open transaction (begun if none is). */
export const addOffsetsToTxnHandler = handler(apiByKey(AddOffsetsToTxn.apiKey)!, async (ctx, version, body) => {
  const id = body.transactionalId as string;
  try {
    const denied = txnRefusal(ctx, 'BEGIN_TXN', id);
    if (denied) throw denied;
    const groupDenied = ctx.authorize('SEND_OFFSETS_TO_TXN', undefined, { transactional_id: id, group: body.groupId as string });
    if (groupDenied) throw refusal(groupDenied, 'group');
    await ctx.broker.transactions.kafka.addOffsets(id, String(body.producerId as bigint), body.producerEpoch as number);
    return { throttleTimeMs: 0, errorCode: 0 };
  } catch (err) {
    return { throttleTimeMs: 0, errorCode: coordinatorTxnCode(err, version >= 2) };
  }
});

/** EndTxn v0-3: the coordinator's END_TXN (markers on every added partition, offsets applied on commit). */
export const endTxnHandler = handler(apiByKey(EndTxn.apiKey)!, async (ctx, version, body) => {
  const id = body.transactionalId as string;
  try {
    const denied = txnRefusal(ctx, 'END_TXN', id);
    if (denied) throw denied;
    // The staged offsets are held to TxnOffsetCommit's rules in force when the commit is decided (a SIGHUP
    // may have withdrawn the group since): refused, and the transaction stays open for the abort.
    const check = commitCheck((group, topic) => {
      const refused = ctx.authorize('SEND_OFFSETS_TO_TXN', topic, { transactional_id: id, group });
      return refused && refusal(refused, refused.code === 'NOT_AUTHORIZED_FOR_TOPIC' ? 'topic' : 'group');
    });
    await ctx.broker.transactions.kafka.endTxn(id, String(body.producerId as bigint), body.producerEpoch as number, body.committed === true ? 'commit' : 'abort', check);
    return { throttleTimeMs: 0, errorCode: 0 };
  } catch (err) {
    return { throttleTimeMs: 0, errorCode: coordinatorTxnCode(err, version >= 2) };
  }
});

/**
 * TxnOffsetCommit v0-3 (to the group coordinator): the offsets are staged under the transaction with the
 * Kafka classic group's member check (v3 carries the member and generation; v0-2 none, which Kafka does
 * not check against the members) and recorded in the transaction, as SEND_OFFSETS_TO_TXN does. Each topic
 * is staged all or nothing.
 */
export const txnOffsetCommitHandler = handler(apiByKey(TxnOffsetCommit.apiKey)!, async (ctx, version, body) => {
  const topics = body.topics as KafkaStruct[];
  const id = body.transactionalId as string;
  const group = body.groupId as string;
  const answer = (codes: number[][]) => ({
    throttleTimeMs: 0,
    topics: topics.map((t, i) => ({ name: t.name, partitions: (t.partitions as KafkaStruct[]).map((p, k) => ({ partitionIndex: p.partitionIndex, errorCode: codes[i]![k] })) })),
  });
  const all = (c: number) => answer(topics.map((t) => (t.partitions as KafkaStruct[]).map(() => c)));
  const denied = txnRefusal(ctx, 'BEGIN_TXN', id);
  if (denied) return all(errorCodeOf(denied));
  const groupDenied = ctx.authorize('SEND_OFFSETS_TO_TXN', undefined, { transactional_id: id, group });
  if (groupDenied) return all(errorCodeOf(refusal(groupDenied, 'group')));
  const codes: number[][] = topics.map((t) => {
    const name = t.name as string;
    const topicDenied = ctx.authorize('SEND_OFFSETS_TO_TXN', name, { transactional_id: id, group });
    const list = (t.partitions as KafkaStruct[]).map((p) => {
      if (topicDenied) return code('TOPIC_AUTHORIZATION_FAILED');
      if (!exists(ctx, name, p.partitionIndex as number)) return code('UNKNOWN_TOPIC_OR_PARTITION');
      const metadata = p.committedMetadata as string | null;
      if (metadata !== null && Buffer.byteLength(metadata) > MAX_METADATA) return code('OFFSET_METADATA_TOO_LARGE');
      return committedOffsetCode(p.committedOffset as bigint);
    });
    // A topic is staged all or nothing: a refused partition refuses the topic's others.
    const first = list.find((c) => c !== 0);
    return first === undefined ? list : list.map((c) => c || first);
  });
  const classic = {
    memberId: version >= 3 ? (body.memberId as string) : '',
    instanceId: version >= 3 ? ((body.groupInstanceId as string | null) ?? null) : null,
    generation: version >= 3 ? (body.generationId as number) : -1,
  };
  const producerId = String(body.producerId as bigint);
  const epoch = body.producerEpoch as number;
  for (let i = 0; i < topics.length; i++) {
    if (codes[i]!.some((c) => c !== 0)) continue;
    const t = topics[i]!;
    const entries = (t.partitions as KafkaStruct[]).map((p) => ({ partition: p.partitionIndex as number, offset: saturatingInt64(p.committedOffset as bigint) }));
    if (entries.length === 0) continue;
    try {
      await sendOffsets(ctx, id, producerId, epoch, { group, topic: t.name as string, member: '', generation: -1, entries, classic });
    } catch (err) {
      const c = coordinatorTxnCode(err);
      codes[i] = codes[i]!.map(() => c);
    }
  }
  return answer(codes);
});

/**
 * The offsets into the id's transaction at its coordinator: this broker's, or (cluster) the one leading
 * the id's `__transaction_state` partition, reached with TXN_OFFSETS. Only this broker coordinates the group
 * (Kafka clients send TxnOffsetCommit to the group's coordinator): elsewhere NOT_COORDINATOR, and the
 * client looks the group's coordinator up again.
 */
async function sendOffsets(ctx: KafkaRequestContext, id: string, producerId: string, epoch: number, req: StageRequest): Promise<void> {
  const { cluster, transactions, coordinator } = ctx.broker;
  if (!coordinator.coordinates(req.group)) throw new TributaryError('NOT_COORDINATOR', { group: req.group });
  const txnPartition = transactions.partitionFor(id);
  if (!cluster || cluster.coordinatesHere(TXN_STATE_TOPIC, txnPartition)) {
    await transactions.sendOffsets(id, producerId, epoch, req);
    return;
  }
  const c = req.classic!;
  const caller = ctx.broker.security.txnCaller(ctx.identity);
  const fields = {
    transactional_id: id,
    producerId,
    epoch,
    group: req.group,
    topic: req.topic,
    member: c.memberId,
    generation: c.generation,
    ...(c.instanceId !== null ? { instance: c.instanceId } : {}),
    // The id's coordinator checks its owner against this principal, not this broker's (docs/security.md).
    ...(caller && !caller.admin ? { principal: caller.principal } : {}),
  };
  try {
    await (await cluster.leaderPeer(TXN_STATE_TOPIC, txnPartition)).command('TXN_OFFSETS', fields, [req.entries.map((e) => `P${e.partition}:${e.offset}`).join(',')]);
  } catch (err) {
    if (err instanceof TributaryError && err.code === 'NOT_AUTHORIZED_FOR_OPERATION') throw refusal(err, 'transactional_id');
    // The id's coordinator moving (or not reachable) is not the group's: retriable for the client.
    if (err instanceof TributaryError && ['NOT_COORDINATOR', 'NOT_LEADER', 'connection_lost', 'request_timeout'].includes(err.code)) {
      throw new TributaryError('COORDINATOR_NOT_AVAILABLE', { transactional_id: id, reason: err.code });
    }
    throw err;
  }
}

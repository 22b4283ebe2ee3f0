/** Producing: PUBLISH and binary batch frames, and the leader and acknowledgement gates every append passes. */
import { type Acks, type ScannedBatch, scanBatch } from 'tributary-protocol/batch.js';
import { MAX_PRODUCER_EPOCH } from 'tributary-protocol/record.js';
import type { Params } from 'tributary-protocol/command.js';
import { TributaryError, invalidParam } from 'tributary-protocol/errors.js';
import { type BrokerContext, type CommandSpec, type ConnectionContext, type Reply, leaderAddress } from './command-context.js';
import type { Partition } from '../partition/partition.js';

export function checkRecordSize(b: BrokerContext, bytes: number): void {
  if (bytes > b.config.maxRecordBytes) throw new TributaryError('record_too_large', { size: bytes, max: b.config.maxRecordBytes });
}

const MAX_PRODUCER_ID_BYTES = 255;

/** PUBLISH's idempotent producer parameters: all three or none. */
function idempotenceParams(p: Params): { producerId: string; epoch: number; seqNum: number } | undefined {
  const given = ['producerId', 'epoch', 'seqNum'].filter((k) => p.has(k));
  if (given.length === 0) return undefined;
  for (const k of ['producerId', 'epoch', 'seqNum']) {
    if (!p.has(k)) throw invalidParam(k, 'producerId, epoch and seqNum go together');
  }
  const producerId = p.reqStr('producerId', { maxLength: MAX_PRODUCER_ID_BYTES });
  if (Buffer.byteLength(producerId, 'utf8') > MAX_PRODUCER_ID_BYTES) throw invalidParam('producerId', `at most ${MAX_PRODUCER_ID_BYTES} bytes`);
  const epoch = p.reqInt('epoch', { min: 0, max: MAX_PRODUCER_EPOCH });
  const seqNum = p.reqInt('seqNum', { min: 0 });
  return { producerId, epoch, seqNum };
}

function unknownProducer(producerId: string): TributaryError {
  return new TributaryError('unknown_producer_id', { producerId, reason: 'idempotent producers take their id from INIT_PRODUCER_ID' });
}

/**
 * An idempotent producer's id must be one a broker handed out (ProducerIdAllocator.issued): undefined
 * when it is, unknown_producer_id when it is not, and the answer to come when that takes a read of the
 * store. Requests of one producer that wait wait on the same reads, in arrival order, so their appends
 * keep their order.
 */
function checkIssued(b: BrokerContext, producerId: string): Promise<boolean> | undefined {
  const known = b.producerIds.issued(producerId);
  if (known === true) return undefined;
  if (known === false) throw unknownProducer(producerId);
  return known;
}

/**
 * Cluster mode: only the partition's leader appends (NOT_LEADER LEADER_IS otherwise), and acks=all is
 * refused up front below min_insync_replicas. Returns the leader epoch the append is made under (for
 * replicated()); standalone: always the leader, undefined.
 */
export function leaderGate(b: BrokerContext, partition: Partition, acks?: string): number | undefined {
  if (!b.cluster) return undefined;
  const replica = b.cluster.requireLeader(partition.topic, partition.id);
  if (acks === 'all' || acks === '-1') b.cluster.replicas.checkMinIsr(replica);
  return replica.leaderEpoch;
}

/**
 * acks=all in a cluster: answers once the HWM passed the record (every in-sync replica has it) while this
 * broker still leads at `epoch`, the epoch leaderGate() returned before the append; a leadership change
 * fails it at once with NOT_LEADER.
 */
export async function replicated(b: BrokerContext, partition: Partition, lastOffset: number, epoch: number | undefined): Promise<void> {
  if (!b.cluster) return;
  if (epoch === undefined) throw new TributaryError('internal_error', { reason: 'a replicated append without its leader epoch' });
  await b.cluster.replicas.waitReplicated(partition.topic, partition.id, epoch, lastOffset, b.config.replicationTimeoutMs);
}

/**
 * The reply's gate after the append: acks=all waits for replication (replicated()); acks=1 in a cluster
 * is refused with NOT_LEADER if leadership moved while the record was being written, since the new
 * leader may not have it (it still may be lost later: that is acks=1).
 */
/**
 * The produce phases (docs/operations.md, "Metrics"): queue until the handler ran, append until the
 * records were in the file, fsync until durable (0 unless flush=always), replication until acknowledged.
 */
function timedAck<T extends { lastOffset: number; writtenAt?: number }>(
  b: BrokerContext,
  receivedAt: number | undefined,
  handled: number,
  appended: Promise<T>,
  ack: (lastOffset: number) => Promise<void>,
): Promise<T> {
  const phase = b.metrics.producePhase;
  if (receivedAt !== undefined) phase.child('queue').observe((handled - receivedAt) / 1000);
  // Plain reactions, not an async frame: this runs for every produce request.
  return appended.then((res) => {
    const durable = performance.now();
    const written = res.writtenAt ?? durable;
    phase.child('append').observe((written - handled) / 1000);
    phase.child('fsync').observe((durable - written) / 1000);
    // Standalone, no acks setting waits for more than the append (acknowledged() has nothing to do).
    if (!b.cluster) return res;
    return ack(res.lastOffset).then(() => {
      phase.child('replication').observe((performance.now() - durable) / 1000);
      return res;
    });
  });
}

async function acknowledged(b: BrokerContext, partition: Partition, lastOffset: number, acks: string, epoch: number | undefined): Promise<void> {
  if (acks === 'all' || acks === '-1') return replicated(b, partition, lastOffset, epoch);
  const afterPause = b.cluster && epoch !== undefined ? b.cluster.replicas.checkLeadsAfterAppend(partition.topic, partition.id, epoch) : undefined;
  if (afterPause) await afterPause;
}

/**
 * An idempotent append's sequence and epoch checks answer in its reply, which acks=0 does not wait for: a
 * gap or a fenced epoch got OK and was dropped (docs/protocol.md, "Producing"). The SDK refuses the pair too.
 */
const ACKS0_IDEMPOTENT = 'an idempotent producer needs acks=1 or all: acks=0 answers before the sequence and epoch are checked';

export function refuseInternal(topic: string): void {
  if (topic.startsWith('__')) throw new TributaryError('invalid_topic_name', { topic, reason: 'internal topics are written by the broker only' });
}

async function publish(b: BrokerContext, c: ConnectionContext, p: Params): Promise<Reply> {
  const receivedAt = c.receivedAt;
  const handled = performance.now();
  const topic = b.topics.get(p.reqStr('topic', { maxLength: 100_000 }));
  refuseInternal(topic.name);
  const explicit = p.int('partition', { min: 0, max: 1_000_000 });
  const keyStr = p.str('key', { maxLength: 65_535, allowEmpty: true });
  const acks = p.oneOf('acks', ['0', '1', 'all', '-1'] as const) ?? '1';
  const idem = idempotenceParams(p);
  if (idem && acks === '0') throw invalidParam('acks', ACKS0_IDEMPOTENT);
  const message = p.str('message', { required: true, allowEmpty: true }) as string;
  const issued = idem && checkIssued(b, idem.producerId);
  if (issued && !(await issued)) throw unknownProducer(idem.producerId);
  const key = keyStr ? Buffer.from(keyStr, 'utf8') : null;
  const value = Buffer.from(message, 'utf8');
  checkRecordSize(b, value.length + (key?.length ?? 0));
  const partition = topic.partition(topic.choosePartition(explicit, key));
  const epoch = leaderGate(b, partition, acks);
  const appended = idem
    ? partition.appendIdempotent([{ key, value, producerId: idem.producerId, epoch: idem.epoch, sequence: idem.seqNum }], {
        producerId: idem.producerId,
        epoch: idem.epoch,
        firstSequence: idem.seqNum,
        lastSequence: idem.seqNum,
      })
    : partition.append([{ key, value }]);
  countAppended(b, topic.name, 1, value.length, appended);
  if (acks === '0') {
    appended.catch((err) => b.logger.warn({ err, topic: topic.name }, 'acks=0 append failed'));
    return 'OK';
  }
  const res = await timedAck(b, receivedAt, handled, appended, (last) => acknowledged(b, partition, last, acks, epoch));
  return JSON.stringify({ status: 'OK', partition: partition.id, offset: res.baseOffset, leader: leaderAddress(b) });
}

/** Counted once appended: a refused append, or an idempotent retry answered as a duplicate, adds nothing to the log. */
function countAppended(b: BrokerContext, topic: string, records: number, bytes: number, appended: Promise<object>): void {
  appended.then(
    (r) => {
      if (!(r as { duplicate?: boolean }).duplicate) b.metrics.countIn(topic, records, bytes);
    },
    () => {},
  );
}

/**
 * A binary batch frame: one append of all its records to one partition. Not an async function: the usual
 * batch (an issued or no producer id, a standalone broker) takes one promise reaction from the append to
 * its reply, and errors of the synchronous part are thrown to the caller.
 */
export function produceBatch(b: BrokerContext, c: ConnectionContext, body: Buffer, receivedAt?: number): Promise<Reply> | Reply {
  const handled = performance.now();
  const started = startAppend(b, c, body, false);
  if ('issued' in started) return produceChecked(b, c, body, receivedAt, handled, started);
  return batchReply(b, receivedAt, handled, started);
}

/** A producer id this broker has not seen handed out: decided by a read of the store, then the append. */
async function produceChecked(b: BrokerContext, c: ConnectionContext, body: Buffer, receivedAt: number | undefined, handled: number, check: { issued: Promise<boolean>; producerId: string }): Promise<Reply> {
  if (!(await check.issued)) throw unknownProducer(check.producerId);
  const started = startAppend(b, c, body, true);
  if ('issued' in started) throw new TributaryError('internal_error', { reason: 'producer id checked twice' });
  return batchReply(b, receivedAt, handled, started);
}

function batchReply(b: BrokerContext, receivedAt: number | undefined, handled: number, started: StartedAppend): Promise<Reply> | Reply {
  const { partition, appended, count, acks, topic, epoch } = started;
  if (acks === '0') {
    appended.catch((err) => b.logger.warn({ err, topic }, 'acks=0 append failed'));
    return 'OK';
  }
  // JSON.stringify({ status, partition, base_offset, last_offset, count }), numbers only, without the object.
  return timedAck(b, receivedAt, handled, appended, (last) => acknowledged(b, partition, last, acks, epoch)).then(
    (res) => `{"status":"OK","partition":${partition.id},"base_offset":${res.baseOffset},"last_offset":${res.lastOffset},"count":${count}}`,
  );
}

type StartedAppend = { partition: Partition; appended: Promise<{ baseOffset: number; lastOffset: number }>; count: number; acks: Acks; topic: string; epoch: number | undefined };

/** `checked`: the batch's producer id is known to be issued. Else, when that takes a read of the store, nothing is appended and the read comes back. */
function startAppend(b: BrokerContext, c: ConnectionContext, body: Buffer, checked: boolean): StartedAppend | { issued: Promise<boolean>; producerId: string } {
  const ext = c.features.has('record_extensions_v1');
  // Validated without a record object per record, and the log's records encoded straight from the wire
  // bytes. Nothing the protocol accepts needs a decode: header keys must be valid UTF-8 (`request`, checked
  // in the scan) and an idempotent batch's producer ids are compared as bytes. A decoding fallback built an
  // object per record and header: a 64 MiB frame of empty headers took 2 GB.
  const scan = scanBatch(body, { extensions: ext, request: true });
  // The connection routes transactional batches to the transaction commands (txn-commands.ts).
  if (scan.transactional) throw new TributaryError('invalid_batch', { reason: 'a transactional batch is not a produce request' });
  return startWireAppend(b, scan, checked);
}

/** startAppend's checks and append, from the scanned batch's bytes. */
function startWireAppend(b: BrokerContext, batch: ScannedBatch, checked: boolean): StartedAppend | { issued: Promise<boolean>; producerId: string } {
  const topic = b.topics.get(batch.topic);
  refuseInternal(topic.name);
  const n = batch.count;
  if (n === 0) throw new TributaryError('invalid_batch', { reason: 'empty batch' });
  if (batch.idempotent && batch.acks === '0') throw new TributaryError('invalid_batch', { reason: ACKS0_IDEMPOTENT });
  const idem = batch.idempotent ? wireIdempotence(batch) : undefined;
  if (idem && !checked) {
    const issued = checkIssued(b, idem.producerId);
    if (issued) return { issued, producerId: idem.producerId };
  }
  const body = batch.body;
  const starts = batch.starts;
  let bytes = 0;
  let firstKey: Buffer | null = null;
  for (let i = 0; i < n; i++) {
    // Record layout: offset u64, sequence u64, producer id u16 + bytes, key u16 + bytes, epoch i64, value u32 + bytes.
    const s = starts[i]!;
    const k = s + 18 + ((body[s + 16]! << 8) | body[s + 17]!);
    const keyLen = (body[k]! << 8) | body[k + 1]!;
    const v = k + 10 + keyLen;
    const size = body[v]! * 0x1000000 + ((body[v + 1]! << 16) | (body[v + 2]! << 8) | body[v + 3]!);
    checkRecordSize(b, size + keyLen);
    bytes += size;
    if (i === 0 && keyLen > 0) firstKey = body.subarray(k + 2, k + 2 + keyLen);
  }
  const partition = topic.partition(topic.choosePartition(batch.partition >= 0 ? batch.partition : undefined, firstKey));
  const epoch = leaderGate(b, partition, batch.acks);
  // An idempotent batch is checked against the producer state and stored with its ids, still from the wire
  // bytes: decoded, a 64 MiB frame of small records took about 500 MB of record objects.
  const appended = idem ? partition.appendIdempotent(batch, idem) : partition.appendWire(batch);
  countAppended(b, topic.name, n, bytes, appended);
  return { partition, appended, count: n, acks: batch.acks, topic: topic.name, epoch };
}

/**
 * The idempotent fields of a scanned batch, validated from its bytes: one non-empty producer id (the same
 * bytes in every record) and epoch, lastSequence = first + count - 1. A producer id that is not valid UTF-8
 * decodes to a string with U+FFFD, which no broker issues: checkIssued refuses it (unknown_producer_id).
 */
function wireIdempotence(batch: ScannedBatch): { producerId: string; epoch: number; firstSequence: number; lastSequence: number } {
  const { body, starts, count } = batch;
  const s0 = starts[0]!;
  const pidLen = (body[s0 + 16]! << 8) | body[s0 + 17]!;
  const pidAt = s0 + 18;
  if (pidLen === 0) throw new TributaryError('invalid_batch', { reason: 'idempotent batch without a producer id' });
  const producerId = body.toString('utf8', pidAt, pidAt + pidLen);
  if (pidLen > MAX_PRODUCER_ID_BYTES) throw new TributaryError('invalid_batch', { reason: `producer id longer than ${MAX_PRODUCER_ID_BYTES} bytes` });
  const e0 = pidAt + pidLen + 2 + ((body[pidAt + pidLen]! << 8) | body[pidAt + pidLen + 1]!);
  const epoch = body.readInt32BE(e0) * 4294967296 + body.readUInt32BE(e0 + 4);
  if (!Number.isSafeInteger(epoch) || epoch < 0 || epoch > MAX_PRODUCER_EPOCH) throw new TributaryError('invalid_batch', { reason: `producer epoch must be 0..${MAX_PRODUCER_EPOCH}` });
  for (let i = 1; i < count; i++) {
    const s = starts[i]!;
    const len = (body[s + 16]! << 8) | body[s + 17]!;
    const e = s + 20 + len + ((body[s + 18 + len]! << 8) | body[s + 19 + len]!);
    if (len !== pidLen || body.compare(body, pidAt, pidAt + pidLen, s + 18, s + 18 + len) !== 0 || body.compare(body, e0, e0 + 8, e, e + 8) !== 0) {
      throw new TributaryError('invalid_batch', { reason: 'records of an idempotent batch must share one producer id and epoch' });
    }
  }
  if (!Number.isSafeInteger(batch.firstSequence) || !Number.isSafeInteger(batch.lastSequence) || batch.lastSequence !== batch.firstSequence + count - 1) {
    throw new TributaryError('invalid_batch', { reason: 'last sequence must be first sequence + record count - 1' });
  }
  return { producerId, epoch, firstSequence: batch.firstSequence, lastSequence: batch.lastSequence };
}

export const PRODUCE_COMMANDS: Record<string, CommandSpec> = {
  PUBLISH: { handler: publish, params: ['acks', 'key', 'message', 'partition', 'topic', 'producerId', 'epoch', 'seqNum'], pipelined: true },
};

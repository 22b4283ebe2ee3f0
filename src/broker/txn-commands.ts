import { type Params, formatOk } from '../protocol/command.js';
import { TributaryError, invalidParam } from '../protocol/errors.js';
import type { BrokerContext, CommandSpec, ConnectionContext } from './commands.js';
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

/** Transactions span partitions led by different brokers in a cluster: not built for cluster mode yet. */
function standaloneOnly<T extends CommandSpec['handler']>(h: T): CommandSpec['handler'] {
  return (b, c, p) => {
    if (b.cluster) throw new TributaryError('UNSUPPORTED_FEATURE', { feature: 'transactions', reason: 'transactions are not available in cluster mode yet' });
    return h(b, c, p);
  };
}

export const TXN_COMMANDS: Record<string, CommandSpec> = {
  INIT_PRODUCER_ID: { handler: standaloneOnly(initProducerId) },
  BEGIN_TXN: { handler: standaloneOnly(beginTxn) },
  // Pipelined like PUBLISH: the coordinator keeps a transaction's records in seqNum order.
  TXN_PUBLISH: { handler: standaloneOnly(txnPublish), pipelined: true },
  SEND_OFFSETS_TO_TXN: { handler: standaloneOnly(sendOffsetsToTxn) },
  END_TXN: { handler: standaloneOnly(endTxn) },
  TXN_STATUS: { handler: standaloneOnly(txnStatus) },
};

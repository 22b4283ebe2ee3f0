/**
 * Produce (v3+, RecordBatch v2): each partition's batch is validated (framing, magic, CRC-32C),
 * decompressed, and its records appended to the same partition log the main port writes, so the records
 * read the same through either port (docs/kafka.md, "Records"). Stored records are not RecordBatch v2 yet:
 * this is a conversion, measured by `npm run bench -- kafka`. An idempotent batch (producer id >= 0)
 * goes through the partition's producer state like Tributary's own: a retried batch is answered with its
 * original offsets, a gap is OUT_OF_ORDER_SEQUENCE_NUMBER, and only ids a broker handed out are taken.
 * A transactional batch (a request with a transactional id) is appended into its id's open transaction,
 * only to a partition AddPartitionsToTxn added at the batch's epoch (txn/txn-kafka.ts; in a cluster
 * verified with the id's coordinator, txn-produce.ts), INVALID_TXN_STATE otherwise with nothing stored.
 */
import { TributaryError } from 'tributary-protocol/errors.js';
import { MAX_PRODUCER_EPOCH, RecordAttr, type RecordInput } from 'tributary-protocol/record.js';
import type { IdempotentBatch, TransactionalBatch } from '../../partition/partition-types.js';
import { READ_HEADER_COST, type StoredHeader } from '../../storage/record-codec.js';
import { RecordBatchError } from 'tributary-protocol/record-batch/errors.js';
import { BATCH_LENGTH, LOG_OVERHEAD } from 'tributary-protocol/record-batch/layout.js';
import { splitRecordBatches } from 'tributary-protocol/record-batch/split.js';
import type { RecordBatchView } from 'tributary-protocol/record-batch/view.js';
import { apiByKey } from '../protocol/apis.js';
import { kafkaErrorCode } from '../protocol/error-codes.js';
import { Produce } from '../protocol/messages/produce.js';
import type { KafkaStruct } from '../protocol/schema.js';
import type { KafkaRequestContext } from '../context.js';
import { acknowledged, leaderGate } from './cluster-gate.js';
import { EndConnection, handler, refusal } from './handler.js';
import { isUserTopic } from './metadata.js';
import { txnErrorCode, txnRefusal } from './transactions.js';
import { transactionalAppend } from './txn-produce.js';

const EMPTY: Buffer = Buffer.alloc(0);

interface PartitionResult {
  index: number;
  errorCode: number;
  baseOffset: number;
  logAppendTimeMs: number;
  logStartOffset: number;
  recordErrors: KafkaStruct[];
  errorMessage: string | null;
}

function failed(index: number, err: unknown): PartitionResult {
  const message = err instanceof Error ? err.message : String(err);
  // A fenced transactional producer gets INVALID_PRODUCER_EPOCH here, as from Kafka (no Produce version has PRODUCER_FENCED).
  return { index, errorCode: txnErrorCode(err), baseOffset: -1, logAppendTimeMs: -1, logStartOffset: -1, recordErrors: [], errorMessage: message };
}

/**
 * What the compressed batches of one Produce request may inflate to, together: the largest request the
 * broker takes (--max-frame-bytes), or --max-batch-bytes when set. Per batch alone, a 1.6 MB request of
 * 30 small gzip batches inflated to 3.5 GB. Batches inflate one after another so each sees what is left.
 * Records and headers are charged to it too (RECORD_CHARGE_BYTES, HEADER_CHARGE_BYTES).
 */
export interface InflateBudget {
  left: number;
  turn: Promise<unknown>;
}

/**
 * What each record of a batch costs the request's budget besides its bytes: about what decoding and
 * appending it takes in memory. Without it an lz4 batch of 9M empty records (247 KB on the wire, 63 MB
 * inflated, within the budget) held the event loop for 20 s and took 2.9 GB.
 */
export const RECORD_CHARGE_BYTES = 256;

/**
 * What each header costs the budget, charged before the record's header objects are built: 2 bytes on
 * the wire, about 180 as objects. Uncharged, one 16 MB batch of 8M empty headers took 1.4 GB and was
 * appended. The same 100 bytes reads charge a header (READ_HEADER_COST).
 */
export const HEADER_CHARGE_BYTES = READ_HEADER_COST;

function inflateBudget(ctx: KafkaRequestContext): InflateBudget {
  const c = ctx.broker.config;
  return { left: c.maxBatchBytes > 0 ? Math.min(c.maxBatchBytes, c.maxFrameBytes) : c.maxFrameBytes, turn: Promise.resolve() };
}

/**
 * The records of one producer batch, as the log takes them (a null value is empty with NULL_VALUE, a null
 * header value empty). A compressed batch inflates within the request's budget: its header's record count
 * is the client's word and bounds nothing. Exported for its unit test.
 */
export async function recordsOf(ctx: KafkaRequestContext, batch: RecordBatchView, budget: InflateBudget): Promise<RecordInput[]> {
  const max = ctx.broker.config.maxRecordBytes;
  // Charged from the header's count before anything is inflated or decoded (a count that lies fails later).
  const charge = batch.recordCount * RECORD_CHARGE_BYTES;
  if (charge > budget.left) {
    throw new TributaryError('record_too_large', { records: batch.recordCount, max: Math.floor(budget.left / RECORD_CHARGE_BYTES), reason: 'too many records for what is left of the request' });
  }
  budget.left -= charge;
  let data: Buffer | undefined;
  if (batch.compressionType !== 0) {
    const inflated = budget.turn.then(async () => {
      const d = await inflate(batch, budget.left);
      budget.left -= d.length;
      return d;
    });
    budget.turn = inflated.catch(() => {});
    data = await inflated;
  }
  const records: RecordInput[] = [];
  batch.forEachRecord((r) => {
    // Kafka's record format has no timestamp below -1 (NO_TIMESTAMP): refused, not stored (docs/kafka.md, Produce).
    if (r.timestamp < -1) {
      throw new RecordBatchError('timestamp_out_of_range', `record ${records.length} timestamp ${r.timestamp} is below -1`, { record: records.length, field: 'timestamp' });
    }
    const key = r.key();
    const given = r.value();
    const value = given ?? EMPTY;
    if (value.length + (key?.length ?? 0) > max) throw new TributaryError('record_too_large', { size: value.length + (key?.length ?? 0), max });
    // Charged before the header objects are built. Only a record with headers is refused here: what was
    // charged while a batch inflated may leave the budget below 0, and a record without any costs nothing.
    const headerCharge = r.headerCount * HEADER_CHARGE_BYTES;
    if (headerCharge > 0 && headerCharge > budget.left) {
      const left = Math.max(0, Math.floor(budget.left / HEADER_CHARGE_BYTES));
      throw new TributaryError('record_too_large', { headers: r.headerCount, max: left, reason: 'too many headers for what is left of the request' });
    }
    budget.left -= headerCharge;
    // A null header value is kept apart from an empty one too: stored empty with nullValue (record-codec.ts).
    const headers: StoredHeader[] = r.headers().map((h) => (h.value === null ? { key: h.key, value: EMPTY, nullValue: true } : { key: h.key, value: h.value }));
    // The producer's timestamp as given (CreateTime): 0 stays 0, -1 (NO_TIMESTAMP) is stored and read back as -1.
    // A null value (a tombstone) is kept apart from an empty one: stored empty with NULL_VALUE.
    const input: RecordInput = { key, value, timestamp: r.timestamp, keepTimestamp: true, headers };
    if (given === null) input.attributes = RecordAttr.NULL_VALUE;
    records.push(input);
  }, data);
  return records;
}

/** The batch's records decompressed, at most `bound` bytes: past it record_too_large (MESSAGE_TOO_LARGE), not a corrupt batch. */
async function inflate(batch: RecordBatchView, bound: number): Promise<Buffer> {
  try {
    return await batch.recordsDataAsync(bound);
  } catch (err) {
    // The codecs report the bound as "larger than <bound> bytes" (zlib's ERR_BUFFER_TOO_LARGE, or the check after them).
    if (err instanceof TributaryError && /larger than \d+ bytes/.test(err.message)) throw new TributaryError('record_too_large', { max: bound, reason: 'batch inflates past the limit' });
    throw err;
  }
}

/** A partition's batch, checked and decoded: what starts its append (in the connection's order), or its error. */
type Prepared = { error: PartitionResult } | { start: () => Promise<PartitionResult> };

/**
 * The producer fields of a batch: idempotent (producer id 0 or more), and transactional when the request
 * has a transactional id. Throws what Kafka answers for a batch that does not fit its request.
 */
async function producerOf(ctx: KafkaRequestContext, batch: RecordBatchView, txnId: string | null): Promise<IdempotentBatch | undefined> {
  if (txnId === null && batch.isTransactional) throw new TributaryError('invalid_txn_state', { reason: 'a transactional batch in a request without a transactional id' });
  if (txnId !== null && !batch.isTransactional) throw new TributaryError('invalid_txn_state', { reason: 'a request with a transactional id carries transactional batches only' });
  if (batch.producerId < 0) {
    if (txnId !== null) throw new TributaryError('invalid_batch', { reason: 'a transactional batch without a producer id' });
    return undefined;
  }
  const producerId = String(batch.producerId);
  const epoch = batch.producerEpoch;
  if (epoch < 0 || epoch > MAX_PRODUCER_EPOCH) throw new TributaryError('invalid_batch', { reason: `producer epoch ${epoch}` });
  // A transactional batch's producer id is checked against its transactional id's when it appends.
  if (txnId === null) {
    const issued = ctx.broker.producerIds.issued(producerId);
    if (issued !== true && !(await issued)) throw new TributaryError('unknown_producer_id', { producerId });
  }
  const first = batch.baseSequence;
  if (first < 0) throw new TributaryError('invalid_batch', { reason: 'an idempotent batch without a base sequence' });
  // A producer the partition has no state of may start anywhere, as in Kafka since 2.5 (KIP-360): its state
  // went with a topic deleted and created again, or expired, and its clients never start again from 0.
  return { producerId, epoch, firstSequence: first, lastSequence: first + batch.recordCount - 1, anyFirstSequence: true };
}

async function prepare(ctx: KafkaRequestContext, topicName: string, index: number, bytes: Buffer | null, acks: number, txnId: string | null, budget: InflateBudget): Promise<Prepared> {
  try {
    // A transaction's write needs the transaction permission too (TXN_PUBLISH, checked for the request first).
    const denied = txnId === null ? ctx.authorize('PUBLISH', topicName) : ctx.authorize('TXN_PUBLISH', topicName, { transactional_id: txnId });
    if (denied) throw refusal(denied, 'topic');
    if (!isUserTopic(topicName)) throw new TributaryError('topic_not_found', { topic: topicName });
    const partition = ctx.broker.topics.get(topicName).partition(index);
    if (!bytes || bytes.length === 0) throw new TributaryError('invalid_batch', { reason: 'no records' });
    const c = ctx.broker.config;
    if (c.maxBatchBytes > 0 && bytes.length > c.maxBatchBytes) throw new TributaryError('record_too_large', { size: bytes.length, max: c.maxBatchBytes, reason: 'batch' });
    const split = splitRecordBatches(bytes);
    if (split.stop) {
      // As Kafka's batch reader: a batch cut short, its length within what a batch may take, is no batch,
      // and a request with none is INVALID_RECORD (not retriable); a length beyond that stays corrupt.
      const declared = bytes.length >= LOG_OVERHEAD ? bytes.readInt32BE(BATCH_LENGTH) + LOG_OVERHEAD : 0;
      if (split.batches.length === 0 && split.stop.reason === 'truncated' && declared <= (c.maxBatchBytes || c.maxFrameBytes)) {
        throw new TributaryError('invalid_batch', { reason: `no complete batch: ${split.stop.error.message}` });
      }
      throw split.stop.error;
    }
    // Kafka's rule from Produce v3 on: one batch per partition.
    if (split.batches.length !== 1) throw new TributaryError('invalid_batch', { reason: `${split.batches.length} batches for one partition; one is allowed` });
    const batch = split.batches[0]!;
    // Kafka's LogValidator: the offsets a batch says it spans are its records'.
    if (batch.lastOffsetDelta !== batch.recordCount - 1) throw new TributaryError('invalid_batch', { reason: `lastOffsetDelta ${batch.lastOffsetDelta} for ${batch.recordCount} records` });
    if (batch.isControl) throw new TributaryError('invalid_batch', { reason: 'control batches are written by the broker' });
    const idempotent = await producerOf(ctx, batch, txnId);
    // The broker assigns the offsets: the client's baseOffset (any int64) is ignored, as Kafka overwrites it.
    // It lies outside the CRC; stamped 0 here so the record walk never reads the client's value.
    batch.setBaseOffset(0);
    // The batch's CRC-32C held (split checked it): records that do not decode are the client's, not the
    // network's, so INVALID_RECORD (not retriable), as Kafka's record readers answer. A timestamp beyond
    // what the log holds (2^53) or below -1 keeps its reason: INVALID_TIMESTAMP.
    const records = await recordsOf(ctx, batch, budget).catch((err: unknown) => {
      if (err instanceof RecordBatchError && err.reason !== 'unsupported_compression' && err.reason !== 'timestamp_out_of_range') {
        throw new TributaryError('invalid_batch', { reason: `records: ${err.message}` });
      }
      throw err;
    });
    if (records.length === 0 || records.length !== batch.recordCount) throw new TributaryError('invalid_batch', { reason: 'record count does not match the records' });
    if (idempotent && txnId === null) {
      for (let i = 0; i < records.length; i++) Object.assign(records[i]!, { producerId: idempotent.producerId, epoch: idempotent.epoch, sequence: idempotent.firstSequence + i });
    }
    return {
      start: async () => {
        try {
          // Synchronous up to the append call, so appends start in the order start() is called.
          const leaderEpoch = leaderGate(ctx, partition, acks);
          const appending =
            txnId !== null && idempotent
              ? // Only into the id's open transaction at the batch's epoch, once the partition is durably added to it.
                transactionalAppend(ctx, txnId, idempotent satisfies TransactionalBatch, partition, records, leaderEpoch)
              : idempotent
                ? partition.appendIdempotent(records, idempotent)
                : partition.append(records);
          const appended = await appending;
          // Counted once appended, as on the main port: a retry answered as a duplicate adds nothing.
          if (!(appended as { duplicate?: boolean }).duplicate) countIn(ctx, partition.topic, records);
          await acknowledged(ctx, partition, appended.lastOffset, acks, leaderEpoch);
          return { index, errorCode: 0, baseOffset: appended.baseOffset, logAppendTimeMs: -1, logStartOffset: partition.earliest, recordErrors: [], errorMessage: null };
        } catch (err) {
          return failed(index, err);
        }
      },
    };
  } catch (err) {
    return { error: failed(index, err) };
  }
}

export const produceHandler = handler(apiByKey(Produce.apiKey)!, async (ctx, _version, body) => {
  const acks = body.acks as number;
  const topics = body.topicData as KafkaStruct[];
  if (acks !== 0 && acks !== 1 && acks !== -1) {
    const code = kafkaErrorCode('INVALID_REQUIRED_ACKS');
    return {
      responses: topics.map((t) => ({
        name: t.name,
        partitionResponses: (t.partitionData as KafkaStruct[]).map((p) => ({ ...failed(p.index as number, new Error('acks must be 0, 1 or -1')), errorCode: code })),
      })),
      throttleTimeMs: 0,
    };
  }
  const txnId = (body.transactionalId as string | null | undefined) ?? null;
  if (txnId !== null) {
    // The transaction permission on the id first (then each topic's write), as TXN_PUBLISH.
    // The id's owner too (docs/security.md, "Transactional ids"): its producer id and epoch can be guessed.
    const denied = txnRefusal(ctx, 'TXN_PUBLISH', txnId)?.denied;
    if (denied) {
      const code = kafkaErrorCode('TRANSACTIONAL_ID_AUTHORIZATION_FAILED');
      const responses = topics.map((t) => ({
        name: t.name,
        partitionResponses: (t.partitionData as KafkaStruct[]).map((p) => ({ ...failed(p.index as number, new Error(denied.message)), errorCode: code })),
      }));
      return acks === 0 ? new EndConnection('produce with acks 0 refused') : { responses, throttleTimeMs: 0 };
    }
  }
  // Decoded side by side; the appends then start in the connection's request order (kafka-connection.ts),
  // so a batch that took longer to decode does not land behind one sent after it.
  const turn = ctx.produceTurn();
  let results: PartitionResult[][];
  try {
    const budget = inflateBudget(ctx);
    const prepared = await Promise.all(
      topics.map((t) =>
        Promise.all((t.partitionData as KafkaStruct[]).map((p) => prepare(ctx, t.name as string, p.index as number, p.records as Buffer | null, acks, txnId, budget))),
      ),
    );
    await turn.ready;
    const started = prepared.map((list) => list.map((x) => ('start' in x ? x.start() : Promise.resolve(x.error))));
    turn.release();
    results = await Promise.all(started.map((list) => Promise.all(list)));
  } finally {
    turn.release();
  }
  const responses = topics.map((t, i) => ({ name: t.name, partitionResponses: results[i]! }));
  if (acks === 0) {
    let failedAny = false;
    for (const t of responses) {
      for (const p of t.partitionResponses) {
        if (p.errorCode === 0) continue;
        failedAny = true;
        ctx.broker.logger.warn({ topic: t.name, partition: p.index, error: p.errorMessage }, 'Kafka produce with acks 0 failed');
      }
    }
    // As Kafka: the client hears of the failure by the connection ending (and refreshes its metadata).
    return failedAny ? new EndConnection('produce with acks 0 failed') : null;
  }
  return { responses, throttleTimeMs: 0 };
});

function countIn(ctx: KafkaRequestContext, topic: string, records: RecordInput[]): void {
  let bytes = 0;
  for (const r of records) bytes += r.value.length;
  ctx.broker.metrics.countIn(topic, records.length, bytes);
}

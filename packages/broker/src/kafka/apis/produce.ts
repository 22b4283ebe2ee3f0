/**
 * Produce (v3+, RecordBatch v2): each partition's batch is validated (framing, magic, CRC-32C),
 * decompressed, and its records appended to the same partition log the main port writes, so the records
 * read the same through either port (docs/kafka.md, "Records"). Stored records are not RecordBatch v2 yet:
 * this is a conversion, measured by `npm run bench -- kafka`. An idempotent batch (producer id >= 0)
 * goes through the partition's producer state like Tributary's own: a retried batch is answered with its
 * original offsets, a gap is OUT_OF_ORDER_SEQUENCE_NUMBER, and only ids a broker handed out are taken.
 */
import { TributaryError } from 'tributary-protocol/errors.js';
import { MAX_PRODUCER_EPOCH, type RecordHeader, type RecordInput } from 'tributary-protocol/record.js';
import { splitRecordBatches } from 'tributary-protocol/record-batch/split.js';
import type { RecordBatchView } from 'tributary-protocol/record-batch/view.js';
import { apiByKey } from '../protocol/apis.js';
import { kafkaErrorCode } from '../protocol/error-codes.js';
import { Produce } from '../protocol/messages/produce.js';
import type { KafkaStruct } from '../protocol/schema.js';
import type { KafkaRequestContext } from '../context.js';
import { acknowledged, leaderGate } from './cluster-gate.js';
import { errorCodeOf, handler } from './handler.js';
import { isUserTopic } from './metadata.js';

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
  return { index, errorCode: errorCodeOf(err), baseOffset: -1, logAppendTimeMs: -1, logStartOffset: -1, recordErrors: [], errorMessage: message };
}

/** The records of one producer batch, as the log takes them (null values and headers become empty). */
async function recordsOf(ctx: KafkaRequestContext, batch: RecordBatchView): Promise<RecordInput[]> {
  const max = ctx.broker.config.maxRecordBytes;
  const data = batch.compressionType === 0 ? undefined : await batch.recordsDataAsync(Math.max(max * batch.recordCount, 1 << 20));
  const records: RecordInput[] = [];
  batch.forEachRecord((r) => {
    const key = r.key();
    const value = r.value() ?? EMPTY;
    if (value.length + (key?.length ?? 0) > max) throw new TributaryError('record_too_large', { size: value.length + (key?.length ?? 0), max });
    const headers: RecordHeader[] = r.headers().map((h) => ({ key: h.key, value: h.value ?? EMPTY }));
    records.push({ key, value, timestamp: Math.max(0, r.timestamp), headers });
  }, data);
  return records;
}

async function producePartition(ctx: KafkaRequestContext, topicName: string, index: number, bytes: Buffer | null, acks: number): Promise<PartitionResult> {
  try {
    if (!isUserTopic(topicName)) throw new TributaryError('topic_not_found', { topic: topicName });
    const partition = ctx.broker.topics.get(topicName).partition(index);
    const leaderEpoch = leaderGate(ctx, partition, acks);
    if (!bytes || bytes.length === 0) throw new TributaryError('invalid_batch', { reason: 'no records' });
    const split = splitRecordBatches(bytes);
    if (split.stop) throw split.stop.error;
    // Kafka's rule from Produce v3 on: one batch per partition.
    if (split.batches.length !== 1) throw new TributaryError('invalid_batch', { reason: `${split.batches.length} batches for one partition; one is allowed` });
    const batch = split.batches[0]!;
    if (batch.isControl) throw new TributaryError('invalid_batch', { reason: 'control batches are written by the broker' });
    if (batch.isTransactional) throw new TributaryError('transactional_id_not_found', { reason: 'transactions are not served on the Kafka port yet' });
    const records = await recordsOf(ctx, batch);
    if (records.length === 0 || records.length !== batch.recordCount) throw new TributaryError('invalid_batch', { reason: 'record count does not match the records' });
    let appended: { baseOffset: number; lastOffset: number };
    if (batch.producerId >= 0) {
      const producerId = String(batch.producerId);
      const epoch = batch.producerEpoch;
      if (epoch < 0 || epoch > MAX_PRODUCER_EPOCH) throw new TributaryError('invalid_batch', { reason: `producer epoch ${epoch}` });
      const issued = ctx.broker.producerIds.issued(producerId);
      if (issued !== true && !(await issued)) throw new TributaryError('unknown_producer_id', { producerId });
      const first = batch.baseSequence;
      if (first < 0) throw new TributaryError('invalid_batch', { reason: 'an idempotent batch without a base sequence' });
      for (let i = 0; i < records.length; i++) Object.assign(records[i]!, { producerId, epoch, sequence: first + i });
      appended = await partition.appendIdempotent(records, { producerId, epoch, firstSequence: first, lastSequence: first + records.length - 1 });
    } else {
      appended = await partition.append(records);
    }
    await acknowledged(ctx, partition, appended.lastOffset, acks, leaderEpoch);
    return { index, errorCode: 0, baseOffset: appended.baseOffset, logAppendTimeMs: -1, logStartOffset: partition.earliest, recordErrors: [], errorMessage: null };
  } catch (err) {
    return failed(index, err);
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
  if (body.transactionalId !== null && body.transactionalId !== undefined) {
    const code = kafkaErrorCode('TRANSACTIONAL_ID_AUTHORIZATION_FAILED');
    const responses = topics.map((t) => ({
      name: t.name,
      partitionResponses: (t.partitionData as KafkaStruct[]).map((p) => ({ ...failed(p.index as number, new Error('transactions are not served on the Kafka port yet')), errorCode: code })),
    }));
    return acks === 0 ? null : { responses, throttleTimeMs: 0 };
  }
  // Partitions in request order; each appends as soon as it is decoded (their logs are independent).
  const responses = await Promise.all(
    topics.map(async (t) => ({
      name: t.name,
      partitionResponses: await Promise.all((t.partitionData as KafkaStruct[]).map((p) => producePartition(ctx, t.name as string, p.index as number, p.records as Buffer | null, acks))),
    })),
  );
  if (acks === 0) {
    for (const t of responses) for (const p of t.partitionResponses) if (p.errorCode !== 0) ctx.broker.logger.warn({ topic: t.name, partition: p.index, error: p.errorMessage }, 'Kafka produce with acks 0 failed');
    return null;
  }
  return { responses, throttleTimeMs: 0 };
});

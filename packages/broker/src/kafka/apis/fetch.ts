/**
 * Fetch (v4+): records from the partition log written as one RecordBatch v2 per partition straight from
 * the stored bytes, no object per record (stored records are not RecordBatch v2 yet; docs/kafka.md). read_committed reads up to the last stable offset
 * without aborted records and markers, so no aborted-transaction list is needed; read_uncommitted reads up
 * to the high watermark, markers left out (clients skip control batches anyway; a read of nothing else
 * answers one, asRecordBatch). Offsets keep their gaps
 * (offset deltas), as compaction leaves them in Kafka. No fetch sessions: every response is a full one
 * (session id 0), which clients accept, and an incremental fetch is FETCH_SESSION_ID_NOT_FOUND. A
 * currentLeaderEpoch is checked as Kafka checks it (leaderEpochGate). Until `minBytes` are ready the
 * request waits, up to maxWaitMs, for more data in any of its partitions.
 */
import { TributaryError } from 'tributary-protocol/errors.js';
import { type LogRecord, RecordAttr } from 'tributary-protocol/record.js';
import { encodeControlBatch } from 'tributary-protocol/record-batch/control.js';
import { encodeRecordBatch } from 'tributary-protocol/record-batch/encode.js';
import { readBytesLimit } from '../../common/config.js';
import type { Isolation } from '../../partition/partition-types.js';
import type { Partition } from '../../partition/partition.js';
import type { StoredHeader } from '../../storage/record-codec.js';
import { apiByKey } from '../protocol/apis.js';
import { kafkaErrorCode } from '../protocol/error-codes.js';
import { Fetch } from '../protocol/messages/fetch.js';
import { saturatingInt64 } from '../protocol/reader.js';
import type { KafkaStruct } from '../protocol/schema.js';
import type { KafkaRequestContext } from '../context.js';
import { leaderEpochGate } from './cluster-gate.js';
import { errorCodeOf, handler, isIsolationLevel, refusal } from './handler.js';
import { isUserTopic } from './metadata.js';

const EMPTY: Buffer = Buffer.alloc(0);
/** A wire read's target for Fetch: one RecordBatch v2 (topic and extensions do not apply to it). */
const V2_TARGET = { topic: '', extensions: true, format: 'record_batch_v2' } as const;
/** Records per partition per response: a bound besides the byte limits. */
const MAX_RECORDS = 10_000;

interface Wanted {
  topic: string;
  partition: number;
  /** +-Infinity for an int64 beyond the safe integers: out of range, as any offset past the log. */
  offset: number;
  maxBytes: number;
  /** currentLeaderEpoch (v9+) when Kafka checks it: 0 or more. */
  epoch: number | undefined;
  /** Undefined when the topic or partition does not exist here, or may not be read. */
  log: Partition | undefined;
  /** The principal may not read the topic (TOPIC_AUTHORIZATION_FAILED). */
  refused?: Error;
}

/**
 * LogRecords (ascending offsets, maybe with gaps) as one batch; markers are left out. The batch ends at
 * `nextOffset` - 1, past the records the read left out after the last one returned (a transaction's
 * marker, which read_committed reads together with its records), so a client that goes by the batch's last
 * offset (librdkafka) continues at the end. A read from `from` that passed only markers or aborted records
 * answers a control batch at `nextOffset` - 1, which every client skips and continues after: with no batch
 * a read_committed reader stayed for good before an aborted transaction longer than one read.
 */
export function asRecordBatch(records: readonly LogRecord[], nextOffset: number, from: number): Buffer {
  const data = records.filter((r) => (r.attributes & RecordAttr.CONTROL) === 0);
  if (data.length === 0) {
    if (nextOffset <= from) return EMPTY;
    const timestamp = records.length > 0 ? records[records.length - 1]!.timestamp : Date.now();
    return encodeControlBatch({ type: 'COMMIT', coordinatorEpoch: 0, producerId: -1, producerEpoch: -1, baseOffset: nextOffset - 1, partitionLeaderEpoch: 0, timestamp });
  }
  const last = Math.max(nextOffset - 1, records[records.length - 1]!.offset);
  const base = data[0]!.offset;
  return encodeRecordBatch({
    baseOffset: base,
    partitionLeaderEpoch: 0,
    records: data.map((r) => ({
      key: r.key,
      // A Kafka producer's null value, stored empty (docs/kafka.md, "Produce").
      value: (r.attributes & RecordAttr.NULL_VALUE) !== 0 && r.value.length === 0 ? null : r.value,
      // A Kafka producer's null header value, stored empty with nullValue (record-codec.ts).
      headers: r.headers.map((h: StoredHeader) => (h.nullValue ? { key: h.key, value: null } : h)),
      timestamp: r.timestamp,
      offsetDelta: r.offset - base,
    })),
    lastOffsetDelta: last - base,
  });
}

function partitionOf(ctx: KafkaRequestContext, topic: string, partition: number): Partition | undefined {
  if (!isUserTopic(topic)) return undefined;
  return ctx.broker.topics.tryGet(topic)?.partitions[partition];
}

/** What readOne read, for the records and bytes out counters (counted for the answer sent only). */
interface ReadCount {
  records: number;
  bytes: number;
  /** The read stopped at MAX_RECORDS with more there: the response does not wait for `minBytes`. */
  capped: boolean;
}

/** The response's byte budget; `returned`: a partition already returned records (only the first may exceed it, KIP-74). */
interface Budget {
  bytes: number;
  returned: boolean;
}

async function readOne(ctx: KafkaRequestContext, w: Wanted, isolation: Isolation, budget: Budget, count: ReadCount): Promise<KafkaStruct> {
  const base = { partitionIndex: w.partition, preferredReadReplica: -1, abortedTransactions: isolation === 'read_committed' ? [] : null };
  try {
    if (w.refused) throw w.refused;
    const p = w.log;
    if (!p) throw new TributaryError('partition_not_found', { topic: w.topic, partition: w.partition });
    // Closed (the broker stopping) yet still listed: its waits end at once, so reading on would spin.
    if (p.isClosed) throw new TributaryError('shutting_down');
    leaderEpochGate(ctx, p, w.epoch);
    // As Kafka's log read: an offset outside the log is OFFSET_OUT_OF_RANGE even when the budget is spent.
    p.checkOffset(w.offset);
    let records: Buffer = EMPTY;
    // Not read (the response is full): its reader is still there, where the tail cache should keep.
    if (budget.bytes <= 0) p.log.noteRead(w.offset);
    else {
      const opts = { maxRecords: MAX_RECORDS, maxBytes: Math.max(1, Math.min(w.maxBytes, budget.bytes)), isolation };
      // The stored records written straight into the batch (no object per record or header), from the tail
      // cache or the segment files; a read of nothing but markers or aborted records (it answers a control
      // batch) and what the wire paths decline (a race with retention or compaction) take read().
      let wire = p.readWire(w.offset, opts, V2_TARGET) ?? (await p.readWireFromDisk(w.offset, opts, V2_TARGET));
      if (wire && wire.count === 0) wire = null;
      let nextOffset: number;
      let returned: boolean;
      if (wire) {
        records = wire.frame;
        nextOffset = wire.nextOffset;
        returned = true;
        count.records = wire.count;
        count.bytes = wire.valueBytes;
      } else {
        const read = await p.read(w.offset, opts);
        records = asRecordBatch(read.records, read.nextOffset, w.offset);
        nextOffset = read.nextOffset;
        returned = read.records.length > 0;
        for (const r of read.records) {
          if ((r.attributes & RecordAttr.CONTROL) !== 0) continue;
          count.records++;
          count.bytes += r.value.length;
        }
      }
      // A read returns at least one record; past the first partition that returned some, one that does not
      // fit what is left of the budget is left for the next fetch, as Kafka does.
      if (budget.returned && records.length > budget.bytes) {
        count.records = 0;
        count.bytes = 0;
        return { ...base, errorCode: 0, highWatermark: p.highWatermark, lastStableOffset: p.lastStableOffset, logStartOffset: p.earliest, records: EMPTY };
      }
      budget.bytes -= records.length;
      if (returned) budget.returned = true;
      count.capped = nextOffset - w.offset >= MAX_RECORDS && nextOffset < (isolation === 'read_committed' ? p.lastStableOffset : p.highWatermark);
    }
    return { ...base, errorCode: 0, highWatermark: p.highWatermark, lastStableOffset: p.lastStableOffset, logStartOffset: p.earliest, records };
  } catch (err) {
    return { ...base, errorCode: errorCodeOf(err), highWatermark: -1, lastStableOffset: -1, logStartOffset: -1, records: EMPTY };
  }
}

/**
 * Resolves once any partition has data past `from` (its offset at first, then the end of what was read),
 * the wait ends or the connection closes.
 */
async function waitForAny(ctx: KafkaRequestContext, wanted: Wanted[], from: number[], isolation: Isolation, waitMs: number): Promise<void> {
  const stop = new AbortController();
  const onClose = () => stop.abort();
  ctx.signal.addEventListener('abort', onClose, { once: true });
  try {
    const waits = wanted.flatMap((w, i) => (w.log ? [w.log.waitForData(from[i]!, waitMs, stop.signal, isolation)] : []));
    if (waits.length > 0) await Promise.race(waits);
  } finally {
    stop.abort();
    ctx.signal.removeEventListener('abort', onClose);
  }
}

export const fetchHandler = handler(apiByKey(Fetch.apiKey)!, async (ctx, _version, body) => {
  // Kafka's full fetches have session epoch 0 (open a session) or -1 (none); any other continues a session,
  // and this broker hands none out (session id 0 in every answer): FETCH_SESSION_ID_NOT_FOUND at once, as
  // Kafka answers a session it does not have. The client then starts over with a full fetch.
  const sessionEpoch = body.sessionEpoch as number | undefined;
  if (sessionEpoch !== undefined && sessionEpoch !== 0 && sessionEpoch !== -1) {
    return { throttleTimeMs: 0, errorCode: kafkaErrorCode('FETCH_SESSION_ID_NOT_FOUND'), sessionId: 0, responses: [] };
  }
  // Kafka knows isolation levels 0 and 1 only (IsolationLevel.forId): any other is refused, not read as 0
  // (docs/kafka.md, "What is served").
  if (!isIsolationLevel(body.isolationLevel)) {
    const code = kafkaErrorCode('INVALID_REQUEST');
    const responses = (body.topics as KafkaStruct[]).map((t) => ({
      topic: t.topic,
      partitions: (t.partitions as KafkaStruct[]).map((p) => ({ partitionIndex: p.partition, errorCode: code, highWatermark: -1, lastStableOffset: -1, logStartOffset: -1, abortedTransactions: null, preferredReadReplica: -1, records: EMPTY })),
    }));
    return { throttleTimeMs: 0, errorCode: code, sessionId: 0, responses };
  }
  const isolation: Isolation = body.isolationLevel === 1 ? 'read_committed' : 'read_uncommitted';
  // The client's sizes are bounded as CONSUME's are: a response must fit a frame with room for its headers.
  const cap = readBytesLimit(ctx.broker.config.maxFrameBytes);
  const wanted: Wanted[] = [];
  for (const t of body.topics as KafkaStruct[]) {
    const topic = t.topic as string;
    const denied = ctx.authorize('CONSUME', topic);
    const refused = denied ? refusal(denied, 'topic') : undefined;
    for (const p of t.partitions as KafkaStruct[]) {
      const partition = p.partition as number;
      const log = refused ? undefined : partitionOf(ctx, topic, partition);
      // Kafka checks a currentLeaderEpoch of 0 or more (FetchRequest.optionalEpoch).
      const requested = p.currentLeaderEpoch as number | undefined;
      const epoch = requested !== undefined && requested >= 0 ? requested : undefined;
      wanted.push({ topic, partition, offset: saturatingInt64(p.fetchOffset as bigint), maxBytes: Math.min(p.partitionMaxBytes as number, cap), epoch, log, ...(refused ? { refused } : {}) });
    }
  }
  const maxBytes = Math.min(Math.max(1, body.maxBytes as number), cap);
  // One budget over the response, partitions read one after another: once it is spent the rest read nothing.
  let counts: ReadCount[] = [];
  const readAll = async () => {
    const budget: Budget = { bytes: maxBytes, returned: false };
    const out: KafkaStruct[] = [];
    counts = wanted.map(() => ({ records: 0, bytes: 0, capped: false }));
    for (let i = 0; i < wanted.length; i++) {
      const w = wanted[i]!;
      // Looked up again for every read of a waiting Fetch: a topic deleted meanwhile is gone, as in Kafka,
      // rather than read from its closed partition (whose waits end at once) until the wait is over.
      if (!w.refused) w.log = partitionOf(ctx, w.topic, w.partition);
      out.push(await readOne(ctx, w, isolation, budget, counts[i]!));
    }
    return out;
  };
  let results = await readAll();
  const waitMs = Math.min(Math.max(0, body.maxWaitMs as number), ctx.broker.config.maxWaitMs);
  // Answered once there are `minBytes` (at most the response's budget), an error, or the wait is over;
  // minBytes 0 (or less) asks for an answer at once, as Kafka gives it, even an empty one.
  const minBytes = (body.minBytes as number) <= 0 ? 0 : Math.min(body.minBytes as number, maxBytes);
  // Also when a read stopped at its record cap with more there: waiting could not bring more into this response.
  const enough = () => results.some((r) => r.errorCode !== 0) || counts.some((c) => c.capped) || results.reduce((n, r) => n + (r.records as Buffer).length, 0) >= minBytes;
  // Monotonic: a step of the wall clock must not stretch or cut the wait.
  const deadline = performance.now() + waitMs;
  while (!enough() && !ctx.signal.aborted) {
    const left = deadline - performance.now();
    if (left <= 0) break;
    // Wait for data past what was read: the end each partition's read reached (its HWM, or its LSO).
    const from = results.map((r, i) => Math.max(wanted[i]!.offset, Number(isolation === 'read_committed' ? r.lastStableOffset : r.highWatermark)));
    await waitForAny(ctx, wanted, from, isolation, left);
    // The rights again after the wait, as a long-poll CONSUME's: a SIGHUP may have withdrawn them, and the
    // records written since are not for a principal that may no longer read the topic.
    for (const w of wanted) {
      const denied = w.refused ? undefined : ctx.authorize('CONSUME', w.topic);
      if (denied) w.refused = refusal(denied, 'topic');
    }
    results = await readAll();
  }
  const metrics = ctx.broker.metrics;
  wanted.forEach((w, i) => {
    const c = counts[i]!;
    if (c.records === 0) return;
    metrics.recordsOut.inc({ topic: w.topic }, c.records);
    metrics.bytesOut.inc({ topic: w.topic }, c.bytes);
  });
  const byTopic = new Map<string, KafkaStruct[]>();
  wanted.forEach((w, i) => {
    let list = byTopic.get(w.topic);
    if (!list) byTopic.set(w.topic, (list = []));
    list.push(results[i]!);
  });
  return { throttleTimeMs: 0, errorCode: 0, sessionId: 0, responses: [...byTopic].map(([topic, partitions]) => ({ topic, partitions })) };
});

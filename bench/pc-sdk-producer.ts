/**
 * SDK producer worker of the produce-consume benchmark (a child process): the same workload as
 * pc-producer.ts, through the SDK's `Producer` instead of raw frames.
 *
 *   node dist/bench/pc-sdk-producer.js --host H --port P --topic T --partitions 12 --count N --size S
 *        --chunk C --in-flight W [--linger-ms 0] [--max-batch-bytes 262144]
 *        [--max-in-flight-per-partition 16] [--partitioning chunk|record] [--messages fresh|reused]
 *        [--metadata records|runs] [--warmup N --warmup-topic T]
 *
 * Sends N records as `send({ topic, messages })` calls of C messages each, keeping up to W sends
 * unresolved (pipelined); acks=1. `--partitioning chunk` (default) gives every message of a send the
 * same explicit partition, round-robin by send, as the raw producer does by batch; `record` leaves the
 * partition to the SDK (round-robin per record). Every payload carries its record id and the time its
 * send() was called (see pc-payload), so the end-to-end latency includes the SDK's lingering.
 * `--messages fresh` (default) builds new value Buffers and message objects for every send(), as an
 * application does; `reused` prebuilds one chunk of them per send() in flight before the clock starts and
 * stamps ids and time into one whose previous send() settled (the SDK's contract: a Buffer may change once
 * its send's promise settles), the way the raw producer patches its pre-encoded frame, so the two
 * producers' CPU per record compare the clients alone.
 * `--metadata runs` sends with `{ metadata: 'runs' }`: each send() resolves with one SendRun per run of
 * records instead of one RecordMetadata per message (`records`, default); the acknowledged records are
 * counted from the runs, which must cover the send's messages in order.
 * `--warmup N` first sends N records the same way to --warmup-topic and waits for their acks, reports
 * {"event":"warm"} and waits for `go` on stdin before the clock and the CPU count start (worker-args.ts):
 * the client's hot code is then compiled, its connection open and its buffers grown.
 * Reports one JSON line on stdout: {"event":"result", records, elapsedMs, recordsPerSec, ackP50Ms, ...},
 * where ack latency is per send() (call to resolve).
 */
import { MAX_IDEMPOTENT_IN_FLIGHT, Producer, type ProducerMessage, type RecordMetadata, type SendRun } from 'tributary-client/producer.js';
import { WARMUP_FLAGS, waitForGo, workerArgs } from './worker-args.js';
import { nowMs, percentile, report, selfCpuMs } from './lib.js';
import { PAYLOAD_HEADER_BYTES, writePayloadHeader } from './pc-payload.js';

const args = workerArgs('pc-sdk-producer', {
  chunk: { type: 'string', default: '500' },
  'in-flight': { type: 'string', default: '64' },
  'linger-ms': { type: 'string', default: '0' },
  'max-batch-bytes': { type: 'string', default: String(256 * 1024) },
  'max-in-flight-per-partition': { type: 'string', default: '16' },
  partitioning: { type: 'string', default: 'chunk' },
  messages: { type: 'string', default: 'fresh' },
  idempotent: { type: 'string', default: 'false' },
  metadata: { type: 'string', default: 'records' },
  ...WARMUP_FLAGS,
}, 1);
const { a, int } = args;
// Annotated: a call through it then ends control flow, as the function it replaces did.
const fail: (msg: string) => never = args.fail;



const host = a.host!;
const port = int('port', a.port);
const topic = a.topic!;
const partitions = int('partitions', a.partitions);
/** Records of the pass under way: the warm-up's, then the measured --count. */
let total = int('count', a.count);
const measuredTotal = total;
const warmupTotal = int('warmup', a.warmup, 0);
const warmupTopic = a['warmup-topic'];
if (warmupTotal > 0 && !warmupTopic) fail('--warmup needs --warmup-topic');
const size = int('size', a.size, PAYLOAD_HEADER_BYTES);
const chunk = Math.min(int('chunk', a.chunk), Math.max(total, warmupTotal));
const window = int('in-flight', a['in-flight']);
const lingerMs = int('linger-ms', a['linger-ms'], 0);
const maxBatchBytes = int('max-batch-bytes', a['max-batch-bytes']);
const idempotent = a.idempotent === 'true';
if (!idempotent && a.idempotent !== 'false') fail(`--idempotent must be true or false (got ${a.idempotent})`);
// An idempotent producer keeps at most MAX_IDEMPOTENT_IN_FLIGHT batches in flight per partition.
const maxInFlightPerPartition = Math.min(int('max-in-flight-per-partition', a['max-in-flight-per-partition']), idempotent ? MAX_IDEMPOTENT_IN_FLIGHT : Infinity);
const partitioning = a.partitioning;
if (partitioning !== 'chunk' && partitioning !== 'record') fail(`--partitioning must be chunk or record (got ${partitioning})`);
const reuse = a.messages === 'reused';
if (!reuse && a.messages !== 'fresh') fail(`--messages must be fresh or reused (got ${a.messages})`);
if (a.metadata !== 'records' && a.metadata !== 'runs') fail(`--metadata must be records or runs (got ${a.metadata})`);
const metadata: 'records' | 'runs' = a.metadata;

// Room for every send in flight (plus slack) so send() never waits on the buffer.
const maxBufferedBytes = Math.max(32 * 1024 * 1024, 2 * window * chunk * (size + 64));

const producer = new Producer({
  brokers: [`${host}:${port}`],
  clientId: 'bench-producer',
  acks: 1,
  lingerMs,
  maxBatchBytes,
  maxInFlightPerPartition,
  maxBufferedBytes,
  idempotent,
});
producer.on('retry', (e) => process.stderr.write(`pc-sdk-producer: retry partition ${e.partition} attempt ${e.attempt}: ${e.error.message}\n`));

/** A filler template; each send copies it and stamps ids and the send time. */
const filler = Buffer.alloc(size * chunk);
for (let i = 0; i < chunk; i++) filler.fill(0x61 + (i % 26), i * size, (i + 1) * size);

function buildMessages(k: number, sentAt: number): ProducerMessage[] {
  const first = k * chunk;
  const n = Math.min(chunk, total - first);
  const block = Buffer.allocUnsafe(n * size);
  filler.copy(block, 0, 0, n * size);
  const partition = partitioning === 'chunk' ? k % partitions : undefined;
  const messages = new Array<ProducerMessage>(n);
  for (let i = 0; i < n; i++) {
    writePayloadHeader(block, i * size, first + i, sentAt);
    const value = block.subarray(i * size, (i + 1) * size);
    messages[i] = partition === undefined ? { value } : { value, partition };
  }
  return messages;
}

/** `--messages reused`: one prebuilt chunk per send() in flight; a slot is free once its send settled. */
interface Slot {
  block: Buffer;
  messages: ProducerMessage[];
}
const freeSlots: Slot[] = [];
if (reuse) {
  for (let s = 0; s < window; s++) {
    const block = Buffer.from(filler);
    const messages: ProducerMessage[] = [];
    for (let i = 0; i < chunk; i++) messages.push({ value: block.subarray(i * size, (i + 1) * size) });
    freeSlots.push({ block, messages });
  }
}

function stampMessages(slot: Slot, k: number, sentAt: number): ProducerMessage[] {
  const first = k * chunk;
  const n = Math.min(chunk, total - first);
  const partition = partitioning === 'chunk' ? k % partitions : undefined;
  const messages = n === chunk ? slot.messages : slot.messages.slice(0, n);
  for (let i = 0; i < n; i++) {
    writePayloadHeader(slot.block, i * size, first + i, sentAt);
    messages[i]!.partition = partition;
  }
  return messages;
}

let nextChunk = 0;
let pending = 0;
let ackedRecords = 0;
let ackedSends = 0;
let chunks = 0;
let passTopic = topic;
let ackLatency = new Float64Array(0);
let passDone: () => void = () => {};

/** Sends `count` records to `to` as the workload does; resolves once every one is acknowledged. */
function pass(to: string, count: number): Promise<void> {
  total = count;
  chunks = Math.ceil(count / chunk);
  passTopic = to;
  nextChunk = 0;
  pending = 0;
  ackedRecords = 0;
  ackedSends = 0;
  ackLatency = new Float64Array(chunks);
  return new Promise<void>((resolve) => {
    passDone = resolve;
    pump();
  });
}

function pump(): void {
  while (pending < window && nextChunk < chunks) {
    const k = nextChunk++;
    const sentAt = nowMs();
    const slot = reuse ? freeSlots.pop()! : undefined;
    const messages = slot ? stampMessages(slot, k, sentAt) : buildMessages(k, sentAt);
    pending++;
    const sent: Promise<RecordMetadata[] | SendRun[]> = producer.send({ topic: passTopic, messages }, { metadata });
    const n = messages.length;
    sent.then(
      (meta) => {
        pending--;
        if (slot) freeSlots.push(slot);
        ackLatency[ackedSends++] = nowMs() - sentAt;
        ackedRecords += metadata === 'runs' ? runsCount(meta as SendRun[], k) : meta.length;
        if (meta.length === 0 || (metadata === 'records' && meta.length !== n)) fail(`send of records ${k * chunk}.. resolved with ${meta.length} of ${n} metadata`);
        if (ackedRecords >= total) passDone();
        else pump();
      },
      (err: Error) => fail(`send of records ${k * chunk}.. to ${passTopic} failed: ${err.message}`),
    );
  }
}

/** The records a send's runs cover; fails unless they cover its messages once each, in order. */
function runsCount(runs: SendRun[], k: number): number {
  let next = 0;
  for (const r of runs) {
    if (r.first !== next || r.count < 1) fail(`send of records ${k * chunk}..: run at ${r.first} (${r.count}) where ${next} was due`);
    next += r.count;
  }
  return next;
}

if (warmupTotal > 0) {
  await pass(warmupTopic!, warmupTotal);
  report({ event: 'warm', records: ackedRecords });
  await waitForGo();
}
// Without a warm-up, METADATA and connecting to the leader happen in the first send(), inside the
// measurement (a few ms).
const cpuAtStart = selfCpuMs();
const startedAt = nowMs();
await pass(topic, measuredTotal);
const elapsedMs = nowMs() - startedAt;
const cpuMs = selfCpuMs() - cpuAtStart;
const lat = ackLatency.subarray(0, ackedSends).sort();
await producer.close();
report({
  event: 'result',
  cpuMs,
  target: a.target,
  client: 'sdk',
  records: ackedRecords,
  sends: ackedSends,
  elapsedMs,
  recordsPerSec: (ackedRecords / elapsedMs) * 1000,
  ackP50Ms: percentile(lat, 50),
  ackP99Ms: percentile(lat, 99),
  ackMaxMs: lat.length > 0 ? lat[lat.length - 1] : null,
});
process.exitCode = 0;

/**
 * SDK consumer worker of the produce-consume benchmark (a child process): the same accounting as
 * pc-consumer.ts, reading through the SDK's `Consumer` as the only member of a fresh consumer group.
 *
 *   node dist/bench/pc-sdk-consumer.js --host H --port P --topic T --partitions 12 --count N --size S
 *        [--mode poll|stream] [--fetch-records 5000] [--fetch-bytes 4194304] [--max-wait-ms 500]
 *        [--concurrency 12] [--linger-ms 300] [--grace-ms 10000]
 *
 * `run({ eachBatch })` with `partitionsConsumedConcurrently`, `autoOffsetReset: 'earliest'`, auto-commit;
 * every message's id is checked against a bitmap of N ids (missing, duplicate, foreign), offsets must
 * follow each other per partition, and the end-to-end latency (receive time − send time in the
 * payload) of every record is recorded. Each batch is marked processed with resolveOffset.
 *
 * `--warmup N --warmup-topic T`: reads N records of T first, through a consumer (and group) of their own
 * that leaves before the measured one joins.
 * Prints {"event":"ready"} once the group assigned all partitions, then one {"event":"result",...}
 * line when all N ids arrived (plus `linger-ms` to catch late duplicates), or when `done` was written
 * to stdin and nothing new arrived for `grace-ms`.
 */
import { Consumer, type EachBatchPayload } from 'tributary-client/consumer.js';
import { WARMUP_FLAGS, workerArgs } from './worker-args.js';
import { nowMs, report, selfCpuMs } from './lib.js';
import { PAYLOAD_HEADER_BYTES } from './pc-payload.js';
import { Tally, finishAfterProducer } from './pc-tally.js';

const args = workerArgs('pc-sdk-consumer', {
  mode: { type: 'string', default: 'poll' },
  'fetch-records': { type: 'string', default: '5000' },
  'fetch-bytes': { type: 'string', default: String(4 * 1024 * 1024) },
  'max-wait-ms': { type: 'string', default: '500' },
  concurrency: { type: 'string', default: '12' },
  'linger-ms': { type: 'string', default: '300' },
  'grace-ms': { type: 'string', default: '10000' },
  ...WARMUP_FLAGS,
}, 0);
const { a, int } = args;
// Annotated: a call through it then ends control flow, as the function it replaces did.
const fail: (msg: string) => never = args.fail;



const host = a.host!;
const port = int('port', a.port, 1);
const topic = a.topic!;
const partitions = int('partitions', a.partitions, 1);
const total = int('count', a.count, 1);
const size = int('size', a.size, PAYLOAD_HEADER_BYTES);
const mode = a.mode;
if (mode !== 'stream' && mode !== 'poll') fail(`--mode must be stream or poll (got ${mode})`);
const consumerMode: 'stream' | 'poll' = mode;
const fetchRecords = Math.min(int('fetch-records', a['fetch-records'], 1), 10_000);
const fetchBytes = int('fetch-bytes', a['fetch-bytes'], 1);
const maxWaitMs = int('max-wait-ms', a['max-wait-ms']);
const concurrency = int('concurrency', a.concurrency, 1);
const lingerMs = int('linger-ms', a['linger-ms']);
const graceMs = int('grace-ms', a['grace-ms']);
const warmupTotal = int('warmup', a.warmup);
const warmupTopic = a['warmup-topic'];
if (warmupTotal > 0 && !warmupTopic) fail('--warmup needs --warmup-topic');

const tally = new Tally(total, size, partitions);
tally.onHalf = (records) => report({ event: 'half', records });
let finished = false;

/** Counts a batch's records into `into` and marks it processed; true once `into` holds every id. */
function countBatch({ partition, messages, resolveOffset }: EachBatchPayload, into: Tally): boolean {
  const t = nowMs();
  if (messages.length === 0) return false;
  into.beginBatch(t);
  for (let i = 0; i < messages.length; i++) {
    const m = messages[i]!;
    into.record(t, m.value, partition, m.offset);
  }
  resolveOffset(messages[messages.length - 1]!.offset);
  return into.endBatch(t);
}

function onBatch(b: EachBatchPayload): void {
  if (countBatch(b, tally)) setTimeout(finish, lingerMs);
}

/** A Consumer of `t` alone in a fresh group, as the workload reads. */
function makeConsumer(t: string): Consumer {
  return new Consumer({
    brokers: [`${host}:${port}`],
    groupId: `bench-${t}-${process.pid}-${Date.now()}`,
    topic: t,
    clientId: 'bench-consumer',
    autoOffsetReset: 'earliest',
    mode: consumerMode,
    maxBatchRecords: fetchRecords,
    maxBatchBytes: fetchBytes,
    maxWaitMs,
    partitionsConsumedConcurrently: concurrency,
    autoCommit: true,
  });
}

if (warmupTotal > 0) {
  // --warmup: the warm-up topic's records first, through a consumer of their own that leaves before the
  // measured one joins, so the measured pass runs on compiled code.
  const warm = new Tally(warmupTotal, size, partitions);
  const c = makeConsumer(warmupTopic!);
  await new Promise<void>((resolve, reject) => {
    c.run({
      eachBatch: (b: EachBatchPayload) => {
        if (countBatch(b, warm)) resolve();
      },
    }).catch(reject);
  }).catch((err: Error) => fail(`warm-up run failed: ${err.message}`));
  await c.close();
}

const consumer = makeConsumer(topic);
consumer.on('crash', (e) => {
  if (finished) return;
  if (e.fatal) fail(`consumer crashed: ${e.error.message}`);
  process.stderr.write(`pc-sdk-consumer: ${e.error.message}\n`);
});

let cpuAtReady = 0;
const assigned = new Set<number>();
consumer.on('partitions.assigned', (e) => {
  for (const p of e.partitions) assigned.add(p);
  if (assigned.size === partitions && cpuAtReady === 0) {
    cpuAtReady = selfCpuMs();
    report({ event: 'ready', mode });
  }
});
consumer.on('partitions.revoked', (e) => {
  if (!finished) fail(`partitions revoked during the run: ${e.partitions.join(',')}`);
});

function finish(): void {
  if (finished) return;
  finished = true;
  const stats = tally.stats();
  // Taken after the sort in stats(), as pc-consumer does, so the CPU columns compare like for like.
  const cpuMs = selfCpuMs() - cpuAtReady;
  report({
    event: 'result',
    cpuMs,
    target: 'broker',
    client: 'sdk',
    mode,
    ...stats,
  });
  process.exitCode = 0;
  // A clean leave (final commit, LEAVE_GROUP) after the report, bounded; stdin may keep the loop alive.
  const hard = setTimeout(() => process.exit(0), 5000);
  void consumer.close().finally(() => {
    clearTimeout(hard);
    process.exit(0);
  });
}

finishAfterProducer(tally, graceMs, () => finished, finish);

consumer.run({ eachBatch: onBatch }).catch((err: Error) => {
  if (!finished) fail(`run failed: ${err.message}`);
});

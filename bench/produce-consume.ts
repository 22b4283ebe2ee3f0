/**
 * produce-consume: one producer process and one consumer process against a broker process, and the same
 * workload through a zero-logic relay (bench/relay.ts), in the same run.
 *
 * Default workloads: 1,000,000 records of 100 B and 200,000 of 1 KiB, 12 partitions, broker defaults
 * (flush=always: acks wait for the fsync group commit). For each workload and target it prints
 *   records/s, MB/s      consumer side, first to last record received (MB = 10^6 payload bytes)
 *   p50/p99 ms           end-to-end latency of every record: consumer receive time − producer send time
 *   missing, duplicates  from the consumer's bitmap of the N record ids
 *   producer rec/s       acked rate (first send to last ack) and per-batch ack latency p50/p99
 *   cpu us/rec           CPU time per record of the server process (broker or relay, all threads, from
 *                        /proc), the producer and the consumer: steadier than rates on a busy machine
 * then `ratio broker(raw)/relay` and `broker(sdk)/relay` records/s (medians with --repeat). Missing,
 * duplicate or foreign records, offset gaps, a log holding more or fewer than N records, or a failed
 * worker fail the run (exit 1).
 *
 * The broker target runs with two clients (`--client raw|sdk|both`, default both): `raw` is
 * pc-producer/pc-consumer (hand-built frames, one STREAM connection per partition), `sdk` is
 * pc-sdk-producer/pc-sdk-consumer (the SDK's Producer with pipelined send() calls, and a Consumer in a
 * fresh group with run({ eachBatch })). The relay does not speak the protocol: it is always raw.
 */
import { parseArgs } from 'node:util';
import path from 'node:path';
import { Connection } from 'tributary-protocol/connection.js';
import {
  BENCH_DIR,
  type Child,
  fmtFixed,
  fmtInt,
  installCleanupHandlers,
  keepTempDir,
  makeTempDir,
  median,
  procCpuMs,
  procCpuSplitMs,
  removeTempDir,
  spawnNode,
  splitArgs,
  startBroker,
  table,
} from './lib.js';
import {
  type Client,
  type ConsumerReport,
  type Options,
  type ProducerReport,
  type Target,
  type Variant,
  type Workload,
  WARMUP_TOPIC,
  producerReport,
  startConsumer,
  startProducer,
  variantTarget,
  withTimeout,
} from './pc-clients.js';

export const description = 'producer + consumer processes against the broker and a zero-logic relay (records/s, MB/s, e2e latency)';


interface RunResult {
  variant: Variant;
  target: Target;
  producer?: ProducerReport;
  consumer?: ConsumerReport;
  /** CPU ms (all threads) the broker or relay process used from the measured pass's start to the consumer's report. */
  serverCpuMs?: number;
  /** Of serverCpuMs, the system (kernel) time. */
  serverSystemMs?: number;
  /** The server's CPU from the moment the consumer had half the records or more to the end, and the records left then. */
  serverCpuLateMs?: number;
  lateRecords?: number;
  /** The same for the warm-up pass (--warmup records), not in the figures above. */
  warmupCpuMs?: number;
  /** Broker only: records in the log after the run (sum of the partitions' log end offsets). */
  logRecords?: number;
  error?: string;
  problems: string[];
}

const TOPIC = 'bench';
const DEFAULT_WORKLOADS: Array<{ size: number; count: number }> = [
  { size: 100, count: 1_000_000 },
  { size: 1024, count: 200_000 },
];
/** The least default warm-up: this much payload, or MIN_WARMUP_RECORDS if fewer (see parse). */
const MIN_WARMUP_BYTES = 300_000_000;
const MIN_WARMUP_RECORDS = 3_000_000;

const USAGE = `usage: bench produce-consume [options]

  --records-scale <f>      multiply record counts (e.g. 0.1 for a quick run)        [1]
  --size <bytes>           only this record size (default workloads: 100 and 1024)
  --count <n>              record count (before scaling) for every workload
  --batch <n>              records per produced batch     [500 for <= 256 B, else 100]
  --partitions <n>                                                                 [12]
  --connections <n>        producer connections                                     [4]
  --in-flight <n>          unacknowledged batches per producer connection          [16]
  --raw-frames <f>         raw producer: template (patched copies of one pre-encoded frame) or
                           encoded (encodeBatch per send from record objects, as a
                           hand-written wire client does)                     [template]
  --fetch-records <n>      STREAM batch= (records per pushed frame)              [5000]
  --fetch-bytes <n>        STREAM max_bytes=                                  [4194304]
  --targets <list>         broker,relay                                   [broker,relay]
  --client <c>             broker client: raw, sdk or both (the relay is always raw)  [both]
  --sdk-mode <m>           SDK consumer: poll (CONSUME long polls) or stream (STREAM push)  [poll]
  --sdk-in-flight <n>      SDK producer: send() calls of one batch each in flight   [64]
  --sdk-linger-ms <n>      SDK producer lingerMs (the SDK's default)                [0]
  --sdk-max-batch-bytes <n>  SDK producer maxBatchBytes                         [262144]
  --sdk-max-in-flight-per-partition <n>  SDK producer                             [16]
  --sdk-partitioning <p>   chunk: each send() to one partition, round-robin by send (as raw);
                           record: no explicit partition (SDK round-robin per record)  [chunk]
  --sdk-messages <m>       SDK producer: fresh (new Buffers and message objects per send()) or
                           reused (a pool prebuilt before the clock, stamped per send() once
                           the send that last used it settled, as the raw client patches its
                           pre-encoded frame)                                       [fresh]
  --sdk-metadata <m>       SDK producer: records (send() resolves with one RecordMetadata per
                           message) or runs (metadata: 'runs', one SendRun per run)  [records]
  --sdk-idempotent         SDK producer with idempotent: true (at most 5 batches in flight per partition)
  --sdk-concurrency <n>    SDK consumer partitionsConsumedConcurrently               [12]
  --broker-args "<args>"   extra 'broker start' flags, e.g. "--flush os"
  --broker-node-args "<a>" node flags for the broker, e.g. "--cpu-prof --cpu-prof-dir=/tmp/prof"
  --relay-node-args "<a>"  node flags for the relay
  --worker-node-args "<a>" node flags for the producer and consumer workers (all clients)
  --warmup <n>             records the measured producer and consumer send and read first, on
                           a topic of their own, before the clock (0: cold processes)
                           [as many as the measured pass, at least 300 MB or 3M records]
  --keep-data              keep the broker data dirs and relay files
  --timeout-s <n>          per-run timeout                                        [600]
  --repeat <n>             run each target n times (alternating); ratio of medians  [1]
  --verbose                echo child stderr
`;

/** Options whose values are flag lists ("--flush os"): glue `--opt value` into `--opt=value` for parseArgs. */
const PASSTHROUGH = new Set(['--broker-args', '--broker-node-args', '--relay-node-args', '--worker-node-args']);

function glueValues(argv: string[]): string[] {
  const out: string[] = [];
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i]!;
    if (PASSTHROUGH.has(a) && i + 1 < argv.length) out.push(`${a}=${argv[++i]}`);
    else out.push(a);
  }
  return out;
}

function parseOptions(argv: string[]): Options | string {
  const { values: v } = parseArgs({
    args: glueValues(argv),
    strict: true,
    options: {
      'records-scale': { type: 'string', default: '1' },
      size: { type: 'string' },
      count: { type: 'string' },
      batch: { type: 'string' },
      partitions: { type: 'string', default: '12' },
      connections: { type: 'string', default: '4' },
      'in-flight': { type: 'string', default: '16' },
      'raw-frames': { type: 'string', default: 'template' },
      'fetch-records': { type: 'string', default: '5000' },
      'fetch-bytes': { type: 'string', default: String(4 * 1024 * 1024) },
      targets: { type: 'string', default: 'broker,relay' },
      client: { type: 'string', default: 'both' },
      'sdk-mode': { type: 'string', default: 'poll' },
      'sdk-in-flight': { type: 'string', default: '64' },
      'sdk-linger-ms': { type: 'string', default: '0' },
      'sdk-max-batch-bytes': { type: 'string', default: String(256 * 1024) },
      'sdk-max-in-flight-per-partition': { type: 'string', default: '16' },
      'sdk-partitioning': { type: 'string', default: 'chunk' },
      'sdk-messages': { type: 'string', default: 'fresh' },
      'sdk-metadata': { type: 'string', default: 'records' },
      'sdk-idempotent': { type: 'boolean', default: false },
      'sdk-concurrency': { type: 'string', default: '12' },
      'broker-args': { type: 'string' },
      'broker-node-args': { type: 'string' },
      'relay-node-args': { type: 'string' },
      'worker-node-args': { type: 'string' },
      warmup: { type: 'string' },
      'keep-data': { type: 'boolean', default: false },
      'timeout-s': { type: 'string', default: '600' },
      repeat: { type: 'string', default: '1' },
      verbose: { type: 'boolean', default: false },
      help: { type: 'boolean', short: 'h', default: false },
    },
  });
  if (v.help) return '';
  const int = (name: string, s: string | undefined, min: number): number => {
    const n = Number(s);
    if (!Number.isSafeInteger(n) || n < min) throw new Error(`--${name} must be an integer >= ${min} (got ${s})`);
    return n;
  };
  const scale = Number(v['records-scale']);
  if (!(scale > 0)) throw new Error(`--records-scale must be a positive number (got ${v['records-scale']})`);
  const size = v.size === undefined ? undefined : int('size', v.size, 12);
  const count = v.count === undefined ? undefined : int('count', v.count, 1);
  const base = size === undefined ? DEFAULT_WORKLOADS : [{ size, count: DEFAULT_WORKLOADS.find((w) => w.size === size)?.count ?? 200_000 }];
  const workloads = base.map((w) => ({
    size: w.size,
    count: Math.max(1, Math.round((count ?? w.count) * scale)),
    batch: v.batch === undefined ? (w.size <= 256 ? 500 : 100) : int('batch', v.batch, 1),
    warmup: 0,
  }));
  // The warm-up is as long as the measured pass unless told, and at least MIN_WARMUP_BYTES of payload or
  // MIN_WARMUP_RECORDS, whichever is fewer (scaled as the pass): 50,000 records left a 1 KiB run short of
  // its steady state, and after 1M records of 100 B the broker's compiler threads were still busy
  // (bench/README.md).
  for (const w of workloads) {
    const least = Math.round(Math.min(MIN_WARMUP_RECORDS, Math.ceil(MIN_WARMUP_BYTES / w.size)) * scale);
    w.warmup = v.warmup === undefined ? Math.max(w.count, least) : int('warmup', v.warmup, 0);
  }
  const targets = (v.targets ?? '').split(',').map((t) => t.trim()).filter(Boolean);
  for (const t of targets) if (t !== 'broker' && t !== 'relay') throw new Error(`unknown target ${t} (broker, relay)`);
  if (targets.length === 0) throw new Error('--targets is empty');
  const client = v.client ?? 'both';
  if (client !== 'raw' && client !== 'sdk' && client !== 'both') throw new Error(`--client must be raw, sdk or both (got ${client})`);
  const clients: Client[] = client === 'both' ? ['raw', 'sdk'] : [client];
  const sdkMode = v['sdk-mode'];
  if (sdkMode !== 'stream' && sdkMode !== 'poll') throw new Error(`--sdk-mode must be stream or poll (got ${sdkMode})`);
  const sdkPartitioning = v['sdk-partitioning'];
  if (sdkPartitioning !== 'chunk' && sdkPartitioning !== 'record') throw new Error(`--sdk-partitioning must be chunk or record (got ${sdkPartitioning})`);
  const rawFrames = v['raw-frames'];
  if (rawFrames !== 'template' && rawFrames !== 'encoded') throw new Error(`--raw-frames must be template or encoded (got ${rawFrames})`);
  const sdkMessages = v['sdk-messages'];
  if (sdkMessages !== 'fresh' && sdkMessages !== 'reused') throw new Error(`--sdk-messages must be fresh or reused (got ${sdkMessages})`);
  const sdkMetadata = v['sdk-metadata'];
  if (sdkMetadata !== 'records' && sdkMetadata !== 'runs') throw new Error(`--sdk-metadata must be records or runs (got ${sdkMetadata})`);
  const variants: Variant[] = [];
  for (const t of targets) {
    if (t === 'relay') variants.push('relay');
    else for (const c of clients) variants.push(c === 'sdk' ? 'broker(sdk)' : 'broker(raw)');
  }
  return {
    workloads,
    targets: targets as Target[],
    clients,
    variants,
    sdkMode,
    sdkInFlight: int('sdk-in-flight', v['sdk-in-flight'], 1),
    sdkLingerMs: int('sdk-linger-ms', v['sdk-linger-ms'], 0),
    sdkMaxBatchBytes: int('sdk-max-batch-bytes', v['sdk-max-batch-bytes'], 1),
    sdkMaxInFlightPerPartition: int('sdk-max-in-flight-per-partition', v['sdk-max-in-flight-per-partition'], 1),
    sdkPartitioning,
    sdkMessages,
    sdkMetadata,
    sdkIdempotent: v['sdk-idempotent'] === true,
    sdkConcurrency: int('sdk-concurrency', v['sdk-concurrency'], 1),
    partitions: int('partitions', v.partitions, 1),
    connections: int('connections', v.connections, 1),
    inFlight: int('in-flight', v['in-flight'], 1),
    rawFrames,
    fetchRecords: int('fetch-records', v['fetch-records'], 1),
    fetchBytes: int('fetch-bytes', v['fetch-bytes'], 1),
    brokerArgs: splitArgs(v['broker-args']),
    brokerNodeArgs: splitArgs(v['broker-node-args']),
    relayNodeArgs: splitArgs(v['relay-node-args']),
    workerNodeArgs: splitArgs(v['worker-node-args']),
    keepData: v['keep-data'] === true,
    timeoutMs: int('timeout-s', v['timeout-s'], 1) * 1000,
    repeat: int('repeat', v.repeat, 1),
    verbose: v.verbose === true,
  };
}


async function createTopic(host: string, port: number, topic: string, partitions: number): Promise<void> {
  const conn = await Connection.connect({ host, port });
  try {
    await conn.command('CREATE', { topic, partitions });
  } finally {
    await conn.close();
  }
}

/** Sum of the partitions' log end offsets: how many records the broker holds. */
async function logRecordCount(host: string, port: number): Promise<number> {
  const conn = await Connection.connect({ host, port });
  try {
    const reply = await conn.command('LIST_OFFSETS', { topic: TOPIC });
    let sum = 0;
    for (const m of reply.matchAll(/:leo=(\d+)/g)) sum += Number(m[1]);
    return sum;
  } finally {
    await conn.close();
  }
}


async function runOnce(w: Workload, variant: Variant, o: Options): Promise<RunResult> {
  const target = variantTarget(variant);
  const result: RunResult = { variant, target, problems: [] };
  const dir = makeTempDir(`tributary-bench-${target}-`);
  let server: Child | undefined;
  const children: Child[] = [];
  let host = '127.0.0.1';
  let port = 0;
  try {
    if (target === 'broker') {
      const b = await startBroker(path.join(dir, 'data'), { nodeArgs: o.brokerNodeArgs, args: o.brokerArgs, echoStderr: o.verbose });
      server = b.child;
      host = b.host;
      port = b.port;
      await createTopic(host, port, TOPIC, o.partitions);
      if (w.warmup > 0) await createTopic(host, port, WARMUP_TOPIC, o.partitions);
    } else {
      server = spawnNode('relay', path.join(BENCH_DIR, 'relay.js'), ['--file', path.join(dir, 'relay.log'), '--exit-with-stdin'], { nodeArgs: o.relayNodeArgs, stdin: true, echoStderr: o.verbose });
      const m = await server.waitLine(/relay listening on ([^\s]+):(\d+)/, 30_000);
      port = Number(m[2]);
    }
    process.stderr.write(`    ${variant} server pid ${server.proc.pid} on ${host}:${port}\n`);
    const run = { host, port, size: w.size, batch: w.batch, topic: TOPIC, count: w.count };
    // With --warmup the measured producer and consumer first send and read that many records of a topic
    // of their own, and the producer then holds until the consumer is ready: the clock starts on code
    // that is compiled and heaps that are grown, as in processes that have been running (a fresh
    // process's first second also counts V8's compiler threads). The server's CPU over it is printed apart.
    const w0 = procCpuMs(server.proc.pid);
    const consumer = startConsumer(variant, o, run, w.warmup, children);
    let producer: Child;
    if (w.warmup > 0) {
      producer = startProducer(variant, o, run, w.warmup, children);
      await Promise.all([consumer.ready, producer.waitJson((x) => x.event === 'warm', o.timeoutMs)]);
    } else {
      await consumer.ready;
    }
    const split0 = procCpuSplitMs(server.proc.pid);
    const cpu0 = split0 && split0.user + split0.system;
    if (w.warmup > 0 && w0 !== undefined && cpu0 !== undefined) result.warmupCpuMs = cpu0 - w0;
    if (w.warmup > 0) producer!.proc.stdin?.write('go\n');
    else producer = startProducer(variant, o, run, 0, children);
    const serverPid = server.proc.pid;
    let half: { records: number; cpu: number | undefined } | undefined;
    consumer.half.then(
      ({ records }) => (half = { records, cpu: procCpuMs(serverPid) }),
      () => {},
    );
    result.producer = await producerReport(producer!, o);
    result.consumer = await consumer.done();
    const split1 = procCpuSplitMs(server.proc.pid);
    if (split0 && split1) {
      result.serverCpuMs = split1.user + split1.system - (split0.user + split0.system);
      result.serverSystemMs = split1.system - split0.system;
      const h = half;
      if (h?.cpu !== undefined && h.records < w.count) {
        result.serverCpuLateMs = split1.user + split1.system - h.cpu;
        result.lateRecords = w.count - h.records;
      }
    }
    await withTimeout(consumer.child.exited, 10_000, 'consumer exit');
    if (target === 'broker') result.logRecords = await logRecordCount(host, port);
  } catch (err) {
    result.error = err instanceof Error ? err.message : String(err);
  } finally {
    for (const c of children) {
      if (c.proc.exitCode === null && c.proc.signalCode === null) c.proc.kill('SIGKILL');
    }
    if (server) {
      const code = await server.stop(30_000);
      if (code !== 0 && !result.error) result.problems.push(`${server.name} exited with ${code}: ${server.stderr().slice(-2000)}`);
    }
    if (o.keepData) {
      keepTempDir(dir);
      process.stderr.write(`kept ${target} data in ${dir}\n`);
    } else {
      removeTempDir(dir);
    }
  }
  const c = result.consumer;
  if (c) {
    if (c.missing > 0) result.problems.push(`${c.missing} missing records`);
    if (c.duplicates > 0) result.problems.push(`${c.duplicates} duplicate records`);
    if (c.foreign > 0) result.problems.push(`${c.foreign} records with unknown ids`);
    if (c.badSize > 0) result.problems.push(`${c.badSize} records of the wrong size`);
    if (c.offsetGaps > 0) result.problems.push(`${c.offsetGaps} offset gaps`);
  }
  if (result.logRecords !== undefined && result.logRecords !== w.count) result.problems.push(`broker log holds ${result.logRecords} records, expected ${w.count}`);
  if (result.error) result.problems.push(result.error);
  return result;
}

const perRecordUs = (ms: number | undefined, records: number) => (ms === undefined ? Number.NaN : (ms * 1000) / records);

function printResults(w: Workload, o: Options, results: RunResult[]): void {
  const label = (r: RunResult, i: number) => (o.repeat > 1 ? `${r.variant} #${i}` : r.variant);
  const counters: Record<string, number> = {};
  const numbered = results.map((r) => {
    counters[r.variant] = (counters[r.variant] ?? 0) + 1;
    return { r, name: label(r, counters[r.variant]!) };
  });
  const rows = numbered.map(({ r, name }) => {
    const c = r.consumer;
    const p = r.producer;
    return [
      name,
      c ? fmtInt(c.recordsPerSec) : 'FAILED',
      c ? fmtFixed(c.mbPerSec, 2) : '-',
      c ? fmtFixed(c.p50Ms, 1) : '-',
      c ? fmtFixed(c.p99Ms, 1) : '-',
      c ? String(c.missing) : '-',
      c ? String(c.duplicates) : '-',
      p ? fmtInt(p.recordsPerSec) : '-',
      p ? fmtFixed(p.ackP50Ms, 1) : '-',
      p ? fmtFixed(p.ackP99Ms, 1) : '-',
      fmtFixed(perRecordUs(r.serverCpuMs, w.count), 2),
      fmtFixed(perRecordUs(p?.cpuMs, w.count), 2),
      fmtFixed(perRecordUs(c?.cpuMs, w.count), 2),
    ];
  });
  const byVariant = (v: Variant) => results.filter((r) => r.variant === v && r.consumer);
  const med = (v: Variant, f: (r: RunResult) => number | undefined) => median(byVariant(v).map((r) => f(r) ?? Number.NaN));
  if (o.repeat > 1) {
    for (const v of o.variants) {
      if (byVariant(v).length === 0) continue;
      rows.push([
        `${v} median`,
        fmtInt(med(v, (r) => r.consumer?.recordsPerSec)),
        fmtFixed(med(v, (r) => r.consumer?.mbPerSec), 2),
        fmtFixed(med(v, (r) => r.consumer?.p50Ms), 1),
        fmtFixed(med(v, (r) => r.consumer?.p99Ms), 1),
        '',
        '',
        fmtInt(med(v, (r) => r.producer?.recordsPerSec)),
        fmtFixed(med(v, (r) => r.producer?.ackP50Ms), 1),
        fmtFixed(med(v, (r) => r.producer?.ackP99Ms), 1),
        fmtFixed(med(v, (r) => perRecordUs(r.serverCpuMs, w.count)), 2),
        fmtFixed(med(v, (r) => perRecordUs(r.producer?.cpuMs, w.count)), 2),
        fmtFixed(med(v, (r) => perRecordUs(r.consumer?.cpuMs, w.count)), 2),
      ]);
    }
  }
  const header = ['target', 'records/s', 'MB/s', 'p50 ms', 'p99 ms', 'missing', 'duplicates', 'producer rec/s', 'ack p50 ms', 'ack p99 ms', 'server cpu us/rec', 'prod cpu us/rec', 'cons cpu us/rec'];
  process.stdout.write(`${table(header, rows)}\n`);
  const rate = (v: Variant) => med(v, (r) => r.consumer?.recordsPerSec);
  const rl = rate('relay');
  const ratio = (name: string, x: number, y: number) => {
    if (Number.isFinite(x) && Number.isFinite(y) && y > 0) process.stdout.write(`ratio ${name} records/s: ${(x / y).toFixed(2)}\n`);
  };
  ratio('broker(raw)/relay', rate('broker(raw)'), rl);
  ratio('broker(sdk)/relay', rate('broker(sdk)'), rl);
  ratio('broker(sdk)/broker(raw)', rate('broker(sdk)'), rate('broker(raw)'));
  const cpu = (v: Variant) => med(v, (r) => perRecordUs(r.serverCpuMs, w.count));
  const rc = cpu('relay');
  for (const v of ['broker(raw)', 'broker(sdk)'] as const) {
    const bc = cpu(v);
    if (Number.isFinite(bc) && Number.isFinite(rc) && rc > 0) process.stdout.write(`server CPU per record ${v}/relay: ${(bc / rc).toFixed(1)}x\n`);
  }
  // The kernel's part (socket and file copies, fsyncs) is what a zero-logic relay pays too.
  const sys = o.variants.map((v) => `${v} ${fmtFixed(med(v, (r) => perRecordUs(r.serverSystemMs, w.count)), 2)}`);
  process.stdout.write(`of server cpu us/rec, system (kernel) time: ${sys.join(', ')}\n`);
  // Past the first half the caches are full and evicting, the heaps grown: a pass's costs that do not grow
  // with its records (bench/README.md, "Where the broker's CPU goes") are behind it.
  const late = (v: Variant) => med(v, (r) => (r.lateRecords ? perRecordUs(r.serverCpuLateMs, r.lateRecords) : Number.NaN));
  process.stdout.write(`server cpu us/rec over the second half of the records: ${o.variants.map((v) => `${v} ${fmtFixed(late(v), 2)}`).join(', ')}\n`);
  if (w.warmup > 0) {
    const warm = o.variants.map((v) => `${v} ${fmtFixed(med(v, (r) => perRecordUs(r.warmupCpuMs, w.warmup)), 2)}`);
    process.stdout.write(`warm-up (${fmtInt(w.warmup)} records first, not counted above): server cpu us/rec ${warm.join(', ')}\n`);
  }
}

function describeWorkload(w: Workload, o: Options): string {
  const raw = `raw: ${o.connections} producer connections x ${o.inFlight} batches in flight, frames ${o.rawFrames}`;
  const sdk = `sdk: ${o.sdkInFlight} send() calls in flight, lingerMs ${o.sdkLingerMs}, maxBatchBytes ${o.sdkMaxBatchBytes}, partitioning ${o.sdkPartitioning}, messages ${o.sdkMessages}, metadata ${o.sdkMetadata}${o.sdkIdempotent ? ', idempotent' : ''}; consumer ${o.sdkMode}, concurrency ${o.sdkConcurrency}`;
  const clients = o.targets.includes('broker') ? o.clients.map((c) => (c === 'raw' ? raw : sdk)) : [raw];
  const warm = w.warmup > 0 ? `, after a warm-up of ${fmtInt(w.warmup)} records (server, producer and consumer)` : ', cold processes (no warm-up)';
  return `workload: ${fmtInt(w.count)} records x ${w.size} B, ${o.partitions} partitions, batches of ${w.batch}, acks=1${warm}\n  ${clients.join('\n  ')}`;
}

export async function run(argv: string[]): Promise<number> {
  let o: Options;
  try {
    const parsed = parseOptions(argv);
    if (typeof parsed === 'string') {
      process.stdout.write(USAGE);
      return 0;
    }
    o = parsed;
  } catch (err) {
    process.stderr.write(`${err instanceof Error ? err.message : String(err)}\n\n${USAGE}`);
    return 2;
  }
  installCleanupHandlers();
  process.stdout.write(`produce-consume (node ${process.version}, broker args: ${o.brokerArgs.join(' ') || '(defaults: flush=always)'})\n`);
  let failed = false;
  for (const w of o.workloads) {
    process.stdout.write(`\n${describeWorkload(w, o)}\n`);
    const results: RunResult[] = [];
    for (let i = 1; i <= o.repeat; i++) {
      for (const v of o.variants) {
        process.stderr.write(`  ${w.size} B: running ${v}${o.repeat > 1 ? ` (${i}/${o.repeat})` : ''} ...\n`);
        results.push(await runOnce(w, v, o));
      }
    }
    printResults(w, o, results);
    for (const r of results) {
      for (const msg of r.problems) process.stdout.write(`FAIL ${r.variant}: ${msg}\n`);
      if (r.problems.length > 0) failed = true;
    }
  }
  process.stdout.write(failed ? '\nproduce-consume: FAILED\n' : '\nproduce-consume: ok\n');
  return failed ? 1 : 0;
}

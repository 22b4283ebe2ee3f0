/**
 * The produce-consume benchmark's worker processes (pc-*.ts) as its orchestrator starts and ends them,
 * and the options, variants and reports they share with it (produce-consume.ts).
 */
import path from 'node:path';
import { BENCH_DIR, type Child, spawnNode } from './lib.js';

export const WARMUP_TOPIC = 'bench-warmup';

export type Target = 'broker' | 'relay';
export type Client = 'raw' | 'sdk';
export type SdkMode = 'stream' | 'poll';
/** One row of the table: the broker with either client, or the relay (raw only). */
export type Variant = 'broker(raw)' | 'broker(sdk)' | 'relay';

export const variantTarget = (v: Variant): Target => (v === 'relay' ? 'relay' : 'broker');
export const variantClient = (v: Variant): Client => (v === 'broker(sdk)' ? 'sdk' : 'raw');

export interface Workload {
  size: number;
  count: number;
  batch: number;
  /** Records the measured producer and consumer send and read on their own topic before the clock. */
  warmup: number;
}

export interface Options {
  workloads: Workload[];
  targets: Target[];
  clients: Client[];
  /** The runs of one round, in order: broker(raw), broker(sdk), relay (as selected). */
  variants: Variant[];
  partitions: number;
  connections: number;
  inFlight: number;
  /** The raw producer's frames: patched copies of one pre-encoded frame, or encoded per send (pc-producer.ts). */
  rawFrames: 'template' | 'encoded';
  fetchRecords: number;
  fetchBytes: number;
  sdkMode: SdkMode;
  sdkInFlight: number;
  sdkLingerMs: number;
  sdkMaxBatchBytes: number;
  sdkMaxInFlightPerPartition: number;
  sdkPartitioning: 'chunk' | 'record';
  sdkMessages: 'fresh' | 'reused';
  sdkMetadata: 'records' | 'runs';
  sdkIdempotent: boolean;
  sdkConcurrency: number;
  brokerArgs: string[];
  brokerNodeArgs: string[];
  relayNodeArgs: string[];
  workerNodeArgs: string[];
  keepData: boolean;
  timeoutMs: number;
  repeat: number;
  verbose: boolean;
}

export interface ProducerReport {
  cpuMs: number;
  records: number;
  elapsedMs: number;
  recordsPerSec: number;
  ackP50Ms: number;
  ackP99Ms: number;
}

export interface ConsumerReport {
  cpuMs: number;
  records: number;
  missing: number;
  duplicates: number;
  foreign: number;
  badSize: number;
  offsetGaps: number;
  elapsedMs: number;
  recordsPerSec: number;
  mbPerSec: number;
  p50Ms: number;
  p99Ms: number;
  maxMs: number;
}

export function withTimeout<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  return Promise.race([
    p.finally(() => clearTimeout(timer)),
    new Promise<T>((_, reject) => {
      timer = setTimeout(() => reject(new Error(`${what} did not finish within ${ms / 1000} s`)), ms);
    }),
  ]);
}

export interface ClientRun {
  host: string;
  port: number;
  topic: string;
  count: number;
  size: number;
  batch: number;
}

export function commonArgs(variant: Variant, o: Options, run: ClientRun): string[] {
  return ['--host', run.host, '--port', String(run.port), '--topic', run.topic, '--partitions', String(o.partitions), '--count', String(run.count), '--size', String(run.size), '--target', variantTarget(variant)];
}

/**
 * The variant's consumer of `run`: `ready` once it reads (assigned or subscribed), `done()` tells it the
 * producer finished and resolves with its report. With `warmupRecords` it first reads that many records
 * of WARMUP_TOPIC and is ready only after (see the consumers' --warmup). `half` resolves with the records
 * it had once it had half of the run's or more.
 */
export function startConsumer(
  variant: Variant,
  o: Options,
  run: ClientRun,
  warmupRecords: number,
  children: Child[],
): { child: Child; ready: Promise<unknown>; half: Promise<{ records: number }>; done(): Promise<ConsumerReport> } {
  const sdk = variantClient(variant) === 'sdk';
  const common = [...commonArgs(variant, o, run), ...warmupArgs(warmupRecords)];
  const fetch = ['--fetch-records', String(o.fetchRecords), '--fetch-bytes', String(o.fetchBytes)];
  const consumer = sdk
    ? spawnNode('sdk-consumer', path.join(BENCH_DIR, 'pc-sdk-consumer.js'), [...common, ...fetch, '--mode', o.sdkMode, '--concurrency', String(o.sdkConcurrency)], {
        nodeArgs: o.workerNodeArgs,
        stdin: true,
        echoStderr: o.verbose,
      })
    : spawnNode('consumer', path.join(BENCH_DIR, 'pc-consumer.js'), [...common, ...fetch], { nodeArgs: o.workerNodeArgs, stdin: true, echoStderr: o.verbose });
  children.push(consumer);
  // A warm-up waits for the producer's records: bounded like a run, not like a start.
  const ready = consumer.waitJson((x) => x.event === 'ready', warmupRecords > 0 ? o.timeoutMs : 30_000);
  const report = consumer.waitJson<ConsumerReport>((x) => x.event === 'result', o.timeoutMs);
  const half = consumer.waitJson<{ records: number }>((x) => x.event === 'half', o.timeoutMs);
  ready.catch(() => {}); // awaited by the caller
  report.catch(() => {}); // awaited in done(); the producer may fail first
  half.catch(() => {}); // a run that fails first never gets there
  return {
    child: consumer,
    ready,
    half,
    done: () => {
      consumer.proc.stdin?.write('done\n');
      return report;
    },
  };
}

function warmupArgs(records: number): string[] {
  return records > 0 ? ['--warmup', String(records), '--warmup-topic', WARMUP_TOPIC] : [];
}

/**
 * The variant's producer of `run`. With `warmupRecords`, it first sends them to WARMUP_TOPIC and waits
 * for `go` (see the producers' --warmup).
 */
export function startProducer(variant: Variant, o: Options, run: ClientRun, warmupRecords: number, children: Child[]): Child {
  const sdk = variantClient(variant) === 'sdk';
  const common = commonArgs(variant, o, run);
  const warm = warmupArgs(warmupRecords);
  const producer = sdk
    ? spawnNode(
        'sdk-producer',
        path.join(BENCH_DIR, 'pc-sdk-producer.js'),
        [
          ...common,
          '--chunk',
          String(run.batch),
          '--in-flight',
          String(o.sdkInFlight),
          '--linger-ms',
          String(o.sdkLingerMs),
          '--max-batch-bytes',
          String(o.sdkMaxBatchBytes),
          '--max-in-flight-per-partition',
          String(o.sdkMaxInFlightPerPartition),
          '--partitioning',
          o.sdkPartitioning,
          '--messages',
          o.sdkMessages,
          '--metadata',
          o.sdkMetadata,
          '--idempotent',
          String(o.sdkIdempotent),
          ...warm,
        ],
        { nodeArgs: o.workerNodeArgs, stdin: true, echoStderr: o.verbose },
      )
    : spawnNode('producer', path.join(BENCH_DIR, 'pc-producer.js'), [...common, '--batch', String(run.batch), '--connections', String(o.connections), '--in-flight', String(o.inFlight), '--frames', o.rawFrames, ...warm], {
        nodeArgs: o.workerNodeArgs,
        stdin: true,
        echoStderr: o.verbose,
      });
  children.push(producer);
  return producer;
}

/** Waits for the producer's report and its clean exit. */
export async function producerReport(producer: Child, o: Options): Promise<ProducerReport> {
  const report = await producer.waitJson<ProducerReport>((x) => x.event === 'result', o.timeoutMs);
  const code = await withTimeout(producer.exited, 10_000, 'producer exit');
  if (code !== 0) throw new Error(`producer exited with ${code}\n${producer.stderr()}`);
  return report;
}

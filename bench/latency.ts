/**
 * `npm run bench -- latency`: end-to-end latency, open loop (bench/README.md, "latency").
 *
 * One open-loop producer process (lat-producer.ts: R records/s of S bytes on the clock, never waiting
 * for acks) → N partitions → a group of 3 consumer processes (lat-consumer.ts); latency is the
 * consumer's receive time minus the record's scheduled send time, the first second (warm-up) not
 * counted. Each workload runs against the fsync relay (relay.ts --fsync: write, fdatasync with group
 * commit, then ack and forward; the least a durable broker must do) and against a broker with its
 * defaults (flush=always) through the SDK with its defaults, in the same run, and prints p50, p99 and
 * p99.9 with the broker/relay ratios.
 *
 * Options: --rates 1000,10000,50000 (at --partitions) --partitions 12 --partition-counts 1,100 (extra runs
 * at the W2 rate 10000) --size 1024 --duration-ms 10000 --warmup-ms 1000 --broker-args "..." --linger-ms 1,5
 * (one broker row per SDK producer lingerMs) --client-node-args "..." (producer and consumers) --only w2
 */
import fs from 'node:fs';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { Connection } from 'tributary-protocol/connection.js';
import { BENCH_DIR, busyPercent, type Child, cpuTicks, fmtFixed, fmtInt, installCleanupHandlers, makeTempDir, nowMs, percentile, procCpuMs, removeTempDir, spawnNode, stealPercent, splitArgs, startBroker, table } from './lib.js';

export const description = 'open-loop end-to-end latency (p50/p99/p99.9) at fixed rates, against the fsync relay';

const TOPIC = 'latency';
const CONSUMERS = 3;

interface Workload {
  rate: number;
  partitions: number;
}

interface Options {
  workloads: Workload[];
  size: number;
  durationMs: number;
  warmupMs: number;
  brokerArgs: string[];
  brokerNodeArgs: string[];
  /** Node flags of the producer and consumer processes (e.g. --cpu-prof). */
  clientNodeArgs: string[];
  /** The SDK producer's lingerMs for each broker row (undefined: its default). */
  lingers: Array<number | undefined>;
  /** The SDK consumers' `mode` (undefined: its default, poll). */
  consumerMode?: 'poll' | 'stream';
  verbose: boolean;
}

export interface Result {
  target: 'relay' | 'broker';
  sent: number;
  acked: number;
  errors: number;
  received: number;
  measured: number;
  p50: number;
  p99: number;
  p999: number;
  max: number;
  maxTickGapMs: number;
  /** The producer's acknowledgement latency (send() to ack, from the first record's scheduled time), ms; NaN for the relay. */
  ackP50: number;
  ackP99: number;
  /** Rebalances (member reports) while the producer ran. */
  rebalances: number;
  /**
   * Per cent of the machine's CPU time the hypervisor took while the producer ran: on a shared virtual
   * machine it is why the same run varies several times over, relay included.
   */
  stealPct: number;
  /** Per cent of the machine's CPU time its processes used while the producer ran (busyPercent). */
  busyPct: number;
  /** CPU time of the broker or relay process while the producer ran, per record received, µs. */
  serverCpuUsPerRecord: number;
  error?: string;
}

function usage(): string {
  return 'usage: npm run bench -- latency [--rates 1000,10000,50000] [--partitions 12] [--partition-counts 1,100] [--size 1024] [--duration-ms 10000] [--warmup-ms 1000] [--broker-args "..."] [--broker-node-args="--cpu-prof ..."] [--linger-ms 1,5] [--client-node-args="--cpu-prof ..."] [--consumer-mode poll|stream] [--only w2] [--verbose]\n';
}

function parseOptions(argv: string[]): Options | string {
  let parsed: ReturnType<typeof parseArgs>;
  try {
    parsed = parseArgs({
      args: argv,
      options: {
        rates: { type: 'string', default: '1000,10000,50000' },
        partitions: { type: 'string', default: '12' },
        'partition-counts': { type: 'string', default: '1,100' },
        size: { type: 'string', default: '1024' },
        'duration-ms': { type: 'string', default: '10000' },
        'warmup-ms': { type: 'string', default: '1000' },
        'broker-args': { type: 'string', default: '' },
        'broker-node-args': { type: 'string', default: '' },
        'linger-ms': { type: 'string', default: '' },
        'client-node-args': { type: 'string', default: '' },
        'consumer-mode': { type: 'string' },
        only: { type: 'string' },
        verbose: { type: 'boolean', default: false },
        help: { type: 'boolean', default: false },
      },
      strict: true,
    });
  } catch (err) {
    return `${(err as Error).message}\n${usage()}`;
  }
  const v = parsed.values as Record<string, string | boolean | undefined>;
  if (v.help) return usage();
  const ints = (name: string, min: number): number[] | string => {
    const xs = String(v[name]).split(',').filter(Boolean).map(Number);
    return xs.every((x) => Number.isSafeInteger(x) && x >= min) ? xs : `--${name} must be integers >= ${min}\n${usage()}`;
  };
  const rates = ints('rates', 1);
  const parts = ints('partitions', 1);
  const counts = ints('partition-counts', 1);
  const size = ints('size', 12);
  const duration = ints('duration-ms', 1000);
  const warmup = ints('warmup-ms', 0);
  const lingers = ints('linger-ms', 0);
  for (const x of [rates, parts, counts, size, duration, warmup, lingers]) if (typeof x === 'string') return x;
  const base = (parts as number[])[0]!;
  let workloads: Workload[] = [...(rates as number[]).map((rate) => ({ rate, partitions: base })), ...(counts as number[]).map((partitions) => ({ rate: 10_000, partitions }))];
  if (v.only === 'w2') workloads = [{ rate: 10_000, partitions: base }];
  else if (v.only !== undefined) return `--only takes w2\n${usage()}`;
  const mode = v['consumer-mode'];
  if (mode !== undefined && mode !== 'poll' && mode !== 'stream') return `--consumer-mode takes poll or stream\n${usage()}`;
  return {
    workloads,
    size: (size as number[])[0]!,
    durationMs: (duration as number[])[0]!,
    warmupMs: (warmup as number[])[0]!,
    brokerArgs: splitArgs(String(v['broker-args'])),
    brokerNodeArgs: splitArgs(String(v['broker-node-args'])),
    clientNodeArgs: splitArgs(String(v['client-node-args'])),
    lingers: (lingers as number[]).length > 0 ? (lingers as number[]) : [undefined],
    consumerMode: mode,
    verbose: v.verbose === true,
  };
}

export async function createTopic(host: string, port: number, topic: string, partitions: number): Promise<void> {
  const conn = await Connection.connect({ host, port });
  try {
    await conn.command('CREATE', { topic, partitions });
  } finally {
    await conn.close();
  }
}

function failedResult(target: 'relay' | 'broker', err: unknown): Result {
  const none = Number.NaN;
  return { target, sent: 0, acked: 0, errors: 0, received: 0, measured: 0, p50: none, p99: none, p999: none, max: none, maxTickGapMs: none, ackP50: none, ackP99: none, rebalances: 0, stealPct: none, busyPct: none, serverCpuUsPerRecord: none, error: err instanceof Error ? err.message : String(err) };
}

export interface MeasureOptions {
  target: 'relay' | 'broker';
  host: string;
  port: number;
  topic: string;
  partitions: number;
  rate: number;
  size: number;
  durationMs: number;
  warmupMs: number;
  /** Where the consumers write their samples. */
  dir: string;
  group?: string;
  /** The SDK producer's lingerMs (broker only; undefined: its default). */
  lingerMs?: number;
  /** The SDK consumers' mode (broker only; undefined: its default). */
  consumerMode?: 'poll' | 'stream';
  /** Node flags of the producer and consumer processes. */
  clientNodeArgs?: string[];
  /** The broker's or relay's process, for its CPU time per record. */
  serverPid?: number;
  /** How long the consumers get to settle before the producer's warm-up starts (default 3 s for a broker). */
  settleMs?: number;
  verbose?: boolean;
}

/** How long before its schedule starts the producer is spawned (Node's start, connecting, metadata). */
const PRODUCER_READY_MS = 1000;

/**
 * One open-loop measurement against a running broker or relay: 3 consumers (a group, for the broker), then
 * the producer; latencies merged from the consumers' sample files.
 */
export async function measureLatency(m: MeasureOptions): Promise<Result> {
  const { target } = m;
  const consumers: Child[] = [];
  let producer: Child | undefined;
  try {
    const common = ['--target', target, '--host', m.host, '--port', String(m.port), '--topic', m.topic, '--partitions', String(m.partitions), '--size', String(m.size)];
    const assigned: Array<number | undefined> = new Array(CONSUMERS).fill(undefined);
    // Rebalances while producing: a member that rejoins reads again from the committed offsets (at least once).
    let producing = false;
    let rebalances = 0;
    let lastReport = 0;
    const files = Array.from({ length: CONSUMERS }, (_, i) => path.join(m.dir, `latencies-${i}.bin`));
    // Records scheduled before `from` are the warm-up: the producer starts warmupMs before it, once the
    // consumers are in place (they get `from` as an absolute time, comfortably after they settle).
    const settleMs = m.settleMs ?? (target === 'broker' ? 3000 : 500);
    const from = Math.ceil(nowMs() + settleMs + m.warmupMs + 2000);
    // One reader of each consumer's reports: each waitJson starts after the line the last one took.
    const results: Array<Promise<{ received: number; measured: number }>> = [];
    for (let i = 0; i < CONSUMERS; i++) {
      const c = spawnNode(`consumer-${i}`, path.join(BENCH_DIR, 'lat-consumer.js'), [...common, '--group', m.group ?? 'latency', '--measure-from', String(from), '--out', files[i]!, ...(m.consumerMode ? ['--mode', m.consumerMode] : [])], { stdin: true, echoStderr: m.verbose, nodeArgs: m.clientNodeArgs });
      consumers.push(c);
      const watch = async (): Promise<{ received: number; measured: number }> => {
        for (;;) {
          const r = await c.waitJson<{ event: string; partitions?: number; received: number; measured: number }>((x) => x.event === 'assigned' || x.event === 'result', m.durationMs + m.warmupMs + 120_000);
          if (r.event === 'result') return r;
          assigned[i] = r.partitions ?? 1;
          lastReport = nowMs();
          if (producing) rebalances++;
        }
      };
      const result = watch();
      result.catch(() => {});
      results.push(result);
    }
    // Every consumer in place: the group covers every partition (broker), every stream is open (relay).
    const deadline = nowMs() + Math.max(30_000, settleMs + 10_000);
    // Broker: incremental rebalancing moves partitions in several steps; settled once every partition is
    // assigned and no member reported a change for a second.
    const settled = () =>
      assigned.every((x) => x !== undefined) && (target === 'relay' || (assigned.reduce<number>((n, x) => n + (x ?? 0), 0) === m.partitions && nowMs() - lastReport > 1000));
    while (!settled()) {
      if (nowMs() > deadline) throw new Error(`the consumers did not settle (assigned ${JSON.stringify(assigned)})`);
      await new Promise((r) => setTimeout(r, 50));
    }
    // The producer's schedule starts warmupMs before `from`; it needs up to a second before that to start,
    // connect and (SDK) fetch metadata, which would otherwise eat into the warm-up.
    const startAt = from - m.warmupMs;
    const spare = startAt - PRODUCER_READY_MS - nowMs();
    if (spare < 0) throw new Error(`the consumers took too long to settle (${Math.round(-spare)} ms past the producer's planned start)`);
    producing = true;
    producer = spawnNode('producer', path.join(BENCH_DIR, 'lat-producer.js'), [...common, '--rate', String(m.rate), '--duration-ms', String(m.warmupMs + m.durationMs), '--start-at', String(startAt), ...(m.lingerMs === undefined ? [] : ['--linger-ms', String(m.lingerMs)])], { echoStderr: m.verbose, nodeArgs: m.clientNodeArgs });
    await producer.waitJson<{ event: string }>((x) => x.event === 'started', startAt - nowMs() + 30_000);
    const ticksFrom = cpuTicks();
    const serverCpuFrom = procCpuMs(m.serverPid);
    const p = await producer.waitJson<{ sent: number; acked: number; errors: number; firstError: string; maxTickGapMs: number; ackP50?: number; ackP99?: number }>((x) => x.event === 'result', m.durationMs + m.warmupMs + 60_000);
    const ticksTo = cpuTicks();
    const serverCpuTo = procCpuMs(m.serverPid);
    for (const c of consumers) c.proc.stdin?.write('done\n');
    const reports = await Promise.all(results);
    const all: number[] = [];
    for (const f of files) {
      const buf = fs.readFileSync(f);
      const xs = new Float64Array(buf.buffer, buf.byteOffset, buf.length / 8);
      for (const x of xs) all.push(x);
    }
    const sorted = Float64Array.from(all).sort();
    return {
      target,
      sent: p.sent,
      acked: p.acked,
      errors: p.errors,
      received: reports.reduce((n, r) => n + r.received, 0),
      measured: sorted.length,
      p50: percentile(sorted, 50),
      p99: percentile(sorted, 99),
      p999: percentile(sorted, 99.9),
      max: sorted.length > 0 ? sorted[sorted.length - 1]! : Number.NaN,
      maxTickGapMs: p.maxTickGapMs,
      ackP50: p.ackP50 ?? Number.NaN,
      ackP99: p.ackP99 ?? Number.NaN,
      rebalances,
      stealPct: stealPercent(ticksFrom, ticksTo),
      busyPct: busyPercent(ticksFrom, ticksTo),
      serverCpuUsPerRecord: serverCpuFrom === undefined || serverCpuTo === undefined ? Number.NaN : ((serverCpuTo - serverCpuFrom) * 1000) / Math.max(1, reports.reduce((n, r) => n + r.received, 0)),
      error: p.errors > 0 ? `${p.errors} sends failed: ${p.firstError}` : undefined,
    };
  } catch (err) {
    return failedResult(target, err);
  } finally {
    for (const c of [producer, ...consumers]) if (c && c.proc.exitCode === null && c.proc.signalCode === null) c.proc.kill('SIGKILL');
  }
}

async function runOnce(w: Workload, target: 'relay' | 'broker', o: Options, lingerMs?: number): Promise<Result> {
  const dir = makeTempDir(`tributary-latency-${target}-`);
  let server: Child | undefined;
  let hp = 0;
  try {
    let port: number;
    const host = '127.0.0.1';
    if (target === 'broker') {
      const b = await startBroker(path.join(dir, 'data'), { args: o.brokerArgs, nodeArgs: o.brokerNodeArgs, echoStderr: o.verbose });
      server = b.child;
      port = b.port;
      hp = b.healthPort;
      await createTopic(host, port, TOPIC, w.partitions);
    } else {
      server = spawnNode('relay', path.join(BENCH_DIR, 'relay.js'), ['--file', path.join(dir, 'relay.log'), '--fsync', '--exit-with-stdin'], { stdin: true, echoStderr: o.verbose });
      port = Number((await server.waitLine(/relay listening on ([^\s]+):(\d+)/, 30_000))[2]);
    }
    const res = await measureLatency({ target, host, port, topic: TOPIC, partitions: w.partitions, rate: w.rate, size: o.size, durationMs: o.durationMs, warmupMs: o.warmupMs, dir, lingerMs, consumerMode: o.consumerMode, clientNodeArgs: o.clientNodeArgs, serverPid: server.proc.pid, verbose: o.verbose });
    if (target === 'broker' && process.env.DUMP_METRICS) {
      const t = await (await fetch(`http://127.0.0.1:${hp}/metrics`)).text();
      (await import('node:fs')).writeFileSync(process.env.DUMP_METRICS, t);
    }
    return res;
  } catch (err) {
    return failedResult(target, err);
  } finally {
    if (server) await server.stop(30_000);
    removeTempDir(dir);
  }
}

export async function run(argv: string[]): Promise<number> {
  const o = parseOptions(argv);
  if (typeof o === 'string') {
    process.stderr.write(o);
    return o === usage() ? 0 : 2;
  }
  installCleanupHandlers();
  process.stdout.write(`latency (node ${process.version}; open loop, ${o.size} B records, ${o.durationMs} ms measured after ${o.warmupMs} ms warm-up, ${CONSUMERS} consumers${o.consumerMode ? ` in ${o.consumerMode} mode` : ''}; broker args: ${o.brokerArgs.join(' ') || '(defaults: flush=always)'})\n`);
  const rows: string[][] = [];
  let failed = false;
  for (const w of o.workloads) {
    process.stderr.write(`  ${fmtInt(w.rate)}/s x ${w.partitions} partitions: relay ...\n`);
    const relay = await runOnce(w, 'relay', o);
    const results: Array<{ r: Result; lingerMs?: number }> = [{ r: relay }];
    for (const lingerMs of o.lingers) {
      process.stderr.write(`  ${fmtInt(w.rate)}/s x ${w.partitions} partitions: broker${lingerMs === undefined ? '' : ` lingerMs ${lingerMs}`} ...\n`);
      results.push({ r: await runOnce(w, 'broker', o, lingerMs), lingerMs });
    }
    for (const { r, lingerMs } of results) {
      const lost = r.sent - r.received;
      if (r.error) failed = true;
      rows.push([
        `${fmtInt(w.rate)}/s x ${w.partitions}p`,
        r.target === 'relay' ? 'fsync relay' : lingerMs === undefined ? 'tributary' : `tributary linger ${lingerMs}`,
        fmtInt(r.sent),
        fmtInt(r.received),
        fmtFixed(r.p50, 2),
        fmtFixed(r.p99, 2),
        fmtFixed(r.p999, 2),
        fmtFixed(r.max, 1),
        r.target === 'broker' ? `${fmtFixed(r.p50 / relay.p50, 1)} / ${fmtFixed(r.p99 / relay.p99, 1)}` : '',
        [
          r.error ? `ERROR ${r.error.slice(0, 120)}` : '',
          lost > 0 ? `${lost} not received` : lost < 0 ? `${-lost} received twice` : '',
          r.rebalances > 0 ? `${r.rebalances} rebalance reports` : '',
          `tick gap ${fmtFixed(r.maxTickGapMs, 1)} ms`,
          Number.isFinite(r.stealPct) ? `steal ${fmtFixed(r.stealPct, 0)}%` : '',
          Number.isFinite(r.busyPct) ? `cpu busy ${fmtFixed(r.busyPct, 0)}%` : '',
          Number.isFinite(r.serverCpuUsPerRecord) ? `server cpu ${fmtFixed(r.serverCpuUsPerRecord, 1)} µs/rec` : '',
          Number.isFinite(r.ackP50) ? `ack p50/p99 ${fmtFixed(r.ackP50, 1)}/${fmtFixed(r.ackP99, 1)} ms` : '',
        ]
          .filter(Boolean)
          .join('; '),
      ]);
    }
  }
  process.stdout.write(`\n${table(['workload', 'target', 'sent', 'received', 'p50 ms', 'p99 ms', 'p99.9 ms', 'max ms', 'x relay p50/p99', 'notes'], rows)}\n`);
  return failed ? 1 : 0;
}

/**
 * `npm run bench -- scale`: many partitions and groups on one broker (bench/README.md, "scale").
 *
 * Two brokers with their defaults: the loaded one, and an empty one for the reference. In one run:
 *   1. --topics x --partitions-per-topic idle partitions created on the loaded broker (time), --groups
 *      groups with one member each (joined, synced, heartbeating), its RSS and open file descriptors;
 *   2. W2-shaped latency (latency.ts: open loop, 10k/s x 1 KiB) on 12 partitions, --repeat times
 *      alternately on the empty broker (the reference) and on 12 hot partitions of the loaded one while
 *      the rest are idle; medians, so that one slow window of a shared machine does not decide the ratio;
 *   3. once more on the loaded broker while --busy partitions receive --busy-rate records/s each (a load
 *      worker);
 *   4. a clean restart and a kill -9 restart: time until /ready, RSS and fds after.
 *
 * Options: --topics 100 --partitions-per-topic 100 --groups 1000 --busy 1000 --busy-rate 10
 *          --duration-ms 10000 --repeat 3 --broker-args "..." --broker-node-args "..."
 */
import path from 'node:path';
import { parseArgs } from 'node:util';
import { Connection } from 'tributary-protocol/connection.js';
import { type Result, createTopic, measureLatency } from './latency.js';
import { BENCH_DIR, type BrokerHandle, type Child, fmtFixed, fmtInt, installCleanupHandlers, makeTempDir, median, nowMs, procStats, removeTempDir, scrapeMetrics, spawnNode, splitArgs, startBroker, table } from './lib.js';

export const description = '10k partitions and 1,000 groups on one broker: create and restart times, RSS, fds, hot-partition latency';

const HOT = 'hot';
const HOT_PARTITIONS = 12;
const SESSION_MS = 60_000;
const HEARTBEAT_MS = 5_000;
/** Heartbeats go out in this many slices of HEARTBEAT_MS. */
const HEARTBEAT_SLOTS = 50;

async function waitReady(b: BrokerHandle, healthPort: number, timeoutMs: number): Promise<void> {
  const deadline = nowMs() + timeoutMs;
  for (;;) {
    const ok = await fetch(`http://127.0.0.1:${healthPort}/ready`).then(
      (r) => r.status === 200,
      () => false,
    );
    if (ok) return;
    if (nowMs() > deadline) throw new Error(`broker not ready after ${timeoutMs} ms\n${b.child.stderr().slice(-2000)}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

async function start(dataDir: string, args: string[], nodeArgs: string[]): Promise<{ b: BrokerHandle; healthPort: number; readyMs: number }> {
  const t0 = nowMs();
  const b = await startBroker(dataDir, { args, nodeArgs, startTimeoutMs: 300_000 });
  await waitReady(b, b.healthPort, 300_000);
  return { b, healthPort: b.healthPort, readyMs: nowMs() - t0 };
}

/** One member per group, each heartbeating every 5 s, over a few pipelined connections. */
class Members {
  private readonly conns: Connection[] = [];
  private readonly members: Array<{ conn: Connection; group: string; topic: string; member: string; generation: number }> = [];
  private timer: NodeJS.Timeout | undefined;
  failures = 0;

  async join(host: string, port: number, groups: number, topics: string[]): Promise<void> {
    for (let i = 0; i < 4; i++) this.conns.push(await Connection.connect({ host, port }));
    // Joins wait for the join window: many at once over the pipelined connections.
    const chunk = 100;
    for (let from = 0; from < groups; from += chunk) {
      await Promise.all(
        Array.from({ length: Math.min(chunk, groups - from) }, async (_, k) => {
          const i = from + k;
          const conn = this.conns[i % this.conns.length]!;
          const group = `g-${i}`;
          const topic = topics[i % topics.length]!;
          const j = await conn.command('JOIN_GROUP', { topic, group, member: 'scale', session_timeout_ms: SESSION_MS, rebalance_timeout_ms: SESSION_MS });
          const member = /member=(\S+)/.exec(j)![1]!;
          const generation = Number(/generation=(\d+)/.exec(j)![1]);
          await conn.command('SYNC_GROUP', { topic, group, member, generation });
          this.members.push({ conn, group, topic, member, generation });
        }),
      );
    }
    // Each member heartbeats every 5 s at its own phase, as members that joined at different times do:
    // 1,000 heartbeats in one burst would stall the broker for tens of milliseconds every 5 s.
    let tick = 0;
    this.timer = setInterval(() => {
      const slot = tick++ % HEARTBEAT_SLOTS;
      for (let i = slot; i < this.members.length; i += HEARTBEAT_SLOTS) {
        const m = this.members[i]!;
        m.conn.command('HEARTBEAT', { topic: m.topic, group: m.group, member: m.member, generation: m.generation }).catch(() => this.failures++);
      }
    }, HEARTBEAT_MS / HEARTBEAT_SLOTS);
  }

  get size(): number {
    return this.members.length;
  }

  async close(): Promise<void> {
    clearInterval(this.timer);
    await Promise.allSettled(this.conns.map((c) => c.close()));
  }
}

/** What a broker went through while a measurement ran: its GC and fsyncs from /metrics, read before and after. */
interface BrokerWindow {
  majorCount: number;
  majorMs: number;
  allMs: number;
  fsyncs: number;
  fsyncMs: number;
  /** fsync passes that took 25 ms or more (the tail of the W2 latency sits there). */
  fsyncsSlow: number;
}

async function brokerTotals(healthPort: number): Promise<BrokerWindow | undefined> {
  const m = await scrapeMetrics(healthPort);
  if (!m) return undefined;
  let allS = 0;
  for (const [k, v] of m) if (k.startsWith('tributary_nodejs_gc_duration_seconds_sum{')) allS += v;
  return {
    majorCount: m.get('tributary_nodejs_gc_duration_seconds_count{kind="major"}') ?? 0,
    majorMs: 1000 * (m.get('tributary_nodejs_gc_duration_seconds_sum{kind="major"}') ?? 0),
    allMs: 1000 * allS,
    fsyncs: m.get('tributary_fsync_duration_seconds_count') ?? 0,
    fsyncMs: 1000 * (m.get('tributary_fsync_duration_seconds_sum') ?? 0),
    fsyncsSlow: (m.get('tributary_fsync_duration_seconds_count') ?? 0) - (m.get('tributary_fsync_duration_seconds_bucket{le="0.025"}') ?? 0),
  };
}

async function withBrokerWindow<T>(healthPort: number, fn: () => Promise<T>): Promise<{ r: T; w: BrokerWindow | undefined }> {
  const before = await brokerTotals(healthPort);
  const r = await fn();
  const after = await brokerTotals(healthPort);
  if (!before || !after) return { r, w: undefined };
  const w = { ...after };
  for (const k of Object.keys(w) as Array<keyof BrokerWindow>) w[k] -= before[k];
  return { r, w };
}

function latencyRow(name: string, r: Result, w: BrokerWindow | undefined, refP99?: number): string[] {
  const steal = Number.isFinite(r.stealPct) ? `steal ${fmtFixed(r.stealPct, 0)}%` : '';
  const brokerNote = w
    ? `broker GC ${fmtFixed(w.allMs, 0)} ms (${w.majorCount} major, ${fmtFixed(w.majorMs, 0)} ms); ${fmtInt(w.fsyncs)} fsync passes, mean ${fmtFixed(w.fsyncs > 0 ? w.fsyncMs / w.fsyncs : Number.NaN, 2)} ms, ${fmtInt(w.fsyncsSlow)} over 25 ms`
    : '';
  const problem = r.error ? `ERROR ${r.error.slice(0, 100)}` : r.received !== r.sent ? `received ${fmtInt(r.received)} of ${fmtInt(r.sent)}` : '';
  const tick = Number.isFinite(r.maxTickGapMs) ? `producer tick gap ${fmtFixed(r.maxTickGapMs, 1)} ms` : '';
  const rebalances = r.rebalances > 0 ? `${r.rebalances} rebalances` : '';
  const note = [steal, tick, rebalances, brokerNote, problem].filter(Boolean).join('; ');
  return [name, fmtFixed(r.p50, 2), fmtFixed(r.p99, 2), fmtFixed(r.p999, 2), refP99 === undefined ? '' : fmtFixed(r.p99 / refP99, 2), note];
}

/** The median of a percentile over the measurements that did not fail. */
function medianOf(rs: Result[], k: 'p50' | 'p99' | 'p999'): number {
  return median(rs.filter((r) => !r.error).map((r) => r[k]));
}

/** The medians of several measurements' percentiles, as one row (ratio: of the medians). */
function medianRow(name: string, rs: Result[], ref?: Result[]): string[] {
  const p99 = medianOf(rs, 'p99');
  let ratio = '';
  let note = `median of ${rs.filter((r) => !r.error).length}`;
  if (ref) {
    ratio = fmtFixed(p99 / medianOf(ref, 'p99'), 2);
    const pairs = rs.flatMap((r, i) => (r.error || ref[i]?.error ? [] : [r.p99 / ref[i]!.p99])).sort((a, b) => a - b);
    if (pairs.length > 0) note += `; each run / the reference run before it: ${pairs.map((x) => fmtFixed(x, 2)).join(', ')}`;
  }
  return [name, fmtFixed(medianOf(rs, 'p50'), 2), fmtFixed(p99, 2), fmtFixed(medianOf(rs, 'p999'), 2), ratio, note];
}

export async function run(argv: string[]): Promise<number> {
  let v: Record<string, string | boolean | undefined>;
  try {
    v = parseArgs({
      args: argv,
      options: {
        topics: { type: 'string', default: '100' },
        'partitions-per-topic': { type: 'string', default: '100' },
        groups: { type: 'string', default: '1000' },
        busy: { type: 'string', default: '1000' },
        'busy-rate': { type: 'string', default: '10' },
        'duration-ms': { type: 'string', default: '10000' },
        repeat: { type: 'string', default: '3' },
        'broker-args': { type: 'string', default: '' },
        'broker-node-args': { type: 'string', default: '' },
        verbose: { type: 'boolean', default: false },
        help: { type: 'boolean', default: false },
      },
      strict: true,
    }).values;
  } catch (err) {
    process.stderr.write(`${(err as Error).message}\n`);
    return 2;
  }
  if (v.help) {
    process.stdout.write('usage: npm run bench -- scale [--topics 100] [--partitions-per-topic 100] [--groups 1000] [--busy 1000] [--busy-rate 10] [--duration-ms 10000] [--repeat 3] [--broker-args "..."] [--broker-node-args "..."]\n');
    return 0;
  }
  const num = (k: string) => {
    const n = Number(v[k]);
    if (!Number.isSafeInteger(n) || n < 0) throw new Error(`--${k} must be a non-negative integer`);
    return n;
  };
  const topics = num('topics');
  const perTopic = num('partitions-per-topic');
  const groups = num('groups');
  const busy = Math.min(num('busy'), topics * perTopic);
  const busyRate = num('busy-rate');
  const durationMs = num('duration-ms');
  const repeat = num('repeat');
  if (repeat < 1) throw new Error('--repeat must be at least 1');
  const brokerArgs = splitArgs(String(v['broker-args']));
  const brokerNodeArgs = splitArgs(String(v['broker-node-args']));
  const verbose = v.verbose === true;
  installCleanupHandlers();
  const dir = makeTempDir('tributary-scale-');
  const dataDir = path.join(dir, 'data');
  let broker: { b: BrokerHandle; healthPort: number; readyMs: number } | undefined;
  let empty: { b: BrokerHandle; healthPort: number; readyMs: number } | undefined;
  let load: Child | undefined;
  const members = new Members();
  const facts: string[][] = [];
  const lat: string[][] = [];
  let failed = false;
  const host = '127.0.0.1';
  let hotTopics = 0;
  // A fresh hot topic each time: a new group reading from the earliest offset would read the last run's too.
  const measure = async (on: { b: BrokerHandle; healthPort: number }) => {
    const topic = `${HOT}-${++hotTopics}`;
    await createTopic(host, on.b.port, topic, HOT_PARTITIONS);
    return withBrokerWindow(on.healthPort, () =>
      measureLatency({ target: 'broker', host, port: on.b.port, topic, partitions: HOT_PARTITIONS, rate: 10_000, size: 1024, durationMs, warmupMs: 1000, dir, group: `lat-${topic}`, settleMs: 15_000, verbose }),
    );
  };
  try {
    process.stdout.write(`scale (node ${process.version}): ${fmtInt(topics * perTopic)} partitions in ${topics} topics, ${fmtInt(groups)} groups; hot: ${HOT_PARTITIONS} partitions at 10k/s x 1 KiB\n`);
    broker = await start(dataDir, brokerArgs, brokerNodeArgs);
    const fresh = procStats(broker.b.child.proc.pid);
    facts.push(['empty broker: RSS / open fds', `${fmtFixed(fresh.rssMiB, 0)} MiB / ${fresh.fds}`]);

    process.stderr.write(`  creating ${fmtInt(topics * perTopic)} partitions ...\n`);
    const names = Array.from({ length: topics }, (_, i) => `s-${i}`);
    const t0 = nowMs();
    for (const name of names) await createTopic(host, broker.b.port, name, perTopic);
    facts.push([`create ${fmtInt(topics * perTopic)} partitions (${topics} CREATEs)`, `${fmtFixed((nowMs() - t0) / 1000, 1)} s`]);
    process.stderr.write(`  joining ${fmtInt(groups)} groups ...\n`);
    const t1 = nowMs();
    await members.join(host, broker.b.port, groups, names);
    facts.push([`join and sync ${fmtInt(groups)} groups (one member each)`, `${fmtFixed((nowMs() - t1) / 1000, 1)} s`]);
    const full = procStats(broker.b.child.proc.pid);
    facts.push(['loaded broker: RSS / open fds', `${fmtFixed(full.rssMiB, 0)} MiB / ${full.fds}`]);

    // The reference broker runs beside the loaded one, idle while the other measures; taking turns, both
    // see the same machine (a shared VM's slow minutes move the tail more than anything the broker does).
    empty = await start(path.join(dir, 'reference'), brokerArgs, brokerNodeArgs);
    const refs: Result[] = [];
    const idles: Result[] = [];
    for (let i = 1; i <= repeat; i++) {
      process.stderr.write(`  [${i}/${repeat}] reference latency (12 partitions, empty broker) ...\n`);
      const ref = await measure(empty);
      refs.push(ref.r);
      lat.push(latencyRow(`12 partitions, empty broker (reference) #${i}`, ref.r, ref.w));
      process.stderr.write(`  [${i}/${repeat}] latency with the rest idle ...\n`);
      const idle = await measure(broker);
      idles.push(idle.r);
      lat.push(latencyRow(`12 hot partitions, ${fmtInt(topics * perTopic)} idle #${i}`, idle.r, idle.w, ref.r.p99));
    }
    await empty.b.child.stop(60_000);
    empty = undefined;
    if (repeat > 1) {
      lat.push(medianRow('12 partitions, empty broker (reference)', refs));
      lat.push(medianRow(`12 hot partitions, ${fmtInt(topics * perTopic)} idle`, idles, refs));
    }
    const refP99 = medianOf(refs, 'p99');

    if (busy > 0 && busyRate > 0) {
      load = spawnNode('load', path.join(BENCH_DIR, 'scale-load.js'), ['--host', host, '--port', String(broker.b.port), '--topics', String(topics), '--partitions-per-topic', String(perTopic), '--busy', String(busy), '--rate', String(busyRate)], { echoStderr: verbose, stdin: true });
      await load.waitJson((x) => x.event === 'running', 60_000);
      process.stderr.write(`  latency with ${fmtInt(busy)} partitions at ${busyRate} records/s each ...\n`);
      const loaded = await measure(broker);
      lat.push(latencyRow(`12 hot partitions, ${fmtInt(busy)} more at ${busyRate}/s each`, loaded.r, loaded.w, refP99));
      const busyStats = procStats(broker.b.child.proc.pid);
      facts.push([`busy broker (${fmtInt(busy * busyRate)} records/s in the background): RSS / open fds`, `${fmtFixed(busyStats.rssMiB, 0)} MiB / ${busyStats.fds}`]);
      const m = await scrapeMetrics(broker.healthPort);
      const mib = (name: string) => {
        const v = m?.get(name);
        return v === undefined ? '-' : `${fmtFixed(v / 1048576, 0)} MiB`;
      };
      facts.push(['busy broker: JS heap used / heap total / tail caches', `${mib('tributary_nodejs_heap_size_used_bytes')} / ${mib('tributary_nodejs_heap_size_total_bytes')} / ${mib('tributary_tail_cache_bytes')}`]);
      load.proc.stdin?.end();
      const r = await load.waitJson<{ sent: number; acked: number; unanswered: number; errors: number; firstError: string }>((x) => x.event === 'result', 30_000).catch(() => undefined);
      if (r) {
        facts.push([
          'background load: records sent / acked / unanswered at the stop / failed',
          `${fmtInt(r.sent)} / ${fmtInt(r.acked)} / ${fmtInt(r.unanswered)} / ${fmtInt(r.errors)}${r.firstError ? ` (first: ${r.firstError.slice(0, 80)})` : ''}`,
        ]);
      }
      await load.stop();
      load = undefined;
    }
    for (const r of [...refs, ...idles]) if (r.error) failed = true;
    facts.push(['member heartbeats refused', String(members.failures)]);
    await members.close();

    process.stderr.write('  clean restart ...\n');
    await broker.b.child.stop(60_000);
    broker = await start(dataDir, brokerArgs, brokerNodeArgs);
    const clean = procStats(broker.b.child.proc.pid);
    facts.push(['clean restart: start to /ready', `${fmtFixed(broker.readyMs / 1000, 1)} s (RSS ${fmtFixed(clean.rssMiB, 0)} MiB, ${clean.fds} fds)`]);
    process.stderr.write('  kill -9 restart ...\n');
    broker.b.child.proc.kill('SIGKILL');
    await broker.b.child.exited;
    broker = await start(dataDir, brokerArgs, brokerNodeArgs);
    const crash = procStats(broker.b.child.proc.pid);
    facts.push(['kill -9 restart (recovery): start to /ready', `${fmtFixed(broker.readyMs / 1000, 1)} s (RSS ${fmtFixed(crash.rssMiB, 0)} MiB, ${crash.fds} fds)`]);
  } catch (err) {
    failed = true;
    process.stderr.write(`scale failed: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
  } finally {
    await members.close().catch(() => {});
    if (load) await load.stop();
    if (empty) await empty.b.child.stop(60_000);
    if (broker) await broker.b.child.stop(60_000);
    removeTempDir(dir);
  }
  process.stdout.write(`\n${table(['measure', 'value'], facts)}\n\n${table(['W2 latency (10k/s x 1 KiB, open loop)', 'p50 ms', 'p99 ms', 'p99.9 ms', 'p99 / reference', 'notes'], lat)}\n`);
  return failed ? 1 : 0;
}

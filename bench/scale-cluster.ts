/**
 * `npm run bench -- scale-cluster`: many partitions on a cluster (bench/README.md, "scale-cluster").
 *
 * One etcd and --brokers broker processes (src/cli/local-cluster.ts, the dev-cluster settings). In one run:
 *   1. each broker's RSS and open file descriptors, empty;
 *   2. --topics x --partitions-per-topic partitions with --replication-factor created (time; CREATE
 *      answers once every new partition's leader serves it);
 *   3. each broker's RSS, open fds, replicas hosted, partitions led and partition directories on disk;
 *   4. a clean restart and a kill -9 restart of one broker: time until it is registered again and no
 *      partition is under-replicated, and its RSS and fds after;
 * with each broker's longest event-loop stall since the row before (the first row: since it started).
 * The limit on open files this process runs under (inherited by the brokers) is printed: run it as
 * `(ulimit -n 1024; npm run bench -- scale-cluster --broker-args="--max-open-segment-files 800")` to check
 * that 10k partitions fit under 1,024 (the hard limit: Node raises its soft limit to the hard one).
 */
import fs from 'node:fs';
import { parseArgs } from 'node:util';
import { LocalCluster, type LocalClusterStatus } from 'tributary-broker/cli/local-cluster.js';
import { Connection } from 'tributary-protocol/connection.js';
import { fmtFixed, fmtInt, installCleanupHandlers, nowMs, procStats, scrapeMetrics, splitArgs, table, waitFor } from './lib.js';

export const description = '10k partitions on a 3-broker cluster: create and restart times, RSS and open fds per broker';

const USAGE =
  'usage: npm run bench -- scale-cluster [--brokers 3] [--topics 100] [--partitions-per-topic 100] [--replication-factor 3] [--broker-args="..."] [--verbose]\n';

function softFdLimit(): string {
  const limits = fs.readFileSync('/proc/self/limits', 'utf8');
  const m = /Max open files\s+(\S+)\s+(\S+)/.exec(limits);
  return m ? `${m[1]} (hard ${m[2]})` : 'unknown';
}

/** Partition directories a broker holds (`<data-dir>/logs/<topic>~<id>/<partition>`): what it opened and kept. */
function partitionDirs(dataDir: string): number {
  const logs = `${dataDir}/logs`;
  let n = 0;
  for (const topic of fs.existsSync(logs) ? fs.readdirSync(logs, { withFileTypes: true }) : []) {
    if (!topic.isDirectory()) continue;
    for (const p of fs.readdirSync(`${logs}/${topic.name}`, { withFileTypes: true })) if (p.isDirectory() && /^\d+$/.test(p.name)) n++;
  }
  return n;
}

/**
 * The longest event-loop stall of a broker since the previous call (prom-client's
 * `nodejs_eventloop_lag_max_seconds` resets on every scrape), in ms: a stall past a second makes the
 * broker treat its own lease as unconfirmed (cluster/lease-keeper.ts).
 */
async function loopStallMs(healthPort: number): Promise<number | undefined> {
  const lag = (await scrapeMetrics(healthPort))?.get('tributary_nodejs_eventloop_lag_max_seconds');
  return lag === undefined ? undefined : lag * 1000;
}

/**
 * How often the cluster's status is asked for. Each answer lists every partition (10,000 here): asked
 * every 100 ms, building it was 29 % of a loaded broker's longest stretch without an idle sample in
 * a profile, so the bench loaded the broker whose stalls it reports. The times to "fully in sync" are
 * accurate to this interval.
 */
const STATUS_POLL_MS = 1000;

/** Every broker registered, every partition led, none under-replicated. */
async function healthy(cluster: LocalCluster, brokers: number, partitions: number): Promise<LocalClusterStatus | false> {
  const s = await cluster.status();
  const ok = s.brokers.length === brokers && s.under_replicated === 0 && s.leaderless === 0 && s.partitions.filter((p) => !p.topic.startsWith('__')).length >= partitions;
  return ok ? s : false;
}

export async function run(argv: string[]): Promise<number> {
  let v: Record<string, string | boolean | undefined>;
  try {
    v = parseArgs({
      args: argv,
      options: {
        brokers: { type: 'string', default: '3' },
        topics: { type: 'string', default: '100' },
        'partitions-per-topic': { type: 'string', default: '100' },
        'replication-factor': { type: 'string', default: '3' },
        'broker-args': { type: 'string', default: '' },
        verbose: { type: 'boolean', default: false },
        help: { type: 'boolean', default: false },
      },
      strict: true,
      allowPositionals: false,
    }).values;
  } catch (err) {
    process.stderr.write(`${(err as Error).message}\n${USAGE}`);
    return 2;
  }
  if (v.help) {
    process.stdout.write(USAGE);
    return 0;
  }
  const num = (k: string, min: number): number => {
    const n = Number(v[k]);
    if (!Number.isSafeInteger(n) || n < min) throw new Error(`--${k} must be an integer >= ${min}`);
    return n;
  };
  let brokers: number;
  let topics: number;
  let perTopic: number;
  let rf: number;
  try {
    brokers = num('brokers', 1);
    topics = num('topics', 1);
    perTopic = num('partitions-per-topic', 1);
    rf = num('replication-factor', 1);
    if (rf > brokers) throw new Error('--replication-factor may not exceed --brokers');
  } catch (err) {
    process.stderr.write(`${(err as Error).message}\n${USAGE}`);
    return 2;
  }
  // An interrupted run must not leave its cluster behind (LocalCluster kills its children on exit).
  installCleanupHandlers();
  const total = topics * perTopic;
  const verbose = v.verbose === true;
  const facts: string[][] = [];
  const perBroker: string[][] = [];
  let failed = false;
  let cluster: LocalCluster | undefined;
  process.stdout.write(
    `scale-cluster (node ${process.version}): ${fmtInt(total)} partitions in ${topics} topics, replication factor ${rf}, ${brokers} brokers; limit on open files: ${softFdLimit()}\n`,
  );
  try {
    cluster = await LocalCluster.start({
      brokers,
      brokerArgs: splitArgs(String(v['broker-args'])),
      timeoutMs: 300_000,
      onLog: verbose ? (who, line) => process.stderr.write(`[${who}] ${line}\n`) : undefined,
    });
    const c = cluster;
    const stats = async (label: string, s?: LocalClusterStatus) => {
      for (const b of c.brokers) {
        const p = procStats(b.pid);
        const hosted = s ? s.partitions.filter((x) => x.replicas.includes(b.id)).length : 0;
        const led = s ? s.partitions.filter((x) => x.leader === b.id).length : 0;
        const stall = await loopStallMs(b.healthPort);
        perBroker.push([
          label,
          String(b.id),
          fmtFixed(p.rssMiB, 0),
          fmtInt(p.fds),
          s ? fmtInt(hosted) : '',
          s ? fmtInt(led) : '',
          fmtInt(partitionDirs(b.dataDir)),
          stall === undefined ? '?' : fmtInt(stall),
        ]);
      }
    };
    await stats('empty');

    process.stderr.write(`  creating ${fmtInt(total)} partitions ...\n`);
    const conn = await Connection.connect({ host: '127.0.0.1', port: c.brokers[0]!.port });
    const t0 = nowMs();
    try {
      for (let i = 0; i < topics; i++) await conn.command('CREATE', { topic: `s-${i}`, partitions: perTopic, replication_factor: rf });
    } finally {
      await conn.close();
    }
    facts.push([`create ${fmtInt(total)} partitions, RF ${rf} (${topics} CREATEs, each answered once the leaders serve)`, `${fmtFixed((nowMs() - t0) / 1000, 1)} s`]);
    const t1 = nowMs();
    const s = await waitFor('every replica in sync', () => healthy(c, brokers, total), 600_000, String, STATUS_POLL_MS);
    facts.push(['then until no partition is under-replicated', `${fmtFixed((nowMs() - t1) / 1000, 1)} s`]);
    await stats('loaded', s);

    const restartOne = async (id: number, how: 'clean' | 'kill -9') => {
      process.stderr.write(`  ${how} restart of broker ${id} ...\n`);
      if (how === 'kill -9') await c.kill(id, 'SIGKILL');
      const t = nowMs();
      await c.restart(id);
      const up = nowMs() - t;
      const after = await waitFor('the cluster healthy again', () => healthy(c, brokers, total), 600_000, String, STATUS_POLL_MS);
      facts.push([`${how} restart of broker ${id}: registered / fully in sync`, `${fmtFixed(up / 1000, 1)} s / ${fmtFixed((nowMs() - t) / 1000, 1)} s`]);
      await stats(`after ${how} restart`, after);
    };
    if (brokers > 1) {
      await restartOne(1, 'clean');
      await restartOne(brokers - 1, 'kill -9');
    }
  } catch (err) {
    failed = true;
    process.stderr.write(`scale-cluster failed: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
  } finally {
    if (cluster) await cluster.stop().catch(() => {});
  }
  process.stdout.write(`\n${table(['measure', 'value'], facts)}\n\n${table(['when', 'broker', 'RSS MiB', 'open fds', 'replicas hosted', 'partitions led', 'partition dirs', 'longest stall ms'], perBroker)}\n`);
  return failed ? 1 : 0;
}

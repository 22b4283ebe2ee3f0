/**
 * `npm run bench -- reassign`: moving a partition that holds `--size-mib` (default 1 GiB) to another
 * broker with a throttle, under a producer at a fixed rate.
 *
 * One etcd and 2 brokers (src/cli/local-cluster.ts), min-insync-replicas 1; topic `reassign`, 1
 * partition, replication factor 1 on broker 0. It is filled with 64 KiB records (PUBLISH acks=1,
 * pipelined), then a producer sends PUBLISH acks=all of `--record-bytes` at `--rate` records/s to the
 * partition leader (following NOT_LEADER) for `--baseline-s` seconds before the move; then `REASSIGN
 * 0:1` with `--throttle` bytes/s moves it to broker 1 (add broker 1, catch up, move leadership, drop
 * broker 0's copy) while the producer goes on. Reported: the time from the request to completion, the
 * copy rate achieved against the throttle (overall, and the highest over any 2 s window, from the new
 * replica's position sampled every 500 ms), the producer's p50/p99/max before and during the move, and
 * any acknowledged record not at its offset at the end (exit 1).
 */
import { parseArgs } from 'node:util';
import { LocalCluster } from 'tributary-broker/cli/local-cluster.js';
import { parseLine } from 'tributary-protocol/command.js';
import { Connection } from 'tributary-protocol/connection.js';
import { TributaryError } from 'tributary-protocol/errors.js';
import { fmtFixed, fmtInt, installCleanupHandlers, makeTempDir, nowMs, percentile, table } from './lib.js';

export const description = 'reassign a partition holding 1 GiB to another broker with a throttle, under a fixed-rate acks=all producer: time, rate vs throttle, producer p99';

const USAGE = 'usage: npm run bench -- reassign [--size-mib 1024] [--throttle 52428800] [--rate 200] [--record-bytes 1000] [--baseline-s 10] [--verbose]\n';
const TOPIC = 'reassign';
const FILL_RECORD = 64 * 1024;
const BROKER_ARGS = [
  ...['--broker-lease-ttl-seconds', '2', '--replica-lag-max-ms', '10000', '--replica-fetch-wait-ms', '200'],
  ...['--etcd-request-timeout-ms', '2000', '--offsets-topic-partitions', '2', '--transaction-state-partitions', '1'],
  ...['--flush', 'os', '--min-insync-replicas', '1', '--internal-replication-factor', '1'],
];

interface Options {
  sizeMiB: number;
  throttle: number;
  rate: number;
  recordBytes: number;
  baselineS: number;
  verbose: boolean;
  help: boolean;
}

function parseOptions(argv: string[]): Options | string {
  let v: Record<string, string | boolean | undefined>;
  try {
    v = parseArgs({
      args: argv,
      options: {
        'size-mib': { type: 'string', default: '1024' },
        throttle: { type: 'string', default: String(50 * 1024 * 1024) },
        rate: { type: 'string', default: '200' },
        'record-bytes': { type: 'string', default: '1000' },
        'baseline-s': { type: 'string', default: '10' },
        verbose: { type: 'boolean', default: false },
        help: { type: 'boolean', default: false },
      },
      strict: true,
    }).values as Record<string, string | boolean | undefined>;
  } catch (err) {
    return `${(err as Error).message}\n${USAGE}`;
  }
  const num = (name: string, min: number): number | string => {
    const x = Number(v[name]);
    return Number.isSafeInteger(x) && x >= min ? x : `--${name} must be an integer >= ${min}\n${USAGE}`;
  };
  const out = {
    sizeMiB: num('size-mib', 1),
    throttle: num('throttle', 1024),
    rate: num('rate', 1),
    recordBytes: num('record-bytes', 1),
    baselineS: num('baseline-s', 1),
  };
  for (const x of Object.values(out)) if (typeof x === 'string') return x;
  return { ...(out as Record<keyof typeof out, number>), verbose: v.verbose === true, help: v.help === true };
}

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

async function connect(address: string): Promise<Connection> {
  const i = address.lastIndexOf(':');
  return Connection.connect({ host: address.slice(0, i), port: Number(address.slice(i + 1)), connectTimeoutMs: 2000 });
}

interface PartitionInfo {
  leader: number;
  replicas: number[];
  isr: number[];
}

async function state(admin: Connection): Promise<PartitionInfo> {
  const s = (await admin.json('CLUSTER_STATUS')) as unknown as { partitions: Array<PartitionInfo & { topic: string; partition: number }> };
  return s.partitions.find((p) => p.topic === TOPIC && p.partition === 0)!;
}

/** A fixed-rate acks=all producer on its own connection to the leader (re-found after NOT_LEADER). */
class RateProducer {
  readonly sends: Array<{ at: number; ms: number }> = [];
  readonly acked = new Map<number, string>();
  errors = 0;
  private stopped = false;
  private done: Promise<void> = Promise.resolve();

  constructor(
    private readonly cluster: LocalCluster,
    private readonly rate: number,
    private readonly recordBytes: number,
  ) {}

  start(): void {
    this.done = this.loop();
  }

  async stop(): Promise<void> {
    this.stopped = true;
    await this.done;
  }

  private async leaderConn(): Promise<Connection> {
    for (;;) {
      try {
        const c = await connect(this.cluster.brokers[0]!.address);
        try {
          const leaders = parseLine(await c.command('METADATA', { topic: TOPIC })).params.get('leaders')!.split(',');
          if (leaders[0] && leaders[0] !== '-') return await connect(leaders[0]);
        } finally {
          await c.close().catch(() => {});
        }
      } catch {
        // retried below
      }
      await sleep(20);
    }
  }

  private async loop(): Promise<void> {
    const pad = 'p'.repeat(Math.max(0, this.recordBytes - 12));
    const interval = 1000 / this.rate;
    let conn = await this.leaderConn();
    const t0 = nowMs();
    for (let i = 0; !this.stopped; i++) {
      const due = t0 + i * interval;
      const wait = due - nowMs();
      if (wait > 0) await sleep(wait);
      const value = `${String(i).padStart(10, '0')}:${pad}`;
      // The latency counts from when the send was due (coordinated omission: a stall delays later sends too).
      for (;;) {
        try {
          const r = await conn.json<{ offset: number }>('PUBLISH', { topic: TOPIC, partition: 0, acks: 'all', message: value });
          this.sends.push({ at: due, ms: nowMs() - due });
          this.acked.set(r.offset, value);
          break;
        } catch (err) {
          this.errors++;
          if (!(err instanceof TributaryError) || err.retriable || err.code === 'connection_lost') {
            await conn.close().catch(() => {});
            conn = await this.leaderConn();
            continue;
          }
          throw err;
        }
      }
    }
    await conn.close().catch(() => {});
  }
}

function latencyRow(what: string, xs: number[]): string[] {
  const s = [...xs].sort((a, b) => a - b);
  if (s.length === 0) return [what, '0', '-', '-', '-'];
  return [what, fmtInt(s.length), fmtFixed(percentile(s, 50), 1), fmtFixed(percentile(s, 99), 1), fmtFixed(s[s.length - 1]!, 1)];
}

export async function run(argv: string[]): Promise<number> {
  const o = parseOptions(argv);
  if (typeof o === 'string') {
    process.stderr.write(o);
    return 2;
  }
  if (o.help) {
    process.stdout.write(USAGE);
    return 0;
  }
  installCleanupHandlers();
  const dataDir = makeTempDir('tributary-bench-reassign-');
  const cluster = await LocalCluster.start({
    brokers: 2,
    dataDir,
    brokerArgs: BROKER_ARGS,
    onLog: (who, line) => {
      if (o.verbose && who !== 'etcd') process.stderr.write(`[${who}] ${line}\n`);
    },
  });
  let code = 0;
  let producer: RateProducer | undefined;
  const admin = await connect(cluster.brokers[0]!.address);
  try {
    await admin.command('CREATE', { topic: TOPIC, partitions: 1, replication_factor: 1 });
    const before = await state(admin);
    if (before.replicas.join() !== '0') throw new Error(`expected the partition on broker 0, got ${before.replicas.join(',')}`);

    // Fill: 64 KiB records, 32 in flight, acks=1 on the leader.
    const total = o.sizeMiB * 1024 * 1024;
    const n = Math.ceil(total / FILL_RECORD);
    const body = 'f'.repeat(FILL_RECORD);
    const t0 = nowMs();
    const lead = await connect(cluster.brokers[0]!.address);
    try {
      for (let i = 0; i < n; i += 32) {
        await Promise.all(Array.from({ length: Math.min(32, n - i) }, () => lead.command('PUBLISH', { topic: TOPIC, partition: 0, acks: 1, message: body })));
      }
    } finally {
      await lead.close().catch(() => {});
    }
    const size = (await admin.json<{ partitions: Array<{ size_bytes: number; leo: number }> }>('DESCRIBE', { topic: TOPIC })).partitions[0]!;
    process.stderr.write(`filled ${fmtInt(size.size_bytes)} bytes (${fmtInt(size.leo)} records) in ${fmtInt(nowMs() - t0)} ms\n`);

    producer = new RateProducer(cluster, o.rate, o.recordBytes);
    producer.start();
    await sleep(o.baselineS * 1000);
    const startAt = nowMs();
    await admin.command('REASSIGN', { topic: TOPIC, assignments: '0:1', throttle: o.throttle });
    const samples: Array<{ t: number; offset: number }> = [];
    let caughtUpAt: number | undefined;
    for (;;) {
      const list = (await admin.json<{ reassignments: Array<{ behind: Array<{ offset: number | null; in_sync: boolean }> }> }>('REASSIGNMENTS', { topic: TOPIC })).reassignments;
      const now = nowMs();
      if (list.length === 0) break;
      const b = list[0]!.behind[0];
      if (b?.offset !== null && b?.offset !== undefined) samples.push({ t: now, offset: b.offset });
      if (b?.in_sync && caughtUpAt === undefined) caughtUpAt = now;
      if (o.verbose && b) process.stderr.write(`+${fmtInt(now - startAt)} ms: new replica at ${b.offset} ${b.in_sync ? '(in sync)' : ''}\n`);
      await sleep(500);
    }
    const doneAt = nowMs();
    await sleep(Math.min(5000, o.baselineS * 1000));
    await producer.stop();
    const after = await state(admin);

    // Copy rate from the sampled positions: records before the fill's end are FILL_RECORD bytes each.
    const bytesAt = (offset: number) => Math.min(offset, size.leo) * (size.size_bytes / Math.max(1, size.leo));
    const copyEnd = caughtUpAt ?? doneAt;
    const overall = size.size_bytes / ((copyEnd - startAt) / 1000);
    let peak = 0;
    for (const a of samples) {
      const b = samples.find((x) => x.t >= a.t + 2000);
      if (b) peak = Math.max(peak, (bytesAt(b.offset) - bytesAt(a.offset)) / ((b.t - a.t) / 1000));
    }
    // Every acknowledged record at its offset on the new leader.
    const leaderConn = await connect(cluster.brokers[after.leader]!.address);
    let lost = 0;
    try {
      const offsets = [...producer.acked.keys()];
      const log = new Map<number, string>();
      for (let off = Math.min(...offsets); ; ) {
        const batch = await leaderConn.consume({ topic: TOPIC, partition: 0, offset: off, batch: 1000 });
        if (batch.records.length === 0) break;
        for (const r of batch.records) log.set(r.offset, r.value.toString());
        off = batch.records[batch.records.length - 1]!.offset + 1;
      }
      lost = offsets.filter((x) => log.get(x) !== producer!.acked.get(x)).length;
    } finally {
      await leaderConn.close().catch(() => {});
    }
    const duringSends = producer.sends.filter((s) => s.at >= startAt && s.at < doneAt).map((s) => s.ms);
    const beforeSends = producer.sends.filter((s) => s.at < startAt).map((s) => s.ms);
    const out = [
      '',
      `reassign: ${fmtInt(size.size_bytes)} bytes on broker 0 moved to broker 1 (replication factor 1, 2 brokers + etcd on this host), throttle ${fmtInt(o.throttle)} B/s, producer acks=all ${o.rate}/s of ${o.recordBytes} B`,
      '',
      table(
        ['measure', 'value'],
        [
          ['request -> new replica in sync', `${fmtInt(copyEnd - startAt)} ms`],
          ['request -> completed (leader moved, old copy dropped)', `${fmtInt(doneAt - startAt)} ms`],
          ['copy rate, overall', `${fmtInt(overall)} B/s (${fmtFixed((overall / o.throttle) * 100, 1)} % of the throttle)`],
          ['copy rate, highest 2 s window', `${fmtInt(peak)} B/s (${fmtFixed((peak / o.throttle) * 100, 1)} % of the throttle)`],
          ['replicas after', `${after.replicas.join(',')} (leader ${after.leader})`],
          ['slowest send during the move', (() => {
            const w = producer!.sends.filter((x) => x.at >= startAt && x.at < doneAt).reduce((m, x) => (x.ms > m.ms ? x : m), { at: startAt, ms: 0 });
            return `${fmtFixed(w.ms, 1)} ms, due at +${fmtInt(w.at - startAt)} ms`;
          })()],
          ['acknowledged records lost', String(lost)],
          ['producer errors retried', String(producer.errors)],
        ],
      ),
      '',
      table(['producer latency', 'sends', 'p50 ms', 'p99 ms', 'max ms'], [latencyRow(`before (${o.baselineS} s)`, beforeSends), latencyRow('during the move', duringSends)]),
      '',
    ];
    process.stdout.write(out.join('\n'));
    if (lost > 0 || after.replicas.join() !== '1') code = 1;
  } catch (err) {
    process.stderr.write(`reassign benchmark failed: ${err instanceof Error ? err.stack : String(err)}\n`);
    code = 1;
  } finally {
    await producer?.stop().catch(() => {});
    await admin.close().catch(() => {});
    await cluster.stop();
  }
  return code;
}

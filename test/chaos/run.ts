/**
 * One chaos run: cluster up, workload and nemesis for `durationMs`, heal, settle, read the ground truth,
 * check the history. Everything it starts is stopped in a finally. Prints as it goes and returns the
 * checker's report with a formatted summary.
 *
 * Durability: brokers run `--flush always` by default (CHAOS_FLUSH=os to trade it for speed). kill -9
 * cannot lose what a process already handed to the kernel (the page cache outlives the process), so for
 * the process-level faults injected here `os` stays as safe as `always`; only a machine crash would
 * tell them apart, and this suite injects none. `always` is the default so that no verdict rests on that
 * argument.
 */
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { type CheckReport, check, SAFETY_KINDS, safetyAnomalyCount } from './checker.js';
import { sleep } from '../helpers/util.js';
import { ChaosCluster, type ClusterStatus } from './cluster.js';
import { History, type Op, type ProcessOp, type StatusOp, type TxnOp } from './history.js';
import { describePlan, Nemesis, type PlannedFault, planSchedule } from './nemesis.js';
import { KafkaTransactions } from './kafka-workload.js';
import { ConsumerGroup, Producers } from './workload.js';

export interface ChaosOptions {
  durationMs: number;
  seed: number;
  flush?: 'always' | 'os';
  /** Which brokers run `--journal true`: 'mixed' (the default) the even ids, so the run has both kinds. */
  journal?: 'on' | 'off' | 'mixed';
  /** The brokers' log level (warn by default); info shows every role change and coordinator load. */
  logLevel?: string;
  brokers?: number;
  partitions?: number;
  consumers?: number;
  log?: (line: string) => void;
}

export interface ChaosResult {
  seed: number;
  dir: string;
  report: CheckReport | undefined;
  summary: string;
  /** Why the run failed (safety anomalies, an unverifiable final state); empty when it passed. */
  failures: string[];
}

const TOPIC = 'chaos';
const GROUP = 'chaos-group';
/** The kafkajs producers' process names (kafka-workload.ts). */
const KAFKA_PROCESS = 'ktx';

/**
 * What makes a run fail besides anomalies: consumers that never read (nothing of the read side was
 * checked), a kafkajs producer that never committed (the Kafka port's transactions went unchecked) and
 * worker processes that exited with an error of their own (not killed by the nemesis).
 */
export function workloadFailures(report: Pick<CheckReport, 'stats'>, ops: readonly Op[]): string[] {
  const out: string[] = [];
  if (report.stats.deliveries === 0) out.push('the consumers delivered nothing: no read-side property was checked');
  if (!ops.some((op) => op.f === 'txn' && op.action === 'commit' && op.outcome === 'ok' && op.process.startsWith(KAFKA_PROCESS))) {
    out.push('the kafkajs producer committed no transaction: the Kafka port was not checked');
  }
  const crashed = ops.filter((op): op is ProcessOp => op.f === 'process' && op.event === 'exit' && /^code [1-9]\d* signal null$/.test(op.detail ?? ''));
  if (crashed.length > 0) out.push(`${crashed.length} worker process(es) exited with an error (${[...new Set(crashed.map((op) => op.process))].join(', ')}); see consumers.log`);
  return out;
}

function ms(v: number | undefined): string {
  return v === undefined ? 'n/a' : `${Math.round(v)} ms`;
}

export async function runChaos(o: ChaosOptions): Promise<ChaosResult> {
  const brokersN = o.brokers ?? 3;
  const partitions = o.partitions ?? 6;
  const consumersN = o.consumers ?? 3;
  const flush = o.flush ?? 'always';
  const journal = o.journal ?? 'mixed';
  const journaled = Array.from({ length: brokersN }, (_, id) => id).filter((id) => journal === 'on' || (journal === 'mixed' && id % 2 === 0));
  const dir = await fs.mkdtemp(path.join(os.tmpdir(), 'tributary-chaos-'));
  const t0 = Date.now();
  const rel = (t: number) => `+${((t - t0) / 1000).toFixed(1)} s`;
  const lines: string[] = [];
  const log = (line: string) => {
    const l = `[chaos ${rel(Date.now())}] ${line}`;
    lines.push(l);
    (o.log ?? console.log)(l);
  };
  const history = new History(path.join(dir, 'history.jsonl'));
  const plan = planSchedule(o.seed, o.durationMs, { brokers: brokersN, partitions, consumers: consumersN });
  const header = [
    `seed ${o.seed} (replay: CHAOS_SEED=${o.seed} CHAOS_MS=${o.durationMs}), ${o.durationMs} ms of faults, flush=${flush}, journal on brokers [${journaled.join(', ')}]`,
    `history: ${path.join(dir, 'history.jsonl')}`,
    'schedule (in order, until the time is up):',
    ...plan.map((f) => `  ${describePlan(f)}`),
  ];
  for (const l of header) log(l);

  let cluster: ChaosCluster | undefined;
  let producers: Producers | undefined;
  let kafkaTxns: KafkaTransactions | undefined;
  let consumers: ConsumerGroup | undefined;
  let sampling = false;
  let sampler: Promise<void> = Promise.resolve();
  const failures: string[] = [];
  // if this process dies before the finally below runs, take the children along
  const killChildren = () => {
    for (const p of [...(cluster?.brokers.map((b) => b.proc) ?? []), ...(consumers?.slots.map((s) => s.child) ?? [])]) {
      if (p && p.exitCode === null && p.signalCode === null) p.kill('SIGKILL');
    }
  };
  process.once('exit', killChildren);
  let report: CheckReport | undefined;
  let summary = '';
  try {
    cluster = await ChaosCluster.start({ brokers: brokersN, flush, journaled, dataRoot: path.join(dir, 'brokers'), logLevel: o.logLevel });
    const c = cluster;
    log(`cluster up: etcd :${c.etcd.clientPort}, brokers ${c.brokers.map((b, i) => `${i}=:${b.port} via :${c.inbound[i]!.port}`).join(' ')}`);
    await c.createTopic(TOPIC, partitions);
    await c.waitFor('a full ISR on every partition', 60_000, () => c.healthy(TOPIC));

    let lastStatus: ClusterStatus | undefined;
    sampling = true;
    sampler = (async () => {
      while (sampling) {
        const s = await c.status().catch(() => undefined);
        if (s) {
          lastStatus = s;
          const mine = s.partitions.filter((p) => p.topic === TOPIC).sort((a, b) => a.partition - b.partition);
          const op: StatusOp = { f: 'status', time: Date.now(), controller: s.controller, leaders: mine.map((p) => p.leader), isr: mine.map((p) => p.isr) };
          history.add(op);
        }
        await sleep(500);
      }
    })();

    consumers = new ConsumerGroup(history, c.bootstrap, TOPIC, GROUP, consumersN);
    consumers.start();
    if (!(await consumers.waitReady(30_000))) log(`not every consumer became ready in 30 s\n${consumers.stderrTails(2000)}`);
    producers = new Producers({ history, bootstrap: c.bootstrap, topic: TOPIC, partitions, seed: o.seed });
    producers.start();
    kafkaTxns = new KafkaTransactions({ history, bootstrap: c.kafkaBootstrap, topic: TOPIC, partitions, seed: o.seed });
    kafkaTxns.start();
    log('workload running');

    const nemesis = new Nemesis({ cluster: c, consumers, history, topic: TOPIC, partitions, groupId: GROUP, log, lastStatus: () => lastStatus }, plan);
    const deadline = Date.now() + o.durationMs;
    await nemesis.run(deadline);
    await sleep(Math.max(0, deadline - Date.now()));

    log('healing every fault');
    await c.healAll();
    for (const s of consumers.slots) {
      s.held = false;
      if (!s.alive) s.spawn();
    }
    const [stopped, kafkaStopped] = await Promise.all([producers.stop(20_000), kafkaTxns.stop(20_000)]);
    log(`producers stopped (${stopped.abandoned + kafkaStopped.abandoned} operation(s) still in flight recorded as unknown)`);
    const settled = await c
      .waitFor('the cluster to settle (full ISRs)', 60_000, () => c.healthy(TOPIC))
      .then(
        () => true,
        (err) => {
          log(String(err));
          return false;
        },
      );
    const stable = await c
      .waitFor('no open transaction (LSO = HWM everywhere)', 45_000, () => c.stable(TOPIC))
      .then(
        () => true,
        () => false,
      );
    log(`settled: ISRs full ${settled}, no open transaction ${stable}`);

    // let the group drain: stop once no record was delivered for 3 s (at most 30 s)
    const drainBy = Date.now() + 30_000;
    const delivered = () => history.counts.get('poll') ?? 0;
    let seen = delivered();
    let quietSince = Date.now();
    while (Date.now() < drainBy && Date.now() - quietSince < 3000) {
      await sleep(250);
      const polls = delivered();
      if (polls !== seen) {
        seen = polls;
        quietSince = Date.now();
      }
    }
    await sleep(1500); // one more auto-commit
    await consumers.stop(8000);
    sampling = false;
    await sampler;

    const { final, errors } = await c.finalRead(TOPIC, partitions, GROUP);
    for (const e of errors) log(`final read: ${e}`);
    await fs.writeFile(path.join(dir, 'final.json'), JSON.stringify(final));
    const endTime = Date.now();
    report = check(history.ops, final, { partitions, endTime, t0 });
    const kafkaEnds = history.ops.filter((op): op is TxnOp => op.f === 'txn' && op.outcome === 'ok' && op.process.startsWith(KAFKA_PROCESS));
    const kafka = { committed: kafkaEnds.filter((op) => op.action === 'commit').length, aborted: kafkaEnds.filter((op) => op.action === 'abort').length };
    summary = formatSummary({ seed: o.seed, durationMs: o.durationMs, flush, dir, report, t0, nemesis, errors, plan, kafka });
    if (safetyAnomalyCount(report) > 0) failures.push(`${safetyAnomalyCount(report)} safety anomaly(ies)`);
    failures.push(...workloadFailures(report, history.ops));
    if (report.unverifiedPartitions.length > 0)
      failures.push(`partitions ${report.unverifiedPartitions.join(',')} could not be read at the end: nothing about them was verified`);
    if (!settled) failures.push('the cluster did not settle (full ISRs) within 60 s after every fault was healed');
    for (const l of summary.split('\n')) (o.log ?? console.log)(l);
  } catch (err) {
    failures.push(`the run failed: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}`);
    log(failures[failures.length - 1]!);
  } finally {
    process.off('exit', killChildren);
    sampling = false;
    await consumers?.killAll().catch(() => {});
    await producers?.stop(1000).catch(() => {});
    await kafkaTxns?.stop(1000).catch(() => {});
    await sampler.catch(() => {});
    if (cluster) {
      await fs.writeFile(path.join(dir, 'brokers.log'), cluster.stderrTails(200_000)).catch(() => {});
      if (consumers) await fs.writeFile(path.join(dir, 'consumers.log'), consumers.stderrTails(200_000)).catch(() => {});
    }
    await cluster?.dispose().catch(() => {});
    await history.close();
    await fs.writeFile(path.join(dir, 'run.log'), `${lines.join('\n')}\n${summary}\n`).catch(() => {});
    // the broker data is only worth keeping when something needs explaining
    if (failures.length === 0) await fs.rm(path.join(dir, 'brokers'), { recursive: true, force: true }).catch(() => {});
  }
  return { seed: o.seed, dir, report, summary, failures };
}

function formatSummary(a: {
  seed: number;
  durationMs: number;
  flush: string;
  dir: string;
  report: CheckReport;
  t0: number;
  nemesis: Nemesis;
  errors: string[];
  plan: PlannedFault[];
  /** The kafkajs producer's transactions ended as asked (its part of `report.stats`). */
  kafka: { committed: number; aborted: number };
}): string {
  const r = a.report;
  const rel = (t: number) => `+${((t - a.t0) / 1000).toFixed(1)}s`;
  const out: string[] = [];
  const row = (k: string, v: string) => out.push(`  ${k.padEnd(44)} ${v}`);
  out.push('', '==== chaos summary ====');
  row('seed', `${a.seed}  (replay: CHAOS_SEED=${a.seed} CHAOS_MS=${a.durationMs})`);
  const faultTotal = Object.values(r.faultCounts).reduce((x, y) => x + (y ?? 0), 0);
  row(
    'faults injected',
    `${faultTotal}: ${
      Object.entries(r.faultCounts)
        .map(([k, n]) => `${k} ${n}`)
        .join(', ') || 'none'
    }`,
  );
  row('acked writes', `${r.stats.ackedWrites} (unknown ${r.stats.unknownWrites}, failed ${r.stats.failedWrites})`);
  row('transactions', `committed ${r.stats.txnCommitted}, aborted ${r.stats.txnAborted}, unknown ${r.stats.txnUnknown}`);
  row('  of them kafkajs (Kafka port)', `committed ${a.kafka.committed}, aborted ${a.kafka.aborted}`);
  row('deliveries / acknowledged commits', `${r.stats.deliveries} / ${r.stats.commits}`);
  row('plain-producer duplicates (allowed)', String(r.stats.plainDuplicates));
  for (const k of SAFETY_KINDS) row(`anomaly: ${k}`, String(r.counts[k]));
  const f = (x: { median?: number; worst?: number; unresolved: number; count: number; overlapped?: number }) =>
    `median ${ms(x.median)}, worst ${ms(x.worst)} (${x.count} faults, never resolved ${x.unresolved}${x.overlapped ? `; ${x.overlapped} overlapped by another fault, left out` : ''})`;
  row('failover: fault -> first acked write', f(r.writeFailover));
  row('failover: fault -> consumption resumed', f(r.consumeFailover));
  row(
    'max producer stall with a live leader',
    r.maxStall.partition === undefined ? '0 ms' : `${ms(r.maxStall.ms)} (partition ${r.maxStall.partition} from ${rel(r.maxStall.from!)})`,
  );
  row('max consumption gap after a fault', ms(r.consumeFailover.worst));
  row('single faults: first acked write', f(r.single.writeFailover));
  row('single faults: consumption resumed', f(r.single.consumeFailover));
  row(
    'single faults: max producer stall',
    r.single.maxStall.partition === undefined ? '0 ms' : `${ms(r.single.maxStall.ms)} (partition ${r.single.maxStall.partition} from ${rel(r.single.maxStall.from!)})`,
  );
  if (r.unverifiedPartitions.length > 0) row('UNVERIFIED partitions', r.unverifiedPartitions.join(','));
  for (const e of a.errors) row('final read', e);
  for (const e of a.nemesis.errors) row('nemesis error', e);
  const ran = new Set(a.nemesis.executed.map((e) => e.plan.id));
  out.push('', `  schedule of seed ${a.seed}:`);
  for (const p of a.plan) out.push(`    ${describePlan(p)}${ran.has(p.id) ? '' : ' (not reached)'}`);
  out.push('', '  faults as run:');
  out.push(
    `    ${'id'.padEnd(4)}${'kind'.padEnd(19)}${'target'.padEnd(12)}${'at'.padEnd(9)}${'held'.padEnd(9)}${'partitions'.padEnd(13)}${'write'.padEnd(10)}${'consume'.padEnd(10)}leaders moved`,
  );
  for (const x of r.faults) {
    const held = x.end === undefined ? '?' : `${((x.end - x.start) / 1000).toFixed(1)}s`;
    out.push(
      `    ${String(x.id).padEnd(4)}${x.kind.padEnd(19)}${`${x.targets.join(',').replace(/broker /g, 'b')} `.padEnd(12)}${rel(x.start).padEnd(9)}${held.padEnd(9)}${(x.partitions.join(',') || '-').padEnd(13)}${ms(x.writeMs).padEnd(10)}${ms(x.consumeMs).padEnd(10)}${x.leadersMoved ?? '?'}`,
    );
  }
  if (r.anomalies.length > 0) {
    out.push('', '  anomalies (first few of each kind, with the fault before each):');
    for (const k of SAFETY_KINDS) {
      for (const an of r.anomalies.filter((x) => x.kind === k).slice(0, 5)) {
        out.push(`    ${k}${an.partition === undefined ? '' : ` p${an.partition}`} at ${rel(an.time)}: ${an.detail}`);
        out.push(`      after fault ${an.fault}`);
      }
    }
  }
  out.push('', `  files: ${a.dir} (history.jsonl, final.json, run.log, brokers.log, consumers.log, brokers/broker-<id>.log)`);
  const verdict =
    safetyAnomalyCount(r) > 0
      ? 'SAFETY ANOMALIES FOUND'
      : r.unverifiedPartitions.length > 0
        ? `UNVERIFIED (partitions ${r.unverifiedPartitions.join(',')} could not be read)`
        : 'no safety anomaly';
  out.push(`  verdict: ${verdict}`);
  return out.join('\n');
}

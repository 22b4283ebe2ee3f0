/**
 * The metrics operators chart (docs/operations.md, "Metrics"), scraped from real brokers: produce and
 * fetch phases, fsync durations, log size per partition, rebalance durations and group lag on a
 * standalone broker; under-replicated partitions, replica lag and ISR shrinks/expands in a cluster whose
 * follower is paused. And the Grafana dashboard charts exactly these names.
 */
import fs from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Consumer } from 'tributary-client/consumer.js';
import { Producer } from 'tributary-client/producer.js';
import { BrokerProcess, ROOT } from '../helpers/launcher.js';
import { useCluster } from '../helpers/cluster.js';
import { until } from '../helpers/util.js';

/** `name{labels} value` lines of a scrape whose name and labels match. */
function samples(text: string, name: string, labels: Record<string, string> = {}): number[] {
  const out: number[] = [];
  for (const line of text.split('\n')) {
    if (line.startsWith('#')) continue;
    const m = /^([a-z_:]+)(\{[^}]*\})? (\S+)$/.exec(line);
    if (!m || m[1] !== name) continue;
    const got = Object.fromEntries([...(m[2] ?? '').matchAll(/([a-z_]+)="([^"]*)"/g)].map((x) => [x[1], x[2]]));
    if (Object.entries(labels).every(([k, v]) => got[k] === v)) out.push(Number(m[3]));
  }
  return out;
}
const sum = (xs: number[]) => xs.reduce((a, b) => a + b, 0);

describe('metrics, standalone', () => {
  let broker: BrokerProcess;
  beforeAll(async () => {
    broker = await BrokerProcess.start({ args: ['--flush', 'always', '--offsets-topic-partitions', '2'] });
  });
  afterAll(async () => {
    await broker?.dispose();
  });

  it('produce and fetch phases, fsync, log size, rebalance duration and lag move with the traffic', async () => {
    const admin = await broker.connect();
    await admin.command('CREATE', { topic: 'm', partitions: 2 });
    const producer = new Producer({ brokers: [broker.address], acks: 'all', lingerMs: 0 });
    try {
      for (let i = 0; i < 20; i++) await producer.send({ topic: 'm', messages: [{ value: `v${i}`, partition: i % 2 }] });
    } finally {
      await producer.close();
    }
    const seen: number[] = [];
    const consumer = new Consumer({ brokers: [broker.address], groupId: 'mg', topic: 'm', autoOffsetReset: 'earliest', sessionTimeoutMs: 3000, heartbeatIntervalMs: 100, maxWaitMs: 100, autoCommitIntervalMs: 50 });
    const run = consumer.run({ eachMessage: async ({ message }) => void seen.push(message.offset) });
    try {
      await until(() => seen.length === 20, 15_000, 'all 20 read');
      await until(async () => sum(samples((await broker.health('/metrics')).body, 'tributary_group_lag', { group: 'mg' })) === 0 && samples((await broker.health('/metrics')).body, 'tributary_group_lag', { group: 'mg' }).length === 2, 15_000, 'the lag gauge at 0 for both partitions');
    } finally {
      await consumer.close();
      await run.catch(() => {});
    }
    const text = (await broker.health('/metrics')).body;
    for (const phase of ['queue', 'append', 'fsync']) expect(samples(text, 'tributary_produce_phase_seconds_count', { phase })[0], phase).toBeGreaterThanOrEqual(20);
    // Standalone: nothing to replicate, so no replication phase.
    expect(samples(text, 'tributary_produce_phase_seconds_count', { phase: 'replication' })).toEqual([]);
    for (const phase of ['queue', 'wait', 'read']) expect(samples(text, 'tributary_fetch_phase_seconds_count', { phase })[0], phase).toBeGreaterThan(0);
    // flush=always: every acknowledged append was fsynced (group commit may cover several with one pass).
    expect(samples(text, 'tributary_fsync_duration_seconds_count')[0]).toBeGreaterThan(0);
    expect(samples(text, 'tributary_failed_logs')).toEqual([0]);
    expect(samples(text, 'tributary_fsync_duration_seconds_sum')[0]).toBeGreaterThan(0);
    for (const p of ['0', '1']) expect(samples(text, 'tributary_log_size_bytes', { topic: 'm', partition: p })[0]).toBeGreaterThan(0);
    expect(samples(text, 'tributary_group_rebalance_seconds_count')[0]).toBeGreaterThanOrEqual(1);
    expect(samples(text, 'tributary_group_lag', { group: 'mg', topic: 'm' })).toEqual([0, 0]);
  });
  it('records and bytes in count what the log took, once: not an idempotent duplicate, not a refused append; a deleted topic and group take their series along', async () => {
    const admin = await broker.connect();
    await admin.command('CREATE', { topic: 'cnt', partitions: 1 });
    const pid = /producerId=(\d+)/.exec(await admin.command('INIT_PRODUCER_ID'))![1]!;
    const publish = (seqNum: number) => admin.command('PUBLISH', { topic: 'cnt', partition: 0, producerId: pid, epoch: 0, seqNum, message: 'abcdefg' });
    await publish(0);
    // Before: the duplicate and the refused one counted as 3 records and 21 bytes in, against 1 in the log.
    expect(await publish(0)).toContain('"offset":0');
    await expect(publish(5)).rejects.toMatchObject({ code: 'out_of_order_sequence' });
    await until(async () => samples((await broker.health('/metrics')).body, 'tributary_records_in_total', { topic: 'cnt' })[0] === 1, 5000, 'one record counted');
    const text = (await broker.health('/metrics')).body;
    expect(samples(text, 'tributary_records_in_total', { topic: 'cnt' })).toEqual([1]);
    expect(samples(text, 'tributary_bytes_in_total', { topic: 'cnt' })).toEqual([7]);
    expect(samples(text, 'tributary_group_rebalances_total', { group: 'mg' }).length).toBe(1);

    await admin.command('DELETE', { topic: 'cnt' });
    await admin.command('DELETE_GROUP', { group: 'mg' });
    const after = (await broker.health('/metrics')).body;
    expect(after.split('\n').filter((l) => l.includes('topic="cnt"') || l.includes('group="mg"'))).toEqual([]);
  });
});

describe('metrics, cluster', () => {
  // Followers leave the ISR after 500 ms behind (shorter than the 2 s lease, so the leader does it).
  const cluster = useCluster(3, ['--replica-lag-max-ms', '500']);

  it('a paused follower: replica lag grows, the leader shrinks the ISR (under-replicated), then expands it', async () => {
    const c = cluster();
    const conn = await c.connect();
    await conn.command('CREATE', { topic: 'r', partitions: 1, replication_factor: 3 });
    await c.waitFor('the ISR of r[0] complete', async () => (await c.leaderOf('r', 0)).isr.length === 3);
    const { id: leader } = await c.leaderOf('r', 0);
    const follower = [0, 1, 2].find((i) => i !== leader)!;
    const scrape = async () => (await c.broker(leader).health('/metrics')).body;
    expect(samples(await scrape(), 'tributary_under_replicated_partitions')).toEqual([0]);
    expect(samples(await scrape(), 'tributary_offline_partitions')).toHaveLength(1);

    const producer = new Producer({ brokers: c.brokers.map((b) => b.address), acks: 1, lingerMs: 0 });
    // The leader leads once the new epoch is on disk: one acknowledged record first, so the producer knows
    // it and no lookup of the paused broker's stalls the loop below.
    await producer.send({ topic: 'r', messages: [{ value: 'first', partition: 0 }] });
    await c.broker(follower).kill('SIGSTOP');
    try {
      let i = 0;
      const lagging = async () => {
        await producer.send({ topic: 'r', messages: [{ value: `x${i++}`, partition: 0 }] });
        const t = await scrape();
        // The leader (past the lag bound) or the controller (the lease expired) shrinks it, whichever is first:
        // summed over the live brokers (docs/operations.md).
        let shrinks = 0;
        for (const id of [0, 1, 2].filter((x) => x !== follower)) shrinks += samples((await c.broker(id).health('/metrics')).body, 'tributary_isr_shrinks_total', { topic: 'r' })[0] ?? 0;
        // The gauge counts every partition the leader leads, internal ones (__consumer_offsets) with the
        // paused follower among their replicas too: so at least r[0], whose ISR the status shows shrunk.
        const under = samples(t, 'tributary_under_replicated_partitions')[0] ?? 0;
        const isr = (await c.status(leader)).partitions.find((p) => p.topic === 'r' && p.partition === 0)?.isr ?? [];
        seen = `leader ${leader}, paused follower ${follower}, shrinks ${shrinks}, under-replicated at the leader ${under}, r[0] ISR ${isr}, sends ${i}`;
        return shrinks >= 1 && under >= 1 && !isr.includes(follower);
      };
      let seen = '';
      // A bound against a hang, not a timing: a loaded machine may take a while to schedule the lag check.
      await until(lagging, 45_000, 'the ISR shrunk').catch((err: Error) => {
        throw new Error(`${err.message} (last seen: ${seen})`);
      });
      const t = await scrape();
      expect(samples(t, 'tributary_replica_lag_records', { topic: 'r', partition: '0', replica: String(follower) })[0]).toBeGreaterThan(0);
      expect(samples(t, 'tributary_replica_lag_seconds', { topic: 'r', partition: '0', replica: String(follower) })[0]).toBeGreaterThan(0);
    } finally {
      await c.broker(follower).kill('SIGCONT');
    }
    await until(async () => samples(await scrape(), 'tributary_isr_expands_total', { topic: 'r' })[0]! >= 1, 20_000, 'the follower back in the ISR');
    await until(async () => samples(await scrape(), 'tributary_under_replicated_partitions')[0] === 0, 20_000, 'no partition under-replicated');
    expect(samples(await scrape(), 'tributary_replica_lag_records', { topic: 'r', partition: '0', replica: String(follower) })).toEqual([0]);
    await producer.close();
    // Exactly one broker (the controller) reports offline partitions, here none.
    const offline = await Promise.all(c.brokers.map(async (b) => samples((await b.health('/metrics')).body, 'tributary_offline_partitions')[0]));
    expect(offline).toEqual([0, 0, 0]);
  });
});

describe('the Grafana dashboard', () => {
  it('charts only metric names the broker exports, and every metric operators chart', () => {
    const dash = JSON.parse(fs.readFileSync(path.join(ROOT, 'ops', 'grafana', 'tributary.json'), 'utf8'));
    const exprs: string[] = dash.panels.flatMap((p: { targets?: Array<{ expr: string }> }) => (p.targets ?? []).map((t) => t.expr));
    const used = new Set(exprs.flatMap((e) => [...e.matchAll(/\b(tributary_[a-z_]+)/g)].map((m) => m[1]!.replace(/_(bucket|sum|count)$/, ''))));
    const exported = new Set<string>();
    for (const file of fs.readdirSync(path.join(ROOT, 'packages', 'broker', 'src'), { recursive: true }) as string[]) {
      if (!file.endsWith('.ts')) continue;
      const src = fs.readFileSync(path.join(ROOT, 'packages', 'broker', 'src', file), 'utf8');
      for (const m of src.matchAll(/'(tributary_[a-z_]+)'/g)) exported.add(m[1]!);
    }
    expect([...used].filter((n) => !exported.has(n))).toEqual([]);
    for (const n of [
      'tributary_under_replicated_partitions',
      'tributary_offline_partitions',
      'tributary_isr_shrinks_total',
      'tributary_isr_expands_total',
      'tributary_replica_lag_records',
      'tributary_replica_lag_seconds',
      'tributary_log_size_bytes',
      'tributary_fsync_duration_seconds',
      'tributary_produce_phase_seconds',
      'tributary_fetch_phase_seconds',
      'tributary_group_rebalance_seconds',
      'tributary_group_lag',
    ]) {
      expect(used.has(n), n).toBe(true);
    }
  });
});

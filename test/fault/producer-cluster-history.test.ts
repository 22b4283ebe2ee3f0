/**
 * The SDK Producer's history on a 3-broker cluster (replication 3) while a seeded nemesis kills a
 * partition leader (kill -9, restart), freezes one past its lease (SIGSTOP/SIGCONT) or moves a
 * partition's leadership by a reassignment that puts another replica first: the producers see
 * NOT_LEADER, lost connections and timeouts and retry with up to 5 batches in flight per partition.
 * The log read back must hold every acknowledged record at its offset, an idempotent producer's records
 * once and in send() call order (docs/sdk.md, "Producer"), and every send() and close() settles.
 * PRODUCER_HISTORY_SEED=<n> replays the nemesis' and workload's choices.
 */
import { afterAll, describe, expect, it } from 'vitest';
import { Producer } from 'tributary-client/producer.js';
import { Rng } from '../chaos/prng.js';
import { useCluster } from '../helpers/cluster.js';
import { bounded, readLog, SendHistory } from '../helpers/producer-history.js';
import { sleep } from '../helpers/util.js';

const SEED = process.env.PRODUCER_HISTORY_SEED ? Number(process.env.PRODUCER_HISTORY_SEED) : Math.floor(Math.random() * 2 ** 32);
const TOPIC = 'pch';
const PARTITIONS = 3;
const WORKLOAD_MS = 15_000;
/** The brokers' --max-record-bytes: now and then a send carries a larger record, batched with good ones. */
const MAX_RECORD = 4096;

describe(`producer history on a cluster under leader faults (PRODUCER_HISTORY_SEED=${SEED})`, () => {
  const getCluster = useCluster(3, ['--max-record-bytes', String(MAX_RECORD)]);
  const producers: Producer[] = [];

  afterAll(async () => {
    // Closed by the test; forced here when it failed before.
    await Promise.all(producers.map((p) => p.close({ signal: AbortSignal.timeout(1000) }).catch(() => {})));
  });

  it('acknowledged records are where they were acknowledged, idempotent ones once and in call order; every call settles', async () => {
    const seedMsg = `PRODUCER_HISTORY_SEED=${SEED}`;
    const cluster = getCluster();
    const admin = await cluster.connect(0);
    await admin.command('CREATE', { topic: TOPIC, partitions: PARTITIONS, replication_factor: 3 });
    const inSync = () =>
      cluster.waitFor('every partition led with a full ISR', async () => {
        const ps = (await cluster.status()).partitions.filter((p) => p.topic === TOPIC);
        return ps.length === PARTITIONS && ps.every((p) => p.leader >= 0 && p.isr.length === 3) ? ps : false;
      });
    await inSync();

    const common = { brokers: cluster.addresses, acks: 'all' as const, maxInFlightPerPartition: 5, maxBatchRecords: 3, stallTimeoutMs: 1000, retry: { initialDelayMs: 20, maxDelayMs: 300, retries: 10_000, maxElapsedMs: 25_000 } };
    const made = { idem: new Producer({ ...common, idempotent: true, lingerMs: 1 }), plain: new Producer({ ...common, lingerMs: 0 }) };
    producers.push(...Object.values(made));
    const history = new SendHistory(TOPIC, PARTITIONS, Rng.derive(SEED, 'workload'), MAX_RECORD);
    const rng = Rng.derive(SEED, 'nemesis');
    const log: string[] = [];
    const t0 = performance.now();
    let stop = false;

    const nemesis = async () => {
      while (!stop) {
        await sleep(rng.int(300, 1000));
        if (stop) break;
        const fault = rng.pick(['kill', 'freeze', 'move'] as const);
        const partition = rng.int(0, PARTITIONS - 1);
        const p = (await inSync()).find((x) => x.partition === partition)!;
        if (stop) break;
        log.push(`${Math.round(performance.now() - t0)} ms: ${fault} p${partition} (leader ${p.leader})`);
        if (fault === 'kill') {
          await cluster.broker(p.leader).kill('SIGKILL');
          await sleep(rng.int(200, 2000));
          await cluster.broker(p.leader).relaunch();
        } else if (fault === 'freeze') {
          await cluster.broker(p.leader).kill('SIGSTOP');
          await sleep(rng.int(1000, 3500)); // past the 2 s lease: another replica takes over
          await cluster.broker(p.leader).kill('SIGCONT');
        } else {
          // The same replicas, the leader last: another one is the preferred leader now.
          const replicas = [...p.replicas.filter((r) => r !== p.leader), p.leader];
          const c = await cluster.connect();
          try {
            await c.command('REASSIGN', { topic: TOPIC, assignments: `${partition}:${replicas.join(',')}` });
          } finally {
            await c.close().catch(() => {});
          }
          const moved = await cluster.waitFor(`p${partition} led by ${replicas[0]}`, async () => (await cluster.leaderOf(TOPIC, partition)).id === replicas[0], 15_000).catch(() => false);
          log.push(`p${partition} ${moved ? 'moved' : 'not moved'} to ${replicas[0]}`);
        }
      }
    };

    const faults = nemesis();
    // Paced, so the brokers (three on the machine) keep up with the nemesis' waits for a full ISR.
    history.start('idem', { producer: made.idem, idempotent: true, callers: 3, pauseMs: [5, 20], oversized: 0.01 });
    history.start('plain', { producer: made.plain, idempotent: false, callers: 2, pauseMs: [5, 20], oversized: 0.01 });
    await sleep(WORKLOAD_MS);
    stop = true;
    await bounded('the nemesis', faults, 60_000, seedMsg);
    await inSync();
    // No hang: every send settles within its retry budget once the faults stop, and close() after it.
    await history.stop(40_000, seedMsg);
    // Every byte held for a record is given back once its send settled (maxBufferedBytes is not leaked).
    expect(producers.map((p) => p.bufferedBytes), seedMsg).toEqual(producers.map(() => 0));
    await bounded('close()', Promise.all(producers.map((p) => p.close())), 30_000, seedMsg);

    const logs: string[][] = [];
    for (let partition = 0; partition < PARTITIONS; partition++) {
      const c = await cluster.connect((await cluster.leaderOf(TOPIC, partition)).id);
      try {
        logs.push(await readLog(c, TOPIC, partition));
      } finally {
        await c.close().catch(() => {});
      }
    }
    const anomalies = history.check(logs);
    const summary = { seed: SEED, faults: log, ...history.summary() };
    console.log(JSON.stringify(summary));
    expect(anomalies.slice(0, 20), `${seedMsg} ${JSON.stringify(summary)}`).toEqual([]);
    // An oversized record fails its own send only, not the sends batched with it.
    expect(history.collateral(), seedMsg).toBe(0);
    expect(history.acked('idem'), seedMsg).toBeGreaterThan(history.failed('idem'));
  }, 180_000);
});

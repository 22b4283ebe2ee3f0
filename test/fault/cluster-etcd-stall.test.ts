/**
 * etcd frozen (SIGSTOP) for longer than the brokers' leases, then resumed. When it resumes, etcd finds
 * every lease past its TTL and may expire them before the brokers' keep-alives arrive, deleting every
 * registration at once. Nobody could have changed the cluster while etcd was away, and every broker is
 * alive: leadership must not move (docs/architecture.md, "Cluster mode"). The brokers re-register under
 * new leases and the controller gives brokers that left right after an etcd outage time to come back
 * before it moves anything. A broker that really died meanwhile (kill -9) is still replaced.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { TributaryError } from 'tributary-protocol/errors.js';
import { type ClusterStatus, TestCluster } from '../helpers/cluster.js';
import { sleep } from '../helpers/util.js';

const TOPIC = 'stall';
const PARTITIONS = 6;
/** FAST_CLUSTER_ARGS: 2 s leases. */
const LEASE_MS = 2000;
const FREEZE_MS = 3 * LEASE_MS;
/** How long the controller waits for brokers to re-register after an etcd outage (2 x TTL, at least 3 s). */
const GRACE_MS = Math.max(2 * LEASE_MS, 3000);

let cluster: TestCluster | undefined;

afterEach(async () => {
  await cluster?.etcd.kill('SIGCONT').catch(() => {});
  await cluster?.dispose();
  cluster = undefined;
});

function epochs(s: ClusterStatus): Map<string, string> {
  return new Map(s.partitions.map((p) => [`${p.topic}[${p.partition}]`, `leader ${p.leader} epoch ${p.leader_epoch}`]));
}

async function setUp(): Promise<TestCluster> {
  const c = await TestCluster.start(3, ['--min-insync-replicas', '2']);
  await (await c.connect(0)).command('CREATE', { topic: TOPIC, partitions: PARTITIONS, replication_factor: 3 });
  await c.waitFor('full ISRs', async () => {
    const s = await c.status();
    const ps = s.partitions.filter((p) => p.topic === TOPIC);
    return ps.length === PARTITIONS && s.partitions.every((p) => p.leader >= 0 && p.isr.length === 3);
  });
  return c;
}

/** Every partition of TOPIC takes an acks=all write on its leader (retrying routing errors). */
async function writable(c: TestCluster): Promise<void> {
  for (let p = 0; p < PARTITIONS; p++) {
    await c.waitFor(`an acks=all write to ${TOPIC}[${p}]`, async () => {
      const { id } = await c.leaderOf(TOPIC, p);
      if (id < 0) return false;
      const conn = await c.connect(id);
      try {
        await conn.json('PUBLISH', { topic: TOPIC, partition: p, acks: 'all', message: `after-${p}` });
        return true;
      } catch (err) {
        if (err instanceof TributaryError && err.retriable) return false;
        throw err;
      } finally {
        await conn.close().catch(() => {});
      }
    });
  }
}

describe('etcd frozen longer than the broker leases', () => {
  it('moves no leadership: every broker keeps its partitions at the same epoch', async () => {
    cluster = await setUp();
    const c = cluster;
    const before = epochs(await c.status());

    await c.etcd.kill('SIGSTOP');
    await sleep(FREEZE_MS);
    await c.etcd.kill('SIGCONT');
    const resumedAt = Date.now();

    // Watched over the whole window in which a controller could act on the expired registrations.
    const changes: string[] = [];
    while (Date.now() - resumedAt < GRACE_MS + 2000) {
      const s = await c.status().catch(() => undefined);
      if (s) {
        for (const [k, v] of epochs(s)) if (before.get(k) !== v && !changes.includes(`${k}: ${before.get(k)} -> ${v}`)) changes.push(`${k}: ${before.get(k)} -> ${v}`);
      }
      await sleep(200);
    }
    expect(changes).toEqual([]);
    await c.waitFor('every broker registered again', async () => (await c.status()).brokers.length === 3);
    await writable(c);
  }, 120_000);

  it('still replaces a leader that was killed while etcd was frozen', async () => {
    cluster = await setUp();
    const c = cluster;
    const victim = (await c.leaderOf(TOPIC, 0)).id;
    await c.etcd.kill('SIGSTOP');
    await c.broker(victim).kill('SIGKILL');
    await sleep(FREEZE_MS);
    await c.etcd.kill('SIGCONT');
    const live = [0, 1, 2].filter((id) => id !== victim);
    await c.waitFor(
      `${TOPIC}[0] led by a live broker`,
      async () => {
        const s = await c.status(live[0]);
        const p = s.partitions.find((x) => x.topic === TOPIC && x.partition === 0);
        return p !== undefined && live.includes(p.leader);
      },
      GRACE_MS + 15_000,
    );
  }, 120_000);

  it('fails an acks=all write that waits on a lagging follower retriably while etcd cannot shrink the ISR', async () => {
    cluster = await setUp();
    const c = cluster;
    const { id: leader } = await c.leaderOf(TOPIC, 0);
    const follower = [0, 1, 2].find((id) => id !== leader)!;
    const conn = await c.connect(leader);
    await conn.json('PUBLISH', { topic: TOPIC, partition: 0, acks: 'all', message: 'before' });
    await c.etcd.kill('SIGSTOP');
    await c.broker(follower).kill('SIGSTOP');
    try {
      const err = await conn.json('PUBLISH', { topic: TOPIC, partition: 0, acks: 'all', message: 'stuck' }).then(
        () => undefined,
        (e: unknown) => e,
      );
      // Not the replication timeout (request_timeout after 30 s): the leader gives up once the lagging
      // follower should have left the ISR and etcd refused the change.
      expect(err).toBeInstanceOf(TributaryError);
      expect((err as TributaryError).code).toBe('NOT_ENOUGH_REPLICAS');
      expect((err as TributaryError).retriable).toBe(true);
    } finally {
      await c.broker(follower).kill('SIGCONT');
      await c.etcd.kill('SIGCONT');
    }
  }, 120_000);
});

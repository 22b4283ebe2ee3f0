/**
 * ALTER_REPLICATION_FACTOR and DRAIN_BROKER are all or nothing whatever their size (docs/architecture.md
 * "Reassignment"): etcd refuses a transaction of more than 128 operations, so their requests cannot all be
 * written in one. The broker answering dies (failpoint `reassign.partly_stored:<COMMAND>`) once part of
 * the operation is stored; after it comes back, either every partition moved (and the definition has the
 * new factor) or none did. Before, the requests were stored in several transactions (ALTER_REPLICATION_FACTOR
 * per 127 partitions, DRAIN_BROKER per topic) and such a crash left some partitions moved and others not.
 * A plan whose broker stays registered but never writes its requests (it lost etcd) is finished by the
 * controller too (after controller.ts PLAN_TAKEOVER_MS).
 */
import { describe, expect, it } from 'vitest';
import type { Connection } from 'tributary-protocol/connection.js';
import { EtcdMetadataStore } from 'tributary-broker/cluster/etcd-metadata-store.js';
import { ReassignmentStore } from 'tributary-broker/cluster/reassignment.js';
import { type ClusterStatus, useCluster } from '../../helpers/cluster.js';
import { REQUEST_TIMEOUT_MS } from './helpers.js';

const FAILPOINTS = 'reassign.partly_stored:ALTER_REPLICATION_FACTOR,reassign.partly_stored:DRAIN_BROKER';

describe('large admin operations: all or nothing across a crash', () => {
  const cluster = useCluster(3, ['--min-insync-replicas', '1', '--internal-replication-factor', '2'], { TRIBUTARY_FAILPOINTS: FAILPOINTS });

  async function withAdmin<T>(fn: (c: Connection) => Promise<T>, via?: number): Promise<T> {
    const c = await cluster().connect(via);
    try {
      return await fn(c);
    } finally {
      await c.close().catch(() => {});
    }
  }

  async function create(topic: string, partitions: number, rf: number): Promise<void> {
    await withAdmin((c) => c.command('CREATE', { topic, partitions, replication_factor: rf }));
    await cluster().waitFor(`${topic} led with full ISRs`, async () => {
      const ps = (await cluster().status()).partitions.filter((p) => p.topic === topic);
      return ps.length === partitions && ps.every((p) => p.leader >= 0 && p.isr.length === rf);
    }, 90_000);
  }

  /** Sends `command` to broker `id`, which must die answering it (the failpoint), then starts it again. */
  async function crashOn(id: number, command: string, params: Record<string, string | number>): Promise<void> {
    const b = cluster().broker(id);
    const c = await b.connect();
    const answer = await c.command(command, params).then(
      (reply) => `answered ${reply}`,
      (err: unknown) => err,
    );
    await c.close().catch(() => {});
    expect(typeof answer === 'string' ? answer : 'no answer').toBe('no answer');
    await b.kill();
    await b.relaunch();
    await cluster().waitFor(`broker ${id} registered again`, async () => (await cluster().status()).brokers.some((x) => x.id === id), 60_000);
  }

  /** Until no reassignment is requested or in progress and every partition of `topics` has a full ISR and a leader. */
  async function untilQuiet(topics: string[]): Promise<ClusterStatus> {
    return cluster().waitFor(
      'every reassignment ended',
      async () => {
        const left = await withAdmin((c) => c.json<{ count: number }>('REASSIGNMENTS'));
        const s = await cluster().status();
        const ps = s.partitions.filter((p) => topics.includes(p.topic));
        return left.count === 0 && ps.every((p) => p.leader >= 0 && p.isr.length === p.replicas.length) ? s : false;
      },
      120_000,
    );
  }

  /**
   * Stores a plan moving every partition of `topic` (one replica) to the next broker, as broker 0 (registered
   * all along), which never writes its requests; then runs `fn` with the request store and the partitions'
   * replicas before.
   */
  async function withPlanLeftBy0(topic: string, fn: (store: ReassignmentStore, moves: Array<{ partition: number; target: number[] }>, before: ClusterStatus['partitions']) => Promise<void>): Promise<void> {
    const before = (await cluster().status()).partitions.filter((p) => p.topic === topic);
    const etcd = { endpoints: cluster().etcd.endpoints, requestTimeoutMs: REQUEST_TIMEOUT_MS };
    const store = new ReassignmentStore({ etcd, prefix: cluster().prefix });
    const topics = new EtcdMetadataStore({ etcd, prefix: cluster().prefix });
    try {
      await store.open();
      await topics.open();
      const moves = before.map((p) => ({ topic, partition: p.partition, target: [(p.replicas[0]! + 1) % 3] }));
      const res = await store.plans.store(moves, 0, [{ topic, ...topics.topicGuard(topic)! }], 0);
      expect('plan' in res).toBe(true);
      await fn(store, moves, before);
    } finally {
      await store.close().catch(() => {});
      await topics.close().catch(() => {});
    }
  }

  it('ALTER_REPLICATION_FACTOR of 200 partitions: the answering broker dies part-way; every partition and the definition end at one factor', async () => {
    const n = 200;
    await create('wide', n, 2);
    await crashOn(1, 'ALTER_REPLICATION_FACTOR', { topic: 'wide', replication_factor: 1 });
    const s = await untilQuiet(['wide']);
    const factors = s.partitions.filter((p) => p.topic === 'wide').map((p) => p.replicas.length);
    const counts = { 1: factors.filter((f) => f === 1).length, 2: factors.filter((f) => f === 2).length };
    const defined = (await withAdmin((c) => c.json<{ replication_factor: number }>('DESCRIBE', { topic: 'wide' }))).replication_factor;
    // All or nothing, and the definition agrees with the partitions.
    const whole = (counts[1] === n && defined === 1) || (counts[2] === n && defined === 2);
    expect(whole, `partitions at 1 and 2 replicas ${JSON.stringify(counts)}, definition ${defined}`).toBe(true);
  }, 300_000);

  it('a plan its broker stored and left unwritten while still registered (etcd lost meanwhile) is carried out by the controller', async () => {
    await create('stalled', 2, 1);
    await withPlanLeftBy0('stalled', async (store, moves) => {
      await cluster().waitFor(
        'the plan carried out',
        async () => {
          const now = (await cluster().status()).partitions.filter((p) => p.topic === 'stalled');
          const left = await withAdmin((c) => c.json<{ count: number }>('REASSIGNMENTS', { topic: 'stalled' }));
          return left.count === 0 && moves.every((m) => now.find((p) => p.partition === m.partition)?.replicas.join() === m.target.join());
        },
        60_000,
      );
      expect(store.plans.list()).toEqual([]);
    });
  }, 120_000);

  it('REASSIGN_CANCEL while a plan is stored and not yet written cancels its moves too: none is carried out later', async () => {
    await create('cancelled', 2, 1);
    // The cancel comes before any of the plan's requests is written.
    await withPlanLeftBy0('cancelled', async (store, _moves, before) => {
      const answer = await withAdmin((c) => c.command('REASSIGN_CANCEL', { topic: 'cancelled' }));
      expect(answer).toMatch(/count=2/);
      const s = await untilQuiet(['cancelled']);
      const after = s.partitions.filter((p) => p.topic === 'cancelled');
      expect(after.map((p) => `${p.partition}:${p.replicas.join()}`).sort()).toEqual(before.map((p) => `${p.partition}:${p.replicas.join()}`).sort());
      expect(store.plans.list()).toEqual([]);
    });
  }, 120_000);

  it('DRAIN_BROKER over several transactions: the answering broker dies part-way; every partition or none leaves the drained broker', async () => {
    await create('drained', 200, 1);
    const before = (await cluster().status()).partitions.filter((p) => p.replicas.includes(2));
    expect(before.length).toBeGreaterThan(70);
    await crashOn(1, 'DRAIN_BROKER', { broker: 2 });
    const s = await untilQuiet([...new Set(before.map((p) => p.topic))]);
    const still = before.filter((b) => s.partitions.find((p) => p.topic === b.topic && p.partition === b.partition)!.replicas.includes(2));
    const where = (xs: typeof before) => xs.map((p) => `${p.topic}[${p.partition}]`);
    expect(still.length === 0 || still.length === before.length, `still on broker 2: ${where(still).join(',')}`).toBe(true);
  }, 300_000);
});

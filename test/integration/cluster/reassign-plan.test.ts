/**
 * A reassignment plan is all or nothing (docs/operations.md "Adding, draining and moving brokers'
 * replicas"): `partitions reassign --plan` sends the whole plan in one REASSIGN, the broker checks every
 * entry (of every topic) before storing anything, and stores every request in one etcd transaction that
 * fails if a partition got a reassignment meanwhile or a topic was deleted or re-created since the check:
 * one plan key (cluster/reassignment-plans.ts), expanded into the per-partition requests afterwards.
 * Before, the CLI sent one REASSIGN per topic: a refused later topic left the earlier ones moving.
 */
import { writeFile } from 'node:fs/promises';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { Producer } from 'tributary-client/producer.js';
import { TributaryError } from 'tributary-protocol/errors.js';
import { createEtcdClient } from 'tributary-broker/cluster/etcd-client.js';
import { EtcdMetadataStore } from 'tributary-broker/cluster/etcd-metadata-store.js';
import { type GuardedPut, MAX_TXN_OPS, type ReassignmentRequest, ReassignmentStore } from 'tributary-broker/cluster/reassignment.js';
import { useCluster } from '../../helpers/cluster.js';
import { envWithoutTributary, runCli } from '../../helpers/cli.js';
import { removeDir, tempDir } from '../../helpers/util.js';
import { topicSpec } from '../../helpers/topic-spec.js';
import { REQUEST_TIMEOUT_MS, uniquePrefix } from './helpers.js';

interface Progress {
  topic: string;
  partition: number;
}

describe('reassignment plans: all or nothing', () => {
  const cluster = useCluster(3, ['--min-insync-replicas', '1']);

  async function progress(): Promise<Progress[]> {
    const c = await cluster().connect();
    try {
      return (await c.json<{ reassignments: Progress[] }>('REASSIGNMENTS')).reassignments;
    } finally {
      await c.close().catch(() => {});
    }
  }

  async function create(topic: string, partitions: number): Promise<void> {
    const c = await cluster().connect();
    try {
      await c.command('CREATE', { topic, partitions, replication_factor: 2 });
    } finally {
      await c.close().catch(() => {});
    }
    await cluster().waitFor(`${topic} led with full ISRs`, async () => {
      const ps = (await cluster().status()).partitions.filter((p) => p.topic === topic);
      return ps.length === partitions && ps.every((p) => p.leader >= 0 && p.isr.length === 2);
    });
  }

  /** The replicas of every partition of `topics`, as `topic[p]` -> replicas. */
  async function placement(...topics: string[]): Promise<Record<string, number[]>> {
    const s = await cluster().status();
    return Object.fromEntries(s.partitions.filter((p) => topics.includes(p.topic)).map((p) => [`${p.topic}[${p.partition}]`, p.replicas]));
  }

  /** A target for partition `p` moving one replica to the broker that is not one of its replicas. */
  const moved = (replicas: number[]) => [[0, 1, 2].find((id) => !replicas.includes(id))!, replicas[0]!];

  type Stores = { prefix: string; store: ReassignmentStore; topics: EtcdMetadataStore; raw: ReturnType<typeof createEtcdClient>; stored: () => Promise<string[]> };

  /** A reassignment store and a topic store on their own etcd prefix, and a raw client; all removed after `fn`. */
  async function withStores(name: string, fn: (s: Stores) => Promise<void>): Promise<void> {
    const prefix = uniquePrefix(name);
    const etcd = { endpoints: cluster().etcd.endpoints, requestTimeoutMs: REQUEST_TIMEOUT_MS };
    const store = new ReassignmentStore({ etcd, prefix });
    const topics = new EtcdMetadataStore({ etcd, prefix });
    const raw = createEtcdClient(etcd);
    try {
      await store.open();
      await topics.open();
      await fn({ prefix, store, topics, raw, stored: async () => (await raw.getAll().prefix(`${prefix}reassignments/`).keys()).sort() });
    } finally {
      await store.close().catch(() => {});
      await topics.close().catch(() => {});
      await raw.delete().prefix(prefix).catch(() => {});
      raw.close();
    }
  }

  it('a refused entry of a later topic starts nothing: unknown topic or broker, duplicate replicas, a partition out of range, one already moving', async () => {
    await create('plan-a', 2);
    await create('plan-b', 1);
    const before = await placement('plan-a', 'plan-b');
    const dir = await tempDir('trib-plan-');
    try {
      const file = path.join(dir, 'plan.json');
      const run = async (last: { topic: string; partition: number; replicas: number[] }) => {
        // plan-a's entries are fine and come first: before, they were moving by the time plan-b was refused.
        const partitions = [0, 1].map((p) => ({ topic: 'plan-a', partition: p, replicas: moved(before[`plan-a[${p}]`]!) }));
        await writeFile(file, JSON.stringify({ version: 1, partitions: [...partitions, last] }));
        return runCli(['partitions', 'reassign', '--plan', file, '--bootstrap', cluster().addresses.join(',')], { env: envWithoutTributary() });
      };
      const b0 = before['plan-b[0]']!;
      const cases: Array<[{ topic: string; partition: number; replicas: number[] }, RegExp]> = [
        [{ topic: 'plan-b', partition: 0, replicas: [b0[0]!, 9] }, /^error: invalid_parameter .*plan-b\[0\]: broker\(s\) 9 not registered/],
        [{ topic: 'plan-nope', partition: 0, replicas: [0, 1] }, /^error: topic_not_found .*topic=plan-nope/],
        [{ topic: 'plan-b', partition: 5, replicas: [0, 1] }, /^error: partition_not_found .*topic=plan-b partition=5/],
        [{ topic: 'plan-b', partition: 0, replicas: [1, 1] }, /^error: invalid_parameter .*plan-b\[0\]: broker 1 listed twice/],
      ];
      for (const [last, message] of cases) {
        const r = await run(last);
        expect(r.stderr, JSON.stringify(last)).toMatch(message);
        expect([r.code, r.stdout], JSON.stringify(last)).toEqual([1, '']);
        expect(await progress(), JSON.stringify(last)).toEqual([]);
      }

      // plan-b[0] already moving (held back by a tiny throttle on a partition with data).
      const producer = new Producer({ brokers: cluster().addresses, acks: 'all' });
      try {
        await producer.send({ topic: 'plan-b', messages: Array.from({ length: 200 }, () => ({ value: 'x'.repeat(1000) })) });
      } finally {
        await producer.close();
      }
      const admin = await cluster().connect();
      try {
        await admin.command('REASSIGN', { topic: 'plan-b', assignments: `0:${moved(b0).join(',')}`, throttle: 1000 });
        const busy = await run({ topic: 'plan-b', partition: 0, replicas: b0 });
        expect(busy.stderr).toMatch(/^error: reassignment_in_progress .*partitions=plan-b\[0\]/);
        expect([busy.code, busy.stdout]).toEqual([1, '']);
        expect((await progress()).map((x) => `${x.topic}[${x.partition}]`)).toEqual(['plan-b[0]']);
        await admin.command('REASSIGN_CANCEL', { topic: 'plan-b' });
      } finally {
        await admin.close().catch(() => {});
      }
      await cluster().waitFor('the cancel done', async () => (await progress()).length === 0);
      expect(await placement('plan-a', 'plan-b')).toEqual(before);

      // The same plan, every entry good: all of it moves (one transaction), across both topics.
      const ok = await run({ topic: 'plan-b', partition: 0, replicas: moved(b0) });
      expect(ok.stderr).toBe('');
      expect(ok.stdout).toBe('reassignment started for plan-a[0], plan-a[1], plan-b[0]\n');
      await cluster().waitFor('the plan done', async () => (await progress()).length === 0, 60_000);
      expect(await placement('plan-a', 'plan-b')).toEqual({
        'plan-a[0]': moved(before['plan-a[0]']!),
        'plan-a[1]': moved(before['plan-a[1]']!),
        'plan-b[0]': moved(b0),
      });
    } finally {
      await removeDir(dir);
    }
  }, 120_000);

  it('REASSIGN: a reassignment larger than one etcd transaction is checked whole, then stored as one plan; plan beside topic is refused', async () => {
    // 130 partitions plus the topic: more than etcd's --max-txn-ops (128) compares in one transaction.
    const n = MAX_TXN_OPS + 2;
    const admin = await cluster().connect();
    try {
      await admin.command('CREATE', { topic: 'plan-big', partitions: n, replication_factor: 1 });
      await cluster().waitFor('plan-big led', async () => (await cluster().status()).partitions.filter((p) => p.topic === 'plan-big' && p.leader >= 0).length === n);
      const before = await placement('plan-big');
      const target = (p: number) => [(before[`plan-big[${p}]`]![0]! + 1) % 3];
      const assignments = (last: string) => [...Array.from({ length: n - 1 }, (_, p) => `${p}:${target(p).join(',')}`), last].join(';');
      // The last entry is bad: nothing of the first transaction's worth was stored.
      const bad = await admin.command('REASSIGN', { topic: 'plan-big', assignments: assignments(`${n - 1}:9`) }).catch((e: unknown) => e);
      expect(bad).toBeInstanceOf(TributaryError);
      expect((bad as TributaryError).message).toMatch(/invalid_parameter .*plan-big\[129\]: broker\(s\) 9 not registered/);
      expect(await progress()).toEqual([]);
      // All good: every partition is stored (one plan, its requests written in chunks) and moves.
      const ok = await admin.command('REASSIGN', { topic: 'plan-big', assignments: assignments(`${n - 1}:${target(n - 1).join(',')}`) });
      expect(ok).toContain(`partitions=${Array.from({ length: n }, (_, p) => p).join(',')}`);
      await cluster().waitFor('plan-big moved', async () => (await progress()).length === 0, 90_000);
      expect(await placement('plan-big')).toEqual(Object.fromEntries(Array.from({ length: n }, (_, p) => [`plan-big[${p}]`, target(p)])));

      const replicas = target(0).join(',');
      await expect(admin.command('REASSIGN', { plan: `plan-big:0:${replicas}`, topic: 'plan-big' })).rejects.toMatchObject({ code: 'invalid_parameter' });
      await expect(admin.command('REASSIGN', { plan: 'nocolon' })).rejects.toMatchObject({ code: 'invalid_parameter' });
      expect(await progress()).toEqual([]);
    } finally {
      await admin.close().catch(() => {});
    }
  }, 150_000);

  /** The guard of topic `t` as this broker's topic store has it. */
  const guardOf = (topics: EtcdMetadataStore, t: string) => ({ topic: t, ...topics.topicGuard(t)! });
  const moves = (topic: string, partitions: number[]) => partitions.map((partition) => ({ topic, partition, target: [1, 2] }));

  /** Stores a plan and writes its requests; resolves the plan's id. */
  async function storeAndExpand(store: ReassignmentStore, plan: ReturnType<typeof moves>, guards: Array<ReturnType<typeof guardOf>>, also?: GuardedPut): Promise<string> {
    const res = await store.plans.store(plan, 0, guards, 0, also);
    if (!('plan' in res)) throw new Error(`not stored: ${JSON.stringify(res)}`);
    await store.plans.expand(res.plan.value.id);
    return res.plan.value.id;
  }

  it('the store: a deleted topic takes only its own requests; one for the topic re-created under the name (another broker) stays', async () => {
    await withStores('plan-delete', async ({ prefix, store, topics, stored }) => {
      const def = topicSpec('x', { partitions: 2 });
      await topics.createTopic(def);
      await storeAndExpand(store, moves('x', [0]), [guardOf(topics, 'x')]);
      // x deleted; before this broker deletes its requests, x is created again and its partition 1 moved.
      await topics.deleteTopic('x');
      await topics.createTopic(def);
      await storeAndExpand(store, moves('x', [1]), [guardOf(topics, 'x')]);
      await store.deleteTopic('x', topics.definitionKey('x'));
      expect(await stored()).toEqual([`${prefix}reassignments/x/1`]);
      expect(store.list('x').map((e) => e.partition)).toEqual([1]);
      // Deleted for good: its requests go.
      await topics.deleteTopic('x');
      await store.deleteTopic('x', topics.definitionKey('x'));
      expect(await stored()).toEqual([]);
      expect(store.list('x')).toEqual([]);
    });
  });

  it('the store: a plan is stored whole or, if a partition has a request or is in another plan or a guarded topic changed meanwhile, not at all', async () => {
    await withStores('plan-store', async ({ prefix, store, topics, raw, stored }) => {
      await topics.createTopic(topicSpec('x', { partitions: 3 }));
      const guard = guardOf(topics, 'x');
      const request: ReassignmentRequest = { target: [1, 2], throttle: 0, requestedAt: 1 };
      // Another broker's request for x/1, not yet seen here: etcd, not the cache, refuses.
      await raw.put(`${prefix}reassignments/x/1`).value(JSON.stringify(request));
      const plan = moves('x', [0, 1, 2]);
      expect(await store.plans.store(plan, 0, [guard], 0)).toEqual({ busy: [{ topic: 'x', partition: 1 }], changed: [] });
      expect(await stored()).toEqual([`${prefix}reassignments/x/1`]);
      await raw.delete().key(`${prefix}reassignments/x/1`);
      // Another broker's plan for x/2, stored and not yet expanded: x/2 is claimed.
      const other = new ReassignmentStore({ etcd: { endpoints: cluster().etcd.endpoints, requestTimeoutMs: REQUEST_TIMEOUT_MS }, prefix });
      try {
        await other.open();
        const theirs = await other.plans.store(moves('x', [2]), 0, [guard], 1);
        expect('plan' in theirs).toBe(true);
        expect(await store.plans.store(plan, 0, [guard], 0)).toEqual({ busy: [{ topic: 'x', partition: 2 }], changed: [] });
        if ('plan' in theirs) await other.plans.expand(theirs.plan.value.id);
      } finally {
        await other.close();
      }
      await raw.delete().key(`${prefix}reassignments/x/2`);
      // x deleted and re-created after the check: its guard no longer holds.
      await topics.deleteTopic('x');
      await topics.createTopic(topicSpec('x', { partitions: 3 }));
      expect(await store.plans.store(plan, 0, [guard], 0)).toEqual({ busy: [], changed: [guard.key] });
      expect(await stored()).toEqual([]);
      // Checked again: stored whole.
      await storeAndExpand(store, plan, [guardOf(topics, 'x')]);
      expect(await stored()).toEqual([0, 1, 2].map((p) => `${prefix}reassignments/x/${p}`));
      expect(store.list('x').map((e) => e.partition)).toEqual([0, 1, 2]);
      expect(await raw.getAll().prefix(`${prefix}reassignment-plans/`).keys()).toEqual([]);
    });
  });

  it('the store: a plan larger than one transaction is expanded chunk by chunk; expanded again after a crash, nothing is written twice', async () => {
    await withStores('plan-expand', async ({ prefix, store, topics, raw, stored }) => {
      const n = 2 * MAX_TXN_OPS;
      await topics.createTopic(topicSpec('x', { partitions: n }));
      const all = Array.from({ length: n }, (_, p) => p);
      const res = await store.plans.store(moves('x', all), 0, [guardOf(topics, 'x')], 0);
      if (!('plan' in res)) throw new Error(`not stored: ${JSON.stringify(res)}`);
      const id = res.plan.value.id;
      // The broker expanding it dies after its first chunk.
      await expect(
        store.plans.expand(id, () => {
          throw new Error('crash');
        }),
      ).rejects.toThrow('crash');
      const first = await stored();
      expect(first.length).toBeGreaterThan(0);
      expect(first.length).toBeLessThan(n);
      // One of those requests completes (the controller deletes it) before the plan is finished.
      await raw.delete().key(first[0]!);
      await store.plans.expand(id);
      await store.plans.expand(id);
      expect(await stored()).toEqual(all.map((p) => `${prefix}reassignments/x/${p}`).filter((k) => k !== first[0]).sort());
      expect(await raw.getAll().prefix(`${prefix}reassignment-plans/`).keys()).toEqual([]);
      expect(store.plans.list()).toEqual([]);
    });
  });

  it('the store: a definition put rides with the plan, both or neither; a definition changed since it was read stores nothing', async () => {
    await withStores('plan-definition', async ({ prefix, store, topics, raw, stored }) => {
      await topics.createTopic(topicSpec('x', { partitions: 2, replicationFactor: 3 }));
      const guard = guardOf(topics, 'x');
      const plan = moves('x', [0, 1]);
      const factor = async () => (JSON.parse((await raw.get(topics.definitionKey('x')).string())!) as { replicationFactor: number }).replicationFactor;
      expect(topics.replicationFactorPut('x', 3)).toBeUndefined();
      const stale = topics.replicationFactorPut('x', 2)!;
      // The definition changed since it was read (an ALTER_TOPIC by another broker): nothing is stored.
      await topics.alterTopic('x', { retentionHours: 5 });
      expect(await store.plans.store(plan, 0, [guard], 0, stale)).toEqual({ busy: [], changed: [] });
      expect(await stored()).toEqual([]);
      expect(store.plans.list()).toEqual([]);
      expect(await factor()).toBe(3);
      // Read again: the plan and the new factor in one revision, the retention change kept.
      const put = topics.replicationFactorPut('x', 2)!;
      const res = await store.plans.store(plan, 0, [guard], 0, put);
      if (!('plan' in res)) throw new Error(`not stored: ${JSON.stringify(res)}`);
      expect(await factor()).toBe(2);
      expect(topics.getTopic('x')).toMatchObject({ replicationFactor: 2, retentionHours: 5 });
      const definition = (await raw.get(topics.definitionKey('x')).exec()).kvs[0]!;
      expect(res.plan.createRevision).toBe(Number(definition.mod_revision));
      await store.plans.expand(res.plan.value.id);
      expect(await stored()).toEqual([0, 1].map((p) => `${prefix}reassignments/x/${p}`));
      // A partition with a request already: neither the plan nor the factor.
      const back = topics.replicationFactorPut('x', 3)!;
      expect(await store.plans.store(plan, 0, [guard], 0, back)).toEqual({ busy: [0, 1].map((partition) => ({ topic: 'x', partition })), changed: [] });
      expect(await factor()).toBe(2);
    });
  });
});

/**
 * A reassignment plan is all or nothing (docs/operations.md "Adding, draining and moving brokers'
 * replicas"): `partitions reassign --plan` sends the whole plan in one REASSIGN, the broker checks every
 * entry (of every topic) before storing anything, and stores every request in one etcd transaction that
 * fails if a partition got a reassignment meanwhile or a topic was deleted or re-created since the check.
 * Before, the CLI sent one REASSIGN per topic: a refused later topic left the earlier ones moving.
 */
import { writeFile } from 'node:fs/promises';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { Producer } from 'tributary-client/producer.js';
import { TributaryError } from 'tributary-protocol/errors.js';
import { createEtcdClient } from 'tributary-broker/cluster/etcd-client.js';
import { EtcdMetadataStore } from 'tributary-broker/cluster/etcd-metadata-store.js';
import { MAX_TXN_OPS, type ReassignmentRequest, ReassignmentStore } from 'tributary-broker/cluster/reassignment.js';
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

  it('REASSIGN: a reassignment larger than one etcd transaction is checked whole, then stored in several; plan beside topic is refused', async () => {
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
      // All good: every partition is stored (two transactions) and moves.
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

  it('the store: a deleted topic takes only its own requests; one for the topic re-created under the name (another broker) stays', async () => {
    await withStores('plan-delete', async ({ prefix, store, topics, stored }) => {
      const def = topicSpec('x', { partitions: 2 });
      const request: ReassignmentRequest = { target: [1, 2], throttle: 0, requestedAt: 1 };
      await topics.createTopic(def);
      expect(await store.createPlan([{ topic: 'x', partition: 0, request }], [topics.topicGuard('x')!])).toBeUndefined();
      // x deleted; before this broker deletes its requests, x is created again and its partition 1 moved.
      await topics.deleteTopic('x');
      await topics.createTopic(def);
      expect(await store.createPlan([{ topic: 'x', partition: 1, request }], [topics.topicGuard('x')!])).toBeUndefined();
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

  it('the store: one transaction stores the whole plan or, if a partition got a request or a guarded topic changed meanwhile, none of it', async () => {
    await withStores('plan-store', async ({ prefix, store, topics, raw, stored }) => {
      await topics.createTopic(topicSpec('x', { partitions: 3 }));
      const guard = topics.topicGuard('x')!;
      const request: ReassignmentRequest = { target: [1, 2], throttle: 0, requestedAt: 1 };
      // Another broker's request for x/1, not yet seen here: the transaction, not the cache, refuses.
      await raw.put(`${prefix}reassignments/x/1`).value(JSON.stringify(request));
      const plan = [0, 1, 2].map((partition) => ({ topic: 'x', partition, request }));
      expect(await store.createPlan(plan, [guard])).toEqual({ busy: [{ topic: 'x', partition: 1 }], changed: [] });
      expect(await stored()).toEqual([`${prefix}reassignments/x/1`]);
      await raw.delete().key(`${prefix}reassignments/x/1`);
      // x deleted and re-created after the check: its guard no longer holds.
      await topics.deleteTopic('x');
      await topics.createTopic(topicSpec('x', { partitions: 3 }));
      expect(await store.createPlan(plan, [guard])).toEqual({ busy: [], changed: [guard.key] });
      expect(await stored()).toEqual([]);
      // Checked again: stored whole.
      expect(await store.createPlan(plan, [topics.topicGuard('x')!])).toBeUndefined();
      expect(await stored()).toEqual([0, 1, 2].map((p) => `${prefix}reassignments/x/${p}`));
      expect(store.list('x').map((e) => e.partition)).toEqual([0, 1, 2]);
    });
  });
  it('the store: a definition put rides with the plan, both or neither; a definition changed since it was read stores nothing', async () => {
    await withStores('plan-definition', async ({ prefix, store, topics, raw, stored }) => {
      await topics.createTopic(topicSpec('x', { partitions: 2, replicationFactor: 3 }));
      const guard = topics.topicGuard('x')!;
      const request: ReassignmentRequest = { target: [1, 2], throttle: 0, requestedAt: 1 };
      const plan = [0, 1].map((partition) => ({ topic: 'x', partition, request }));
      const factor = async () => (JSON.parse((await raw.get(topics.definitionKey('x')).string())!) as { replicationFactor: number }).replicationFactor;
      expect(topics.replicationFactorPut('x', 3)).toBeUndefined();
      const stale = topics.replicationFactorPut('x', 2)!;
      // The definition changed since it was read (an ALTER_TOPIC by another broker): nothing is stored.
      await topics.alterTopic('x', { retentionHours: 5 });
      expect(await store.createPlan(plan, [guard], stale)).toEqual({ busy: [], changed: [] });
      expect(await stored()).toEqual([]);
      expect(await factor()).toBe(3);
      // Read again: the requests and the new factor in one revision, the retention change kept.
      const put = topics.replicationFactorPut('x', 2)!;
      expect(await store.createPlan(plan, [guard], put)).toBeUndefined();
      expect(await stored()).toEqual([0, 1].map((p) => `${prefix}reassignments/x/${p}`));
      expect(await factor()).toBe(2);
      expect(topics.getTopic('x')).toMatchObject({ replicationFactor: 2, retentionHours: 5 });
      const definition = (await raw.get(topics.definitionKey('x')).exec()).kvs[0]!;
      expect(store.get('x', 0)!.modRevision).toBe(Number(definition.mod_revision));
      // A partition with a request already: neither the requests nor the factor.
      const back = topics.replicationFactorPut('x', 3)!;
      expect(await store.createPlan(plan, [guard], back)).toEqual({ busy: [0, 1].map((partition) => ({ topic: 'x', partition })), changed: [] });
      expect(await factor()).toBe(2);
    });
  });
});

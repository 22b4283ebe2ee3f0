/**
 * CREATE means ready on a 3-broker cluster: CREATE answers OK only once every partition's leader serves it,
 * and with `wait=false` a leader that has not opened the topic yet answers the retriable `topic_loading`,
 * never the final `topic_not_found`. The failpoint `topic.open:<topic>@ms` holds back the opening of a
 * topic created by another broker, as a slow broker would, so the race the test covers happens every time.
 */
import { describe, expect, it } from 'vitest';
import type { Connection } from 'tributary-protocol/connection.js';
import { parseLine } from 'tributary-protocol/command.js';
import { Admin } from 'tributary-client/admin.js';
import { Producer } from 'tributary-client/producer.js';
import { useCluster } from '../../helpers/cluster.js';
import { expectError } from '../../helpers/util.js';

const SLOW_MS = 1500;

describe('CREATE means ready (cluster)', () => {
  const cluster = useCluster(3, [], { TRIBUTARY_FAILPOINTS: ['ready-wait', 'ready-nowait', 'ready-sdk'].map((t) => `topic.open:${t}@${SLOW_MS}`).join(',') });

  /** One PUBLISH acks=all to each partition's leader as METADATA names it; the raw reply of each. */
  async function publishToEachLeader(topic: string, partitions: number): Promise<string[]> {
    const leaders = await cluster().metadataLeaders(topic);
    const conns = new Map<string, Connection>();
    try {
      return await Promise.all(
        Array.from({ length: partitions }, async (_, p) => {
          const addr = leaders[p]!;
          let c = conns.get(addr);
          if (!c) {
            c = await cluster().broker(cluster().addresses.indexOf(addr)).connect();
            conns.set(addr, c);
          }
          const r = await c.request(`PUBLISH topic=${topic} partition=${p} acks=all message=m${p}`);
          return r.kind === 'text' ? r.text : '(batch)';
        }),
      );
    } finally {
      for (const c of conns.values()) await c.close().catch(() => {});
    }
  }

  it('CREATE answers once every leader serves: the first write to each partition succeeds', async () => {
    const c = await cluster().connect(0);
    try {
      expect(await c.command('CREATE', { topic: 'ready-wait', partitions: 6, replication_factor: 3 })).toMatch(/^OK topic=ready-wait .*created=true/);
      const leaders = new Set(await cluster().metadataLeaders('ready-wait'));
      expect(leaders.size).toBeGreaterThan(1); // some leaders are the brokers that open the topic late
      const replies = await publishToEachLeader('ready-wait', 6);
      for (const r of replies) expect(r).toMatch(/^\{"status":"OK"/);
    } finally {
      await c.close();
    }
  });

  it('CREATE wait=false answers at once; the late leaders say topic_loading (retriable) until they serve', async () => {
    const c = await cluster().connect(0);
    try {
      expect(await c.command('CREATE', { topic: 'ready-nowait', partitions: 6, replication_factor: 3, wait: false })).toMatch(/^OK topic=ready-nowait/);
      const first = await publishToEachLeader('ready-nowait', 6);
      for (const r of first) expect(r).toMatch(/^\{"status":"OK"|^ERROR: \S+ .*retryable=true/);
      expect(first.some((r) => r.startsWith('ERROR: topic_loading'))).toBe(true);
      expect(first.some((r) => /retryable=false/.test(r))).toBe(false);
      await cluster().waitFor('every leader serving', async () => (await publishToEachLeader('ready-nowait', 6)).every((r) => r.startsWith('{"status":"OK"')));
      // Bad input changes nothing.
      await expectError(c.command('CREATE', { topic: 'ready-bad', wait: 'maybe' }), 'invalid_parameter');
      await expectError(c.command('METADATA', { topic: 'ready-bad' }), 'topic_not_found');
    } finally {
      await c.close();
    }
  });

  it('the SDK creates a topic and produces to every partition at once', async () => {
    const admin = new Admin({ brokers: [cluster().addresses[0]!] });
    const producer = new Producer({ brokers: cluster().addresses });
    try {
      await admin.createTopic({ topic: 'ready-sdk', partitions: 6, replicationFactor: 3 });
      const meta = await producer.send({ topic: 'ready-sdk', messages: Array.from({ length: 6 }, (_, p) => ({ value: `v${p}`, partition: p })) });
      expect(meta.map((m) => m.partition).sort()).toEqual([0, 1, 2, 3, 4, 5]);
      const c = await cluster().connect(1);
      try {
        const offsets = parseLine(await c.command('LIST_OFFSETS', { topic: 'ready-sdk' })).params.get('offsets')!;
        expect(offsets.match(/leo=1/g)?.length).toBe(6);
      } finally {
        await c.close();
      }
    } finally {
      await producer.close();
      await admin.close();
    }
  });
  it('Admin.listGroups lists the groups of every coordinator, whichever broker it asks first', async () => {
    const admin = new Admin({ brokers: [cluster().addresses[0]!] });
    try {
      await admin.createTopic({ topic: 'ready-groups', partitions: 1, replicationFactor: 3 });
      // Eight groups with committed offsets, spread over the coordinators.
      const groups = Array.from({ length: 8 }, (_, i) => `lg-${i}`);
      for (const group of groups) await admin.resetOffsets({ group, topic: 'ready-groups', to: 'earliest' });
      const c = await cluster().connect(0);
      const coordinators = new Set<string>();
      for (const group of groups) coordinators.add(parseLine(await c.command('FIND_COORDINATOR', { group })).params.get('coordinator_id')!);
      await c.close();
      expect(coordinators.size).toBeGreaterThan(1);
      // Before: only the groups the first broker coordinates.
      expect(await admin.listGroups()).toEqual(groups);
    } finally {
      await admin.close();
    }
  });
});

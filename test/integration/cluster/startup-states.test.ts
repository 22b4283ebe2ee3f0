/**
 * A broker starting in cluster mode gives every topic the partition states it lacks (its creator died
 * between the definition and the states) and replaces states a deleted namesake left behind (another
 * topic id), in one pass over the states (ClusterNode.repairPartitionStates).
 */
import { Etcd3 } from 'etcd3';
import { describe, expect, it } from 'vitest';
import { PartitionStateStore } from 'tributary-broker/cluster/partition-state.js';
import { useCluster } from '../../helpers/cluster.js';

describe('partition states repaired at startup (cluster)', () => {
  const cluster = useCluster(1);

  it('creates missing states and replaces a deleted namesake’s, leaving whole topics alone', async () => {
    const c = cluster();
    const admin = await c.connect(0);
    try {
      for (const [topic, partitions] of [
        ['st-missing', 3],
        ['st-foreign', 2],
        ['st-whole', 2],
      ] as const) {
        await admin.command('CREATE', { topic, partitions, replication_factor: 1 });
      }
    } finally {
      await admin.close();
    }
    const store = new PartitionStateStore({ etcd: { endpoints: c.etcd.endpoints }, prefix: c.prefix });
    const etcd = new Etcd3({ hosts: c.etcd.endpoints });
    try {
      await store.open();
      const whole = store.list('st-whole').map((e) => e.modRevision);
      const ownId = store.get('st-foreign', 0)!.value.topicId;
      expect(ownId).toBeDefined();
      await c.broker(0).stop();

      await etcd.delete().key(`${store.prefix}partitions/st-missing/2`).exec();
      const foreign = store.list('st-foreign').map((e) => ({ ...e.value, topicId: 'a-deleted-namesake', leaderEpoch: 7 }));
      await store.deleteTopic('st-foreign', ownId!);
      expect(await store.create('st-foreign', foreign)).toBe(true);

      await c.broker(0).relaunch();
      await c.waitFor('the states repaired', async () => {
        const missing = (await Promise.all([0, 1, 2].map((p) => store.read('st-missing', p)))).every((e) => e !== undefined);
        const replaced = (await Promise.all([0, 1].map((p) => store.read('st-foreign', p)))).every((e) => e?.value.topicId === ownId);
        return missing && replaced;
      });
      expect((await store.read('st-foreign', 0))!.value.leaderEpoch).toBeLessThan(7);
      // A topic with all its own states keeps them as they were.
      expect((await Promise.all([0, 1].map((p) => store.read('st-whole', p)))).map((e) => e!.modRevision)).toEqual(whole);
    } finally {
      await store.close();
      etcd.close();
    }
  });
});

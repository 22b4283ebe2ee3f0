/**
 * A read that carries a group starts at max(requested, committed); a leader that does not coordinate the
 * group asks the coordinator for the committed offset. With the coordinator frozen (SIGSTOP) that request
 * must not wait for it to come back: the peer connection gives up after its stall bound, the read fails
 * with a retriable error, and a retry reads once the group's `__consumer_offsets` partition has moved,
 * all while the old coordinator is still frozen (docs/architecture.md, "Cluster mode").
 */
import { beforeEach, describe, expect, it } from 'vitest';
import { TributaryError } from 'tributary-protocol/errors.js';
import { type TestCluster, useCluster } from '../helpers/cluster.js';
import { kv } from '../integration/groups/helpers.js';
import { sleep } from '../helpers/util.js';

const TOPIC = 'frozen-coord-read';

describe('a read with a group while its coordinator is frozen', () => {
  const getCluster = useCluster(3);
  let cluster: TestCluster;
  beforeEach(() => {
    cluster = getCluster();
  });

  it('fails retriably instead of waiting for the coordinator, and reads once the coordinator moved', async () => {
    const admin = await cluster.connect(0);
    await admin.command('CREATE', { topic: TOPIC, partitions: 1, replication_factor: 3 });
    const leader = await cluster.waitFor('a full ISR', async () => {
      const l = await cluster.leaderOf(TOPIC, 0);
      return l.id >= 0 && l.isr.length === 3 ? l : false;
    });
    const conn = await cluster.connect(leader.id);
    await conn.command('PUBLISH', { topic: TOPIC, partition: 0, acks: 'all', message: 'hello' });
    // A group coordinated by another broker than the partition's leader, and a read with it before the
    // freeze (the leader's connection to the coordinator is open then). Right after the cluster formed,
    // coordinators may still move (preferred leaders): ask again until the answers agree.
    const { group, coordId } = await cluster.waitFor('a group coordinated off the leader, read once', async () => {
      for (let i = 0; ; i++) {
        const g = `g-frozen-${i}`;
        const id = Number(kv(await admin.command('FIND_COORDINATOR', { group: g })).get('coordinator_id'));
        if (id < 0 || id === leader.id) continue;
        const before = await conn.consume({ topic: TOPIC, partition: 0, offset: 0, group: g, batch: 10, max_bytes: 1 << 20, isolation: 'read_uncommitted' });
        expect(before.records.map((r) => r.value.toString())).toEqual(['hello']);
        return { group: g, coordId: id };
      }
    });
    await conn.close();

    await cluster.broker(coordId).kill('SIGSTOP');
    try {
      const attempts: string[] = [];
      let held = 0;
      const values = await cluster.waitFor(
        'a read on the leader while the coordinator is frozen',
        async () => {
          // A connection of its own each time: the committed offset is asked once per connection.
          const c = await cluster.connect(leader.id);
          try {
            const read = c.consume({ topic: TOPIC, partition: 0, offset: 0, group, batch: 10, max_bytes: 1 << 20, isolation: 'read_uncommitted' });
            read.catch(() => {});
            // A read held until the coordinator comes back is the failure this test is about.
            const batch = await Promise.race([
              read,
              sleep(8000).then(() => {
                held++;
                return Promise.reject(new Error('the read waited 8 s for the frozen coordinator'));
              }),
            ]);
            return batch.records.map((r) => r.value.toString());
          } catch (err) {
            if (!(err instanceof TributaryError)) throw err;
            expect(err.retriable, `${err.message}`).toBe(true);
            attempts.push(err.code);
            return false;
          } finally {
            await c.close();
          }
        },
        30_000,
      );
      expect(values).toEqual(['hello']);
      expect(held, 'reads held until the frozen coordinator would answer').toBe(0);
      console.log(`read while the coordinator was frozen, after ${attempts.length} retriable failures: ${attempts.join(', ')}`);
    } finally {
      await cluster.broker(coordId).kill('SIGCONT');
    }
  });
});

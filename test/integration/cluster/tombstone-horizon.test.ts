/**
 * A replica that was stopped while its leader compacted away a tombstone (docs/architecture.md,
 * "Compaction", "Tombstone horizon"): on a 3-broker cluster, a group's committed offset (a record of the
 * compacted `__consumer_offsets`) is written, one follower stops, the group is deleted (a tombstone of that
 * key) and the leader's compaction drops the tombstone (`--delete-retention-ms 0`, small segments, a fast
 * retention timer). The follower comes back, rejoins the ISR and becomes the leader: the deleted offset must
 * not come back, neither in its log nor to FETCH_OFFSET. Before the horizon it fetched from its log end,
 * never saw the tombstone and kept the old commit.
 */
import { describe, expect, it } from 'vitest';
import { parseLine } from 'tributary-protocol/command.js';
import type { Connection } from 'tributary-protocol/connection.js';
import { TestCluster } from '../../helpers/cluster.js';

const OFFSETS = '__consumer_offsets';
const TOPIC = 'horizon-data';
const GROUP = 'deleted-group';
/** The key of GROUP's commit for TOPIC[0] in __consumer_offsets (coordinator/group-log.ts). */
const COMMIT_KEY = JSON.stringify(['o', GROUP, TOPIC, 0]);

/** Every record of __consumer_offsets[0] as the broker behind `c` leads it: key and value. */
async function offsetsLog(c: Connection): Promise<Array<{ offset: number; key: string; value: string }>> {
  const out: Array<{ offset: number; key: string; value: string }> = [];
  let offset = 0;
  for (;;) {
    const b = await c.consume({ topic: OFFSETS, partition: 0, offset, batch: 1000, isolation: 'read_uncommitted' });
    if (b.records.length === 0) return out;
    for (const r of b.records) out.push({ offset: r.offset, key: r.key?.toString() ?? '', value: r.value.toString() });
    offset = b.records[b.records.length - 1]!.offset + 1;
  }
}

describe('tombstone horizon (cluster)', () => {
  it('a follower stopped while the leader compacted away a tombstone does not bring the deleted key back when it leads', async () => {
    const cluster = await TestCluster.start(3, ['--offsets-topic-partitions', '1', '--segment-bytes', '1024', '--retention-check-ms', '200', '--delete-retention-ms', '0']);
    try {
      await cluster.createInSync(TOPIC);
      const data = await cluster.connect((await cluster.leaderOf(TOPIC, 0)).id);
      for (let i = 0; i < 10; i++) await data.command('PUBLISH', { topic: TOPIC, partition: 0, acks: 'all', message: `m${i}` });
      const offsets = await cluster.waitFor(`${OFFSETS}[0] led with a full ISR`, async () => {
        const l = await cluster.leaderOf(OFFSETS, 0);
        return l.id >= 0 && l.isr.length === 3 ? l : false;
      });
      const leader = offsets.id;
      const [follower, third] = [0, 1, 2].filter((id) => id !== leader) as [number, number];
      const lc = await cluster.connect(leader);

      // k=v1: the group's commit, replicated to every replica.
      await lc.command('RESET_OFFSETS', { group: GROUP, topic: TOPIC, partition: 0, to: 'offset', offset: 5 });
      const leaderEnd = async () => (await lc.json<{ partitions: Array<{ leo: number }> }>('DESCRIBE', { topic: OFFSETS })).partitions[0]!.leo;
      const end = await leaderEnd();
      await cluster.waitFor('the follower holds the commit', async () => {
        const fc = await cluster.connect(follower);
        try {
          return (await fc.json<{ partitions: Array<{ leo: number }> }>('DESCRIBE', { topic: OFFSETS })).partitions[0]!.leo >= end;
        } finally {
          await fc.close();
        }
      });
      await cluster.broker(follower).stop();

      // k=tombstone (the group deleted), then enough commits of other groups to close its segment.
      await lc.command('DELETE_GROUP', { group: GROUP });
      for (let i = 0; i < 40; i++) await lc.command('RESET_OFFSETS', { group: `filler-${i}`, topic: TOPIC, partition: 0, to: 'offset', offset: i % 10 });
      // The leader's compaction drops the commit (superseded) and then the tombstone (expired at once).
      await cluster.waitFor('the leader compacted the tombstone away', async () => {
        const log = await offsetsLog(lc);
        return log.length > 0 && !log.some((r) => r.key === COMMIT_KEY);
      });

      await cluster.broker(follower).relaunch();
      await cluster.waitFor('the follower back in the ISR, caught up', async () => {
        const l = await cluster.leaderOf(OFFSETS, 0);
        return l.isr.includes(follower) ? l : false;
      });
      // It heard of the dropped tombstone and fetched the partition again (cluster/tombstone-horizon.ts).
      expect(cluster.broker(follower).stderr).toContain('the leader dropped a tombstone this replica never read');
      // It becomes the leader (and the group's coordinator): the others stop.
      await cluster.broker(third).stop();
      await cluster.broker(leader).stop();
      await cluster.waitFor(`broker ${follower} leading ${OFFSETS}[0]`, async () => {
        const s = await cluster.status(follower);
        return s.partitions.find((p) => p.topic === OFFSETS && p.partition === 0)?.leader === follower;
      });
      const fc = await cluster.connect(follower);
      const log = await cluster.waitFor('its log readable as leader', async () => offsetsLog(fc));
      const fetched = await cluster.waitFor("the group's offset from the new coordinator", async () =>
        parseLine(await fc.command('FETCH_OFFSET', { topic: TOPIC, group: GROUP, partition: 0 })).params,
      );
      // Read from the start, the partition holds no value of the deleted key, and the group has no offset.
      expect({ commits: log.filter((r) => r.key === COMMIT_KEY && r.value !== ''), committed: fetched.get('committed') }).toEqual({ commits: [], committed: 'false' });
    } finally {
      await cluster.dispose();
    }
  }, 240_000);
});

/**
 * A follower of a partition that takes no writes, cut off from the cluster (etcd and the other brokers, by
 * the chaos suite's proxies) long enough for its lease to expire and the controller to drop it from the
 * ISR, comes back into the ISR once the cut heals, without a record being written (docs/architecture.md,
 * "Cluster mode", connections). The leader expands the ISR only on a fetch of a registered follower; this
 * one had parked its fetch before the cut, and nothing moves on an idle partition to wake it, so it stayed
 * out until the 30 s park fallback. Here the fallback is raised to 10 min (`replica.park_fallback@600000`):
 * the follower can only be back because the leader asked it to fetch once its registration came back.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ChaosCluster } from '../../chaos/cluster.js';
import { removeDir, tempDir } from '../../helpers/util.js';

const TOPIC = 'idle';

describe('a healed follower of an idle partition (cluster behind proxies)', () => {
  let cluster: ChaosCluster | undefined;
  let dir: string | undefined;
  beforeAll(async () => {
    dir = await tempDir();
    cluster = await ChaosCluster.start({ brokers: 3, flush: 'os', dataRoot: dir, logLevel: 'info', env: { TRIBUTARY_FAILPOINTS: 'replica.park_fallback@600000' } });
  }, 90_000);
  afterAll(async () => {
    await cluster?.dispose();
    if (dir) await removeDir(dir);
  });

  it('is back in the ISR before any record is written and before its parked fetch falls back', async () => {
    const c = cluster!;
    await c.createTopic(TOPIC, 1);
    const full = await c.waitFor(`${TOPIC}[0] led with a full ISR`, 30_000, async () => {
      const p = (await c.status())?.partitions.find((x) => x.topic === TOPIC && x.partition === 0);
      return p && p.leader >= 0 && p.isr.length === 3 ? p : false;
    });
    await c.ask(full.leader, async (conn) => {
      for (let i = 0; i < 10; i++) await conn.command('PUBLISH', { topic: TOPIC, partition: 0, acks: 'all', message: `m${i}` });
    }, 10_000);
    const before = (await c.describe(TOPIC, full.leader))[0]!;
    const victim = full.replicas.find((id) => id !== full.leader)!;

    c.cutOff(victim);
    try {
      await c.waitFor(`broker ${victim} out of the ISR (its lease expired)`, 30_000, async () => {
        const p = (await c.status())?.partitions.find((x) => x.topic === TOPIC && x.partition === 0);
        return p !== undefined && p.leader === full.leader && !p.isr.includes(victim);
      });
    } finally {
      c.reconnect(victim);
    }
    // Well inside the raised fallback: only a mark from the leader can have made the follower fetch again.
    const back = await c.waitFor(`broker ${victim} back in the ISR of the idle partition`, 60_000, async () => {
      const p = (await c.status())?.partitions.find((x) => x.topic === TOPIC && x.partition === 0);
      return p?.isr.includes(victim) ? p : false;
    });
    expect(back.leader).toBe(full.leader);
    expect(back.isr).toHaveLength(3);
    // Nothing was written meanwhile: no new data woke the parked fetch.
    const after = (await c.describe(TOPIC, full.leader))[0]!;
    expect({ leo: after.leo, hwm: after.hwm }).toEqual({ leo: before.leo, hwm: before.hwm });
    expect(c.brokers[victim]!.stderr).toContain('failpoint replica.park_fallback: 600000 ms');
  }, 150_000);
});

/**
 * Preferred-leader election: after a failover, leadership goes back to each partition's first replica
 * once that broker is registered again, in sync, and has been for --leader-rebalance-delay-ms, so one
 * broker does not end up leading everything (docs/architecture.md, "Cluster mode").
 */
import { beforeEach, describe, expect, it } from 'vitest';
import { type TestCluster, useCluster } from '../../helpers/cluster.js';

const TOPIC = 'preferred';

describe('preferred-leader election', () => {
  const getCluster = useCluster(3, ['--leader-rebalance-delay-ms', '500']);
  let cluster: TestCluster;
  beforeEach(() => {
    cluster = getCluster();
  });

  it('gives a partition back to its first replica after that broker was killed and restarted', async () => {
    await (await cluster.connect(0)).command('CREATE', { topic: TOPIC, partitions: 3, replication_factor: 3 });
    const initial = await cluster.waitFor('full ISRs', async () => {
      const ps = (await cluster.status()).partitions.filter((p) => p.topic === TOPIC);
      return ps.length === 3 && ps.every((p) => p.isr.length === 3) ? ps : false;
    });
    const p0 = initial.find((p) => p.partition === 0)!;
    const preferred = p0.replicas[0]!;
    expect(p0.leader).toBe(preferred);
    const other = [0, 1, 2].find((id) => id !== preferred)!;

    await cluster.broker(preferred).kill('SIGKILL');
    const moved = await cluster.waitFor('the partition led by another broker', async () => {
      const p = (await cluster.status(other)).partitions.find((x) => x.topic === TOPIC && x.partition === 0);
      return p && p.leader >= 0 && p.leader !== preferred ? p : false;
    });
    await cluster.broker(preferred).relaunch();

    const back = await cluster.waitFor('the preferred replica leading again', async () => {
      const p = (await cluster.status(other)).partitions.find((x) => x.topic === TOPIC && x.partition === 0);
      return p && p.leader === preferred ? p : false;
    });
    expect(back.leader_epoch).toBeGreaterThan(moved.leader_epoch);
    // Every partition ends on its first replica: leadership is spread again.
    await cluster.waitFor('every partition on its preferred replica', async () => {
      const ps = (await cluster.status(other)).partitions.filter((x) => x.topic === TOPIC);
      return ps.every((p) => p.leader === p.replicas[0]);
    });
  }, 120_000);
});

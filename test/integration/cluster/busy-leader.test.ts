/**
 * A leader whose event loop its own work held for 2 s (a 50 MiB append of 1.7M small records held it over
 * a second on a loaded machine) keeps leading: etcd had confirmed its 10 s lease well past the gap, so no
 * other broker can have taken its partitions; its acks=1 reply waits until etcd answers a keep-alive sent
 * after the gap (leadership may have moved meanwhile). It used to take any gap of a second for a pause that
 * may have cost the lease and refuse at once: the produce that waited behind the work got NOT_LEADER, and
 * one whose own append took the second was appended, then refused, on every retry (docs/architecture.md,
 * "Cluster mode"; a pause past the lease: test/unit/cluster/lease-keeper.test.ts, test/fault/cluster-*).
 */
import path from 'node:path';
import { expect, it } from 'vitest';
import { useCluster } from '../../helpers/cluster.js';
import { ROOT } from '../../helpers/launcher.js';
import { until } from '../../helpers/util.js';

const PROBE = path.join(ROOT, 'test', 'helpers', 'busy-probe.cjs');
const cluster = useCluster(2, ['--broker-lease-ttl-seconds', '10'], { NODE_OPTIONS: `--require ${PROBE}` });

it('answers the produce that waited behind two seconds of its own work, at acks=1 and acks=all', async () => {
  const c = cluster();
  const admin = await c.connect(0);
  await admin.command('CREATE', { topic: 'busy', partitions: 1, replication_factor: 2 });
  await admin.close();
  const { id, epoch } = await c.waitFor('busy[0] led with both replicas in sync', async () => {
    const l = await c.leaderOf('busy', 0);
    return l.id >= 0 && l.isr.length === 2 ? l : false;
  });
  const leader = c.broker(id);
  const conn = await c.connect(id);
  for (const acks of ['1', 'all']) {
    const from = leader.stdout.length;
    leader.proc!.kill('SIGUSR2');
    // The leader is inside its work now: the produce waits in its socket until the work ends.
    await until(() => leader.stdout.indexOf('busy\n', from) >= 0, 10_000, 'the leader busy');
    expect(leader.stdout.indexOf('idle', from)).toBe(-1); // sent while it works
    const reply = await conn.command('PUBLISH', { topic: 'busy', partition: 0, message: `after-busy-acks-${acks}`, acks });
    expect(leader.stdout.indexOf('idle true\n', from)).toBeGreaterThan(from);
    expect(JSON.parse(reply)).toMatchObject({ status: 'OK' });
  }
  const read = await conn.consume({ topic: 'busy', partition: 0, offset: 0 });
  expect(read.records.map((r) => r.value.toString())).toEqual(['after-busy-acks-1', 'after-busy-acks-all']);
  // Leadership never moved.
  expect(await c.leaderOf('busy', 0)).toMatchObject({ id, epoch });
}, 120_000);

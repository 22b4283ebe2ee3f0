/**
 * A cold boot where etcd comes up after the broker: the broker waits for it, with the reason on /ready,
 * and becomes ready by itself (docs/architecture.md, "Readiness"). It failed its start at once and stayed
 * unready for good, while a service manager saw a healthy process.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { FAST_CLUSTER_ARGS } from '../../helpers/cluster.js';
import { type EtcdServer, startEtcd } from '../../helpers/etcd.js';
import { BrokerProcess } from '../../helpers/launcher.js';
import { until } from '../../helpers/util.js';

describe('a cluster broker started before its etcd', () => {
  let etcd: EtcdServer;
  let broker: BrokerProcess | undefined;

  beforeAll(async () => {
    etcd = await startEtcd();
    await etcd.stop();
  }, 60_000);

  afterAll(async () => {
    await broker?.dispose();
    await etcd?.dispose();
  });

  it('waits for etcd and becomes ready once it answers', async () => {
    const args = ['--cluster', '--etcd', etcd.endpoints.join(','), '--broker-id', '0', '--internal-replication-factor', '1', ...FAST_CLUSTER_ARGS];
    // etcd comes up a few seconds into the broker's start.
    const etcdBack = new Promise<void>((resolve, reject) => setTimeout(() => etcd.restart().then(resolve, reject), 3000));
    broker = await BrokerProcess.start({ args, startTimeoutMs: 60_000 });
    await etcdBack;
    expect(broker.stderr).toMatch(/the metadata store \(etcd\) unavailable; retrying/);
    await until(async () => (await broker!.health('/ready')).status === 200, 30_000, 'the broker ready');
    const c = await broker.connect();
    await c.command('CREATE', { topic: 'late', partitions: 1, replication_factor: 1 });
    expect(await c.command('PUBLISH', { topic: 'late', partition: 0, message: 'ok' })).toContain('"status":"OK"');
  }, 90_000);
});

/**
 * A cold boot where etcd comes up after the broker: the broker waits for it, with the reason on /ready,
 * and becomes ready by itself (docs/architecture.md, "Readiness"). It failed its start at once and stayed
 * unready for good, while a service manager saw a healthy process.
 */
import fs from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { FAST_CLUSTER_ARGS } from '../../helpers/cluster.js';
import { type EtcdServer, startEtcd } from '../../helpers/etcd.js';
import { BrokerProcess } from '../../helpers/launcher.js';
import { tempDir, until } from '../../helpers/util.js';

const UNAVAILABLE = /the metadata store \(etcd\) unavailable; retrying/;

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
    // etcd comes up once the broker has found it unavailable (a fixed delay raced a broker slow to start
    // on a loaded machine, which found etcd already back). The start completes only after etcd answers.
    const log = path.join(await tempDir(), 'broker.stderr');
    const starting = BrokerProcess.start({ args, startTimeoutMs: 60_000, stderrFile: log });
    try {
      await until(() => fs.existsSync(log) && UNAVAILABLE.test(fs.readFileSync(log, 'utf8')), 30_000, 'the broker to find etcd unavailable');
      await etcd.restart();
    } finally {
      broker = await starting;
    }
    expect(broker.stderr).toMatch(UNAVAILABLE);
    await until(async () => (await broker!.health('/ready')).status === 200, 30_000, 'the broker ready');
    const c = await broker.connect();
    await c.command('CREATE', { topic: 'late', partitions: 1, replication_factor: 1 });
    expect(await c.command('PUBLISH', { topic: 'late', partition: 0, message: 'ok' })).toContain('"status":"OK"');
  }, 90_000);
});

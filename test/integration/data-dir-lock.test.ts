/**
 * One broker per data directory: a second broker started on a directory in use (standalone or
 * `--cluster`) exits non-zero naming the holder's pid and touches nothing; after kill -9 of the holder a
 * new broker starts there with every record; a clean shutdown removes the lock.
 */
import { existsSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { LOCK_FILE } from 'tributary-broker/broker/data-dir-lock.js';
import { FAST_CLUSTER_ARGS, TestCluster } from '../helpers/cluster.js';
import { BrokerProcess } from '../helpers/launcher.js';

const FAST = ['--offsets-topic-partitions', '1', '--transaction-state-partitions', '1'];

/** The start failure of a broker that must refuse: BrokerProcess.start rejects once the process has exited. */
async function refusedStart(opts: Parameters<typeof BrokerProcess.start>[0]): Promise<string> {
  let second: BrokerProcess | undefined;
  try {
    second = await BrokerProcess.start(opts);
  } catch (err) {
    return (err as Error).message;
  }
  await second.dispose();
  throw new Error('the second broker started on a data directory in use');
}

describe('one broker per data directory', () => {
  let broker: BrokerProcess | undefined;
  let cluster: TestCluster | undefined;

  afterEach(async () => {
    await broker?.dispose();
    broker = undefined;
    await cluster?.dispose();
    cluster = undefined;
  });

  it('a second standalone broker exits non-zero with "in use" and the pid; after kill -9 a new broker starts with the data intact', async () => {
    broker = await BrokerProcess.start({ args: FAST });
    const lockFile = path.join(broker.dataDir, LOCK_FILE);
    const firstPid = broker.proc!.pid!;
    let c = await broker.connect();
    await c.command('CREATE', { topic: 'locked', partitions: 1 });
    for (let i = 0; i < 5; i++) expect(await c.json('PUBLISH', { topic: 'locked', partition: 0, message: `first-${i}` })).toMatchObject({ offset: i });

    const refusal = await refusedStart({ dataDir: broker.dataDir, args: FAST });
    expect(refusal).toMatch(/broker exited with [1-9]\d* before listening/);
    expect(refusal).toContain('in use');
    expect(refusal).toContain(`pid ${firstPid}`);
    expect(JSON.parse(readFileSync(lockFile, 'utf8'))).toMatchObject({ pid: firstPid });

    // The first broker was not disturbed: it keeps the lock and appends at the next offset.
    expect(await c.json('PUBLISH', { topic: 'locked', partition: 0, message: 'first-5' })).toMatchObject({ offset: 5 });
    expect(JSON.parse(readFileSync(lockFile, 'utf8'))).toMatchObject({ pid: firstPid });

    // kill -9 leaves the lock file behind; its holder is dead, so the next broker takes it over.
    await broker.kill('SIGKILL');
    expect(existsSync(lockFile)).toBe(true);
    await broker.relaunch();
    expect(broker.proc!.pid).not.toBe(firstPid);
    expect(JSON.parse(readFileSync(lockFile, 'utf8'))).toMatchObject({ pid: broker.proc!.pid });
    c = await broker.connect();
    const batch = await c.consume({ topic: 'locked', partition: 0, offset: 0 });
    expect(batch.records.map((r) => [r.offset, r.value.toString()])).toEqual(Array.from({ length: 6 }, (_, i) => [i, `first-${i}`]));
    expect(await c.json('PUBLISH', { topic: 'locked', partition: 0, message: 'after' })).toMatchObject({ offset: 6 });

    // A clean shutdown releases the lock.
    expect(await broker.stop()).toBe(0);
    expect(existsSync(lockFile)).toBe(false);
  });

  it('a second cluster broker (--cluster) on a data directory in use exits non-zero with "in use" and the pid', async () => {
    cluster = await TestCluster.start(1);
    const holder = cluster.broker(0);
    const refusal = await refusedStart({
      dataDir: holder.dataDir,
      args: ['--cluster', '--etcd', cluster.etcd.endpoints.join(','), '--etcd-prefix', cluster.prefix, '--broker-id', '1', '--internal-replication-factor', '1', ...FAST_CLUSTER_ARGS],
    });
    expect(refusal).toMatch(/broker exited with [1-9]\d* before listening/);
    expect(refusal).toContain('in use');
    expect(refusal).toContain(`pid ${holder.proc!.pid}`);
    // It never joined: the cluster still has the one broker, which still serves.
    const status = await cluster.status();
    expect(status.brokers.map((b) => b.id)).toEqual([0]);
    expect((await holder.health('/ready')).status).toBe(200);
  });
});

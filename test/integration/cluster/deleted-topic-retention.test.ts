/**
 * A deleted topic's etcd tombstone lasts --deleted-topic-retention-ms (docs/operations.md, "Deleting a
 * topic"), in a 3-broker cluster with a retention of 20 s (given by env, so that a broker without the
 * setting starts too and the test fails on what it checks). A broker down during the delete and back
 * within the retention removes its copy of the topic; one back after the controller removed the
 * tombstone moves its copy aside, with a warning, and deletes nothing.
 */
import fs from 'node:fs/promises';
import path from 'node:path';
import { Etcd3 } from 'etcd3';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { Connection } from 'tributary-protocol/connection.js';
import { TestCluster } from '../../helpers/cluster.js';

const RETENTION_MS = 20_000;

describe('the tombstones of deleted topics expire', () => {
  let cluster: TestCluster;
  let etcd: Etcd3;
  const conns: Connection[] = [];

  beforeAll(async () => {
    cluster = await TestCluster.start(3, [], { TRIBUTARY_DELETED_TOPIC_RETENTION_MS: String(RETENTION_MS) });
    etcd = new Etcd3({ hosts: cluster.etcd.endpoints });
  }, 90_000);

  // A test that failed with its broker down does not leave the next one a broker short.
  afterEach(async () => {
    for (const b of cluster?.brokers ?? []) if (b.proc && (b.proc.exitCode !== null || b.proc.signalCode !== null)) await b.relaunch();
  });

  afterAll(async () => {
    await Promise.all(conns.map((c) => c.close().catch(() => {})));
    etcd?.close();
    await cluster?.dispose();
  });

  /**
   * A topic at RF 3 with records, one of its followers (not broker 0) killed, the topic deleted through its
   * leader: the killed broker's id and the name of its directory of the topic.
   */
  async function deleteWhileDown(topic: string): Promise<{ down: number; dir: string }> {
    const l = await cluster.createInSync(topic);
    const c = await cluster.connect(l.id);
    conns.push(c);
    for (let i = 0; i < 3; i++) await c.json('PUBLISH', { topic, partition: 0, acks: 'all', message: `m${i}` });
    const down = [1, 2].find((id) => id !== l.id)!;
    const b = cluster.broker(down);
    const dir = await cluster.waitFor(`broker ${down}'s copy of ${topic} on disk`, async () => (await copies(down, topic))[0]);
    await b.kill();
    expect(await c.command('DELETE', { topic })).toBe(`OK topic=${topic} deleted=true`);
    expect(await etcd.get(tombstoneKey(dir)).string()).not.toBeNull();
    return { down, dir };
  }

  async function copies(id: number, topic: string): Promise<string[]> {
    return (await fs.readdir(path.join(cluster.broker(id).dataDir, 'logs'))).filter((d) => d.startsWith(`${topic}~`));
  }

  function tombstoneKey(dir: string): string {
    return `${cluster.prefix}deleted-topics/${dir}`;
  }

  async function relaunch(id: number): Promise<void> {
    const b = cluster.broker(id);
    await b.relaunch();
    await cluster.waitFor(`broker ${id} ready`, async () => (await b.health('/ready').catch(() => ({ status: 0 }))).status === 200);
  }

  it('a broker back within the retention removes its copy of a topic deleted while it was down', async () => {
    const { down } = await deleteWhileDown('within');
    await relaunch(down);
    expect(await copies(down, 'within')).toEqual([]);
    await expect(fs.readdir(path.join(cluster.broker(down).dataDir, 'orphaned'))).rejects.toMatchObject({ code: 'ENOENT' });
  }, 120_000);

  it('the controller removes the tombstone after the retention; a broker back later moves its copy aside and deletes nothing', async () => {
    const { down, dir } = await deleteWhileDown('expired');
    const deletedAt = Date.now();
    // Before: the tombstone stayed for ever (one etcd key per topic ever deleted).
    await cluster.waitFor(
      'the controller to remove the expired tombstone',
      async () => (await etcd.get(tombstoneKey(dir)).string()) === null,
      RETENTION_MS + 30_000,
    );
    expect(Date.now() - deletedAt).toBeGreaterThanOrEqual(RETENTION_MS - 1000);
    await relaunch(down);
    const b = cluster.broker(down);
    expect(await copies(down, 'expired')).toEqual([]);
    const [aside] = await fs.readdir(path.join(b.dataDir, 'orphaned'));
    const moved = path.join(b.dataDir, 'orphaned', aside!, dir);
    // The whole copy, its records included.
    expect((await fs.readdir(path.join(moved, '0'))).some((f) => f.endsWith('.log'))).toBe(true);
    expect(b.stderr).toContain('moved aside a log directory of no known topic');
  }, 120_000);
});

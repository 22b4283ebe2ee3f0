/**
 * A broker keeps files only for the partitions it hosts (docs/architecture.md, "Hosted partitions"), on
 * a real 3-broker cluster: at replication factor 1 each partition's directory exists on its one replica
 * only; a partition moved away leaves no directory behind and its new replica serves every record; a
 * restart opens no directory for what it does not host.
 */
import { readdir } from 'node:fs/promises';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Connection } from 'tributary-protocol/connection.js';
import { TestCluster } from '../../helpers/cluster.js';

describe('hosted partitions', () => {
  let cluster: TestCluster;
  let admin: Connection;

  beforeAll(async () => {
    cluster = await TestCluster.start(3);
    admin = await cluster.connect(0);
  }, 120_000);

  afterAll(async () => {
    await admin?.close().catch(() => {});
    await cluster?.dispose();
  });

  /** The entries of `topic`'s directory in broker `id`'s data dir. */
  async function entriesOn(id: number, topic: string): Promise<string[]> {
    const logs = path.join(cluster.broker(id).dataDir, 'logs');
    const topicDir = (await readdir(logs)).find((d) => d.startsWith(`${topic}~`));
    return topicDir ? readdir(path.join(logs, topicDir)) : [];
  }

  /** The partitions of `topic` that have a directory there; anything else (a `.deleting` leftover) as its name. */
  async function dirsOn(id: number, topic: string): Promise<Array<number | string>> {
    return (await entriesOn(id, topic))
      .map((n) => (/^\d+$/.test(n) ? Number(n) : n))
      .sort((a, b) => String(a).localeCompare(String(b), 'en', { numeric: true }));
  }

  async function replicasOf(topic: string): Promise<Map<number, number[]>> {
    const out = new Map<number, number[]>([
      [0, []],
      [1, []],
      [2, []],
    ]);
    for (const p of (await cluster.status()).partitions) if (p.topic === topic) for (const r of p.replicas) out.get(r)!.push(p.partition);
    for (const list of out.values()) list.sort((a, b) => a - b);
    return out;
  }

  async function publish(topic: string, partition: number, message: string): Promise<void> {
    const c = await cluster.connect((await cluster.leaderOf(topic, partition)).id);
    try {
      await c.command('PUBLISH', { topic, partition, acks: 'all', message });
    } finally {
      await c.close().catch(() => {});
    }
  }

  /** The partition's records, read from broker `id` once it serves them (a new leader takes the lead once its epoch is on disk). */
  async function readAll(id: number, topic: string, partition: number): Promise<string[]> {
    const c = await cluster.connect(id);
    try {
      // An error counts as not yet (the last one is reported).
      return await cluster.waitFor(`${topic}[${partition}] served by broker ${id}`, async () =>
        (await c.consume({ topic, partition, offset: 0, batch: 100 })).records.map((x) => x.value.toString()),
      );
    } finally {
      await c.close().catch(() => {});
    }
  }

  it('each partition has files on its replicas only, also after a move and a restart', async () => {
    await admin.command('CREATE', { topic: 'spread', partitions: 6, replication_factor: 1 });
    await cluster.waitFor('spread led', async () => {
      const ps = (await cluster.status()).partitions.filter((p) => p.topic === 'spread');
      return ps.length === 6 && ps.every((p) => p.leader >= 0);
    });
    for (let p = 0; p < 6; p++) await publish('spread', p, `r${p}`);
    const before = await replicasOf('spread');
    for (const id of [0, 1, 2]) expect(await dirsOn(id, 'spread')).toEqual(before.get(id));

    // Partition 0 moves to a broker that does not host it: the old replica's directory goes.
    const from = before.get(0)!.includes(0) ? 0 : before.get(1)!.includes(0) ? 1 : 2;
    const to = (from + 1) % 3;
    expect(await admin.command('REASSIGN', { topic: 'spread', assignments: `0:${to}` })).toBe('OK topic=spread partitions=0 throttle=0');
    await cluster.waitFor('spread[0] moved', async () => {
      const p = (await cluster.status()).partitions.find((x) => x.topic === 'spread' && x.partition === 0)!;
      return p.replicas.join() === String(to) && p.leader === to;
    });
    // Renamed away first, then deleted: both names gone.
    await cluster.waitFor(`broker ${from} to drop spread[0]`, async () => !(await entriesOn(from, 'spread')).some((n) => n === '0' || n === '0.deleting'));
    expect(await readAll(to, 'spread', 0)).toEqual(['r0']);
    const after = await replicasOf('spread');
    for (const id of [0, 1, 2]) expect(await dirsOn(id, 'spread')).toEqual(after.get(id));

    // A restart opens what is on disk and creates nothing for the rest.
    await cluster.broker(from).restart();
    await cluster.waitFor(`broker ${from} ready`, async () => (await cluster.broker(from).health('/ready')).status === 200);
    expect(await dirsOn(from, 'spread')).toEqual(after.get(from));
    for (const p of after.get(from)!) expect(await readAll(from, 'spread', p)).toEqual([`r${p}`]);
  }, 120_000);
});

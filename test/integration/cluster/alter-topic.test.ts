/**
 * ALTER_TOPIC in a 3-broker cluster (docs/protocol.md, "Topics and metadata"): the change is made through
 * one broker, stored in the topic's definition in etcd, and every broker applies it from its watch
 * (DESCRIBE shows it everywhere, and each replica's retention acts on it); a broker down during the change
 * has it once it starts again, as does a broker added later.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { TestCluster } from '../../helpers/cluster.js';

const TOPIC = 'calt';

interface Described {
  retention_hours: number;
  retention_bytes: number;
  partitions: Array<{ id: number; earliest: number; leo: number }>;
}

describe('ALTER_TOPIC in a cluster', () => {
  let cluster: TestCluster;

  beforeAll(async () => {
    cluster = await TestCluster.start(3, ['--segment-bytes', '1024', '--retention-check-ms', '200']);
  }, 90_000);

  afterAll(async () => {
    await cluster?.dispose();
  });

  async function describeVia(id: number): Promise<Described> {
    const c = await cluster.connect(id);
    try {
      return await c.json<Described>('DESCRIBE', { topic: TOPIC });
    } finally {
      await c.close().catch(() => {});
    }
  }

  /** Until broker `id`'s DESCRIBE shows these settings. */
  function seenBy(id: number, hours: number, bytes: number): Promise<Described> {
    return cluster.waitFor(`broker ${id} describing ${TOPIC} with ${hours} h / ${bytes} bytes`, async () => {
      const d = await describeVia(id);
      return d.retention_hours === hours && d.retention_bytes === bytes ? d : false;
    });
  }

  it('a change through one broker reaches every broker, and each replica deletes by it', async () => {
    const leader = await cluster.createInSync(TOPIC);
    const c = await cluster.connect(leader.id);
    try {
      for (let i = 0; i < 30; i++) await c.command('PUBLISH', { topic: TOPIC, partition: 0, acks: 'all', message: `r${i}-${'x'.repeat(200)}` });
    } finally {
      await c.close().catch(() => {});
    }
    const via = (leader.id + 1) % 3;
    const admin = await cluster.connect(via);
    try {
      const reply = await admin.command('ALTER_TOPIC', { topic: TOPIC, retention_hours: 5, retention_bytes: 1 });
      expect(reply).toMatch(/^OK topic=calt retention_hours=5 retention_bytes=1 delete_retention_ms=\d+$/);
    } finally {
      await admin.close().catch(() => {});
    }
    for (const id of [0, 1, 2]) {
      await seenBy(id, 5, 1);
      // Every replica holds the records (acks=all, full ISR): its own retention deletes its closed segments.
      await cluster.waitFor(`broker ${id}'s replica of ${TOPIC}[0] trimmed`, async () => ((await describeVia(id)).partitions[0]!.earliest > 0));
    }
  });

  it('a broker down during a change has it once it starts again, and so has a broker added later', async () => {
    await cluster.broker(2).stop();
    const admin = await cluster.connect(0);
    try {
      await admin.command('ALTER_TOPIC', { topic: TOPIC, retention_hours: 9, retention_bytes: 777_777 });
    } finally {
      await admin.close().catch(() => {});
    }
    await seenBy(1, 9, 777_777);
    await cluster.broker(2).relaunch();
    expect(await seenBy(2, 9, 777_777)).toMatchObject({ retention_hours: 9, retention_bytes: 777_777 });
    await cluster.addBroker();
    await seenBy(3, 9, 777_777);
  });
});

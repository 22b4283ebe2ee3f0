/**
 * A follower whose --max-frame-bytes is smaller than its leader's: the leader takes produce frames up to
 * its own limit, and the follower must still take the REPLICA_FETCH answer that carries such an append
 * whole (an append is replicated whole). The follower's connections to its leader allowed twice the
 * follower's own frame size, so an append past that stalled the partition's replication for ever.
 */
import { expect, it } from 'vitest';
import { TestCluster } from '../../helpers/cluster.js';
import { batchFrame } from '../../helpers/raw-batch.js';
import { RawClient } from '../../helpers/raw-client.js';

it('a follower with a smaller --max-frame-bytes than its leader replicates an append as large as the leader takes', async () => {
  // Broker 0 takes 24 MiB frames, broker 1 only 2 MiB (its leader connections took 2 x 2 + 4 MiB).
  const c = await TestCluster.start(2, ['--replica-lag-max-ms', '1000'], {}, { argsFor: (id) => ['--max-frame-bytes', String((id === 0 ? 24 : 2) * 1024 * 1024)] });
  try {
    const admin = await c.connect(0);
    await admin.command('CREATE', { topic: 'big', partitions: 1, replication_factor: 2 });
    // Broker 0 preferred: the append goes to the broker that takes it.
    await admin.command('REASSIGN', { topic: 'big', assignments: '0:0,1' });
    await admin.close();
    await c.waitFor('big[0] led by broker 0 with both replicas in sync', async () => {
      const l = await c.leaderOf('big', 0);
      return l.id === 0 && l.isr.length === 2;
    });
    // 200,000 records of 32 bytes in the frame (6.1 MiB), 53 each stored (10.1 MiB): past 2 x 2 + 4 MiB.
    const n = 200_000;
    const head = batchFrame('big', 0, []);
    head.writeInt32BE(n, head.length - 4);
    const p = await RawClient.connect(c.broker(0).port);
    try {
      expect(await p.command(Buffer.concat([head, Buffer.alloc(n * 32)]), 120_000)).toMatch(/"status":"OK"/);
    } finally {
      p.destroy();
    }
    // The follower catches up: its own replica (DESCRIBE answers with it) reaches the leader's log end.
    const follower = await c.connect(1);
    try {
      await c.waitFor(
        'broker 1 holding all of big[0]',
        async () => (JSON.parse(await follower.command('DESCRIBE', { topic: 'big' })) as { partitions: Array<{ leo: number }> }).partitions[0]!.leo === n,
        60_000,
      );
    } finally {
      await follower.close();
    }
  } finally {
    await c.dispose();
  }
}, 180_000);

/**
 * A follower promoted while a replica append is still being written must not take writes before that
 * append has landed. Otherwise its producer state does not yet know the idempotent batch in that append:
 * the producer's retry of the batch (its reply was lost with the old leader) is appended a second time
 * behind it, and the new leader's epoch starts before records of the old epoch
 * (docs/architecture.md, "Taking the lead").
 *
 * The followers' replica writes are slowed to 3 s by a delay point; the leader is killed while they
 * write an idempotent batch, and the SDK producer retries it on the follower that takes over.
 */
import { beforeEach, describe, expect, it } from 'vitest';
import type { Connection } from 'tributary-protocol/connection.js';
import { Producer } from 'tributary-client/producer.js';
import { type TestCluster, useCluster } from '../helpers/cluster.js';

const TOPIC = 'promo-inflight';
const DELAY_MS = 3000;
const DELAY_LINE = `failpoint replica.append:${TOPIC}: delaying`;

function count(haystack: string, needle: string): number {
  return haystack.split(needle).length - 1;
}

describe('a follower promoted during a replica append', () => {
  const getCluster = useCluster(3, ['--min-insync-replicas', '2'], { TRIBUTARY_FAILPOINTS: `replica.append:${TOPIC}@${DELAY_MS}` });
  let cluster: TestCluster;
  beforeEach(() => {
    cluster = getCluster();
  });

  it('answers the idempotent retry with the original offset instead of appending it again', async () => {
    const admin = await cluster.connect(0);
    await admin.command('CREATE', { topic: TOPIC, partitions: 1, replication_factor: 3 });
    await admin.close();
    const start = await cluster.waitFor('a full ISR', async () => {
      const l = await cluster.leaderOf(TOPIC, 0);
      return l.id >= 0 && l.isr.length === 3 ? l : false;
    });
    const followers = [0, 1, 2].filter((id) => id !== start.id);
    // The retries outlast the promotion, held up here by the 3 s delay (a disk write, in earnest).
    const producer = new Producer({
      brokers: cluster.addresses,
      idempotent: true,
      acks: 'all',
      lingerMs: 0,
      stallTimeoutMs: 1000,
      retry: { retries: 100, maxDelayMs: 200, maxElapsedMs: 30_000 },
    });
    let conn: Connection | undefined;
    try {
      const [warm] = await producer.send({ topic: TOPIC, messages: [{ value: 'warm', partition: 0 }] });
      expect(warm!.offset).toBe(0);
      // Every delay line of the warm-up written: the next one on a follower is the batch below.
      await cluster.waitFor('the followers done with the warm-up', async () => followers.every((f) => count(cluster.broker(f).stderr, DELAY_LINE) === 1));

      const once = producer.send({ topic: TOPIC, messages: [{ value: 'once', partition: 0 }] });
      once.catch(() => {});
      await cluster.waitFor('a follower writing the batch', async () => followers.some((f) => count(cluster.broker(f).stderr, DELAY_LINE) === 2));
      await cluster.broker(start.id).kill('SIGKILL');

      const [acked] = await once;
      expect(acked!.offset).toBe(1);

      const next = await cluster.waitFor('a new leader', async () => {
        const l = await cluster.leaderOf(TOPIC, 0);
        return l.id >= 0 && l.id !== start.id ? l : false;
      });
      conn = await cluster.connect(next.id);
      const c = conn;
      // The rest of the log as the new leader holds it once its HWM covers its log end.
      const values = await cluster.waitFor('the new leader serving its log', async () => {
        const m = /leo=(\d+):hwm=(\d+)/.exec(await c.command('LIST_OFFSETS', { topic: TOPIC, partition: 0 }));
        if (!m || m[1] !== m[2]) return false;
        const batch = await c.consume({ topic: TOPIC, partition: 0, offset: 0, batch: 100, max_bytes: 1 << 20, isolation: 'read_uncommitted' });
        return batch.records.map((r) => `${r.offset}:${r.value.toString()}`);
      });
      expect(values).toEqual(['0:warm', '1:once']);
    } finally {
      await conn?.close();
      await producer.close({ signal: AbortSignal.timeout(5000) }).catch(() => {});
    }
  });
});

/**
 * An idempotent acks=all Producer on a 3-broker cluster (2 s leases) while the leader of some partitions
 * is frozen with SIGSTOP for 7 s: partitions led elsewhere keep being acknowledged (no reply of theirs
 * waits behind the frozen broker's), the frozen leader's partitions resume on their new leaders before
 * the pause ends, and every send succeeds, each record once and in send order.
 */
import { beforeEach, describe, expect, it } from 'vitest';
import type { Connection } from 'tributary-protocol/connection.js';
import { Producer } from 'tributary-client/producer.js';
import type { BatchRecord } from 'tributary-protocol/batch.js';
import { type TestCluster, useCluster } from '../../helpers/cluster.js';
import { sleep } from '../../helpers/util.js';

const TOPIC = 'frozen';
const PARTITIONS = 6;
const FREEZE_MS = 7000;
const SEND_EVERY_MS = 25;
interface Sent {
  partition: number;
  value: string;
  sentAt: number;
  ackedAt?: number;
  offset?: number;
  error?: unknown;
}

describe('SDK producer through a frozen partition leader', () => {
  const getCluster = useCluster(3);
  let cluster: TestCluster;
  beforeEach(() => {
    cluster = getCluster();
  });

  async function readAll(conn: Connection, partition: number): Promise<BatchRecord[]> {
    const out: BatchRecord[] = [];
    for (;;) {
      const batch = await conn.consume({ topic: TOPIC, partition, offset: out.length, batch: 10_000, max_bytes: 8 * 1024 * 1024, isolation: 'read_uncommitted' });
      if (batch.records.length === 0) return out;
      out.push(...batch.records);
    }
  }

  it('kept partitions stay acknowledged, moved ones resume before the pause ends, nothing fails or repeats', async () => {
    const admin = await cluster.connect(0);
    await admin.command('CREATE', { topic: TOPIC, partitions: PARTITIONS, replication_factor: 3 });
    await cluster.waitFor('every partition led with a full ISR', async () => {
      const s = await cluster.status();
      const ps = s.partitions.filter((p) => p.topic === TOPIC);
      return ps.length === PARTITIONS && ps.every((p) => p.leader >= 0 && p.isr.length === 3) ? ps : false;
    });
    const victim = (await cluster.leaderOf(TOPIC, 0)).id;
    const led = (await cluster.status()).partitions.filter((p) => p.topic === TOPIC);
    const moved = led.filter((p) => p.leader === victim).map((p) => p.partition);
    const kept = led.filter((p) => p.leader !== victim).map((p) => p.partition);
    expect(moved.length).toBeGreaterThan(0);

    const producer = new Producer({ brokers: cluster.addresses, idempotent: true, acks: 'all', lingerMs: 2, stallTimeoutMs: 1000 });
    const sent: Sent[] = [];
    let producing = true;
    const loop = (async () => {
      for (let i = 0; producing; i++) {
        for (let p = 0; p < PARTITIONS; p++) {
          const s: Sent = { partition: p, value: `p${p}-${i}`, sentAt: Date.now() };
          sent.push(s);
          producer.send({ topic: TOPIC, messages: [{ value: s.value, partition: p }] }).then(
            ([m]) => {
              s.ackedAt = Date.now();
              s.offset = m!.offset;
            },
            (err) => {
              s.ackedAt = Date.now();
              s.error = err;
            },
          );
        }
        await sleep(SEND_EVERY_MS);
      }
    })();

    try {
      await sleep(1000);
      const frozenAt = Date.now();
      await cluster.broker(victim).kill('SIGSTOP');
      await sleep(FREEZE_MS);
      const resumedAt = Date.now();
      await cluster.broker(victim).kill('SIGCONT');
      await sleep(1500);
      producing = false;
      await loop;
      await producer.flush({ signal: AbortSignal.timeout(30_000) });

      const failed = sent.filter((s) => s.error !== undefined);
      expect(failed.map((s) => `${s.value}: ${String(s.error)}`)).toEqual([]);
      const during = sent.filter((s) => s.sentAt >= frozenAt + 100 && s.sentAt < resumedAt - 100);
      // Partitions led elsewhere: acks=all waits only for the frozen follower to leave the ISR
      // (--replica-lag-max-ms 2000), never for a reply of the frozen broker.
      const keptWaits = during.filter((s) => kept.includes(s.partition)).map((s) => s.ackedAt! - s.sentAt);
      const movedFirstAcks = moved.map((p) => during.find((s) => s.partition === p)!.ackedAt! - frozenAt);
      console.log(`frozen broker ${victim}; kept ${kept} (longest ack wait ${Math.max(...keptWaits)} ms); moved ${moved} (first ack ${movedFirstAcks} ms after the freeze)`);
      expect(Math.max(...keptWaits)).toBeLessThan(6000);
      // The frozen leader's partitions are acknowledged by their new leaders before it resumes.
      for (const [i, p] of moved.entries()) expect(movedFirstAcks[i], `partition ${p}: first ack after the freeze`).toBeLessThan(FREEZE_MS);

      // Every record once, in send order, at the offsets the acks named.
      for (let p = 0; p < PARTITIONS; p++) {
        const mine = sent.filter((s) => s.partition === p);
        const leader = (await cluster.leaderOf(TOPIC, p)).id;
        const conn = await cluster.connect(leader);
        try {
          const log = (await readAll(conn, p)).map((r) => ({ offset: r.offset, value: r.value.toString() }));
          expect(log.map((r) => r.value)).toEqual(mine.map((s) => s.value));
          expect(mine.map((s) => s.offset)).toEqual(log.map((r) => r.offset));
        } finally {
          await conn.close();
        }
      }
    } finally {
      producing = false;
      await producer.close({ signal: AbortSignal.timeout(5000) }).catch(() => {});
      await cluster.broker(victim).kill('SIGCONT');
    }
  }, 120_000);
});

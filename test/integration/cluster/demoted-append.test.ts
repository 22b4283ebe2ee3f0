/**
 * A leader demoted with an append begun but not yet written (docs/architecture.md, "Cluster mode"): the
 * append must land before the broker, now a follower, truncates to its new leader's history. Landing after
 * the truncation decision, it stayed as a divergent record at an offset the new leader gave to an
 * acknowledged one (found by the chaos suite as lost acknowledged writes). Here the append is held by a
 * failpoint (`leader.append:<topic>@ms`) while the leader is paused past its lease and replaced, and once
 * back as a follower it waits after deciding its truncation (`replica.truncated:<topic>@ms`), so without
 * the wait for the held append, that append lands between the decision and the first fetch, at the offset
 * the new leader gave to its first record.
 *
 * And a follower named leader while its fetch loop waits for the old leader's LEADER_EPOCHS answer (held
 * by `leader.epochs:<topic>@ms`; the old leader then paused) must not wait for that answer to take the lead.
 */
import { describe, expect, it } from 'vitest';
import { Producer } from 'tributary-client/producer.js';
import { useCluster } from '../../helpers/cluster.js';
import { eventually } from '../../helpers/util.js';

const TOPIC = 'demoted';
const HELD_MS = 20_000;
const TRUNCATED_MS = 15_000;
const UNANSWERED = 'unanswered';

describe('an append in flight on a demoted leader (cluster)', () => {
  const cluster = useCluster(3, ['--leader-rebalance-delay-ms', '1000'], {
    TRIBUTARY_FAILPOINTS: `leader.append:${TOPIC}@${HELD_MS},replica.truncated:${TOPIC}@${TRUNCATED_MS}`,
  });

  it('lands before the truncation: the old leader ends with the new leader’s records only', async () => {
    const c = cluster();
    const first = await c.createInSync(TOPIC);
    const old = c.broker(first.id);
    const oldConn = await old.connect();
    // Held at the leader for HELD_MS before it is written; never acknowledged (its leadership goes meanwhile).
    const late = oldConn.json('PUBLISH', { topic: TOPIC, partition: 0, acks: 1, message: 'late' }).then(
      () => 'acknowledged',
      (e: { code?: string }) => e.code ?? 'failed',
    );
    await eventually('the append held at the leader', () => old.stderr.includes(`failpoint leader.append:${TOPIC}: delaying`));
    await old.kill('SIGSTOP');
    let resumed = false;
    try {
      const next = await c.waitFor('a new leader', async () => {
        const l = await c.leaderOf(TOPIC, 0);
        return l.id >= 0 && l.id !== first.id ? l : false;
      });
      // Writes through the new leader (binary batches: the failpoint holds only text appends; acks=1, as the
      // third broker's fetches wait TRUNCATED_MS after each truncation decision).
      const p = new Producer({ brokers: c.addresses, acks: 1, lingerMs: 0 });
      try {
        for (let i = 0; i < 5; i++) await p.send({ topic: TOPIC, messages: [{ value: `after${i}`, partition: 0 }] });
      } finally {
        await p.close();
      }
      expect((await c.leaderOf(TOPIC, 0)).id).toBe(next.id);
      await old.kill('SIGCONT');
      resumed = true;
      // The held append lands within HELD_MS of its start; the old leader rejoins, and as the preferred
      // replica gets the lead back: read its log through it.
      expect(await late).not.toBe('acknowledged');
      await c.waitFor('the old leader leading again with a full ISR', async () => {
        const l = await c.leaderOf(TOPIC, 0);
        return l.id === first.id && l.isr.length === 3 ? l : false;
      }, HELD_MS + TRUNCATED_MS + 20_000);
      // It serves once it has taken over (after the held append landed: NOT_LEADER taking_over until then).
      const reader = await old.connect();
      try {
        const values = await eventually(
          'a read through the old leader',
          async () => (await reader.consume({ topic: TOPIC, partition: 0, offset: 0, batch: 100 }).catch(() => null))?.records.map((r) => r.value.toString()),
          HELD_MS + TRUNCATED_MS + 20_000,
        );
        expect(values).toEqual(['after0', 'after1', 'after2', 'after3', 'after4']);
      } finally {
        await reader.close();
      }
    } finally {
      if (!resumed) await old.kill('SIGCONT').catch(() => {});
      await oldConn.close().catch(() => {});
    }
  }, 150_000);
});

describe('a follower named leader while its LEADER_EPOCHS is unanswered (cluster)', () => {
  const cluster = useCluster(3, [], { TRIBUTARY_FAILPOINTS: `leader.epochs:${UNANSWERED}@600000` });

  it('takes the lead at once, with its request to the paused leader still open', async () => {
    const c = cluster();
    // The followers' fetch loops start by asking the leader for its epoch history, which it holds.
    const first = await c.createInSync(UNANSWERED);
    const old = c.broker(first.id);
    await eventually('the followers asking', () => old.stderr.split(`failpoint leader.epochs:${UNANSWERED}: delaying`).length === 3);
    await old.kill('SIGSTOP');
    try {
      const next = await c.waitFor('a new leader named', async () => {
        const l = await c.leaderOf(UNANSWERED, 0);
        return l.id >= 0 && l.id !== first.id ? l : false;
      });
      // It serves while the old leader stays paused (its answer never comes): before, it answered
      // NOT_LEADER taking_over until the old leader resumed.
      const conn = await c.connect(next.id);
      try {
        const ok = await c.waitFor('a write through the new leader', async () =>
          conn.json<{ offset: number }>('PUBLISH', { topic: UNANSWERED, partition: 0, acks: 1, message: 'x' }).catch(() => false as const),
        );
        expect(ok.offset).toBe(0);
      } finally {
        await conn.close();
      }
    } finally {
      await old.kill('SIGCONT');
    }
  }, 120_000);
});

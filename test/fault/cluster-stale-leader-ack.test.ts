/**
 * An old leader must never acknowledge a record it lost. The leader appends an acks=all record that no
 * follower has fetched (both followers are frozen), is itself frozen past its lease, and a follower takes
 * over and writes another record at that offset. When the old leader resumes it becomes a follower,
 * truncates its unreplicated tail and takes the new leader's high-water mark: the pending acks=all
 * request must then fail with a retriable NOT_LEADER, not answer OK with an offset that now holds
 * another record (docs/architecture.md, "acks=all").
 */
import { beforeEach, describe, expect, it } from 'vitest';
import type { Connection } from 'tributary-protocol/connection.js';
import { parseLine } from 'tributary-protocol/command.js';
import { TributaryError } from 'tributary-protocol/errors.js';
import { type TestCluster, useCluster } from '../helpers/cluster.js';
import { sleep } from '../helpers/util.js';

const TOPIC = 'stale-ack';

function leo(reply: string): number {
  const m = /leo=(\d+)/.exec(parseLine(reply).params.get('offsets') ?? '');
  if (!m) throw new Error(`no leo in ${reply}`);
  return Number(m[1]);
}

describe('an old leader resumed after a pause', () => {
  const getCluster = useCluster(3, ['--min-insync-replicas', '2']);
  let cluster: TestCluster;
  beforeEach(() => {
    cluster = getCluster();
  });

  it('fails its pending acks=all request with NOT_LEADER instead of acknowledging a truncated record', async () => {
    const admin = await cluster.connect(0);
    await admin.command('CREATE', { topic: TOPIC, partitions: 1, replication_factor: 3 });
    const start = await cluster.waitFor('a full ISR', async () => {
      const l = await cluster.leaderOf(TOPIC, 0);
      return l.id >= 0 && l.isr.length === 3 ? l : false;
    });
    const oldLeader = start.id;
    const followers = [0, 1, 2].filter((id) => id !== oldLeader);
    const conn: Connection = await cluster.connect(oldLeader);
    const probe: Connection = await cluster.connect(oldLeader);
    await cluster.waitFor('the leader taking acks=all writes', async () => {
      const r = JSON.parse(await conn.command('PUBLISH', { topic: TOPIC, partition: 0, acks: 'all', message: 'warm' })) as { offset: number };
      return r.offset >= 0;
    });
    const before = leo(await probe.command('LIST_OFFSETS', { topic: TOPIC, partition: 0 }));

    // Followers frozen: the next record stays on the leader alone, its acks=all request pending.
    for (const f of followers) await cluster.broker(f).kill('SIGSTOP');
    // A follower's fetch already parked at the leader would carry the record into its socket buffer and
    // replicate it on resume: let those long polls (--replica-fetch-wait-ms 200) come back empty first.
    await sleep(600);
    const pending = conn.command('PUBLISH', { topic: TOPIC, partition: 0, acks: 'all', message: 'lost-if-acked' }).then(
      (reply) => ({ ok: true as const, reply }),
      (err: unknown) => ({ ok: false as const, err }),
    );
    await cluster.waitFor('the record appended on the old leader', async () => leo(await probe.command('LIST_OFFSETS', { topic: TOPIC, partition: 0 })) > before);
    // The old leader frozen before it can drop the frozen followers from the ISR (2 s lag bound).
    await cluster.broker(oldLeader).kill('SIGSTOP');
    for (const f of followers) await cluster.broker(f).kill('SIGCONT');

    // A follower takes over (the old leader's lease runs out) and writes another record at that offset.
    const next = await cluster.waitFor(
      'a new leader',
      async () => {
        const l = await cluster.leaderOf(TOPIC, 0);
        return l.id >= 0 && l.id !== oldLeader ? l : false;
      },
      30_000,
    );
    const newConn = await cluster.connect(next.id);
    const other = await cluster.waitFor('an acks=all write on the new leader', async () => {
      try {
        return JSON.parse(await newConn.command('PUBLISH', { topic: TOPIC, partition: 0, acks: 'all', message: 'winner' })) as { offset: number };
      } catch (err) {
        if (err instanceof TributaryError && err.retriable) return false;
        throw err;
      }
    });
    expect(other.offset).toBe(before);

    // Resumed, the old leader learns it is a follower, truncates and takes the new HWM.
    await cluster.broker(oldLeader).kill('SIGCONT');
    const outcome = await pending;
    if (outcome.ok) {
      throw new Error(`the old leader acknowledged a record that offset ${before} no longer holds: ${outcome.reply}`);
    }
    expect(outcome.err).toBeInstanceOf(TributaryError);
    expect((outcome.err as TributaryError).code).toBe('NOT_LEADER');
    expect((outcome.err as TributaryError).retriable).toBe(true);

    // The log holds the new leader's record there, on every replica once the old one has caught up.
    const read = await newConn.consume({ topic: TOPIC, partition: 0, offset: before, batch: 10 });
    expect(read.records.map((r) => r.value.toString())).toEqual(['winner']);
  }, 120_000);
});

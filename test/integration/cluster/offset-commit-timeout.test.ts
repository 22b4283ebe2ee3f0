/**
 * A log-store offset commit whose replication times out (a follower of the group's `__consumer_offsets`
 * partition frozen, so the in-sync replicas cannot confirm it) is in the coordinator's log, and a replay
 * reads it: its outcome is unknown, not "not written" (docs/architecture.md, "Cluster mode"). FETCH_OFFSET
 * must not answer the offset from before it, nor the new one before the in-sync replicas have it (once the
 * frozen follower has left the ISR); a lower commit must be refused, and after the coordinator moves, the
 * new one answers that offset rather than a lower one written after it.
 */
import { describe, expect, it } from 'vitest';
import type { Connection } from 'tributary-protocol/connection.js';
import { TributaryError } from 'tributary-protocol/errors.js';
import { useCluster } from '../../helpers/cluster.js';
import { expectError } from '../../helpers/util.js';
import { kv } from '../groups/helpers.js';

const TOPIC = 'commit-timeout';
const GROUP = 'g-commit-timeout';

/** FETCH_OFFSET's offset, or the code of the error it answers. */
async function fetched(c: Connection): Promise<number | string> {
  return c.command('FETCH_OFFSET', { topic: TOPIC, group: GROUP, partition: 0 }).then(
    (r) => Number(kv(r).get('offset')),
    (err: unknown) => (err instanceof TributaryError ? err.code : String(err)),
  );
}

describe('an offset commit whose replication timed out', () => {
  // Replication waits time out well before a frozen follower leaves the ISR (its lease: 2 s).
  const getCluster = useCluster(3, ['--replication-timeout-ms', '1000', '--replica-lag-max-ms', '20000']);

  it('is taken as of unknown outcome: never the old offset, no lower commit after it, the new coordinator answers it', async () => {
    const cluster = getCluster();
    const admin = await cluster.connect(0);
    await cluster.createInSync(TOPIC);
    const coordinator = await cluster.waitFor('the group coordinator', async () => {
      const r = kv(await admin.command('FIND_COORDINATOR', { group: GROUP }));
      const l = await cluster.leaderOf('__consumer_offsets', Number(r.get('partition')));
      return l.id === Number(r.get('coordinator_id')) && l.isr.length === 3 ? { id: l.id, partition: Number(r.get('partition')), isr: l.isr } : false;
    });
    const leader = (await cluster.leaderOf(TOPIC, 0)).id;
    const lc = await cluster.connect(leader);
    for (let i = 0; i < 30; i++) await lc.command('PUBLISH', { topic: TOPIC, partition: 0, acks: 'all', message: `m${i}` });

    const c = await cluster.connect(coordinator.id);
    const join = kv(await c.command('JOIN_GROUP', { topic: TOPIC, group: GROUP, member: 'w', session_timeout_ms: 60_000 }));
    const member = join.get('member');
    const generation = join.get('generation');
    await c.command('SYNC_GROUP', { topic: TOPIC, group: GROUP, member, generation });
    const commit = (offset: number) => c.command('COMMIT_OFFSET', { topic: TOPIC, group: GROUP, partition: 0, offset, member, generation });
    await commit(10);

    const follower = coordinator.isr.find((id) => id !== coordinator.id)!;
    await cluster.broker(follower).kill('SIGSTOP');
    try {
      await expectError(commit(20), 'request_timeout', { outcome: 'unknown' });
      // Refused (retriable) until the record is committed and the coordinator has read it back; never the offset from before.
      const answers = new Set<number | string>();
      await cluster.waitFor('FETCH_OFFSET answering 20', async () => {
        const a = await fetched(c);
        answers.add(a);
        return a === 20;
      });
      expect([...answers].filter((a) => a !== 20 && a !== 'storage_error')).toEqual([]);
      // Accepted, 15 would follow 20 in the log: the committed offset would go back once it is replayed.
      await expectError(commit(15), 'offset_regression', { current: '20' });
    } finally {
      await cluster.broker(follower).kill('SIGCONT');
    }

    await cluster.waitFor('the offsets partition in sync again', async () => (await cluster.leaderOf('__consumer_offsets', coordinator.partition)).isr.length === 3);
    await cluster.broker(coordinator.id).kill();
    const survivor = [0, 1, 2].find((id) => id !== coordinator.id)!;
    const sc = await cluster.connect(survivor);
    const moved = await cluster.waitFor('a new coordinator answering FETCH_OFFSET', async () => {
      const r = kv(await sc.command('FIND_COORDINATOR', { group: GROUP }));
      const id = Number(r.get('coordinator_id'));
      if (id === coordinator.id || id < 0) return false;
      const nc = await cluster.connect(id);
      try {
        const a = await fetched(nc);
        return typeof a === 'number' ? a : false;
      } finally {
        await nc.close();
      }
    });
    expect(moved).toBe(20);
  }, 120_000);
});

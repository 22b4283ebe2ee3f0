/**
 * A follower's way back into the ISR when the leader's first try does not land (docs/architecture.md,
 * "Cluster mode", connections). The expansion is tried on a caught-up follower's fetch; a follower with
 * nothing new is parked and does not fetch again by itself, so a leader whose expansion lost its
 * compare-and-set (here: the failpoint `isr.expand:<topic>!3`, more than the fetches a restarted follower makes before it parks) asks the follower for one more fetch.
 * Without that the follower stayed out of the ISR until the 30 s park fallback. The same when two followers
 * catch up together: the leader makes one ISR change at a time, and the expansion for the second, which
 * came while the first was in flight (made slow here: `isr.expand:<topic>@4000`), used to be dropped.
 */
import { describe, expect, it } from 'vitest';
import { useCluster } from '../../helpers/cluster.js';

const TOPIC = 'expand';
const SLOW = 'expand-slow';

describe('ISR expansion retry (cluster)', () => {
  const cluster = useCluster(3, [], { TRIBUTARY_FAILPOINTS: `isr.expand:${TOPIC}!3` });

  it('a restarted follower is back in the ISR although the leader’s first expansion was refused', async () => {
    const c = cluster();
    const full = await c.createInSync(TOPIC);
    const leader = c.broker(full.id);
    const conn = await leader.connect();
    try {
      for (let i = 0; i < 20; i++) await conn.command('PUBLISH', { topic: TOPIC, partition: 0, acks: 'all', message: `m${i}` });
    } finally {
      await conn.close();
    }
    const victimId = [0, 1, 2].find((id) => id !== full.id)!;
    const victim = c.broker(victimId);
    await victim.kill('SIGKILL');
    await c.waitFor('the dead follower out of the ISR', async () => !(await c.leaderOf(TOPIC, 0)).isr.includes(victimId), 30_000);
    await victim.relaunch();
    // Its first expansion is refused at the leader; the follower, caught up and parked, is asked again.
    // (Well inside the 30 s a parked follower waits before it fetches again on its own.)
    const back = await c.waitFor('the restarted follower back in the ISR', async () => {
      const l = await c.leaderOf(TOPIC, 0);
      return l.isr.includes(victimId) && l.id === full.id ? l : false;
    }, 15_000);
    expect(back.isr).toHaveLength(3);
    expect(leader.stderr).toContain(`failpoint isr.expand:${TOPIC}: refusing`);
  }, 120_000);
});

describe('ISR expansion of two followers catching up together (cluster)', () => {
  const cluster = useCluster(3, [], { TRIBUTARY_FAILPOINTS: `isr.expand:${SLOW}@4000` });

  it('both restarted followers are back in the ISR although the second came while the first expansion was in flight', async () => {
    const c = cluster();
    const full = await c.createInSync(SLOW);
    const followers = [0, 1, 2].filter((id) => id !== full.id);
    const conn = await c.broker(full.id).connect();
    try {
      for (let i = 0; i < 20; i++) await conn.command('PUBLISH', { topic: SLOW, partition: 0, acks: 1, message: `m${i}` });
    } finally {
      await conn.close();
    }
    for (const id of followers) await c.broker(id).kill('SIGKILL');
    await c.waitFor('the leader alone in the ISR', async () => (await c.leaderOf(SLOW, 0)).isr.join() === String(full.id), 30_000);
    await Promise.all(followers.map((id) => c.broker(id).relaunch()));
    // Each expansion takes 4 s at the leader: whichever follower comes second arrives while the first
    // is in flight, and is asked to fetch again once it settled (well inside the 30 s park fallback).
    const back = await c.waitFor('both followers back in the ISR', async () => {
      const l = await c.leaderOf(SLOW, 0);
      return l.isr.length === 3 && l.id === full.id ? l : false;
    }, 20_000);
    expect(back.isr).toEqual([0, 1, 2]);
    expect(c.broker(full.id).stderr).toContain(`failpoint isr.expand:${SLOW}: delaying`);
  }, 120_000);
});

/**
 * The `commit` event names the generation its commit was sent with (docs/sdk.md, "Events"): a history of
 * commits (member, generation, offsets) is what a checker of the group's safety reads. A commit still
 * unanswered when the member rejoined at a new generation was reported under the new one.
 */
import { describe, expect, it } from 'vitest';
import type { ConsumerEvents } from 'tributary-client/consumer.js';
import { batchFrom, consumerWithHeldCommit, scriptedGroup, useCleanup } from '../../helpers/scripted-group.js';
import { sleep, until } from '../../helpers/util.js';

describe('Consumer: the commit event generation (scripted broker)', () => {
  const cleanup = useCleanup();

  it('is the generation the commit carried, also when the member rejoined while it was unanswered', async () => {
    const s = await scriptedGroup();
    cleanup.push(() => s.close());
    let generation = 1;
    s.on('FETCH_OFFSET', () => 'OK offset=0 committed=true');
    s.on('CONSUME', (l) => batchFrom(Number(l.params.get('offset')), 5));
    s.on('JOIN_GROUP', () => `OK generation=${generation} member=m-1 leader=m-1 assignments=[0]`);
    s.on('SYNC_GROUP', () => `OK generation=${generation} member=m-1 leader=m-1 assignments=[0]`);
    s.on('HEARTBEAT', async (l) => {
      await sleep(Math.min(Number(l.params.get('wait_ms') ?? 0), 30));
      if (Number(l.params.get('generation')) !== generation) return `ERROR: REBALANCE_IN_PROGRESS class=fencing retryable=false group=g generation=${generation}`;
      return `OK member=m-1 generation=${generation}`;
    });
    const { c, release } = consumerWithHeldCommit(s, cleanup);
    const events: Array<ConsumerEvents['commit']> = [];
    c.on('commit', (e) => events.push(e));
    const it = c[Symbol.asyncIterator]();
    for (let i = 0; i < 4; i++) await it.next();
    const commit = c.commit(); // offsets 0..2 processed: P0:3, unanswered for now
    commit.catch(() => {});
    await until(() => s.count('BATCH_COMMIT') === 1, 5000, 'the commit sent');
    // The group moves on: the member rejoins at generation 2 while its commit is still unanswered.
    generation = 2;
    await until(() => c.generation === 2, 5000, 'the member rejoined at generation 2');
    release();
    await commit;
    const sent = Number(s.received('BATCH_COMMIT')[0]!.line!.params.get('generation'));
    expect(sent).toBe(1);
    expect(events[0]).toEqual({ offsets: [{ partition: 0, offset: 3 }], generation: sent });
    await it.return!();
  });
});

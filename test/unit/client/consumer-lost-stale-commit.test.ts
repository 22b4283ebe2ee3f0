/**
 * Nothing of a lost partition is committed (docs/sdk.md, "Rebalancing"): a commit queued behind one still
 * unanswered took its partitions when it was asked for, and ran after the member was lost and had joined
 * afresh; it sent the lost installation's offsets under the new member id, which the coordinator took as
 * the new member's (it owns the partition again), moving the committed offset past where the new
 * installation started reading.
 */
import { describe, expect, it } from 'vitest';
import { batchFrom, consumerWithHeldCommit, scriptedGroup, useCleanup } from '../../helpers/scripted-group.js';
import { sleep, until } from '../../helpers/util.js';

describe('Consumer: a commit queued before the member was lost (scripted broker)', () => {
  const cleanup = useCleanup();

  it('sends nothing of the lost installation once the member joined afresh', async () => {
    const s = await scriptedGroup();
    cleanup.push(() => s.close());
    const g = { member: 'm-1', generation: 1, lost: false };
    s.on('JOIN_GROUP', (l) => {
      if (!l.params.has('generation')) g.member = `m-${s.count('JOIN_GROUP')}`;
      g.generation++;
      return `OK generation=${g.generation} member=${g.member} leader=${g.member} assignments=[0]`;
    });
    s.on('SYNC_GROUP', () => `OK generation=${g.generation} member=${g.member} leader=${g.member} assignments=[0]`);
    s.on('HEARTBEAT', async (l) => {
      await sleep(Math.min(Number(l.params.get('wait_ms') ?? 0), 30));
      if (g.lost && l.params.get('member') === 'm-1') return `ERROR: member_not_found class=fencing retryable=false member=m-1`;
      return `OK member=${g.member} generation=${g.generation}`;
    });
    s.on('FETCH_OFFSET', () => 'OK offset=0 committed=true');
    s.on('CONSUME', (l) => batchFrom(Number(l.params.get('offset')), 5));
    const { c, release } = consumerWithHeldCommit(s, cleanup);
    const lost: number[][] = [];
    c.on('partitions.lost', (e) => lost.push(e.partitions));
    const it = c[Symbol.asyncIterator]();
    for (let i = 0; i < 4; i++) await it.next();
    const first = c.commit(); // P0:3, unanswered for now
    first.catch(() => {});
    await until(() => s.count('BATCH_COMMIT') === 1, 5000, 'the first commit sent');
    const m = (await it.next()).value!;
    // Queued behind it, for this installation's partition: P0:5 once m counts.
    const second = c.commit({ message: m });
    second.catch(() => {});
    // The member is lost (its partitions are other members' now) and joins afresh as m-2; its JOIN is
    // answered while the first commit still is not.
    const assigned: number[] = [];
    c.on('partitions.assigned', (e) => assigned.push(e.assignmentGeneration));
    g.lost = true;
    await until(() => lost.length === 1, 5000, 'the member lost');
    const more = it.next(); // the loop goes on: the lost partition's reader stops (docs/sdk.md, "Consumer")
    await until(() => c.memberId === 'm-2', 5000, 'the member joined afresh');
    release();
    await until(() => assigned.length === 1, 5000, 'the partition installed again');
    await Promise.allSettled([first, second]);
    const asNew = s.received('BATCH_COMMIT').filter((r) => r.line!.params.get('member') === 'm-2');
    expect(asNew.map((r) => r.line!.positional)).toEqual([]);
    await it.return!();
    await more;
  });
});

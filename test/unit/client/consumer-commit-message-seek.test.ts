/**
 * commit({ message }) after a seek() back to or below that message (docs/sdk.md, seek()): the message is
 * to be read again, so it does not count as processed, as the iterator itself does not count it. It was
 * counted: the commit went past the sought offset and cut the re-read short at a restart. And after its
 * partition was revoked, the consumer's own message answers consumer_rebalancing (docs/sdk.md,
 * "Consumer"), not the invalid_config of a message it did not hand out.
 */
import { describe, expect, it } from 'vitest';
import { Consumer } from 'tributary-client/consumer.js';
import type { ConsumedMessage } from 'tributary-client/consumer.js';
import { batchFrom, quickConsumer, scriptedGroup, useCleanup } from '../../helpers/scripted-group.js';
import { sleep, until } from '../../helpers/util.js';


describe('Consumer: commit({ message }) after seek() (scripted broker)', () => {
  const cleanup = useCleanup();

  it('a message at or above the sought offset is not counted; one below it is', async () => {
    const s = await scriptedGroup();
    cleanup.push(() => s.close());
    const commits: number[] = [];
    s.on('FETCH_OFFSET', () => 'OK offset=0 committed=true');
    s.on('CONSUME', (l) => batchFrom(Number(l.params.get('offset')), 10));
    s.on('BATCH_COMMIT', (l) => {
      commits.push(Number(/P0:(\d+)/.exec(l.positional[0]!)![1]));
      return 'OK batched=1';
    });

    const c = new Consumer(quickConsumer(s));
    cleanup.push(() => c.close());
    const it = c[Symbol.asyncIterator]();
    const got: ConsumedMessage[] = [];
    for (let i = 0; i < 10; i++) got.push((await it.next()).value as ConsumedMessage);
    expect(got.map((m) => m.offset)).toEqual([0, 1, 2, 3, 4, 5, 6, 7, 8, 9]);
    // Offsets 0..8 processed (the iterator counts a message when the next is asked for); 9 in hand.
    c.seek(0, 5);
    await c.commit({ message: got[9]! });
    expect(commits).toEqual([5]);
    // A message below the sought offset still counts.
    c.seek(0, 7);
    await c.commit({ message: got[6]! });
    expect(commits).toEqual([5, 7]);
    expect(((await it.next()).value as ConsumedMessage).offset).toBe(7);
    await it.return!();
  });

  it('a message of a partition revoked since answers consumer_rebalancing, and nothing is committed', async () => {
    const s = await scriptedGroup();
    cleanup.push(() => s.close());
    const g = { generation: 1, assignments: [0], rebalance: false };
    const reply = () => `OK generation=${g.generation} member=m-1 leader=m-1 assignments=[${g.assignments.join(',')}]`;
    s.on('JOIN_GROUP', (l) => {
      if (l.params.has('generation')) g.generation++;
      return reply();
    });
    s.on('SYNC_GROUP', reply);
    s.on('HEARTBEAT', async (l) => {
      if (g.rebalance) {
        g.rebalance = false;
        return `ERROR: REBALANCE_IN_PROGRESS class=fencing retryable=false group=g generation=${g.generation}`;
      }
      await sleep(Math.min(Number(l.params.get('wait_ms') ?? 0), 30));
      return `OK member=m-1 generation=${g.generation}`;
    });
    s.on('FETCH_OFFSET', () => 'OK offset=0 committed=true');
    s.on('CONSUME', (l) => batchFrom(Number(l.params.get('offset')), 3));
    s.on('BATCH_COMMIT', () => 'OK batched=1');

    const c = new Consumer(quickConsumer(s));
    cleanup.push(() => c.close());
    const revoked: number[][] = [];
    c.on('partitions.revoked', (e) => revoked.push(e.partitions));
    const it = c[Symbol.asyncIterator]();
    const m = (await it.next()).value as ConsumedMessage;
    // the partition goes to another member
    g.assignments = [];
    g.rebalance = true;
    // The revocation has begun (the partition's signal aborted); it waits for the loop body, which still
    // has m, to ask for the next message (docs/sdk.md, "Rebalancing").
    await until(() => m.fenced, 5000, 'the revocation');
    await expect(c.commit({ message: m })).rejects.toMatchObject({ code: 'consumer_rebalancing' });
    expect(revoked).toEqual([]);
    const next = it.next();
    await until(() => revoked.length === 1, 5000, 'the revocation confirmed once the loop asked for more');
    expect(s.received('BATCH_COMMIT')).toEqual([]);
    await it.return!();
    await next;
  });
});

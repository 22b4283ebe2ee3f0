/**
 * run({ eachBatch }) reads again what a batch handler left unresolved (docs/sdk.md, "eachBatch"), and
 * an exactly-once handler commits its batch's offsets in a transaction (txn.sendOffsets) instead of
 * resolving them. Once that transaction commits, the consumer counts the offsets as processed and
 * committed, so the batch is not read again. The scripted broker answers reads from the offset asked
 * for, as a cluster broker whose start offset for the group is cached per connection would: a re-read
 * would deliver the batch a second time, and the handler would write its output twice.
 */
import { describe, expect, it } from 'vitest';
import { Consumer } from 'tributary-client/consumer.js';
import { Producer } from 'tributary-client/producer.js';
import { batchFrom, quickConsumer, scriptedGroup, useCleanup } from '../../helpers/scripted-group.js';
import { sleep, until } from '../../helpers/util.js';

describe('Consumer: eachBatch with its offsets committed by a transaction (scripted broker)', () => {
  const cleanup = useCleanup();

  it('the batch is not delivered again', async () => {
    const s = await scriptedGroup();
    cleanup.push(() => s.close());
    const end = 3; // the log: offsets 0..2
    s.on('FETCH_OFFSET', () => 'OK offset=0 committed=true');
    s.on('CONSUME', async (l) => {
      const offset = Number(l.params.get('offset'));
      if (offset >= end) await sleep(20); // a long poll that finds nothing
      return batchFrom(offset, Math.max(0, end - offset));
    });
    s.on('INIT_PRODUCER_ID', () => 'OK producerId=p-1 epoch=0');
    s.on('BEGIN_TXN', () => 'OK');
    s.on('SEND_OFFSETS_TO_TXN', () => 'OK staged_offsets=1');
    s.on('END_TXN', () => 'OK');

    const producer = new Producer({ brokers: [s.address], transactionalId: 'eos-1', retry: { initialDelayMs: 1, maxDelayMs: 10 } });
    cleanup.push(() => producer.close());
    const c = new Consumer(quickConsumer(s));
    cleanup.push(() => c.close());
    const batches: number[][] = [];
    const run = c.run({
      eachBatch: async ({ partition, messages }) => {
        batches.push(messages.map((m) => m.offset));
        const txn = await producer.transaction();
        await txn.sendOffsets({ consumer: c, offsets: [{ partition, offset: messages[messages.length - 1]!.offset + 1 }] });
        await txn.commit();
      },
    });
    // the reads after the batch ask for the end: a read from 0 again would have delivered it again
    const readsAtEnd = () => s.received('CONSUME').filter((r) => r.line?.params.get('offset') === String(end)).length;
    await until(() => readsAtEnd() >= 3 || batches.length > 1, 10_000, 'reads at the end, or the batch again');
    expect(batches).toEqual([[0, 1, 2]]);
    expect(s.received('END_TXN')).toHaveLength(1);
    // counted as committed: close() has nothing to commit
    await c.close();
    await run;
    expect(s.received('BATCH_COMMIT')).toEqual([]);
  });
});

/**
 * Producer epochs are 16-bit (MAX_PRODUCER_EPOCH, as in a RecordBatch v2 header): a transactional id's
 * epoch goes up by one per INIT_PRODUCER_ID or coordinator abort until the last one, then the id starts
 * over with a new producer id at epoch 0.
 */
import { describe, expect, it } from 'vitest';
import { MAX_PRODUCER_EPOCH } from 'tributary-protocol/record.js';
import { bumpEpoch } from 'tributary-broker/txn/txn-entry.js';
import type { TxnMetadata } from 'tributary-broker/txn/txn-log.js';

function meta(producerId: string, epoch: number): TxnMetadata {
  return { transactionalId: 't', producerId, epoch, state: 'empty', timeoutMs: 1000, startedMs: 0, partitions: [], offsets: [], updatedMs: 0 };
}

describe('bumpEpoch', () => {
  const ids = { next: 100, allocate: async function () { return String(this.next++); } };

  it('goes up by one below the last epoch, keeping the producer id', async () => {
    const m = meta('7', MAX_PRODUCER_EPOCH - 1);
    await bumpEpoch(m, ids);
    expect(m).toMatchObject({ producerId: '7', epoch: MAX_PRODUCER_EPOCH });
  });

  it('at the last epoch takes a new producer id at epoch 0', async () => {
    expect(MAX_PRODUCER_EPOCH).toBe(32_767);
    const m = meta('7', MAX_PRODUCER_EPOCH);
    await bumpEpoch(m, ids);
    expect(m.epoch).toBe(0);
    expect(m.producerId).not.toBe('7');
    expect(Number(m.producerId)).toBeGreaterThanOrEqual(100);
  });
});

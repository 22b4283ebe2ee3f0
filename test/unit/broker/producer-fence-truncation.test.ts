/**
 * A producer snapshot past the log end (a follower's truncation below it, a torn tail cut by recovery) keeps
 * every producer's epoch (docs/architecture.md, "Idempotent producers"): an epoch a transaction marker fenced
 * below the cut stays fenced, though the producer has no batches left.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { Partition } from 'tributary-broker/partition/partition.js';
import { PartitionLog } from 'tributary-broker/storage/partition-log.js';
import { removeDir, tempDir } from '../../helpers/util.js';

const dirs: string[] = [];
afterEach(async () => {
  for (const d of dirs.splice(0)) await removeDir(d);
});

describe('producer snapshot past the log end after a truncation', () => {
  it('keeps the epoch a marker fenced', async () => {
    const dir = await tempDir('trib-pfence-');
    dirs.push(dir);
    const p = new Partition('t', 0, await PartitionLog.open(dir, {}));
    await p.whenProducerStateReady();
    await p.whenTxnIndexReady();
    await p.appendTransactional([{ key: null, value: Buffer.from('zombie-0') }], { producerId: 'P', epoch: 0, firstSequence: 0, lastSequence: 0 });
    await p.writeMarker('P', 1, 'abort'); // the coordinator fenced epoch 0
    await p.append([{ key: null, value: Buffer.from('x') }]);
    await p.append([{ key: null, value: Buffer.from('y') }]);
    const snaps = (p as unknown as { snapshots: { onTick(): void; settled(): Promise<void> } }).snapshots;
    snaps.onTick();
    await snaps.settled();
    expect(p.producerState()?.describe('P')).toEqual({ epoch: 1, lastSeq: -1 });
    await p.truncateTo(3); // below the producer snapshot's offset (4), above the marker (1)
    await p.whenProducerStateReady();
    expect(p.producerState()?.describe('P')).toEqual({ epoch: 1, lastSeq: -1 });
    const r = await p
      .appendTransactional([{ key: null, value: Buffer.from('zombie-1') }], { producerId: 'P', epoch: 0, firstSequence: 0, lastSequence: 0 })
      .then(
        (x) => `accepted at ${x.baseOffset}`,
        (e: { code?: string }) => e.code,
      );
    expect(r).toBe('stale_producer_epoch');
    await p.close();
  });
});

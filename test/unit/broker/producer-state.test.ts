import fs from 'node:fs/promises';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { Partition, PRODUCER_SNAPSHOT_FILE } from 'tributary-broker/partition/partition.js';
import { PRODUCER_WINDOW, ProducerStateTable } from 'tributary-broker/partition/producer-state.js';
import { PartitionLog } from 'tributary-broker/storage/partition-log.js';
import { simulateCrash } from 'tributary-broker/storage/log-test-hooks.js';
import { INDEX_SUFFIX, segmentFileName } from 'tributary-broker/storage/segment-names.js';
import { rec, removeDir, tempDir, thrownCode } from '../../helpers/util.js';

/** check + begin + complete, as Partition does around an append at `base`. */
function append(t: ProducerStateTable, id: string, epoch: number, first: number, last: number, base: number) {
  const c = t.check(id, epoch, first, last);
  expect(c.kind).toBe('append');
  const e = t.begin(id, epoch, first, last, 1000);
  t.complete(e, { baseOffset: base, lastOffset: base + last - first, timestamp: 5 });
}

describe('ProducerStateTable', () => {
  it('accepts a new producer at sequence 0 only, then consecutive batches', () => {
    const t = new ProducerStateTable();
    expect(thrownCode(() => t.check('p', 0, 3, 3))).toBe('out_of_order_sequence');
    append(t, 'p', 0, 0, 2, 10);
    append(t, 'p', 0, 3, 3, 20);
    expect(t.describe('p')).toEqual({ epoch: 0, lastSeq: 3 });
  });

  it('answers a duplicate of the last batch and of an earlier in-window batch with the original offsets', () => {
    const t = new ProducerStateTable();
    append(t, 'p', 0, 0, 1, 100);
    append(t, 'p', 0, 2, 4, 200);
    append(t, 'p', 0, 5, 5, 300);
    const last = t.check('p', 0, 5, 5);
    expect(last.kind === 'duplicate' && [last.entry.baseOffset, last.entry.lastOffset]).toEqual([300, 300]);
    const earlier = t.check('p', 0, 0, 1);
    expect(earlier.kind === 'duplicate' && [earlier.entry.baseOffset, earlier.entry.lastOffset]).toEqual([100, 101]);
    const mid = t.check('p', 0, 2, 4);
    expect(mid.kind === 'duplicate' && [mid.entry.baseOffset, mid.entry.lastOffset]).toEqual([200, 202]);
  });

  it('remembers only the last PRODUCER_WINDOW batches', () => {
    const t = new ProducerStateTable();
    for (let i = 0; i <= PRODUCER_WINDOW; i++) append(t, 'p', 0, i, i, i);
    expect(thrownCode(() => t.check('p', 0, 0, 0))).toBe('out_of_order_sequence');
    expect(t.check('p', 0, 1, 1).kind).toBe('duplicate');
  });

  it('refuses gaps and overlaps that are not an exact duplicate', () => {
    const t = new ProducerStateTable();
    append(t, 'p', 0, 0, 4, 0);
    expect(thrownCode(() => t.check('p', 0, 6, 6))).toBe('out_of_order_sequence'); // gap
    expect(thrownCode(() => t.check('p', 0, 3, 6))).toBe('out_of_order_sequence'); // overlap
    expect(thrownCode(() => t.check('p', 0, 0, 2))).toBe('out_of_order_sequence'); // part of a batch
    expect(t.check('p', 0, 5, 6).kind).toBe('append');
  });

  it('fences a lower epoch; a higher epoch restarts at sequence 0', () => {
    const t = new ProducerStateTable();
    append(t, 'p', 1, 0, 9, 0);
    expect(thrownCode(() => t.check('p', 0, 10, 10))).toBe('stale_producer_epoch');
    expect(thrownCode(() => t.check('p', 2, 10, 10))).toBe('out_of_order_sequence');
    append(t, 'p', 2, 0, 0, 50);
    expect(t.describe('p')).toEqual({ epoch: 2, lastSeq: 0 });
    expect(thrownCode(() => t.check('p', 1, 10, 10))).toBe('stale_producer_epoch');
    // the old epoch's batches are gone from the window
    expect(thrownCode(() => t.check('p', 2, 0, 9))).toBe('out_of_order_sequence');
  });

  it('fence: a higher epoch replaces the state (older epochs refused, sequence 0 next); equal or lower changes nothing', () => {
    const t = new ProducerStateTable();
    append(t, 'p', 2, 0, 3, 0);
    t.fence('p', 2, 1000);
    expect(t.describe('p')).toEqual({ epoch: 2, lastSeq: 3 });
    t.fence('p', 1, 1000);
    expect(t.describe('p')).toEqual({ epoch: 2, lastSeq: 3 });
    t.fence('p', 3, 1000);
    expect(t.describe('p')).toEqual({ epoch: 3, lastSeq: -1 });
    expect(thrownCode(() => t.check('p', 2, 4, 4))).toBe('stale_producer_epoch');
    expect(thrownCode(() => t.check('p', 3, 1, 1))).toBe('out_of_order_sequence');
    expect(t.check('p', 3, 0, 0).kind).toBe('append');
    // kept in a snapshot even without batches
    expect(ProducerStateTable.fromSnapshot(t.snapshot(10)).describe('p')).toEqual({ epoch: 3, lastSeq: -1 });
  });

  it('forgets a producer whose only appends, the first it had here, failed; one with state keeps its epoch', () => {
    const t = new ProducerStateTable();
    const a = t.begin('n', 3, 9, 9, 0);
    const b = t.begin('n', 3, 10, 10, 0);
    // Pending and never written: not in a snapshot either.
    expect(t.snapshot(0).producers).toEqual([]);
    t.abort('n', a);
    expect(t.describe('n')).toEqual({ epoch: 3, lastSeq: 10 });
    t.abort('n', b);
    expect(t.describe('n')).toBeUndefined();
    expect(t.check('n', 1, 4, 4, true).kind).toBe('append');
    append(t, 'k', 2, 0, 0, 0);
    t.abort('k', t.begin('k', 2, 1, 1, 0));
    expect(() => t.check('k', 1, 0, 0)).toThrow(/stale_producer_epoch/);
  });

  it('keeps producers apart and forgets an aborted append', () => {
    const t = new ProducerStateTable();
    append(t, 'a', 0, 0, 0, 0);
    append(t, 'b', 0, 0, 0, 1);
    const e = t.begin('a', 0, 1, 1, 0);
    expect(t.check('a', 0, 1, 1)).toMatchObject({ kind: 'duplicate' });
    t.abort('a', e);
    expect(t.check('a', 0, 1, 1).kind).toBe('append');
  });

  it('round-trips through a snapshot; replay skips batches it already has', () => {
    const t = new ProducerStateTable();
    append(t, 'p', 0, 0, 1, 0);
    append(t, 'p', 0, 2, 2, 2);
    const t2 = ProducerStateTable.fromSnapshot(JSON.parse(JSON.stringify(t.snapshot(3))));
    t2.replay('p', 0, 2, 2, 2, 2, 5); // already known
    t2.replay('p', 0, 3, 4, 3, 4, 5);
    expect(t2.describe('p')).toEqual({ epoch: 0, lastSeq: 4 });
    const d = t2.check('p', 0, 0, 1);
    expect(d.kind === 'duplicate' && d.entry.baseOffset).toBe(0);
    expect(t2.check('p', 0, 5, 5).kind).toBe('append');
  });
});

describe('ProducerStateTable.dropBatchesFrom', () => {
  it('forgets batches past a log end cut by recovery, and keeps every epoch', () => {
    const t = new ProducerStateTable();
    append(t, 'p', 0, 0, 1, 0);
    append(t, 'p', 0, 2, 3, 2);
    append(t, 'q', 1, 0, 0, 4);
    t.dropBatchesFrom(2);
    expect(t.describe('p')).toEqual({ epoch: 0, lastSeq: 1 });
    expect(t.check('p', 0, 2, 3).kind).toBe('append');
    // q's only batch is gone, not its epoch: the batch again is a new append, an older epoch is fenced.
    expect(t.describe('q')).toEqual({ epoch: 1, lastSeq: -1 });
    expect(t.check('q', 1, 0, 0).kind).toBe('append');
    expect(() => t.check('q', 0, 0, 0)).toThrow(/stale_producer_epoch/);
  });

  it('an aborted append leaves a fenced epoch in force', () => {
    const t = new ProducerStateTable();
    t.fence('z', 2, 0);
    const e = t.begin('z', 2, 0, 0, 0);
    t.abort('z', e);
    expect(() => t.check('z', 1, 0, 0)).toThrow(/stale_producer_epoch/);
    expect(t.check('z', 2, 0, 0).kind).toBe('append');
  });
});

describe('Partition idempotent appends', () => {
  const dirs: string[] = [];
  afterEach(async () => {
    for (const d of dirs.splice(0)) await removeDir(d);
  });

  async function openPartition(dir: string): Promise<Partition> {
    const p = new Partition('t', 0, await PartitionLog.open(dir, { flush: 'os' }));
    await p.whenProducerStateReady();
    return p;
  }

  /** A record of producer p1 at epoch 0 with sequence `sequence`. */
  const idem = (v: string, sequence: number) => rec(v, { producerId: 'p1', epoch: 0, sequence });

  it('answers concurrent duplicates from the pending append, and rebuilds the state on open', async () => {
    const dir = await tempDir('tributary-pstate-');
    dirs.push(dir);
    let p = await openPartition(dir);
    await p.append([{ key: null, value: Buffer.from('plain') }]);
    const a = p.appendIdempotent([idem('a', 0), idem('b', 1)], { producerId: 'p1', epoch: 0, firstSequence: 0, lastSequence: 1 });
    const dup = p.appendIdempotent([idem('a', 0), idem('b', 1)], { producerId: 'p1', epoch: 0, firstSequence: 0, lastSequence: 1 });
    expect(await a).toMatchObject({ baseOffset: 1, lastOffset: 2, duplicate: false });
    expect(await dup).toMatchObject({ baseOffset: 1, lastOffset: 2, duplicate: true });
    expect(await p.appendIdempotent([idem('c', 2)], { producerId: 'p1', epoch: 0, firstSequence: 2, lastSequence: 2 })).toMatchObject({ baseOffset: 3 });
    await expect(p.appendIdempotent([idem('x', 5)], { producerId: 'p1', epoch: 0, firstSequence: 5, lastSequence: 5 })).rejects.toMatchObject({
      code: 'out_of_order_sequence',
    });
    expect(p.logEndOffset).toBe(4);
    await p.close();

    // graceful reopen: from the snapshot
    p = await openPartition(dir);
    expect(await p.appendIdempotent([idem('a', 0), idem('b', 1)], { producerId: 'p1', epoch: 0, firstSequence: 0, lastSequence: 1 })).toMatchObject({
      baseOffset: 1,
      duplicate: true,
    });
    expect(await p.appendIdempotent([idem('d', 3)], { producerId: 'p1', epoch: 0, firstSequence: 3, lastSequence: 3 })).toMatchObject({
      baseOffset: 4,
      duplicate: false,
    });
    await simulateCrash(p.log);

    // after a crash: the snapshot is older than the log; the appends after it are replayed
    p = await openPartition(dir);
    expect(await p.appendIdempotent([idem('d', 3)], { producerId: 'p1', epoch: 0, firstSequence: 3, lastSequence: 3 })).toMatchObject({
      baseOffset: 4,
      duplicate: true,
    });
    expect(await p.appendIdempotent([idem('c', 2)], { producerId: 'p1', epoch: 0, firstSequence: 2, lastSequence: 2 })).toMatchObject({
      baseOffset: 3,
      duplicate: true,
    });
    expect(p.logEndOffset).toBe(5);
    await p.close();

    // without a snapshot: rebuilt from the log
    await fs.rm(path.join(dir, PRODUCER_SNAPSHOT_FILE));
    p = await openPartition(dir);
    expect(await p.appendIdempotent([idem('b', 1)], { producerId: 'p1', epoch: 0, firstSequence: 0, lastSequence: 1 })).toMatchObject({
      baseOffset: 1,
      duplicate: true,
    });
    expect(p.producerState()?.describe('p1')).toEqual({ epoch: 0, lastSeq: 3 });
    await p.close();
  });

  it('a batch checked while an earlier one of its producer was pending is not written once that one failed: the order holds, and the retries go in', async () => {
    const dir = await tempDir('tributary-pstate-');
    dirs.push(dir);
    const p = new Partition('t', 0, await PartitionLog.open(dir, { flush: 'os', segmentBytes: 2000 }));
    await p.whenProducerStateReady();
    expect(await p.appendIdempotent([idem('a', 0)], { producerId: 'p1', epoch: 0, firstSequence: 0, lastSequence: 0 })).toMatchObject({ baseOffset: 0 });
    // B needs a roll that fails (its index file cannot be made, as on a full disk); C would fit the old segment.
    const blocker = path.join(dir, segmentFileName(1, INDEX_SUFFIX));
    await fs.mkdir(blocker);
    const big = rec('B'.repeat(1900), { producerId: 'p1', epoch: 0, sequence: 1 });
    const b = p.appendIdempotent([big], { producerId: 'p1', epoch: 0, firstSequence: 1, lastSequence: 1 });
    const c = p.appendIdempotent([idem('c', 2)], { producerId: 'p1', epoch: 0, firstSequence: 2, lastSequence: 2 });
    await expect(b).rejects.toMatchObject({ code: 'storage_error' });
    await expect(c).rejects.toMatchObject({ code: 'out_of_order_sequence', fields: { expected: 1 } });
    expect(p.logEndOffset).toBe(1);
    // Retried in order once the disk has room: both go in, in their order.
    await fs.rmdir(blocker);
    expect(await p.appendIdempotent([big], { producerId: 'p1', epoch: 0, firstSequence: 1, lastSequence: 1 })).toMatchObject({ baseOffset: 1, duplicate: false });
    expect(await p.appendIdempotent([idem('c', 2)], { producerId: 'p1', epoch: 0, firstSequence: 2, lastSequence: 2 })).toMatchObject({ baseOffset: 2, duplicate: false });
    expect((await p.log.read(0, { maxRecords: 10, maxBytes: 1 << 20 })).map((r) => r.sequence)).toEqual([0, 1, 2]);
    await p.close();
  });

  it('a failed first append of a producer the partition had no state of leaves none: its retry may start at any sequence again (KIP-360)', async () => {
    const dir = await tempDir('tributary-pstate-');
    dirs.push(dir);
    const p = new Partition('t', 0, await PartitionLog.open(dir, { flush: 'os', segmentBytes: 2000 }));
    await p.whenProducerStateReady();
    await p.append([{ key: null, value: Buffer.from('plain') }]);
    // The Kafka port's producer whose state the partition lost (a topic created again) goes on at sequence 7.
    const batch = { producerId: 'p2', epoch: 0, firstSequence: 7, lastSequence: 7, anyFirstSequence: true };
    const blocker = path.join(dir, segmentFileName(1, INDEX_SUFFIX));
    await fs.mkdir(blocker);
    const big = rec('B'.repeat(1900), { producerId: 'p2', epoch: 0, sequence: 7 });
    await expect(p.appendIdempotent([big], batch)).rejects.toMatchObject({ code: 'storage_error' });
    await fs.rmdir(blocker);
    // Kafka keeps no state of an append that failed: the retry is the producer's first batch here again.
    expect(await p.appendIdempotent([big], batch)).toMatchObject({ baseOffset: 1, duplicate: false });
    expect(p.producerState()?.describe('p2')).toEqual({ epoch: 0, lastSeq: 7 });
    await p.close();
  });

  it('a snapshot that cannot be written after the rebuild at open leaves idempotent appends working (the timer writes it later)', async () => {
    const dir = await tempDir('tributary-pstate-');
    dirs.push(dir);
    let p = await openPartition(dir);
    expect(await p.appendIdempotent([idem('a', 0)], { producerId: 'p1', epoch: 0, firstSequence: 0, lastSequence: 0 })).toMatchObject({ baseOffset: 0 });
    await simulateCrash(p.log);
    // The reopen rebuilds from the log and snapshots at once; that write fails (as on a full disk).
    const blocker = path.join(dir, `${PRODUCER_SNAPSHOT_FILE}.tmp`);
    await fs.mkdir(blocker);
    p = await openPartition(dir);
    try {
      expect(await p.appendIdempotent([idem('a', 0)], { producerId: 'p1', epoch: 0, firstSequence: 0, lastSequence: 0 })).toMatchObject({ baseOffset: 0, duplicate: true });
      expect(await p.appendIdempotent([idem('b', 1)], { producerId: 'p1', epoch: 0, firstSequence: 1, lastSequence: 1 })).toMatchObject({ baseOffset: 1, duplicate: false });
    } finally {
      await fs.rmdir(blocker);
      await p.close();
    }
  });
});

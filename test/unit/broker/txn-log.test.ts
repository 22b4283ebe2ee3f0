import fs from 'node:fs/promises';
import path from 'node:path';
import fc from 'fast-check';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { type Isolation, Partition, TXN_SNAPSHOT_FILE } from 'tributary-broker/partition/partition.js';
import { TxnIndex } from 'tributary-broker/partition/txn-index.js';
import { decodeBatch, encodeBatch, logRecordsToBatch } from 'tributary-protocol/batch.js';
import { type LogRecord, RecordAttr, } from 'tributary-protocol/record.js';
import { PartitionLog } from 'tributary-broker/storage/partition-log.js';
import { simulateCrash } from 'tributary-broker/storage/log-test-hooks.js';
import { errorCode, rec, removeDir, sleep, tempDir } from '../../helpers/util.js';

let dir: string;
const open: Partition[] = [];

beforeEach(async () => {
  dir = await tempDir('trib-txn-');
});
afterEach(async () => {
  for (const p of open.splice(0)) await p.close().catch(() => {});
  await removeDir(dir);
});

async function openPartition(d = dir, tailCacheBytes?: number): Promise<Partition> {
  const log = await PartitionLog.open(d, tailCacheBytes === undefined ? { flush: 'os' } : { flush: 'os', tailCacheBytes });
  const p = new Partition('t', 0, log);
  open.push(p);
  await p.whenTxnIndexReady();
  await p.whenProducerStateReady();
  return p;
}

const values = (rs: LogRecord[]) => rs.map((r) => r.value.toString());
const RC = { maxRecords: 1000, maxBytes: 1 << 20, isolation: 'read_committed' as Isolation };
const RU = { maxRecords: 1000, maxBytes: 1 << 20, isolation: 'read_uncommitted' as Isolation };

/** The wire fast path (when it serves) and the object path return the same batch. */
function expectSamePaths(p: Partition, offset: number, opts: typeof RC, res: { records: LogRecord[]; nextOffset: number }): boolean {
  for (const extensions of [false, true]) {
    const wire = p.readWire(offset, opts, { topic: 't', extensions });
    if (!wire) return false;
    const trailer = extensions ? { nextOffset: res.nextOffset, highWatermark: p.highWatermark, logStartOffset: p.earliest } : undefined;
    const expected = encodeBatch(logRecordsToBatch('t', p.id, res.records, trailer), { extensions });
    expect(Buffer.compare(wire.frame, expected)).toBe(0);
    expect(wire.nextOffset).toBe(res.nextOffset);
    expect(wire.count).toBe(res.records.length);
  }
  return true;
}

/** The segment files' wire path returns the same batch as the object path; it declines only when nothing is readable. */
async function expectSameFromDisk(p: Partition, offset: number, opts: typeof RC, res: { records: LogRecord[]; nextOffset: number }): Promise<void> {
  for (const extensions of [false, true]) {
    const wire = await p.readWireFromDisk(offset, opts, { topic: 't', extensions });
    if (!wire) {
      expect(res.nextOffset).toBe(offset);
      continue;
    }
    const trailer = extensions ? { nextOffset: res.nextOffset, highWatermark: p.highWatermark, logStartOffset: p.earliest } : undefined;
    expect(Buffer.compare(wire.frame, encodeBatch(logRecordsToBatch('t', p.id, res.records, trailer), { extensions }))).toBe(0);
    expect(wire.nextOffset).toBe(res.nextOffset);
    expect(wire.count).toBe(res.records.length);
  }
}

describe('Partition transactions (log side)', () => {
  it('a committed transaction becomes visible to read_committed all at once, after its marker', async () => {
    const p = await openPartition();
    await p.append([rec('before')]);
    const a = await p.appendTransactional([rec('t1'), rec('t2')], { producerId: 'A', epoch: 0 });
    expect(a).toMatchObject({ baseOffset: 1, lastOffset: 2, duplicate: false });
    // Non-transactional records of other producers after the open transaction.
    await p.append([rec('plain')]);
    expect(p.highWatermark).toBe(4);
    expect(p.lastStableOffset).toBe(1);
    expect(p.txnIndex()!.openTxn('A')).toMatchObject({ firstOffset: 1, epoch: 0 });

    let res = await p.read(0, RC);
    expect(values(res.records)).toEqual(['before']);
    expect(res.nextOffset).toBe(1);
    expect(await p.read(1, RC)).toEqual({ records: [], nextOffset: 1 });
    // read_uncommitted sees everything up to the HWM.
    expect(values((await p.read(0, RU)).records)).toEqual(['before', 't1', 't2', 'plain']);

    // A long poll under read_committed waits for the LSO, not the HWM.
    let woke = false;
    const waiter = p.waitForData(1, 10_000).then((v) => {
      woke = true;
      return v;
    });
    await sleep(30);
    expect(woke).toBe(false);
    // read_uncommitted waiters are not held by the open transaction.
    expect(await p.waitForData(1, 0, undefined, 'read_uncommitted')).toBe(true);

    const m = await p.writeMarker('A', 0, 'commit');
    expect(m).toMatchObject({ offset: 4, closed: true });
    expect(await waiter).toBe(true);
    expect(p.lastStableOffset).toBe(5);
    expect(p.highWatermark).toBe(5);

    res = await p.read(1, RC);
    expect(values(res.records)).toEqual(['t1', 't2', 'plain']);
    expect(res.nextOffset).toBe(5);
    for (const r of res.records.slice(0, 2)) {
      expect(r.attributes).toBe(RecordAttr.TRANSACTIONAL);
      expect(r.producerId).toBe('A');
    }
    expectSamePaths(p, 1, RC, res);
  });

  it("keeps an open transaction's records in the tail cache while readers read at the end (read_committed readers wait at the LSO)", async () => {
    const p = await openPartition(dir, 8 * 1024 * 1024);
    await p.append([rec('before')]);
    // 40 records of 64 KiB, one append each: 2.6 MB, more than the 1 MiB a cache keeps for readers close behind.
    const big = Buffer.alloc(64 * 1024, 7);
    for (let i = 0; i < 40; i++) await p.appendTransactional([rec(big)], { producerId: 'A', epoch: 0 });
    expect(p.lastStableOffset).toBe(1);
    // A read_uncommitted reader at the end, then more appends: its lag alone would let the transaction go.
    expect(p.readWire(40, RU, { topic: 't', extensions: true })?.count).toBe(1);
    for (let i = 0; i < 4; i++) await p.append([rec(big)]);
    await p.writeMarker('A', 0, 'commit');
    // The reader waiting at the LSO reads the committed transaction (and the appends after) from memory.
    const wire = p.readWire(1, { ...RC, maxBytes: 8 << 20 }, { topic: 't', extensions: true });
    expect(wire?.count).toBe(44);
  });

  it('an aborted transaction is never returned under read_committed; read_uncommitted returns it and the flagged control record', async () => {
    const p = await openPartition();
    await p.appendTransactional([rec('x1'), rec('x2')], { producerId: 'A', epoch: 3 });
    await p.append([rec('plain')]);
    await p.writeMarker('A', 3, 'abort');
    expect(p.lastStableOffset).toBe(4);
    expect(p.txnIndex()!.abortedTxns()).toEqual([{ producerId: 'A', firstOffset: 0, lastOffset: 3 }]);

    const res = await p.read(0, RC);
    expect(values(res.records)).toEqual(['plain']);
    expect(res.nextOffset).toBe(4);
    // A read starting inside the aborted range, or wholly inside it, moves past it.
    expect(await p.read(1, { ...RC, maxRecords: 1 })).toEqual({ records: [], nextOffset: 2 });

    const all = await p.read(0, RU);
    expect(all.records.map((r) => r.attributes)).toEqual([
      RecordAttr.TRANSACTIONAL,
      RecordAttr.TRANSACTIONAL,
      0,
      RecordAttr.CONTROL | RecordAttr.TRANSACTIONAL,
    ]);
    // Flagged in the batch frame (record_extensions_v1), on both paths.
    const frame = encodeBatch(logRecordsToBatch('t', 0, all.records), { extensions: true });
    expect(decodeBatch(frame, { extensions: true }).records.map((r) => r.attributes)).toEqual(all.records.map((r) => r.attributes));
    const wire = p.readWire(0, RU, { topic: 't', extensions: true })!;
    expect(wire).not.toBeNull();
    expect(decodeBatch(wire.frame, { extensions: true }).records.map((r) => r.attributes)).toEqual(all.records.map((r) => r.attributes));
    // The fast path filters the aborted range with the same index lookup: both answers agree.
    expect(expectSamePaths(p, 0, RC, res)).toBe(true);
    expect(expectSamePaths(p, 1, RC, await p.read(1, RC))).toBe(true);
    expect(expectSamePaths(p, 3, RC, await p.read(3, RC))).toBe(true);
  });

  it('interleaved transactions of two producers: one committed, one aborted', async () => {
    const p = await openPartition();
    await p.appendTransactional([rec('a1')], { producerId: 'A', epoch: 0 }); // 0
    await p.appendTransactional([rec('b1')], { producerId: 'B', epoch: 0 }); // 1
    await p.append([rec('p1')]); // 2
    await p.appendTransactional([rec('a2')], { producerId: 'A', epoch: 0 }); // 3
    await p.appendTransactional([rec('b2')], { producerId: 'B', epoch: 0 }); // 4
    expect(p.lastStableOffset).toBe(0);
    await p.writeMarker('B', 0, 'abort'); // 5
    // A is still open at 0.
    expect(p.lastStableOffset).toBe(0);
    expect((await p.read(0, RC)).records).toEqual([]);
    await p.append([rec('p2')]); // 6
    await p.writeMarker('A', 0, 'commit'); // 7
    expect(p.lastStableOffset).toBe(8);
    const res = await p.read(0, RC);
    expect(values(res.records)).toEqual(['a1', 'p1', 'a2', 'p2']);
    expect(res.nextOffset).toBe(8);
    expect(p.txnIndex()!.abortedTxns()).toEqual([{ producerId: 'B', firstOffset: 1, lastOffset: 5 }]);
    // Only ranges overlapping the window are consulted.
    expect(p.txnIndex()!.abortedOverlapping(5, 8)).toEqual([]);
    expect(p.txnIndex()!.abortedOverlapping(0, 2)).toHaveLength(1);
    // Small windows agree between paths.
    for (let o = 0; o < 8; o++) {
      for (const maxRecords of [1, 2, 3, 100]) {
        const opts = { ...RC, maxRecords };
        expectSamePaths(p, o, opts, await p.read(o, opts));
      }
    }
  });

  it('markers: retried without an open transaction, stale epochs, a new transaction after a marker', async () => {
    const p = await openPartition();
    expect(await p.writeMarker('A', 0, 'commit')).toMatchObject({ offset: 0, closed: false });
    expect(p.lastStableOffset).toBe(1);
    await p.appendTransactional([rec('a')], { producerId: 'A', epoch: 2 });
    expect(await errorCode(p.appendTransactional([rec('z')], { producerId: 'A', epoch: 1 }))).toBe('stale_producer_epoch');
    expect(await errorCode(p.writeMarker('A', 1, 'abort'))).toBe('stale_producer_epoch');
    // A bumped epoch (the coordinator aborting a timed-out transaction) may close it.
    expect(await p.writeMarker('A', 3, 'abort')).toMatchObject({ offset: 2, closed: true });
    // A retry of the same marker changes nothing.
    expect(await p.writeMarker('A', 3, 'abort')).toMatchObject({ offset: 3, closed: false });
    expect(p.txnIndex()!.abortedTxns()).toEqual([{ producerId: 'A', firstOffset: 1, lastOffset: 2 }]);
    await p.appendTransactional([rec('b')], { producerId: 'A', epoch: 3 });
    expect(p.lastStableOffset).toBe(4);
    await p.writeMarker('A', 3, 'commit');
    expect(values((await p.read(0, RC)).records)).toEqual(['b']);
    expect(await errorCode(p.appendTransactional([rec('c')], { producerId: '', epoch: 0 }))).toBe('invalid_parameter');
  });

  it('idempotent transactional appends: duplicates answer with the original offsets', async () => {
    const p = await openPartition();
    const first = await p.appendTransactional([rec('a'), rec('b')], { producerId: 'A', epoch: 0, firstSequence: 0, lastSequence: 1 });
    expect(first).toMatchObject({ baseOffset: 0, lastOffset: 1, duplicate: false });
    const dup = await p.appendTransactional([rec('a'), rec('b')], { producerId: 'A', epoch: 0, firstSequence: 0, lastSequence: 1 });
    expect(dup).toMatchObject({ baseOffset: 0, duplicate: true });
    expect(await errorCode(p.appendTransactional([rec('c')], { producerId: 'A', epoch: 0, firstSequence: 5, lastSequence: 5 }))).toBe('out_of_order_sequence');
    expect(p.logEndOffset).toBe(2);
    expect(p.lastStableOffset).toBe(0);
    await p.writeMarker('A', 0, 'commit');
    const rs = (await p.read(0, RC)).records;
    expect(rs.map((r) => [r.value.toString(), r.sequence])).toEqual([
      ['a', 0],
      ['b', 1],
    ]);
  });

  it('a marker at a higher epoch fences the older epoch on the partition, also after a reopen', async () => {
    const p = await openPartition();
    await p.appendTransactional([rec('old')], { producerId: 'A', epoch: 0, firstSequence: 0, lastSequence: 0 });
    // The coordinator fenced epoch 0: its abort marker carries epoch 1.
    await p.writeMarker('A', 1, 'abort');
    expect(await errorCode(p.appendTransactional([rec('zombie')], { producerId: 'A', epoch: 0, firstSequence: 1, lastSequence: 1 }))).toBe('stale_producer_epoch');
    expect(p.lastStableOffset).toBe(p.logEndOffset);
    await p.close();
    open.splice(open.indexOf(p), 1);
    const again = await openPartition();
    await again.whenProducerStateReady();
    expect(again.producerState()!.describe('A')).toEqual({ epoch: 1, lastSeq: -1 });
    expect(await errorCode(again.appendTransactional([rec('zombie')], { producerId: 'A', epoch: 0, firstSequence: 1, lastSequence: 1 }))).toBe('stale_producer_epoch');
    // the new epoch starts at sequence 0
    await again.appendTransactional([rec('new')], { producerId: 'A', epoch: 1, firstSequence: 0, lastSequence: 0 });
    await again.writeMarker('A', 1, 'commit');
    expect(values((await again.read(0, RC)).records)).toEqual(['new']);
  });

  it('a waiter wakes when a commit marker moves the LSO; an abort marker wakes it too', async () => {
    const p = await openPartition();
    await p.appendTransactional([rec('a')], { producerId: 'A', epoch: 0 });
    const w = p.waitForData(0, 10_000);
    await p.writeMarker('A', 0, 'commit');
    expect(await w).toBe(true);
    await p.appendTransactional([rec('b')], { producerId: 'A', epoch: 0 });
    const w2 = p.waitForData(2, 10_000);
    await p.writeMarker('A', 0, 'abort');
    // The LSO moved past 2 (the read then filters the aborted record and the markers).
    expect(await w2).toBe(true);
    expect(await p.read(2, RC)).toEqual({ records: [], nextOffset: 4 });
  });

  for (const how of ['close', 'crash', 'crash-no-snapshot-after'] as const) {
    it(`keeps the same visibility across a restart (${how})`, async () => {
      let p = await openPartition();
      await p.appendTransactional([rec('c1')], { producerId: 'C', epoch: 0 }); // 0
      await p.appendTransactional([rec('x1')], { producerId: 'X', epoch: 0 }); // 1
      await p.append([rec('p1')]); // 2
      await p.writeMarker('X', 0, 'abort'); // 3
      await p.writeMarker('C', 0, 'commit'); // 4
      await p.appendTransactional([rec('o1')], { producerId: 'O', epoch: 5 }); // 5 (left open)
      await p.append([rec('p2')]); // 6
      const before = {
        lso: p.lastStableOffset,
        rc: await p.read(0, RC),
        open: p.txnIndex()!.openTxns().map((t) => ({ producerId: t.producerId, epoch: t.epoch, firstOffset: t.firstOffset })),
        aborted: [...p.txnIndex()!.abortedTxns()],
      };
      expect(before.lso).toBe(5);
      expect(values(before.rc.records)).toEqual(['c1', 'p1']);
      if (how === 'close') await p.close();
      else {
        if (how === 'crash-no-snapshot-after') {
          // The snapshot is from before any transaction (as after a crash right after the open).
          const s = JSON.parse(await fs.readFile(path.join(dir, TXN_SNAPSHOT_FILE), 'utf8'));
          expect(s.offset).toBeLessThanOrEqual(7);
          await fs.writeFile(path.join(dir, TXN_SNAPSHOT_FILE), JSON.stringify(new TxnIndex().snapshot(0)));
        }
        await simulateCrash(p.log);
        open.splice(open.indexOf(p), 1);
      }
      p = await openPartition();
      expect(p.lastStableOffset).toBe(before.lso);
      expect(await p.read(0, RC)).toEqual(before.rc);
      expect(p.txnIndex()!.openTxns().map((t) => ({ producerId: t.producerId, epoch: t.epoch, firstOffset: t.firstOffset }))).toEqual(before.open);
      expect([...p.txnIndex()!.abortedTxns()]).toEqual(before.aborted);
      // The open transaction continues and commits after the restart.
      await p.appendTransactional([rec('o2')], { producerId: 'O', epoch: 5 }); // 7
      await p.writeMarker('O', 5, 'commit'); // 8
      expect(values((await p.read(0, RC)).records)).toEqual(['c1', 'p1', 'o1', 'p2', 'o2']);
      await simulateCrash(p.log);
      open.splice(open.indexOf(p), 1);
      p = await openPartition();
      expect(values((await p.read(0, RC)).records)).toEqual(['c1', 'p1', 'o1', 'p2', 'o2']);
      expect(p.lastStableOffset).toBe(9);
    });
  }

  it('LSO before the index is rebuilt is conservative (from the snapshot)', async () => {
    let p = await openPartition();
    await p.append([rec('p')]);
    await p.appendTransactional([rec('a')], { producerId: 'A', epoch: 0 });
    await p.close();
    open.splice(open.indexOf(p), 1);
    p = new Partition('t', 0, await PartitionLog.open(dir, { flush: 'os' }));
    open.push(p);
    // Synchronously after construction: the snapshot says A is open at 1.
    expect(p.lastStableOffset).toBe(1);
    expect(p.readWire(0, RC, { topic: 't', extensions: false })).toBeNull();
    expect(values((await p.read(0, RC)).records)).toEqual(['p']);
  });

  it('property: read_committed returns exactly the committed and non-transactional records below the LSO, on both paths', async () => {
    type Op = { kind: 'txn'; producer: number; n: number } | { kind: 'plain'; n: number } | { kind: 'marker'; producer: number; abort: boolean };
    const opArb: fc.Arbitrary<Op> = fc.oneof(
      fc.record({ kind: fc.constant('txn' as const), producer: fc.nat({ max: 2 }), n: fc.integer({ min: 1, max: 3 }) }),
      fc.record({ kind: fc.constant('plain' as const), n: fc.integer({ min: 1, max: 3 }) }),
      fc.record({ kind: fc.constant('marker' as const), producer: fc.nat({ max: 2 }), abort: fc.boolean() }),
    );
    let served = 0;
    let n = 0;
    await fc.assert(
      fc.asyncProperty(fc.array(opArb, { minLength: 1, maxLength: 25 }), fc.constantFrom(400, 1 << 20), fc.boolean(), async (ops, cache, restart) => {
        const d = await tempDir(`p${n++}-`, dir);
        let p = await openPartition(d, cache);
        // Model: per offset, its value and fate.
        const fate: Array<'visible' | 'control' | { producer: number; txn: number }> = [];
        const openTxn = new Map<number, number>();
        const committed = new Set<number>();
        let txnIds = 0;
        for (const op of ops) {
          if (op.kind === 'plain') {
            const r = await p.append(Array.from({ length: op.n }, (_, i) => rec(`p${fate.length + i}`)));
            for (let o = r.baseOffset; o <= r.lastOffset; o++) fate[o] = 'visible';
          } else if (op.kind === 'txn') {
            if (!openTxn.has(op.producer)) openTxn.set(op.producer, txnIds++);
            const r = await p.appendTransactional(
              Array.from({ length: op.n }, (_, i) => rec(`t${fate.length + i}`)),
              { producerId: `P${op.producer}`, epoch: 0 },
            );
            for (let o = r.baseOffset; o <= r.lastOffset; o++) fate[o] = { producer: op.producer, txn: openTxn.get(op.producer)! };
          } else {
            const m = await p.writeMarker(`P${op.producer}`, 0, op.abort ? 'abort' : 'commit');
            fate[m.offset] = 'control';
            const t = openTxn.get(op.producer);
            if (t !== undefined && !op.abort) committed.add(t);
            openTxn.delete(op.producer);
          }
        }
        if (restart) {
          await simulateCrash(p.log);
          open.splice(open.indexOf(p), 1);
          p = await openPartition(d, cache);
        }
        let lso = fate.length;
        for (let o = 0; o < fate.length; o++) {
          const f = fate[o]!;
          if (typeof f === 'object' && [...openTxn.values()].includes(f.txn)) {
            lso = o;
            break;
          }
        }
        expect(p.lastStableOffset).toBe(lso);
        const expected: string[] = [];
        for (let o = 0; o < lso; o++) {
          const f = fate[o]!;
          if (f === 'visible' || (typeof f === 'object' && committed.has(f.txn))) expected.push(o < 0 ? '' : `${f === 'visible' ? 'p' : 't'}${o}`);
        }
        // Read everything in small steps on both paths.
        for (const maxRecords of [1, 2, 5, 1000]) {
          const got: string[] = [];
          let o = 0;
          while (o < lso) {
            const opts = { ...RC, maxRecords };
            const res = await p.read(o, opts);
            if (expectSamePaths(p, o, opts, res)) served++;
            await expectSameFromDisk(p, o, opts, res);
            expect(res.nextOffset).toBeGreaterThan(o);
            got.push(...values(res.records));
            o = res.nextOffset;
          }
          expect(o).toBe(lso);
          expect(got).toEqual(expected);
        }
        await p.close();
        open.splice(open.indexOf(p), 1);
      }),
      { numRuns: 40 },
    );
    expect(served).toBeGreaterThan(20);
  }, 60_000);
});

describe('TxnIndex', () => {
  it('abortedOverlapping finds exactly the ranges overlapping a window', () => {
    fc.assert(
      fc.property(
        fc.array(fc.record({ producer: fc.nat({ max: 3 }), len: fc.integer({ min: 1, max: 50 }), gap: fc.nat({ max: 20 }) }), { maxLength: 30 }),
        fc.nat({ max: 800 }),
        fc.nat({ max: 100 }),
        (specs, from, span) => {
          const t = new TxnIndex();
          let at = 0;
          const all: Array<{ producerId: string; firstOffset: number; lastOffset: number }> = [];
          for (const s of specs) {
            at += s.gap;
            const txn = t.begin(`P${s.producer}`, 0, at);
            t.appended(txn, at);
            const m = t.beginMarker(`P${s.producer}`, 0);
            const a = t.markerWritten(m, 'abort', at + s.len);
            all.push(a!);
            at += s.len + 1;
          }
          const to = from + span;
          const expected = all.filter((a) => a.firstOffset < to && a.lastOffset > from);
          expect(t.abortedOverlapping(from, to)).toEqual(span === 0 ? [] : expected);
          expect(t.firstUnstableOffset()).toBe(Infinity);
        },
      ),
    );
  });

  it('a snapshot never claims offsets of an append that has not landed', () => {
    const t = new TxnIndex();
    const a = t.begin('A', 0, 10);
    t.appended(a, 10);
    t.begin('B', 0, 12); // pending
    const s = t.snapshot(20);
    expect(s.offset).toBe(12);
    expect(s.open).toEqual([{ producerId: 'A', epoch: 0, firstOffset: 10 }]);
    expect(TxnIndex.fromSnapshot(s).firstUnstableOffset()).toBe(10);
  });
});

/**
 * The transaction index of a partition is derived state of its log: whatever mix of leader appends,
 * markers, replica appends, truncations and snapshots runs concurrently, once they settle the index in
 * memory must be exactly what a replay of the log gives (otherwise a read_committed reader sees an aborted
 * record, or never sees a committed one), and so must the index rebuilt from the snapshot after a reopen.
 */
import fc from 'fast-check';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { Partition } from 'tributary-broker/partition/partition.js';
import { TxnIndex } from 'tributary-broker/partition/txn-index.js';
import { type LogRecord, RecordAttr } from 'tributary-protocol/record.js';
import { PartitionLog } from 'tributary-broker/storage/partition-log.js';
import { removeDir, tempDir } from '../../helpers/util.js';

let dir: string;

beforeEach(async () => {
  dir = await tempDir('trib-txn-conc-');
});
afterEach(async () => {
  await removeDir(dir);
});

type Op =
  | { kind: 'txn'; producer: number; wait: boolean }
  | { kind: 'marker'; producer: number; abort: boolean; wait: boolean }
  | { kind: 'plain'; wait: boolean }
  | { kind: 'idem'; wait: boolean }
  | { kind: 'replica'; producer: number; control: boolean; abort: boolean; wait: boolean }
  | { kind: 'truncate'; back: number; wait: boolean }
  | { kind: 'snapshot' }
  | { kind: 'hwm'; back: number };

const op: fc.Arbitrary<Op> = fc.oneof(
  fc.record({ kind: fc.constant('txn' as const), producer: fc.integer({ min: 0, max: 2 }), wait: fc.boolean() }),
  fc.record({ kind: fc.constant('marker' as const), producer: fc.integer({ min: 0, max: 2 }), abort: fc.boolean(), wait: fc.boolean() }),
  fc.record({ kind: fc.constant('plain' as const), wait: fc.boolean() }),
  fc.record({ kind: fc.constant('idem' as const), wait: fc.boolean() }),
  fc.record({ kind: fc.constant('replica' as const), producer: fc.integer({ min: 0, max: 2 }), control: fc.boolean(), abort: fc.boolean(), wait: fc.boolean() }),
  fc.record({ kind: fc.constant('truncate' as const), back: fc.integer({ min: 1, max: 4 }), wait: fc.boolean() }),
  fc.record({ kind: fc.constant('snapshot' as const) }),
  fc.record({ kind: fc.constant('hwm' as const), back: fc.integer({ min: 0, max: 3 }) }),
);

const producerId = (k: number) => `P${k}`;

/** What a replay of the whole log gives: the reference the index must match. */
async function replayed(p: Partition): Promise<{ aborted: string[]; open: string[] }> {
  const t = new TxnIndex();
  const recs = await p.log.read(p.log.logStartOffset, { maxRecords: 100_000, maxBytes: 1 << 26, maxOffset: p.log.logEndOffset });
  for (const r of recs) t.replay(r);
  return describeIndex(t);
}

function describeIndex(t: TxnIndex): { aborted: string[]; open: string[] } {
  return {
    aborted: t.abortedTxns().map((a) => `${a.producerId}[${a.firstOffset},${a.lastOffset})`),
    open: t
      .openTxns()
      .map((o) => `${o.producerId}@${o.firstOffset}`)
      .sort(),
  };
}

describe('the transaction index under concurrent appends, markers, replica appends and truncations', () => {
  it('property: once settled it equals a replay of the log, in memory and after a reopen', async () => {
    await fc.assert(
      fc.asyncProperty(fc.array(op, { minLength: 5, maxLength: 40 }), async (ops) => {
        await removeDir(dir);
        const log = await PartitionLog.open(dir, { flush: 'os' });
        const p = new Partition('t', 0, log, { replicated: true });
        p.enableReplication(() => {});
        await p.whenTxnIndexReady();
        await p.whenProducerStateReady();
        const pending: Array<Promise<unknown>> = [];
        let n = 0;
        try {
          for (const o of ops) {
            let run: Promise<unknown>;
            const value = Buffer.from(`v${n++}`);
            switch (o.kind) {
              case 'txn':
                run = p.appendTransactional([{ key: null, value }], { producerId: producerId(o.producer), epoch: 0 });
                break;
              case 'marker':
                run = p.writeMarker(producerId(o.producer), 0, o.abort ? 'abort' : 'commit');
                break;
              case 'plain':
                run = p.append([{ key: null, value }]);
                break;
              case 'idem': {
                // One idempotent producer numbering from what the partition says it has (as after a retry).
                const d = p.producerState()?.describe('I');
                const seq = d ? d.lastSeq + 1 : 0;
                run = p.appendIdempotent([{ key: null, value, producerId: 'I', epoch: 0, sequence: seq }], { producerId: 'I', epoch: 0, firstSequence: seq, lastSequence: seq });
                break;
              }
              case 'replica': {
                const r: LogRecord = {
                  offset: p.logEndOffset,
                  timestamp: Date.now(),
                  key: null,
                  value: o.control ? Buffer.from([0, o.abort ? 0 : 1]) : value,
                  headers: [],
                  producerId: producerId(o.producer),
                  epoch: 0,
                  sequence: -1,
                  attributes: RecordAttr.TRANSACTIONAL | (o.control ? RecordAttr.CONTROL : 0),
                };
                run = p.appendReplica([r]);
                break;
              }
              case 'truncate':
                run = p.truncateTo(Math.max(p.highWatermark, p.logEndOffset - o.back));
                break;
              case 'snapshot':
                // As the periodic snapshot does: the state as of the high-water mark.
                {
                  const inner = (p as unknown as { snapshots: { writeTxns(t: TxnIndex, o: number): Promise<void>; writeProducers(t: unknown, o: number): Promise<void> } }).snapshots;
                  run = Promise.all([inner.writeTxns(p.txnIndex()!, p.highWatermark), inner.writeProducers(p.producerState()!, p.highWatermark)]);
                }
                break;
              case 'hwm':
                // Truncations in a cluster never go below the HWM: keep it at or below the log end of now.
                p.setReplicatedHighWatermark(Math.max(p.highWatermark, p.logEndOffset - o.back));
                run = Promise.resolve();
                break;
            }
            // Refusals (a replica append below the log end, a stale epoch) are part of the game.
            const settled = run.catch(() => {});
            if ('wait' in o && o.wait) await settled;
            else pending.push(settled);
          }
          await Promise.all(pending);
          // Whatever else is still queued inside the partition settles with one more (awaited) append.
          await p.append([{ key: null, value: Buffer.from('end') }]);
          p.setReplicatedHighWatermark(p.logEndOffset);
          const expected = await replayed(p);
          expect(describeIndex(p.txnIndex()!)).toEqual(expected);
        } finally {
          await p.close();
        }
        const again = new Partition('t', 0, await PartitionLog.open(dir, { flush: 'os' }), { replicated: true });
        try {
          await again.whenTxnIndexReady();
          await again.whenProducerStateReady();
          expect(describeIndex(again.txnIndex()!)).toEqual(await replayed(again));
          // Every batch the producer state remembers is in the log, at the offsets it answers a retry with.
          const recs = await again.log.read(0, { maxRecords: 100_000, maxBytes: 1 << 26, maxOffset: again.log.logEndOffset });
          const at = new Map(recs.map((r) => [r.offset, r]));
          for (const pr of again.producerState()!.snapshot(again.logEndOffset).producers) {
            for (const [firstSeq, , baseOffset] of pr.batches) {
              const r = at.get(baseOffset);
              expect({ producer: r?.producerId, sequence: r?.sequence }, `batch ${pr.id}#${firstSeq} at ${baseOffset}`).toEqual({ producer: pr.id, sequence: firstSeq });
            }
          }
        } finally {
          await again.close();
        }
      }),
      {
        numRuns: 400,
        // A commit marker above the HWM cut by a truncation after a rebuild had snapshotted (and pruned) as of
        // the log end: its transaction must be open again (it was lost, seed 236515144).
        examples: [
          [
            [
              { kind: 'txn', producer: 2, wait: false },
              { kind: 'marker', producer: 2, abort: false, wait: false },
              { kind: 'txn', producer: 0, wait: false },
              { kind: 'marker', producer: 0, abort: false, wait: true },
              { kind: 'hwm', back: 3 },
              { kind: 'truncate', back: 1, wait: false },
              { kind: 'txn', producer: 0, wait: false },
              { kind: 'idem', wait: true },
              { kind: 'snapshot' },
              { kind: 'truncate', back: 4, wait: false },
              { kind: 'idem', wait: false },
            ],
          ],
        ],
      },
    );
  }, 120_000);
});

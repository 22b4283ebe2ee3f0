/**
 * A transactional batch frame's records are published as one run (txn-publish.ts): one append per
 * partition they go to, not one per record (in a cluster each was a TXN_APPEND of its own), with the same
 * partitions, seqNums and retry answers as one publish per record. Real partitions, a fake clock.
 */
import fc from 'fast-check';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { TransactionCoordinator } from 'tributary-broker/txn/txn-coordinator.js';
import type { TxnTargets } from 'tributary-broker/txn/txn-targets.js';
import type { RecordInput } from 'tributary-protocol/record.js';
import { type Coordinators, openCoordinators, topicSpec } from '../../helpers/coordinators.js';
import { FakeClock } from '../../helpers/fake-clock.js';
import { rec, removeDir, tempDir } from '../../helpers/util.js';

const TOPIC = 'data';

let dir: string;
let c: Coordinators;
let txns: TransactionCoordinator;
/** Every append the coordinator made: partition and record count. */
let appends: Array<{ partition: number; count: number }>;

function countingAppends(local: TxnTargets): TxnTargets {
  return Object.assign(Object.create(local) as TxnTargets, {
    append(...args: Parameters<TxnTargets['append']>): Promise<{ offset: number }> {
      appends.push({ partition: args[1], count: args[2].length });
      return local.append(...args);
    },
  });
}

beforeEach(async () => {
  dir = await tempDir('trib-txn-runs-');
  appends = [];
  c = await openCoordinators(dir, new FakeClock(), { topics: { [TOPIC]: 3 }, targets: countingAppends });
  txns = c.txns;
});

afterEach(async () => {
  await c.close();
  await removeDir(dir);
});

const keyed = (k: string, v: string): RecordInput => ({ key: Buffer.from(k), value: Buffer.from(v) });

describe('TransactionCoordinator.publishRun', () => {
  it('appends once per partition, answers per record in seqNum order, and answers retries (whole, or one seqNum) with the original offsets', async () => {
    const id = 'tx-run';
    const { producerId } = await txns.initProducerId(id, 60_000);
    await txns.begin(id, producerId, 0);
    // Keyed records spread over the partitions by their hash, as single publishes would place them.
    const records = Array.from({ length: 12 }, (_, i) => keyed(`k${i}`, `v${i}`));
    const rs = await txns.publishRun(id, producerId, 0, TOPIC, undefined, records, 1);
    expect(rs).toHaveLength(12);
    const used = new Set(rs.map((r) => r.partition));
    expect(appends.length).toBe(used.size);
    expect(appends.reduce((n, a) => n + a.count, 0)).toBe(12);
    // Per partition: consecutive offsets from 0 in seqNum order.
    for (const p of used) expect(rs.filter((r) => r.partition === p).map((r) => r.offset)).toEqual(rs.filter((r) => r.partition === p).map((_, i) => i));
    expect(rs.every((r) => !r.duplicate)).toBe(true);

    const again = await txns.publishRun(id, producerId, 0, TOPIC, undefined, records, 1);
    expect(again).toEqual(rs.map((r) => ({ ...r, duplicate: true })));
    expect(await txns.publish(id, producerId, 0, TOPIC, undefined, records[4]!, 5)).toEqual({ ...rs[4]!, duplicate: true });
    // A run of single publishes after it, and a retry spanning both runs.
    const next = await txns.publish(id, producerId, 0, TOPIC, 0, rec('single'), 13);
    const spanning = await txns.publishRun(id, producerId, 0, TOPIC, undefined, [records[10]!, records[11]!, rec('single')], 11);
    expect(spanning).toEqual([rs[10], rs[11], next].map((r) => ({ ...r!, duplicate: true })));
    expect(appends.length).toBe(used.size + 1);

    // Part old, part new: as one publish per record, the old seqNum is answered and the new ones are taken
    // as a run of their own (docs/protocol.md, 5.3); a gap is refused and appends nothing. The old part is a
    // retry only where its seqNum went (partition 0 here); named elsewhere it is refused (seqnum-reuse.test.ts).
    const on0 = rs.filter((r) => r.partition === 0).length + 1;
    const mixed = await txns.publishRun(id, producerId, 0, TOPIC, 0, [rec('single'), rec('b'), rec('c')], 13);
    expect(mixed).toEqual([
      { ...next, duplicate: true },
      { partition: 0, offset: on0, duplicate: false },
      { partition: 0, offset: on0 + 1, duplicate: false },
    ]);
    expect(appends.length).toBe(used.size + 2);
    expect(appends.at(-1)).toEqual({ partition: 0, count: 2 });
    await expect((async () => txns.publishRun(id, producerId, 0, TOPIC, 0, [rec('d')], 17))()).rejects.toMatchObject({ code: 'out_of_order_sequence' });
    // Its new part refused: the whole frame is, and nothing changes.
    await expect((async () => txns.publishRun(id, producerId, 0, TOPIC, 7, [rec('d')], 16))()).rejects.toMatchObject({ code: 'partition_not_found' });
    expect(appends.length).toBe(used.size + 2);
    expect((await txns.publishRun(id, producerId, 0, TOPIC, 0, [rec('c'), rec('d')], 15)).map((r) => [r.partition, r.duplicate])).toEqual([
      [0, true],
      [0, false],
    ]);
    expect(await txns.endTxn(id, producerId, 0, 'commit')).toBe('committed');
    const committed = await Promise.all(
      [0, 1, 2].map((p) =>
        c.topics
          .get(TOPIC)
          .partition(p)
          .read(0, { maxRecords: 100, maxBytes: 1 << 20, isolation: 'read_committed' }),
      ),
    );
    expect(committed.reduce((n, r) => n + r.records.length, 0)).toBe(16);
  });

  it('answers frames as one publish per record would: runs, retries of any seqNums, partly retried frames, gaps and bad partitions', async () => {
    // The same frames to a second coordinator, one publish per record (as the frames were taken before runs).
    const single = await openCoordinators(`${dir}/single`, new FakeClock(), { topics: {} });
    const frameArb = fc.record({
      // Where the frame starts: the next seqNum, `back` seqNums before it, or past it.
      back: fc.oneof(
        { weight: 3, arbitrary: fc.constant(0) },
        { weight: 3, arbitrary: fc.integer({ min: 1, max: 6 }) },
        { weight: 1, arbitrary: fc.constant(-1) },
      ),
      keys: fc.array(fc.option(fc.constantFrom('a', 'b', 'c', 'd'), { nil: null }), { minLength: 1, maxLength: 5 }),
      explicit: fc.oneof(
        { weight: 6, arbitrary: fc.constant(undefined) },
        { weight: 3, arbitrary: fc.constantFrom(0, 1, 2) },
        { weight: 1, arbitrary: fc.constant(9) },
      ),
    });
    let run = 0;
    const answer = (p: Promise<unknown>) =>
      p.then(
        (ok) => ({ ok }),
        (err: { code?: string }) => ({ err: err.code }),
      );
    try {
      await fc.assert(
        fc.asyncProperty(fc.array(frameArb, { minLength: 1, maxLength: 8 }), async (frames) => {
          const topic = `t${run}`;
          const id = `tx-${run++}`;
          const both = [c, single];
          const pids: string[] = [];
          for (const x of both) {
            await x.topics.create(topicSpec(topic, 3, false));
            pids.push((await x.txns.initProducerId(id, 60_000)).producerId);
            await x.txns.begin(id, pids.at(-1)!, 0);
          }
          let last = 0;
          for (const f of frames) {
            const first = Math.max(1, last + 1 - f.back);
            const records = f.keys.map((k, i) => ({ key: k === null ? null : Buffer.from(k), value: Buffer.from(`v${first + i}`) }));
            const asRun = await answer((async () => c.txns.publishRun(id, pids[0]!, 0, topic, f.explicit, records, first))());
            const asSingles = await answer(
              (async () => {
                const results: Array<Promise<unknown>> = [];
                try {
                  for (let i = 0; i < records.length; i++) results.push(single.txns.publish(id, pids[1]!, 0, topic, f.explicit, records[i]!, first + i));
                } catch (err) {
                  for (const r of results) r.catch(() => {});
                  throw err;
                }
                return Promise.all(results);
              })(),
            );
            expect(asRun).toEqual(asSingles);
            if ('ok' in asRun) last = Math.max(last, first + records.length - 1);
          }
        }),
        { numRuns: 40 },
      );
    } finally {
      await single.close();
    }
  });

  it("splits a partition's records into appends of at most 4 MiB (a TXN_APPEND frame each in a cluster), each answered at its own offsets", async () => {
    const id = 'tx-big';
    const { producerId } = await txns.initProducerId(id, 60_000);
    await txns.begin(id, producerId, 0);
    const big = Array.from({ length: 5 }, (_, i) => ({ key: null, value: Buffer.alloc(1_500_000, 97 + i) }));
    const rs = await txns.publishRun(id, producerId, 0, TOPIC, 1, big, 1);
    expect(appends).toEqual([
      { partition: 1, count: 2 },
      { partition: 1, count: 2 },
      { partition: 1, count: 1 },
    ]);
    expect(rs.map((r) => [r.partition, r.offset])).toEqual([0, 1, 2, 3, 4].map((o) => [1, o]));
    expect(await txns.endTxn(id, producerId, 0, 'commit')).toBe('committed');
    const read = await c.topics
      .get(TOPIC)
      .partition(1)
      .read(0, { maxRecords: 10, maxBytes: 64 << 20, isolation: 'read_committed' });
    expect(read.records.map((r) => [r.offset, r.value[0]])).toEqual([0, 1, 2, 3, 4].map((o) => [o, 97 + o]));
  });
});

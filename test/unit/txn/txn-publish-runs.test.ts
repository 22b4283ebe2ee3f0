/**
 * A transactional batch frame's records are published as one run (txn-publish.ts): one append per
 * partition they go to, not one per record (in a cluster each was a TXN_APPEND of its own), with the same
 * partitions, seqNums and retry answers as one publish per record. Real partitions, a fake clock.
 */
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { TransactionCoordinator } from 'tributary-broker/txn/txn-coordinator.js';
import type { TxnTargets } from 'tributary-broker/txn/txn-targets.js';
import type { RecordInput } from 'tributary-protocol/record.js';
import { type Coordinators, openCoordinators } from '../../helpers/coordinators.js';
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

    // Part old, part new: refused whole, nothing appended.
    await expect((async () => txns.publishRun(id, producerId, 0, TOPIC, 0, [rec('a'), rec('b')], 13))()).rejects.toMatchObject({
      code: 'out_of_order_sequence',
    });
    await expect((async () => txns.publishRun(id, producerId, 0, TOPIC, 0, [rec('a')], 15))()).rejects.toMatchObject({ code: 'out_of_order_sequence' });
    expect(appends.length).toBe(used.size + 1);
    expect((await txns.publishRun(id, producerId, 0, TOPIC, 2, [rec('x'), rec('y')], 14)).map((r) => r.partition)).toEqual([2, 2]);
    expect(await txns.endTxn(id, producerId, 0, 'commit')).toBe('committed');
    const committed = await Promise.all(
      [0, 1, 2].map((p) =>
        c.topics
          .get(TOPIC)
          .partition(p)
          .read(0, { maxRecords: 100, maxBytes: 1 << 20, isolation: 'read_committed' }),
      ),
    );
    expect(committed.reduce((n, r) => n + r.records.length, 0)).toBe(15);
  });
});

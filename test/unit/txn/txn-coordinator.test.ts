/**
 * The transaction coordinator's timeout on a fake clock: an open transaction that outlives its timeout is
 * aborted with the epoch bumped, and its producer (now a zombie) is fenced by the coordinator and by the
 * data partitions. Real partitions in a temporary directory; no server, no coordinator timer on real time.
 */
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { Isolation } from 'tributary-broker/partition/partition.js';
import { RecordAttr } from 'tributary-protocol/record.js';
import type { TransactionCoordinator } from 'tributary-broker/txn/txn-coordinator.js';
import { type Coordinators, openCoordinators } from '../../helpers/coordinators.js';
import { FakeClock } from '../../helpers/fake-clock.js';
import { errorCode, expectError, rec, removeDir, tempDir, until } from '../../helpers/util.js';

const TOPIC = 'data';
const RC = { maxRecords: 100, maxBytes: 1 << 20, isolation: 'read_committed' as Isolation };
const RU = { maxRecords: 100, maxBytes: 1 << 20, isolation: 'read_uncommitted' as Isolation };

let dir: string;
let clock: FakeClock;
let c: Coordinators;
let txns: TransactionCoordinator;

beforeEach(async () => {
  dir = await tempDir('trib-txn-coord-');
  clock = new FakeClock();
  c = await openCoordinators(dir, clock, { topics: { [TOPIC]: 2 } });
  txns = c.txns;
});

afterEach(async () => {
  await c.close();
  await removeDir(dir);
});

const values = (rs: Array<{ value: Buffer }>) => rs.map((r) => r.value.toString());

describe('TransactionCoordinator on a fake clock', () => {
  it('a transaction that outlives its timeout is aborted with the epoch bumped, exactly at the timeout', async () => {
    const { producerId, epoch } = await txns.initProducerId('tx-1', 5000);
    expect(epoch).toBe(0);
    await txns.begin('tx-1', producerId, 0);
    const startedAt = clock.now();
    const a = await txns.publish('tx-1', producerId, 0, TOPIC, 0, rec('a'), 1);
    const b = await txns.publish('tx-1', producerId, 0, TOPIC, 1, rec('b'), 2);
    expect([a.partition, b.partition]).toEqual([0, 1]);
    const part0 = c.topics.get(TOPIC).partition(0);
    expect(part0.lastStableOffset).toBe(a.offset); // held back by the open transaction

    // One millisecond short of the timeout: still open, same epoch.
    await clock.advanceTo(startedAt + 4999);
    expect(txns.status('tx-1')).toMatchObject({ state: 'open', epoch: 0, partitions: 2 });

    await clock.advance(1);
    await until(() => txns.status('tx-1').state === 'aborted', 5000, 'the timed-out transaction to be aborted');
    expect(txns.status('tx-1')).toMatchObject({ state: 'aborted', producerId, epoch: 1, partitions: 0, abortReason: 'timed out after 5000 ms' });

    // The markers are written: nothing of the transaction is visible to read_committed, and the stable
    // offset moved past it.
    for (const [p, r] of [
      [0, a],
      [1, b],
    ] as const) {
      const part = c.topics.get(TOPIC).partition(p);
      expect(part.lastStableOffset).toBe(part.highWatermark);
      expect(values((await part.read(r.offset, RC)).records)).toEqual([]);
      // read_uncommitted sees the record, then the abort marker.
      const all = (await part.read(r.offset, RU)).records;
      expect(all.map((x) => [x.value.toString(), x.attributes & RecordAttr.CONTROL])).toEqual([
        [p === 0 ? 'a' : 'b', 0],
        [expect.any(String), RecordAttr.CONTROL],
      ]);
    }
  });

  it('a transaction open across a restart is aborted by the coordinator once loaded, its epoch kept', async () => {
    const { producerId } = await txns.initProducerId('tx-r', 60_000);
    await txns.begin('tx-r', producerId, 0);
    const a = await txns.publish('tx-r', producerId, 0, TOPIC, 0, rec('open-across'), 1);
    const part = () => c.topics.get(TOPIC).partition(0);
    expect(part().lastStableOffset).toBe(a.offset);
    await c.close();
    c = await openCoordinators(dir, clock, { topics: { [TOPIC]: 2 } });
    txns = c.txns;
    // No timer runs on the fake clock: the abort comes from the load itself.
    await until(() => txns.status('tx-r').state === 'aborted', 5000, 'the recovered transaction to be aborted');
    expect(txns.status('tx-r')).toMatchObject({ state: 'aborted', producerId, epoch: 0 });
    expect(part().lastStableOffset).toBe(part().logEndOffset);
    expect(values((await part().read(0, RC)).records)).not.toContain('open-across');
    // The producer that comes back: its abort is answered, a commit or a send is refused.
    expect(await txns.endTxn('tx-r', producerId, 0, 'abort')).toBe('aborted');
    expect(await errorCode(txns.endTxn('tx-r', producerId, 0, 'commit'))).toBe('invalid_txn_state');
    expect(await errorCode((async () => txns.publish('tx-r', producerId, 0, TOPIC, 0, rec('late'), 2))())).toBe('invalid_txn_state');
    // Its next transaction commits as usual.
    await txns.begin('tx-r', producerId, 0);
    await txns.publish('tx-r', producerId, 0, TOPIC, 0, rec('next'), 1);
    expect(await txns.endTxn('tx-r', producerId, 0, 'commit')).toBe('committed');
    expect(values((await part().read(0, RC)).records)).toContain('next');
  });

  it('the zombie of a timed-out transaction is fenced, by the coordinator and by the partitions', async () => {
    const { producerId } = await txns.initProducerId('tx-z', 1000);
    await txns.begin('tx-z', producerId, 0);
    await txns.publish('tx-z', producerId, 0, TOPIC, 0, rec('before'), 1);
    await clock.advance(1000);
    await until(() => txns.status('tx-z').state === 'aborted', 5000, 'the timeout abort');
    expect(txns.status('tx-z').epoch).toBe(1);

    // The producer of epoch 0 does not know it timed out: every request of its epoch is refused.
    const fenced = { epoch: '0', current_epoch: '1', reason: 'timed out after 1000 ms' };
    // (publish checks before it returns a promise: the async wrapper turns its throw into a rejection)
    await expectError((async () => txns.publish('tx-z', producerId, 0, TOPIC, 0, rec('late'), 2))(), 'producer_fenced', fenced);
    await expectError(txns.endTxn('tx-z', producerId, 0, 'commit'), 'producer_fenced', fenced);
    await expectError(txns.begin('tx-z', producerId, 0), 'producer_fenced', fenced);
    await expectError(
      txns.sendOffsets('tx-z', producerId, 0, { group: 'g', topic: TOPIC, member: 'm', generation: 1, entries: [{ partition: 0, offset: 0 }] }),
      'producer_fenced',
      fenced,
    );
    // The abort marker carried the new epoch: the partition refuses the old one too.
    const part = c.topics.get(TOPIC).partition(0);
    expect(await errorCode(part.appendTransactional([rec('direct')], { producerId, epoch: 0, firstSequence: 1, lastSequence: 1 }))).toBe(
      'stale_producer_epoch',
    );

    // The producer that restarts gets the next epoch and works; its transaction has its own timeout.
    const again = await txns.initProducerId('tx-z', 1000);
    expect(again).toEqual({ producerId, epoch: 2 });
    await txns.begin('tx-z', producerId, 2);
    const r = await txns.publish('tx-z', producerId, 2, TOPIC, 0, rec('after'), 1);
    await clock.advance(999);
    expect(await txns.endTxn('tx-z', producerId, 2, 'commit')).toBe('committed');
    expect(values((await part.read(0, RC)).records)).toEqual(['after']);
    expect(r.offset).toBeGreaterThan(0);

    // A committed transaction's timer is gone: moving past its timeout changes nothing.
    await clock.advance(5000);
    expect(txns.status('tx-z')).toMatchObject({ state: 'committed', epoch: 2 });
  });
});

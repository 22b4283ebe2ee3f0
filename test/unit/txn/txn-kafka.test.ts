/**
 * The Kafka port's transactions on the transaction coordinator (txn/txn-kafka.ts), without a server: the
 * implicit begin, the durable registration a transactional append needs, the producer's own sequences
 * deduplicated by the partition, CONCURRENT_TRANSACTIONS while a transaction is being finished, and an end
 * that waits for an append it let start. Real partitions in a temporary directory, a fake clock.
 */
import { describe, expect, it, onTestFinished } from 'vitest';
import type { Isolation } from 'tributary-broker/partition/partition.js';
import type { TransactionCoordinator } from 'tributary-broker/txn/txn-coordinator.js';
import { ConcurrentTransactionsError } from 'tributary-broker/txn/txn-kafka.js';
import type { TxnTargets } from 'tributary-broker/txn/txn-targets.js';
import { type Coordinators, eachWithCoordinators, openCoordinators } from '../../helpers/coordinators.js';
import { FakeClock } from '../../helpers/fake-clock.js';
import { expectError, rec, removeDir, tempDir, until } from '../../helpers/util.js';

const TOPIC = 'data';
const RC = { maxRecords: 100, maxBytes: 1 << 20, isolation: 'read_committed' as Isolation };
const RU = { maxRecords: 100, maxBytes: 1 << 20, isolation: 'read_uncommitted' as Isolation };

let c: Coordinators;
let txns: TransactionCoordinator;

eachWithCoordinators('trib-txn-kafka-', { topics: { [TOPIC]: 2 } }, (x) => {
  c = x;
  txns = x.txns;
});

const part = (p: number) => c.topics.get(TOPIC).partition(p);
const values = (rs: Array<{ value: Buffer }>) => rs.map((r) => r.value.toString());

/** A Kafka producer's batch on partition `p`, through the Kafka path, with its own sequences. */
function produce(id: string, producerId: string, epoch: number, p: number, value: string, firstSequence: number) {
  return txns.kafka.append(id, producerId, epoch, TOPIC, p, () =>
    part(p).appendTransactional([rec(value)], { producerId, epoch, firstSequence, lastSequence: firstSequence }),
  );
}

describe('Kafka transactions on the coordinator', () => {
  it('AddPartitionsToTxn begins the transaction and registers the partitions; only those take records, retries deduplicated', async () => {
    const { producerId, epoch } = await txns.initProducerId('k-1', 60_000);
    // Nothing open: refused, nothing written.
    await expectError(produce('k-1', producerId, epoch, 0, 'early', 0), 'invalid_txn_state');
    expect(part(0).highWatermark).toBe(0);
    await txns.kafka.addPartitions('k-1', producerId, epoch, [{ topic: TOPIC, partition: 0 }]);
    expect(txns.status('k-1')).toMatchObject({ state: 'open', partitions: 1 });
    await expectError(produce('k-1', producerId, epoch, 1, 'not-added', 0), 'invalid_txn_state');
    expect(part(1).highWatermark).toBe(0);
    const first = await produce('k-1', producerId, epoch, 0, 'one', 0);
    const retry = await produce('k-1', producerId, epoch, 0, 'one', 0);
    expect(retry).toMatchObject({ baseOffset: first.baseOffset, duplicate: true });
    await expectError(produce('k-1', producerId, epoch, 0, 'gap', 5), 'out_of_order_sequence');
    await expectError(produce('k-1', producerId, epoch + 1, 0, 'other-epoch', 1), 'invalid_producer_epoch');
    // Adding a partition again is answered again and registers nothing twice.
    await txns.kafka.addPartitions('k-1', producerId, epoch, [
      { topic: TOPIC, partition: 0 },
      { topic: TOPIC, partition: 1 },
      { topic: TOPIC, partition: 1 },
    ]);
    expect(txns.status('k-1').partitions).toBe(2);
    await produce('k-1', producerId, epoch, 1, 'two', 0);
    expect(values((await part(0).read(0, RC)).records)).toEqual([]);
    await txns.kafka.endTxn('k-1', producerId, epoch, 'commit');
    expect(values((await part(0).read(0, RC)).records)).toEqual(['one']);
    expect(values((await part(1).read(0, RC)).records)).toEqual(['two']);
    // Ended: the partitions are no longer in a transaction.
    await expectError(produce('k-1', producerId, epoch, 0, 'late', 1), 'invalid_txn_state');
    expect(part(0).lastStableOffset).toBe(part(0).highWatermark);
  });

  it('EndTxn commit decides once an append it let start landed; a batch meanwhile is refused; no record lands after its marker', async () => {
    const { producerId, epoch } = await txns.initProducerId('k-2', 60_000);
    await txns.kafka.addPartitions('k-2', producerId, epoch, [{ topic: TOPIC, partition: 0 }]);
    let release!: () => void;
    const gate = new Promise<void>((resolve) => (release = resolve));
    const appended = txns.kafka.append('k-2', producerId, epoch, TOPIC, 0, async () => {
      await gate; // an append still in flight (a slow disk)
      return part(0).appendTransactional([rec('slow')], { producerId, epoch, firstSequence: 0, lastSequence: 0 });
    });
    // Let the append pass its checks and start.
    await new Promise((r) => setImmediate(r));
    let ended = false;
    const ending = txns.kafka.endTxn('k-2', producerId, epoch, 'commit').then(() => (ended = true));
    await new Promise((r) => setImmediate(r));
    // Not decided before the append settled (it could still fail and refuse the commit).
    expect(txns.status('k-2').state).toBe('open');
    // A batch arriving now is refused: its transaction is being committed.
    await expectError(produce('k-2', producerId, epoch, 0, 'too-late', 1), 'invalid_txn_state');
    // The next transaction's AddPartitionsToTxn waits for the end (the id's lock).
    let added = false;
    const adding = txns.kafka.addPartitions('k-2', producerId, epoch, [{ topic: TOPIC, partition: 1 }]).then(() => (added = true));
    await new Promise((r) => setImmediate(r));
    expect([ended, added]).toEqual([false, false]);
    release();
    await appended;
    await ending;
    await adding;
    const all = (await part(0).read(0, RU)).records;
    // The record, then the commit marker: nothing after it.
    expect(all.map((r) => r.value.toString())[0]).toBe('slow');
    expect(all).toHaveLength(2);
    expect(values((await part(0).read(0, RC)).records)).toEqual(['slow']);
    expect(txns.status('k-2')).toMatchObject({ state: 'open', partitions: 1 });
  });

  it('while a decided transaction waits to be finished again, AddPartitionsToTxn and AddOffsetsToTxn are CONCURRENT_TRANSACTIONS', async () => {
    // Coordinators of their own, whose markers fail once (the set each test gets is closed after it).
    const dir = await tempDir('trib-txn-kafka-');
    const clock = new FakeClock();
    let failMarkers = 1;
    c = await openCoordinators(dir, clock, {
      topics: { [TOPIC]: 2 },
      targets: (local) =>
        Object.assign(Object.create(local) as TxnTargets, {
          marker: (...args: Parameters<TxnTargets['marker']>) => (failMarkers-- > 0 ? Promise.reject(new Error('disk full')) : local.marker(...args)),
        }),
    });
    txns = c.txns;
    onTestFinished(async () => {
      await c.close();
      await removeDir(dir);
    });
    const { producerId, epoch } = await txns.initProducerId('k-4', 60_000);
    await txns.kafka.addPartitions('k-4', producerId, epoch, [{ topic: TOPIC, partition: 0 }]);
    await produce('k-4', producerId, epoch, 0, 'r', 0);
    // The decision is durable: EndTxn succeeds, as Kafka answers it, and the finish is retried.
    await txns.kafka.endTxn('k-4', producerId, epoch, 'commit');
    expect(txns.status('k-4').state).toBe('committing');
    for (const attempt of [txns.kafka.addPartitions('k-4', producerId, epoch, [{ topic: TOPIC, partition: 1 }]), txns.kafka.addOffsets('k-4', producerId, epoch)]) {
      expect(await attempt.catch((e: unknown) => e)).toBeInstanceOf(ConcurrentTransactionsError);
    }
    // The retry finishes it; the client's retry then begins the next transaction.
    await clock.advance(1000);
    await until(() => txns.status('k-4').state === 'committed', 5000, 'the retried finish');
    await txns.kafka.addPartitions('k-4', producerId, epoch, [{ topic: TOPIC, partition: 1 }]);
    expect(txns.status('k-4')).toMatchObject({ state: 'open', partitions: 1 });
    expect(values((await part(0).read(0, RC)).records)).toEqual(['r']);
  });

  it("AddOffsetsToTxn begins the transaction; TxnOffsetCommit stages under the Kafka group's member check and applies on commit", async () => {
    const { producerId, epoch } = await txns.initProducerId('k-3', 60_000);
    await txns.kafka.addOffsets('k-3', producerId, epoch);
    expect(txns.status('k-3').state).toBe('open');
    // A member the group does not have is refused, and nothing joins the transaction.
    const ghost = { memberId: 'ghost', instanceId: null, generation: 3 };
    await expect(txns.sendOffsets('k-3', producerId, epoch, { group: 'g', topic: TOPIC, member: '', generation: -1, entries: [{ partition: 0, offset: 0 }], classic: ghost })).rejects.toMatchObject({
      kafkaName: 'UNKNOWN_MEMBER_ID',
    });
    expect(txns.status('k-3').offsets).toBe(0);
    await c.topics.get(TOPIC).partition(0).append([rec('x'), rec('y')]);
    // No member named (TxnOffsetCommit v0-2): not checked against the members, as in Kafka.
    const none = { memberId: '', instanceId: null, generation: -1 };
    await txns.sendOffsets('k-3', producerId, epoch, { group: 'g', topic: TOPIC, member: '', generation: -1, entries: [{ partition: 0, offset: 2 }], classic: none });
    expect(txns.status('k-3').offsets).toBe(1);
    await expectError(Promise.resolve().then(() => c.groups.fetchOffset('g', TOPIC, 0)), 'UNSTABLE_OFFSET_COMMIT');
    await txns.kafka.endTxn('k-3', producerId, epoch, 'commit');
    expect(c.groups.fetchOffset('g', TOPIC, 0)).toEqual({ offset: 2, committed: true });
  });
});

/**
 * A write whose outcome the offset store cannot tell (storage_error outcome=unknown: a PostgreSQL COMMIT
 * whose answer was lost) leaves the coordinator not knowing what the store holds. FETCH_OFFSET must then
 * never answer a value the store does not hold: neither the offset from before that write while the store
 * may hold the new one, nor a stale one after a later commit the store accepted.
 */
import { expect, it } from 'vitest';
import type { TributaryError } from 'tributary-protocol/errors.js';
import { GROUP_CONFIG, groupOnPartition0, useCoordinators } from '../../helpers/coordinators.js';
import { expectError, until } from '../../helpers/util.js';

const TOPIC = 't';

const f = useCoordinators('trib-unknown-outcome-', { [TOPIC]: 1 });

const { member, commit, fetched } = groupOnPartition0(f, TOPIC);

for (const fault of ['written', 'lost'] as const) {
  it(`after a commit whose outcome is unknown (${fault}), FETCH_OFFSET answers only what the store holds`, async () => {
    const v = await member('a');
    await commit(v, 6);
    f.faults.commit = fault;
    await expectError(commit(v, 8), 'storage_error', { outcome: 'unknown' });
    f.faults.commit = 'none';
    const held = fault === 'written' ? 8 : 6;
    expect(await f.store.fetch('g', TOPIC, 0)).toBe(held);
    // Until the coordinator has learnt what the store holds it refuses (retriable), never answers the other value.
    const first = fetched();
    expect([held, 'storage_error']).toContain(first);
    await until(() => fetched() === held, 5000, `FETCH_OFFSET answering ${held}`);
  });
}

it('after a reset whose outcome is unknown, a later commit below the offset from before the reset is what FETCH_OFFSET answers', async () => {
  const v = await member('a');
  await commit(v, 6);
  f.faults.commit = 'written';
  await expectError(f.gc.resetOffsets({ group: 'g', topic: TOPIC, to: 'earliest', by: 'ops' }), 'storage_error');
  f.faults.commit = 'none';
  expect(await f.store.fetch('g', TOPIC, 0)).toBe(0);
  // The reset's fence stays (it may have happened): the member rejoins the generation it caused.
  await f.clock.advance(GROUP_CONFIG.joinWindowMs);
  const j = await f.gc.join({ topic: TOPIC, group: 'g', member: v.memberId, host: '127.0.0.1', generation: v.generation });
  const v2 = await f.gc.sync({ topic: TOPIC, group: 'g', member: j.memberId, generation: j.generation });
  await expect(commit(v2, 3)).resolves.toBe(1);
  expect(await f.store.fetch('g', TOPIC, 0)).toBe(3);
  expect(f.gc.fetchOffset('g', TOPIC, 0)).toEqual({ offset: 3, committed: true });
});

it('a store that refuses a commit as a regression after an unknown outcome tells the coordinator what it holds', async () => {
  const v = await member('a');
  await commit(v, 6);
  f.faults.commit = 'written';
  await expectError(commit(v, 8), 'storage_error', { outcome: 'unknown' });
  f.faults.commit = 'none';
  await expectError(commit(v, 7), 'offset_regression');
  expect(fetched()).not.toBe(6);
  await until(() => fetched() === 8, 5000, 'FETCH_OFFSET answering 8');
});

it('Kafka OffsetFetch, too, never answers the offset from before a commit whose outcome is unknown', async () => {
  const v = await member('a');
  await commit(v, 6);
  f.faults.commit = 'written';
  await expectError(commit(v, 8), 'storage_error', { outcome: 'unknown' });
  f.faults.commit = 'none';
  const kafkaFetched = (): number | string => {
    try {
      return f.gc.classic.fetch('g', [{ topic: TOPIC, partitions: [0] }], false)[0]!.partitions[0]!.offset;
    } catch (err) {
      return (err as TributaryError).code;
    }
  };
  expect([8, 'COORDINATOR_LOADING']).toContain(kafkaFetched());
  await until(() => kafkaFetched() === 8, 5000, 'OffsetFetch answering 8');
});

it("a committed transaction's offsets below what a write of unknown outcome left in the store apply as a no-op, once the store can be read", async () => {
  const v = await member('a');
  await commit(v, 6);
  f.faults.commit = 'written';
  f.faults.reads = true;
  await expectError(commit(v, 8), 'storage_error', { outcome: 'unknown' });
  f.faults.commit = 'none';
  // Not known what the store holds: refused (the transaction coordinator retries), not a regression.
  await expectError(f.gc.applyTxnOffsets('txn-1', 'g', TOPIC, [{ partition: 0, offset: 7 }]), 'storage_error');
  f.faults.reads = false;
  await f.gc.applyTxnOffsets('txn-1', 'g', TOPIC, [{ partition: 0, offset: 7 }]);
  expect(await f.store.fetch('g', TOPIC, 0)).toBe(8);
  expect(fetched()).toBe(8);
});

it('GROUP_STATUS shows no committed offset for a partition whose last write has an unknown outcome, rather than the one from before it', async () => {
  const v = await member('a');
  await commit(v, 6);
  f.faults.commit = 'written';
  f.faults.reads = true;
  await expectError(commit(v, 8), 'storage_error', { outcome: 'unknown' });
  f.faults.commit = 'none';
  const committed = () => (f.gc.status('g') as { offsets: Array<{ committed: number | null }> }).offsets[0]!.committed;
  expect(committed()).toBeNull();
  f.faults.reads = false;
  await until(() => fetched() === 8, 5000, 'FETCH_OFFSET answering 8');
  expect(committed()).toBe(8);
});

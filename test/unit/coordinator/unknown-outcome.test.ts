/**
 * A write whose outcome the offset store cannot tell (storage_error outcome=unknown: a PostgreSQL COMMIT
 * whose answer was lost) leaves the coordinator not knowing what the store holds. FETCH_OFFSET must then
 * never answer a value the store does not hold: neither the offset from before that write while the store
 * may hold the new one, nor a stale one after a later commit the store accepted.
 */
import { afterEach, beforeEach, expect, it } from 'vitest';
import type { GroupCoordinator, MemberView } from 'tributary-broker/coordinator/group-coordinator.js';
import { LogOffsetStore } from 'tributary-broker/coordinator/group-log.js';
import { TributaryError } from 'tributary-protocol/errors.js';
import { type Coordinators, GROUP_CONFIG, openCoordinators } from '../../helpers/coordinators.js';
import { FakeClock } from '../../helpers/fake-clock.js';
import { expectError, rec, removeDir, tempDir, until } from '../../helpers/util.js';

const TOPIC = 't';
const WINDOW = GROUP_CONFIG.joinWindowMs;

let dir: string;
let clock: FakeClock;
let c: Coordinators;
let gc: GroupCoordinator;
let store: LogOffsetStore;
/** 'written': the write happens and its answer is lost; 'lost': neither; both answer outcome=unknown. */
let fault: 'none' | 'written' | 'lost' = 'none';
/** The store's reads fail (as PostgreSQL unreachable). */
let readsDown = false;

beforeEach(async () => {
  dir = await tempDir('trib-unknown-outcome-');
  clock = new FakeClock();
  fault = 'none';
  readsDown = false;
  c = await openCoordinators(dir, clock, {
    topics: { [TOPIC]: 1 },
    offsetStore: (log) => {
      store = new LogOffsetStore(log, clock);
      const commit = store.commit.bind(store);
      const fetch = store.fetch.bind(store);
      store.fetch = async (...args) => {
        if (readsDown) throw new TributaryError('storage_error', { op: 'fetch', reason: 'injected: connection refused' });
        return fetch(...args);
      };
      store.commit = async (...args) => {
        if (fault === 'none') return commit(...args);
        if (fault === 'written') await commit(...args);
        throw new TributaryError('storage_error', { op: 'commit', reason: 'injected: answer lost', outcome: 'unknown' });
      };
      return store;
    },
  });
  gc = c.groups;
  await c.topics.get(TOPIC).partitions[0]!.append(Array.from({ length: 10 }, (_, i) => rec(`r${i}`)));
});

afterEach(async () => {
  await c.close();
  await removeDir(dir);
});

const commit = (v: MemberView, offset: number) => gc.commit({ topic: TOPIC, group: 'g', member: v.memberId, generation: v.generation, entries: [{ partition: 0, offset }] });

async function member(id: string): Promise<MemberView> {
  const joined = gc.join({ topic: TOPIC, group: 'g', member: id, host: '127.0.0.1' });
  await until(() => gc.scheduler.has('window:g'), 5000, 'the join window');
  await clock.advance(WINDOW);
  const j = await joined;
  return gc.sync({ topic: TOPIC, group: 'g', member: j.memberId, generation: j.generation });
}

/** FETCH_OFFSET's answer, or the error code it refuses with. */
function fetched(): number | string {
  try {
    return gc.fetchOffset('g', TOPIC, 0).offset;
  } catch (err) {
    return (err as TributaryError).code;
  }
}

for (const f of ['written', 'lost'] as const) {
  it(`after a commit whose outcome is unknown (${f}), FETCH_OFFSET answers only what the store holds`, async () => {
    const v = await member('a');
    await commit(v, 6);
    fault = f;
    await expectError(commit(v, 8), 'storage_error', { outcome: 'unknown' });
    fault = 'none';
    const held = f === 'written' ? 8 : 6;
    expect(await store.fetch('g', TOPIC, 0)).toBe(held);
    // Until the coordinator has learnt what the store holds it refuses (retriable), never answers the other value.
    const first = fetched();
    expect([held, 'storage_error']).toContain(first);
    await until(() => fetched() === held, 5000, `FETCH_OFFSET answering ${held}`);
  });
}

it('after a reset whose outcome is unknown, a later commit below the offset from before the reset is what FETCH_OFFSET answers', async () => {
  const v = await member('a');
  await commit(v, 6);
  fault = 'written';
  await expectError(gc.resetOffsets({ group: 'g', topic: TOPIC, to: 'earliest', by: 'ops' }), 'storage_error');
  fault = 'none';
  expect(await store.fetch('g', TOPIC, 0)).toBe(0);
  // The reset's fence stays (it may have happened): the member rejoins the generation it caused.
  await clock.advance(WINDOW);
  const j = await gc.join({ topic: TOPIC, group: 'g', member: v.memberId, host: '127.0.0.1', generation: v.generation });
  const v2 = await gc.sync({ topic: TOPIC, group: 'g', member: j.memberId, generation: j.generation });
  await expect(commit(v2, 3)).resolves.toBe(1);
  expect(await store.fetch('g', TOPIC, 0)).toBe(3);
  expect(gc.fetchOffset('g', TOPIC, 0)).toEqual({ offset: 3, committed: true });
});

it('a store that refuses a commit as a regression after an unknown outcome tells the coordinator what it holds', async () => {
  const v = await member('a');
  await commit(v, 6);
  fault = 'written';
  await expectError(commit(v, 8), 'storage_error', { outcome: 'unknown' });
  fault = 'none';
  await expectError(commit(v, 7), 'offset_regression');
  expect(fetched()).not.toBe(6);
  await until(() => fetched() === 8, 5000, 'FETCH_OFFSET answering 8');
});

it('Kafka OffsetFetch, too, never answers the offset from before a commit whose outcome is unknown', async () => {
  const v = await member('a');
  await commit(v, 6);
  fault = 'written';
  await expectError(commit(v, 8), 'storage_error', { outcome: 'unknown' });
  fault = 'none';
  const kafkaFetched = (): number | string => {
    try {
      return gc.classic.fetch('g', [{ topic: TOPIC, partitions: [0] }], false)[0]!.partitions[0]!.offset;
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
  fault = 'written';
  readsDown = true;
  await expectError(commit(v, 8), 'storage_error', { outcome: 'unknown' });
  fault = 'none';
  // Not known what the store holds: refused (the transaction coordinator retries), not a regression.
  await expectError(gc.applyTxnOffsets('txn-1', 'g', TOPIC, [{ partition: 0, offset: 7 }]), 'storage_error');
  readsDown = false;
  await gc.applyTxnOffsets('txn-1', 'g', TOPIC, [{ partition: 0, offset: 7 }]);
  expect(await store.fetch('g', TOPIC, 0)).toBe(8);
  expect(fetched()).toBe(8);
});

it('GROUP_STATUS shows no committed offset for a partition whose last write has an unknown outcome, rather than the one from before it', async () => {
  const v = await member('a');
  await commit(v, 6);
  fault = 'written';
  readsDown = true;
  await expectError(commit(v, 8), 'storage_error', { outcome: 'unknown' });
  fault = 'none';
  const committed = () => (gc.status('g') as { offsets: Array<{ committed: number | null }> }).offsets[0]!.committed;
  expect(committed()).toBeNull();
  readsDown = false;
  await until(() => fetched() === 8, 5000, 'FETCH_OFFSET answering 8');
  expect(committed()).toBe(8);
});

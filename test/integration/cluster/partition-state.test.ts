import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { Etcd3 } from 'etcd3';
import { type CompareAndSetResult, type PartitionState, type PartitionStateEntry, PartitionStateStore } from 'tributary-broker/cluster/partition-state.js';
import { type EtcdServer, startEtcd } from '../../helpers/etcd.js';
import { REQUEST_TIMEOUT_MS, uniquePrefix } from './helpers.js';
import { eventually } from '../../helpers/util.js';

let etcd: EtcdServer;
const stores: PartitionStateStore[] = [];

async function openStore(prefix: string): Promise<PartitionStateStore> {
  const s = new PartitionStateStore({ etcd: { endpoints: etcd.endpoints, requestTimeoutMs: REQUEST_TIMEOUT_MS }, prefix });
  stores.push(s);
  await s.open();
  return s;
}

function state(leader: number, leaderEpoch: number, over: Partial<PartitionState> = {}): PartitionState {
  return { replicas: [1, 2, 3], leader, leaderEpoch, isr: [1, 2, 3], hwm: 0, ...over };
}

beforeAll(async () => {
  etcd = await startEtcd();
});

afterEach(async () => {
  await Promise.all(stores.splice(0).map((s) => s.close()));
});

afterAll(async () => {
  await etcd?.dispose();
});

describe('PartitionStateStore', () => {
  it('creates a topic’s records only once, and reads, lists and deletes them', async () => {
    const prefix = uniquePrefix('create');
    const store = await openStore(prefix);
    expect(await store.create('orders', [state(1, 0), state(2, 0), state(3, 0)])).toBe(true);
    expect(await store.create('orders', [state(9, 0)])).toBe(false);
    expect(store.get('orders', 1)?.value).toEqual(state(2, 0));
    // Partitions added later start after the existing ones; a topic whose name is a prefix of another stays apart.
    expect(await store.create('orders', [state(1, 0)], 3)).toBe(true);
    expect(await store.create('orders-eu', [state(2, 0)])).toBe(true);
    expect(store.list('orders').map((e) => [e.partition, e.value.leader])).toEqual([
      [0, 1],
      [1, 2],
      [2, 3],
      [3, 1],
    ]);

    const other = await openStore(prefix);
    expect(other.list().map((e) => `${e.topic}/${e.partition}`)).toEqual(['orders/0', 'orders/1', 'orders/2', 'orders/3', 'orders-eu/0']);
    expect((await other.read('orders', 2))?.value).toEqual(state(3, 0));
    expect(other.countsByTopic()).toEqual(
      new Map([
        ['orders', 4],
        ['orders-eu', 1],
      ]),
    );

    // Records without a topic id (written before ids) go with any id's delete.
    await store.deleteTopic('orders', 'some-id');
    expect(store.list('orders')).toEqual([]);
    expect(store.list().map((e) => e.topic)).toEqual(['orders-eu']);
    await eventually('the other store to see the delete', () => other.list('orders').length === 0);
    expect(await other.read('orders', 0)).toBeUndefined();
  });

  it('a delete of a topic id leaves the records of the topic re-created under the name by another broker', async () => {
    const prefix = uniquePrefix('delete-race');
    const deleter = await openStore(prefix);
    const creator = await openStore(prefix);
    // The old topic, 150 partitions (two transactions' worth), seen by both brokers.
    const old = Array.from({ length: 150 }, (_, i) => state(1 + (i % 3), 0, { topicId: 'old' }));
    expect(await deleter.create('orders', old)).toBe(true);
    await eventually('the creator to see the old topic', () => creator.list('orders').length === 150);
    // The creator re-creates the name before the deleter's delete of the old states comes: it clears what
    // the old topic left (its own delete of that id) and writes the new topic's states.
    await creator.deleteTopic('orders', 'old');
    expect(await creator.create('orders', [state(2, 0, { topicId: 'new' }), state(3, 0, { topicId: 'new' })])).toBe(true);
    // The deleter's delete of the old topic id, late: the new topic's states stay, in etcd and in both caches.
    await deleter.deleteTopic('orders', 'old');
    const fresh = await openStore(prefix);
    expect(fresh.list('orders').map((e) => [e.partition, e.value.topicId])).toEqual([
      [0, 'new'],
      [1, 'new'],
    ]);
    await eventually('the deleter to see the new topic', () => deleter.list('orders').length === 2);
    expect(creator.list('orders').map((e) => e.value.topicId)).toEqual(['new', 'new']);
    // A record of the old id left behind next to them (a cut-short delete) goes; the new ones stay.
    expect(await deleter.create('orders', [state(1, 0, { topicId: 'old' })], 2)).toBe(true);
    await deleter.deleteTopic('orders', 'old');
    expect((await openStore(prefix)).list('orders').map((e) => e.value.topicId)).toEqual(['new', 'new']);
  });

  it('creates more than one transaction’s worth of partitions', async () => {
    const store = await openStore(uniquePrefix('big'));
    const many = Array.from({ length: 250 }, (_, i) => state(1 + (i % 3), 0));
    expect(await store.create('wide', many)).toBe(true);
    expect(store.list('wide').map((e) => e.partition)).toEqual(Array.from({ length: 250 }, (_, i) => i));
  });

  it('lets exactly one of two brokers move a partition to the next leader epoch', async () => {
    const prefix = uniquePrefix('epoch-race');
    const [a, b] = await Promise.all([openStore(prefix), openStore(prefix)]);
    await a.create('t', [state(1, 0)]);
    await eventually('B to see the record', () => b.get('t', 0) !== undefined);
    for (let epoch = 0; epoch < 20; epoch++) {
      // Both saw leader epoch `epoch` and both try to become leader of epoch+1.
      const results = await Promise.all([
        a.compareAndSet('t', 0, { leaderEpoch: epoch }, state(2, epoch + 1, { isr: [2, 3] })),
        b.compareAndSet('t', 0, { leaderEpoch: epoch }, state(3, epoch + 1, { isr: [3, 1] })),
      ]);
      const ok = results.filter((r) => r.ok);
      expect(ok, `epoch ${epoch}`).toHaveLength(1);
      const failed = results.find((r) => !r.ok) as Extract<CompareAndSetResult, { ok: false }>;
      // The loser learns the winner's record.
      expect(failed.current?.value.leaderEpoch).toBe(epoch + 1);
      const record = await a.read('t', 0);
      expect(record?.value.leader).toBe(results[0].ok ? 2 : 3);
      expect(record?.modRevision).toBe((ok[0] as { modRevision: number }).modRevision);
    }
  });

  it('lets exactly one of two concurrent writers replace the same revision', async () => {
    const prefix = uniquePrefix('rev-race');
    const [a, b] = await Promise.all([openStore(prefix), openStore(prefix)]);
    await a.create('t', [state(1, 4)]);
    const base = (await b.read('t', 0))!;
    const results = await Promise.all([
      a.compareAndSet('t', 0, { modRevision: base.modRevision }, state(1, 4, { isr: [1] })),
      b.compareAndSet('t', 0, { modRevision: base.modRevision }, state(1, 4, { hwm: 100 })),
    ]);
    expect(results.filter((r) => r.ok)).toHaveLength(1);
    // An outdated revision never wins, even for a harmless change.
    expect((await a.compareAndSet('t', 0, { modRevision: base.modRevision }, state(1, 4))).ok).toBe(false);
    // Same epoch, other fields changed meanwhile: an epoch-based update still applies.
    const r = await b.compareAndSet('t', 0, { leaderEpoch: 4 }, state(1, 4, { isr: [1, 2], hwm: 7 }));
    expect(r.ok).toBe(true);
    expect((await a.read('t', 0))?.value).toEqual(state(1, 4, { isr: [1, 2], hwm: 7 }));
  });

  it('refuses transitions that would break leader epochs, and CAS on a missing record', async () => {
    const store = await openStore(uniquePrefix('invariants'));
    await store.create('t', [state(1, 3)]);
    await expect(store.compareAndSet('t', 0, { leaderEpoch: 3 }, state(2, 3))).rejects.toThrow(/must bump the leader epoch/);
    await expect(store.compareAndSet('t', 0, { leaderEpoch: 3 }, state(1, 2))).rejects.toThrow(/may not go back/);
    await expect(store.compareAndSet('t', 0, { leaderEpoch: 3 }, { ...state(1, 3), isr: 'x' } as unknown as PartitionState)).rejects.toThrow(/invalid/);
    expect(await store.compareAndSet('t', 7, { leaderEpoch: 0 }, state(1, 1))).toEqual({ ok: false, current: undefined });
    expect(store.get('t', 0)?.value).toEqual(state(1, 3));
  });

  it('tells watchers about changes made by another store', async () => {
    const prefix = uniquePrefix('watch');
    const [a, b] = await Promise.all([openStore(prefix), openStore(prefix)]);
    const seen: string[] = [];
    b.events.on('changed', (e: PartitionStateEntry) => seen.push(`changed ${e.topic}/${e.partition} leader=${e.value.leader} epoch=${e.value.leaderEpoch}`));
    b.events.on('deleted', (e: PartitionStateEntry) => seen.push(`deleted ${e.topic}/${e.partition}`));
    await a.create('w', [state(1, 0)]);
    await a.compareAndSet('w', 0, { leaderEpoch: 0 }, state(2, 1));
    await a.deleteTopic('w', 'w-id');
    await eventually('B to see all three changes', () => seen.length === 3);
    expect(seen).toEqual(['changed w/0 leader=1 epoch=0', 'changed w/0 leader=2 epoch=1', 'deleted w/0']);
  });
  it('compareAndSetDeleting writes the state and deletes the other key together, or neither when either changed', async () => {
    const prefix = uniquePrefix('cas-delete');
    const store = await openStore(prefix);
    await store.create('orders', [state(1, 0)]);
    const client = new Etcd3({ hosts: etcd.endpoints });
    const key = `${prefix}reassignments/orders/0`;
    try {
      await client.put(key).value('{"target":[1,2,4]}');
      const at = async () => Number((await client.if(key, 'Version', '>', -1).then(client.get(key)).commit()).responses[0]!.response_range.kvs[0]?.mod_revision ?? 0);
      const requestRevision = await at();
      // The other key changed since it was read (a cancel stored meanwhile): nothing is written.
      await client.put(key).value('{"target":[1,2,4],"cancel":true}');
      const base = store.get('orders', 0)!;
      expect(await store.compareAndSetDeleting('orders', 0, base.modRevision, state(1, 0, { replicas: [1, 2, 4], isr: [1, 2, 4] }), { key, modRevision: requestRevision })).toBeUndefined();
      expect((await store.read('orders', 0))?.value).toEqual(state(1, 0));
      expect(await client.get(key).string()).toContain('cancel');
      // Both as read: the state is written and the key is gone, in one revision.
      const revision = await store.compareAndSetDeleting('orders', 0, base.modRevision, state(1, 0, { replicas: [1, 3, 2], isr: [1, 3, 2] }), { key, modRevision: await at() });
      expect(revision).toBeGreaterThan(base.modRevision);
      expect(store.get('orders', 0)?.modRevision).toBe(revision);
      expect((await store.read('orders', 0))?.value.replicas).toEqual([1, 3, 2]);
      expect(await client.get(key).string()).toBeNull();
      // The state changed since: nothing is written.
      await client.put(key).value('{"target":[1,2,3]}');
      expect(await store.compareAndSetDeleting('orders', 0, base.modRevision, state(1, 0), { key, modRevision: await at() })).toBeUndefined();
      expect(await client.get(key).string()).not.toBeNull();
    } finally {
      client.close();
    }
  });
});

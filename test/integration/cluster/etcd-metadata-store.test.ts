import { Etcd3 } from 'etcd3';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { EtcdMetadataStore, type EtcdMetadataStoreOptions } from 'tributary-broker/cluster/etcd-metadata-store.js';
import { type EtcdServer, startEtcd } from '../../helpers/etcd.js';
import { REQUEST_TIMEOUT_MS, uniquePrefix } from './helpers.js';
import { eventually, rejection } from '../../helpers/util.js';
import { FakeClock } from '../../helpers/fake-clock.js';
import type { TopicDefinition } from 'tributary-broker/partition/metadata-store.js';
import { type TopicSpec, topicSpec } from '../../helpers/topic-spec.js';

/** A topic of 3 partitions unless `over` says otherwise. */
const spec = (name: string, over: Partial<TopicSpec> = {}): TopicSpec => topicSpec(name, { partitions: 3, ...over });

let etcd: EtcdServer;
const stores: EtcdMetadataStore[] = [];


async function openStore(prefix: string, more: Partial<EtcdMetadataStoreOptions> = {}): Promise<EtcdMetadataStore> {
  const store = new EtcdMetadataStore({ etcd: { endpoints: etcd.endpoints, requestTimeoutMs: REQUEST_TIMEOUT_MS }, prefix, ...more });
  stores.push(store);
  await store.open();
  return store;
}

/** Records every event a store emits, in order. */
function recorder(store: EtcdMetadataStore): string[] {
  const seen: string[] = [];
  for (const ev of ['topic-created', 'topic-deleted', 'topic-updated']) {
    store.events.on(ev, (t: TopicDefinition) => seen.push(`${ev}:${t.name}:${t.topicId}`));
  }
  return seen;
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

describe('EtcdMetadataStore', () => {
  it('creates, gets, lists and deletes topics, and keeps them across reopen', async () => {
    const prefix = uniquePrefix('crud');
    const store = await openStore(prefix);
    const events = recorder(store);
    expect(store.listTopics()).toEqual([]);

    const { topic: b, created } = await store.createTopic(spec('beta', { partitions: 2 }));
    expect(created).toBe(true);
    expect(b).toMatchObject({ name: 'beta', partitions: 2 });
    expect(b.topicId).toMatch(/^[0-9a-f]{16}$/);
    const { topic: a } = await store.createTopic(spec('alpha'));
    expect(store.getTopic('beta')).toEqual(b);
    expect(store.listTopics().map((t) => t.name)).toEqual(['alpha', 'beta']);

    // A second store on the same prefix loads the same definitions.
    const other = await openStore(prefix);
    expect(other.listTopics()).toEqual([a, b]);

    expect(await store.deleteTopic('beta')).toEqual(b);
    expect(store.getTopic('beta')).toBeUndefined();
    expect(await store.deleteTopic('beta')).toBeUndefined();
    expect(await store.deleteTopic('never-existed')).toBeUndefined();
    expect(store.listTopics()).toEqual([a]);

    // Local changes emit events once, even though the watch sees them too.
    await eventually('the watch to deliver the local changes', () => other.getTopic('beta') === undefined);
    expect(events).toEqual([`topic-created:beta:${b.topicId}`, `topic-created:alpha:${a.topicId}`, `topic-deleted:beta:${b.topicId}`]);

    const reopened = await openStore(prefix);
    expect(reopened.listTopics()).toEqual([a]);
  });

  it('answers an identical re-create with created=false and refuses a different definition', async () => {
    const prefix = uniquePrefix('recreate');
    const store = await openStore(prefix);
    const first = await store.createTopic(spec('orders'));
    const again = await store.createTopic(spec('orders'));
    expect(again).toEqual({ topic: first.topic, created: false });

    // From another store too (its cache had it, but the answer comes from etcd).
    const other = await openStore(prefix);
    expect(await other.createTopic(spec('orders'))).toEqual({ topic: first.topic, created: false });

    const err = await rejection(other.createTopic(spec('orders', { partitions: 7 })));
    expect(err.code).toBe('topic_already_exists');
    expect(err.errorClass).toBe('conflict');
    expect(err.fields).toMatchObject({ topic: 'orders', partitions: 3 });
    expect(store.getTopic('orders')).toEqual(first.topic);
  });

  it('lets exactly one of two stores racing to create different definitions win', async () => {
    const prefix = uniquePrefix('race');
    const [a, b] = await Promise.all([openStore(prefix), openStore(prefix)]);
    for (let round = 0; round < 20; round++) {
      const name = `race-${round}`;
      const results = await Promise.allSettled([a.createTopic(spec(name, { partitions: 1 })), b.createTopic(spec(name, { partitions: 2 }))]);
      const won = results.filter((r) => r.status === 'fulfilled');
      const lost = results.filter((r): r is PromiseRejectedResult => r.status === 'rejected');
      expect(won, `round ${round}`).toHaveLength(1);
      expect(lost[0].reason.code).toBe('topic_already_exists');
      const winner = (won[0] as PromiseFulfilledResult<{ topic: TopicDefinition; created: boolean }>).value;
      expect(winner.created).toBe(true);
      // Both stores converge on the winner's definition.
      await eventually('both stores to agree', () => a.getTopic(name)?.topicId === winner.topic.topicId && b.getTopic(name)?.topicId === winner.topic.topicId);
    }
  });

  it('shows one store the changes another makes, with events', async () => {
    const prefix = uniquePrefix('watch');
    const [a, b] = await Promise.all([openStore(prefix), openStore(prefix)]);
    const events = recorder(b);

    const { topic: t1 } = await a.createTopic(spec('events'));
    await eventually('B to see the create', () => b.getTopic('events')?.topicId === t1.topicId);
    await a.deleteTopic('events');
    await eventually('B to see the delete', () => b.getTopic('events') === undefined);
    // Re-created under the same name: a new topic id, so B must drop the old topic's data.
    const { topic: t2 } = await a.createTopic(spec('events', { partitions: 5 }));
    await eventually('B to see the re-create', () => b.getTopic('events')?.partitions === 5);
    expect(t2.topicId).not.toBe(t1.topicId);
    expect(events).toEqual([`topic-created:events:${t1.topicId}`, `topic-deleted:events:${t1.topicId}`, `topic-created:events:${t2.topicId}`]);

    // B deletes a topic A knows: A sees it go.
    await b.deleteTopic('events');
    await eventually('A to see the delete', () => a.getTopic('events') === undefined);
  });

  it('alters retention by compare-and-set: two stores racing on different settings both land, others see it with topic-updated', async () => {
    const prefix = uniquePrefix('alter');
    const [a, b] = await Promise.all([openStore(prefix), openStore(prefix)]);
    const { topic } = await a.createTopic(spec('alt'));
    await eventually('B to see the create', () => b.getTopic('alt')?.topicId === topic.topicId);
    const events = recorder(b);
    // Each reads its own cache; the loser of the compare retries on what etcd has, so neither change is lost.
    await Promise.all([a.alterTopic('alt', { retentionHours: 7 }), b.alterTopic('alt', { retentionBytes: 4096 })]);
    await eventually('both changes everywhere', () => [a, b].every((s) => s.getTopic('alt')?.retentionHours === 7 && s.getTopic('alt')?.retentionBytes === 4096));
    expect(events.every((e) => e === `topic-updated:alt:${topic.topicId}`)).toBe(true);
    expect(await a.readTopic('alt')).toMatchObject({ retentionHours: 7, retentionBytes: 4096, partitions: 3, topicId: topic.topicId });
    // null: back to the broker's default (no own value stored).
    await a.alterTopic('alt', { deleteRetentionMs: 5 });
    await a.alterTopic('alt', { deleteRetentionMs: null });
    expect('deleteRetentionMs' in (await a.readTopic('alt'))!).toBe(false);
    expect((await rejection(a.alterTopic('none', { retentionHours: 1 }))).code).toBe('topic_not_found');
  });

  it('deletes the current version even when its own cache was stale', async () => {
    const prefix = uniquePrefix('stale');
    const [a, b] = await Promise.all([openStore(prefix), openStore(prefix)]);
    await a.createTopic(spec('t'));
    await a.deleteTopic('t');
    const { topic } = await a.createTopic(spec('t', { partitions: 9 }));
    // Whatever B's cache holds right now, its delete removes exactly what etcd has and returns it.
    expect(await b.deleteTopic('t')).toEqual(topic);
    await eventually('A to see the delete', () => a.getTopic('t') === undefined);
  });

  it('leaves a tombstone of each deleted version, which a store opened later lists (a broker down during the delete removes its directory)', async () => {
    const prefix = uniquePrefix('tombstones');
    const [a, b] = await Promise.all([openStore(prefix), openStore(prefix)]);
    const { topic: first } = await a.createTopic(spec('t'));
    await a.deleteTopic('t');
    const { topic: second } = await a.createTopic(spec('t', { partitions: 9 }));
    // A delete through a stale cache tombstones the version it deleted, not the one it knew.
    await b.deleteTopic('t');
    await a.createTopic(spec('kept'));
    expect(await b.deleteTopic('never')).toBeUndefined();
    const c = await openStore(prefix);
    const listed = c.deletedTopics().map((d) => `${d.name}~${d.topicId}`);
    expect(listed.sort()).toEqual([`t~${first.topicId}`, `t~${second.topicId}`].sort());
    // Kept in etcd for every broker: forgetting drops them from this store's memory only.
    await c.forgetDeletedTopics(c.deletedTopics());
    expect(c.deletedTopics()).toEqual([]);
    expect((await openStore(prefix)).deletedTopics()).toHaveLength(2);
  });

  it("records the delete's time in its tombstone; a later open reads every tombstone a page at a time, an earlier version's empty-valued ones too", async () => {
    const prefix = uniquePrefix('tombstone-pages');
    const clock = new FakeClock();
    const a = await openStore(prefix, { clock });
    const ids: string[] = [];
    for (let i = 0; i < 5; i++) {
      ids.push(`t${i}~${(await a.createTopic(spec(`t${i}`))).topic.topicId}`);
      await a.deleteTopic(`t${i}`);
      await clock.advance(1000);
    }
    const client = new Etcd3({ hosts: etcd.endpoints });
    try {
      const values = await client.getAll().prefix(`${prefix}deleted-topics/`).strings();
      // The time deleted-topics.ts expires it from (docs/architecture.md, "Metadata").
      expect(Object.values(values).map((v) => JSON.parse(v) as unknown)).toEqual([0, 1, 2, 3, 4].map((i) => ({ deletedAt: 1_700_000_000_000 + i * 1000 })));
      await client.put(`${prefix}deleted-topics/legacy~00ff`).value('');
    } finally {
      client.close();
    }
    // Pages of 2 over 6 keys: every one is listed once, the page boundaries included.
    const listed = (await openStore(prefix, { tombstonePage: 2 })).deletedTopics().map((d) => `${d.name}~${d.topicId}`);
    expect(listed.sort()).toEqual([...ids, 'legacy~00ff'].sort());
  });

  it('reserves producer id ranges that never overlap, across stores racing and a reopen', async () => {
    const prefix = uniquePrefix('pids');
    const [a, b] = [await openStore(prefix), await openStore(prefix)];
    expect(await b.reservedProducerIds()).toBe(0);
    // Interleaved compare-and-sets: some lose and retry, none may hand out a range twice.
    const firsts = await Promise.all(Array.from({ length: 12 }, (_, i) => (i % 2 === 0 ? a : b).reserveProducerIds(100)));
    expect([...firsts].sort((x, y) => x - y)).toEqual(Array.from({ length: 12 }, (_, i) => i * 100));
    // What either reserved, the other sees as reserved (a broker checks a client's producer id against it).
    expect(await b.reservedProducerIds()).toBe(1200);
    await a.close();
    const c = await openStore(prefix);
    expect(await c.reserveProducerIds(5)).toBe(1200);
    // Another cluster (prefix) counts on its own.
    expect(await (await openStore(uniquePrefix('pids-other'))).reserveProducerIds(5)).toBe(0);
  });

  it('keeps topics under different prefixes apart', async () => {
    const [a, b] = await Promise.all([openStore(uniquePrefix('p1')), openStore(uniquePrefix('p2'))]);
    await a.createTopic(spec('shared-name', { partitions: 1 }));
    expect((await b.createTopic(spec('shared-name', { partitions: 2 }))).created).toBe(true);
    expect(a.getTopic('shared-name')?.partitions).toBe(1);
  });
});

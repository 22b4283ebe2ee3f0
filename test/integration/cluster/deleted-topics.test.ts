/**
 * The controller's expiry of deleted topics' tombstones (cluster/deleted-topics.ts, docs/architecture.md
 * "Metadata") against a real etcd, on a fake clock: a tombstone older than --deleted-topic-retention-ms
 * goes, a younger one stays, an earlier version's (no time) is stamped and goes a retention later, a walk
 * takes one page per pass, and a re-created topic's tombstone is never the expired one.
 */
import { Etcd3 } from 'etcd3';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { DeletedTopicSweeper } from 'tributary-broker/cluster/deleted-topics.js';
import { EtcdMetadataStore } from 'tributary-broker/cluster/etcd-metadata-store.js';
import { createLogger } from 'tributary-broker/common/logger.js';
import { type EtcdServer, startEtcd } from '../../helpers/etcd.js';
import { FakeClock } from '../../helpers/fake-clock.js';
import { REQUEST_TIMEOUT_MS, uniquePrefix } from './helpers.js';
import { topicSpec } from '../../helpers/topic-spec.js';

const DAY = 86_400_000;
const RETENTION = 7 * DAY;

let etcd: EtcdServer;
let client: Etcd3;
const stores: EtcdMetadataStore[] = [];
const logger = createLogger('silent');


async function openStore(prefix: string, clock: FakeClock): Promise<EtcdMetadataStore> {
  const store = new EtcdMetadataStore({ etcd: { endpoints: etcd.endpoints, requestTimeoutMs: REQUEST_TIMEOUT_MS }, prefix, clock });
  stores.push(store);
  await store.open();
  return store;
}

function sweeper(prefix: string, clock: FakeClock, more: { retentionMs?: number; pageSize?: number } = {}): DeletedTopicSweeper {
  return new DeletedTopicSweeper({ client, prefix, retentionMs: RETENTION, clock, logger, ...more });
}

/** Creates and deletes a topic; returns its tombstone's name (`<name>~<topicId>`). */
async function createAndDelete(store: EtcdMetadataStore, name: string): Promise<string> {
  const { topic } = await store.createTopic(topicSpec(name));
  await store.deleteTopic(name);
  return `${name}~${topic.topicId}`;
}

/** The tombstones in etcd: name → value. */
async function tombstones(prefix: string): Promise<Record<string, string>> {
  const all = await client.getAll().prefix(`${prefix}deleted-topics/`).strings();
  return Object.fromEntries(Object.entries(all).map(([k, v]) => [k.slice(`${prefix}deleted-topics/`.length), v]));
}

beforeAll(async () => {
  etcd = await startEtcd();
  client = new Etcd3({ hosts: etcd.endpoints });
});

afterEach(async () => {
  await Promise.all(stores.splice(0).map((s) => s.close()));
});

afterAll(async () => {
  client?.close();
  await etcd?.dispose();
});

describe('expiring the tombstones of deleted topics', () => {
  it('removes a tombstone older than the retention and keeps a younger one; a broker opening later lists only the kept one', async () => {
    const prefix = uniquePrefix('expire');
    const clock = new FakeClock();
    const store = await openStore(prefix, clock);
    const sweep = sweeper(prefix, clock);
    const old = await createAndDelete(store, 'old');
    await clock.advance(5 * DAY);
    const young = await createAndDelete(store, 'young');
    // Both younger than the retention: kept.
    expect(await sweep.pass()).toEqual({ read: 2, removed: 0, stamped: 0 });
    // The walk is done: passes until the next one is due read nothing.
    expect(await sweep.pass()).toEqual({ read: 0, removed: 0, stamped: 0 });
    await clock.advance(2 * DAY);
    expect(await sweep.pass()).toEqual({ read: 2, removed: 1, stamped: 0 });
    expect(Object.keys(await tombstones(prefix))).toEqual([young]);
    expect((await openStore(prefix, clock)).deletedTopics().map((d) => `${d.name}~${d.topicId}`)).toEqual([young]);
    expect(old).not.toBe(young);
    await clock.advance(5 * DAY);
    expect(await sweep.pass()).toEqual({ read: 1, removed: 1, stamped: 0 });
    expect(await tombstones(prefix)).toEqual({});
  });

  it("stamps a tombstone without a believable time (an earlier version's, a broken value, a clock far ahead) and removes it a retention later", async () => {
    const prefix = uniquePrefix('stamp');
    const clock = new FakeClock();
    const now = clock.now();
    await client.put(`${prefix}deleted-topics/legacy~01`).value('');
    await client.put(`${prefix}deleted-topics/broken~02`).value('{not json');
    await client.put(`${prefix}deleted-topics/ahead~03`).value(JSON.stringify({ deletedAt: now + 30 * DAY }));
    const sweep = sweeper(prefix, clock);
    expect(await sweep.pass()).toEqual({ read: 3, removed: 0, stamped: 3 });
    const stamped = JSON.stringify({ deletedAt: now });
    expect(await tombstones(prefix)).toEqual({ 'legacy~01': stamped, 'broken~02': stamped, 'ahead~03': stamped });
    await clock.advance(RETENTION - 1);
    expect(await sweep.pass()).toEqual({ read: 3, removed: 0, stamped: 0 });
    // The next walk a second later (the shortest wait between walks).
    await clock.advance(1000);
    expect(await sweep.pass()).toEqual({ read: 3, removed: 3, stamped: 0 });
    expect(await tombstones(prefix)).toEqual({});
  });

  it('walks the tombstones one page per pass, removing in bounded batches', async () => {
    const prefix = uniquePrefix('pages');
    const clock = new FakeClock();
    const store = await openStore(prefix, clock);
    for (let i = 0; i < 5; i++) await createAndDelete(store, `p${i}`);
    await clock.advance(RETENTION);
    const sweep = sweeper(prefix, clock, { pageSize: 2 });
    const steps = [await sweep.pass(), await sweep.pass(), await sweep.pass()];
    expect(steps).toEqual([
      { read: 2, removed: 2, stamped: 0 },
      { read: 2, removed: 2, stamped: 0 },
      { read: 1, removed: 1, stamped: 0 },
    ]);
    expect(await tombstones(prefix)).toEqual({});
  });

  it('a re-created topic of the same name deleted during a sweep keeps its own tombstone; the expired one goes', async () => {
    const prefix = uniquePrefix('recreated');
    const clock = new FakeClock();
    const store = await openStore(prefix, clock);
    const first = await createAndDelete(store, 't');
    await clock.advance(RETENTION);
    const { topic } = await store.createTopic(topicSpec('t'));
    const sweep = sweeper(prefix, clock);
    const [step] = await Promise.all([sweep.pass(), store.deleteTopic('t')]);
    expect(step.removed).toBe(1);
    const left = await tombstones(prefix);
    expect(Object.keys(left)).toEqual([`t~${topic.topicId}`]);
    expect(first).not.toBe(`t~${topic.topicId}`);
    expect(JSON.parse(left[`t~${topic.topicId}`]!)).toEqual({ deletedAt: clock.now() });
  });

  it('keeps every tombstone with a retention of 0', async () => {
    const prefix = uniquePrefix('forever');
    const clock = new FakeClock();
    const store = await openStore(prefix, clock);
    const name = await createAndDelete(store, 'kept');
    await client.put(`${prefix}deleted-topics/legacy~04`).value('');
    await clock.advance(1000 * DAY);
    expect(await sweeper(prefix, clock, { retentionMs: 0 }).pass()).toEqual({ read: 0, removed: 0, stamped: 0 });
    expect(Object.keys(await tombstones(prefix)).sort()).toEqual([name, 'legacy~04'].sort());
  });
});

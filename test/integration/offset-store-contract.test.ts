/**
 * The OffsetStore contract (packages/broker/src/coordinator/offset-store.ts), run against every store:
 * `log` (the internal __consumer_offsets topic on real partitions in a temp dir), `postgres` (a real
 * PostgreSQL) and `memory`. The same cases, the same expected answers; only durability differs, and the
 * memory store is checked to be what docs/architecture.md says it is: not durable.
 */
import { pino } from 'pino';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { resolveConfig } from 'tributary-broker/common/config.js';
import { BrokerMetrics } from 'tributary-broker/common/metrics.js';
import { GroupLog, LogOffsetStore, OFFSETS_TOPIC } from 'tributary-broker/coordinator/group-log.js';
import { MemoryOffsetStore } from 'tributary-broker/coordinator/memory-offset-store.js';
import type { OffsetStore } from 'tributary-broker/coordinator/offset-store.js';
import { PgOffsetStore } from 'tributary-broker/coordinator/pg-offset-store.js';
import { LocalMetadataStore } from 'tributary-broker/partition/metadata-store.js';
import { TopicManager } from 'tributary-broker/partition/topic-manager.js';
import { type PostgresServer, startPostgres } from '../helpers/postgres.js';
import { rejection, removeDir, tempDir } from '../helpers/util.js';

/** One backing (a data dir, a table, a process's memory); `open()` gives a new store instance on it. */
interface Backing {
  open(): Promise<OffsetStore>;
  /** Closes every store opened on it and frees it. */
  dispose(): Promise<void>;
}

interface Kind {
  name: 'log' | 'postgres' | 'memory';
  durable: boolean;
  backing(): Promise<Backing>;
}

let pgServer: PostgresServer | undefined;
let tableSeq = 0;

function logBacking(dir: string): Backing {
  const opened: Array<{ store: OffsetStore; topics: TopicManager }> = [];
  return {
    async open() {
      const config = resolveConfig({ dataDir: dir, flush: 'os', offsetsTopicPartitions: 3 });
      const meta = new LocalMetadataStore(dir);
      await meta.open();
      const topics = new TopicManager(meta, config, pino({ level: 'silent' }), new BrokerMetrics());
      await topics.open();
      if (!topics.tryGet(OFFSETS_TOPIC)) {
        await topics.create(
          { name: OFFSETS_TOPIC, partitions: 3, replicationFactor: 1, idempotent: false, partitioner: 'hash_key', retentionHours: -1, retentionBytes: -1, cleanupPolicy: 'compact' },
          { allowInternal: true },
        );
      }
      const store = new LogOffsetStore(new GroupLog(() => topics.get(OFFSETS_TOPIC).partitions));
      await store.open();
      opened.push({ store, topics });
      return store;
    },
    async dispose() {
      for (const o of opened.splice(0)) {
        await o.store.close();
        await o.topics.close();
      }
      await removeDir(dir);
    },
  };
}

const KINDS: Kind[] = [
  { name: 'log', durable: true, backing: async () => logBacking(await tempDir('tributary-offsets-')) },
  {
    name: 'postgres',
    durable: true,
    async backing() {
      const table = `contract_${++tableSeq}`;
      const opened: OffsetStore[] = [];
      return {
        async open() {
          const store = new PgOffsetStore({ connectionString: pgServer!.connectionString, table });
          await store.open();
          opened.push(store);
          return store;
        },
        async dispose() {
          for (const s of opened.splice(0)) await s.close();
        },
      };
    },
  },
  {
    name: 'memory',
    durable: false,
    async backing() {
      // A process's memory: a new store (a restarted broker) starts empty.
      const opened: OffsetStore[] = [];
      return {
        async open() {
          const store = new MemoryOffsetStore();
          await store.open();
          opened.push(store);
          return store;
        },
        async dispose() {
          for (const s of opened.splice(0)) await s.close();
        },
      };
    },
  },
];

const backings: Backing[] = [];

beforeAll(async () => {
  pgServer = await startPostgres();
}, 120_000);

afterEach(async () => {
  await Promise.all(backings.splice(0).map((b) => b.dispose()));
});

afterAll(async () => {
  await pgServer?.stop();
});

async function fresh(kind: Kind): Promise<{ backing: Backing; store: OffsetStore }> {
  const backing = await kind.backing();
  backings.push(backing);
  return { backing, store: await backing.open() };
}

describe.each(KINDS)('OffsetStore contract: $name', (kind) => {
  it('reports its kind, round-trips commit and fetch, and knows nothing it was not told', async () => {
    const { store } = await fresh(kind);
    expect(store.kind).toBe(kind.name);
    expect(await store.fetch('g1', 'orders', 0)).toBeUndefined();
    await store.commit('g1', 'orders', [
      { partition: 0, offset: 5 },
      { partition: 1, offset: 7 },
    ]);
    expect(await store.fetch('g1', 'orders', 0)).toBe(5);
    expect(await store.fetch('g1', 'orders', 1)).toBe(7);
    expect(await store.fetch('g1', 'orders', 2)).toBeUndefined();
    expect(await store.fetch('g2', 'orders', 0)).toBeUndefined();
    expect(await store.fetch('g1', 'other', 0)).toBeUndefined();
    // Offsets up to 2^53 come back as exact numbers (the PostgreSQL column is a bigint).
    const big = Number.MAX_SAFE_INTEGER - 1;
    await store.commit('g1', 'orders', [{ partition: 3, offset: big }]);
    expect(await store.fetch('g1', 'orders', 3)).toBe(big);
    await store.commit('g1', 'orders', []); // nothing to do, no error
  });

  it('loadAll returns every committed offset with its commit time', async () => {
    const { store } = await fresh(kind);
    const before = Date.now();
    await store.commit('g1', 'orders', [{ partition: 0, offset: 3 }]);
    await store.commit('g2', 'audit', [{ partition: 4, offset: 9 }]);
    const after = Date.now();
    const all = (await store.loadAll()).sort((a, b) => a.group.localeCompare(b.group));
    expect(all.map(({ commitTimestamp: _t, ...o }) => o)).toEqual([
      { group: 'g1', topic: 'orders', partition: 0, offset: 3 },
      { group: 'g2', topic: 'audit', partition: 4, offset: 9 },
    ]);
    for (const o of all) {
      expect(o.commitTimestamp).toBeGreaterThanOrEqual(before);
      expect(o.commitTimestamp).toBeLessThanOrEqual(after);
    }
  });

  it('accepts an equal or higher offset and refuses a lower one with offset_regression', async () => {
    const { store } = await fresh(kind);
    await store.commit('g', 't', [{ partition: 0, offset: 10 }]);
    await store.commit('g', 't', [{ partition: 0, offset: 10 }]);
    await store.commit('g', 't', [{ partition: 0, offset: 12 }]);
    const e = await rejection(store.commit('g', 't', [{ partition: 0, offset: 11 }]));
    expect(e.code).toBe('offset_regression');
    expect(e.fields).toMatchObject({ current: 12, requested: 11, partition: 0 });
    expect(await store.fetch('g', 't', 0)).toBe(12);
    // force: false is no force
    expect((await rejection(store.commit('g', 't', [{ partition: 0, offset: 0 }], { force: false }))).code).toBe('offset_regression');
  });

  it('applies nothing of a commit in which any entry would regress', async () => {
    const { store } = await fresh(kind);
    await store.commit('g', 't', [
      { partition: 0, offset: 5 },
      { partition: 1, offset: 5 },
    ]);
    expect((await rejection(store.commit('g', 't', [
      { partition: 0, offset: 9 },
      { partition: 1, offset: 4 },
      { partition: 2, offset: 1 },
    ]))).code).toBe('offset_regression');
    expect(await store.fetch('g', 't', 0)).toBe(5);
    expect(await store.fetch('g', 't', 1)).toBe(5);
    expect(await store.fetch('g', 't', 2)).toBeUndefined();
    // the regressing entry first: the same
    expect((await rejection(store.commit('g', 't', [{ partition: 1, offset: 4 }, { partition: 0, offset: 30 }]))).fields).toMatchObject({ partition: 1, current: 5, requested: 4 });
    expect(await store.fetch('g', 't', 0)).toBe(5);
  });

  it('force moves an offset down (admin reset)', async () => {
    const { store } = await fresh(kind);
    await store.commit('g', 't', [{ partition: 0, offset: 50 }, { partition: 1, offset: 50 }]);
    await store.commit('g', 't', [{ partition: 0, offset: 2 }, { partition: 1, offset: 70 }], { force: true });
    expect(await store.fetch('g', 't', 0)).toBe(2);
    expect(await store.fetch('g', 't', 1)).toBe(70);
    // monotonic again from the new values
    await store.commit('g', 't', [{ partition: 0, offset: 3 }]);
    expect(await store.fetch('g', 't', 0)).toBe(3);
    expect((await rejection(store.commit('g', 't', [{ partition: 1, offset: 69 }]))).code).toBe('offset_regression');
  });

  it('refuses bad input with invalid_parameter and stores nothing of it', async () => {
    const { store } = await fresh(kind);
    const cases: Array<[string, () => Promise<unknown>]> = [
      ['group', () => store.commit('', 't', [{ partition: 0, offset: 1 }])],
      ['topic', () => store.commit('g', '', [{ partition: 0, offset: 1 }])],
      ['partition', () => store.commit('g', 't', [{ partition: -1, offset: 1 }])],
      ['partition', () => store.commit('g', 't', [{ partition: 2 ** 31, offset: 1 }])],
      ['partition', () => store.commit('g', 't', [{ partition: 1.5, offset: 1 }])],
      ['offset', () => store.commit('g', 't', [{ partition: 0, offset: -1 }])],
      ['offset', () => store.commit('g', 't', [{ partition: 0, offset: 2 ** 53 }])],
      ['partition', () => store.commit('g', 't', [{ partition: 0, offset: 1 }, { partition: 0, offset: 2 }])],
      ['partition', () => store.commit('g', 't', [{ partition: 1, offset: 1 }, { partition: 1, offset: 1 }], { force: true })],
      ['entries', () => store.commit('g', 't', 'P0:1' as never)],
      ['group', () => store.fetch('', 't', 0)],
      ['partition', () => store.fetch('g', 't', -1)],
      ['group', () => store.deleteGroup('')],
      ['topic', () => store.deleteTopic('')],
      ['group', () => store.deleteTopic('t', ['a', ''])],
      ['groups', () => store.deleteTopic('t', 'a' as never)],
    ];
    for (const [param, call] of cases) {
      const e = await rejection(call());
      expect(e.code, `${param}: ${call}`).toBe('invalid_parameter');
      expect(e.fields.param, `${call}`).toBe(param);
    }
    expect(await store.loadAll()).toEqual([]);
  });

  it('deleteGroup removes that group only', async () => {
    const { store } = await fresh(kind);
    await store.commit('a', 't', [{ partition: 0, offset: 1 }, { partition: 1, offset: 2 }]);
    await store.commit('a', 'u', [{ partition: 0, offset: 3 }]);
    await store.commit('b', 't', [{ partition: 0, offset: 4 }]);
    await store.deleteGroup('a');
    await store.deleteGroup('never-existed');
    expect(await store.fetch('a', 't', 0)).toBeUndefined();
    expect(await store.fetch('a', 'u', 0)).toBeUndefined();
    expect(await store.fetch('b', 't', 0)).toBe(4);
    expect((await store.loadAll()).map((o) => o.group)).toEqual(['b']);
    // a deleted group starts over: a low offset is accepted again
    await store.commit('a', 't', [{ partition: 0, offset: 0 }]);
    expect(await store.fetch('a', 't', 0)).toBe(0);
  });

  it('deleteTopic removes that topic of every group, or of the groups given; a re-created topic starts over', async () => {
    const { backing, store } = await fresh(kind);
    await store.commit('a', 't', [{ partition: 0, offset: 10 }, { partition: 1, offset: 20 }]);
    await store.commit('a', 'u', [{ partition: 0, offset: 3 }]);
    await store.commit('b', 't', [{ partition: 0, offset: 4 }]);
    await store.commit('c', 't', [{ partition: 2, offset: 6 }]);
    await store.deleteTopic('t', ['a', 'never-existed']);
    expect(await store.fetch('a', 't', 0)).toBeUndefined();
    expect(await store.fetch('a', 't', 1)).toBeUndefined();
    expect(await store.fetch('a', 'u', 0)).toBe(3);
    expect(await store.fetch('b', 't', 0)).toBe(4);
    await store.deleteTopic('t');
    await store.deleteTopic('never-existed');
    const rows = () => store.loadAll().then((all) => all.map(({ commitTimestamp: _t, ...o }) => o));
    expect(await rows()).toEqual([{ group: 'a', topic: 'u', partition: 0, offset: 3 }]);
    // The topic re-created under the same name: a lower offset is no regression.
    await store.commit('a', 't', [{ partition: 0, offset: 1 }]);
    expect(await store.fetch('a', 't', 0)).toBe(1);
    if (!kind.durable) return;
    // Reopened (a restart), the deleted offsets stay deleted.
    await store.close();
    const again = await backing.open();
    expect((await again.loadAll()).map(({ commitTimestamp: _t, ...o }) => o).sort((x, y) => x.topic.localeCompare(y.topic))).toEqual([
      { group: 'a', topic: 't', partition: 0, offset: 1 },
      { group: 'a', topic: 'u', partition: 0, offset: 3 },
    ]);
    expect(await again.fetch('b', 't', 0)).toBeUndefined();
    await again.commit('c', 't', [{ partition: 2, offset: 0 }]);
    expect(await again.fetch('c', 't', 2)).toBe(0);
  });

  it(kind.durable ? 'keeps every commit for a store reopened on it (a restart)' : 'is not durable: a new store (a restart) has none of the commits', async () => {
    const { backing, store } = await fresh(kind);
    await store.commit('g', 't', [{ partition: 0, offset: 7 }, { partition: 3, offset: 1 }]);
    await store.commit('g', 't', [{ partition: 0, offset: 8 }]);
    await store.deleteGroup('gone');
    await store.close();
    const again = await backing.open();
    const loaded = (await again.loadAll()).map(({ commitTimestamp: _t, ...o }) => o).sort((a, b) => a.partition - b.partition);
    if (kind.durable) {
      expect(loaded).toEqual([
        { group: 'g', topic: 't', partition: 0, offset: 8 },
        { group: 'g', topic: 't', partition: 3, offset: 1 },
      ]);
      expect(await again.fetch('g', 't', 0)).toBe(8);
      // monotonic across the restart too
      expect((await rejection(again.commit('g', 't', [{ partition: 0, offset: 7 }]))).code).toBe('offset_regression');
    } else {
      expect(loaded).toEqual([]);
      expect(await again.fetch('g', 't', 0)).toBeUndefined();
    }
  });
});

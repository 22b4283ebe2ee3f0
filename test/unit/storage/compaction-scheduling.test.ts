import { pino } from 'pino';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { resolveConfig } from 'tributary-broker/common/config.js';
import { BrokerMetrics } from 'tributary-broker/common/metrics.js';
import { TopicManager, type TopicSpec } from 'tributary-broker/partition/topic-manager.js';
import { LocalMetadataStore } from 'tributary-broker/partition/metadata-store.js';
import { removeDir, tempDir } from '../../helpers/util.js';

let dir: string;

beforeEach(async () => {
  dir = await tempDir('trib-compact-sched-');
});
afterEach(async () => {
  await removeDir(dir);
});

function spec(name: string, cleanupPolicy: 'delete' | 'compact'): TopicSpec {
  return { name, partitions: 1, replicationFactor: 1, idempotent: false, partitioner: 'hash_key', retentionHours: 1, retentionBytes: -1, cleanupPolicy };
}

describe('TopicManager compaction scheduling', () => {
  it("compacts 'compact' topics (with small segments for internal ones) and applies retention to the others", async () => {
    const lines: Array<Record<string, unknown>> = [];
    const logger = pino({ level: 'info' }, { write: (s: string) => lines.push(JSON.parse(s)) });
    const config = resolveConfig({ dataDir: dir, segmentBytes: 1024 * 1024 * 1024, flush: 'os' });
    const store = new LocalMetadataStore(dir);
    await store.open();
    const tm = new TopicManager(store, config, logger, new BrokerMetrics());
    await tm.open();
    try {
      const internal = (await tm.create(spec('__compacted', 'compact'), { allowInternal: true })).topic.partition(0);
      const plain = (await tm.create(spec('plain', 'delete'))).topic.partition(0);
      expect(internal.log.options.segmentBytes).toBe(16 * 1024 * 1024);
      expect(plain.log.options.segmentBytes).toBe(1024 * 1024 * 1024);

      const old = Date.now() - 10 * 3600 * 1000;
      for (const p of [internal, plain]) {
        for (let i = 0; i < 50; i++) await p.append([{ key: Buffer.from(`k${i % 5}`), value: Buffer.from(`v${i}`), timestamp: old }]);
      }
      // Far enough ahead that both active segments roll by age, twice (the second run has closed segments).
      const later = Date.now() + 8 * 24 * 3600 * 1000;
      await tm.applyRetention(later);
      for (let i = 0; i < 5; i++) await internal.append([{ key: Buffer.from(`k${i}`), value: Buffer.from('new') }]);
      await tm.applyRetention(later + 8 * 24 * 3600 * 1000);

      const read = await internal.read(0, { maxRecords: 1000, maxBytes: 1 << 20, isolation: 'read_uncommitted' });
      expect(read.records.map((r) => `${r.key?.toString()}=${r.value.toString()}`)).toEqual(['k0=new', 'k1=new', 'k2=new', 'k3=new', 'k4=new']);
      expect(internal.earliest).toBe(0);
      // Run 1 keeps the latest of each key; run 2 drops those too, now superseded by the active segment.
      const logged = lines.filter((l) => l.msg === 'compacted log');
      expect(logged.map((l) => [l.topic, l.partition, l.recordsRemoved])).toEqual([
        ['__compacted', 0, 45],
        ['__compacted', 0, 5],
      ]);
      // The delete topic lost its expired segment to retention instead.
      expect(plain.earliest).toBe(50);
      expect(lines.some((l) => l.msg === 'retention deleted segments' && l.topic === 'plain')).toBe(true);
    } finally {
      await tm.close();
    }
  });

  it("drops tombstones after the topic's delete_retention_ms, else after the broker's --delete-retention-ms", async () => {
    const hour = 3600 * 1000;
    const config = resolveConfig({ dataDir: dir, segmentMs: 1000, flush: 'os', deleteRetentionMs: 10 * hour });
    const store = new LocalMetadataStore(dir);
    await store.open();
    const tm = new TopicManager(store, config, pino({ level: 'silent' }), new BrokerMetrics());
    await tm.open();
    try {
      const own = (await tm.create({ ...spec('__own', 'compact'), deleteRetentionMs: hour }, { allowInternal: true })).topic.partition(0);
      const byDefault = (await tm.create(spec('__default', 'compact'), { allowInternal: true })).topic.partition(0);
      const now = Date.now();
      for (const p of [own, byDefault]) {
        await p.append([{ key: Buffer.from('k'), value: Buffer.from('v1'), timestamp: now - 6 * hour }]);
        await p.append([{ key: Buffer.from('k'), value: Buffer.alloc(0), timestamp: now - 5 * hour }]);
        for (let i = 0; i < 5; i++) await p.append([{ key: Buffer.from(`other-${i}`), value: Buffer.from('x'), timestamp: now - 5 * hour }]);
      }
      // The active segments roll by age (segmentMs 1 s) and are compacted: the tombstone is 5 h old.
      await tm.applyRetention(now + 2000);
      const keys = async (p: typeof own) => (await p.read(0, { maxRecords: 100, maxBytes: 1 << 20, isolation: 'read_uncommitted' })).records.map((r) => `${r.key?.toString()}=${r.value.toString()}`);
      expect(await keys(own)).toEqual(['other-0=x', 'other-1=x', 'other-2=x', 'other-3=x', 'other-4=x']);
      expect(own.log.tombstoneHorizon).toBe(2);
      expect(await keys(byDefault)).toEqual(['k=', 'other-0=x', 'other-1=x', 'other-2=x', 'other-3=x', 'other-4=x']);
      expect(byDefault.log.tombstoneHorizon).toBe(0);
    } finally {
      await tm.close();
    }
  });
});

/**
 * ALTER_TOPIC below the command: the metadata store stores new retention settings (metadata.json, whole),
 * the TopicManager puts them into the open partitions' logs (PartitionLog.setRetention), and a change the
 * store's watch delivers (cluster mode) is applied the same way, the store's latest winning.
 */
import fs from 'node:fs/promises';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { MAX_RETENTION_HOURS } from 'tributary-broker/common/config.js';
import type { TopicManager } from 'tributary-broker/partition/topic-manager.js';
import { LocalMetadataStore, METADATA_RESERVE_FILE, type TopicDefinition, alteredDefinition } from 'tributary-broker/partition/metadata-store.js';
import { writeFileAtomic } from 'tributary-broker/storage/atomic-file.js';
import { PartitionLog } from 'tributary-broker/storage/partition-log.js';
import { openTopicManager } from '../../helpers/topic-manager.js';
import { removeDir, tempDir } from '../../helpers/util.js';

let dir: string;
let topics: TopicManager;
let store: LocalMetadataStore;

const spec = { name: 't', partitions: 2, replicationFactor: 1, idempotent: false, partitioner: 'hash_key' as const, retentionHours: 24, retentionBytes: -1, cleanupPolicy: 'delete' as const };

beforeEach(async () => {
  dir = await tempDir('trib-alter-');
  ({ store, topics } = await openTopicManager(dir));
});
afterEach(async () => {
  await topics.close();
  await removeDir(dir);
});

describe('alteredDefinition', () => {
  const def: TopicDefinition = { ...spec, topicId: 'id', createdAt: 1, deleteRetentionMs: 10 };
  it('replaces only what is given; null deleteRetentionMs drops the topic\'s own', () => {
    expect(alteredDefinition(def, { retentionBytes: 5 })).toEqual({ ...def, retentionBytes: 5 });
    expect(alteredDefinition(def, { retentionHours: -1, deleteRetentionMs: 0 })).toEqual({ ...def, retentionHours: -1, deleteRetentionMs: 0 });
    const dropped = alteredDefinition(def, { deleteRetentionMs: null });
    expect('deleteRetentionMs' in dropped).toBe(false);
    expect(def.deleteRetentionMs).toBe(10);
  });
  it('refuses values a definition may not hold', () => {
    for (const change of [{ retentionHours: -2 }, { retentionHours: MAX_RETENTION_HOURS + 1 }, { retentionBytes: 1.5 }, { deleteRetentionMs: -1 }, { retentionBytes: Number.MAX_SAFE_INTEGER + 1 }]) {
      expect(() => alteredDefinition(def, change), JSON.stringify(change)).toThrow(expect.objectContaining({ code: 'invalid_parameter' }));
    }
  });
});

describe('TopicManager.alterTopic', () => {
  it('stores the change in metadata.json and puts it into every partition log', async () => {
    await topics.create(spec);
    const t = await topics.alterTopic('t', { retentionHours: 2, retentionBytes: 4096 });
    expect(t.def).toMatchObject({ retentionHours: 2, retentionBytes: 4096 });
    for (const p of t.partitions) expect(p.log.retention).toEqual({ retentionMs: 2 * 3_600_000, retentionBytes: 4096 });
    const file = JSON.parse(await fs.readFile(path.join(dir, 'metadata.json'), 'utf8')) as { topics: TopicDefinition[] };
    expect(file.topics.find((d) => d.name === 't')).toMatchObject({ retentionHours: 2, retentionBytes: 4096 });
    await topics.alterTopic('t', { retentionHours: -1 });
    expect(topics.get('t').partitions[0]!.log.retention).toEqual({ retentionMs: -1, retentionBytes: 4096 });
  });

  it('refuses an unknown topic, storing nothing', async () => {
    await expect(topics.alterTopic('nope', { retentionHours: 1 })).rejects.toMatchObject({ code: 'topic_not_found' });
    expect(store.getTopic('nope')).toBeUndefined();
  });

  it("applies a change the store's watch delivers, the store's latest winning over an older event", async () => {
    topics.followStore(() => {});
    await topics.create(spec);
    const old = store.getTopic('t')!;
    await store.alterTopic('t', { retentionBytes: 100 });
    // A stale event after the change: the partitions keep the latest settings.
    store.events.emit('topic-updated', old);
    await expect.poll(() => topics.get('t').partitions[1]!.log.retention.retentionBytes).toBe(100);
    expect(topics.get('t').def.retentionBytes).toBe(100);
  });
});

describe('a growth from a definition older than a retention change', () => {
  it('opens its partitions with the latest retention', async () => {
    topics.followStore(() => {});
    await topics.create(spec);
    await topics.alterTopic('t', { retentionBytes: 100 });
    const before = { ...store.getTopic('t')!, retentionBytes: -1 };
    // As the etcd store does: its copy holds the latest definition (3 partitions, the new retention) before
    // it tells of a growth, here delivered with a definition from before the change.
    (store as unknown as { topics: Map<string, TopicDefinition> }).topics = new Map([['t', { ...before, partitions: 3, retentionBytes: 100 }]]);
    store.events.emit('topic-updated', { ...before, partitions: 3 });
    await expect.poll(() => topics.get('t').partitions.length).toBe(3);
    await expect.poll(() => topics.get('t').partitions.map((p) => p.log.retention.retentionBytes)).toEqual([100, 100, 100]);
    expect(topics.get('t').def).toMatchObject({ partitions: 3, retentionBytes: 100 });
  });
});

describe('LocalMetadataStore.alterTopic on a full disk', () => {
  it('goes through on the reserve (a lower retention is a way out of a full disk), and a failed write changes nothing', async () => {
    const sub = path.join(dir, 'full');
    let full = false;
    let fail = false;
    const meta = new LocalMetadataStore(sub, async (file, data) => {
      if (fail) throw Object.assign(new Error('EIO'), { code: 'EIO' });
      const reserved = (await fs.readdir(sub)).includes(METADATA_RESERVE_FILE);
      if (full && reserved) throw Object.assign(new Error('ENOSPC'), { code: 'ENOSPC' });
      await writeFileAtomic(file, data);
    });
    await meta.open();
    await meta.createTopic(spec);
    full = true;
    expect(await meta.alterTopic('t', { retentionBytes: 1 })).toMatchObject({ retentionBytes: 1 });
    fail = true;
    await expect(meta.alterTopic('t', { retentionBytes: 2 })).rejects.toMatchObject({ code: 'storage_error' });
    expect(meta.getTopic('t')).toMatchObject({ retentionBytes: 1 });
    const again = new LocalMetadataStore(sub);
    await again.open();
    expect(again.getTopic('t')).toMatchObject({ retentionBytes: 1 });
  });
});

describe('PartitionLog.setRetention', () => {
  it('takes effect at the next retention pass', async () => {
    const logDir = path.join(dir, 'log');
    const log = await PartitionLog.open(logDir, { segmentBytes: 1000, retentionBytes: -1, tailCacheBytes: 0 });
    try {
      for (let i = 0; i < 20; i++) await log.append([{ key: null, value: Buffer.alloc(200, i), headers: [], timestamp: 0 }]);
      log.setHighWatermark(log.logEndOffset);
      expect((await log.applyRetention()).deletedSegments).toBe(0);
      log.setRetention({ retentionMs: -1, retentionBytes: 0 });
      expect((await log.applyRetention()).deletedSegments).toBeGreaterThan(0);
      expect(log.logStartOffset).toBeGreaterThan(0);
      expect(() => log.setRetention({ retentionMs: -2, retentionBytes: 0 })).toThrow(expect.objectContaining({ code: 'invalid_parameter' }));
    } finally {
      await log.close();
    }
  });
});

describe('ALTER_TOPIC permission', () => {
  it('needs admin, as ADD_PARTITIONS does', async () => {
    const { requirementOf } = await import('tributary-broker/broker/security.js');
    for (const cmd of ['ALTER_TOPIC', 'ADD_PARTITIONS']) expect(requirementOf(cmd, new Map([['topic', 't']])), cmd).toEqual({ permissions: ['admin'] });
  });
});

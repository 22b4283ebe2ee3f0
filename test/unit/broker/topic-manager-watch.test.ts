/**
 * Cluster mode opens topics from the metadata store's watch. The creation of a topic and the growth of
 * its partitions can arrive back to back, while the creation's open is still under way: the growth must
 * not be lost (a broker would otherwise never open the added partitions).
 */
import fs from 'node:fs/promises';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { TopicManager } from 'tributary-broker/partition/topic-manager.js';
import type { LocalMetadataStore, TopicDefinition } from 'tributary-broker/partition/metadata-store.js';
import { openTopicManager } from '../../helpers/topic-manager.js';
import { removeDir, tempDir } from '../../helpers/util.js';

let dir: string;
let topics: TopicManager;
let store: LocalMetadataStore;

beforeEach(async () => {
  dir = await tempDir('trib-topics-watch-');
  ({ store, topics } = await openTopicManager(dir));
});
afterEach(async () => {
  await topics.close();
  await removeDir(dir);
});

const def = (partitions: number): TopicDefinition => ({
  name: 'grow',
  partitions,
  replicationFactor: 3,
  idempotent: false,
  partitioner: 'hash_key',
  retentionHours: 168,
  retentionBytes: -1,
  cleanupPolicy: 'delete',
  topicId: 'grow-id',
  createdAt: 1,
});

describe('TopicManager following the store', () => {
  it('opens the partitions of a growth that arrives while the creation is still being opened', async () => {
    const opened: number[] = [];
    topics.followStore((t) => opened.push(t.partitions.length));
    const store = (topics as unknown as { store: LocalMetadataStore }).store;
    // As the etcd store does: its copy holds the latest definition before it tells of it.
    (store as unknown as { topics: Map<string, TopicDefinition> }).topics = new Map([['grow', def(3)]]);
    store.events.emit('topic-created', def(1));
    store.events.emit('topic-updated', def(3));
    await expect.poll(() => topics.tryGet('grow')?.partitions.length, { timeout: 5000 }).toBe(3);
    expect(topics.get('grow').partitions.map((p) => p.id)).toEqual([0, 1, 2]);
    await expect.poll(() => opened.length).toBe(2);
  });
});

describe('a topic whose partitions cannot be opened', () => {
  it('is not left defined: CREATE fails, nothing is stored, and a CREATE once the disk allows it works', async () => {
    // The directory the partitions go in cannot be made: a file stands where the logs directory is.
    const logs = path.join(dir, 'logs');
    await fs.rm(logs, { recursive: true, force: true });
    await fs.writeFile(logs, '');
    const spec = { name: 'ghost', partitions: 2, replicationFactor: 1, idempotent: false, partitioner: 'hash_key' as const, retentionHours: -1, retentionBytes: -1, cleanupPolicy: 'delete' as const };
    await expect(topics.create(spec)).rejects.toThrow();
    expect(topics.tryGet('ghost')).toBeUndefined();
    expect(store.getTopic('ghost')).toBeUndefined();
    await fs.rm(logs);
    const { topic, created } = await topics.create(spec);
    expect(created).toBe(true);
    expect(topic.partitions).toHaveLength(2);
  });
});

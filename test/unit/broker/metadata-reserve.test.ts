/**
 * metadata.json on a full disk (docs/operations.md, "A full disk"): a write that fails with ENOSPC releases
 * the reserve file and tries once more, so a topic can still be deleted to free space; a write that fails
 * anyway is a retriable storage_error that changes nothing, and the reserve is made again once a write succeeds.
 */
import { readdir, stat } from 'node:fs/promises';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { LocalMetadataStore, METADATA_RESERVE_FILE } from 'tributary-broker/partition/metadata-store.js';
import { writeFileAtomic } from 'tributary-broker/storage/atomic-file.js';
import { removeDir, tempDir } from '../../helpers/util.js';

let dir: string;
beforeEach(async () => {
  dir = await tempDir('trib-meta-reserve-');
});
afterEach(async () => {
  await removeDir(dir);
});

const enospc = () => Object.assign(new Error('ENOSPC: no space left on device, write'), { code: 'ENOSPC' });
const def = (name: string) => ({
  name,
  partitions: 1,
  replicationFactor: 1,
  idempotent: false,
  partitioner: 'hash_key' as const,
  retentionHours: -1,
  retentionBytes: -1,
  cleanupPolicy: 'delete' as const,
});

describe('metadata.json on a full disk', () => {
  it('a write that finds the disk full releases the reserve and goes through; the reserve comes back after a later write', async () => {
    let full = false;
    let wroteInReserve = 0;
    const store = new LocalMetadataStore(dir, async (file, data) => {
      // Full until the reserve is gone (as on a real disk, where it is the space freed).
      const reserved = (await readdir(dir)).includes(METADATA_RESERVE_FILE);
      if (full && reserved) throw enospc();
      if (full) wroteInReserve++;
      await writeFileAtomic(file, data);
    });
    await store.open();
    expect((await stat(path.join(dir, METADATA_RESERVE_FILE))).size).toBe(1 << 20);
    await store.createTopic(def('a'));
    full = true;
    await store.deleteTopic('a');
    expect(store.listTopics()).toEqual([]);
    expect(wroteInReserve).toBe(1);
    full = false;
    await store.createTopic(def('b'));
    // Made again after the write (here at once: this stand-in disk has room for it).
    expect((await stat(path.join(dir, METADATA_RESERVE_FILE))).size).toBe(1 << 20);
    // What was written is what a reopen reads.
    const again = new LocalMetadataStore(dir);
    await again.open();
    expect(again.listTopics().map((t) => t.name)).toEqual(['b']);
  });

  it('a write that fails anyway is a retriable storage_error and changes nothing', async () => {
    let fail = false;
    const store = new LocalMetadataStore(dir, async (file, data) => {
      if (fail) throw enospc();
      await writeFileAtomic(file, data);
    });
    await store.open();
    await store.createTopic(def('a'));
    fail = true;
    await expect(store.deleteTopic('a')).rejects.toMatchObject({ code: 'storage_error', retriable: true });
    expect(store.listTopics().map((t) => t.name)).toEqual(['a']);
    fail = false;
    await store.deleteTopic('a');
    expect(store.listTopics()).toEqual([]);
  });
});

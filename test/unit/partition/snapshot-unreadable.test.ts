/**
 * A partition's producer and transaction snapshots that are there but cannot be read at open (EMFILE at a
 * restart near the fd limit, EIO): the snapshot may have covered a producer whose last batch, or a
 * transaction whose first record, is in an older segment, so the whole log is replayed (as for a missing
 * or damaged one: snapshot-damaged.test.ts).
 */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { RecordAttr } from 'tributary-protocol/record.js';
import { loadProducerState, loadTxnIndex, PRODUCER_SNAPSHOT_FILE, TXN_SNAPSHOT_FILE } from 'tributary-broker/partition/partition-snapshots.js';
import { PartitionLog } from 'tributary-broker/storage/partition-log.js';
import { removeDir, tempDir } from '../../helpers/util.js';

/** Reads of these files fail with EMFILE while set. */
const unreadable = vi.hoisted(() => new Set<string>());
vi.mock('node:fs/promises', async (importOriginal) => {
  const fs = await importOriginal<typeof import('node:fs/promises')>();
  const readFile = (async (...args: Parameters<typeof fs.readFile>) => {
    if (unreadable.has(String(args[0]))) throw Object.assign(new Error(`EMFILE: too many open files, open '${String(args[0])}'`), { code: 'EMFILE' });
    return fs.readFile(...args);
  }) as typeof fs.readFile;
  return { ...fs, readFile, default: { ...fs, readFile } };
});

let dir: string;
let log: PartitionLog;
beforeEach(async () => {
  dir = await tempDir('trib-snap-unreadable-');
  log = await PartitionLog.open(dir, { flush: 'os', segmentBytes: 300 });
});
afterEach(async () => {
  unreadable.clear();
  await log.close().catch(() => {});
  await removeDir(dir);
});

const pad = Buffer.alloc(200);

describe('a snapshot that cannot be read', () => {
  it('has the producer state rebuilt from the log start, not the last segment', async () => {
    // Producer 7's only batch is in the first segment; the second holds plain records.
    await log.append([{ key: null, value: pad, producerId: '7', epoch: 0, sequence: 0 }]);
    await log.append([{ key: null, value: pad }]);
    expect(log.segmentInfos().length).toBe(2);
    const path = join(dir, PRODUCER_SNAPSHOT_FILE);
    writeFileSync(path, JSON.stringify({ offset: 0, producers: [] }));
    unreadable.add(path);
    const { state } = await loadProducerState(log);
    expect(state.describe('7')).toEqual({ epoch: 0, lastSeq: 0 });
  });

  it('has the transaction index rebuilt from the log start, so a transaction open in an older segment stays open', async () => {
    await log.append([{ key: null, value: pad, producerId: '9', epoch: 0, sequence: 0, attributes: RecordAttr.TRANSACTIONAL }]);
    await log.append([{ key: null, value: pad }]);
    expect(log.segmentInfos().length).toBe(2);
    const path = join(dir, TXN_SNAPSHOT_FILE);
    writeFileSync(path, JSON.stringify({ offset: 0, open: [], aborted: [] }));
    unreadable.add(path);
    const { state } = await loadTxnIndex(log);
    expect(state.firstUnstableOffset()).toBe(0);
  });
});

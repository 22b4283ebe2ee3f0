/**
 * A replica's leader epoch history once retention moved its log start: the entries of epochs whose records
 * are all gone go, the last of them kept as starting at the new log start (Kafka's
 * LeaderEpochFileCache.truncateFromStart), on disk too; and a history a crash left untrimmed (between a
 * retention pass and the checkpoint's flush) is trimmed when it is loaded.
 */
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import type { LogRecord } from 'tributary-protocol/record.js';
import type { PartitionState } from 'tributary-broker/cluster/partition-state.js';
import type { ReplicaManager } from 'tributary-broker/cluster/replica-manager.js';
import { Partition } from 'tributary-broker/partition/partition.js';
import { LeaderEpochCache } from 'tributary-broker/storage/leader-epoch-cache.js';
import { PartitionLog } from 'tributary-broker/storage/partition-log.js';
import { replicaRecord, testReplicaManager } from '../../helpers/replica-harness.js';
import { removeDir, tempDir } from '../../helpers/util.js';

let dir: string;
const cleanup: Array<() => Promise<unknown>> = [];
beforeEach(async () => {
  dir = await tempDir('trib-epoch-ret-');
});
afterEach(async () => {
  for (const c of cleanup.splice(0).reverse()) await c().catch(() => {});
  await removeDir(dir);
});

/** Records `from`..`from + count - 1` as one append (stamped 1 ms after the epoch: past any retention). */
const appendOf = (from: number, count: number): LogRecord[] => Array.from({ length: count }, (_, i) => replicaRecord(from + i, i === count - 1));

/** Epoch 1 from 0, 2 from 12, 3 from 27 (the latest, this broker's as leader). */
const CHECKPOINT = 'tributary-leader-epoch 1\n3\n1 0\n2 12\n3 27\n';
const TRIMMED = [
  [2, 25],
  [3, 27],
];

/** A replicated partition of 6 segments of 5 records (offsets 0..29), its epoch history CHECKPOINT. */
async function openPartition(rdir: string): Promise<Partition> {
  // retention.ms 1 s: every closed segment (records stamped 1) is past it; the active one (25..29) stays.
  const log = await PartitionLog.open(rdir, { segmentBytes: 1, retentionMs: 1000 });
  const partition = new Partition('t', 0, log, { replicated: true });
  cleanup.push(() => partition.close());
  await partition.whenProducerStateReady();
  await partition.whenTxnIndexReady();
  for (let o = 0; o < 30; o += 5) await partition.appendReplica(appendOf(o, 5));
  await writeFile(join(rdir, 'leader-epoch.checkpoint'), CHECKPOINT);
  return partition;
}

/** A replica manager leading t[0] at epoch 3 over `partition`. */
async function lead(partition: Partition): Promise<ReplicaManager> {
  const s: PartitionState = { replicas: [0], leader: 0, leaderEpoch: 3, isr: [0], hwm: 0 };
  const { rm } = testReplicaManager(0, () => s);
  const deps = (rm as unknown as { deps: { topics: unknown; states: { events: NodeJS.EventEmitter } } }).deps;
  deps.topics = { tryGet: (name: string) => (name === 't' ? { partitions: [partition], def: {} } : undefined) };
  cleanup.push(() => rm.close());
  deps.states.events.emit('changed', { topic: 't', partition: 0, value: s, modRevision: 1 });
  await vi.waitFor(() => expect(rm.isLeader('t', 0)).toBe(true));
  return rm;
}

function epochsOf(rm: ReplicaManager): LeaderEpochCache {
  return (rm as unknown as { replicas: Map<string, { epochs: LeaderEpochCache }> }).replicas.get('t\u00000')!.epochs;
}

async function onDisk(rdir: string): Promise<unknown> {
  const c = new LeaderEpochCache(rdir);
  await c.load();
  return c.entries();
}

describe('leader epochs after retention', () => {
  it('a retention pass trims the history from the start, on disk too', async () => {
    const rdir = join(dir, 'replica');
    const partition = await openPartition(rdir);
    const rm = await lead(partition);
    const epochs = epochsOf(rm);
    expect(partition.highWatermark).toBe(30);
    expect(epochs.entries()).toEqual([
      [1, 0],
      [2, 12],
      [3, 27],
    ]);
    expect(await partition.applyRetention(Date.now())).toMatchObject({ deletedSegments: 5 });
    expect(partition.earliest).toBe(25);
    expect(epochs.entries()).toEqual(TRIMMED);
    // Asked where epoch 1 ended: at the log start, not at offset 12, which the log no longer has.
    expect(epochs.endOffsetFor(1, partition.logEndOffset)).toEqual({ epoch: 1, endOffset: 25 });
    await vi.waitFor(async () => expect(await onDisk(rdir)).toEqual(TRIMMED));
  });

  it('a history left untrimmed by a crash after a retention pass is trimmed at load', async () => {
    const rdir = join(dir, 'replica');
    const partition = await openPartition(rdir);
    // Retention ran with no replica to trim the history (as if the broker died before its flush).
    partition.setReplicatedHighWatermark(30);
    expect(await partition.applyRetention(Date.now())).toMatchObject({ deletedSegments: 5 });
    expect(await onDisk(rdir)).toEqual([
      [1, 0],
      [2, 12],
      [3, 27],
    ]);
    const rm = await lead(partition);
    expect(epochsOf(rm).entries()).toEqual(TRIMMED);
    expect(epochsOf(rm).endOffsetFor(2, partition.logEndOffset)).toEqual({ epoch: 2, endOffset: 27 });
  });
});

/**
 * A replica's leader epoch history on top of a log recovery cut (a crash under --flush interval or os): the
 * epochs that started past the new log end never reached it, and go before the replica leads or follows
 * (leader-epoch-cache.ts: "After opening a log that recovery may have cut, call truncateFromEnd").
 */
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import type { PartitionState } from 'tributary-broker/cluster/partition-state.js';
import type { ReplicaManager } from 'tributary-broker/cluster/replica-manager.js';
import { Partition } from 'tributary-broker/partition/partition.js';
import { LeaderEpochCache } from 'tributary-broker/storage/leader-epoch-cache.js';
import { PartitionLog } from 'tributary-broker/storage/partition-log.js';
import { replicaAppend, testReplicaManager } from '../../helpers/replica-harness.js';
import { removeDir, tempDir } from '../../helpers/util.js';

let dir: string;
const cleanup: Array<() => Promise<unknown>> = [];
beforeEach(async () => {
  dir = await tempDir('trib-epoch-cut-');
});
afterEach(async () => {
  for (const c of cleanup.splice(0).reverse()) await c().catch(() => {});
  await removeDir(dir);
});

describe('leader epochs after a recovery cut', () => {
  it('a replica whose log was cut below the start of its latest epoch drops that epoch before it leads again', async () => {
    const rdir = join(dir, 'replica');
    const log = await PartitionLog.open(rdir, { flush: 'interval' });
    const partition = new Partition('t', 0, log, { replicated: true });
    // Epoch 1 wrote offsets 0..9; epoch 2 started at 10, and a power loss cut the log back to 8.
    await partition.appendReplica(replicaAppend(8));
    await writeFile(join(rdir, 'leader-epoch.checkpoint'), 'tributary-leader-epoch 1\n2\n1 0\n2 10\n');
    const s: PartitionState = { replicas: [0, 1], leader: 0, leaderEpoch: 2, isr: [0, 1], hwm: 0 };
    const { rm } = testReplicaManager(0, () => s);
    const deps = (rm as unknown as { deps: { topics: unknown; states: { events: NodeJS.EventEmitter } } }).deps;
    deps.topics = { tryGet: (name: string) => (name === 't' ? { partitions: [partition], def: {} } : undefined) };
    cleanup.push(
      () => rm.close(),
      () => log.close(),
    );
    // The broker restarts into the epoch it led before the crash (no election happened meanwhile).
    deps.states.events.emit('changed', { topic: 't', partition: 0, value: s, modRevision: 1 });
    await vi.waitFor(() => expect(rm.isLeader('t', 0)).toBe(true));
    // Offsets 8 and on are written under epoch 2 from now on: the history must say epoch 2 starts at 8, or
    // a follower holding epoch 1's records 8 and 9 keeps them beside this leader's different ones.
    const onDisk = new LeaderEpochCache(rdir);
    await onDisk.load();
    expect(onDisk.entries()).toEqual([
      [1, 0],
      [2, 8],
    ]);
    expect(replicaOf(rm).epochs.endOffsetFor(1, partition.logEndOffset)).toEqual({ epoch: 1, endOffset: 8 });
  });
});

function replicaOf(rm: ReplicaManager) {
  return (rm as unknown as { replicas: Map<string, { epochs: LeaderEpochCache }> }).replicas.get('t\u00000')!;
}

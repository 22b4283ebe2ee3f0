/**
 * Taking the lead and growing the ISR without losing acknowledged records (docs/architecture.md, "Cluster
 * mode"): a replica leads only once the new epoch is in its epoch file (a restart with a history lacking it
 * would keep records a later leader overwrote), and a follower rejoins the ISR only once it reached the start
 * of the leader's epoch as well as the HWM, which a new leader may only have heard lagging (KAFKA-7128).
 */
import { mkdir } from 'node:fs/promises';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import type { PartitionState } from 'tributary-broker/cluster/partition-state.js';
import type { Replica } from 'tributary-broker/cluster/replica-types.js';
import { Partition } from 'tributary-broker/partition/partition.js';
import { LeaderEpochCache } from 'tributary-broker/storage/leader-epoch-cache.js';
import { PartitionLog } from 'tributary-broker/storage/partition-log.js';
import { replicaAppend, testReplica, testReplicaManager } from '../../helpers/replica-harness.js';
import { removeDir, tempDir } from '../../helpers/util.js';

let dir: string;
const cleanup: Array<() => Promise<unknown>> = [];
beforeEach(async () => {
  dir = await tempDir('trib-leadership-');
});
afterEach(async () => {
  for (const c of cleanup.splice(0).reverse()) await c().catch(() => {});
  await removeDir(dir);
});

/** Broker 0 and its replica of t[0] in state `s`, not leading yet; `promote()` takes the lead as a state change would. */
async function setup(s: PartitionState) {
  const { rm, cas, errors, host } = testReplicaManager(0, () => s);
  const rdir = join(dir, 'replica');
  const log = await PartitionLog.open(rdir, { flush: 'always' });
  const partition = new Partition('t', 0, log, { replicated: true });
  partition.enableReplication(() => {});
  const r = testReplica(partition, { leaderEpoch: s.leaderEpoch, leaderId: s.leader, isr: s.isr, replicas: s.replicas });
  host(r);
  cleanup.push(
    () => rm.close(),
    () => log.close(),
  );
  const promote = () => (rm as unknown as { promote(r: Replica): void }).promote(r);
  return { rm, r, partition, rdir, cas, errors, promote };
}

describe('taking the lead', () => {
  it('leads only once the new epoch is in the epoch file, and not at all when that write fails', async () => {
    const { rm, r, partition, rdir, errors, promote } = await setup({ replicas: [1, 0, 2], leader: 0, leaderEpoch: 2, isr: [0, 1, 2], hwm: 0 });
    // As a follower under epoch 1 it took the leader's history and 10 records.
    r.epochs.replaceWith([[1, 0]]);
    await r.epochs.flush();
    await partition.appendReplica(replicaAppend(10));
    // The epoch file cannot be written (its temp path is a directory: EISDIR).
    await mkdir(join(rdir, 'leader-epoch.checkpoint.tmp'));
    promote();
    expect(rm.isLeader('t', 0)).toBe(false);
    await vi.waitFor(() => expect(errors.join('')).toMatch(/taking the lead failed/));
    expect(rm.isLeader('t', 0)).toBe(false);
    const onDisk = new LeaderEpochCache(rdir);
    await onDisk.load();
    expect(onDisk.entries()).toEqual([[1, 0]]);
  });

  it('leads once the epoch is on disk', async () => {
    const { rm, r, partition, rdir, promote } = await setup({ replicas: [1, 0, 2], leader: 0, leaderEpoch: 2, isr: [0, 1, 2], hwm: 0 });
    r.epochs.replaceWith([[1, 0]]);
    await r.epochs.flush();
    await partition.appendReplica(replicaAppend(10));
    const roles = vi.fn();
    rm.events.on('role', roles);
    promote();
    await vi.waitFor(() => expect(roles).toHaveBeenCalled());
    expect(rm.isLeader('t', 0)).toBe(true);
    const onDisk = new LeaderEpochCache(rdir);
    await onDisk.load();
    expect(onDisk.entries()).toEqual([
      [1, 0],
      [2, 10],
    ]);
  });
});

describe('ISR expansion', () => {
  it("adds a follower only once it reached the start of the leader's epoch too, not just the HWM it heard", async () => {
    // Under the previous leader offsets 0..9 were acknowledged; this replica, leading epoch 2 from 10, heard HWM 7 only.
    const { rm, r, partition, cas, promote } = await setup({ replicas: [0, 2, 1], leader: 0, leaderEpoch: 2, isr: [0, 1], hwm: 7 });
    r.epochs.replaceWith([[1, 0]]);
    await r.epochs.flush();
    await partition.appendReplica(replicaAppend(10));
    partition.setReplicatedHighWatermark(7);
    const roles = vi.fn();
    rm.events.on('role', roles);
    promote();
    await vi.waitFor(() => expect(roles).toHaveBeenCalled());
    expect(partition.highWatermark).toBe(7);
    // Broker 2, out of the ISR with its log ending at 7, fetches: at the HWM, below the epoch's start.
    rm.followerFetch('t', 0, 2, 2, 7);
    await r.isrChange;
    expect(cas).toEqual([]);
    expect(r.isr).toEqual([0, 1]);
    // Once it has everything up to the epoch's start, it is in sync.
    rm.followerFetch('t', 0, 2, 2, 10);
    await r.isrChange;
    expect(cas.at(-1)?.isr).toEqual([0, 1, 2]);
  });
});

/**
 * Growing the ISR without losing acknowledged records (docs/architecture.md, "Cluster mode"): a follower
 * rejoins the ISR only once it reached the start of the leader's epoch as well as the HWM, which a new leader
 * may only have heard lagging (KAFKA-7128).
 */
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import type { PartitionState } from 'tributary-broker/cluster/partition-state.js';
import type { Replica } from 'tributary-broker/cluster/replica-types.js';
import { Partition } from 'tributary-broker/partition/partition.js';
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
  const r = testReplica(partition, rdir, { leaderEpoch: s.leaderEpoch, leaderId: s.leader, isr: s.isr, replicas: s.replicas });
  host(r);
  cleanup.push(
    () => rm.close(),
    () => log.close(),
  );
  const promote = () => (rm as unknown as { promote(r: Replica): void }).promote(r);
  return { rm, r, partition, rdir, cas, errors, promote };
}

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

/**
 * When a leader may answer acks=all (docs/architecture.md, "Cluster mode"): only while the ISR holds at
 * least min_insync_replicas once the HWM passed the record (Kafka's NOT_ENOUGH_REPLICAS_AFTER_APPEND), and
 * with a follower being added to the ISR counted in the HWM from the moment the expansion is sent, since etcd
 * may list it (and the controller elect it) before the compare-and-set's answer arrives (KIP-497). And
 * acks=1 after a pause of the leader's process: only once etcd confirmed its lease and still names it.
 */
import { join } from 'node:path';
import { afterEach, beforeEach, expect, it, vi } from 'vitest';
import { nextLeadership } from 'tributary-broker/cluster/controller.js';
import type { PartitionState } from 'tributary-broker/cluster/partition-state.js';
import type { Replica } from 'tributary-broker/cluster/replica-types.js';
import { Partition } from 'tributary-broker/partition/partition.js';
import { PartitionLog } from 'tributary-broker/storage/partition-log.js';
import { testReplica, testReplicaManager } from '../../helpers/replica-harness.js';
import { removeDir, tempDir } from '../../helpers/util.js';

let dir: string;
const cleanup: Array<() => Promise<unknown>> = [];
beforeEach(async () => {
  dir = await tempDir('trib-ack-rules-');
});
afterEach(async () => {
  for (const c of cleanup.splice(0).reverse()) await c().catch(() => {});
  await removeDir(dir);
});

const rec = (i: number) => ({ key: null, value: Buffer.from(`v${i}`) });

/** Broker 0 leading t[0] at epoch 2 in `etcd()`'s state (min_insync_replicas 2); `etcdRead`: etcd itself, when the watch lags. */
async function leader(
  etcd: () => PartitionState,
  compareAndSet?: (next: PartitionState) => Promise<{ ok: boolean; modRevision?: number }>,
  topicId?: string,
  etcdRead?: () => PartitionState,
) {
  const s = etcd();
  const { rm, host, registry } = testReplicaManager(0, etcd, undefined, compareAndSet, etcdRead);
  const log = await PartitionLog.open(join(dir, 'p'), { flush: 'always' });
  const partition = new Partition('t', 0, log, { replicated: true });
  partition.enableReplication(() => {});
  const r = testReplica(partition, { role: 'none', leaderEpoch: s.leaderEpoch, leaderId: 0, isr: s.isr, replicas: s.replicas, topicId });
  host(r);
  cleanup.push(
    () => rm.close(),
    () => log.close(),
  );
  (rm as unknown as { promote(r: Replica): void }).promote(r);
  await vi.waitFor(() => expect(rm.isLeader('t', 0)).toBe(true));
  const apply = (value: PartitionState, modRevision: number) =>
    (rm as unknown as { apply(e: unknown): void }).apply({ topic: 't', partition: 0, value, modRevision });
  return { rm, r, partition, apply, registry };
}

it('an acks=all record the ISR shrank below min_insync_replicas under is refused, not acknowledged', async () => {
  let s: PartitionState = { replicas: [0, 1, 2], leader: 0, leaderEpoch: 2, isr: [0, 1], hwm: 0 };
  const { rm, r, partition, apply } = await leader(() => s);
  rm.checkMinIsr(r);
  const { lastOffset } = await partition.append([rec(0)]);
  const acked = rm.waitReplicated('t', 0, 2, lastOffset, 5_000);
  // Broker 1 stops fetching and leaves the ISR: the HWM is the leader's own end, the record on one broker.
  s = { ...s, isr: [0] };
  apply(s, 2);
  expect(partition.highWatermark).toBe(1);
  await expect(acked).rejects.toMatchObject({ code: 'NOT_ENOUGH_REPLICAS' });
  // So is one whose HWM had passed already when it asked.
  await expect(rm.waitReplicated('t', 0, 2, lastOffset, 5_000)).rejects.toMatchObject({ code: 'NOT_ENOUGH_REPLICAS' });
});

it('counts a follower being added to the ISR in the HWM before the expansion is answered', async () => {
  // Broker 1 in sync, broker 2 (second in replica order) out of the ISR.
  let etcd: PartitionState = { replicas: [0, 2, 1], leader: 0, leaderEpoch: 2, isr: [0, 1], hwm: 0 };
  let answer!: () => void;
  // The compare-and-set commits in etcd at once; its answer reaches the leader only on `answer()`.
  const { rm, partition, apply } = await leader(
    () => etcd,
    async (next) => {
      etcd = next;
      await new Promise<void>((res) => {
        answer = res;
      });
      return { ok: true, modRevision: 2 };
    },
  );
  await partition.append(Array.from({ length: 10 }, (_, i) => rec(i)));
  rm.followerFetch('t', 0, 1, 2, 10);
  expect(partition.highWatermark).toBe(10);
  // Broker 2 reaches the HWM: the leader sends ISR [0,1,2], which etcd has at once.
  rm.followerFetch('t', 0, 2, 2, 10);
  await vi.waitFor(() => expect(etcd.isr).toEqual([0, 1, 2]));

  const { lastOffset } = await partition.append(Array.from({ length: 5 }, (_, i) => rec(10 + i)));
  let acked = false;
  const waiting = rm.waitReplicated('t', 0, 2, lastOffset, 5_000).then(() => {
    acked = true;
  });
  rm.followerFetch('t', 0, 1, 2, 15);
  // Broker 2 lacks 10..14 and the controller could elect it from etcd's ISR: not acknowledged.
  expect(nextLeadership(etcd, new Set([1, 2]), false)?.leader).toBe(2);
  expect(partition.highWatermark).toBe(10);
  await new Promise((res) => setImmediate(res));
  expect(acked).toBe(false);
  rm.followerFetch('t', 0, 2, 2, 15);
  await waiting;
  expect(partition.highWatermark).toBe(15);
  answer();
  // The watch brings the state the expansion wrote: the ISR is [0,1,2] from then on.
  apply(etcd, 2);
});

it("a follower's fetch of a deleted topic of the same name (another topic id) moves nothing", async () => {
  const s: PartitionState = { replicas: [0, 1], leader: 0, leaderEpoch: 0, isr: [0, 1], hwm: 0 };
  const { rm, partition } = await leader(() => s, undefined, 'new-topic-id');
  await partition.append(Array.from({ length: 3 }, (_, i) => rec(i)));
  // Broker 1 still fetches for the old incarnation, whose epochs also started at 0 and whose log was longer.
  expect(() => rm.followerFetch('t', 0, 1, 0, 3, 'old-topic-id')).toThrow(/topic_id_mismatch/);
  expect(partition.highWatermark).toBe(0);
  rm.followerFetch('t', 0, 1, 0, 3, 'new-topic-id');
  expect(partition.highWatermark).toBe(3);
});

it('an acks=1 reply after a pause of its process waits for etcd and reads the state there: a leadership moved meanwhile is refused', async () => {
  const watched: PartitionState = { replicas: [0, 1], leader: 0, leaderEpoch: 2, isr: [0, 1], hwm: 0 };
  let inEtcd = watched;
  const { rm, registry } = await leader(
    () => watched,
    undefined,
    undefined,
    () => inEtcd,
  );
  // No pause: answered at once, on what the watch brought.
  expect(rm.checkLeadsAfterAppend('t', 0, 2)).toBeUndefined();
  // A pause (a long append): the controller moved leadership meanwhile, and the watch has not brought it.
  registry.settled = false;
  let answer!: (settled: boolean) => void;
  registry.whenSettled = () =>
    new Promise<boolean>((res) => {
      answer = res;
    });
  inEtcd = { ...watched, leader: 1, leaderEpoch: 3 };
  const moved = rm.checkLeadsAfterAppend('t', 0, 2);
  expect(moved).toBeInstanceOf(Promise);
  answer(true);
  await expect(moved).rejects.toMatchObject({ code: 'NOT_LEADER' });
  // Nothing moved: the reply goes out once etcd confirmed the lease.
  inEtcd = watched;
  registry.whenSettled = async () => true;
  await expect(rm.checkLeadsAfterAppend('t', 0, 2)).resolves.toBeUndefined();
  // The lease may have expired meanwhile (not confirmed before it ran out): refused.
  registry.whenSettled = async () => false;
  await expect(rm.checkLeadsAfterAppend('t', 0, 2)).rejects.toMatchObject({ code: 'NOT_LEADER' });
});

it('shrinks the ISR for a follower behind past the lag bound, but not right after a pause of its own process, whose queued fetches are unread', async () => {
  let s: PartitionState = { replicas: [0, 1], leader: 0, leaderEpoch: 2, isr: [0, 1], hwm: 0 };
  const { rm, r, partition, registry } = await leader(
    () => s,
    async (next) => {
      s = next;
      return { ok: true, modRevision: 2 };
    },
  );
  await partition.append([rec(0)]);
  // Broker 1 has not reached the log end for longer than the bound (60 s in the harness).
  r.followers.get(1)!.caughtUpMs = performance.now() - 120_000;
  const checkLag = () => (rm as unknown as { checkLag(): void }).checkLag();
  registry.settled = false;
  checkLag();
  await new Promise((res) => setImmediate(res));
  expect(s.isr).toEqual([0, 1]);
  registry.settled = true;
  checkLag();
  await vi.waitFor(() => expect(s.isr).toEqual([0]));
});

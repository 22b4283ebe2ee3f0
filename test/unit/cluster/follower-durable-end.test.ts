/**
 * A follower reports to its leader what its log has acknowledged, not its log end (docs/architecture.md,
 * "Cluster mode"): records whose fsync failed stay in the file until a restart cuts them, and a leader that
 * counted them as held by the follower would move the HWM past them and acknowledge acks=all produces of
 * records no follower holds durably.
 */
import { join } from 'node:path';
import { afterEach, beforeEach, expect, it, vi } from 'vitest';
import { formatOk } from 'tributary-protocol/command.js';
import type { Replica } from 'tributary-broker/cluster/replica-types.js';
import { Partition } from 'tributary-broker/partition/partition.js';
import { PartitionLog } from 'tributary-broker/storage/partition-log.js';
import { Segment } from 'tributary-broker/storage/segment.js';
import { replicaAppend, testReplica, testReplicaManager } from '../../helpers/replica-harness.js';
import { removeDir, tempDir } from '../../helpers/util.js';

let dir: string;
beforeEach(async () => {
  dir = await tempDir('trib-follower-durable-');
}, 15_000);
afterEach(async () => {
  vi.restoreAllMocks();
  await removeDir(dir);
}, 15_000);

it('reports only what its log acknowledged: the leader does not count records whose fsync failed there', async () => {
  // Leader (broker 0): 10 records, durable on the leader.
  const leaderLog = await PartitionLog.open(join(dir, 'leader'), { flush: 'always' });
  const leaderPart = new Partition('t', 0, leaderLog, { replicated: true });
  const leader = testReplicaManager(0);
  const lr = testReplica(leaderPart, { role: 'leader' });
  lr.followers.set(1, { offset: 0, caughtUpMs: Date.now(), parked: false, sentEnd: 0, sentHwm: 0 });
  leader.host(lr);
  leaderPart.enableReplication(() => (leader.rm as unknown as { updateHighWatermark(r: Replica): void }).updateHighWatermark(lr));
  await leaderPart.appendReplica(replicaAppend(10));
  expect(leaderPart.localEnd).toBe(10);
  expect(leaderPart.highWatermark).toBe(0); // the follower has nothing yet

  // Follower (broker 1), flush=always: the fsync of its replica append fails with EIO.
  const followerLog = await PartitionLog.open(join(dir, 'follower'), { flush: 'always' });
  const followerPart = new Partition('t', 0, followerLog, { replicated: true });
  followerPart.enableReplication(() => {});
  const fr = testReplica(followerPart);
  const eio = Object.assign(new Error('EIO: i/o error, fdatasync'), { code: 'EIO' });
  vi.spyOn(Segment.prototype, 'datasync').mockImplementationOnce(() => Promise.reject(eio));

  const ac = new AbortController();
  const reported: number[] = [];
  let appendError: unknown = null;
  const realAppend = followerPart.appendReplica.bind(followerPart);
  followerPart.appendReplica = (rs) =>
    realAppend(rs).catch((e) => {
      appendError = e;
      throw e;
    });
  const conn = {
    closed: false,
    close: async () => {},
    command: async () => formatOk({ topic: 't', partition: 0, log_end: leaderPart.logEndOffset, epochs: '1:0' }),
    request: async (line: string) => {
      const offset = Number(/ offset=(\d+)/.exec(line)![1]);
      reported.push(offset);
      // The leader's REPLICA_FETCH handler: records the follower's position, moves the HWM.
      leader.rm.followerFetch('t', 0, 1, 1, offset);
      if (reported.length >= 2) ac.abort();
      const out = offset < 10 ? await leaderLog.read(offset, { maxRecords: 100, maxBytes: 1 << 20, keepAppendMarker: true } as never) : [];
      return { kind: 'batch', batch: { records: out, trailer: { highWatermark: leaderPart.highWatermark, logStartOffset: 0 } } };
    },
  };
  const follower = testReplicaManager(1, undefined, () => conn);
  // An acks=all produce of offsets 0..9 waits for the in-sync follower.
  const ack = leader.rm.waitReplicated('t', 0, 1, 9, 60_000).then(
    () => 'acknowledged',
    (e: Error) => `refused: ${e.message}`,
  );
  await (follower.rm as unknown as { fetchLoop(r: Replica, signal: AbortSignal): Promise<void> }).fetchLoop(fr, ac.signal);

  expect(String((appendError as Error)?.message)).toMatch(/fsync failed/); // the follower's append was refused
  expect(followerPart.localEnd).toBe(0); // the follower itself knows none of it is durable
  expect(followerLog.logEndOffset).toBe(10);
  // Both fetches report 0: nothing is durable on the follower. The HWM stays, and so does the follower's own.
  expect(reported).toEqual([0, 0]);
  expect(leaderPart.highWatermark).toBe(0);
  expect(followerPart.highWatermark).toBe(0);
  expect(await Promise.race([ack, new Promise((r) => setImmediate(() => r('waiting')))])).toBe('waiting');
  await follower.rm.close();
  await leader.rm.close();
  await followerLog.close().catch(() => {});
  await leaderLog.close().catch(() => {});
}, 15_000);

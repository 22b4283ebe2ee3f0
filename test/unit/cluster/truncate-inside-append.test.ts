/**
 * A follower whose leader-epoch truncation falls inside one of its appends (docs/architecture.md "Storage",
 * Atomic appends): under an unclean leader election, the new leader fetched the old leader's append [1,2,3]
 * compacted (one append per record) and had only 1 and 2 of it; its epoch 2 starts at 3. The follower holds
 * the append whole, committed (HWM 4), and cuts it at 3. The records it keeps below the cut must survive
 * its restart. The follower's fetch loop runs against the leader's real LEADER_EPOCHS and REPLICA_FETCH.
 */
import { join } from 'node:path';
import { afterEach, beforeEach, expect, it } from 'vitest';
import { Params, parseLine } from 'tributary-protocol/command.js';
import { REPLICA_COMMANDS } from 'tributary-broker/broker/replica-commands.js';
import type { Replica } from 'tributary-broker/cluster/replica-types.js';
import { Partition } from 'tributary-broker/partition/partition.js';
import { PartitionLog } from 'tributary-broker/storage/partition-log.js';
import { replicaRecord, testReplica, testReplicaManager } from '../../helpers/replica-harness.js';
import { removeDir, tempDir } from '../../helpers/util.js';

let dir: string;
const cleanup: Array<() => Promise<unknown>> = [];
beforeEach(async () => {
  dir = await tempDir('trib-follower-cut-append-');
});
afterEach(async () => {
  for (const c of cleanup.splice(0).reverse()) await c().catch(() => {});
  await removeDir(dir);
});

async function replicatedPartition(name: string): Promise<Partition> {
  const log = await PartitionLog.open(join(dir, name), { flush: 'always' });
  const part = new Partition('t', 0, log, { replicated: true });
  cleanup.push(() => part.close());
  part.enableReplication(() => {});
  return part;
}

it('a follower cut inside an append keeps the committed records below the cut across a restart', async () => {
  const leaderPart = await replicatedPartition('leader');
  const leader = testReplicaManager(0);
  const lr = testReplica(leaderPart, { role: 'leader', leaderEpoch: 2 });
  lr.followers.set(1, { offset: 0, caughtUpMs: performance.now(), parked: false, sentEnd: 0, sentHwm: 0 });
  leader.host(lr);
  cleanup.push(() => leader.rm.close());
  // The new leader: 0, then 1 and 2 of the old leader's append, each an append of its own (compacted).
  for (let i = 0; i < 3; i++) await leaderPart.appendReplica([replicaRecord(i, true)]);
  lr.epochs.assign(1, 0);
  lr.epochs.assign(2, 3);

  const followerPart = await replicatedPartition('follower');
  // The follower: the old leader's appends [0] and [1,2,3], all committed.
  await followerPart.appendReplica([replicaRecord(0, true), replicaRecord(1, false), replicaRecord(2, false), replicaRecord(3, true)]);
  followerPart.setReplicatedHighWatermark(4);
  const fr = testReplica(followerPart, { leaderEpoch: 2 });
  fr.epochs.assign(1, 0);

  const b = { cluster: { replicas: leader.rm }, config: { maxFrameBytes: 64 << 20, maxWaitMs: 1000 } } as never;
  const run = async (name: string, fields: Record<string, unknown>) => {
    const spec = REPLICA_COMMANDS[name]!;
    const line = `${name} ${Object.entries(fields).map(([k, v]) => `${k}=${String(v)}`).join(' ')}`;
    return spec.handler(b, {} as never, new Params(parseLine(line), new Set(spec.params)));
  };
  const ac = new AbortController();
  const conn = {
    closed: false,
    close: async () => {},
    command: async (name: string, fields: Record<string, unknown>) => String(await run(name, fields)),
    // format=stored: the records' count is the answer header's last field (cluster/replica-wire.ts).
    requestBytes: async (line: string) => {
      const answer = await run('REPLICA_FETCH', Object.fromEntries(parseLine(line).params));
      if (typeof answer === 'string') return Buffer.from(answer);
      // A body in pieces (Reply) is written one piece after another.
      const reply = Buffer.isBuffer(answer) ? answer : Buffer.concat(answer);
      if (reply.readUInt32BE(26) === 0) queueMicrotask(() => ac.abort());
      return reply;
    },
  };
  const follower = testReplicaManager(1, undefined, () => conn);
  cleanup.push(() => follower.rm.close());
  await (follower.rm as unknown as { fetchLoop(r: Replica, signal: AbortSignal): Promise<void> }).fetchLoop(fr, ac.signal);
  expect(followerPart.logEndOffset).toBe(3);
  expect(followerPart.highWatermark).toBe(3);

  // The follower restarts.
  await followerPart.close();
  const log = await PartitionLog.open(join(dir, 'follower'), { flush: 'always' });
  cleanup.push(() => log.close());
  expect(log.logEndOffset).toBe(3);
  expect(log.highWatermark).toBe(3);
  const kept = await log.read(0, { maxRecords: 10, maxBytes: 1 << 20 });
  expect(kept.map((r) => r.value.toString())).toEqual(['v0', 'v1', 'v2']);
});

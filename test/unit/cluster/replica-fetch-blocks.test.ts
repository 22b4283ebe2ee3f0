/**
 * The leader's REPLICA_FETCH handler with a log holding append blocks (docs/protocol.md, "Cluster mode"):
 * `format=stored blocks=true` (this version's followers) gets the blocks as stored; `format=stored` without
 * it (a follower of the previous version, which takes a block for a corrupt record) gets every block as
 * per-record layout records. LEADER_EPOCHS says the leader takes `blocks=true`.
 */
import { join } from 'node:path';
import { afterEach, beforeEach, expect, it } from 'vitest';
import { encodeBatch, scanBatch } from 'tributary-protocol/batch.js';
import { Params, parseLine } from 'tributary-protocol/command.js';
import { REPLICA_COMMANDS } from 'tributary-broker/broker/replica-commands.js';
import { Partition } from 'tributary-broker/partition/partition.js';
import { PartitionLog } from 'tributary-broker/storage/partition-log.js';
import { testReplica, testReplicaManager } from '../../helpers/replica-harness.js';
import { removeDir, tempDir } from '../../helpers/util.js';

let dir: string;
const cleanup: Array<() => Promise<unknown>> = [];
beforeEach(async () => {
  dir = await tempDir('trib-fetch-blocks-');
});
afterEach(async () => {
  for (const f of cleanup.splice(0).reverse()) await f().catch(() => {});
  await removeDir(dir);
});

/** Blocks among the stored units of a `format=stored` answer (after its 30-byte header). */
function blocksIn(reply: Buffer): number {
  let n = 0;
  for (let p = 30; p < reply.length; ) {
    const w = reply.readUInt32BE(p);
    if (w >= 0x80000000) n++;
    p += 4 + (w & 0x7fffffff);
  }
  return n;
}

it('format=stored without blocks=true gets per-record records; with it, the blocks; bad values are refused', async () => {
  const log = await PartitionLog.open(join(dir, 'leader'), { flush: 'os', storedLayout: 'blocks' });
  const part = new Partition('t', 0, log, { replicated: true });
  cleanup.push(() => part.close());
  const leader = testReplicaManager(0);
  const lr = testReplica(part, { role: 'leader' });
  lr.followers.set(1, { offset: 0, caughtUpMs: performance.now(), parked: false, sentEnd: 0, sentHwm: 0 });
  leader.host(lr);
  part.enableReplication(() => {});
  cleanup.push(() => leader.rm.close());
  lr.epochs.assign(1, 0);
  for (let a = 0; a < 3; a++) {
    const records = [0, 1].map((i) => ({ key: null, value: Buffer.from(`v${a}${i}`), timestamp: 5, headers: [], offset: 0, attributes: 0, producerId: '', epoch: 0, sequence: 0 }));
    const body = encodeBatch({ topic: 't', partition: 0, acks: '1', idempotent: false, firstSequence: 0, lastSequence: 0, records }, { extensions: true });
    await part.appendWire(scanBatch(body, { extensions: true, request: true }));
  }
  const b = { cluster: { replicas: leader.rm }, config: { maxFrameBytes: 64 << 20, maxWaitMs: 1000 } } as never;
  const run = async (line: string) => {
    const spec = REPLICA_COMMANDS[line.split(' ')[0]!]!;
    return spec.handler(b, {} as never, new Params(parseLine(line), new Set(spec.params)));
  };
  expect(String(await run('LEADER_EPOCHS topic=t partition=0 leader_epoch=1'))).toMatch(/ formats=stored blocks=true/);
  const fetch = (extra: string) => run(`REPLICA_FETCH topic=t partition=0 offset=0 leader_epoch=1 replica=1${extra}`) as Promise<Buffer>;
  const withBlocks = await fetch(' format=stored blocks=true');
  const without = await fetch(' format=stored');
  expect([withBlocks.readUInt32BE(26), without.readUInt32BE(26)]).toEqual([6, 6]);
  expect(blocksIn(withBlocks)).toBe(3);
  expect(blocksIn(without)).toBe(0);
  expect(blocksIn(await fetch(' format=stored blocks=false'))).toBe(0);
  await expect(fetch(' format=stored blocks=maybe')).rejects.toThrow(/blocks/);
  await expect(fetch(' blocks=true')).rejects.toThrow(/blocks.*only with format=stored/);
});

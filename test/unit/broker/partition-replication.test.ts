/**
 * The partition side of replication, without a cluster: the HWM of a replicated partition moves only
 * when the leader says so (also across a reopen), a follower's appendReplica keeps the leader's producer
 * state and transactions, and truncateTo rebuilds them.
 */
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { type Isolation, Partition } from 'tributary-broker/partition/partition.js';
import type { LogRecord, } from 'tributary-protocol/record.js';
import { PartitionLog } from 'tributary-broker/storage/partition-log.js';
import { rec, removeDir, tempDir } from '../../helpers/util.js';

let dir: string;
let leaderDir: string;
const open: Partition[] = [];

beforeEach(async () => {
  dir = await tempDir('trib-repl-');
  leaderDir = await tempDir('trib-repl-leader-');
});
afterEach(async () => {
  for (const p of open.splice(0)) await p.close().catch(() => {});
  await removeDir(dir);
  await removeDir(leaderDir);
});

async function openPartition(d: string, replicated: boolean): Promise<Partition> {
  const log = await PartitionLog.open(d, { flush: 'os' });
  const p = new Partition('t', 0, log, { replicated });
  open.push(p);
  await p.whenTxnIndexReady();
  await p.whenProducerStateReady();
  if (replicated) p.enableReplication(() => {});
  return p;
}

async function reopen(p: Partition, d: string, replicated: boolean): Promise<Partition> {
  await p.close();
  open.splice(open.indexOf(p), 1);
  return openPartition(d, replicated);
}

const RC = { maxRecords: 1000, maxBytes: 1 << 20, isolation: 'read_committed' as Isolation };

/** What a follower gets from REPLICA_FETCH: the leader's records with their append boundaries. */
function fetchAll(leader: Partition, from: number): Promise<LogRecord[]> {
  return leader.log.read(from, { maxRecords: 10_000, maxBytes: 1 << 24, maxOffset: leader.logEndOffset, keepAppendMarker: true, wholeAppends: true });
}

describe('replicated partitions', () => {
  it('the HWM moves only by the leader, and a reopen does not take the unreplicated tail as committed', async () => {
    let p = await openPartition(dir, true);
    await p.append([rec('a'), rec('b')]);
    await p.append([rec('c')]);
    expect(p.logEndOffset).toBe(3);
    expect(p.localEnd).toBe(3);
    expect(p.highWatermark).toBe(0); // local appends alone move nothing
    p.setReplicatedHighWatermark(2);
    expect(p.highWatermark).toBe(2);
    expect((await p.read(0, RC)).records.map((r) => r.value.toString())).toEqual(['a', 'b']);
    p = await reopen(p, dir, true);
    expect(p.logEndOffset).toBe(3);
    expect(p.highWatermark).toBeLessThanOrEqual(2);
    // Standalone, everything recovered is committed.
    p = await reopen(p, dir, false);
    expect(p.highWatermark).toBe(3);
  });

  it('a follower appends the leader records with their fields and keeps transactions and producer state', async () => {
    const leader = await openPartition(leaderDir, false);
    await leader.append([rec('plain')]);
    await leader.appendTransactional([rec('t1'), rec('t2')], { producerId: 'P', epoch: 3, firstSequence: 0, lastSequence: 1 });
    const follower = await openPartition(dir, true);
    await follower.appendReplica(await fetchAll(leader, 0));
    expect(follower.logEndOffset).toBe(3);
    follower.setReplicatedHighWatermark(3);
    expect(follower.lastStableOffset).toBe(1); // the transaction is open here too
    expect(follower.producerState()!.describe('P')).toEqual({ epoch: 3, lastSeq: 1 });
    await leader.writeMarker('P', 3, 'abort');
    await follower.appendReplica(await fetchAll(leader, 3));
    follower.setReplicatedHighWatermark(4);
    expect(follower.lastStableOffset).toBe(4);
    expect((await follower.read(0, RC)).records.map((r) => r.value.toString())).toEqual(['plain']);
    const a = await leader.log.read(0, { maxRecords: 100, maxBytes: 1 << 20, maxOffset: 4 });
    const b = await follower.log.read(0, { maxRecords: 100, maxBytes: 1 << 20, maxOffset: 4 });
    expect(b).toEqual(a);
  });

  it('truncateTo drops a tail the new leader does not have and rebuilds the transaction index', async () => {
    const p = await openPartition(dir, true);
    await p.append([rec('a')]);
    await p.appendTransactional([rec('open')], { producerId: 'Q', epoch: 0, firstSequence: 0, lastSequence: 0 });
    p.setReplicatedHighWatermark(2);
    expect(p.lastStableOffset).toBe(1);
    await p.truncateTo(1);
    expect(p.logEndOffset).toBe(1);
    expect(p.localEnd).toBe(1);
    expect(p.highWatermark).toBe(1);
    expect(p.lastStableOffset).toBe(1);
    expect(p.txnIndex()!.openTxns()).toEqual([]);
    // The producer starts over at sequence 0 of its epoch on the new leader's log.
    expect(p.producerState()!.describe('Q')).toBeUndefined();
  });

  it('a truncation inside a leader append keeps the records below the cut, committed ones too, across a reopen', async () => {
    // The old leader's appends [a] and [b c d], all committed on the follower. A new leader elected uncleanly
    // (it fetched [b c d] compacted, one append per record, and had only b c) ends at 3: the follower cuts
    // the append there (docs/architecture.md "Storage", Atomic appends).
    const leader = await openPartition(leaderDir, false);
    await leader.append([rec('a')]);
    await leader.append([rec('b'), rec('c'), rec('d')]);
    let p = await openPartition(dir, true);
    await p.appendReplica(await fetchAll(leader, 0));
    p.setReplicatedHighWatermark(4);
    await p.truncateTo(3);
    expect(p.highWatermark).toBe(3);
    p = await reopen(p, dir, true);
    expect(p.logEndOffset).toBe(3);
    expect(p.highWatermark).toBe(3);
    expect((await p.read(0, RC)).records.map((r) => r.value.toString())).toEqual(['a', 'b', 'c']);
  });
});

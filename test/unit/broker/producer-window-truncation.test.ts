/**
 * A follower's idempotent producer state after a truncation (producer-state.ts, snapshot()): the snapshot
 * is written as of the HWM, and a load drops every batch from there and replays the log after it. When a
 * producer's whole window (5 batches) lay past the HWM, the batch it kept below was out of the window:
 * after the cut the producer had no batch at all, and as leader the follower refused its next batch
 * (out_of_order_sequence, expected 0) and would have taken a resent sequence 0 as new.
 */
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { Partition } from 'tributary-broker/partition/partition.js';
import type { LogRecord } from 'tributary-protocol/record.js';
import { PartitionLog } from 'tributary-broker/storage/partition-log.js';
import { rec, removeDir, tempDir } from '../../helpers/util.js';

let dir: string;
let leaderDir: string;
const opened: Partition[] = [];

beforeEach(async () => {
  dir = await tempDir('trib-window-');
  leaderDir = await tempDir('trib-window-leader-');
});
afterEach(async () => {
  for (const p of opened.splice(0)) await p.close().catch(() => {});
  await removeDir(dir);
  await removeDir(leaderDir);
});

async function openPartition(d: string, replicated: boolean): Promise<Partition> {
  const p = new Partition('t', 0, await PartitionLog.open(d, { flush: 'os' }), { replicated });
  opened.push(p);
  await p.whenTxnIndexReady();
  await p.whenProducerStateReady();
  if (replicated) p.enableReplication(() => {});
  return p;
}

/** What a follower's fetch gets: whole appends, markers of their ends kept. */
function fetch(leader: Partition, from: number): Promise<LogRecord[]> {
  return leader.log.read(from, { maxRecords: 10_000, maxBytes: 1 << 24, maxOffset: leader.logEndOffset, keepAppendMarker: true, wholeAppends: true });
}

const batch = (s: number) => ({ producerId: 'P', epoch: 0, firstSequence: s, lastSequence: s });
const record = (v: string, s: number) => ({ ...rec(v), producerId: 'P', epoch: 0, sequence: s });

describe('producer state across a truncation below its whole window', () => {
  it('keeps the last batch left in the log: the next batch is taken, a retry below the cut is a duplicate', async () => {
    const leader = await openPartition(leaderDir, false);
    for (let s = 0; s < 8; s++) await leader.appendIdempotent([record(`v${s}`, s)], batch(s));
    const f = await openPartition(dir, true);
    await f.appendReplica(await fetch(leader, 0));
    f.setReplicatedHighWatermark(2); // v0 and v1 are committed
    // The snapshot timer's write, as of the HWM: the window holds sequences 3..7, all past it.
    await (f as unknown as { snapshots: { writeProducers(t: unknown, o: number): Promise<void> } }).snapshots.writeProducers(f.producerState(), 2);
    // The new leader has offsets 0 and 1 only.
    await f.truncateTo(2);
    expect(f.producerState()!.describe('P')).toEqual({ epoch: 0, lastSeq: 1 });
    // Promoted, the follower takes the producer's next batch, and a retry of an acknowledged one is a duplicate.
    expect((await f.appendIdempotent([record('v2-again', 2)], batch(2))).baseOffset).toBe(2);
    expect((await f.appendIdempotent([record('v1-again', 1)], batch(1))).duplicate).toBe(true);
  });
});

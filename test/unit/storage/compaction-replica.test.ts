/**
 * Compaction (docs/architecture.md, "Compaction") under a follower replicating the log: the log end stays
 * reachable by records, and a replica fetch of whole appends that races a swap returns whole appends.
 */

import { join } from 'node:path';
import { type LogOptions, PartitionLog } from 'tributary-broker/storage/partition-log.js';
import { Segment } from 'tributary-broker/storage/segment.js';
import type { LogRecord } from 'tributary-protocol/record.js';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { removeDir, tempDir } from '../../helpers/util.js';

let dir: string;
const opened: PartitionLog[] = [];
beforeEach(async () => {
  dir = await tempDir('trib-crv-');
});
afterEach(async () => {
  vi.restoreAllMocks();
  for (const l of opened.splice(0)) await l.close().catch(() => {});
  await removeDir(dir);
});

const OPTS: Partial<LogOptions> = { flush: 'os', segmentBytes: 600, indexIntervalBytes: 64 };
const T0 = 1_700_000_000_000;
const HOUR = 3600_000;

async function openLog(sub: string, opts: Partial<LogOptions> = {}): Promise<PartitionLog> {
  const l = await PartitionLog.open(join(dir, sub), { ...OPTS, ...opts });
  opened.push(l);
  const append = l.append.bind(l);
  l.append = async (records) => {
    const res = await append(records);
    l.setHighWatermark(res.lastOffset + 1);
    return res;
  };
  return l;
}

const rec = (key: string, value: string, ts = T0) => ({ key: Buffer.from(key), value: Buffer.from(value), timestamp: ts });

/** What a follower's fetch loop does (replica-manager.ts): fetch from its log end, appendReplica, until the leader returns nothing. */
async function replicate(leader: PartitionLog, follower: PartitionLog, upTo = Infinity): Promise<void> {
  for (;;) {
    const from = follower.logEndOffset;
    if (from >= upTo) return;
    const got: LogRecord[] = await leader.read(from, { maxRecords: 1, maxBytes: 1 << 20, keepAppendMarker: true, wholeAppends: true });
    if (got.length === 0) return;
    await follower.appendReplica(got);
  }
}

describe('a compacted log replicated to a follower', () => {
  it('compaction keeps the record at the log end, so a follower lagging below it reaches the leader log end', async () => {
    const leader = await openLog('leader', { segmentMs: 1000 });
    for (let i = 0; i < 20; i++) await leader.append([rec(`k${i % 3}`, `v${i}`)]);
    await leader.append([rec('grp', 'snapshot')]);
    await leader.append([rec('grp', '')]); // group deleted: the last record of the partition is a tombstone
    const leo = leader.logEndOffset;
    const follower = await openLog('follower');
    await replicate(leader, follower, leo - 1); // lagging (e.g. a new replica or one that was down)
    // The retention timer compacts a day later: the active segment is rolled, the expired tombstone dropped.
    await leader.compact({ now: Date.now() + 25 * HOUR });
    expect(leader.logEndOffset).toBe(leo);
    await replicate(leader, follower);
    // replica-manager: caughtUp needs fetch offset >= leader HWM (= leo); the fetch offset is the follower's log end.
    expect(follower.logEndOffset).toBe(leader.logEndOffset);
  });

  it('a replica fetch of whole appends racing a compaction swap starts the append it was reading over: no gap inside an append', async () => {
    const leader = await openLog('leader', { tailCacheBytes: 0 });
    // One 3-record append whose last record is superseded later.
    await leader.append([rec('a', '1'), rec('b', '1'), rec('c', '1')]);
    await leader.append([rec('d', '1')]);
    for (let i = 0; i < 40; i++) await leader.append([rec(`x${i % 4}`, `v${i}-${'p'.repeat(20)}`)]);
    await leader.append([rec('c', '2')]);
    for (let i = 0; i < 20; i++) await leader.append([rec(`y${i % 4}`, `v${i}-${'p'.repeat(20)}`)]);
    const read = Segment.prototype.read;
    let entered!: () => void;
    const inRead = new Promise<void>((r) => (entered = r));
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    // The first chunk the reader gets ends after two records of the 3-record append; it then waits while compaction swaps the segment.
    const sizes: number[] = [];
    await (leader as unknown as { st: { segments: Segment[] } }).st.segments[0].scan(0, 1 << 20, (r) => {
      sizes.push(r.size);
      return sizes.length < 3;
    });
    const twoRecs = sizes[0] + sizes[1];
    let step = 0;
    vi.spyOn(Segment.prototype, 'read').mockImplementation(async function (this: Segment, pos: number, len: number) {
      step++;
      if (step === 1) return read.call(this, pos, Math.min(len, twoRecs));
      if (step === 2) {
        entered();
        await gate;
      }
      return read.call(this, pos, len);
    });
    const fetching = leader.read(0, { maxRecords: 1, maxBytes: 1 << 20, keepAppendMarker: true, wholeAppends: true });
    await inRead;
    vi.restoreAllMocks();
    const res = await leader.compact({ now: T0 });
    expect(res.segmentsCompacted).toBeGreaterThan(0);
    release();
    const got = await fetching;
    const follower = await openLog('follower');
    // Record 2 of the append was dropped by the swap: the read started the append over in the new file,
    // where each kept record is an append of its own (not [0, 1, 3] with 0 and 1 still open), so the
    // follower takes it and replicates the rest.
    expect(got.map((r) => r.offset)).not.toContain(2);
    await follower.appendReplica(got);
    await replicate(leader, follower);
    expect(follower.logEndOffset).toBe(leader.logEndOffset);
  });
});

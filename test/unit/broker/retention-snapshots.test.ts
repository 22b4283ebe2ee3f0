/**
 * Retention and the partition's snapshots (partition-retention.ts, partition-snapshots.ts): segments go only
 * below what both snapshots cover, so a kill -9 right after retention rebuilds the idempotent producer
 * state and the transaction index as they were. Otherwise the records between the last snapshot (the
 * 10 s timer) and the new log start were lost to the rebuild: a producer's sequences (its next batch
 * refused, a retry written twice) and a transaction's marker (its LSO pinned at the log start).
 */
import { mkdir } from 'node:fs/promises';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { Partition } from 'tributary-broker/partition/partition.js';
import { simulateCrash } from 'tributary-broker/storage/log-test-hooks.js';
import { PartitionLog } from 'tributary-broker/storage/partition-log.js';
import { removeDir, tempDir } from '../../helpers/util.js';

const COMMITTED = { maxRecords: 1000, maxBytes: 1 << 20, isolation: 'read_committed' as const };
const dirs: string[] = [];
afterEach(async () => {
  for (const d of dirs.splice(0)) await removeDir(d);
});

/** The snapshot timer's work, run now. */
async function snapshotTick(p: Partition): Promise<void> {
  const s = (p as unknown as { snapshots: { onTick(): void; settled(): Promise<void> } }).snapshots;
  s.onTick();
  await s.settled();
}

const rec = (v: string, n = 1) => ({ key: null, value: Buffer.from(v.padEnd(n, '.')) });

/** A partition over `dir` with 512-byte segments and no bytes kept past retention, its states loaded. */
async function openIn(dir: string): Promise<Partition> {
  const p = new Partition('t', 0, await PartitionLog.open(dir, { segmentBytes: 512, retentionBytes: 0 }));
  await p.whenTxnIndexReady();
  await p.whenProducerStateReady();
  return p;
}

async function fresh(): Promise<{ dir: string; p: Partition }> {
  const dir = await tempDir('trib-retention-snap-');
  dirs.push(dir);
  return { dir, p: await openIn(dir) };
}

describe('retention never runs ahead of the snapshots', () => {
  it('a committed transaction whose marker retention deleted: after kill -9 the LSO is the HWM again', async () => {
    const { dir, p: first } = await fresh();
    await first.appendTransactional([rec('P-1')], { producerId: 'P', epoch: 0 });
    await snapshotTick(first); // the snapshot lists P's transaction as open
    await first.writeMarker('P', 0, 'commit');
    for (let i = 0; i < 4; i++) await first.append([rec(`x${i}`, 600)]);
    expect((await first.applyRetention(Date.now())).deletedSegments).toBeGreaterThan(0);
    expect(first.earliest).toBeGreaterThan(1); // the marker (offset 1) is gone
    await simulateCrash(first.log);
    const p = await openIn(dir);
    await p.append([rec('after')]);
    expect(p.lastStableOffset).toBe(p.highWatermark);
    expect((await p.read(p.earliest, COMMITTED)).records.map((r) => r.value.toString()).at(-1)).toBe('after');
    await p.close();
  });

  it('an idempotent producer whose batches retention deleted: after kill -9 a retry is a duplicate and the next batch is taken', async () => {
    const { dir, p: first } = await fresh();
    const batch = (s: number) => ({ producerId: 'Q', epoch: 0, firstSequence: s, lastSequence: s });
    await first.appendIdempotent([rec('a', 600)], batch(0));
    await snapshotTick(first); // the snapshot knows sequence 0 only
    await first.appendIdempotent([rec('b', 600)], batch(1));
    await first.appendIdempotent([rec('c', 600)], batch(2));
    await first.append([rec('z', 600)]);
    await first.append([rec('z', 10)]);
    expect((await first.applyRetention(Date.now())).deletedSegments).toBeGreaterThan(0);
    await simulateCrash(first.log);
    const p = await openIn(dir);
    const leo = p.logEndOffset;
    expect((await p.appendIdempotent([rec('c', 600)], batch(2))).duplicate).toBe(true);
    expect((await p.appendIdempotent([rec('d')], batch(3))).duplicate).toBe(false);
    expect(p.logEndOffset).toBe(leo + 1);
    await p.close();
  });

  it('the Kafka port (any first sequence): a retried batch retention deleted is not written twice after kill -9', async () => {
    const { dir, p: first } = await fresh();
    const batch = (s: number) => ({ producerId: 'K', epoch: 0, firstSequence: s, lastSequence: s, anyFirstSequence: true });
    await first.appendIdempotent([rec('k0', 600)], batch(0));
    await first.appendIdempotent([rec('k1', 600)], batch(1));
    await first.append([rec('z', 600)]);
    await first.append([rec('z', 10)]);
    expect((await first.applyRetention(Date.now())).deletedSegments).toBeGreaterThan(0);
    await simulateCrash(first.log);
    const p = await openIn(dir);
    const leo = p.logEndOffset;
    expect((await p.appendIdempotent([rec('k1', 600)], batch(1))).duplicate).toBe(true);
    expect(p.logEndOffset).toBe(leo);
    await p.close();
  });

  it('snapshots that cannot be written (a full disk) still let retention delete what the last ones cover', async () => {
    const { dir, p } = await fresh();
    const batch = (s: number) => ({ producerId: 'F', epoch: 0, firstSequence: s, lastSequence: s });
    for (let i = 0; i < 4; i++) await p.appendIdempotent([rec(`a${i}`, 600)], batch(i));
    await snapshotTick(p); // both snapshots as of the HWM, 4
    const covered = p.highWatermark;
    // The producer state changes past the snapshot: records from here are in no snapshot.
    for (let i = 4; i < 8; i++) await p.appendIdempotent([rec(`b${i}`, 600)], batch(i));
    // Every snapshot write from here fails (its temp file cannot be created), as on a full disk.
    await mkdir(join(dir, 'producer.snapshot.tmp'));
    const res = await p.applyRetention(Date.now());
    expect(res.deletedSegments).toBeGreaterThan(0);
    expect(p.earliest).toBeLessThanOrEqual(covered);
    expect(p.earliest).toBeGreaterThan(0);
    await p.close();
  });
});

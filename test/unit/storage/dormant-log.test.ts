/**
 * A broker keeps files only for the partitions it hosts (docs/architecture.md, "Hosted partitions"): a log
 * opened lazily without segment files stays without them until its first append, reads as an empty log at
 * 0, and release() takes a hosted log back to that state with its directory gone.
 */
import { access, cp, mkdir, readdir, rename, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import pino from 'pino';
import { dropLocalData } from 'tributary-broker/cluster/replica-moves.js';
import type { Replica } from 'tributary-broker/cluster/replica-types.js';
import { Partition } from 'tributary-broker/partition/partition.js';
import { PartitionSnapshots } from 'tributary-broker/partition/partition-snapshots.js';
import { readHwmCheckpoint } from 'tributary-broker/storage/hwm-checkpoint.js';
import { LEADER_EPOCH_CHECKPOINT_FILE, LeaderEpochCache } from 'tributary-broker/storage/leader-epoch-cache.js';
import { type LogOptions, PartitionLog } from 'tributary-broker/storage/partition-log.js';
import { Segment } from 'tributary-broker/storage/segment.js';
import { ATTR_END_OF_APPEND } from 'tributary-broker/storage/record-codec.js';
import { rec, removeDir, tempDir } from '../../helpers/util.js';

let root: string;
let dir: string;
const open: Array<{ close(): Promise<void> }> = [];

beforeEach(async () => {
  root = await tempDir('trib-dormant-');
  dir = join(root, 'topic~id', '0');
});
afterEach(async () => {
  for (const l of open.splice(0)) await l.close().catch(() => {});
  await removeDir(root);
});

async function lazyLog(opts: Partial<LogOptions> = {}): Promise<PartitionLog> {
  const l = await PartitionLog.open(dir, { flush: 'always', ...opts }, undefined, { lazy: true });
  open.push(l);
  return l;
}

const exists = (p: string) => access(p).then(
  () => true,
  () => false,
);
const values = async (l: PartitionLog, from = 0) => (await l.read(from, { maxRecords: 100, maxBytes: 1 << 20 })).map((r) => `${r.offset}:${r.value}`);

describe('a lazily opened log', () => {
  it('creates nothing until its first append and reads as an empty log at 0', async () => {
    const l = await lazyLog({ retentionMs: 1, retentionBytes: 1 });
    expect(l.dormant).toBe(true);
    expect([l.logStartOffset, l.logEndOffset, l.highWatermark, l.sizeBytes]).toEqual([0, 0, 0, 0]);
    expect(await values(l)).toEqual([]);
    await expect(l.read(1, { maxRecords: 1, maxBytes: 100 })).rejects.toMatchObject({ code: 'OFFSET_OUT_OF_RANGE' });
    expect(await l.offsetForTimestamp(0)).toBe(0);
    l.setHighWatermark(5);
    await l.flush();
    await l.truncateTo(0);
    expect(await l.applyRetention(Date.now() + 1e9)).toEqual({ deletedSegments: 0, deletedBytes: 0 });
    expect((await l.compact()).segmentsCompacted).toBe(0);
    await l.close();
    expect(await exists(join(root, 'topic~id'))).toBe(false);

    const again = await lazyLog();
    expect(again.dormant).toBe(true);
    expect(await exists(join(root, 'topic~id'))).toBe(false);
  });

  it('keeps the order of appends queued before its files exist, and is an ordinary log afterwards', async () => {
    const l = await lazyLog();
    const results = await Promise.all(['a', 'b', 'c'].map((v) => l.append([rec(v), rec(`${v}2`)])));
    expect(results.map((r) => r.baseOffset)).toEqual([0, 2, 4]);
    expect(l.dormant).toBe(false);
    expect((await readdir(dir)).filter((n) => n.endsWith('.log'))).toHaveLength(1);
    await l.close();

    const reopened = await lazyLog();
    expect(reopened.dormant).toBe(false);
    expect(await values(reopened)).toEqual(['0:a', '1:a2', '2:b', '3:b2', '4:c', '5:c2']);
  });

  it('takes a replica append past 0 as an empty log would', async () => {
    const l = await lazyLog();
    await l.appendReplica([{ ...rec('x'), offset: 7, timestamp: 1, attributes: ATTR_END_OF_APPEND }] as never);
    expect(l.logEndOffset).toBe(8);
    expect(await values(l, 7)).toEqual(['7:x']);
  });

  it('release() drops the records and the directory; the next append starts again at 0', async () => {
    const l = await lazyLog();
    await l.append([rec('a'), rec('b')]);
    l.setHighWatermark(2);
    await l.flush();
    await l.release();
    expect(l.dormant).toBe(true);
    expect([l.logEndOffset, l.highWatermark, l.sizeBytes]).toEqual([0, 0, 0]);
    expect(await exists(dir)).toBe(false);
    expect(await values(l)).toEqual([]);
    await l.close();
    expect(await exists(dir)).toBe(false);

    const back = await lazyLog();
    expect(back.dormant).toBe(true);
    expect((await back.append([rec('c')])).baseOffset).toBe(0);
    expect(await values(back)).toEqual(['0:c']);
  });

  it('release() renames the directory away before deleting it; a leftover of that is removed at open, never loaded', async () => {
    const l = await lazyLog();
    await l.append([rec('a'), rec('b')]);
    await l.release();
    expect(await readdir(join(root, 'topic~id'))).toEqual([]);
    await l.append([rec('c')]);
    await l.close();

    // A crash between the rename and the removal: the renamed copy is there beside a new directory.
    await cp(dir, `${dir}.deleting`, { recursive: true });
    const back = await lazyLog();
    expect(await values(back)).toEqual(['0:c']);
    expect(await exists(`${dir}.deleting`)).toBe(false);
    await back.close();

    // ... or alone: the log is dormant, not the renamed one adopted.
    await rename(dir, `${dir}.deleting`);
    const none = await lazyLog();
    expect(none.dormant).toBe(true);
    expect(await values(none)).toEqual([]);
    expect(await readdir(join(root, 'topic~id'))).toEqual([]);
  });

  it('release() completes even when a segment fails to close once its directory is gone: never half released', async () => {
    const l = await lazyLog({ segmentBytes: 1 });
    await l.append([rec('a')]);
    await l.append([rec('b')]);
    l.setHighWatermark(2);
    const discard = vi.spyOn(Segment.prototype, 'discard').mockRejectedValueOnce(new Error('EIO'));
    try {
      await l.release();
    } finally {
      discard.mockRestore();
    }
    expect(l.dormant).toBe(true);
    expect([l.logEndOffset, l.highWatermark, l.segmentInfos().length]).toEqual([0, 0, 0]);
    expect(await exists(dir)).toBe(false);
    expect((await l.append([rec('c')])).baseOffset).toBe(0);
    expect(await values(l)).toEqual(['0:c']);
  });

  it('the HWM checkpoint timer writes nothing while a release moves the directory away', async () => {
    vi.useFakeTimers({ toFake: ['setInterval', 'clearInterval'] });
    try {
      const warnings: string[] = [];
      const logger = pino({ level: 'warn' }, { write: (line: string) => void warnings.push(line) });
      const l = await PartitionLog.open(dir, { flush: 'always', flushIntervalMs: 10 }, logger, { lazy: true });
      open.push(l);
      await l.append(Array.from({ length: 1000 }, (_, i) => rec(`r${i}`)));
      let done = false;
      const released = l.release().finally(() => {
        done = true;
      });
      // The HWM moves on before every tick, so each tick has a value to checkpoint, at every step of the release.
      for (let hwm = 1; !done; hwm++) {
        l.setHighWatermark(hwm);
        vi.advanceTimersByTime(10);
        await new Promise((resolve) => setImmediate(resolve));
      }
      await released;
      await new Promise((resolve) => setTimeout(resolve, 20));
      expect(await exists(dir)).toBe(false);
      // Back to the same HWM: its checkpoint is written, not taken as already on disk.
      await l.append([rec('c'), rec('d')]);
      l.setHighWatermark(2);
      await l.flush();
      expect(await readHwmCheckpoint(dir, logger)).toBe(2);
      expect(warnings.filter((w) => w.includes('checkpoint'))).toEqual([]);
    } finally {
      vi.useRealTimers();
    }
  });

  it('a release racing an append is refused cleanly: nothing goes, and the append lands where the log ends', async () => {
    const l = await lazyLog();
    await l.append([rec('a')]);
    const released = l.release();
    const late = l.append([rec('b')]);
    await expect(released).rejects.toMatchObject({ code: 'storage_error' });
    expect((await late).baseOffset).toBe(1);
    expect(l.dormant).toBe(false);
    await l.close();
    expect(await values(await lazyLog())).toEqual(['0:a', '1:b']);
  });
});

describe('a dormant partition', () => {
  async function partition(): Promise<Partition> {
    const p = new Partition('t', 0, await PartitionLog.open(dir, { flush: 'always' }, undefined, { lazy: true }));
    open.push(p);
    await Promise.all([p.whenProducerStateReady(), p.whenTxnIndexReady()]);
    return p;
  }
  const idem = (v: string, sequence: number) => rec(v, { producerId: '7', epoch: 0, sequence });

  it('writes no snapshot while it has no records, and forgets its producers when released', async () => {
    let p = await partition();
    await p.close();
    expect(await exists(join(root, 'topic~id'))).toBe(false);

    p = await partition();
    await p.appendIdempotent([idem('a', 0)], { producerId: '7', epoch: 0, firstSequence: 0, lastSequence: 0 });
    expect(await p.appendIdempotent([idem('a', 0)], { producerId: '7', epoch: 0, firstSequence: 0, lastSequence: 0 })).toMatchObject({ duplicate: true });
    expect(await p.release(() => true)).toBe(true);
    expect(await exists(dir)).toBe(false);
    expect(p.logEndOffset).toBe(0);
    // The same batch is new to the empty log: no stale producer state answers it as a duplicate.
    expect(await p.appendIdempotent([idem('a', 0)], { producerId: '7', epoch: 0, firstSequence: 0, lastSequence: 0 })).toMatchObject({
      baseOffset: 0,
      duplicate: false,
    });
    await p.close();
    p = await partition();
    expect(p.logEndOffset).toBe(1);
    expect(await p.appendIdempotent([idem('a', 0)], { producerId: '7', epoch: 0, firstSequence: 0, lastSequence: 0 })).toMatchObject({ duplicate: true });
  });

  it('is recovered whole after a crash soon after its first append: empty snapshots are its baseline, written before that append', async () => {
    // Every append rolls a segment, so a rebuild that only scans the last segment (what recovery once did
    // without a snapshot) misses the transactions and the idempotent batch of the earlier ones.
    const p = new Partition('t', 0, await PartitionLog.open(dir, { flush: 'always', segmentBytes: 1 }, undefined, { lazy: true }));
    open.push(p);
    await Promise.all([p.whenProducerStateReady(), p.whenTxnIndexReady()]);
    const t1 = await p.appendTransactional([rec('t1')], { producerId: '9', epoch: 0 });
    await p.appendIdempotent([idem('i', 0)], { producerId: '7', epoch: 0, firstSequence: 0, lastSequence: 0 });
    await p.writeMarker('9', 0, 'abort');
    const t2 = await p.appendTransactional([rec('t2')], { producerId: '10', epoch: 0 });
    await p.append([rec('plain')]);
    expect(p.log.segmentInfos().length).toBeGreaterThan(3);
    expect(p.lastStableOffset).toBe(t2.baseOffset);

    // kill -9 within the snapshot interval: the files as they are now, no clean shutdown.
    const crashed = join(root, 'crashed');
    await cp(dir, crashed, { recursive: true });
    const q = new Partition('t', 0, await PartitionLog.open(crashed, { flush: 'always', segmentBytes: 1 }, undefined, { lazy: true }));
    open.push(q);
    // Before the rebuild, read_committed must not reach past the open transaction.
    expect(q.lastStableOffset).toBeLessThanOrEqual(t2.baseOffset);
    await Promise.all([q.whenProducerStateReady(), q.whenTxnIndexReady()]);
    expect(q.lastStableOffset).toBe(t2.baseOffset);
    expect(q.txnIndex()!.abortedTxns()).toMatchObject([{ producerId: '9', firstOffset: t1.baseOffset }]);
    const read = await q.read(0, { maxRecords: 100, maxBytes: 1 << 20, isolation: 'read_committed' });
    expect(read.records.map((r) => r.value.toString())).toEqual(['i']);
    expect(await q.appendIdempotent([idem('i', 0)], { producerId: '7', epoch: 0, firstSequence: 0, lastSequence: 0 })).toMatchObject({ duplicate: true });
  });

  it('release() decides once the appends begun have landed, and keeps everything when the partition is hosted again by then', async () => {
    const p = await partition();
    const epochs = new LeaderEpochCache(dir);
    await epochs.load();
    await p.append([rec('a')]);
    epochs.assign(1, 0);
    await epochs.flush();
    let hosted = false;
    let decidedAt = -1;
    const late = p.append([rec('b')]);
    const released = p.release(() => {
      decidedAt = p.logEndOffset;
      return !hosted;
    }, epochs);
    // The broker leads the partition again while the release waits for the append.
    hosted = true;
    epochs.assign(2, 1);
    expect(await released).toBe(false);
    expect((await late).baseOffset).toBe(1);
    expect(decidedAt).toBe(2);
    expect(p.log.dormant).toBe(false);
    await epochs.flush();
    const onDisk = new LeaderEpochCache(dir);
    await onDisk.load();
    expect(onDisk.entries()).toEqual([
      [1, 0],
      [2, 1],
    ]);
    await p.close();
    expect(await values(await lazyLog())).toEqual(['0:a', '1:b']);
  });

  it('release() clears the epoch history in the same step as the directory, with no checkpoint write in flight meanwhile', async () => {
    const p = await partition();
    const epochs = new LeaderEpochCache(dir);
    await epochs.load();
    await p.append([rec('a')]);
    epochs.assign(1, 0);
    const writing = epochs.flush();
    expect(await p.release(() => true, epochs)).toBe(true);
    await writing;
    expect(epochs.entries()).toEqual([]);
    expect(await exists(dir)).toBe(false);
    await epochs.flush();
    expect(await exists(dir)).toBe(false);

    // A change made while the directory goes is kept, and written by the next flush.
    await p.append([rec('b')]);
    expect(
      await p.release(() => {
        epochs.assign(4, 0);
        return true;
      }, epochs),
    ).toBe(true);
    expect(epochs.entries()).toEqual([[4, 0]]);
    await epochs.flush();
    const onDisk = new LeaderEpochCache(dir);
    await onDisk.load();
    expect(onDisk.entries()).toEqual([[4, 0]]);
  });

  it('a broker that stops being a replica keeps its data when it becomes one again while the drop waits (dropLocalData)', async () => {
    const p = await partition();
    const epochs = new LeaderEpochCache(dir);
    await epochs.load();
    await p.append([rec('a')]);
    epochs.assign(1, 0);
    await epochs.flush();
    const r = { topic: 't', id: 0, partition: p, epochs, epochsLoaded: Promise.resolve(), role: 'none', promoting: null, replicas: [2], fetcher: null, dropping: null } as unknown as Replica;
    // The role flips back (this broker leads again, assigning its epoch) just after the drop begins.
    const release = p.release.bind(p);
    p.release = (unhosted, e) => {
      const done = release(unhosted, e);
      r.role = 'leader';
      r.replicas = [1, 2];
      epochs.assign(2, p.logEndOffset);
      return done;
    };
    dropLocalData(r, 1, () => false, pino({ level: 'silent' }));
    await r.dropping;
    expect(p.logEndOffset).toBe(1);
    expect(epochs.entries()).toEqual([
      [1, 0],
      [2, 1],
    ]);
    await epochs.flush();
    const onDisk = new LeaderEpochCache(dir);
    await onDisk.load();
    expect(onDisk.entries()).toEqual(epochs.entries());
  });

  it('after a restart, an unhosted partition whose directory holds only an epoch checkpoint loses it (dropLocalData waits for the history)', async () => {
    const before = new LeaderEpochCache(dir);
    await before.load();
    before.assign(3, 0);
    await before.flush();
    // The restart: a dormant log, its epoch history still being read when the drop is decided.
    const p = await partition();
    expect(p.log.dormant).toBe(true);
    const epochs = new LeaderEpochCache(dir);
    const r = { topic: 't', id: 0, partition: p, epochs, epochsLoaded: epochs.load(), role: 'none', promoting: null, replicas: [2], fetcher: null, dropping: null } as unknown as Replica;
    dropLocalData(r, 1, () => false, pino({ level: 'silent' }));
    await r.dropping;
    expect(await exists(dir)).toBe(false);
    expect(epochs.entries()).toEqual([]);
  });

  it('an unhosted partition whose directory holds only an unreadable epoch checkpoint loses it too', async () => {
    await mkdir(dir, { recursive: true });
    await writeFile(join(dir, LEADER_EPOCH_CHECKPOINT_FILE), 'not a checkpoint\n');
    const p = await partition();
    const epochs = new LeaderEpochCache(dir);
    const r = { topic: 't', id: 0, partition: p, epochs, epochsLoaded: epochs.load(), role: 'none', promoting: null, replicas: [2], fetcher: null, dropping: null } as unknown as Replica;
    r.epochsLoaded.catch(() => {});
    dropLocalData(r, 1, () => false, pino({ level: 'silent' }));
    await r.dropping;
    expect(await exists(dir)).toBe(false);
  });

  it('release() clears a producer state or transaction index that failed to load: both are rebuilt from the empty log', async () => {
    let p = await partition();
    await p.append([rec('a')]);
    await p.close();
    // Each state fails to load (a read of the log failing, say), and the partition refuses what needs it.
    const failLoad = () => Promise.reject(new Error('test: the load failed'));
    const producers = vi.spyOn(PartitionSnapshots.prototype, 'loadProducers').mockImplementationOnce(failLoad);
    const txns = vi.spyOn(PartitionSnapshots.prototype, 'loadTxns').mockImplementationOnce(failLoad);
    p = new Partition('t', 0, await PartitionLog.open(dir, { flush: 'always' }, undefined, { lazy: true }));
    open.push(p);
    await Promise.all([p.whenProducerStateReady().catch(() => {}), p.whenTxnIndexReady().catch(() => {})]);
    producers.mockRestore();
    txns.mockRestore();
    await expect(p.appendTransactional([rec('t')], { producerId: '9', epoch: 0 })).rejects.toMatchObject({ code: 'storage_error' });
    await expect(p.appendIdempotent([idem('i', 0)], { producerId: '7', epoch: 0, firstSequence: 0, lastSequence: 0 })).rejects.toMatchObject({ code: 'storage_error' });

    expect(await p.release(() => true)).toBe(true);
    expect((await p.appendTransactional([rec('t')], { producerId: '9', epoch: 0 })).baseOffset).toBe(0);
    expect(await p.appendIdempotent([idem('i', 0)], { producerId: '7', epoch: 0, firstSequence: 0, lastSequence: 0 })).toMatchObject({ baseOffset: 1, duplicate: false });
  });

  it('a leader epoch checkpoint creates the directory it needs', async () => {
    const cache = new LeaderEpochCache(dir);
    await cache.load();
    cache.assign(3, 0);
    await cache.flush();
    const reread = new LeaderEpochCache(dir);
    await reread.load();
    expect(reread.entries()).toEqual(cache.entries());
  });
});

/**
 * A log truncation inside a compacted segment (docs/architecture.md "Storage", Compaction). The segment's
 * index file is the only record that it is compacted, so that its end may lie past its last record; a
 * recovery that finds the segment without the flag ends it at its last record + 1, below the cut, and
 * drops every later segment as not contiguous: acknowledged records appended after the truncation are lost
 * and their offsets handed out again.
 */
import { cp } from 'node:fs/promises';
import { join } from 'node:path';
import { describe, expect, it, vi } from 'vitest';
import { simulateCrash } from 'tributary-broker/storage/log-test-hooks.js';
import type { PartitionLog } from 'tributary-broker/storage/partition-log.js';
import { Segment } from 'tributary-broker/storage/segment.js';
import { cutAfterRecord, fillCompacted, readAll, useLogDir } from './compacted-logs.js';

const T0 = 1_700_000_000_000;
const { dir: tmp, openLog, forget } = useLogDir('trib-truncate-compacted-');

async function crashAndReopen(log: PartitionLog, name: string): Promise<PartitionLog> {
  await simulateCrash(log);
  forget(log);
  return openLog(name);
}

/** 200 records over 13 keys, compacted: the closed segments have gaps. */
async function compactedLog(name: string): Promise<PartitionLog> {
  return fillCompacted(await openLog(name));
}

describe('truncation inside a compacted segment that keeps records', () => {
  it('records appended after it survive a crash when the kept segment index write fails (EMFILE)', async () => {
    let log = await compactedLog('a');
    const { cut, base } = await cutAfterRecord(log);
    const write = Segment.prototype.writeIndex;
    vi.spyOn(Segment.prototype, 'writeIndex').mockImplementation(function (this: Segment, synced: boolean) {
      if (this.baseOffset === base) return Promise.reject(Object.assign(new Error('EMFILE'), { code: 'EMFILE' }));
      return write.call(this, synced);
    });
    await log.truncateTo(cut);
    vi.restoreAllMocks();
    expect(log.failed).toBe(false);
    const res = await log.append([{ key: Buffer.from('after'), value: Buffer.from('cut') }]);
    expect(res.baseOffset).toBe(cut);
    log = await crashAndReopen(log, 'a');
    expect(log.logEndOffset).toBe(cut + 1);
    expect((await readAll(log)).at(-1)?.offset).toBe(cut);
  });

  it('a crash while the kept segment is fsynced leaves the log end at the cut, not below it', async () => {
    const log = await compactedLog('b');
    const { cut, base } = await cutAfterRecord(log);
    // The files as a crash at that point leaves them (a process crash keeps what was written).
    const image = join(tmp(), 'image');
    let copied = false;
    const datasync = Segment.prototype.datasync;
    vi.spyOn(Segment.prototype, 'datasync').mockImplementation(async function (this: Segment) {
      if (this.baseOffset === base && !copied) {
        copied = true;
        await cp(join(tmp(), 'b'), image, { recursive: true });
      }
      return datasync.call(this);
    });
    await log.truncateTo(cut);
    vi.restoreAllMocks();
    expect(copied).toBe(true);
    const recovered = await openLog('image');
    expect(recovered.logEndOffset).toBe(cut);
    expect((await recovered.append([{ key: null, value: Buffer.from('next') }])).baseOffset).toBe(cut);
  });
});

describe('truncation that leaves a compacted segment without records but with offsets past its base', () => {
  it('at or below the first record of a compacted segment that starts with a gap: the log end survives a crash', async () => {
    let log = await compactedLog('c');
    const all = await readAll(log);
    let cut = -1;
    for (const s of log.segmentInfos().slice(1, -1)) {
      const first = all.find((r) => r.offset >= s.baseOffset && r.offset < s.nextOffset);
      if (s.compacted && first && first.offset > s.baseOffset) {
        cut = first.offset;
        break;
      }
    }
    expect(cut).toBeGreaterThan(0);
    await log.truncateTo(cut);
    expect(log.logEndOffset).toBe(cut);
    log = await crashAndReopen(log, 'c');
    expect(log.logEndOffset).toBe(cut);
  });

  it('at the end of a first segment compaction emptied: the log end survives a crash', async () => {
    let log = await openLog('d');
    const put = async (key: string | null, i: number) => {
      const r = await log.append([{ key: key === null ? null : Buffer.from(key), value: Buffer.from(`v${i}-${'p'.repeat(30)}`), timestamp: T0 + i }]);
      log.setHighWatermark(r.lastOffset + 1);
    };
    // Every key of the first segment is written again in the second; the third is the active one.
    const keys: string[] = [];
    for (let i = 0; log.segmentInfos().length < 2; i++) {
      keys.push(`k${i}`);
      await put(`k${i}`, i);
    }
    keys.pop(); // its record rolled into the second segment
    for (const [i, k] of keys.entries()) await put(k, 100 + i);
    while (log.segmentInfos().length < 3) await put(null, 200);
    await log.compact({ now: T0 });
    const [first, second] = log.segmentInfos();
    expect(first).toMatchObject({ compacted: true, sizeBytes: 0 });
    expect(first.nextOffset).toBe(second.baseOffset);
    const cut = second.baseOffset;
    await log.truncateTo(cut);
    expect(log.logEndOffset).toBe(cut);
    log = await crashAndReopen(log, 'd');
    expect(log.logEndOffset).toBe(cut);
  });
});

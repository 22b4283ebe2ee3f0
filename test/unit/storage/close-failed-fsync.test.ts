/**
 * A clean close whose fsync of one segment fails (docs/architecture.md "Storage", Durability): the log fails
 * and only what is in doubt is cut back to its last good fsync (LogState.failSync). Segments the close had
 * not synced yet are not in doubt: under flush=os a segment rolled without an fsync has nothing durable, and
 * cutting it to nothing made the next open drop it and every later segment.
 */
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { PartitionLog } from 'tributary-broker/storage/partition-log.js';
import { removeDir, tempDir } from '../../helpers/util.js';

/** fdatasync calls are counted; from call number `failFrom` on they fail with EIO. */
const fsyncs = vi.hoisted(() => ({ calls: 0, failFrom: Number.POSITIVE_INFINITY }));
vi.mock('node:fs', async (importOriginal) => {
  const fs = await importOriginal<typeof import('node:fs')>();
  return {
    ...fs,
    fdatasync: (fd: number, cb: (err: NodeJS.ErrnoException | null) => void) => {
      if (++fsyncs.calls >= fsyncs.failFrom) process.nextTick(() => cb(Object.assign(new Error('EIO: i/o error, fdatasync'), { code: 'EIO', syscall: 'fdatasync' })));
      else fs.fdatasync(fd, cb);
    },
  };
});

let base: string;
beforeEach(async () => {
  base = await tempDir('trib-close-fsync-');
  Object.assign(fsyncs, { calls: 0, failFrom: Number.POSITIVE_INFINITY });
});
afterEach(async () => {
  fsyncs.failFrom = Number.POSITIVE_INFINITY;
  await removeDir(base);
});

describe('a clean close whose fsync of an older segment fails', () => {
  for (const flush of ['os', 'always'] as const) {
    it(`flush=${flush}: the log fails, and the next open has every record`, async () => {
      const dir = join(base, flush);
      const opts = { flush, segmentBytes: 4096, indexIntervalBytes: 512, tailCacheBytes: 0 };
      const log = await PartitionLog.open(dir, opts);
      for (let i = 0; i < 60; i++) await log.append([{ key: null, value: Buffer.from(`v${i}-${'x'.repeat(150)}`) }]);
      expect(log.segmentInfos().length).toBeGreaterThan(2);
      // flush=os: the active segment's fsync succeeds, the next (a closed segment rolled without one) fails.
      // flush=always: the active segment's fails; its appends were synced (nothing to cut).
      fsyncs.failFrom = fsyncs.calls + (flush === 'os' ? 2 : 1);
      await expect(log.close()).rejects.toThrow(/close failed/);
      expect(log.failed).toBe(true);
      fsyncs.failFrom = Number.POSITIVE_INFINITY;
      const again = await PartitionLog.open(dir, opts);
      try {
        expect(again.logEndOffset).toBe(60);
        const recs = await again.read(0, { maxRecords: 100, maxBytes: 1 << 20 });
        expect(recs.map((r) => r.value!.toString().split('-')[0])).toEqual(Array.from({ length: 60 }, (_, i) => `v${i}`));
      } finally {
        await again.close();
      }
    });
  }
});

describe('an explicit flush under flush=os whose fsync of one segment fails', () => {
  it('fails the log without cutting the segments it had not synced; the next open has every record', async () => {
    const dir = join(base, 'flush');
    const opts = { flush: 'os' as const, segmentBytes: 4096, indexIntervalBytes: 512, tailCacheBytes: 0 };
    const log = await PartitionLog.open(dir, opts);
    for (let i = 0; i < 60; i++) await log.append([{ key: null, value: Buffer.from(`v${i}-${'x'.repeat(150)}`) }]);
    fsyncs.failFrom = fsyncs.calls + 2;
    await expect(log.flush()).rejects.toThrow(/log failed/);
    fsyncs.failFrom = Number.POSITIVE_INFINITY;
    await log.close().catch(() => {});
    const again = await PartitionLog.open(dir, opts);
    try {
      expect(again.logEndOffset).toBe(60);
    } finally {
      await again.close();
    }
  });
});

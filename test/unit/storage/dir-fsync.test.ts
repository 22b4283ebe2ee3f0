/**
 * Directory fsyncs (storage/log-fs.ts fsyncDir): where a platform cannot fsync a directory the step is
 * skipped, but a failed one (EIO) is an error, and a log whose new segment's directory entry may not be
 * durable takes no more appends (docs/architecture.md, "Storage").
 */
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { fsyncDir } from 'tributary-broker/storage/log-fs.js';
import { PartitionLog } from 'tributary-broker/storage/partition-log.js';
import { removeDir, tempDir } from '../../helpers/util.js';

/** Directories whose fsync fails, with the error code. */
const failing = vi.hoisted(() => new Map<string, string>());
vi.mock('node:fs/promises', async (importOriginal) => {
  const fs = await importOriginal<typeof import('node:fs/promises')>();
  return {
    ...fs,
    open: async (...args: Parameters<typeof fs.open>) => {
      const fh = await fs.open(...args);
      const code = failing.get(String(args[0]));
      if (code === undefined) return fh;
      return new Proxy(fh, {
        get(target, prop) {
          if (prop === 'sync') return () => Promise.reject(Object.assign(new Error(`${code}: fsync of a directory`), { code }));
          const v = Reflect.get(target, prop);
          return typeof v === 'function' ? v.bind(target) : v;
        },
      });
    },
  };
});

let dir: string;
beforeEach(async () => {
  dir = await tempDir('trib-dir-fsync-');
});
afterEach(async () => {
  failing.clear();
  await removeDir(dir);
});

describe('fsyncDir', () => {
  it('skips a directory the platform cannot fsync and throws on a failed fsync', async () => {
    for (const code of ['EINVAL', 'ENOTSUP', 'EISDIR', 'EPERM']) {
      failing.set(dir, code);
      await expect(fsyncDir(dir)).resolves.toBeUndefined();
    }
    failing.set(dir, 'EIO');
    await expect(fsyncDir(dir)).rejects.toMatchObject({ code: 'EIO' });
  });

  it('a segment roll whose directory fsync fails refuses the append and fails the log', async () => {
    const log = await PartitionLog.open(dir, { flush: 'always', segmentBytes: 200 });
    await log.append([{ key: null, value: Buffer.alloc(60) }]);
    failing.set(dir, 'EIO');
    // Does not fit: the roll creates a segment, whose directory entry cannot be made durable.
    await expect(log.append([{ key: null, value: Buffer.alloc(150) }])).rejects.toMatchObject({ code: 'storage_error' });
    failing.clear();
    await expect(log.append([{ key: null, value: Buffer.alloc(10) }])).rejects.toThrow(/log failed/);
    await log.close().catch(() => {});
  });
});

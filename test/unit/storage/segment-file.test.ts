/**
 * A segment's writes and fsyncs while its file is open (docs/architecture.md, "Storage"): writeNow writes
 * at once and says when it could not (the file not open), and an fsync through the bare fd keeps the fd
 * from being closed under it, so its number is never reused by another file while the fsync runs.
 */
import { readFile } from 'node:fs/promises';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { Segment } from 'tributary-broker/storage/segment.js';
import { removeDir, tempDir } from '../../helpers/util.js';

let dir: string;
beforeEach(async () => {
  dir = await tempDir('trib-segment-file-');
});
afterEach(async () => {
  await removeDir(dir);
});

describe('Segment file handle', () => {
  it('writes at once while open, and only through writeAt once released', async () => {
    const seg = await Segment.create(dir, 0, 4096, Date.now());
    try {
      expect(seg.writeNow(Buffer.from('abc'), 0)).toBe(true);
      await seg.release();
      expect(seg.isOpen).toBe(false);
      // Not open: nothing written, the caller waits for writeAt instead.
      expect(seg.writeNow(Buffer.from('XYZ'), 3)).toBe(false);
      await seg.writeAt(Buffer.from('def'), 3);
      // Open again: at once.
      expect(seg.writeNow(Buffer.from('ghi'), 6)).toBe(true);
      expect((await readFile(seg.logPath)).toString()).toBe('abcdefghi');
    } finally {
      await seg.close();
    }
    expect(seg.writeNow(Buffer.from('jkl'), 9)).toBe(false);
  });

  it('closes its fd only after the fsyncs in flight on it have completed', async () => {
    const seg = await Segment.create(dir, 0, 4096, Date.now());
    expect(seg.writeNow(Buffer.alloc(64 * 1024, 1), 0)).toBe(true);
    const done: string[] = [];
    const syncs = [seg.datasync(), seg.datasync()].map((s) =>
      s.then(
        () => done.push('synced'),
        (err: Error) => done.push(`failed: ${err.message}`),
      ),
    );
    await seg.close();
    done.push('closed');
    await Promise.all(syncs);
    expect(done).toEqual(['synced', 'synced', 'closed']);
  });
});

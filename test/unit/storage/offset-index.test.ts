import { readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { OffsetIndex, parseIndex, readIndexFile, serializeIndex, writeIndexFile } from 'tributary-broker/storage/offset-index.js';
import { removeDir, tempDir } from '../../helpers/util.js';

describe('OffsetIndex', () => {
  it('looks up the greatest entry <= offset', () => {
    const idx = new OffsetIndex(1000, 100);
    expect(idx.lookup(1000)).toEqual({ offset: 1000, position: 0 });
    expect(idx.lookup(5000)).toEqual({ offset: 1000, position: 0 });
    // Records of 60 bytes: entries appear once >= 100 bytes passed since the last one.
    for (let i = 0; i < 50; i++) idx.onRecord(1000 + i, i * 60);
    expect(idx.length).toBeGreaterThan(10);
    for (let i = 0; i < idx.length; i++) {
      const e = idx.entry(i);
      expect(e.position).toBe((e.offset - 1000) * 60);
      if (i > 0) expect(e.position - idx.entry(i - 1).position).toBeGreaterThanOrEqual(100);
    }
    for (let o = 1000; o < 1060; o++) {
      const e = idx.lookup(o);
      expect(e.offset).toBeLessThanOrEqual(o);
      // It is the greatest such entry.
      let best = { offset: 1000, position: 0 };
      for (let i = 0; i < idx.length; i++) if (idx.entry(i).offset <= o) best = idx.entry(i);
      expect(e).toEqual(best);
    }
    expect(idx.lookup(999)).toEqual({ offset: 1000, position: 0 });
  });

  it('truncates entries at and above an offset', () => {
    const idx = new OffsetIndex(0, 1);
    for (let i = 1; i < 10; i++) idx.onRecord(i, i * 10);
    expect(idx.length).toBe(9);
    idx.truncateToOffset(5);
    expect(idx.last()).toEqual({ offset: 4, position: 40 });
    expect(idx.lookup(8)).toEqual({ offset: 4, position: 40 });
    idx.onRecord(5, 50);
    expect(idx.lookup(8)).toEqual({ offset: 5, position: 50 });
  });

  it('rejects non-increasing entries', () => {
    const idx = new OffsetIndex(0, 1);
    idx.append(5, 100);
    expect(() => idx.append(5, 200)).toThrow(RangeError);
    expect(() => idx.append(6, 50)).toThrow(RangeError);
  });

  describe('file', () => {
    let dir: string;
    beforeEach(async () => {
      dir = await tempDir('trib-idx-');
    });
    afterEach(async () => {
      await removeDir(dir);
    });

    it('round-trips and detects corruption', async () => {
      const idx = new OffsetIndex(42, 10);
      for (let i = 1; i < 100; i++) idx.onRecord(42 + i, i * 7);
      const meta = { baseOffset: 42, nextOffset: 142, maxTimestamp: 1234, logSize: 700, createdMs: 99, synced: true };
      const path = join(dir, 'x.index');
      await writeIndexFile(path, meta, idx);
      const back = await readIndexFile(path);
      expect(back?.meta).toEqual(meta);
      expect(back?.index.length).toBe(idx.length);
      for (let i = 0; i < idx.length; i++) expect(back?.index.entry(i)).toEqual(idx.entry(i));
      const raw = await readFile(path);
      for (let i = 0; i < raw.length; i += 3) {
        const c = Buffer.from(raw);
        c[i] ^= 0x10;
        expect(parseIndex(c)).toBeNull();
      }
      expect(parseIndex(raw.subarray(0, raw.length - 1))).toBeNull();
      await writeFile(path, Buffer.alloc(0));
      expect(await readIndexFile(path)).toBeNull();
      expect(await readIndexFile(join(dir, 'missing.index'))).toBeNull();
      expect(serializeIndex(meta, new OffsetIndex(42)).length).toBeGreaterThan(0);
    });
  });
});

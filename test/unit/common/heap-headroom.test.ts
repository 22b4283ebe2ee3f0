/**
 * The broker process's old-generation headroom (common/heap-headroom.ts): the growing factor given to V8
 * for the live heap it has, set again after every full collection, and left to V8 once the heap is large.
 */
import v8 from 'node:v8';
import { runInNewContext } from 'node:vm';
import { describe, expect, it } from 'vitest';
import { growingPercent, keepHeapHeadroom, MAX_GROWING_PERCENT } from 'tributary-broker/common/heap-headroom.js';
import { eventually } from '../../helpers/util.js';

const MB = 1024 * 1024;

/** A full collection, as V8 runs one (the observer sees a major GC entry). */
function fullGc(): void {
  v8.setFlagsFromString('--expose-gc');
  (runInNewContext('gc') as () => void)();
}

describe('growingPercent', () => {
  it('gives a small heap about the headroom, capped at factor 4, and a heap as large as the headroom V8 own factor', () => {
    expect(growingPercent(64 * MB, 128 * MB)).toBe(200); // 64 + 128 = 64 x 3
    expect(growingPercent(100 * MB, 128 * MB)).toBe(128);
    expect(growingPercent(23 * MB, 128 * MB)).toBe(MAX_GROWING_PERCENT);
    expect(growingPercent(0, 128 * MB)).toBe(MAX_GROWING_PERCENT);
    expect(growingPercent(128 * MB, 128 * MB)).toBe(0);
    expect(growingPercent(900 * MB, 128 * MB)).toBe(0);
    expect(growingPercent(10 * MB, 0)).toBe(0);
  });
});

describe('keepHeapHeadroom', () => {
  it('sets the factor at once and again after each full collection, only when it changes, until stopped', async () => {
    const flags: string[] = [];
    let live = 23 * MB;
    const h = keepHeapHeadroom(128, { setFlag: (f) => flags.push(f), liveBytes: () => live });
    try {
      expect(flags).toEqual(['--heap-growing-percent=300']);
      expect(h.percent).toBe(300);
      live = 64 * MB;
      fullGc();
      await eventually('set again after a full collection', () => flags.length === 2);
      expect(flags[1]).toBe('--heap-growing-percent=200');
      // Unchanged: nothing set.
      fullGc();
      live = 500 * MB;
      fullGc();
      await eventually("back to V8's own factor", () => h.percent === 0);
      expect(flags).toEqual(['--heap-growing-percent=300', '--heap-growing-percent=200', '--heap-growing-percent=0']);
    } finally {
      h.stop();
    }
    live = 10 * MB;
    fullGc();
    await new Promise((r) => setImmediate(r));
    await new Promise((r) => setTimeout(r, 50));
    expect(flags).toHaveLength(3);
  });

  it('with no headroom leaves V8 alone', () => {
    const flags: string[] = [];
    const h = keepHeapHeadroom(0, { setFlag: (f) => flags.push(f), liveBytes: () => MB });
    h.stop();
    expect(flags).toEqual([]);
    expect(h.percent).toBe(0);
  });
});

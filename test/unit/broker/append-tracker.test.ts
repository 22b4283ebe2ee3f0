/**
 * AppendTracker counts the append-like operations a truncation waits for (drained()). An operation that
 * throws while starting counts as settled, so drained() resolves: a truncation never hangs on it.
 */
import { describe, expect, it } from 'vitest';
import { AppendTracker } from 'tributary-broker/partition/append-tracker.js';

describe('AppendTracker', () => {
  it('turns a throw while starting into a rejection that settles the operation', async () => {
    const t = new AppendTracker();
    const p = t.track<number>(() => {
      throw new TypeError('bad record');
    });
    await expect(p).rejects.toThrow('bad record');
    await t.drained();
    expect(t.idle).toBe(true);
  });

  it('waits for operations begun before drained() was called', async () => {
    const t = new AppendTracker();
    let finish!: () => void;
    void t.track(() => new Promise<void>((r) => (finish = r)));
    let drained = false;
    const d = t.drained().then(() => {
      drained = true;
    });
    await Promise.resolve();
    expect(drained).toBe(false);
    finish();
    await d;
    expect(t.idle).toBe(true);
  });
});

import { describe, expect, it } from 'vitest';
import { FetchWatch, formatMarked, parseMarked } from 'tributary-broker/cluster/fetch-watch.js';

describe('FetchWatch (leader side of parked replica fetches)', () => {
  it('answers at once with what was marked, each partition once, then nothing', async () => {
    const w = new FetchWatch();
    w.mark(1, 'a', 0);
    w.mark(1, 'a', 0);
    w.mark(1, 'b', 3);
    w.mark(2, 'a', 0);
    expect(await w.wait(1, 0)).toEqual([
      { topic: 'a', partition: 0 },
      { topic: 'b', partition: 3 },
    ]);
    expect(await w.wait(1, 0)).toEqual([]);
    expect(await w.wait(2, 0)).toEqual([{ topic: 'a', partition: 0 }]);
  });

  it('a waiting follower is answered by the next mark', async () => {
    const w = new FetchWatch();
    const waiting = w.wait(1, 60_000);
    w.mark(2, 'other', 0); // another follower's mark does not wake it
    w.mark(1, 't', 5);
    expect(await waiting).toEqual([{ topic: 't', partition: 5 }]);
  });

  it('a newer wait of the same follower ends the older one empty and gets the marks', async () => {
    const w = new FetchWatch();
    const older = w.wait(1, 60_000);
    const newer = w.wait(1, 60_000);
    expect(await older).toEqual([]);
    w.mark(1, 't', 1);
    expect(await newer).toEqual([{ topic: 't', partition: 1 }]);
  });

  it('an aborted wait answers empty and keeps later marks for the next one', async () => {
    const w = new FetchWatch();
    const ac = new AbortController();
    const waiting = w.wait(1, 60_000, ac.signal);
    ac.abort();
    expect(await waiting).toEqual([]);
    w.mark(1, 't', 2);
    expect(await w.wait(1, 0)).toEqual([{ topic: 't', partition: 2 }]);
  });

  it('the wire list round-trips and skips what does not parse', () => {
    const list = [
      { topic: 'orders.v1', partition: 0 },
      { topic: 'a_b-c', partition: 9999 },
    ];
    expect(parseMarked(formatMarked(list))).toEqual(list);
    expect(parseMarked('')).toEqual([]);
    expect(parseMarked(undefined)).toEqual([]);
    expect(parseMarked('x:1,broken,:2,y:-1,z:3')).toEqual([
      { topic: 'x', partition: 1 },
      { topic: 'z', partition: 3 },
    ]);
  });
});

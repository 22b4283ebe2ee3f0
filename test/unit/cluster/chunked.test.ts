/** cluster/chunked.ts: work over many partitions yields to the event loop between chunks. */
import { describe, expect, it } from 'vitest';
import { eachInChunks } from 'tributary-broker/cluster/chunked.js';

describe('eachInChunks', () => {
  it('lets other work run between chunks, and calls fn on every item in order', async () => {
    const seen: string[] = [];
    // Queued before the loop starts: it runs at the first yield, after the first chunk.
    setImmediate(() => seen.push('other'));
    await eachInChunks(
      [1, 2, 3, 4, 5],
      (n) => seen.push(String(n)),
      () => false,
      2,
    );
    expect(seen).toEqual(['1', '2', 'other', '3', '4', '5']);
  });

  it('stops once stop() holds', async () => {
    const seen: number[] = [];
    await eachInChunks(
      [1, 2, 3, 4, 5],
      (n) => seen.push(n),
      () => seen.length >= 3,
      10,
    );
    expect(seen).toEqual([1, 2, 3]);
  });
});

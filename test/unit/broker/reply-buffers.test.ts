/**
 * broker/reply-buffers.ts: the memory CONSUME and STREAM replies are written into comes back once per
 * reply and only from the buffers the pool lent, so one buffer never holds two replies at once (a reply
 * still queued on a slow socket must not be overwritten by another connection's reply). That the
 * connection gives a reply back only after the socket wrote it: test/integration/reply-buffers.test.ts.
 */
import { describe, expect, it } from 'vitest';
import { MAX_POOLED_BYTES, MIN_POOLED_BYTES, ReplyBuffers } from 'tributary-broker/broker/reply-buffers.js';

describe('ReplyBuffers', () => {
  it('gives buffers of the asked length and reuses one given back for a reply of its size class', () => {
    const pool = new ReplyBuffers();
    const a = pool.take(5000);
    expect(a.length).toBe(5000);
    expect(a.buffer.byteLength).toBe(6144); // size classes 2^k and 1.5 x 2^k
    expect(pool.owns(a)).toBe(true);
    pool.give(a.subarray(0, 100)); // any view of it, as the connection writes the used part of a reply
    expect(pool.owns(a)).toBe(false);
    expect(pool.pooledBytes).toBe(6144);
    const b = pool.take(4097);
    expect(b.buffer).toBe(a.buffer);
    expect(b.length).toBe(4097);
    expect(pool.reused).toBe(1);
    expect(pool.pooledBytes).toBe(0);
    // Another class does not get it.
    pool.give(b);
    expect(pool.take(9000).buffer).not.toBe(a.buffer);
    expect(pool.take(MIN_POOLED_BYTES).buffer.byteLength).toBe(MIN_POOLED_BYTES);
    expect(pool.take(1).buffer.byteLength).toBe(MIN_POOLED_BYTES);
  });

  it('pools a buffer given back twice for one reply once, so it is never lent to two replies at once', () => {
    const pool = new ReplyBuffers();
    const a = pool.take(3000);
    pool.give(a);
    pool.give(a.subarray(0, 10)); // the same reply's memory again: ignored
    expect(pool.pooledBytes).toBe(3072);
    const b = pool.take(3000);
    const c = pool.take(3000);
    expect(b.buffer).toBe(a.buffer);
    expect(c.buffer).not.toBe(b.buffer);
    expect(pool.reused).toBe(1);
  });

  it('ignores buffers it did not lend and does not pool very large replies', () => {
    const pool = new ReplyBuffers();
    const foreign = Buffer.allocUnsafe(4096);
    expect(pool.owns(foreign)).toBe(false);
    pool.give(foreign);
    expect(pool.pooledBytes).toBe(0);
    const big = pool.take(MAX_POOLED_BYTES + 1);
    expect(big.length).toBe(MAX_POOLED_BYTES + 1);
    expect(pool.owns(big)).toBe(false);
    pool.give(big);
    expect(pool.pooledBytes).toBe(0);
    const largest = pool.take(MAX_POOLED_BYTES);
    expect(pool.owns(largest)).toBe(true);
  });

  it('keeps at most maxFreeBytes for reuse', () => {
    const pool = new ReplyBuffers(3 * 4096);
    const out = Array.from({ length: 5 }, () => pool.take(4096));
    for (const b of out) pool.give(b);
    expect(pool.pooledBytes).toBe(3 * 4096);
    const again = Array.from({ length: 5 }, () => pool.take(4096));
    expect(pool.reused).toBe(3);
    expect(new Set(again.map((b) => b.buffer)).size).toBe(5);
  });
});

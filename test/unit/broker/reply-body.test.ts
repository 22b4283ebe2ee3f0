/**
 * broker/reply-buffers.ts writeReplyBody: a reply in pieces (views of the tail cache's memory beside the
 * reply's own buffer, docs/architecture.md "Broker", reply buffers) is written piece by piece, and only the
 * buffer the pool lent goes back to it, once the socket wrote the last piece.
 */
import { describe, expect, it } from 'vitest';
import { ReplyBuffers, writeReplyBody } from 'tributary-broker/broker/reply-buffers.js';
import { FramePool } from 'tributary-broker/storage/frame-pool.js';

describe('writeReplyBody', () => {
  /** A socket that keeps what it is given and calls the write callbacks when told (as the kernel takes the bytes). */
  function fakeSocket() {
    const written: Buffer[] = [];
    const callbacks: Array<() => void> = [];
    return {
      written,
      /** Calls the next write's callback; false when none is left. */
      written1: () => {
        const cb = callbacks.shift();
        cb?.();
        return cb !== undefined;
      },
      flush: () => {
        for (const cb of callbacks.splice(0)) cb();
      },
      write(b: Buffer, cb?: () => void): boolean {
        written.push(b);
        callbacks.push(cb ?? (() => {}));
        return true;
      },
    };
  }

  it('writes each piece, not concatenated, and gives back only the pooled buffer, once the last piece is written', () => {
    const pool = new ReplyBuffers();
    const own = pool.take(3000);
    own.fill(7);
    const cached = Buffer.allocUnsafeSlow(8192).fill(9);
    const body = [own.subarray(0, 40), cached.subarray(100, 4100), own.subarray(40, 64), cached.subarray(5000, 8000), own.subarray(64, 88)];
    const socket = fakeSocket();
    expect(writeReplyBody(socket, body, pool)).toBe(true);
    expect(socket.written).toEqual(body);
    expect(socket.written[1]!.buffer).toBe(cached.buffer);
    // Not before the socket wrote every piece: another reply would overwrite the ones still queued.
    for (let i = 0; i < body.length - 1; i++) {
      expect(socket.written1()).toBe(true);
      expect(pool.owns(own)).toBe(true);
      expect(pool.pooledBytes).toBe(0);
    }
    socket.flush();
    expect(pool.owns(own)).toBe(false);
    expect(pool.pooledBytes).toBe(own.buffer.byteLength);
    // The cached memory never went to the pool: the next take gets the reply's buffer back, not it.
    expect(pool.take(3000).buffer).toBe(own.buffer);
    expect(pool.pooledBytes).toBe(0);
  });

  it('a body ending in a view still gives its pooled buffer back after the last write, and a body of views alone gives nothing', () => {
    const pool = new ReplyBuffers();
    const own = pool.take(2048);
    const cached = Buffer.allocUnsafeSlow(4096);
    const socket = fakeSocket();
    writeReplyBody(socket, [own.subarray(0, 30), cached.subarray(0, 4096)], pool);
    expect(pool.owns(own)).toBe(true);
    socket.flush();
    expect(pool.owns(own)).toBe(false);
    expect(pool.pooledBytes).toBe(2048);
    writeReplyBody(socket, [cached.subarray(0, 10), cached.subarray(10, 20)], pool);
    socket.flush();
    expect(pool.pooledBytes).toBe(2048);
  });
});

describe('writeReplyBody with views of frame memory', () => {
  it('lets go of the views the tail cache pinned only once the last piece is written, and of each once', () => {
    const frames = new FramePool();
    const frame = frames.take(32 * 1024);
    const view = frames.pin(frame, 100, 20_000);
    const other = frame.subarray(20_000, 30_000);
    frames.release(frame); // the frame's own hold (the log writer's): the pinned view still holds it
    expect(frames.lent(frame)).toBe(true);
    const writes: Array<() => void> = [];
    const socket = {
      write(_b: Buffer, cb?: () => void): boolean {
        writes.push(cb ?? (() => {}));
        return true;
      },
    };
    const head = Buffer.alloc(40);
    writeReplyBody(socket, [head, view, other], undefined, frames);
    expect(writes).toHaveLength(3);
    writes[0]!();
    writes[1]!();
    expect(frames.lent(frame)).toBe(true);
    writes[2]!();
    expect(frames.lent(frame)).toBe(false);
    expect(frames.pooledBytes).toBe(32 * 1024);
    // The same body written again (a caller's mistake) lets go of nothing more: the memory stays free once.
    writeReplyBody(socket, [head, view, other], undefined, frames);
    for (const cb of writes.splice(0)) cb();
    expect(frames.pooledBytes).toBe(32 * 1024);
    expect(frames.take(32 * 1024).buffer).toBe(frame.buffer);
  });
});

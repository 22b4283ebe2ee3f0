/**
 * The broker connection's frame timer on a fake clock: a frame that starts but does not complete within
 * frameTimeoutMs is answered with request_timeout and the connection closed, counted from its first bytes
 * (steady progress on one frame does not reset it; the next frame's first bytes start its own time); a
 * frame completed in time disarms it; with the bytes as 'data' chunks and read into the connection's
 * FrameReader (direct-reads.ts). bad-input.test.ts checks the
 * same against a broker process, without timing it.
 */
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { type ConnectionBroker, FakeClientSocket, connectFake } from '../../helpers/fake-client-socket.js';
import { parseLine } from 'tributary-protocol/command.js';

const FRAME_TIMEOUT_MS = 500;

function open(reads: 'chunks' | 'direct'): FakeClientSocket {
  const socket = new FakeClientSocket();
  const broker = {
    config: {
      maxFrameBytes: 64 * 1024 * 1024,
      idleTimeoutMs: 600_000,
      frameTimeoutMs: FRAME_TIMEOUT_MS,
      maxPendingReplyBytes: 16 * 1024 * 1024,
      writeStallTimeoutMs: 60_000,
    },
    logger: { debug() {}, info() {}, warn() {}, error() {} },
    metrics: { connectionsRejected: { inc() {} }, pendingRequestBytes: { inc() {}, dec() {} } },
    turnWrites: { corkFor() {} },
  } as unknown as ConnectionBroker;
  connectFake(socket, broker, reads);
  return socket;
}

function header(length: number): Buffer {
  const h = Buffer.alloc(4);
  h.writeUInt32BE(length, 0);
  return h;
}

beforeEach(() => {
  vi.useFakeTimers({ now: 1_000_000 });
});
afterEach(() => {
  vi.useRealTimers();
});

// Bytes as 'data' chunks (TLS connections) and read into the connection's FrameReader (plain TCP).
describe.each(['chunks', 'direct'] as const)('frame timer (%s)', (reads) => {
  it('answers an incomplete frame with request_timeout and closes the connection frameTimeoutMs after its first bytes', async () => {
    const s = open(reads);
    s.arrive(Buffer.concat([header(100), Buffer.from('PUBLISH topic=seed partition=0 message=')]));
    await vi.advanceTimersByTimeAsync(FRAME_TIMEOUT_MS - 1);
    expect(s.written).toEqual([]);
    expect(s.ended).toBe(false);
    await vi.advanceTimersByTimeAsync(1);
    const replies = s.replies();
    expect(replies).toHaveLength(1);
    expect(replies[0]).toMatch(/^ERROR: request_timeout /);
    expect(parseLine(replies[0]!.slice('ERROR: '.length)).params.get('reason')).toBe('incomplete frame');
    // ended at once (the reply goes out), destroyed after a short grace
    expect(s.ended).toBe(true);
    expect(s.destroyed).toBe(false);
    await vi.advanceTimersByTimeAsync(200);
    expect(s.destroyed).toBe(true);
  });

  it('does not reset the timer on progress: a frame trickled a byte at a time is cut off frameTimeoutMs after it began', async () => {
    const s = open(reads);
    const frame = Buffer.concat([header(40), Buffer.from('PUBLISH topic=seed partition=0 message=x')]);
    let sent = 0;
    s.arrive(frame.subarray(sent, ++sent));
    for (let t = 100; t < FRAME_TIMEOUT_MS; t += 100) {
      await vi.advanceTimersByTimeAsync(100);
      s.arrive(frame.subarray(sent, ++sent));
    }
    await vi.advanceTimersByTimeAsync(99);
    expect(s.written).toEqual([]);
    await vi.advanceTimersByTimeAsync(1);
    expect(s.replies()).toEqual([expect.stringMatching(/^ERROR: request_timeout /)]);
    expect(s.ended).toBe(true);
    expect(sent).toBeLessThan(frame.length);
  });

  it('disarms the timer when the frame completes in time', async () => {
    const s = open(reads);
    // a keepalive (an empty frame), its header split in two
    s.arrive(Buffer.from([0, 0]));
    await vi.advanceTimersByTimeAsync(FRAME_TIMEOUT_MS - 1);
    s.arrive(Buffer.from([0, 0]));
    await vi.advanceTimersByTimeAsync(10 * FRAME_TIMEOUT_MS);
    expect(s.written).toEqual([]);
    expect(s.ended).toBe(false);
    expect(s.destroyed).toBe(false);
  });

  it('times each frame from its own first bytes: a pipelining client whose reads always end mid-frame is not cut off', async () => {
    // What a broker behind on a busy connection reads: every chunk completes frames and starts the next.
    const s = open(reads);
    s.arrive(Buffer.from([0, 0]));
    for (let t = 0; t < 10 * FRAME_TIMEOUT_MS; t += 100) {
      await vi.advanceTimersByTimeAsync(100);
      s.arrive(Buffer.alloc(8));
    }
    expect(s.written).toEqual([]);
    expect([s.ended, s.destroyed]).toEqual([false, false]);
    // A frame that then stalls is still cut off frameTimeoutMs after its first bytes.
    await vi.advanceTimersByTimeAsync(FRAME_TIMEOUT_MS);
    expect(s.replies()).toEqual([expect.stringMatching(/^ERROR: request_timeout /)]);
  });
});

/**
 * The client Connection's plain TCP read path (docs/architecture.md, "Client read path"): reads land in
 * buffers a FrameReader hands out (net.Socket's onread), large reply bodies straight in their own buffer,
 * not through the 'data' chunks and FrameDecoder that TLS connections use. Replies come from a bare
 * server in pieces cut at header and body boundaries, and every reply is checked at the end, so one
 * that aliased a reused read buffer shows up overwritten.
 */
import net from 'node:net';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { type Batch, encodeBatch } from 'tributary-protocol/batch.js';
import { Connection } from 'tributary-protocol/connection.js';
import { encodeFrame, FrameDecoder } from 'tributary-protocol/frame.js';

function body(i: number, len: number): Buffer {
  const b = Buffer.allocUnsafe(len);
  for (let j = 0; j < len; j++) b[j] = (i * 131 + j * 7 + (j >> 8)) & 0xff;
  return b;
}

const turn = () => new Promise<void>((r) => setImmediate(r));

/**
 * A server that answers request frames `expected` at a time: once that many came, it writes their replies as one byte stream cut at `cuts`, a turn of the event loop
 * between pieces so the client reads them apart. Parses requests without FrameDecoder (spied on below).
 */
async function server(expected: number, answer: (req: string) => Buffer, cuts: (stream: Buffer) => number[]) {
  const sockets = new Set<net.Socket>();
  const srv = net.createServer((s) => {
    sockets.add(s);
    s.on('error', () => {});
    let pending = Buffer.alloc(0);
    let replies: Buffer[] = [];
    s.on('data', async (chunk) => {
      pending = Buffer.concat([pending, chunk]);
      while (pending.length >= 4 && pending.length >= 4 + pending.readUInt32BE(0)) {
        const len = pending.readUInt32BE(0);
        replies.push(encodeFrame(answer(pending.subarray(4, 4 + len).toString())));
        pending = pending.subarray(4 + len);
      }
      if (replies.length !== expected) return;
      const stream = Buffer.concat(replies);
      replies = [];
      const points = [...new Set(cuts(stream))].filter((c) => c > 0 && c < stream.length).sort((a, b) => a - b);
      let at = 0;
      for (const p of [...points, stream.length]) {
        s.write(stream.subarray(at, p));
        at = p;
        await turn();
      }
    });
  });
  await new Promise<void>((r) => srv.listen(0, '127.0.0.1', r));
  const port = (srv.address() as net.AddressInfo).port;
  return {
    port,
    close: () => {
      for (const s of sockets) s.destroy();
      return new Promise<void>((r) => srv.close(() => r()));
    },
  };
}

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  vi.restoreAllMocks();
  for (const c of cleanups.splice(0)) await c();
});

describe('Connection read path (plain TCP)', () => {
  it('delivers pipelined replies of every size byte for byte, cut at headers and bodies, without FrameDecoder', async () => {
    const sizes = [100, 1_000_000, 5, 70_000, 65_535, 65_536, 3, 300_000, 1, 200];
    const want = sizes.map((n, i) => body(i, n));
    const srv = await server(
      sizes.length,
      (req) => want[Number(req.split(' ')[1])]!,
      (stream) => {
        // A header split 1+3, a read ending right after a header, small and large frames in one piece.
        const cuts: number[] = [];
        let at = 0;
        for (const [i, b] of want.entries()) {
          if (i % 3 === 0) cuts.push(at + 1, at + 4);
          if (i % 3 === 1) cuts.push(at + 4 + Math.floor(b.length / 2));
          at += 4 + b.length;
        }
        for (let c = 0; c < stream.length; c += 40_000) cuts.push(c);
        return cuts;
      },
    );
    cleanups.push(srv.close);
    const push = vi.spyOn(FrameDecoder.prototype, 'push');
    const conn = await Connection.connect({ host: '127.0.0.1', port: srv.port, features: [] });
    cleanups.push(() => conn.close());
    const got = await Promise.all(sizes.map((_, i) => conn.requestBytes(`SIZE ${i}`)));
    expect(got.map((b) => b.length)).toEqual(sizes);
    for (const [i, b] of got.entries()) if (!b.equals(want[i]!)) throw new Error(`reply ${i} (${sizes[i]} bytes) differs`);
    // A second round through the same connection: the first round's replies keep their bytes.
    const again = await Promise.all(sizes.map((_, i) => conn.requestBytes(`SIZE ${sizes.length - 1 - i}`)));
    for (const [i, b] of again.entries()) expect(b.equals(want[sizes.length - 1 - i]!)).toBe(true);
    for (const [i, b] of got.entries()) if (!b.equals(want[i]!)) throw new Error(`reply ${i} changed after later reads`);
    expect(push).not.toHaveBeenCalled();
  });

  it('streams pushed batches through pause and resume, each batch keeping its records', async () => {
    const count = 150;
    const recordValue = (i: number) => body(i, i % 10 === 0 ? 100_000 : 50 + i);
    const batch = (i: number): Batch => ({
      topic: 't',
      partition: 0,
      acks: '1',
      idempotent: false,
      firstSequence: 0,
      lastSequence: 0,
      records: [{ offset: i, sequence: 0, producerId: '', key: null, epoch: -1, value: recordValue(i), timestamp: 0, attributes: 0, headers: [] }],
    });
    const sockets = new Set<net.Socket>();
    const srv = net.createServer((s) => {
      sockets.add(s);
      s.on('error', () => {});
      s.once('data', () => {
        // Everything at once: the client's queue passes 64 frames and it pauses the socket.
        s.write(Buffer.concat([...Array.from({ length: count }, (_, i) => encodeFrame(encodeBatch(batch(i)))), encodeFrame('STREAM_CONTROL type=CLOSE reason=done')]));
      });
    });
    await new Promise<void>((r) => srv.listen(0, '127.0.0.1', r));
    cleanups.push(
      () =>
        new Promise<void>((r) => {
          for (const s of sockets) s.destroy();
          srv.close(() => r());
        }),
    );
    const port = (srv.address() as net.AddressInfo).port;
    const conn = await Connection.connect({ host: '127.0.0.1', port, features: [] });
    cleanups.push(() => conn.close());
    const pausedPeers: (number | undefined)[] = [];
    const pause = net.Socket.prototype.pause;
    vi.spyOn(net.Socket.prototype, 'pause').mockImplementation(function (this: net.Socket) {
      pausedPeers.push(this.remotePort);
      return pause.call(this);
    });
    const got: Batch[] = [];
    const it = conn.stream({ topic: 't', partition: 0, offset: 0 });
    let end: IteratorResult<Batch, Record<string, string>>;
    for (;;) {
      end = await it.next();
      if (end.done) break;
      got.push(end.value);
      await turn();
    }
    expect(end.value).toMatchObject({ type: 'CLOSE', reason: 'done' });
    // The client's socket was paused (its queue passed 64 frames) and resumed, reads going on after.
    expect(pausedPeers).toContain(port);
    expect(got.length).toBe(count);
    for (const [i, b] of got.entries()) {
      const r = b.records[0]!;
      if (r.offset !== i || !r.value.equals(recordValue(i))) throw new Error(`batch ${i} differs`);
    }
  });
});

/**
 * adoptDirectReads (packages/broker/src/broker/direct-reads.ts) on real loopback sockets: an accepted
 * connection handed to a socket that reads into its FrameReader's buffers, large frames straight into
 * buffers of their own, and the server's count of connections carried over so that close() completes.
 */
import net from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { type DirectReads, DIRECT_READ_MIN_BROKER, adoptDirectReads, brokerFrameReader } from 'tributary-broker/broker/direct-reads.js';
import { MAX_POOLED_FRAME, MIN_POOLED_FRAME } from 'tributary-broker/storage/frame-pool.js';
import { encodeFrame } from 'tributary-protocol/frame.js';

function body(i: number, len: number): Buffer {
  const b = Buffer.allocUnsafe(len);
  for (let j = 0; j < len; j++) b[j] = (i * 131 + j * 7 + (j >> 8)) & 0xff;
  return b;
}

const open: Array<net.Server | net.Socket> = [];
afterEach(() => {
  for (const o of open.splice(0)) (o instanceof net.Server ? o.close() : o.destroy());
});

interface Alloc {
  bytes: number;
  /** Bytes the connection had read when it was made. */
  readBefore: number;
  memory: ArrayBuffer;
}

/**
 * A server whose connections are adopted; `frames` gets what each reads, `allocs` the buffers it asked
 * the pool for, `targets` the memory each read was to land in.
 */
async function server(): Promise<{ srv: net.Server; port: number; frames: Buffer[]; allocs: Alloc[]; targets: Set<ArrayBufferLike>; adopted: net.Socket[]; read: () => number }> {
  const frames: Buffer[] = [];
  const allocs: Alloc[] = [];
  const targets = new Set<ArrayBufferLike>();
  const adopted: net.Socket[] = [];
  let read = 0;
  const srv = net.createServer({ pauseOnConnect: true }, (accepted) => {
    const reader = brokerFrameReader(64 * 1024 * 1024, (n) => {
      const b = Buffer.allocUnsafe(n);
      allocs.push({ bytes: n, readBefore: read, memory: b.buffer as ArrayBuffer });
      return b;
    });
    const buffer = reader.buffer.bind(reader);
    reader.buffer = (limit) => {
      const b = buffer(limit);
      targets.add(b.buffer);
      return b;
    };
    const reads: DirectReads = { reader, onRead: undefined, limit: () => 64 * 1024 * 1024 };
    const s = adoptDirectReads(accepted, reads);
    if (!s) throw new Error('not adopted');
    reads.onRead = (n) => {
      read += n;
      reads.reader.wrote(n);
      for (let f = reads.reader.next(); f !== undefined; f = reads.reader.next()) frames.push(f);
      return true;
    };
    s.on('error', () => {});
    adopted.push(s);
  });
  open.push(srv);
  await new Promise<void>((r) => srv.listen(0, '127.0.0.1', r));
  return { srv, port: (srv.address() as net.AddressInfo).port, frames, allocs, targets, adopted, read: () => read };
}

async function connect(port: number): Promise<net.Socket> {
  const c = net.connect(port, '127.0.0.1');
  open.push(c);
  await new Promise<void>((r, j) => c.once('connect', r).once('error', j));
  return c;
}

async function until(cond: () => boolean, what: string): Promise<void> {
  for (let i = 0; i < 1000 && !cond(); i++) await new Promise((r) => setTimeout(r, 5));
  if (!cond()) throw new Error(`timed out waiting for ${what}`);
}

describe('adoptDirectReads', () => {
  it('reads every frame of an accepted connection, large ones straight into buffers of their own', async () => {
    const { port, frames, allocs, targets } = await server();
    const c = await connect(port);
    const lengths = [10, DIRECT_READ_MIN_BROKER + 1, 0, 300, 1_000_000, DIRECT_READ_MIN_BROKER - 1, 70_000, MIN_POOLED_FRAME - 1, 5, MAX_POOLED_FRAME + 1, 12];
    const bodies = lengths.map((len, i) => body(i, len));
    const stream = Buffer.concat(bodies.map((b) => encodeFrame(b)));
    // Written in uneven pieces, each after the last was taken by the kernel.
    for (let at = 0, i = 0; at < stream.length; i++) {
      const n = Math.min(stream.length - at, [1, 3, 7000, 65_536, 200_001][i % 5]!);
      if (!c.write(stream.subarray(at, at + n))) await new Promise((r) => c.once('drain', r));
      at += n;
    }
    await until(() => frames.length === bodies.length, 'every frame');
    for (let i = 0; i < bodies.length; i++) expect(frames[i]!.equals(bodies[i]!), `frame ${i}`).toBe(true);
    // Every frame of the threshold or more, and no other, had a buffer of its own, read into directly up
    // to the frame pool's largest; a larger one was read through the read buffer and copied out whole, as
    // was one between the frame pool's smallest and the threshold, into pool memory (no smaller one).
    const direct = lengths.filter((n) => n >= DIRECT_READ_MIN_BROKER && n <= MAX_POOLED_FRAME);
    expect(allocs.filter((a) => targets.has(a.memory)).map((a) => a.bytes)).toEqual(direct);
    const copied = allocs.filter((a) => !targets.has(a.memory));
    expect(copied.map((a) => a.bytes)).toEqual([DIRECT_READ_MIN_BROKER - 1, MAX_POOLED_FRAME + 1]);
    const before = lengths.slice(0, lengths.indexOf(MAX_POOLED_FRAME + 1) + 1).reduce((sum, n) => sum + 4 + n, 0);
    expect(copied[1]!.readBefore).toBeGreaterThanOrEqual(before);
  });

  it('gives no memory to what a header declares beyond the frame pool\'s largest until its bytes came', async () => {
    const { port, allocs, read } = await server();
    const c = await connect(port);
    const head = Buffer.alloc(4);
    head.writeUInt32BE(60 * 1024 * 1024, 0);
    c.write(Buffer.concat([head, Buffer.alloc(100_000, 7)]));
    await until(() => read() === 100_004, 'the bytes sent');
    expect(allocs).toEqual([]);
  });

  it('carries the server\'s count of connections over, so that close() completes once the adopted socket closed', async () => {
    const { srv, port, adopted } = await server();
    const c = await connect(port);
    await until(() => adopted.length === 1, 'the connection');
    const count = await new Promise<number>((r, j) => srv.getConnections((e, n) => (e ? j(e) : r(n))));
    expect(count).toBe(1);
    let closed = false;
    srv.close(() => {
      closed = true;
    });
    await new Promise((r) => setTimeout(r, 50));
    expect(closed).toBe(false);
    c.end();
    await until(() => closed, 'the server to close');
    expect(adopted[0]!.destroyed).toBe(true);
  });

  it('leaves a connection whose handle is gone to the caller', async () => {
    let result: net.Socket | undefined | 'unset' = 'unset';
    const srv = net.createServer({ pauseOnConnect: true }, (accepted) => {
      accepted.destroy();
      result = adoptDirectReads(accepted, { reader: brokerFrameReader(1024, undefined), onRead: undefined, limit: undefined });
    });
    open.push(srv);
    await new Promise<void>((r) => srv.listen(0, '127.0.0.1', r));
    await connect((srv.address() as net.AddressInfo).port);
    await until(() => result !== 'unset', 'the connection');
    expect(result).toBeUndefined();
  });
});

/**
 * The client Connection writes the requests of one event-loop turn together (one writev), and each turn's
 * requests leave before the next turn's I/O: a lone request is not held back.
 */
import net from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { Connection } from 'tributary-protocol/connection.js';
import { encodeFrame } from 'tributary-protocol/frame.js';

/** Answers every request frame with `OK <body>` and counts the frames it got. */
async function echoServer() {
  const sockets = new Set<net.Socket>();
  let frames = 0;
  const srv = net.createServer((s) => {
    sockets.add(s);
    s.on('error', () => {});
    let pending = Buffer.alloc(0);
    s.on('data', (chunk) => {
      pending = Buffer.concat([pending, chunk]);
      while (pending.length >= 4 && pending.length >= 4 + pending.readUInt32BE(0)) {
        const len = pending.readUInt32BE(0);
        const text = pending.subarray(4, 4 + len).toString();
        pending = pending.subarray(4 + len);
        frames++;
        // NEGOTIATE (sent on connect) is answered as a broker does; the rest echoed.
        s.write(encodeFrame(text.startsWith('NEGOTIATE') ? 'OK features=' : `OK ${text}`));
      }
    });
  });
  await new Promise<void>((r) => srv.listen(0, '127.0.0.1', r));
  return {
    port: (srv.address() as net.AddressInfo).port,
    frames: () => frames,
    close: () => {
      for (const s of sockets) s.destroy();
      return new Promise<void>((r) => srv.close(() => r()));
    },
  };
}

/** Counts the socket's write calls to the OS side: single writes and gathered ones. */
function countWrites(conn: Connection) {
  type Raw = (...a: unknown[]) => unknown;
  const socket = (conn as unknown as { socket: net.Socket & { _write: Raw; _writev: Raw } }).socket;
  const calls = { write: 0, writev: 0, chunks: 0 };
  const write = socket._write.bind(socket);
  const writev = socket._writev.bind(socket);
  socket._write = (...a: unknown[]) => {
    calls.write++;
    calls.chunks++;
    return write(...a);
  };
  socket._writev = (...a: unknown[]) => {
    calls.writev++;
    calls.chunks += (a[0] as unknown[]).length;
    return writev(...a);
  };
  return calls;
}

describe('Connection writes', () => {
  const cleanup: Array<() => Promise<unknown>> = [];
  afterEach(async () => {
    for (const c of cleanup.splice(0).reverse()) await c();
  });

  it('sends the requests of one turn in one writev, each answered in order', async () => {
    const srv = await echoServer();
    cleanup.push(srv.close);
    const conn = await Connection.connect({ host: '127.0.0.1', port: srv.port });
    cleanup.push(() => conn.close());
    const calls = countWrites(conn);
    const replies = Promise.all(['a', 'b', 'c', 'd'].map((x) => conn.request(x)));
    expect(calls).toEqual({ write: 0, writev: 0, chunks: 0 }); // held until the turn ends
    const got = await replies;
    expect(got.map((r) => (r.kind === 'text' ? r.text : r.kind))).toEqual(['OK a', 'OK b', 'OK c', 'OK d']);
    expect(calls).toEqual({ write: 0, writev: 1, chunks: 4 });
  });

  it('does not hold a lone request past its turn', async () => {
    const srv = await echoServer();
    cleanup.push(srv.close);
    const conn = await Connection.connect({ host: '127.0.0.1', port: srv.port });
    cleanup.push(() => conn.close());
    const calls = countWrites(conn);
    for (const x of ['one', 'two']) {
      const reply = conn.request(x);
      await new Promise<void>((r) => process.nextTick(r));
      // Written by the end of the turn's ticks: before any timer or I/O callback.
      expect(calls.chunks).toBe(x === 'one' ? 1 : 2);
      expect(await reply).toEqual({ kind: 'text', text: `OK ${x}` });
    }
  });
});

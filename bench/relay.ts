/**
 * Zero-logic relay: the baseline the broker is compared with (a child process).
 *
 *   node dist/bench/relay.js --file PATH [--host 127.0.0.1] [--port 0] [--fsync] [--exit-with-stdin]
 *
 * With --fsync (the fsync relay): frames are written with fs.write and made durable by fdatasync with
 * group commit (one fdatasync covers every frame written before it started), and each frame is
 * acknowledged and forwarded only once durable: the least any durable broker must do.
 *
 * A plain TCP server speaking the broker's framing and nothing else. A connection whose first frame is
 * `STREAM ...` becomes a consumer (answered `OK`); any other connection is a producer. Every producer
 * frame is appended verbatim (length prefix included) to one file through a write stream (no fsync),
 * acknowledged with one small reply frame, and forwarded verbatim to one consumer connection
 * (round-robin). No parsing of batches, no offsets, no index. Frames arriving before any consumer are
 * held until one subscribes; producers are paused while consumers do not keep up.
 *
 * Prints `relay listening on HOST:PORT`; on SIGTERM (or, with --exit-with-stdin, stdin closing) prints {"event":"result",frames,bytes} and exits.
 */
import fs from 'node:fs';
import net from 'node:net';
import { parseArgs } from 'node:util';
import { FrameDecoder, encodeFrame, frameHeader } from 'tributary-protocol/frame.js';
import { report } from './lib.js';

const { values: a } = parseArgs({
  options: {
    host: { type: 'string', default: '127.0.0.1' },
    port: { type: 'string', default: '0' },
    file: { type: 'string' },
    'exit-with-stdin': { type: 'boolean', default: false },
    fsync: { type: 'boolean', default: false },
  },
});
if (!a.file) {
  process.stderr.write('relay: --file is required\n');
  process.exit(2);
}

const ACK = encodeFrame('{"status":"OK"}');
const SUBSCRIBED = encodeFrame('OK');
/** Past this many unsent bytes on a consumer socket, producers are paused until it drains. */
const CONSUMER_HIGH_WATER = 32 * 1024 * 1024;

const log = fs.createWriteStream(a.file, { flags: 'a', highWaterMark: 1024 * 1024 });
log.on('error', (e) => {
  process.stderr.write(`relay: log write failed: ${e.message}\n`);
  process.exit(1);
});

/**
 * --fsync: frames queued while a write+fdatasync pass runs go into the next pass (group commit); each
 * pass writes its frames with one writev, fdatasyncs, then acknowledges and forwards them.
 */
const fd = a.fsync ? fs.openSync(`${a.file}.sync`, 'a') : -1;
let pending: Array<{ socket: net.Socket; body: Buffer }> = [];
let syncing = false;
function durable(socket: net.Socket, body: Buffer): void {
  pending.push({ socket, body });
  if (!syncing) void syncLoop();
}
async function syncLoop(): Promise<void> {
  syncing = true;
  while (pending.length > 0) {
    const batch = pending;
    pending = [];
    const bufs = batch.flatMap((f) => [frameHeader(f.body.length), f.body]);
    await new Promise<void>((resolve, reject) => fs.writev(fd, bufs, (err) => (err ? reject(err) : resolve())));
    await new Promise<void>((resolve, reject) => fs.fdatasync(fd, (err) => (err ? reject(err) : resolve())));
    const sockets = new Set<net.Socket>();
    for (const f of batch) {
      if (!sockets.has(f.socket)) {
        sockets.add(f.socket);
        f.socket.cork();
      }
      f.socket.write(ACK);
      forward(f.body);
    }
    for (const s of sockets) s.uncork();
  }
  syncing = false;
}

const consumers: net.Socket[] = [];
const producers = new Set<net.Socket>();
const held: Buffer[] = [];
let rr = 0;
let frames = 0;
let bytes = 0;
let paused = false;

function forward(body: Buffer): void {
  if (consumers.length === 0) {
    held.push(body);
    return;
  }
  const c = consumers[rr++ % consumers.length]!;
  c.cork();
  c.write(frameHeader(body.length));
  c.write(body);
  c.uncork();
  if (!paused && c.writableLength > CONSUMER_HIGH_WATER) {
    paused = true;
    for (const p of producers) p.pause();
  }
}

function onConsumerDrain(): void {
  if (!paused) return;
  if (consumers.some((c) => c.writableLength > CONSUMER_HIGH_WATER / 2)) return;
  paused = false;
  for (const p of producers) p.resume();
}

const server = net.createServer((socket) => {
  socket.setNoDelay(true);
  const decoder = new FrameDecoder();
  let role: 'unknown' | 'producer' | 'consumer' = 'unknown';
  socket.on('error', () => {});
  socket.on('close', () => {
    producers.delete(socket);
    const i = consumers.indexOf(socket);
    if (i >= 0) consumers.splice(i, 1);
  });
  socket.on('data', (chunk: Buffer) => {
    let bodies: Buffer[];
    try {
      bodies = decoder.push(chunk);
    } catch {
      socket.destroy();
      return;
    }
    // One reply write per chunk instead of one per frame.
    socket.cork();
    for (const body of bodies) {
      if (role === 'unknown') {
        if (body.length >= 6 && body.toString('latin1', 0, 6) === 'STREAM') {
          role = 'consumer';
          consumers.push(socket);
          socket.on('drain', onConsumerDrain);
          socket.write(SUBSCRIBED);
          for (const h of held.splice(0)) forward(h);
          continue;
        }
        role = 'producer';
        producers.add(socket);
        if (paused) socket.pause();
      }
      if (role === 'consumer') continue; // consumers send nothing else
      frames++;
      bytes += body.length;
      if (a.fsync) {
        durable(socket, body);
        continue;
      }
      log.write(frameHeader(body.length));
      log.write(body);
      socket.write(ACK);
      forward(body);
    }
    socket.uncork();
  });
});

server.listen(Number(a.port), a.host, () => {
  const addr = server.address() as net.AddressInfo;
  process.stdout.write(`relay listening on ${addr.address}:${addr.port}\n`);
});

function shutdown(): void {
  server.close();
  for (const s of [...producers, ...consumers]) s.destroy();
  log.end(() => {
    report({ event: 'result', frames, bytes });
    process.exit(0);
  });
}
process.on('SIGTERM', shutdown);
process.on('SIGINT', shutdown);
// Started with a stdin pipe by the orchestrator: when it goes away (even by SIGKILL), so does the relay.
if (a['exit-with-stdin']) {
  process.stdin.on('end', shutdown);
  process.stdin.resume();
}

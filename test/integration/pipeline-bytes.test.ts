/**
 * The bytes of requests one main-port connection may have read and not yet answered (docs/protocol.md,
 * "Connection limits"): past MAX_PENDING_REQUEST_BYTES the broker stops reading the connection until
 * replies went out, so a client pipelining large PUBLISH and batch frames behind a request that takes long
 * (a long-poll CONSUME here; an fsync or a replication wait alike) cannot make it buffer them all: its
 * writes back up in its own socket instead. Nothing is dropped or reordered, and the frame timeout of a
 * frame the broker stopped reading waits too. A request larger than the bound is still read whole, and
 * handled alone. An open STREAM is no request in flight: the frames sent on it are read on and answered.
 * `tributary_pending_request_bytes` shows what the broker holds.
 */
import { once } from 'node:events';
import type net from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { decodeBatch, encodeBatch } from 'tributary-protocol/batch.js';
import { parseLine } from 'tributary-protocol/command.js';
import type { Connection } from 'tributary-protocol/connection.js';
import { MAX_PENDING_REQUEST_BYTES } from 'tributary-broker/broker/request-budget.js';
import { BrokerProcess } from '../helpers/launcher.js';
import { RawClient, frame } from '../helpers/raw-client.js';
import { batchRec, sleep, until } from '../helpers/util.js';

const MiB = 1024 * 1024;
/** The empty partitions the long polls wait on (one per test) and the stream reads. */
const HELD = 'pipeline-held';
/** What one socket read may add past the bound before the broker pauses the socket (libuv reads 64 KiB). */
const READ_SLACK = 64 * 1024;
const FRAME_TIMEOUT_MS = 1000;

/** A CONSUME of HELD's empty `partition` that waits up to 30 s for a record. */
const longPoll = (partition: number) => frame(`CONSUME topic=${HELD} partition=${partition} offset=0 wait_ms=30000`);

/** A request of `bytes` to topic `nowhere-<i>`, which does not exist: answered topic_not_found, nothing written. Even `i` a text PUBLISH, odd a binary batch. */
function large(i: number, bytes: number): Buffer {
  const topic = `nowhere-${i}`;
  if (i % 2 === 0) return frame(`PUBLISH topic=${topic} partition=0 message=${'x'.repeat(bytes)}`);
  return frame(encodeBatch({ topic, partition: 0, acks: '1', idempotent: false, firstSequence: 0, lastSequence: 0, records: [batchRec(Buffer.alloc(bytes, 7))] }));
}

/**
 * Writes `frames` one after another, each once the socket handed the one before to the kernel: `sent` is
 * the bytes the kernel took. (A socket's writableLength would not do: the frames queued behind a write go
 * out in one writev, which leaves the count unchanged until all of them were taken.)
 */
function sendAll(socket: net.Socket, frames: Buffer[]): { sent: number } {
  const progress = { sent: 0 };
  void (async () => {
    for (const f of frames) {
      const more = socket.write(f, (err) => {
        if (!err) progress.sent += f.length;
      });
      if (!more) await once(socket, 'drain');
    }
  })().catch(() => {});
  return progress;
}

/** An `ERROR:` reply's code and `topic`. */
function refusal(reply: Buffer): [string, string | undefined] {
  const line = parseLine(reply.toString('utf8').slice('ERROR: '.length));
  return [line.head, line.params.get('topic')];
}

describe('bytes of requests in flight per main-port connection', () => {
  let broker: BrokerProcess;
  let c: Connection;

  beforeAll(async () => {
    broker = await BrokerProcess.start({ args: ['--frame-timeout-ms', String(FRAME_TIMEOUT_MS)] });
    c = await broker.connect();
    await c.command('CREATE', { topic: HELD, partitions: 3 });
  });
  afterAll(async () => {
    await broker?.dispose();
  });

  const pending = async () => {
    const m = /^tributary_pending_request_bytes (\d+)/m.exec((await broker.health('/metrics')).body);
    if (!m) throw new Error('no tributary_pending_request_bytes in /metrics');
    return Number(m[1]);
  };

  /** Resolves once the bytes the kernel took from the client stopped changing (for 500 ms), with them. */
  const settled = async (progress: { sent: number }): Promise<number> => {
    let last = -1;
    let still = 0;
    await until(
      () => {
        still = progress.sent === last ? still + 1 : 0;
        last = progress.sent;
        return still >= 5;
      },
      20_000,
      'the client’s writes to settle',
      100,
    );
    return last;
  };

  /** The one record of a CONSUME reply. */
  const consumed = (reply: Buffer) => decodeBatch(reply).records.map((r) => r.value.toString('utf8'));

  it('160 pipelined 1 MiB PUBLISH and batch frames behind a long-poll CONSUME, the client not reading: the broker stops reading at the bound; all answered in order once the CONSUME is', async () => {
    const raw = await RawClient.connect(broker.port);
    try {
      raw.socket.pause(); // reads no reply until told to
      const count = 160;
      const requests = [longPoll(0), ...Array.from({ length: count }, (_, i) => large(i, MiB))];
      const progress = sendAll(raw.socket, requests);
      const total = requests.reduce((n, r) => n + r.length, 0);

      // The broker read up to the bound and stopped: the rest backs up in the client's socket. (What the
      // kernel buffers between them, here at most 32 MiB received and 4 MiB sent, is not the broker's.)
      const sent = await settled(progress);
      expect(sent).toBeLessThan(MAX_PENDING_REQUEST_BYTES + MiB + 48 * MiB);
      expect(sent).toBeLessThan(total);
      const held = await pending();
      expect(held).toBeGreaterThanOrEqual(MAX_PENDING_REQUEST_BYTES);
      expect(held).toBeLessThanOrEqual(MAX_PENDING_REQUEST_BYTES + READ_SLACK);
      // The frame the broker stopped reading in is not timed meanwhile.
      await sleep(2 * FRAME_TIMEOUT_MS);
      expect(raw.closed).toBe(false);

      // The CONSUME is answered (a record arrives); the client reads: every request answered, in order.
      await c.command('PUBLISH', { topic: HELD, partition: 0, message: 'wake' });
      raw.socket.resume();
      expect(consumed(await raw.nextFrame())).toEqual(['wake']);
      const got: Array<[string, string | undefined]> = [];
      for (let i = 0; i < count; i++) got.push(refusal(await raw.nextFrame()));
      expect(got).toEqual(Array.from({ length: count }, (_, i) => ['topic_not_found', `nowhere-${i}`]));
      expect(progress.sent).toBe(total);
      expect(await pending()).toBe(0);
    } finally {
      raw.destroy();
    }
  });

  it('a request larger than the bound waits behind the one in flight, then is read whole and answered, the request after it too', async () => {
    const raw = await RawClient.connect(broker.port);
    try {
      const big = large(0, MAX_PENDING_REQUEST_BYTES + 4 * MiB);
      const progress = sendAll(raw.socket, [longPoll(1), big, frame('LIST')]);
      await settled(progress);
      // Not read whole while the CONSUME is in flight.
      const held = await pending();
      expect(held).toBeGreaterThanOrEqual(MAX_PENDING_REQUEST_BYTES);
      expect(held).toBeLessThan(big.length);

      await c.command('PUBLISH', { topic: HELD, partition: 1, message: 'wake' });
      expect(consumed(await raw.nextFrame())).toEqual(['wake']);
      expect(refusal(await raw.nextFrame())).toEqual(['topic_not_found', 'nowhere-0']);
      expect(await raw.next()).toMatch(/^OK count=\d+ topics=/);
      expect(await pending()).toBe(0);
    } finally {
      raw.destroy();
    }
  });

  it('an open STREAM is no request in flight: 24 MiB of frames sent on it are read and answered, the stream goes on', async () => {
    const raw = await RawClient.connect(broker.port);
    try {
      raw.send(`STREAM topic=${HELD} partition=2 offset=0`);
      /** The next frame that is not a keepalive. */
      const next = async () => {
        for (;;) {
          const f = await raw.nextFrame();
          if (f.length > 0) return f;
        }
      };
      // Each refused at once (only STREAM_CONTROL type=CLOSE is taken on a stream).
      for (let i = 0; i < 24; i++) raw.send(`STREAM_CONTROL type=CLOSE padding=${'x'.repeat(MiB)}`);
      for (let i = 0; i < 24; i++) expect(parseLine((await next()).toString('utf8').slice('ERROR: '.length)).params.get('param')).toBe('padding');
      expect(raw.socket.writableLength).toBe(0);
      await c.command('PUBLISH', { topic: HELD, partition: 2, message: 'streamed' });
      expect(consumed(await next())).toEqual(['streamed']);
      raw.send('STREAM_CONTROL type=CLOSE');
      expect(parseLine((await next()).toString('utf8')).params.get('reason')).toBe('stopped');
      await raw.closedP;
      expect(await pending()).toBe(0);
    } finally {
      raw.destroy();
    }
  });
});

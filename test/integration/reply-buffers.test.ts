/**
 * CONSUME replies are written into reused buffers (src/broker/reply-buffers.ts; docs/architecture.md,
 * "Broker"), and a buffer goes back to the pool only once its socket has written it. A client that stops
 * reading keeps its queued replies' memory while another client reads at full speed from the same pool,
 * and then gets every reply byte for byte as it was built. Giving a reply back when it is queued rather
 * than when it is written makes the slow client read the fast one's records.
 */
import net from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { FrameDecoder, encodeFrame } from 'tributary-protocol/frame.js';
import { BrokerProcess } from '../helpers/launcher.js';
import { batchOf, checkReply, metric } from '../helpers/numbered-records.js';
import { until } from '../helpers/util.js';

const RECORDS = 3000; // about 3.2 MB stored: all of it in the partition's tail cache, which writes the replies
const PER_REPLY = 500; // about 520 KB a reply, in a pooled 768 KiB buffer
const SLOW_REPLIES = 40; // about 20 MB: more than the socket buffers and the broker's 16 MiB of pending replies

function consume(offset: number): Buffer {
  return encodeFrame(`CONSUME topic=rb partition=0 offset=${offset} batch=${PER_REPLY} max_bytes=1000000`);
}

describe('reply buffers', () => {
  let broker: BrokerProcess;

  beforeAll(async () => {
    broker = await BrokerProcess.start({ args: ['--offsets-topic-partitions', '1', '--flush', 'os'] });
  }, 60_000);

  afterAll(async () => {
    await broker?.dispose();
  });

  it('a client that stops reading keeps its queued replies intact while another reads from the same pool', async () => {
    const c = await broker.connect();
    await c.command('CREATE', { topic: 'rb', partitions: 1 });
    for (let from = 0; from < RECORDS; from += 100) await c.produceBatch(batchOf('rb', from, 100));
    await c.close();

    const slowReplies: Buffer[] = [];
    const slow = net.connect({ host: '127.0.0.1', port: broker.port });
    const fast = net.connect({ host: '127.0.0.1', port: broker.port });
    try {
      await Promise.all([slow, fast].map((s) => new Promise<void>((resolve, reject) => s.once('connect', resolve).once('error', reject))));
      const slowDecoder = new FrameDecoder();
      slow.on('data', (d: Buffer) => {
        for (const body of slowDecoder.push(d)) slowReplies.push(Buffer.from(body));
      });
      slow.pause();
      const slowOffsets = Array.from({ length: SLOW_REPLIES }, (_, k) => k * 50);
      slow.write(Buffer.concat(slowOffsets.map(consume)));
      // Wait until the broker has built the replies it will queue for the stalled client (it stops reading
      // its requests past 16 MiB of pending replies).
      const out = /^tributary_records_out_total\{topic="rb"\} (\d+)/m;
      await until(async () => (await metric(broker, out)) >= 30 * PER_REPLY, 20_000, 'replies for the stalled client');
      const reusedBefore = await metric(broker, /^tributary_reply_buffers_reused_total (\d+)/m);

      // The fast client reads one reply at a time, each written, given back and taken again.
      const fastDecoder = new FrameDecoder();
      const fastQueue: Buffer[] = [];
      let wake: (() => void) | undefined;
      fast.on('data', (d: Buffer) => {
        for (const body of fastDecoder.push(d)) fastQueue.push(Buffer.from(body));
        wake?.();
      });
      for (let k = 0; k < 60; k++) {
        const from = (k * 37) % (RECORDS - PER_REPLY);
        fast.write(consume(from));
        while (fastQueue.length === 0) await new Promise<void>((resolve) => (wake = resolve));
        checkReply(fastQueue.shift()!, from, PER_REPLY);
      }
      expect(await metric(broker, /^tributary_reply_buffers_reused_total (\d+)/m)).toBeGreaterThan(reusedBefore);

      slow.resume();
      await until(() => slowReplies.length === SLOW_REPLIES, 20_000, 'the stalled client reads its replies');
      for (let k = 0; k < SLOW_REPLIES; k++) checkReply(slowReplies[k]!, slowOffsets[k]!, PER_REPLY);
    } finally {
      slow.destroy();
      fast.destroy();
    }
  }, 60_000);
});

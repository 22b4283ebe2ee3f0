/**
 * Produce frames of 4 KiB or more are read into memory the broker uses again
 * (src/storage/frame-pool.ts; docs/architecture.md, "Broker", frame memory): the tail cache keeps a block
 * stamped in place in its frame's memory, and a CONSUME reply with record_extensions_v1 goes out as views
 * of it. A client that stops reading keeps its queued replies' views while later produces push their
 * frames out of the cache and new frames are read into freed memory; it then reads every reply byte for
 * byte as built. Freeing a frame when the cache lets go of it, not when the last reply viewing it is
 * written, makes the stalled client read the later frames' records. Under the journal (which writes a
 * frame's bytes after its append) no frame's memory is used again.
 *
 * A partition read at its tail keeps only what its readers lag (src/storage/tail-readers.ts): its frames
 * go back to the pool long before the cache's 4 MiB bound, and the next frames are read into them.
 */
import net from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { FrameDecoder, encodeFrame } from 'tributary-protocol/frame.js';
import { BrokerProcess } from '../helpers/launcher.js';
import { batchOf, checkReply, metric, valueFor } from '../helpers/numbered-records.js';
import { until } from '../helpers/util.js';

const PER_FRAME = 100; // about 103 KB a produce frame: more than a socket read, so assembled in frame memory
const FIRST = 20; // frames the stalled client's replies view
const LATER = 80; // frames produced while it stalls: about 8 MB, twice the tail cache
const PER_REPLY = 500;
const SLOW_REPLIES = 40; // about 20 MB: more than the socket buffers and the broker's 16 MiB of pending replies

/** Partition 0 of `topic` holds records 0 .. count - 1 (a multiple of PER_REPLY) as batchOf produced them. */
async function expectAsProduced(c: Awaited<ReturnType<BrokerProcess['connect']>>, topic: string, count: number): Promise<void> {
  for (let from = 0; from < count; from += PER_REPLY) {
    const batch = await c.consume({ topic, partition: 0, offset: from, batch: PER_REPLY, max_bytes: 1_000_000 });
    expect(batch.records.map((r) => r.offset)).toEqual(Array.from({ length: PER_REPLY }, (_, i) => from + i));
    for (const r of batch.records) if (!r.value.equals(valueFor(r.offset))) throw new Error(`offset ${r.offset} holds another record's value`);
  }
}

describe('frame memory', () => {
  let broker: BrokerProcess;

  beforeAll(async () => {
    broker = await BrokerProcess.start({ args: ['--offsets-topic-partitions', '1', '--flush', 'os', '--tail-cache-bytes', String(4 * 1024 * 1024)] });
  }, 60_000);

  afterAll(async () => {
    await broker?.dispose();
  });

  it('a stalled reader keeps the frames its queued replies view while later frames reuse freed ones', async () => {
    const c = await broker.connect();
    const slow = net.connect({ host: '127.0.0.1', port: broker.port });
    const connected = new Promise<void>((resolve, reject) => slow.once('connect', resolve).once('error', reject));
    try {
      await c.command('CREATE', { topic: 'fm', partitions: 1 });
      for (let f = 0; f < FIRST; f++) await c.produceBatch(batchOf('fm', f * PER_FRAME, PER_FRAME));
      expect(await metric(broker, /^tributary_frame_memory_reused_total (\d+)/m)).toBe(0);

      await connected;
      const slowDecoder = new FrameDecoder();
      const slowReplies: Buffer[] = [];
      slow.on('data', (d: Buffer) => {
        for (const body of slowDecoder.push(d)) slowReplies.push(Buffer.from(body));
      });
      // With record extensions, replies from the tail cache are views of the frames' memory.
      slow.write(encodeFrame('NEGOTIATE version=1 features=record_extensions_v1'));
      await until(() => slowReplies.length === 1, 10_000, 'the negotiation reply');
      expect(slowReplies.shift()!.toString()).toContain('record_extensions_v1');
      slow.pause();
      const slowOffsets = Array.from({ length: SLOW_REPLIES }, (_, k) => (k * 50) % (FIRST * PER_FRAME - PER_REPLY));
      slow.write(Buffer.concat(slowOffsets.map((o) => encodeFrame(`CONSUME topic=fm partition=0 offset=${o} batch=${PER_REPLY} max_bytes=1000000`))));
      const out = /^tributary_records_out_total\{topic="fm"\} (\d+)/m;
      await until(async () => (await metric(broker, out)) >= 30 * PER_REPLY, 20_000, 'replies for the stalled client');

      // Later frames push the first out of the tail cache; new frames are assembled in the memory of those
      // no reply views.
      for (let f = FIRST; f < FIRST + LATER; f++) await c.produceBatch(batchOf('fm', f * PER_FRAME, PER_FRAME));
      expect(await metric(broker, /^tributary_frame_memory_reused_total (\d+)/m)).toBeGreaterThan(0);

      slow.resume();
      await until(() => slowReplies.length === SLOW_REPLIES, 20_000, 'the stalled client reads its replies');
      for (let k = 0; k < SLOW_REPLIES; k++) checkReply(slowReplies[k]!, slowOffsets[k]!, PER_REPLY, true);

      // And the log holds every record as produced, the reused frames' among them.
      await expectAsProduced(c, 'fm', (FIRST + LATER) * PER_FRAME);
    } finally {
      slow.destroy();
      await c.close();
    }
  }, 90_000);
});

describe('frame memory under the journal', () => {
  let broker: BrokerProcess;

  beforeAll(async () => {
    broker = await BrokerProcess.start({ args: ['--offsets-topic-partitions', '1', '--journal', 'true', '--tail-cache-bytes', String(4 * 1024 * 1024)] });
  }, 60_000);

  afterAll(async () => {
    await broker?.dispose();
  });

  it('never lends a frame again: the journal may still have its bytes to write', async () => {
    const c = await broker.connect();
    try {
      await c.command('CREATE', { topic: 'fm', partitions: 1 });
      const frames = 60; // about 6 MB: the tail cache lets go of the first ones
      for (let f = 0; f < frames; f++) await c.produceBatch(batchOf('fm', f * PER_FRAME, PER_FRAME));
      expect(await metric(broker, /^tributary_frame_memory_reused_total (\d+)/m)).toBe(0);
      for (let from = 0; from < frames * PER_FRAME; from += PER_REPLY) {
        const batch = await c.consume({ topic: 'fm', partition: 0, offset: from, batch: PER_REPLY, max_bytes: 1_000_000 });
        expect(batch.records.length).toBe(PER_REPLY);
        for (const r of batch.records) if (!r.value.equals(valueFor(r.offset))) throw new Error(`offset ${r.offset} holds another record's value`);
      }
    } finally {
      await c.close();
    }
  }, 90_000);
});

describe('frame memory under a reader at the tail', () => {
  let broker: BrokerProcess;

  beforeAll(async () => {
    broker = await BrokerProcess.start({ args: ['--offsets-topic-partitions', '1', '--flush', 'os'] });
  }, 60_000);

  afterAll(async () => {
    await broker?.dispose();
  });

  it('the tail cache keeps what its reader lags, so later frames reuse the memory of earlier ones', async () => {
    const c = await broker.connect();
    try {
      await c.command('CREATE', { topic: 'tail', partitions: 1 });
      // 30 frames of about 103 KB: 3 MB, under the cache's 4 MiB a partition, so only the reader's lag
      // (a frame) lets any go; MIN_KEPT_BYTES (1 MiB) stays.
      const FRAMES = 30;
      for (let f = 0; f < FRAMES; f++) {
        await c.produceBatch(batchOf('tail', f * PER_FRAME, PER_FRAME));
        const batch = await c.consume({ topic: 'tail', partition: 0, offset: f * PER_FRAME, batch: PER_FRAME, max_bytes: 1_000_000 });
        expect(batch.records.map((r) => r.offset)).toEqual(Array.from({ length: PER_FRAME }, (_, i) => f * PER_FRAME + i));
      }
      const reused = await metric(broker, /^tributary_frame_memory_reused_total (\d+)/m);
      expect(reused).toBeGreaterThanOrEqual(FRAMES / 2);
      expect(await metric(broker, /^tributary_tail_cache_bytes (\d+)/m)).toBeLessThan(2 * 1024 * 1024);
      // What the cache let go is read from the segments, every record as produced.
      await expectAsProduced(c, 'tail', FRAMES * PER_FRAME);
    } finally {
      await c.close();
    }
  }, 90_000);

  it('frames of 4 to 16 KiB, copied out of the read buffer, are cached in place and their memory reused too', async () => {
    const c = await broker.connect();
    try {
      await c.command('CREATE', { topic: 'small', partitions: 1 });
      const before = await metric(broker, /^tributary_frame_memory_reused_total (\d+)/m);
      // 10 records of about 1 KB: frames of about 10 KB, under the direct-read size, over the pool's smallest.
      const PER = 10;
      const FRAMES = 300;
      for (let f = 0; f < FRAMES; f++) {
        await c.produceBatch(batchOf('small', f * PER, PER));
        const batch = await c.consume({ topic: 'small', partition: 0, offset: f * PER, batch: PER, max_bytes: 1_000_000 });
        expect(batch.records.map((r) => r.offset)).toEqual(Array.from({ length: PER }, (_, i) => f * PER + i));
      }
      // 3 MB went through: only the 1 MiB kept at the tail is not back in the pool.
      expect((await metric(broker, /^tributary_frame_memory_reused_total (\d+)/m)) - before).toBeGreaterThanOrEqual(FRAMES / 2);
      await expectAsProduced(c, 'small', FRAMES * PER);
    } finally {
      await c.close();
    }
  }, 90_000);
});

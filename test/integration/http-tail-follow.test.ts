/**
 * The live tail (GET /api/v1/topics/:topic/tail, docs/http-api.md "Live tail") against a real broker, as
 * the topic changes under it: a partition added while it runs is read from its start, and a position
 * gone from the log (records lost, or deleted by retention under a tail that fell behind) moves that
 * partition on with an `event: reset` while the others, and the stream, go on.
 */
import http from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Producer } from 'tributary-client/producer.js';
import { BrokerProcess } from '../helpers/launcher.js';
import { type SseEvent, sseReader } from '../helpers/sse.js';
import { until } from '../helpers/util.js';

// biome-ignore lint/suspicious/noExplicitAny: event data of many shapes, each asserted field by field
type Json = any;

/**
 * An SSE stream's events, parsed as they arrive; `close()` ends the request. With `paused`, nothing is
 * read until `resume()`: the broker's writes back up as from a client that stopped reading.
 */
function events(port: number, pathname: string, opts: { paused?: boolean } = {}) {
  const got: SseEvent[] = [];
  let req: http.ClientRequest;
  let res: http.IncomingMessage | undefined;
  let ended = false;
  const read = () => {
    res!.setEncoding('utf8');
    res!.on('data', sseReader(got));
  };
  const status = new Promise<number>((resolve, reject) => {
    req = http.get({ host: '127.0.0.1', port, path: pathname, agent: false }, (r) => {
      res = r;
      resolve(r.statusCode ?? 0);
      r.on('end', () => {
        ended = true;
      });
      r.on('error', () => {});
      if (!opts.paused) read();
    });
    req.on('error', (err) => (got.length === 0 ? reject(err) : undefined));
  });
  return {
    got,
    status,
    ended: () => ended,
    of: (event: string) => got.filter((e) => e.event === event).map((e) => e.data),
    resume: read,
    close: () => req.destroy(),
  };
}

describe('live tail, a topic changing under it', () => {
  let broker: BrokerProcess;
  let port: number;
  const api = async (method: string, p: string, body?: unknown) => {
    const r = await fetch(`http://127.0.0.1:${port}/api/v1${p}`, {
      method,
      headers: { 'content-type': 'application/json' },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    return { status: r.status, body: (await r.json()) as Json };
  };
  const produce = async (topic: string, value: string, partition: number) =>
    expect((await api('POST', `/topics/${topic}/messages`, { value, partition })).status).toBe(201);

  beforeAll(async () => {
    // Small segments and a fast retention pass: deleting what a tail has not read yet takes a few MB.
    broker = await BrokerProcess.start({
      args: ['--offsets-topic-partitions', '1', '--segment-bytes', String(1024 * 1024), '--retention-check-ms', '200', '--write-stall-timeout-ms', '120000'],
    });
    port = broker.healthPort;
  });

  afterAll(async () => {
    await broker?.dispose();
  });

  it('a partition added while the tail runs is read from its start, announced by event: partitions', async () => {
    expect((await api('POST', '/topics', { name: 'grows', partitions: 1 })).status).toBe(201);
    await produce('grows', 'old', 0);
    const s = events(port, '/api/v1/topics/grows/tail');
    try {
      expect(await s.status).toBe(200);
      await until(() => s.of('ready').length === 1, 10_000, 'the ready event');
      expect(s.of('ready')[0].positions).toEqual({ 0: 1 });
      const c = await broker.connect();
      await c.command('ADD_PARTITIONS', { topic: 'grows', partitions: 3 });
      // Produced before the tail can have looked: from the new partition's start, nothing is skipped.
      await produce('grows', 'first-in-2', 2);
      await produce('grows', 'next-in-0', 0);
      await until(() => s.of('message').some((m) => m.partition === 2) || s.ended(), 30_000, 'a message of the added partition');
      expect(s.of('error')).toEqual([]);
      expect(s.of('partitions')).toEqual([{ added: { 1: 0, 2: 0 } }]);
      await produce('grows', 'later-in-1', 1);
      await until(() => s.of('message').length >= 3 || s.ended(), 10_000, 'every message');
      expect(
        s
          .of('message')
          .map((m) => `${m.partition}:${m.offset}:${m.value}`)
          .sort(),
      ).toEqual(['0:1:next-in-0', '1:0:later-in-1', '2:0:first-in-2']);
      // The announcement comes before the first message of the partitions it adds.
      const order = s.got.map((e) => (e.event === 'message' ? `m${e.data.partition}` : e.event));
      expect(order.indexOf('partitions')).toBeLessThan(order.indexOf('m2'));
    } finally {
      s.close();
    }
  });

  it('resuming at offsets the broker no longer has (records lost) goes on at the end, with event: reset; bad input is still 400', async () => {
    expect((await api('POST', '/topics', { name: 'lost', partitions: 2 })).status).toBe(201);
    for (let i = 0; i < 3; i++) await produce('lost', `p0-${i}`, 0);
    for (let i = 0; i < 2; i++) await produce('lost', `p1-${i}`, 1);
    // The console resumes after the last message it showed: 1:5 is past partition 1's end (2).
    const s = events(port, `/api/v1/topics/lost/tail?from=${encodeURIComponent('0:1,1:5')}`);
    try {
      expect(await s.status).toBe(200);
      await until(() => s.of('message').length >= 2 || s.ended(), 10_000, 'the messages after 0:1');
      expect(s.got[0]).toEqual({ event: 'ready', data: { topic: 'lost', positions: { 0: 1, 1: 2 } } });
      expect(s.of('reset')).toEqual([{ partition: 1, code: 'OFFSET_OUT_OF_RANGE', requested: 5, position: 2, earliest: 0, latest: 2 }]);
      await produce('lost', 'p1-2', 1);
      await until(() => s.of('message').length >= 3 || s.ended(), 10_000, 'the new message of partition 1');
      expect(s.of('message').map((m) => `${m.partition}:${m.offset}:${m.value}`)).toEqual(['0:1:p0-1', '0:2:p0-2', '1:2:p1-2']);
      expect(s.of('error')).toEqual([]);
    } finally {
      s.close();
    }
    // Still refused, and nothing started: malformed, a partition twice, one the topic lacks, a typed offset past the end.
    for (const from of ['0:x', '0:1,0:2', '0:1,7:0', '999']) {
      const r = await fetch(`http://127.0.0.1:${port}/api/v1/topics/lost/tail?from=${encodeURIComponent(from)}`);
      expect(r.status, from).toBe(400);
      await r.body?.cancel();
    }
  });

  it('a tail fallen behind retention: the deleted position starts over at the earliest kept, with event: reset; the other partition reads on', {
    timeout: 120_000,
  }, async () => {
    // 10 MB kept per partition: more than the socket buffers hold for a client that does not read.
    expect((await api('POST', '/topics', { name: 'pruned', partitions: 2, retentionBytes: 10 * 1024 * 1024 })).status).toBe(201);
    const producer = new Producer({ brokers: [`127.0.0.1:${broker.port}`] });
    const value = Buffer.alloc(10_000, 0x61);
    const c = await broker.connect();
    const offsets = async () => {
      const reply = await c.command('LIST_OFFSETS', { topic: 'pruned', partition: 0 });
      const m = /earliest=(\d+):latest=(\d+)/.exec(reply)!;
      return { earliest: Number(m[1]), latest: Number(m[2]) };
    };
    const fill = () => producer.send({ topic: 'pruned', messages: Array.from({ length: 100 }, () => ({ value, partition: 0 })) });
    for (let i = 0; i < 12; i++) await fill();
    const atOpen = await offsets();
    const s = events(port, '/api/v1/topics/pruned/tail?from=earliest', { paused: true });
    try {
      expect(await s.status).toBe(200);
      // Deleted by retention under the tail: everything there was when it opened, so its position too.
      while ((await offsets()).earliest <= atOpen.latest) await fill();
      s.resume();
      await until(() => s.of('reset').length > 0 || s.ended(), 60_000, 'the reset (or the end of the stream)');
      expect(s.of('error')).toEqual([]);
      const [reset] = s.of('reset');
      expect(reset).toMatchObject({ partition: 0, code: 'OFFSET_OUT_OF_RANGE' });
      expect(reset.requested).toBeGreaterThanOrEqual(atOpen.earliest);
      expect(reset.requested).toBeLessThan(reset.earliest);
      expect(reset.position).toBe(reset.earliest);
      await produce('pruned', 'other-partition', 1);
      await until(() => s.of('message').some((m) => m.partition === 1) || s.ended(), 30_000, 'the message of partition 1');
      expect(
        s
          .of('message')
          .filter((m) => m.partition === 1)
          .map((m) => m.value),
      ).toEqual(['other-partition']);
      // Partition 0 read up to the deleted position, then from where it started over.
      const order = s.got.filter((e) => e.event === 'reset' || e.data.partition === 0).map((e) => (e.event === 'reset' ? -1 : e.data.offset));
      const at = order.indexOf(-1);
      // A tail that had written nothing of partition 0 before retention passed it (a slow machine) starts
      // over from where it opened; otherwise from just past the last record it sent.
      if (at === 0) expect(reset.requested).toBe(atOpen.earliest);
      else expect(order[at - 1]).toBe(reset.requested - 1);
      expect(order[at + 1]).toBe(reset.position);
      expect(s.ended()).toBe(false);
    } finally {
      s.close();
      await producer.close();
    }
  });
});

/**
 * The JSON admin API (docs/http-api.md) against real broker processes: every route, the live offset
 * reset with a running SDK consumer, the Server-Sent Events tail, bad input (4xx with a JSON body and
 * nothing changed), and, on a broker with TLS and authentication on, 401/403 from the same permission
 * table as the wire protocol, with no token in the broker's log.
 */
import fs from 'node:fs';
import http from 'node:http';
import net from 'node:net';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Consumer } from 'tributary-client/consumer.js';
import { Producer } from 'tributary-client/producer.js';
import { BrokerProcess } from '../helpers/launcher.js';
import { type SseEvent, sseReader } from '../helpers/sse.js';
import { tempDir, until } from '../helpers/util.js';
import { addUser, makeCa, makeCert } from './security/pki.js';

// biome-ignore lint/suspicious/noExplicitAny: JSON bodies of many shapes, each asserted field by field
type Json = any;

interface Reply {
  status: number;
  headers: http.IncomingHttpHeaders;
  body: Json;
}

function request(
  port: number,
  method: string,
  pathname: string,
  opts: { body?: unknown; raw?: string; auth?: [string, string]; headers?: Record<string, string> } = {},
): Promise<Reply> {
  return new Promise((resolve, reject) => {
    const headers: Record<string, string> = { ...opts.headers };
    let payload: string | undefined;
    if (opts.body !== undefined || opts.raw !== undefined) {
      payload = opts.raw ?? JSON.stringify(opts.body);
      headers['content-type'] ??= 'application/json';
      // Node sends a DELETE's body unframed unless told its length.
      headers['content-length'] ??= String(Buffer.byteLength(payload));
    }
    if (opts.auth) headers.authorization = `Basic ${Buffer.from(`${opts.auth[0]}:${opts.auth[1]}`).toString('base64')}`;
    const req = http.request({ host: '127.0.0.1', port, method, path: pathname, headers }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => {
        const text = Buffer.concat(chunks).toString('utf8');
        let body: unknown = text;
        if ((res.headers['content-type'] ?? '').startsWith('application/json')) body = JSON.parse(text);
        resolve({ status: res.statusCode ?? 0, headers: res.headers, body });
      });
    });
    req.on('error', reject);
    req.end(payload);
  });
}

/** An SSE stream's events, parsed as they arrive; `close()` ends the request. */
function events(port: number, pathname: string, headers: Record<string, string> = {}): { got: SseEvent[]; status: Promise<number>; close: () => void } {
  const got: SseEvent[] = [];
  let req: http.ClientRequest;
  const status = new Promise<number>((resolve, reject) => {
    req = http.get({ host: '127.0.0.1', port, path: pathname, headers }, (res) => {
      resolve(res.statusCode ?? 0);
      res.setEncoding('utf8');
      res.on('data', sseReader(got));
      res.on('error', () => {});
    });
    req.on('error', (err) => (got.length === 0 ? reject(err) : undefined));
  });
  return { got, status, close: () => req.destroy() };
}

describe('admin API, authentication off', () => {
  let broker: BrokerProcess;
  let port: number;
  const api = (method: string, p: string, opts?: Parameters<typeof request>[3]) => request(port, method, p, opts);

  beforeAll(async () => {
    broker = await BrokerProcess.start({ args: ['--offsets-topic-partitions', '2'] });
    port = broker.healthPort;
  });

  afterAll(async () => {
    await broker?.dispose();
  });

  it('topics: create, list, describe with per-partition offsets and size, delete', async () => {
    const c = await api('POST', '/api/v1/topics', { body: { name: 'orders', partitions: 3 } });
    expect(c.status).toBe(201);
    expect(c.body).toMatchObject({ name: 'orders', created: true, partitions: 3 });
    // Creating the same topic again is not an error (CREATE is idempotent for one definition).
    expect((await api('POST', '/api/v1/topics', { body: { name: 'orders', partitions: 3 } })).status).toBe(200);
    expect((await api('POST', '/api/v1/topics', { body: { name: 'orders', partitions: 5 } })).body.error.code).toBe('topic_already_exists');

    for (let i = 0; i < 4; i++) expect((await api('POST', '/api/v1/topics/orders/messages', { body: { value: `v${i}`, partition: 1 } })).status).toBe(201);
    const list = await api('GET', '/api/v1/topics');
    expect(list.status).toBe(200);
    expect(list.body.topics).toEqual([
      expect.objectContaining({ name: 'orders', partitions: 3, replicationFactor: 1, underReplicated: 0, leaderless: 0, records: 4 }),
    ]);
    expect(list.body.topics[0].sizeBytes).toBeGreaterThan(0);
    expect((await api('GET', '/api/v1/topics?internal=true')).body.topics.map((t: { name: string }) => t.name)).toContain('__consumer_offsets');

    const d = await api('GET', '/api/v1/topics/orders');
    expect(d.status).toBe(200);
    expect(d.body.partitions).toHaveLength(3);
    expect(d.body.partitions[1]).toMatchObject({
      partition: 1,
      earliest: 0,
      logEnd: 4,
      highWatermark: 4,
      lastStable: 4,
      replicas: [0],
      isr: [0],
      leaderEpoch: 0,
    });
    expect(d.body.partitions[1].sizeBytes).toBeGreaterThan(d.body.partitions[0].sizeBytes);

    // More partitions, never fewer.
    const more = await api('POST', '/api/v1/topics/orders/partitions', { body: { partitions: 4 } });
    expect([more.status, more.body]).toEqual([200, { topic: 'orders', partitions: 4 }]);
    expect((await api('GET', '/api/v1/topics/orders')).body.partitions).toHaveLength(4);
    const fewer = await api('POST', '/api/v1/topics/orders/partitions', { body: { partitions: 2 } });
    expect([fewer.status, fewer.body.error.code]).toEqual([400, 'invalid_parameter']);
    expect((await api('GET', '/api/v1/topics/orders')).body.partitions).toHaveLength(4);

    expect((await api('POST', '/api/v1/topics', { body: { name: 'doomed' } })).status).toBe(201);
    // A body where the route takes none is refused, not ignored: the topic stays.
    const withBody = await api('DELETE', '/api/v1/topics/doomed', { body: { ifEmpty: true, dryRun: true } });
    expect([withBody.status, withBody.body.error.code]).toEqual([400, 'invalid_parameter']);
    expect((await api('GET', '/api/v1/topics/doomed')).status).toBe(200);
    expect((await api('DELETE', '/api/v1/topics/doomed')).status).toBe(204);
    expect((await api('GET', '/api/v1/topics/doomed')).status).toBe(404);
  });

  it('messages: produce one, read a range by offset and by timestamp, binary values as base64', async () => {
    await api('POST', '/api/v1/topics', { body: { name: 'browse', partitions: 2 } });
    const before = Date.now();
    const p = await api('POST', '/api/v1/topics/browse/messages', { body: { key: 'k1', value: '{"n":1}', headers: { trace: 't-1' }, partition: 0 } });
    expect(p.status).toBe(201);
    expect(p.body).toEqual({ topic: 'browse', partition: 0, offset: 0 });
    const bin = await api('POST', '/api/v1/topics/browse/messages', {
      body: { value: Buffer.from([0xff, 0x00, 0xfe]).toString('base64'), encoding: 'base64', partition: 0 },
    });
    expect(bin.body.offset).toBe(1);

    const r = await api('GET', '/api/v1/topics/browse/messages?partition=0&offset=0&limit=10');
    expect(r.status).toBe(200);
    expect(r.body).toMatchObject({ topic: 'browse', partition: 0, offset: 0, nextOffset: 2, highWatermark: 2 });
    expect(r.body.messages).toHaveLength(2);
    expect(r.body.messages[0]).toMatchObject({
      offset: 0,
      key: 'k1',
      value: '{"n":1}',
      valueEncoding: 'utf8',
      headers: [{ key: 'trace', value: 't-1', encoding: 'utf8' }],
    });
    expect(r.body.messages[0].timestamp).toBeGreaterThanOrEqual(before - 1000);
    expect(r.body.messages[1]).toMatchObject({ offset: 1, key: null, value: '/wD+', valueEncoding: 'base64' });
    // From a timestamp after both: nothing (the log end).
    const late = await api('GET', `/api/v1/topics/browse/messages?partition=0&timestamp=${Date.now() + 60_000}`);
    expect(late.body).toMatchObject({ offset: 2, messages: [] });
    const early = await api('GET', '/api/v1/topics/browse/messages?partition=0&timestamp=0&limit=1');
    expect(early.body.messages.map((m: { offset: number }) => m.offset)).toEqual([0]);
  });

  it('search: by key, by value substring and by header, within a bounded scan that says where it stopped', async () => {
    await api('POST', '/api/v1/topics', { body: { name: 'haystack', partitions: 2 } });
    for (let i = 0; i < 30; i++) {
      await api('POST', '/api/v1/topics/haystack/messages', {
        body: { key: `k${i % 3}`, value: `item-${i}${i === 17 ? '-needle' : ''}`, partition: i % 2, headers: i === 22 ? { flag: 'red' } : {} },
      });
    }
    const byValue = await api('GET', '/api/v1/topics/haystack/search?value=needle');
    expect(byValue.status).toBe(200);
    expect(byValue.body).toMatchObject({ scanned: 30, complete: true });
    expect(byValue.body.messages.map((m: { value: string; partition: number }) => [m.partition, m.value])).toEqual([[1, 'item-17-needle']]);
    const byKey = await api('GET', '/api/v1/topics/haystack/search?key=k1&partition=0');
    expect(byKey.body.messages.map((m: { value: string }) => m.value)).toEqual(['item-4', 'item-10', 'item-16', 'item-22', 'item-28']);
    const byHeader = await api('GET', '/api/v1/topics/haystack/search?header=flag%3Dred');
    expect(byHeader.body.messages.map((m: { value: string }) => m.value)).toEqual(['item-22']);
    // A scan that stops early says so and where to continue.
    const bounded = await api('GET', '/api/v1/topics/haystack/search?value=item&scan_limit=5');
    expect(bounded.body).toMatchObject({ scanned: 5, complete: false, next: { 0: 5 } });
    expect(bounded.body.messages).toHaveLength(5);
  });

  it('tail: Server-Sent Events deliver a message produced after the stream opened', async () => {
    await api('POST', '/api/v1/topics', { body: { name: 'live', partitions: 2 } });
    await api('POST', '/api/v1/topics/live/messages', { body: { value: 'old', partition: 0 } });
    const s = events(port, '/api/v1/topics/live/tail');
    try {
      expect(await s.status).toBe(200);
      await until(() => s.got.some((e) => e.event === 'ready'), 10_000, 'the ready event');
      expect(s.got[0]!.data.positions).toEqual({ 0: 1, 1: 0 });
      await api('POST', '/api/v1/topics/live/messages', { body: { value: 'fresh', partition: 1 } });
      // U+2028 ends a line for JavaScript's line-based parsing (this test's as well as the console's): escaped.
      await api('POST', '/api/v1/topics/live/messages', { body: { value: 'line\u2028sep', partition: 1 } });
      await until(() => s.got.filter((e) => e.event === 'message').length === 2, 10_000, 'the new messages');
      expect(s.got.filter((e) => e.event === 'message').map((e) => [e.data.partition, e.data.offset, e.data.value])).toEqual([
        [1, 0, 'fresh'],
        [1, 1, 'line\u2028sep'],
      ]);
    } finally {
      s.close();
    }
    expect((await api('GET', '/api/v1/topics/live/tail?from=sideways')).status).toBe(400);
  });

  it('tail: an offset past the end is refused (400) before any stream starts, as /messages refuses it', async () => {
    await api('POST', '/api/v1/topics', { body: { name: 'short', partitions: 1 } });
    const s = events(port, '/api/v1/topics/short/tail?from=999999');
    try {
      expect(await s.status).toBe(400);
    } finally {
      s.close();
    }
  });

  it('tail: at most 8 at once from one address; the next is 429 until one closes', async () => {
    await api('POST', '/api/v1/topics', { body: { name: 'watched', partitions: 1 } });
    const open: Array<ReturnType<typeof events>> = [];
    /** A tail that got its 200 (a slot an earlier test's closed tail held is freed once the broker sees the close). */
    const openOne = async () => {
      await until(
        async () => {
          const s = events(port, '/api/v1/topics/watched/tail');
          if ((await s.status) === 200) {
            open.push(s);
            return true;
          }
          s.close();
          return false;
        },
        10_000,
        'a tail slot',
      );
    };
    try {
      for (let i = 0; i < 8; i++) await openOne();
      const ninth = await api('GET', '/api/v1/topics/watched/tail');
      expect([ninth.status, ninth.body.error.code]).toEqual([429, 'throttled']);
      open.pop()!.close();
      await openOne();
      expect(open).toHaveLength(8);
    } finally {
      for (const s of open) s.close();
    }
  });

  it('tail: a HEAD gets the stream\'s status and headers and ends, holding no tail slot while its connection stays open', async () => {
    await api('POST', '/api/v1/topics', { body: { name: 'headed', partitions: 1 } });
    // Keep-alive: the connections stay open after each answer, as a browser's or a monitor's would.
    const agent = new http.Agent({ keepAlive: true });
    const head = (p: string) =>
      new Promise<{ status: number; type: string | undefined }>((resolve, reject) => {
        const req = http.request({ host: '127.0.0.1', port, method: 'HEAD', path: p, agent, timeout: 5_000 }, (res) => {
          res.resume();
          res.on('end', () => resolve({ status: res.statusCode ?? 0, type: res.headers['content-type'] }));
        });
        req.on('timeout', () => req.destroy(new Error(`HEAD ${p}: no answer in 5 s`)));
        req.on('error', reject);
        req.end();
      });
    try {
      // More than one address's 8 tails: each HEAD held one, with two broker connections, until its client left.
      for (let i = 0; i < 9; i++) expect(await head('/api/v1/topics/headed/tail')).toEqual({ status: 200, type: 'text/event-stream; charset=utf-8' });
      expect((await head('/api/v1/topics/nope/tail')).status).toBe(404);
      expect((await head('/api/v1/topics/headed/tail?bogus=1')).status).toBe(400);
      const s = events(port, '/api/v1/topics/headed/tail');
      try {
        expect(await s.status).toBe(200);
      } finally {
        s.close();
      }
    } finally {
      agent.destroy();
    }
  });

  it('bad text: half a surrogate pair or bytes that are not UTF-8 are 400 and write nothing; a proxy\'s Bearer header is not a credential here', async () => {
    await api('POST', '/api/v1/topics', { body: { name: 'texts', partitions: 1 } });
    const lone = await api('POST', '/api/v1/topics/texts/messages', { raw: '{"value":"a\\ud800b"}' });
    expect([lone.status, lone.body.error.code]).toEqual([400, 'invalid_parameter']);
    const loneKey = await api('POST', '/api/v1/topics/texts/messages', { raw: '{"value":"v","key":"\\udc00"}' });
    expect(loneKey.status).toBe(400);
    const bytes = await new Promise<number>((resolve, reject) => {
      const body = Buffer.concat([Buffer.from('{"value":"'), Buffer.from([0xff, 0xfe]), Buffer.from('"}')]);
      const req = http.request({ host: '127.0.0.1', port, method: 'POST', path: '/api/v1/topics/texts/messages', headers: { 'content-type': 'application/json', 'content-length': String(body.length) } }, (res) => {
        res.resume();
        resolve(res.statusCode ?? 0);
      });
      req.on('error', reject);
      req.end(body);
    });
    expect(bytes).toBe(400);
    expect((await api('GET', '/api/v1/topics/texts/messages?partition=0')).body.messages).toEqual([]);
    // A pair is a character like any other.
    expect((await api('POST', '/api/v1/topics/texts/messages', { raw: '{"value":"\\ud83d\\ude00"}' })).status).toBe(201);
    expect((await api('GET', '/api/v1/topics', { headers: { authorization: 'Bearer from-the-proxy' } })).status).toBe(200);
  });

  it('session takes GET only (405 with Allow); a token in a URL is 400 whatever else the request lacks', async () => {
    const post = await api('POST', '/api/v1/session', { body: {} });
    expect([post.status, post.headers.allow]).toEqual([405, 'GET']);
    const inUrl = await api('GET', '/api/v1/topics?token=abc');
    expect([inUrl.status, inUrl.body.error.code, inUrl.body.error.fields.param]).toEqual([400, 'invalid_parameter', 'token']);
  });

  it('tail: a client gone before the stream started leaves nothing running (no client, no connections kept)', async () => {
    await api('POST', '/api/v1/topics', { body: { name: 'abandoned', partitions: 1 } });
    const connections = async () => Number(/^tributary_connections (\d+)/m.exec((await api('GET', '/metrics')).body as string)?.[1]);
    const before = await connections();
    for (let i = 0; i < 10; i++) {
      await new Promise<void>((resolve) => {
        const sock = net.connect(port, '127.0.0.1', () => {
          sock.write('GET /api/v1/topics/abandoned/tail HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n');
          sock.destroy();
          resolve();
        });
        sock.on('error', () => resolve());
      });
    }
    // A tail that stays: once its own client is connected, those of the abandoned ones (asked earlier) would be too.
    const s = events(port, '/api/v1/topics/abandoned/tail');
    try {
      await until(() => s.got.some((e) => e.event === 'ready'), 10_000, 'the ready event');
      await until(async () => (await connections()) > before, 10_000, "the staying tail's client");
    } finally {
      s.close();
    }
    // Each abandoned tail that started anyway would keep a client of its own, two connections, for ever.
    await until(async () => (await connections()) <= before, 10_000, 'no connection kept by an abandoned tail');
  });

  it('groups: lag per partition is log end minus committed; a live reset moves it and the running consumer resumes there', async () => {
    await api('POST', '/api/v1/topics', { body: { name: 'work', partitions: 2 } });
    for (let i = 0; i < 10; i++) await api('POST', '/api/v1/topics/work/messages', { body: { value: `w${i}`, partition: i % 2 } });
    const seen: Array<[number, number]> = [];
    const consumer = new Consumer({
      brokers: [broker.address],
      groupId: 'workers',
      topic: 'work',
      autoOffsetReset: 'earliest',
      sessionTimeoutMs: 3000,
      heartbeatIntervalMs: 100,
      maxWaitMs: 100,
      autoCommitIntervalMs: 50,
    });
    const run = consumer.run({
      eachMessage: async ({ message }) => {
        seen.push([message.partition, message.offset]);
      },
    });
    try {
      const lagZero = async () => {
        const g = await api('GET', '/api/v1/groups/workers');
        return g.status === 200 && g.body.totalLag === 0 && g.body.offsets.every((o: { committed: number | null }) => o.committed === 5);
      };
      await until(lagZero, 15_000, 'the consumer to commit everything');
      const g = (await api('GET', '/api/v1/groups/workers')).body;
      expect(g).toMatchObject({
        group: 'workers',
        topic: 'work',
        state: 'Stable',
        members: [expect.objectContaining({ clientId: expect.any(String), assignments: [0, 1] })],
      });
      for (const o of g.offsets) expect(o.lag).toBe(o.logEnd - o.committed);
      expect((await api('GET', '/api/v1/groups')).body.groups).toEqual([
        expect.objectContaining({ group: 'workers', state: 'Stable', members: 1, totalLag: 0 }),
      ]);

      // A preview changes nothing and gives the lag the reset would leave.
      const preview = await api('POST', '/api/v1/groups/workers/reset-offsets', {
        body: { topic: 'work', partition: 0, to: 'offset', offset: 2, dryRun: true },
      });
      expect(preview.status).toBe(200);
      expect(preview.body).toEqual({ group: 'workers', topic: 'work', dryRun: true, offsets: [{ partition: 0, offset: 2, lag: 3 }] });
      expect((await api('GET', '/api/v1/groups/workers')).body.offsets[0].committed).toBe(5);

      const before = seen.length;
      const reset = await api('POST', '/api/v1/groups/workers/reset-offsets', { body: { topic: 'work', partition: 0, to: 'offset', offset: 2 } });
      expect(reset.body).toEqual({ group: 'workers', topic: 'work', dryRun: false, offsets: [{ partition: 0, offset: 2, lag: 3 }] });
      // The member is fenced for partition 0, rejoins, reads 2..4 again and commits up to 5 again.
      await until(() => seen.slice(before).filter(([p]) => p === 0).length >= 3, 15_000, 'partition 0 read again from 2');
      expect(
        seen
          .slice(before)
          .filter(([p]) => p === 0)
          .map(([, o]) => o)
          .slice(0, 3),
      ).toEqual([2, 3, 4]);
      expect(seen.slice(before).filter(([p]) => p === 1)).toEqual([]);
      await until(lagZero, 15_000, 'the consumer to commit partition 0 again');
      const after = (await api('GET', '/api/v1/groups/workers')).body;
      expect(after.generation).toBeGreaterThan(g.generation);
      const last = after.history.at(-1);
      expect(last.reasons).toEqual([{ cause: 'offsets_reset', member: 'admin' }]);
    } finally {
      await consumer.close();
      await run.catch(() => {});
    }
    expect((await api('DELETE', '/api/v1/groups/workers')).status).toBe(204);
    expect((await api('GET', '/api/v1/groups/workers')).status).toBe(404);
  });

  it('the API and console answer to IP addresses, localhost and the configured names only (DNS rebinding)', async () => {
    const as = (host: string, method: string, p: string, body?: unknown) =>
      request(port, method, p, { headers: { host }, ...(body === undefined ? {} : { body }) });
    const refused = await as('attacker.example', 'POST', '/api/v1/topics', { name: 'rebound', partitions: 1 });
    expect(refused.status).toBe(421);
    expect(refused.body.error.code).toBe('misdirected_request');
    expect((await as('attacker.example:9080', 'GET', '/ui/')).status).toBe(421);
    expect((await api('GET', '/api/v1/topics')).body.topics.map((t: Json) => t.name)).not.toContain('rebound');
    for (const host of ['127.0.0.1', `127.0.0.1:${port}`, `localhost:${port}`, '[::1]:9080'])
      expect((await as(host, 'GET', '/api/v1/topics')).status).toBe(200);
    // Health and metrics stay open to any name (scrapers address brokers by name).
    expect((await as('attacker.example', 'GET', '/live')).status).toBe(200);
  });

  it('session: open to anyone, says whether authentication is on', async () => {
    expect((await api('GET', '/api/v1/session')).body).toEqual({ authentication: false, principal: null, authenticated: true });
    expect((await api('GET', '/api/v1/session?x=1')).status).toBe(400);
  });

  it('health, readiness and metrics refuse what they do not take: a query parameter 400, another method 405 with Allow; an unknown path is a 404 that says so', async () => {
    // Ignored, `/metrics?name[]=x` would look like a filter that works (Prometheus `params:`), and a probe's typo pass.
    for (const p of ['/live?verbose=1', '/ready?x', '/metrics?name[]=tributary_up']) {
      const r = await api('GET', p);
      expect([r.status, r.body?.error?.code], p).toEqual([400, 'invalid_parameter']);
      expect(r.body.error.fields.reason, p).toMatch(/unknown parameter/);
    }
    for (const [method, p] of [
      ['POST', '/live'],
      ['DELETE', '/metrics'],
      ['PUT', '/ui/'],
    ] as const) {
      const r = await api(method, p);
      expect([r.status, r.headers.allow, r.body?.error?.code], `${method} ${p}`).toEqual([405, 'GET, HEAD', 'method_not_allowed']);
    }
    const missing = await api('GET', '/nothing-here');
    expect([missing.status, missing.body?.error?.code, missing.body?.error?.message]).toEqual([404, 'not_found', 'no route /nothing-here']);
    // What they do take still answers.
    expect((await api('GET', '/live')).body).toBe('ok\n');
    expect((await api('HEAD', '/ready')).status).toBe(200);
    expect((await api('GET', '/metrics')).body).toMatch(/^# HELP /m);
  });

  it('cluster, users and ACLs', async () => {
    const c = await api('GET', '/api/v1/cluster');
    expect(c.status).toBe(200);
    expect(c.body).toMatchObject({ mode: 'standalone', controller: 0, underReplicated: 0, leaderless: 0, brokers: [expect.objectContaining({ id: 0 })] });
    expect(c.body.partitions).toBeGreaterThan(0);
    expect((await api('GET', '/api/v1/users')).body).toEqual({ authentication: false, users: [] });
    expect((await api('GET', '/api/v1/acls')).body).toEqual({ authentication: false, acls: [], groupAcls: [] });
  });

  it('bad input: a 4xx with a JSON error, never a 500, and nothing changes', async () => {
    await api('POST', '/api/v1/topics', { body: { name: 'stable', partitions: 1 } });
    await api('POST', '/api/v1/topics/stable/messages', { body: { value: 'one' } });
    const cases: Array<[string, string, Parameters<typeof request>[3], number, string]> = [
      ['GET', '/api/v1/topics/nope', {}, 404, 'topic_not_found'],
      ['GET', '/api/v1/topics/nope/messages?partition=0', {}, 404, 'topic_not_found'],
      ['GET', '/api/v1/topics/stable/messages?partition=0&offset=99', {}, 400, 'OFFSET_OUT_OF_RANGE'],
      ['GET', '/api/v1/topics/stable/messages?partition=7', {}, 404, 'partition_not_found'],
      ['GET', '/api/v1/topics/stable/messages?partition=0&offset=-1', {}, 400, 'invalid_parameter'],
      ['GET', '/api/v1/topics/stable/messages?partition=0&limit=5000', {}, 400, 'invalid_parameter'],
      ['GET', '/api/v1/topics/stable/messages', {}, 400, 'invalid_parameter'],
      ['GET', '/api/v1/topics/stable/messages?partition=0&color=red', {}, 400, 'invalid_parameter'],
      ['GET', '/api/v1/topics/stable/messages?partition=0&token=secret', {}, 400, 'invalid_parameter'],
      ['GET', '/api/v1/topics/stable/search?value=x&scan_limit=1000001', {}, 400, 'invalid_parameter'],
      ['GET', '/api/v1/topics/stable/search', {}, 400, 'invalid_parameter'],
      ['POST', '/api/v1/topics', { raw: '{"name": "x",' }, 400, 'invalid_parameter'],
      ['POST', '/api/v1/topics', { raw: '[1,2]' }, 400, 'invalid_parameter'],
      // A key given twice: JSON.parse kept the last one, so these created topic y and reset for real.
      ['POST', '/api/v1/topics', { raw: '{"name":"x","name":"y"}' }, 400, 'invalid_parameter'],
      ['POST', '/api/v1/groups/g/reset-offsets', { raw: '{"topic":"stable","to":"earliest","dryRun":true,"dryRun":false}' }, 400, 'invalid_parameter'],
      ['POST', '/api/v1/topics', { body: { name: 'x', color: 'red' } }, 400, 'invalid_parameter'],
      ['POST', '/api/v1/topics', { body: { name: 'x', partitions: 'three' } }, 400, 'invalid_parameter'],
      ['POST', '/api/v1/topics', { body: { name: 'bad name!' } }, 400, 'invalid_topic_name'],
      ['POST', '/api/v1/topics', { body: { name: 'x' }, headers: { 'content-type': 'text/plain' } }, 400, 'invalid_parameter'],
      ['POST', '/api/v1/topics', { body: { name: 'x' }, headers: { 'content-type': 'application/json-patch+json' } }, 400, 'invalid_parameter'],
      ['POST', '/api/v1/topics/stable/messages', { body: {} }, 400, 'invalid_parameter'],
      ['POST', '/api/v1/topics/stable/messages', { body: { value: '%%%', encoding: 'base64' } }, 400, 'invalid_parameter'],
      ['POST', '/api/v1/topics/stable/messages', { body: { value: 'v', partition: 3 } }, 404, 'partition_not_found'],
      ['POST', '/api/v1/topics/nope/messages', { body: { value: 'v' } }, 404, 'topic_not_found'],
      ['POST', '/api/v1/groups/g/reset-offsets', { body: { topic: 'stable', to: 'sideways' } }, 400, 'invalid_parameter'],
      ['POST', '/api/v1/groups/g/reset-offsets', { body: { topic: 'stable', to: 'offset' } }, 400, 'invalid_parameter'],
      ['POST', '/api/v1/groups/g/reset-offsets', { body: { topic: 'stable', to: 'offset', offset: 50 } }, 400, 'OFFSET_OUT_OF_RANGE'],
      ['GET', '/api/v1/groups/nope', {}, 404, 'group_not_found'],
      ['DELETE', '/api/v1/groups/nope', {}, 404, 'group_not_found'],
      ['GET', '/api/v1/nothing-here', {}, 404, 'not_found'],
      ['PUT', '/api/v1/topics', { body: {} }, 405, 'method_not_allowed'],
      ['GET', '/api/v1/topics/%E0%A4%A', {}, 400, 'invalid_parameter'],
      // Decoded, these searched for U+FFFD (or for "%ZZ") and answered "complete", nothing found.
      ['GET', '/api/v1/topics/stable/search?key=%FF', {}, 400, 'invalid_parameter'],
      ['GET', '/api/v1/topics/stable/search?value=%ZZ', {}, 400, 'invalid_parameter'],
      ['GET', '/api/v1/topics/stable/search?header=a%3D%C3%28', {}, 400, 'invalid_parameter'],
      ['GET', '/api/v1/topics?intern%FFal=true', {}, 400, 'invalid_parameter'],
    ];
    for (const [method, p, opts, status, code] of cases) {
      const r = await api(method, p, opts);
      expect([r.status, r.body?.error?.code], `${method} ${p}`).toEqual([status, code]);
      expect(typeof r.body.error.message).toBe('string');
    }
    // A value the broker refuses is named by the body's field, not the CREATE parameter behind it.
    for (const [body, param] of [
      [{ name: 'y', retentionHours: 2_000_000 }, 'retentionHours'],
      [{ name: 'y', replicationFactor: 2 }, 'replicationFactor'],
    ] as const) {
      const r = await api('POST', '/api/v1/topics', { body });
      expect([r.status, r.body.error.code, r.body.error.fields.param, r.body.error.message], param).toEqual([400, 'invalid_parameter', param, expect.stringContaining(`param=${param} `)]);
    }
    // A produce body the SDK behind the route refuses names the body's field, not the SDK's messages[0].
    const manyHeaders = Object.fromEntries(Array.from({ length: 65_536 }, (_, i) => [`h${i}`, '']));
    for (const [body, param] of [
      [{ value: 'v', key: 'k'.repeat(65_536) }, 'key'],
      [{ value: 'v', headers: { ['k'.repeat(65_536)]: 'v' } }, 'headers'],
      [{ value: 'v', headers: manyHeaders }, 'headers'],
    ] as const) {
      const r = await api('POST', '/api/v1/topics/stable/messages', { body });
      expect([r.status, r.body.error.code, r.body.error.fields.param], param).toEqual([400, 'invalid_parameter', param]);
    }
    // Nothing changed.
    expect((await api('GET', '/api/v1/topics')).body.topics.map((t: { name: string }) => t.name)).not.toContain('x');
    expect((await api('GET', '/api/v1/topics')).body.topics.map((t: { name: string }) => t.name)).not.toContain('y');
    expect((await api('GET', '/api/v1/topics/stable')).body.partitions[0].logEnd).toBe(1);
    expect((await api('GET', '/api/v1/groups')).body.groups.map((g: { group: string }) => g.group)).not.toContain('g');
    // Still serving, and a JSON content type with parameters is JSON.
    expect((await api('GET', '/api/v1/cluster')).status).toBe(200);
    expect((await api('POST', '/api/v1/topics', { body: { name: 'charset-ok' }, headers: { 'content-type': 'application/json; charset=utf-8' } })).status).toBe(201);
  });
});

describe('admin API, a tail whose client stops reading', () => {
  let broker: BrokerProcess;

  beforeAll(async () => {
    broker = await BrokerProcess.start({ args: ['--offsets-topic-partitions', '1', '--write-stall-timeout-ms', '1000'] });
  });

  afterAll(async () => {
    await broker?.dispose();
  });

  it('is not buffered for: after --write-stall-timeout-ms without reading, the stream is dropped (far short of the topic)', { timeout: 60_000 }, async () => {
    const c = await broker.connect();
    await c.command('CREATE', { topic: 'big', partitions: 1 });
    const producer = new Producer({ brokers: [`127.0.0.1:${broker.port}`] });
    const value = Buffer.alloc(10_000, 0x61);
    const total = 3000 * value.length;
    try {
      for (let i = 0; i < 30; i++) await producer.send({ topic: 'big', messages: Array.from({ length: 100 }, () => ({ value })) });
    } finally {
      await producer.close();
    }
    let received = 0;
    const sock = net.connect(broker.healthPort, '127.0.0.1');
    sock.pause();
    const ended = new Promise<void>((resolve) => {
      sock.on('close', () => resolve());
      sock.on('error', () => resolve());
    });
    sock.write('GET /api/v1/topics/big/tail?from=earliest HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n');
    // Not read for 3 s (the broker gives up after 1 s of a full buffer), then read to the end.
    await new Promise((resolve) => setTimeout(resolve, 3000));
    sock.on('data', (d: Buffer) => {
      received += d.length;
    });
    sock.resume();
    await ended;
    // A stream still open would go on past the whole topic (and keep the connection for ever).
    expect(received).toBeGreaterThan(0);
    expect(received).toBeLessThan(total);
  });
});

describe('admin API, TLS and authentication on', () => {
  let dir: string;
  let broker: BrokerProcess;
  const tokens: Record<string, string> = {};

  beforeAll(async () => {
    dir = await tempDir('tributary-api-sec-');
    const ca = makeCa(dir, 'ca');
    const server = makeCert(dir, ca, 'server', 'localhost');
    const config = path.join(dir, 'broker.yaml');
    fs.writeFileSync(config, ['authentication: true', 'topicAcls:', '  locked:', '    read: [admin]', ''].join('\n'));
    tokens.admin = addUser(config, 'admin', ['admin']);
    tokens.reader = addUser(config, 'reader', ['topic.read', 'group']);
    tokens.writer = addUser(config, 'writer', ['topic.write']);
    broker = await BrokerProcess.start({
      args: ['--config', config, '--tls-cert', server.certFile, '--tls-key', server.keyFile, '--log-level', 'debug', '--offsets-topic-partitions', '2'],
    });
  });

  afterAll(async () => {
    await broker?.dispose();
    if (dir) fs.rmSync(dir, { recursive: true, force: true });
  });

  it('no credentials: 401; a wrong token: 401; without the permission: 403; with it: the answer', async () => {
    const api = (method: string, p: string, opts?: Parameters<typeof request>[3]) => request(broker.healthPort, method, p, opts);
    const none = await api('GET', '/api/v1/topics');
    expect([none.status, none.body.error.code]).toEqual([401, 'authentication_required']);
    expect(none.headers['www-authenticate']).toBe('Tributary realm="tributary"');
    const wrong = await api('GET', '/api/v1/topics', { auth: ['reader', 'not-the-token'] });
    expect([wrong.status, wrong.body.error.code]).toEqual([401, 'authentication_failed']);
    const ghost = await api('GET', '/api/v1/topics', { auth: ['ghost', 'whatever'] });
    expect(ghost.status).toBe(401);
    expect((await api('GET', '/api/v1/topics', { headers: { authorization: 'Bearer abc' } })).status).toBe(401);
    // A token in the URL is refused as such (400), before the missing Authorization header is (401).
    expect((await api('GET', '/api/v1/topics?token=abc')).status).toBe(400);

    const admin: [string, string] = ['admin', tokens.admin!];
    const reader: [string, string] = ['reader', tokens.reader!];
    expect((await api('POST', '/api/v1/topics', { body: { name: 'open', partitions: 1 }, auth: admin })).status).toBe(201);
    expect((await api('POST', '/api/v1/topics', { body: { name: 'locked', partitions: 1 }, auth: admin })).status).toBe(201);
    const denied = await api('POST', '/api/v1/topics', { body: { name: 'mine' }, auth: reader });
    expect([denied.status, denied.body.error.code]).toEqual([403, 'NOT_AUTHORIZED_FOR_OPERATION']);
    const produce = await api('POST', '/api/v1/topics/open/messages', { body: { value: 'x' }, auth: reader });
    expect([produce.status, produce.body.error.code]).toEqual([403, 'NOT_AUTHORIZED_FOR_OPERATION']);
    expect((await api('POST', '/api/v1/topics/open/messages', { body: { value: 'x' }, auth: admin })).status).toBe(201);
    const read = await api('GET', '/api/v1/topics/open/messages?partition=0', { auth: reader });
    expect(read.status).toBe(200);
    expect(read.body.messages.map((m: { value: string }) => m.value)).toEqual(['x']);
    // The topic ACL holds: reader may not read `locked`, and LIST does not show it to reader.
    const acl = await api('GET', '/api/v1/topics/locked/messages?partition=0', { auth: reader });
    expect([acl.status, acl.body.error.code]).toEqual([403, 'NOT_AUTHORIZED_FOR_TOPIC']);
    // A tail is refused as a read is, with its status, not a 200 and an error event: writer may ask for
    // the offsets (topic.write is enough for that) but not read.
    const basic = (who: string) => ({ authorization: `Basic ${Buffer.from(`${who}:${tokens[who]}`).toString('base64')}` });
    for (const [who, topic] of [['reader', 'locked'], ['writer', 'open']] as const) {
      const tailed = events(broker.healthPort, `/api/v1/topics/${topic}/tail?from=earliest`, basic(who));
      try {
        expect(await tailed.status, `${who} tailing ${topic}`).toBe(403);
      } finally {
        tailed.close();
      }
    }
    expect((await api('GET', '/api/v1/topics', { auth: reader })).body.topics.map((t: { name: string }) => t.name)).toEqual(['open']);
    // Users and ACLs are admin-only and never show a hash.
    expect((await api('GET', '/api/v1/users', { auth: reader })).status).toBe(403);
    const users = await api('GET', '/api/v1/users', { auth: admin });
    expect(users.body.users).toEqual(expect.arrayContaining([{ principal: 'reader', permissions: ['topic.read', 'group'] }]));
    expect(JSON.stringify(users.body)).not.toMatch(/hash|salt/);
    expect((await api('GET', '/api/v1/acls', { auth: admin })).body.acls).toEqual([{ topic: 'locked', read: ['admin'], write: null }]);
    // The session route tells valid from invalid credentials, always with 200.
    expect((await api('GET', '/api/v1/session')).body).toEqual({ authentication: true, principal: null, authenticated: false });
    expect((await api('GET', '/api/v1/session', { auth: ['reader', 'nope'] })).body).toEqual({ authentication: true, principal: null, authenticated: false });
    expect((await api('GET', '/api/v1/session', { auth: reader })).body).toEqual({ authentication: true, principal: 'reader', authenticated: true });
    // Adding partitions needs admin.
    expect((await api('POST', '/api/v1/topics/open/partitions', { body: { partitions: 2 }, auth: reader })).status).toBe(403);
    // No token in the log.
    for (const t of Object.values(tokens)) expect(broker.stderr).not.toContain(t);
    expect(broker.stderr).not.toContain('not-the-token');
  });

  it('failed logins: after 5 in a row the address is held off (429, Retry-After), the right token too, until the hold ends', async () => {
    const api = (method: string, p: string, opts?: Parameters<typeof request>[3]) => request(broker.healthPort, method, p, opts);
    for (let i = 0; i < 5; i++) expect((await api('GET', '/api/v1/topics', { auth: ['reader', `guess-${i}`] })).status).toBe(401);
    const held = await api('GET', '/api/v1/topics', { auth: ['reader', tokens.reader!] });
    expect([held.status, held.body.error.code]).toEqual([429, 'throttled']);
    expect(Number(held.headers['retry-after'])).toBeGreaterThanOrEqual(1);
    expect((await api('GET', '/api/v1/session', { auth: ['reader', tokens.reader!] })).status).toBe(429);
    // Held for about a second after the fifth failure; then the right token works and clears the count.
    await until(async () => (await api('GET', '/api/v1/topics', { auth: ['reader', tokens.reader!] })).status === 200, 10_000, 'the hold to end');
    expect((await api('GET', '/api/v1/topics', { auth: ['reader', 'one-more-guess'] })).status).toBe(401);
  });
});

/**
 * The HTTP port's own limits (docs/http-api.md, "Limits") against a real broker: at most
 * --http-max-connections at once (one past it gets 503 too_many_connections and is closed, and the slot
 * comes back when a connection ends); headers that do not arrive within --http-headers-timeout-ms, or a
 * request within --http-request-timeout-ms, are cut off with 408, while a live tail's response outlasts
 * both; a connection idle after a response is closed after --http-keep-alive-timeout-ms.
 */
import http from 'node:http';
import net from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BrokerProcess } from '../helpers/launcher.js';
import { until } from '../helpers/util.js';

/** A raw connection to the HTTP port and everything it received until it closed. */
function rawConnection(port: number): { sock: net.Socket; connected: Promise<void>; closed: Promise<string> } {
  const sock = net.connect(port, '127.0.0.1');
  const chunks: Buffer[] = [];
  sock.on('data', (d: Buffer) => chunks.push(d));
  const connected = new Promise<void>((resolve, reject) => {
    sock.once('connect', () => resolve());
    sock.once('error', reject);
  });
  const closed = new Promise<string>((resolve) => {
    sock.on('error', () => {});
    sock.on('close', () => resolve(Buffer.concat(chunks).toString('utf8')));
  });
  return { sock, connected, closed };
}

function get(port: number, pathname: string): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    http
      .get({ host: '127.0.0.1', port, path: pathname, agent: false }, (res) => {
        let body = '';
        res.setEncoding('utf8');
        res.on('data', (c: string) => (body += c));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
      })
      .on('error', reject);
  });
}

describe('HTTP port, --http-max-connections', () => {
  let broker: BrokerProcess;

  beforeAll(async () => {
    broker = await BrokerProcess.start({ args: ['--offsets-topic-partitions', '1', '--http-max-connections', '3'] });
  });

  afterAll(async () => {
    await broker?.dispose();
  });

  it('a connection past the limit gets 503 too_many_connections and is closed; an ended one frees its slot', async () => {
    const held = [rawConnection(broker.healthPort), rawConnection(broker.healthPort), rawConnection(broker.healthPort)];
    try {
      for (const h of held) await h.connected;
      // Accepted in order: the fourth is past the three held ones.
      const extra = rawConnection(broker.healthPort);
      const reply = await extra.closed;
      expect(reply).toMatch(/^HTTP\/1\.1 503 /);
      expect(reply).toContain('"code":"too_many_connections"');
      // The held ones are still served.
      held[0]!.sock.write('GET /live HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n');
      await until(() => held[0]!.sock.bytesRead > 0, 10_000, 'the held connection answered');
      held[1]!.sock.destroy();
      await held[1]!.closed;
      // Its slot comes back once the broker has seen it close; a try before that is refused too (and counted).
      let refusedTries = 0;
      await until(
        async () => {
          const { status } = await get(broker.healthPort, '/live').catch(() => ({ status: 0 }));
          if (status === 503) refusedTries++;
          return status === 200;
        },
        10_000,
        'a new connection served',
      );
      // Counted, under a reason of its own (docs/operations.md, "Metrics").
      const { body } = await get(broker.healthPort, '/metrics');
      expect(body).toContain(`tributary_connections_rejected_total{reason="http_too_many_connections"} ${1 + refusedTries}\n`);
    } finally {
      for (const h of held) h.sock.destroy();
    }
  });
});

describe('HTTP port timeouts: --http-headers-timeout-ms, --http-request-timeout-ms, --http-keep-alive-timeout-ms', () => {
  const headersMs = 300;
  const requestMs = 1500;
  const keepAliveMs = 300;
  let broker: BrokerProcess;

  beforeAll(async () => {
    broker = await BrokerProcess.start({
      args: ['--offsets-topic-partitions', '1', '--http-headers-timeout-ms', String(headersMs), '--http-request-timeout-ms', String(requestMs), '--http-keep-alive-timeout-ms', String(keepAliveMs)],
    });
  });

  afterAll(async () => {
    await broker?.dispose();
  });

  it('a connection that sends nothing or headers that never end gets 408 at the headers timeout, a body that never ends at the request timeout; a tail opened before streams on past both', async () => {
    const c = await broker.connect();
    await c.command('CREATE', { topic: 'slow', partitions: 1 });
    const tailGot: string[] = [];
    const tail = http.get({ host: '127.0.0.1', port: broker.healthPort, path: '/api/v1/topics/slow/tail', agent: false }, (res) => {
      res.setEncoding('utf8');
      res.on('data', (d: string) => tailGot.push(d));
      res.on('error', () => {});
    });
    tail.on('error', () => {});
    try {
      await until(() => tailGot.join('').includes('event: ready'), 10_000, 'the tail ready');
      const silent = rawConnection(broker.healthPort);
      const partial = rawConnection(broker.healthPort);
      const slowBody = rawConnection(broker.healthPort);
      await Promise.all([partial.connected, slowBody.connected]);
      partial.sock.write('GET /live HTTP/1.1\r\nHost: 127.0.0.1\r\n');
      // Headers whole, then 1 byte of a 100-byte body.
      slowBody.sock.write('POST /api/v1/topics/slow/messages HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{');
      let slowBodyClosed = false;
      void slowBody.closed.then(() => (slowBodyClosed = true));
      // Node's defaults would hold these for 60 s (headers) to 300 s (request).
      expect(await silent.closed).toMatch(/^HTTP\/1\.1 408 /);
      expect(await partial.closed).toMatch(/^HTTP\/1\.1 408 /);
      // Its headers arrived: only the request timeout, five times longer, ends it.
      expect(slowBodyClosed).toBe(false);
      expect(await slowBody.closed).toMatch(/^HTTP\/1\.1 408 /);
      // The tail's request arrived whole and it has been open longer than the request timeout: its response goes on.
      await c.command('PUBLISH', { topic: 'slow', partition: 0, message: 'after' });
      await until(() => tailGot.join('').includes('"value":"after"'), 10_000, 'the tail still delivering');
      expect((await get(broker.healthPort, '/live')).status).toBe(200);
    } finally {
      tail.destroy();
    }
  });

  it('a connection idle after a response is closed after the keep-alive timeout', async () => {
    const idle = rawConnection(broker.healthPort);
    await idle.connected;
    const sent = performance.now();
    idle.sock.write('GET /live HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n');
    const reply = await idle.closed;
    expect(reply).toMatch(/^HTTP\/1\.1 200 /);
    expect(reply).toContain('ok\n');
    // 300 ms and the second Node adds; with Node's default, 5 s and that second.
    expect(performance.now() - sent).toBeLessThan(3_000);
  });
});

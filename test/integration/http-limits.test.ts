/**
 * The HTTP port's own limits (docs/http-api.md, "Limits") against a real broker: at most
 * --http-max-connections at once (one past it gets 503 too_many_connections and is closed, and the slot
 * comes back when a connection ends), and a request that does not arrive whole within --frame-timeout-ms
 * is cut off, while a live tail's response outlasts it.
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
      // Its slot comes back once the broker has seen it close.
      await until(async () => (await get(broker.healthPort, '/live').catch(() => ({ status: 0 }))).status === 200, 10_000, 'a new connection served');
    } finally {
      for (const h of held) h.sock.destroy();
    }
  });
});

describe('HTTP port, a request held to --frame-timeout-ms', () => {
  let broker: BrokerProcess;

  beforeAll(async () => {
    broker = await BrokerProcess.start({ args: ['--offsets-topic-partitions', '1', '--frame-timeout-ms', '300'] });
  });

  afterAll(async () => {
    await broker?.dispose();
  });

  it('a connection that sends nothing, or headers that never end, gets 408 and is closed; a tail opened before stays open', async () => {
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
      await partial.connected;
      partial.sock.write('GET /live HTTP/1.1\r\nHost: 127.0.0.1\r\n');
      // Node's defaults would hold both for 60 s (headers) to 300 s (request).
      expect(await silent.closed).toMatch(/^HTTP\/1\.1 408 /);
      expect(await partial.closed).toMatch(/^HTTP\/1\.1 408 /);
      // The tail's request arrived whole: its response goes on.
      await c.command('PUBLISH', { topic: 'slow', partition: 0, message: 'after' });
      await until(() => tailGot.join('').includes('"value":"after"'), 10_000, 'the tail still delivering');
    } finally {
      tail.destroy();
    }
  });
});

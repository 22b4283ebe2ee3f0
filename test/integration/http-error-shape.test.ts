/**
 * The HTTP API's errors have one shape (docs/http-api.md, "Errors"), whoever raised them: a broker's
 * error (parsed from its `ERROR:` line) has the message a locally raised one has, its code and fields
 * with no `ERROR:`, class or retryable, and its decimal integer fields are numbers (names stay text);
 * the 421 for a host name not served has `retriable` and `fields` like every other error.
 */
import http from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BrokerProcess } from '../helpers/launcher.js';

describe('HTTP error shape', () => {
  let broker: BrokerProcess;
  let base: string;

  const get = async (path: string) => {
    const r = await fetch(`${base}${path}`);
    return { status: r.status, body: (await r.json()) as { error: unknown } };
  };
  /** With a Host header of its own (fetch sends the URL's). */
  const getAs = (host: string, path: string) =>
    new Promise<{ status: number; body: unknown }>((resolve, reject) => {
      http
        .get({ host: '127.0.0.1', port: broker.healthPort, path, headers: { host } }, (res) => {
          let text = '';
          res.setEncoding('utf8');
          res.on('data', (c: string) => (text += c));
          res.on('end', () => resolve({ status: res.statusCode ?? 0, body: JSON.parse(text) }));
        })
        .on('error', reject);
    });

  beforeAll(async () => {
    broker = await BrokerProcess.start({ args: ['--offsets-topic-partitions', '1'] });
    base = `http://127.0.0.1:${broker.healthPort}`;
    const r = await fetch(`${base}/api/v1/topics`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ name: 'shapes', partitions: 2 }) });
    expect(r.status).toBe(201);
  });

  afterAll(async () => {
    await broker?.dispose();
  });

  it("a broker's error: the documented message, integers as numbers, names as text", async () => {
    expect(await get('/api/v1/topics/nope')).toEqual({
      status: 404,
      body: { error: { code: 'topic_not_found', message: 'topic_not_found topic=nope', retriable: false, fields: { topic: 'nope' } } },
    });
    expect(await get('/api/v1/topics/123')).toEqual({
      status: 404,
      body: { error: { code: 'topic_not_found', message: 'topic_not_found topic=123', retriable: false, fields: { topic: '123' } } },
    });
    expect(await get('/api/v1/topics/shapes/messages?partition=9')).toEqual({
      status: 404,
      body: {
        error: { code: 'partition_not_found', message: 'partition_not_found topic=shapes partition=9 partitions=2', retriable: false, fields: { topic: 'shapes', partition: 9, partitions: 2 } },
      },
    });
  });

  it('a locally raised error has the same shape', async () => {
    const r = await get('/api/v1/topics/shapes/messages?partition=0&offset=99');
    expect(r.status).toBe(400);
    expect(r.body.error).toEqual({
      code: 'OFFSET_OUT_OF_RANGE',
      message: expect.stringMatching(/^OFFSET_OUT_OF_RANGE /),
      retriable: false,
      fields: expect.objectContaining({ requested: 99, partition: 0 }),
    });
  });

  it('421 misdirected_request has retriable and fields too', async () => {
    expect(await getAs('evil.example', '/api/v1/topics')).toEqual({
      status: 421,
      body: { error: { code: 'misdirected_request', message: 'this host name is not served here (httpAllowedHosts)', retriable: false, fields: {} } },
    });
  });
});

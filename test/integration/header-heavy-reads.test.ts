/**
 * Reading records of 65,535 headers each, accepted normally (a 64 MiB produce frame of 170 of them), from a
 * real broker: a read is bounded by what it builds, not only by the records' bytes. Built as objects, one
 * CONSUME after a restart (no tail cache) peaked at 1.9 GB and four at once killed the broker, which then
 * died again at every restart that was read from.
 */
import { afterAll, beforeAll, expect, it } from 'vitest';
import { BrokerProcess } from '../helpers/launcher.js';
import { FULL_FRAME_RECORDS, MAX_HEADERS, alive, batchFrame, peakGrowth, recordWithHeaders, servesAnother } from '../helpers/raw-batch.js';
import { RawClient } from '../helpers/raw-client.js';

let broker: BrokerProcess;

beforeAll(async () => {
  broker = await BrokerProcess.start({ args: ['--offsets-topic-partitions', '1'] });
  const c = await RawClient.connect(broker.port);
  expect(await c.command('CREATE topic=t partitions=1')).toMatch(/^OK/);
  expect(await c.command('NEGOTIATE version=1 features=record_extensions_v1')).toMatch(/^OK/);
  const records = Array.from({ length: FULL_FRAME_RECORDS }, (_, i) => recordWithHeaders(MAX_HEADERS, { value: Buffer.from(`v${i}`) }));
  expect(await c.command(batchFrame('t', 0, records), 120_000)).toMatch(/"status":"OK"/);
  c.destroy();
}, 180_000);

afterAll(async () => {
  await broker?.dispose();
});

/** The record count of a CONSUME reply batch on topic `t` (its header's last field). */
function replyCount(frame: Buffer): number {
  expect(frame.readUInt16BE(0)).toBe(0xba7c);
  return frame.readInt32BE(2 + 2 + 1 + 4 + 1 + 1 + 1 + 16);
}

/** CONSUMEs of up to 64 MiB on `n` record_extensions_v1 connections at once: each reply's record count. */
async function consumeAtOnce(n: number): Promise<number[]> {
  const conns = await Promise.all(Array.from({ length: n }, () => RawClient.connect(broker.port)));
  try {
    for (const c of conns) expect(await c.command('NEGOTIATE version=1 features=record_extensions_v1')).toMatch(/^OK/);
    for (const c of conns) c.send('CONSUME topic=t partition=0 offset=0 batch=1000 max_bytes=67108864');
    return await Promise.all(conns.map(async (c) => replyCount(await c.nextFrame(120_000))));
  } finally {
    for (const c of conns) c.destroy();
  }
}

it('a CONSUME after a restart (no tail cache) is written from the stored bytes: 9 records, no object per header', async () => {
  await broker.restart();
  const growth = peakGrowth(broker);
  // max_bytes is capped at the frame limit less 1 MiB (63 MiB); a record counts 393 KB + 65,535 * 100.
  expect(await consumeAtOnce(1)).toEqual([9]);
  // Built as objects: 113 MiB (590,000 header objects); written from the stored bytes: about 12.
  expect(growth()).toBeLessThan(64);
  await servesAnother(broker, 't');
}, 180_000);

it('four CONSUMEs at once after a restart are served and the broker stays up', async () => {
  await broker.restart();
  const growth = peakGrowth(broker);
  expect(await consumeAtOnce(4)).toEqual([9, 9, 9, 9]);
  // Built as objects: 327 MiB; written from the stored bytes: about 48.
  expect(growth()).toBeLessThan(160);
  expect(alive(broker)).toBe(true);
  await servesAnother(broker, 't');
}, 180_000);

it('the HTTP API shows 100 headers per message and says how many it left out', async () => {
  const growth = peakGrowth(broker);
  const r = await fetch(`http://127.0.0.1:${broker.healthPort}/api/v1/topics/t/messages?partition=0&offset=0&limit=100`);
  expect(r.status).toBe(200);
  const body = (await r.json()) as { nextOffset: number; truncated?: boolean; messages: Array<{ value: string; headers: unknown[]; headersOmitted?: number }> };
  expect(body.messages).toHaveLength(100);
  expect(body.messages[7]).toMatchObject({ value: 'v7', headersOmitted: MAX_HEADERS - 100 });
  expect(body.messages.every((m) => m.headers.length === 100)).toBe(true);
  expect([body.nextOffset, body.truncated]).toEqual([100, undefined]);
  // Every header shown: 1.9 GB and 262 MB of JSON.
  expect(growth()).toBeLessThan(512);
  expect(alive(broker)).toBe(true);
}, 180_000);

it('the HTTP API ends a page of messages at 16 MiB of JSON and says where to go on', async () => {
  const c = await RawClient.connect(broker.port);
  expect(await c.command('CREATE topic=big partitions=1')).toMatch(/^OK/);
  const mib = 'x'.repeat(1024 * 1024);
  for (let i = 0; i < 20; i++) expect(await c.command(`PUBLISH topic=big partition=0 message=${mib}`)).toMatch(/"status":"OK"/);
  c.destroy();
  const api = `http://127.0.0.1:${broker.healthPort}/api/v1/topics/big`;
  const page = (await (await fetch(`${api}/messages?partition=0&offset=0&limit=100`)).json()) as { nextOffset: number; truncated?: boolean; messages: Array<{ offset: number }> };
  // 15 values of 1 MiB and their fields fit in 16 MiB, a 16th does not.
  expect([page.messages.length, page.nextOffset, page.truncated]).toEqual([15, 15, true]);
  const rest = (await (await fetch(`${api}/messages?partition=0&offset=15&limit=100`)).json()) as { nextOffset: number; truncated?: boolean; messages: unknown[] };
  expect([rest.messages.length, rest.nextOffset, rest.truncated]).toEqual([5, 20, undefined]);
  const found = (await (await fetch(`${api}/search?partition=0&value=xxxx`)).json()) as { complete: boolean; next: Record<string, number>; messages: unknown[] };
  expect([found.messages.length, found.complete, found.next]).toEqual([15, false, { 0: 15 }]);
}, 180_000);

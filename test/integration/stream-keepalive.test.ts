/**
 * STREAM keepalive_ms: a client that watches a stream for silence asks the broker for keepalives at
 * least that often (docs/protocol.md, STREAM), so a quiet but healthy stream is never mistaken for a
 * dead one, and a stream past its silence bound is.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Batch } from 'tributary-protocol/batch.js';
import { BrokerProcess } from '../helpers/launcher.js';
import { sleep } from '../helpers/util.js';

describe('STREAM keepalive_ms', () => {
  let broker: BrokerProcess;

  beforeAll(async () => {
    broker = await BrokerProcess.start({ args: ['--flush', 'os'] });
    await (await broker.connect()).command('CREATE', { topic: 'ka', partitions: 1 });
  });

  afterAll(async () => {
    await broker?.dispose();
  });

  it('keeps a quiet stream alive past the client silence bound, then delivers what is produced', async () => {
    const conn = await broker.connect();
    // The broker's own keepalive interval is 5 s: without keepalive_ms the client gives up after 300 ms.
    const it = conn.stream({ topic: 'ka', partition: 0, offset: 0, keepalive_ms: 50 }, undefined, { silenceMs: 300 });
    const first = it.next();
    await sleep(1000);
    await (await broker.connect()).command('PUBLISH', { topic: 'ka', partition: 0, message: 'late' });
    const n = await first;
    expect(n.done).toBe(false);
    expect((n.value as Batch).records.map((r) => r.value.toString())).toEqual(['late']);
    await it.return({});
  });

  it('refuses a keepalive_ms out of range', async () => {
    const conn = await broker.connect();
    const it = conn.stream({ topic: 'ka', partition: 0, offset: 0, keepalive_ms: 10 });
    await expect(it.next()).rejects.toMatchObject({ code: 'invalid_parameter' });
  });
});

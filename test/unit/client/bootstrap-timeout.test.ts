/**
 * A Producer and an Admin pointed at addresses where nothing listens keep trying until bootstrapTimeoutMs,
 * whatever their retry bounds, and then fail with brokers_unreachable (not retriable) naming each address,
 * as the Consumer does (docs/sdk.md, "Connecting"). Once a broker was reached, the retry bounds apply
 * again: a lost broker fails a call after its retries with a retriable connection_lost.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { Admin } from 'tributary-client/admin.js';
import { Producer } from 'tributary-client/producer.js';
import { deadPort, ScriptedServer } from '../../helpers/scripted-server.js';
import { rejection } from '../../helpers/util.js';

/** Few, quick retries: they would run out long before the bootstrap timeout. */
const RETRY = { retries: 2, initialDelayMs: 5, maxDelayMs: 10 };
const BOOTSTRAP_MS = 600;

const closers: Array<() => Promise<void>> = [];
afterEach(async () => {
  for (const c of closers.splice(0)) await c();
});

describe('bootstrap timeout of the Producer and the Admin', () => {
  it('a Producer at dead addresses fails with brokers_unreachable after bootstrapTimeoutMs, naming each address', async () => {
    const addresses = [`127.0.0.1:${await deadPort()}`, `127.0.0.1:${await deadPort()}`];
    const p = new Producer({ brokers: addresses, bootstrapTimeoutMs: BOOTSTRAP_MS, retry: RETRY });
    closers.push(() => p.close());
    const started = performance.now();
    const e = await rejection(p.send({ topic: 't', messages: [{ value: 'x' }] }));
    expect(e.code, e.message).toBe('brokers_unreachable');
    expect(e.retriable).toBe(false);
    expect(performance.now() - started).toBeGreaterThanOrEqual(BOOTSTRAP_MS - 50);
    expect(String(e.fields.brokers).split(',').sort()).toEqual([...addresses].sort());
    for (const a of addresses) expect(e.message).toContain(`connection refused by ${a}`);
  });

  it('an Admin at dead addresses fails with brokers_unreachable after bootstrapTimeoutMs, naming each address', async () => {
    const addresses = [`127.0.0.1:${await deadPort()}`, `127.0.0.1:${await deadPort()}`];
    const a = new Admin({ brokers: addresses, bootstrapTimeoutMs: BOOTSTRAP_MS, retry: RETRY });
    closers.push(() => a.close());
    const started = performance.now();
    const e = await rejection(a.listTopics());
    expect(e.code, e.message).toBe('brokers_unreachable');
    expect(e.retriable).toBe(false);
    expect(performance.now() - started).toBeGreaterThanOrEqual(BOOTSTRAP_MS - 50);
    expect(String(e.fields.brokers).split(',').sort()).toEqual([...addresses].sort());
  });

  it('once a broker was reached, its loss fails a call after the retries, retriably, not after the bootstrap timeout', async () => {
    const server = await ScriptedServer.start({ script: { LIST: () => 'OK topics=' } });
    const address = `127.0.0.1:${server.port}`;
    const a = new Admin({ brokers: [address], bootstrapTimeoutMs: 60_000, retry: RETRY });
    closers.push(() => a.close());
    await a.listTopics();
    await server.close();
    const started = performance.now();
    const e = await rejection(a.listTopics());
    expect(e.code, e.message).toBe('connection_lost');
    expect(e.retriable).toBe(true);
    expect(performance.now() - started).toBeLessThan(5000);
  });
});

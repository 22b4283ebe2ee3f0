/**
 * Bootstrap brokers that accept TCP connections and say nothing (a frozen process, or some other
 * service's port): every client fails as docs/sdk.md ("Connecting") says, brokers_unreachable after
 * bootstrapTimeoutMs naming the handshake that never came, also where the first request is a leader
 * lookup (the Consumer's FIND_COORDINATOR, the Producer's METADATA). The lookup's own bound used to run
 * from before the dial and fire before the handshake bound: a counted request_timeout every time, so a
 * Consumer retried for ever and a Producer gave up after its retries with the wrong error.
 *
 * A server that completes the handshake and then answers nothing is a reached broker: the Producer and
 * the Admin end their calls by their own bounds (retries, requestTimeoutMs) with a retriable error.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { Admin } from 'tributary-client/admin.js';
import { Consumer } from 'tributary-client/consumer.js';
import { Producer } from 'tributary-client/producer.js';
import type { RetryOptions } from 'tributary-client/retry.js';
import type { TributaryError } from 'tributary-protocol/errors.js';
import { ScriptedServer } from '../../helpers/scripted-server.js';
import { silentServer } from '../../helpers/silent-server.js';
import { rejection } from '../../helpers/util.js';

/** Small bounds, so a failure comes quickly: the handshake bound is min(connectTimeoutMs, stallTimeoutMs). */
const BOUNDS = { connectTimeoutMs: 1000, stallTimeoutMs: 100, bootstrapTimeoutMs: 300 };
const RETRY = { retries: 2, initialDelayMs: 5, maxDelayMs: 20 };

/**
 * `p`'s rejection; fails the test, rather than hanging it, when `p` has not settled after `ms` (far
 * above the bounds it runs under: this is no timing assertion).
 */
async function rejectionWithin(p: Promise<unknown>, ms: number, what: string): Promise<TributaryError> {
  let timer: NodeJS.Timeout | undefined;
  const hung = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what} did not settle within ${ms} ms`)), ms);
  });
  try {
    return await rejection(Promise.race([p, hung]));
  } finally {
    clearTimeout(timer);
  }
}

/** Quick retries, recording what each retried: before a broker is reached, only failed connects (docs/sdk.md, "Connecting"). */
function retrying(): { retry: RetryOptions; retried: TributaryError[] } {
  const retried: TributaryError[] = [];
  return { retried, retry: { retries: 2, initialDelayMs: 5, maxDelayMs: 20, onRetry: (err) => void retried.push(err as TributaryError) } };
}

/**
 * brokers_unreachable saying why, and every attempt before it a failed connect (its handshake never
 * answered), none a lookup's request_timeout: such a failure counted against the retries and never
 * against bootstrapTimeoutMs.
 */
function expectUnreachable(e: TributaryError, address: string, retried: TributaryError[]): void {
  expect(retried.length).toBeGreaterThan(0);
  expect(retried.map((r) => `${r.code} ${r.fields.cause}`)).toEqual(retried.map(() => 'connection_lost no_handshake'));
  expect(e.code, e.message).toBe('brokers_unreachable');
  expect(e.retriable).toBe(false);
  expect(e.fields.brokers).toBe(address);
  expect(e.message).toContain(`${address} accepted the connection but did not answer the handshake`);
}

const cleanups: Array<() => Promise<unknown>> = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c().catch(() => {});
});

describe('a bootstrap broker that accepts connections and never answers', () => {
  it("a Consumer's run() and its iterator reject with brokers_unreachable", async () => {
    const server = await silentServer();
    cleanups.push(server.close);
    const r1 = retrying();
    const c = new Consumer({ brokers: [server.address], groupId: 'g', topic: 't', retry: r1.retry, ...BOUNDS });
    cleanups.push(() => c.close());
    expectUnreachable(await rejectionWithin(c.run({ eachMessage: () => {} }), 10_000, 'run()'), server.address, r1.retried);
    expect(c.state).toBe('closed');

    const r2 = retrying();
    const c2 = new Consumer({ brokers: [server.address], groupId: 'g', topic: 't', retry: r2.retry, ...BOUNDS });
    cleanups.push(() => c2.close());
    const iterate = async () => {
      for await (const _ of c2) break;
    };
    expectUnreachable(await rejectionWithin(iterate(), 10_000, 'the first iteration'), server.address, r2.retried);
  });

  it("a Producer's send() and an Admin's calls (a lookup, and one to any broker) reject with brokers_unreachable", async () => {
    const server = await silentServer();
    cleanups.push(server.close);
    const r = retrying();
    const p = new Producer({ brokers: [server.address], retry: r.retry, ...BOUNDS });
    cleanups.push(() => p.close());
    expectUnreachable(await rejectionWithin(p.send({ topic: 't', messages: [{ value: 'x' }] }), 10_000, 'send()'), server.address, r.retried);

    for (const call of [(a: Admin) => a.describeGroup('g'), (a: Admin) => a.listTopics()]) {
      const ra = retrying();
      const a = new Admin({ brokers: [server.address], retry: ra.retry, ...BOUNDS });
      cleanups.push(() => a.close());
      expectUnreachable(await rejectionWithin(call(a), 10_000, 'the Admin call'), server.address, ra.retried);
    }
  });
});

describe('a broker that answers the handshake and nothing after it', () => {
  it("a Consumer keeps retrying its rebalance and reports it: a crash (fatal=false) once the failures outlast a session", async () => {
    const server = await ScriptedServer.start({ script: { NEGOTIATE: () => undefined, '*': () => 'hang' } });
    cleanups.push(() => server.close());
    const c = new Consumer({ brokers: [server.address], groupId: 'g', topic: 't', sessionTimeoutMs: 300, heartbeatIntervalMs: 100, retry: RETRY, ...BOUNDS });
    const crashes: Array<{ code: string; fatal: boolean }> = [];
    const reported = new Promise<void>((resolve) =>
      c.on('crash', ({ error, fatal }) => {
        crashes.push({ code: (error as TributaryError).code, fatal });
        resolve();
      }),
    );
    const started = c.start().catch((err: unknown) => err);
    cleanups.push(() => c.close());
    // Before: retried for ever with no event at all (this waited until the test's own timeout).
    await reported;
    expect(crashes[0]).toEqual({ code: 'request_timeout', fatal: false });
    await c.close();
    await started;
  });

  it('a Producer fails its send after its retries, an Admin its calls after requestTimeoutMs, retriably', async () => {
    const server = await ScriptedServer.start({ script: { NEGOTIATE: () => undefined, '*': () => 'hang' } });
    cleanups.push(() => server.close());
    const p = new Producer({ brokers: [server.address], retry: RETRY, ...BOUNDS });
    cleanups.push(() => p.close());
    const sent = await rejectionWithin(p.send({ topic: 't', messages: [{ value: 'x' }] }), 10_000, 'send()');
    expect(sent.code, sent.message).toBe('request_timeout');
    expect(sent.retriable).toBe(true);

    const a = new Admin({ brokers: [server.address], requestTimeoutMs: 500, retry: { retries: 1000, initialDelayMs: 5, maxDelayMs: 20 }, ...BOUNDS });
    cleanups.push(() => a.close());
    for (const call of [(x: Admin) => x.describeGroup('g'), (x: Admin) => x.listTopics()]) {
      const e = await rejectionWithin(call(a), 10_000, 'the Admin call');
      expect(e.code, e.message).toBe('request_timeout');
      expect(e.message).toMatch(/requestTimeoutMs/);
    }
  });
});

/**
 * The etcd client's deadlines on a fake clock, against endpoints that accept connections and never answer
 * (as a SIGSTOPped etcd does): a call fails with DEADLINE_EXCEEDED exactly requestTimeoutMs after it was
 * made, each endpoint is tried once, and nothing retries it for further deadlines. etcd-unavailable.test.ts
 * checks the same against a frozen etcd, without timing it.
 */
import net from 'node:net';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { createEtcdClient } from 'tributary-broker/cluster/etcd-client.js';
import { track, untilReal, useFakeTimersForIo } from '../../helpers/fake-timers.js';

/** A TCP endpoint that accepts and reads everything, and never writes a byte. */
class BlackHole {
  readonly sockets: net.Socket[] = [];
  private readonly server = net.createServer((s) => {
    this.sockets.push(s);
    s.on('error', () => {});
    s.resume();
  });
  port = 0;

  static async start(): Promise<BlackHole> {
    const h = new BlackHole();
    await new Promise<void>((r) => h.server.listen(0, '127.0.0.1', () => r()));
    h.port = (h.server.address() as net.AddressInfo).port;
    return h;
  }

  get endpoint(): string {
    return `http://127.0.0.1:${this.port}`;
  }

  async close(): Promise<void> {
    for (const s of this.sockets) s.destroy();
    await new Promise<void>((r) => this.server.close(() => r()));
  }
}

const holes: BlackHole[] = [];
const clients: Array<{ close(): void }> = [];

async function hole(): Promise<BlackHole> {
  const h = await BlackHole.start();
  holes.push(h);
  return h;
}

afterEach(async () => {
  vi.useRealTimers();
  for (const c of clients.splice(0)) c.close();
  await Promise.all(holes.splice(0).map((h) => h.close()));
});

describe('createEtcdClient against an etcd that does not answer', () => {
  it('fails a call at its deadline, requestTimeoutMs after it was made, and does not try again', async () => {
    const h = await hole();
    useFakeTimersForIo();
    const client = createEtcdClient({ endpoints: [h.endpoint], requestTimeoutMs: 2000 });
    clients.push(client);
    const call = track(client.get('some-key').string());
    await untilReal(() => h.sockets.length === 1, 'the client to connect');
    await vi.advanceTimersByTimeAsync(1999);
    expect(call.settled).toBe(false);
    await vi.advanceTimersByTimeAsync(1);
    await untilReal(() => call.settled, 'the call to fail at its deadline');
    await expect(call.promise).rejects.toThrow(/DEADLINE_EXCEEDED/);
    expect(h.sockets).toHaveLength(1);
  });

  it('tries each endpoint once: two endpoints, two deadlines', async () => {
    const [a, b] = [await hole(), await hole()];
    useFakeTimersForIo();
    const client = createEtcdClient({ endpoints: [a.endpoint, b.endpoint], requestTimeoutMs: 2000 });
    clients.push(client);
    const call = track(client.get('some-key').string());
    await untilReal(() => a.sockets.length + b.sockets.length === 1, 'the client to connect to one endpoint');
    await vi.advanceTimersByTimeAsync(2000);
    // the first deadline passed: the other endpoint is asked, with a deadline of its own
    await untilReal(() => a.sockets.length + b.sockets.length === 2, 'the client to move on to the other endpoint');
    expect(call.settled).toBe(false);
    await vi.advanceTimersByTimeAsync(1999);
    expect(call.settled).toBe(false);
    await vi.advanceTimersByTimeAsync(1);
    await untilReal(() => call.settled, 'the call to fail at the second deadline');
    await expect(call.promise).rejects.toThrow(/DEADLINE_EXCEEDED/);
    expect([a.sockets.length, b.sockets.length]).toEqual([1, 1]);
  });
});

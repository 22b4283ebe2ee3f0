import { EventEmitter } from 'node:events';
import type { Etcd3 } from 'etcd3';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { LeaseKeeper } from 'tributary-broker/cluster/lease-keeper.js';

/** The part of etcd3's Lease the keeper uses: its keep-alive events, grant, revoke, release. */
class FakeLease extends EventEmitter {
  revoked = 0;
  released = 0;
  async grant(): Promise<string> {
    return '7';
  }
  async revoke(): Promise<void> {
    this.revoked++;
  }
  release(): void {
    this.released++;
  }
  /** A keep-alive sent now; returns its answer, to deliver whenever the test says. */
  fire(): (ttlSeconds: number) => void {
    this.emit('keepaliveFired');
    return (ttl) => this.emit('keepaliveSucceeded', { TTL: String(ttl) });
  }
}

/**
 * A keeper on the fake timers' clock: advanceTimersByTime moves it and runs the timers, setSystemTime
 * moves it alone (a pause of the process). In the broker it is performance.now(); see the wall-clock test.
 */
async function keeper(ttlSeconds = 2, now: () => number = () => Date.now()): Promise<{ k: LeaseKeeper; lease: FakeLease }> {
  const lease = new FakeLease();
  const client = { lease: () => lease } as unknown as Etcd3;
  const k = await LeaseKeeper.grant(client, ttlSeconds, now);
  return { k, lease };
}

beforeEach(() => {
  vi.useFakeTimers({ now: 1_000_000 });
});
afterEach(() => {
  vi.useRealTimers();
});

describe('LeaseKeeper', () => {
  it('counts the TTL from when the last answered keep-alive was sent, not from when its answer came', async () => {
    const { k, lease } = await keeper(2);
    const unconfirmed: boolean[] = [];
    k.events.on('unconfirmed', (paused: boolean) => unconfirmed.push(paused));

    vi.advanceTimersByTime(500);
    const answer = lease.fire(); // sent at +500
    vi.advanceTimersByTime(1_200);
    answer(2); // answered at +1700: valid until +2500, not +3700
    vi.advanceTimersByTime(799); // +2499
    expect(k.confirmed).toBe(true);
    expect(unconfirmed).toEqual([]);
    vi.advanceTimersByTime(1); // +2500
    expect(k.confirmed).toBe(false);
    expect(unconfirmed).toEqual([false]);
    // Unconfirmed is not dead: etcd may only be slow, and the lease still stands on its side.
    expect(k.alive).toBe(true);
  });

  it('reports reconfirmed only for an answer that makes the lease valid again', async () => {
    const { k, lease } = await keeper(2);
    const seen: string[] = [];
    k.events.on('unconfirmed', () => seen.push('unconfirmed'));
    k.events.on('reconfirmed', () => seen.push('reconfirmed'));
    const late = lease.fire(); // sent at 0
    vi.advanceTimersByTime(1_000);
    lease.fire(); // sent at +1000, never answered
    vi.advanceTimersByTime(1_500); // +2500: past the grant's TTL
    expect(seen).toEqual(['unconfirmed']);
    expect(k.confirmed).toBe(false);
    late(2); // the answer to the keep-alive sent at 0: valid until +2000, already past
    expect(seen).toEqual(['unconfirmed']);
    expect(k.confirmed).toBe(false);
    const fresh = lease.fire(); // sent at +2500
    vi.advanceTimersByTime(200);
    fresh(2); // valid until +4500
    expect(seen).toEqual(['unconfirmed', 'reconfirmed']);
    expect(k.confirmed).toBe(true);
  });

  it('turns not alive when its own process was paused past the confirmed lease, until a keep-alive sent after the pause is answered', async () => {
    const { k, lease } = await keeper(2);
    const unconfirmed: boolean[] = [];
    k.events.on('unconfirmed', (paused: boolean) => unconfirmed.push(paused));
    vi.advanceTimersByTime(300);
    const answerEarly = lease.fire(); // sent before the pause
    // The process freezes for 2.5 s: no timer runs, the clock moves on past the grant's TTL (+2000).
    vi.setSystemTime(Date.now() + 2_500);
    expect(k.alive).toBe(false);
    expect(k.settled).toBe(false);
    answerEarly(2); // valid until +2300, already past
    expect(k.alive).toBe(false); // an answer to a keep-alive from before the pause proves nothing
    vi.advanceTimersByTime(100);
    expect(unconfirmed).toEqual([true]);
    const answerLate = lease.fire();
    expect(k.alive).toBe(false);
    answerLate(2);
    expect(k.alive).toBe(true);
    expect(k.settled).toBe(true);
    expect(k.confirmed).toBe(true);
  });

  it('stays alive over a gap etcd had confirmed the lease past (its own long work); settled waits for a keep-alive sent after it', async () => {
    const { k, lease } = await keeper(10);
    vi.advanceTimersByTime(300);
    lease.fire()(10); // valid until +10300
    const answerEarly = lease.fire(); // sent before the gap
    // A second and a half of synchronous work: etcd cannot have expired the lease meanwhile.
    vi.setSystemTime(Date.now() + 1_500);
    expect(k.alive).toBe(true);
    expect(k.settled).toBe(false);
    let settled: boolean | undefined;
    void k.whenSettled().then((s) => {
      settled = s;
    });
    answerEarly(10);
    await Promise.resolve();
    expect([k.settled, settled]).toEqual([false, undefined]); // sent before the gap: what etcd did meanwhile may be unread
    vi.advanceTimersByTime(100);
    const answerLate = lease.fire();
    expect(k.settled).toBe(false);
    answerLate(10);
    await Promise.resolve();
    expect([k.settled, settled, k.alive]).toEqual([true, true, true]);
  });

  it('counts a short gap as past the lease when no keep-alive sent after it is answered before the confirmed lease runs out', async () => {
    const { k, lease } = await keeper(3);
    const unconfirmed: boolean[] = [];
    k.events.on('unconfirmed', (paused: boolean) => unconfirmed.push(paused));
    lease.fire()(3); // valid until +3000
    vi.setSystemTime(Date.now() + 1_500); // a gap the lease outlives
    expect([k.alive, k.settled]).toEqual([true, false]);
    let settled: boolean | undefined;
    void k.whenSettled().then((s) => {
      settled = s;
    });
    lease.fire(); // sent after the gap, never answered
    vi.advanceTimersByTime(1_499);
    await Promise.resolve();
    expect([k.alive, settled]).toEqual([true, undefined]);
    vi.advanceTimersByTime(1); // +3000: etcd may expire the lease now, and this broker cannot tell a slow etcd from its own pause
    await Promise.resolve();
    expect([k.alive, settled]).toEqual([false, false]);
    await expect(k.whenSettled()).resolves.toBe(false);
    // The TTL timer (moved along with the fake clock's jump) reports it as a pause, not as etcd gone.
    vi.advanceTimersByTime(1_500);
    expect(unconfirmed).toEqual([true]);
  });

  it('gives up waiting to settle once the lease confirmed at the wait runs out, though later gaps keep it alive and unsettled', async () => {
    const { k, lease } = await keeper(3);
    const early = lease.fire(); // sent at 0
    vi.setSystemTime(Date.now() + 1_500); // a gap: valid until +3000 still
    let settled: boolean | undefined;
    void k.whenSettled().then((s) => {
      settled = s;
    });
    early(3); // sent before the gap: keeps the lease (until +3000), settles nothing
    vi.advanceTimersByTime(100);
    const afterFirst = lease.fire(); // +1600
    vi.setSystemTime(Date.now() + 1_200); // another gap before its answer is read: +2800
    expect(k.settled).toBe(false); // noticed (the ticker ran first)
    afterFirst(3); // valid until +4600, but sent before this second gap
    vi.advanceTimersByTime(300); // +3100: past the lease confirmed when the wait began
    await Promise.resolve();
    expect([k.alive, k.settled, settled]).toEqual([true, false, false]);
  });

  it('counts a gap as past the lease when etcd was unreachable before it, though the holder kept acting then', async () => {
    const { k, lease } = await keeper(2);
    lease.fire(); // never answered: etcd is away
    vi.advanceTimersByTime(2_500); // past the TTL, running normally
    expect(k.confirmed).toBe(false);
    expect(k.alive).toBe(true);
    vi.setSystemTime(Date.now() + 1_500); // then a pause: etcd may have come back and expired the lease meanwhile
    expect(k.alive).toBe(false);
    vi.advanceTimersByTime(100);
    lease.emit('keepaliveEstablished'); // etcd is back: a new stream
    const answerLate = lease.fire();
    answerLate(2);
    expect(k.alive).toBe(true);
  });

  it('tells etcd reporting the lease gone from the client giving up on an unreachable etcd', async () => {
    const a = await keeper(2);
    const events: string[] = [];
    a.k.events.on('lost', (reason: string) => events.push(`lost: ${reason}`));
    a.k.events.on('lapsed', () => events.push('lapsed'));
    a.lease.emit('lost', new Error('Lost connection to etcd'));
    expect(events).toEqual(['lapsed']);
    expect(a.k.alive).toBe(true); // the holder keeps acting: nobody can change the cluster meanwhile
    a.lease.emit('lost', new Error('Lost connection to etcd'));
    expect(events).toEqual(['lapsed']); // once

    const b = await keeper(2);
    const lost: string[] = [];
    b.k.events.on('lost', (reason: string) => lost.push(reason));
    b.lease.emit('lost', new Error('etcdserver: requested lease not found'));
    expect(lost).toEqual(['etcd reports the lease lost: etcdserver: requested lease not found']);
    expect(b.k.alive).toBe(false);
    expect(b.lease.revoked).toBe(1);
  });

  it('ends keep-alives without revoking when retired', async () => {
    const { k, lease } = await keeper(2);
    k.retire();
    expect(lease.released).toBe(1);
    expect(lease.revoked).toBe(0);
    expect(k.alive).toBe(false);
    expect(k.confirmed).toBe(false);
  });
});

describe('LeaseKeeper on its default (monotonic) clock: a step of the wall clock', () => {
  beforeEach(() => {
    vi.useRealTimers();
  });
  afterEach(() => {
    vi.restoreAllMocks();
  });

  async function realKeeper(ttlSeconds: number): Promise<{ k: LeaseKeeper; lease: FakeLease }> {
    const lease = new FakeLease();
    const k = await LeaseKeeper.grant({ lease: () => lease } as unknown as Etcd3, ttlSeconds);
    return { k, lease };
  }

  it('forward by 2 h is not a pause: the holder stays alive', async () => {
    const { k } = await realKeeper(10);
    const real = Date.now.bind(Date);
    vi.spyOn(Date, 'now').mockImplementation(() => real() + 2 * 3600_000);
    expect(k.alive).toBe(true);
    expect(k.confirmed).toBe(true);
    await k.revoke();
  });

  it('back by 5 min does not keep the lease confirmed past its TTL', async () => {
    const { k } = await realKeeper(1);
    const real = Date.now.bind(Date);
    vi.spyOn(Date, 'now').mockImplementation(() => real() - 5 * 60_000);
    // No keep-alive is answered (etcd unreachable): the TTL runs out a second later, whatever Date says.
    await new Promise((resolve) => k.events.once('unconfirmed', resolve));
    expect(k.confirmed).toBe(false);
    await k.revoke();
  });
});

import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { BrokerIdInUseError, type BrokerRegistration, BrokerRegistry } from 'tributary-broker/cluster/broker-registry.js';
import { type EtcdServer, startEtcd } from '../../helpers/etcd.js';
import { ClusterMember, REQUEST_TIMEOUT_MS, TTL_SECONDS, uniquePrefix } from './helpers.js';
import { eventually, sleep } from '../../helpers/util.js';

let etcd: EtcdServer;
const registries: BrokerRegistry[] = [];
const members: ClusterMember[] = [];

async function openRegistry(prefix: string): Promise<BrokerRegistry> {
  const r = new BrokerRegistry({ etcd: { endpoints: etcd.endpoints, requestTimeoutMs: REQUEST_TIMEOUT_MS }, prefix, leaseTtlSeconds: TTL_SECONDS });
  registries.push(r);
  await r.open();
  return r;
}

function broker(id: number) {
  return { id, host: '127.0.0.1', port: 9100 + id, advertisedAddress: `broker-${id}.test:${9100 + id}` };
}

function recorder(r: BrokerRegistry): string[] {
  const seen: string[] = [];
  r.events.on('broker-joined', (b: BrokerRegistration) => seen.push(`joined:${b.id}`));
  r.events.on('broker-left', (b: BrokerRegistration) => seen.push(`left:${b.id}`));
  return seen;
}

beforeAll(async () => {
  etcd = await startEtcd();
});

afterEach(async () => {
  await Promise.all(members.splice(0).map((m) => m.dispose()));
  await Promise.all(registries.splice(0).map((r) => r.close()));
});

afterAll(async () => {
  await etcd?.dispose();
});

describe('BrokerRegistry', () => {
  it('registers brokers, lists them and tells watchers about joins and leaves', async () => {
    const prefix = uniquePrefix('join');
    const observer = await openRegistry(prefix);
    const events = recorder(observer);
    const [one, two] = await Promise.all([openRegistry(prefix), openRegistry(prefix)]);

    const reg1 = await one.register(broker(1));
    await two.register(broker(2));
    expect(reg1).toMatchObject(broker(1));
    expect(one.self).toEqual(reg1);
    await eventually('both registries and the observer to see both', () => [one, two, observer].every((r) => r.list().length === 2));
    expect(one.list().map((b) => b.id)).toEqual([1, 2]);
    expect(observer.get(1)).toEqual(reg1);

    // A registry opened later loads the live brokers.
    const late = await openRegistry(prefix);
    expect(late.list().map((b) => b.advertisedAddress)).toEqual(['broker-1.test:9101', 'broker-2.test:9102']);

    await one.deregister();
    expect(one.self).toBeUndefined();
    await eventually('the observer to see broker 1 leave', () => observer.get(1) === undefined);
    expect(events).toEqual(['joined:1', 'joined:2', 'left:1']);
  });

  it('refuses a broker id that a live broker holds, and accepts it once that broker is gone', async () => {
    const prefix = uniquePrefix('dup');
    const [first, second] = await Promise.all([openRegistry(prefix), openRegistry(prefix)]);
    await first.register(broker(7));

    const err = await second.register({ ...broker(7), advertisedAddress: 'impostor:1' }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(BrokerIdInUseError);
    expect((err as BrokerIdInUseError).holder?.advertisedAddress).toBe('broker-7.test:9107');
    expect(second.self).toBeUndefined();
    expect(first.self?.advertisedAddress).toBe('broker-7.test:9107');

    // Both racing for a free id: exactly one wins.
    const [x, y] = await Promise.all([openRegistry(prefix), openRegistry(prefix)]);
    const results = await Promise.allSettled([x.register(broker(8)), y.register(broker(8))]);
    expect(results.filter((r) => r.status === 'fulfilled')).toHaveLength(1);

    await first.close();
    const reg = await second.register({ ...broker(7), advertisedAddress: 'successor:1' }, { waitMs: 2_000 });
    expect(reg.advertisedAddress).toBe('successor:1');
  });

  it('drops a broker whose process stops keeping its lease alive (SIGSTOP) within the TTL', async () => {
    const prefix = uniquePrefix('sigstop');
    const observer = await openRegistry(prefix);
    const member = await ClusterMember.start({ endpoints: etcd.endpoints, prefix, brokerId: 3, register: true });
    members.push(member);
    await eventually('the observer to see broker 3', () => observer.get(3) !== undefined);
    const left = new Promise<BrokerRegistration>((resolve) => observer.events.once('broker-left', (b: BrokerRegistration) => resolve(b)));

    // While it is alive and kept alive, its id is refused.
    const rival = await openRegistry(prefix);
    await expect(rival.register(broker(3))).rejects.toBeInstanceOf(BrokerIdInUseError);

    member.signal('SIGSTOP');
    // The stopped process cannot deregister: only its lease expiring on etcd (a TTL after the last
    // keep-alive etcd received) removes it. The keep-alive deadline itself is driven by a fake clock in
    // lease-keeper.test.ts.
    await eventually('the observer to see broker 3 leave', () => observer.get(3) === undefined, 20_000, 20);
    expect((await left).id).toBe(3);

    // Its id is free again; a restarted broker waiting out a lease would get it the same way.
    await rival.register(broker(3));
    member.signal('SIGCONT');
  });

  it('lets a restarted broker wait out the lease of its killed predecessor', async () => {
    const prefix = uniquePrefix('restart');
    const member = await ClusterMember.start({ endpoints: etcd.endpoints, prefix, brokerId: 4, register: true });
    members.push(member);
    await member.dispose(); // kill -9: the lease is left to expire
    const successor = await openRegistry(prefix);
    // A wait of 10 minutes: only the old lease expiring can let the registration through within the test.
    await successor.register(broker(4), { waitMs: 600_000 });
    expect(successor.self?.id).toBe(4);
  });

  it('keeps its registration while etcd is frozen, and keeps it under a new lease once etcd is back', async () => {
    const prefix = uniquePrefix('lapse');
    const r = await openRegistry(prefix);
    await r.register(broker(5));
    const first = r.leaseOf(5);
    let lost = false;
    r.events.on('registration-lost', () => {
      lost = true;
    });
    const lapsed = new Promise<void>((resolve) => r.events.once('registration-lapsed', () => resolve()));
    await etcd.kill('SIGSTOP');
    try {
      // Nobody can take anything over while etcd is down: the broker keeps acting (leaders keep serving).
      await sleep(TTL_SECONDS * 1000 + 500);
      expect(r.alive).toBe(true);
      expect(lost).toBe(false);
      await lapsed; // the client gives up renewing after 2 x TTL
      expect(r.alive).toBe(true);
    } finally {
      await etcd.kill('SIGCONT');
    }
    // Once etcd answers, the key moves to a new lease (it still holds exactly this registration) or, if
    // etcd expired it first, the broker registers again: either way broker 5 is registered, live.
    await eventually(
      'a renewed registration',
      async () => {
        const renewed = await r.renew().catch(() => false);
        if (!renewed && !(await r.register(broker(5)).catch(() => undefined))) return false;
        return r.leaseOf(5) !== undefined && r.leaseOf(5) !== first;
      },
      15_000,
      200,
    );
    expect(r.self?.id).toBe(5);
    expect(r.alive).toBe(true);
  });
});

import { Etcd3 } from 'etcd3';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { ControllerElection, type ControllerState } from 'tributary-broker/cluster/controller-election.js';
import { type EtcdServer, startEtcd } from '../../helpers/etcd.js';
import { ClusterMember, REQUEST_TIMEOUT_MS, TTL_SECONDS, uniquePrefix } from './helpers.js';
import { eventually, sleep } from '../../helpers/util.js';

let etcd: EtcdServer;
const elections: ControllerElection[] = [];
const members: ClusterMember[] = [];

async function candidate(prefix: string, brokerId: number): Promise<ControllerElection> {
  const e = new ControllerElection({
    etcd: { endpoints: etcd.endpoints, requestTimeoutMs: REQUEST_TIMEOUT_MS },
    prefix,
    brokerId,
    leaseTtlSeconds: TTL_SECONDS,
  });
  elections.push(e);
  await e.start();
  return e;
}

beforeAll(async () => {
  etcd = await startEtcd();
});

afterEach(async () => {
  await Promise.all(members.splice(0).map((m) => m.dispose()));
  await Promise.all(elections.splice(0).map((e) => e.close()));
});

afterAll(async () => {
  await etcd?.dispose();
});

describe('ControllerElection', () => {
  it('elects exactly one controller among candidates, and the next one when it closes', async () => {
    const prefix = uniquePrefix('elect');
    const all = await Promise.all([1, 2, 3].map((id) => candidate(prefix, id)));
    const controllers = all.filter((e) => e.isController);
    expect(controllers).toHaveLength(1);
    const first = controllers[0];
    await eventually('every candidate to know the controller', () => all.every((e) => e.controllerId === first.brokerId && e.epoch === first.epoch));

    // A candidate started later sees the sitting controller and does not take over.
    const late = await candidate(prefix, 4);
    expect(late.isController).toBe(false);
    expect(late.controllerId).toBe(first.brokerId);

    const changes: ControllerState[] = [];
    const rest = [...all.filter((e) => e !== first), late];
    rest[0].events.on('change', (s: ControllerState) => changes.push(s));
    const firstEpoch = first.epoch!;
    const firstLease = first.controllerLease!;
    await first.close();
    expect(first.isController).toBe(false);
    // Closing revoked the lease (rather than leaving it to expire): etcd no longer knows it.
    const etcdClient = new Etcd3({ hosts: etcd.endpoints });
    try {
      const ttl = await etcdClient.leaseClient.leaseTimeToLive({ ID: firstLease });
      expect(Number(ttl.TTL)).toBe(-1);
    } finally {
      etcdClient.close();
    }
    const next = await eventually('a new controller', () => {
      const now = rest.filter((e) => e.isController);
      return now.length > 0 && now;
    });
    expect(next).toHaveLength(1);
    expect(next[0].epoch!).toBeGreaterThan(firstEpoch);
    await eventually('the others to follow', () => rest.every((e) => e.controllerId === next[0].brokerId));
    await sleep(300);
    expect(rest.filter((e) => e.isController)).toHaveLength(1);
    expect(changes.at(-1)?.controllerId).toBe(next[0].brokerId);
  });

  it('moves the role off a controller process that stops (SIGSTOP) within the TTL', async () => {
    const prefix = uniquePrefix('sigstop');
    const member = await ClusterMember.start({ endpoints: etcd.endpoints, prefix, brokerId: 10, campaign: true });
    members.push(member);
    await eventually('the member to report itself controller', () => member.controller?.isController);
    expect(member.controller?.controllerId).toBe(10);
    // It never reported another state on the way.
    expect(member.lines.map((l) => l.state)).toEqual(member.lines.map(() => ({ controllerId: 10, epoch: member.controller?.epoch, isController: true })));
    const standby = await candidate(prefix, 11);
    expect(standby.isController).toBe(false);
    expect(standby.controllerId).toBe(10);

    member.signal('SIGSTOP');
    // The stopped process cannot step aside: only its lease expiring on etcd moves the role.
    await eventually('the standby to take over', () => standby.isController, 20_000, 20);
    expect(standby.controllerId).toBe(11);

    // Resumed, the old controller learns it lost the role; it never claims it again.
    member.signal('SIGCONT');
    await eventually('the old controller to step down', () => member.controller?.isController === false && member.controller.controllerId === 11);
    expect(standby.isController).toBe(true);
  });

  it('stops being controller when its lease cannot be renewed, and one is elected once etcd is back', async () => {
    const prefix = uniquePrefix('etcd-down');
    const [a, b] = await Promise.all([candidate(prefix, 21), candidate(prefix, 22)]);
    const controller = a.isController ? a : b;
    const lostAt = new Promise<void>((resolve) =>
      controller.events.on('change', (s: ControllerState) => {
        if (!s.isController) resolve();
      }),
    );
    await etcd.kill('SIGSTOP');
    try {
      // Deposed locally, while etcd is still frozen: nothing from etcd told it so. The deadline itself
      // (TTL after the last answered keep-alive) is driven by a fake clock in lease-keeper.test.ts.
      await lostAt;
      expect([a, b].filter((e) => e.isController)).toHaveLength(0);
    } finally {
      await etcd.kill('SIGCONT');
    }
    await eventually('a controller after etcd returns', () => [a, b].some((e) => e.isController), 15_000);
    await sleep(500);
    expect([a, b].filter((e) => e.isController)).toHaveLength(1);
  });
});

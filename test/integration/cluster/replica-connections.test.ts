/**
 * Replication's connections (docs/architecture.md, "Cluster mode"): a follower's fetches of every partition
 * of one leader share a few connections and an idle partition parks until its leader marks it
 * (REPLICA_WAIT), so sockets per broker do not grow with the partitions it follows and an idle cluster
 * sends next to no fetches. With one long-polling connection per followed partition, 300 partitions at
 * RF 3 held about 200 outgoing and 200 incoming replication sockets per broker, and every idle partition
 * was fetched twice a second.
 */
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import { describe, expect, it } from 'vitest';
import type { Connection } from 'tributary-protocol/connection.js';
import { useCluster } from '../../helpers/cluster.js';
import { sleep } from '../../helpers/util.js';

const TOPIC = 'many';
const PARTITIONS = 300;

function sockets(pid: number): number {
  let n = 0;
  for (const fd of fs.readdirSync(`/proc/${pid}/fd`)) {
    try {
      if (fs.readlinkSync(`/proc/${pid}/fd/${fd}`).startsWith('socket:')) n++;
    } catch {
      // closed meanwhile
    }
  }
  return n;
}

/** For a failure message: the process's TCP connections counted by local port and the peer's process. */
function socketBreakdown(pid: number, names: Map<number, string>): string {
  try {
    const rows = execFileSync('ss', ['-tanpH'], { encoding: 'utf8' })
      .split('\n')
      .map((l) => l.trim().split(/\s+/))
      .filter((f) => f.length >= 6)
      .map((f) => ({ state: f[0]!, local: f[3]!, remote: f[4]!, pid: Number(/pid=(\d+),/.exec(f[5]!)?.[1] ?? -1) }));
    const owner = new Map(rows.map((r) => [r.local, r.pid]));
    const counts = new Map<string, number>();
    for (const r of rows.filter((x) => x.pid === pid)) {
      const peer = owner.get(r.remote);
      const k = `${r.state} :${r.local.split(':').pop()} <-> ${peer === undefined ? r.remote : (names.get(peer) ?? `pid ${peer}`)}`;
      counts.set(k, (counts.get(k) ?? 0) + 1);
    }
    return [...counts].sort((a, b) => b[1] - a[1]).map(([k, n]) => `${n} x ${k}`).join('; ');
  } catch {
    return '(ss not available)';
  }
}

/** REPLICA_FETCH requests a broker has answered (its request histogram's count). */
async function fetchesAnswered(b: { health: (p: '/metrics') => Promise<{ body: string }> }): Promise<number> {
  const m = /tributary_request_duration_seconds_count\{[^}]*command="REPLICA_FETCH"[^}]*\} (\d+)/.exec((await b.health('/metrics')).body);
  return m ? Number(m[1]) : 0;
}

describe('replication connections (cluster)', () => {
  const cluster = useCluster(3);

  it(`${PARTITIONS} partitions at RF 3: a few replication sockets per broker, every record replicated, idle partitions not fetched`, async () => {
    const c = cluster();
    const admin = await c.connect(0);
    try {
      await admin.command('CREATE', { topic: TOPIC, partitions: PARTITIONS, replication_factor: 3 });
    } finally {
      await admin.close();
    }
    const inSync = () =>
      c.waitFor(
        'every partition with a full ISR',
        async () => {
          const s = await c.status();
          const mine = s.partitions.filter((p) => p.topic === TOPIC);
          return mine.length === PARTITIONS && mine.every((p) => p.leader >= 0 && p.isr.length === 3) && s;
        },
        60_000,
      );
    await inSync();

    // One acks=all record to every partition, at its leader: each needs both followers to fetch it.
    const leaders = await c.metadataLeaders(TOPIC);
    const conns = new Map<string, Connection>();
    try {
      for (const addr of new Set(leaders)) conns.set(addr, await c.broker(c.addresses.indexOf(addr)).connect());
      const replies = await Promise.all(
        Array.from({ length: PARTITIONS }, (_, p) => conns.get(leaders[p]!)!.command('PUBLISH', { topic: TOPIC, partition: p, acks: 'all', message: `m${p}` })),
      );
      expect(replies.filter((r) => JSON.parse(r).status !== 'OK')).toEqual([]);
    } finally {
      for (const conn of conns.values()) await conn.close().catch(() => {});
    }
    // Every follower holds it: the HWM (the lowest log end of the ISR) passed it everywhere, ISR still full.
    const s = await inSync();
    expect(s.partitions.filter((p) => p.topic === TOPIC).length).toBe(PARTITIONS);

    for (const b of c.brokers) {
      const n = sockets(b.proc!.pid!);
      // Listener, health, etcd, liveness probes, 2 x (2 fetch + 1 wait) out, the same in, this test's: about 30.
      const names = new Map<number, string>([[process.pid, 'this test'], ...c.brokers.map((x, i) => [x.proc!.pid!, `broker ${i}`] as [number, string])]);
      expect(n, `broker ${c.brokers.indexOf(b)} holds ${n} sockets: ${socketBreakdown(b.proc!.pid!, names)}`).toBeLessThan(80);
    }

    // Idle: the parked partitions are not fetched again (before: 2 fetches a second per partition and follower).
    // First the tail of the burst settles (the HWM each follower is told after the record, on a loaded
    // machine a while later): until a half second passes with few fetches.
    const total = async () => (await Promise.all(c.brokers.map((b) => fetchesAnswered(b)))).reduce((a, n) => a + n, 0);
    let last = await total();
    await c.waitFor('replication to settle', async () => {
      await sleep(500);
      const now = await total();
      const quiet = now - last < 25;
      last = now;
      return quiet;
    }, 60_000);
    const before = await Promise.all(c.brokers.map((b) => fetchesAnswered(b)));
    await sleep(2000);
    const after = await Promise.all(c.brokers.map((b) => fetchesAnswered(b)));
    const idleFetches = after.reduce((a, n, i) => a + n - before[i]!, 0);
    expect(idleFetches, `${idleFetches} fetches in 2 s of an idle cluster`).toBeLessThan(100);
  }, 180_000);
});

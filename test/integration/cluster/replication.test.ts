/**
 * A 3-broker cluster on a real etcd: replicated topics, routing (METADATA from any broker, NOT_LEADER
 * LEADER_IS from the others), acks=all, and failover when the leader of a partition is killed with
 * kill -9 while a producer and a reader run: no acknowledged record lost, no offset with two records.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Connection } from 'tributary-protocol/connection.js';
import { parseLine } from 'tributary-protocol/command.js';
import { TributaryError } from 'tributary-protocol/errors.js';
import { TestCluster } from '../../helpers/cluster.js';
import { sleep } from '../../helpers/util.js';

describe('cluster replication and failover', () => {
  let cluster: TestCluster;

  beforeAll(async () => {
    cluster = await TestCluster.start(3, ['--min-insync-replicas', '2']);
  }, 90_000);

  afterAll(async () => {
    await cluster?.dispose();
  });

  async function connectTo(id: number): Promise<Connection> {
    return cluster.connect(id);
  }

  /** A connection to the partition's leader once that broker has taken the role (a read is accepted). */
  async function leaderConn(topic: string, partition: number): Promise<{ id: number; conn: Connection }> {
    return cluster.waitFor(`a leader for ${topic}[${partition}]`, async () => {
      const l = await cluster.leaderOf(topic, partition);
      if (l.id < 0) return false;
      const conn = await connectTo(l.id);
      try {
        await conn.consume({ topic, partition, offset: 0, batch: 1 });
        return { id: l.id, conn };
      } catch (err) {
        await conn.close().catch(() => {});
        throw err;
      }
    });
  }

  it('CREATE spreads replicas and leaders; METADATA is the same from every broker; non-leaders redirect', async () => {
    const c = await cluster.connect(0);
    const r = parseLine(await c.command('CREATE', { topic: 'rep', partitions: 3, replication_factor: 3 })).params;
    expect(r.get('replication_factor')).toBe('3');
    const s = await cluster.waitFor('partition states of rep', async () => {
      const st = await cluster.status();
      const ps = st.partitions.filter((p) => p.topic === 'rep');
      return ps.length === 3 && ps.every((p) => p.isr.length === 3) ? ps : false;
    });
    expect(new Set(s.map((p) => p.leader)).size).toBe(3); // one leader per broker
    // Each broker learns of the topic from its etcd watch: ask each until it knows it.
    const views = await Promise.all(
      [0, 1, 2].map((id) =>
        cluster.waitFor(`broker ${id} to know rep`, async () => parseLine(await (await connectTo(id)).command('METADATA', { topic: 'rep' })).params.get('leaders')),
      ),
    );
    expect(views[1]).toBe(views[0]);
    expect(views[2]).toBe(views[0]);
    const leaders = views[0]!.split(',');
    const p0 = s.find((p) => p.partition === 0)!;
    const other = [0, 1, 2].find((id) => id !== p0.leader)!;
    const err = await (await connectTo(other)).command('PUBLISH', { topic: 'rep', partition: 0, message: 'x' }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(TributaryError);
    expect((err as TributaryError).code).toBe('NOT_LEADER');
    expect((err as TributaryError).extra.join(' ')).toBe(`LEADER_IS ${leaders[0]}`);
    await expect((await connectTo(other)).consume({ topic: 'rep', partition: 0, offset: 0 })).rejects.toMatchObject({ code: 'NOT_LEADER' });
  });

  it('ADD_PARTITIONS on any broker: the new partitions get replicas and leaders, and every broker opens them', async () => {
    const c = await cluster.connect(1);
    await c.command('CREATE', { topic: 'grow', partitions: 1, replication_factor: 3 });
    expect(await c.command('ADD_PARTITIONS', { topic: 'grow', partitions: 3 })).toBe('OK topic=grow partitions=3');
    const s = await cluster.waitFor('states of the added partitions', async () => {
      const ps = (await cluster.status()).partitions.filter((p) => p.topic === 'grow');
      return ps.length === 3 && ps.every((p) => p.leader >= 0 && p.isr.length === 3) ? ps : false;
    });
    expect(s.map((p) => p.replicas.length)).toEqual([3, 3, 3]);
    // Each broker opens the added partitions when the definition's watch event reaches it.
    for (const id of [0, 1, 2]) {
      const seen = await cluster.waitFor(`broker ${id} to open the added partitions`, async () => {
        const n = parseLine(await (await connectTo(id)).command('METADATA', { topic: 'grow' })).params.get('partitions');
        return n === '3' ? n : false;
      });
      expect(seen).toBe('3');
    }
    const { conn } = await leaderConn('grow', 2);
    const r = await conn.json<{ partition: number; offset: number }>('PUBLISH', { topic: 'grow', partition: 2, acks: 'all', message: 'added' });
    expect(r).toMatchObject({ partition: 2, offset: 0 });
  });

  it('acks=all answers once every in-sync replica has the record; followers hold the same log', async () => {
    const { conn } = await leaderConn('rep', 1);
    const acks = [];
    for (let i = 0; i < 50; i++) acks.push(conn.json<{ offset: number }>('PUBLISH', { topic: 'rep', partition: 1, acks: 'all', message: `v${i}` }));
    const offsets = (await Promise.all(acks)).map((a) => a.offset);
    expect(offsets).toEqual([...offsets].sort((a, b) => a - b));
    // Every replica's log end reaches the leader's.
    await cluster.waitFor('followers caught up', async () => {
      const ends = await Promise.all(
        [0, 1, 2].map(async (id) => {
          const csv = parseLine(await (await connectTo(id)).command('LIST_OFFSETS', { topic: 'rep', partition: 1 })).params.get('offsets')!;
          return Number(/leo=(\d+)/.exec(csv)![1]);
        }),
      );
      return ends.every((e) => e === 50) ? ends : false;
    });
    const batch = await conn.consume({ topic: 'rep', partition: 1, offset: 0, batch: 100 });
    expect(batch.records.map((r) => r.value.toString())).toEqual(Array.from({ length: 50 }, (_, i) => `v${i}`));
  });

  it('kill -9 of the partition leader, three times over, while producing acks=all: no acknowledged record lost, none rewritten', async () => {
    const topic = 'rep';
    const partition = 2;
    const acked = new Map<number, string>();
    let stop = false;
    let n = 0;
    let errors = 0;
    // Pipelined, 20 in flight: a killed leader always holds records it appended but never replicated.
    const producing = (async () => {
      let conn: Connection | null = null;
      while (!stop) {
        try {
          conn ??= (await leaderConn(topic, partition)).conn;
          const c = conn;
          const sends = Array.from({ length: 20 }, () => {
            const msg = `k${n++}`;
            return c.json<{ offset: number }>('PUBLISH', { topic, partition, acks: 'all', message: msg }).then((r) => {
              // An offset acknowledged twice with different records would be a split brain.
              expect(acked.has(r.offset) ? acked.get(r.offset) : msg).toBe(msg);
              acked.set(r.offset, msg);
            });
          });
          const results = await Promise.allSettled(sends);
          if (results.some((x) => x.status === 'rejected')) throw new Error('a publish failed');
        } catch {
          errors++;
          await conn?.close().catch(() => {});
          conn = null;
          await sleep(20);
        }
      }
      await conn?.close().catch(() => {});
    })();
    const failovers: number[] = [];
    // Each round kills the current leader; the one killed before rejoins as a follower and must drop
    // whatever unreplicated tail it had (a later round may elect it).
    for (let round = 0; round < 3; round++) {
      await sleep(500);
      const before = acked.size;
      const victim = (await cluster.leaderOf(topic, partition)).id;
      await cluster.broker(victim).kill('SIGKILL');
      const killedAt = Date.now();
      await cluster.waitFor('a new leader', async () => {
        const l = await cluster.leaderOf(topic, partition);
        return l.id >= 0 && l.id !== victim ? l : false;
      });
      await cluster.waitFor('a produce acknowledged after the failover', async () => acked.size > before + 5);
      failovers.push(Date.now() - killedAt);
      await cluster.broker(victim).relaunch();
      await cluster.waitFor('the killed broker back in the ISR', async () => (await cluster.leaderOf(topic, partition)).isr.length === 3);
    }
    stop = true;
    await producing;

    const { conn } = await leaderConn(topic, partition);
    const log = new Map<number, string>();
    let offset = 0;
    for (;;) {
      const b = await conn.consume({ topic, partition, offset, batch: 1000 });
      if (b.records.length === 0) break;
      for (const r of b.records) log.set(r.offset, r.value.toString());
      offset = b.records[b.records.length - 1]!.offset + 1;
    }
    const lost = [...acked].filter(([o, v]) => log.get(o) !== v);
    expect(lost).toEqual([]);
    const values = [...log.values()].filter((v) => v.startsWith('k'));
    expect(new Set(values).size).toBe(values.length);
    console.log(`leader failover x3: ${acked.size} acknowledged, ${errors} retried errors, produce resumed within ${failovers.join(', ')} ms`);
  }, 90_000);

  it('after a leader is killed, every NOT_LEADER says why, and names the leader whenever the broker knows one', async () => {
    const c = await cluster.connect();
    await c.command('CREATE', { topic: 'redirect', partitions: 1, replication_factor: 3 });
    const first = await leaderConn('redirect', 0);
    const survivors = [0, 1, 2].filter((id) => id !== first.id);
    const conns = await Promise.all(survivors.map((id) => connectTo(id)));
    await cluster.broker(first.id).kill('SIGKILL');
    const killedAt = Date.now();
    try {
      // Both survivors, asked in turn, until one takes the write: what each refusal said.
      const seen: Array<{ at: number; reason: string; leaderIs: string | undefined }> = [];
      let acceptedBy = -1;
      while (acceptedBy < 0 && Date.now() - killedAt < 30_000) {
        for (let i = 0; i < conns.length && acceptedBy < 0; i++) {
          try {
            await conns[i]!.json('PUBLISH', { topic: 'redirect', partition: 0, acks: 1, message: 'after' });
            acceptedBy = survivors[i]!;
          } catch (err) {
            const e = err as TributaryError;
            expect(e.code).toBe('NOT_LEADER');
            const leaderIs = /LEADER_IS (\S+)/.exec(e.extra.join(' '))?.[1];
            seen.push({ at: Date.now() - killedAt, reason: String(e.fields.reason), leaderIs });
          }
        }
        await sleep(5);
      }
      expect(acceptedBy).toBeGreaterThanOrEqual(0);
      const addressOf = (id: number) => cluster.broker(id).address;
      for (const r of seen) {
        expect(['follower', 'taking_over', 'no_live_leader'], JSON.stringify(r)).toContain(r.reason);
        // a refusal without LEADER_IS is only one with no leader to name
        if (r.leaderIs === undefined) expect(r.reason, JSON.stringify(r)).toBe('no_live_leader');
        else expect([addressOf(first.id), ...survivors.map(addressOf)], JSON.stringify(r)).toContain(r.leaderIs);
      }
      // the other survivor now points at the new leader
      const other = conns[survivors.indexOf(acceptedBy) === 0 ? 1 : 0]!;
      const redirect = await cluster.waitFor('the other survivor naming the new leader', async () => {
        const e = (await other.json('PUBLISH', { topic: 'redirect', partition: 0, acks: 1, message: 'x' }).catch((err: unknown) => err)) as TributaryError;
        return e.extra?.join(' ') === `LEADER_IS ${addressOf(acceptedBy)}` ? e : false;
      });
      expect(redirect.fields.reason).toBe('follower');
      const counts = Object.fromEntries(['follower', 'taking_over', 'no_live_leader'].map((k) => [k, seen.filter((r) => r.reason === k).length]));
      const bare = seen.filter((r) => r.leaderIs === undefined);
      console.log(
        `NOT_LEADER after a leader kill: ${seen.length} refusals before broker ${acceptedBy} took the write at +${Date.now() - killedAt} ms, by reason ${JSON.stringify(counts)}; ` +
          `without LEADER_IS ${bare.length}${bare.length ? ` (+${bare[0]!.at}..+${bare.at(-1)!.at} ms)` : ''}`,
      );
    } finally {
      await cluster.broker(first.id).relaunch();
      await cluster.waitFor('the killed broker back in the ISR', async () => (await cluster.leaderOf('redirect', 0)).isr.length === 3, 30_000);
    }
  }, 90_000);

  it('SIGSTOP a leader past its lease: it is replaced, its late writes are refused, and it rejoins as a follower', async () => {
    const c = await cluster.connect();
    await c.command('CREATE', { topic: 'pause', partitions: 1, replication_factor: 3 });
    const first = await leaderConn('pause', 0);
    for (let i = 0; i < 10; i++) await first.conn.json('PUBLISH', { topic: 'pause', partition: 0, acks: 'all', message: `before${i}` });
    await cluster.broker(first.id).kill('SIGSTOP');
    const next = await cluster.waitFor(
      'a new leader for pause[0]',
      async () => {
        const l = await cluster.leaderOf('pause', 0);
        return l.id >= 0 && l.id !== first.id ? l : false;
      },
      20_000,
    );
    const nc = await connectTo(next.id);
    for (let i = 0; i < 5; i++) await nc.json('PUBLISH', { topic: 'pause', partition: 0, acks: 'all', message: `after${i}` });
    // The paused broker wakes: a write it receives now is refused (its lease is gone), never acknowledged.
    const late = first.conn.json('PUBLISH', { topic: 'pause', partition: 0, acks: 1, message: 'late' });
    await cluster.broker(first.id).kill('SIGCONT');
    await expect(late).rejects.toMatchObject({ code: 'NOT_LEADER' });
    // It rejoins as a follower of the new leader and holds the same log.
    await cluster.waitFor('the paused broker back in the ISR', async () => (await cluster.leaderOf('pause', 0)).isr.includes(first.id), 30_000);
    const b = await nc.consume({ topic: 'pause', partition: 0, offset: 0, batch: 100 });
    const values = b.records.map((r) => r.value.toString());
    expect(values).toEqual([...Array.from({ length: 10 }, (_, i) => `before${i}`), ...Array.from({ length: 5 }, (_, i) => `after${i}`)]);
    const csv = parseLine(await (await connectTo(first.id)).command('LIST_OFFSETS', { topic: 'pause', partition: 0 })).params.get('offsets')!;
    expect(Number(/leo=(\d+)/.exec(csv)![1])).toBe(15);
  }, 60_000);
  it('ADD_PARTITIONS beyond the live brokers is refused before the count moves; a retry succeeds once they are back', async () => {
    const c = await cluster.connect(0);
    await c.command('CREATE', { topic: 'grow-down', partitions: 2, replication_factor: 3 });
    await cluster.broker(2).kill();
    await cluster.waitFor('broker 2 unregistered', async () => (await cluster.status()).brokers.every((b) => b.id !== 2));
    // Before: refused after the count was stored, so the topic had a leaderless partition and the retry was refused as not above 3.
    await expect(c.command('ADD_PARTITIONS', { topic: 'grow-down', partitions: 3 })).rejects.toMatchObject({ code: 'NOT_ENOUGH_REPLICAS' });
    expect(parseLine(await c.command('METADATA', { topic: 'grow-down' })).params.get('partitions')).toBe('2');
    await cluster.broker(2).relaunch();
    await cluster.waitFor('broker 2 registered', async () => (await cluster.status()).brokers.some((b) => b.id === 2));
    expect(await c.command('ADD_PARTITIONS', { topic: 'grow-down', partitions: 3 })).toBe('OK topic=grow-down partitions=3');
  }, 60_000);
});

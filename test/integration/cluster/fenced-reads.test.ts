/**
 * Fenced reads at a partition leader that does not coordinate the group (docs/architecture.md, "Fenced
 * reads"): the leader checks MEMBER_LEASE copies of the member's standing. A running STREAM ends
 * `removed` once its member gives the partition up at a sync (a loss the lease shows within a second),
 * and with the coordinator frozen the leader fails closed: once its copy lapsed it answers a retriable
 * COORDINATOR_NOT_AVAILABLE rather than serve, and serves again once the group's coordinator moved.
 */
import { describe, expect, it } from 'vitest';
import type { Connection } from 'tributary-protocol/connection.js';
import { TributaryError } from 'tributary-protocol/errors.js';
import { useCluster } from '../../helpers/cluster.js';
import { expectError, sleep } from '../../helpers/util.js';
import { kv, list } from '../groups/helpers.js';

const TOPIC = 'cl-fenced';

/** A member driven by hand over a connection to the coordinator. */
class Member {
  id = '';
  generation = 0;
  owned: number[] = [];
  constructor(
    readonly conn: Connection,
    readonly group: string,
    readonly clientId: string,
  ) {}
  private apply(reply: string): Map<string, string> {
    const r = kv(reply);
    this.id = r.get('member')!;
    this.generation = Number(r.get('generation'));
    return r;
  }
  async join(fresh = true): Promise<void> {
    this.apply(
      await this.conn.command('JOIN_GROUP', {
        topic: TOPIC,
        group: this.group,
        member: fresh ? this.clientId : this.id,
        generation: fresh ? undefined : this.generation,
      }),
    );
  }
  async sync(): Promise<void> {
    this.owned = list(
      this.apply(await this.conn.command('SYNC_GROUP', { topic: TOPIC, group: this.group, member: this.id, generation: this.generation })).get('assignments'),
    );
  }
  /** Heartbeat; on REBALANCE_IN_PROGRESS rejoin and sync (tolerating one more round). */
  async poll(): Promise<void> {
    try {
      await this.conn.command('HEARTBEAT', { topic: TOPIC, group: this.group, member: this.id, generation: this.generation, wait_ms: 20 });
    } catch (err) {
      if (!(err instanceof TributaryError) || err.code !== 'REBALANCE_IN_PROGRESS') throw err;
      await this.join(false);
      await this.sync().catch((e: unknown) => {
        if (!(e instanceof TributaryError) || e.code !== 'REBALANCE_IN_PROGRESS') throw e;
      });
    }
  }
}

describe('fenced reads at a leader that does not coordinate the group (cluster)', () => {
  const getCluster = useCluster(3);

  /** A group coordinated by a broker that leads neither partition, as the cluster answers now. */
  async function setup(prefix: string) {
    const cluster = getCluster();
    const admin = await cluster.connect(0);
    await admin.command('CREATE', { topic: TOPIC, partitions: 2, replication_factor: 3 });
    const leaders = await cluster.waitFor('both partitions led with a full ISR', async () => {
      const ls = await Promise.all([0, 1].map((p) => cluster.leaderOf(TOPIC, p)));
      return ls.every((l) => l.id >= 0 && l.isr.length === 3) ? ls.map((l) => l.id) : false;
    });
    for (const p of [0, 1]) await (await cluster.connect(leaders[p])).command('PUBLISH', { topic: TOPIC, partition: p, acks: 'all', message: `r${p}` });
    let group = '';
    let coordId = -1;
    for (let i = 0; coordId < 0 || leaders.includes(coordId); i++) {
      group = `${prefix}-${i}`;
      coordId = Number(kv(await admin.command('FIND_COORDINATOR', { group })).get('coordinator_id'));
    }
    await admin.close();
    return { cluster, leaders: leaders as number[], leaderId: leaders[0]!, group, coordId };
  }

  it('ends a running STREAM at the leader once its member syncs the partition away, and keeps the one it keeps', async () => {
    const { cluster, leaders, group, coordId } = await setup('g-sync');
    const a = new Member(await cluster.connect(coordId), group, 'a');
    const b = new Member(await cluster.connect(coordId), group, 'b');
    const conns = await Promise.all([0, 1].map((p) => cluster.connect(leaders[p])));
    const rcs = await Promise.all([0, 1].map((p) => cluster.connect(leaders[p])));
    try {
      await a.join();
      await a.sync();
      expect(a.owned).toEqual([0, 1]);
      // wrong generation and a stranger are refused at the leader, as at the coordinator
      const read = (partition: number, member: string, generation: number) =>
        rcs[partition]!.consume({ topic: TOPIC, partition, offset: 0, group, member, generation, batch: 10, max_bytes: 1 << 16 });
      expect((await read(0, a.id, a.generation)).records.length).toBeGreaterThan(0);
      await expectError(read(0, a.id, a.generation + 1), 'GEN_MISMATCH');
      await expectError(read(0, 'stranger', a.generation), 'member_not_found');

      const streams = conns.map((c, p) =>
        c.stream({ topic: TOPIC, partition: p, offset: 0, group, member: a.id, generation: a.generation, keepalive_ms: 100 }),
      );
      for (const st of streams) expect((await st.next()).done).toBe(false);
      await b.join();
      // both rejoin until a has given one partition up and b took it
      await cluster.waitFor('a and b to share the partitions', async () => {
        await a.poll();
        await b.poll();
        if (b.owned.length === 0) await b.sync().catch(() => {});
        return a.owned.length === 1 && b.owned.length === 1;
      });
      const gone = b.owned[0]!;
      const kept = a.owned[0]!;
      // at most a lease later, the moved partition's stream ends
      const end = await streams[gone]!.next();
      expect(end.done).toBe(true);
      expect(end.value).toMatchObject({ type: 'CLOSE', reason: 'removed', code: 'NOT_OWNER' });
      await expectError(read(gone, a.id, a.generation), 'NOT_OWNER');
      expect((await read(gone, b.id, b.generation)).records.length).toBeGreaterThan(0);
      // the kept one goes on across a's rejoin
      const c = await cluster.connect(leaders[kept]);
      await c.command('PUBLISH', { topic: TOPIC, partition: kept, acks: 'all', message: 'more' });
      await c.close();
      const next = await streams[kept]!.next();
      expect(next.done).toBe(false);
    } finally {
      for (const c of [a.conn, b.conn, ...rcs, ...conns]) await c.close().catch(() => {});
    }
  }, 90_000);

  it('fails closed while the coordinator is frozen: retriable refusals, never a guess, then served by the new coordinator', async () => {
    const { cluster, leaderId, group, coordId } = await setup('g-frozen');
    const a = new Member(await cluster.connect(coordId), group, 'a');
    await a.join();
    await a.sync();
    const me = { member: a.id, generation: a.generation };
    await a.conn.close();
    // One connection throughout: the committed offset it asked the coordinator for once is kept for the
    // connection's life, so a refusal below can only be the fence's.
    const c0 = await cluster.connect(leaderId);
    const read = () => c0.consume({ topic: TOPIC, partition: 0, offset: 0, group, ...me, batch: 10, max_bytes: 1 << 16 });
    expect((await read()).records.length).toBeGreaterThan(0);

    await cluster.broker(coordId).kill('SIGSTOP');
    try {
      const outcomes: string[] = [];
      await cluster.waitFor(
        'a read served again once the coordinator moved',
        async () => {
          try {
            await read();
            outcomes.push('served');
            // served after a refusal: the group's new coordinator answered
            return outcomes.some((o) => o !== 'served');
          } catch (err) {
            if (!(err instanceof TributaryError)) throw err;
            expect(err.retriable, `${err.code}: ${err.message}`).toBe(true);
            outcomes.push(err.code);
            await sleep(100);
            return false;
          }
        },
        60_000,
      );
      expect(outcomes).toContain('COORDINATOR_NOT_AVAILABLE');
      console.log(`reads at the leader while the coordinator was frozen: ${outcomes.join(', ')}`);
    } finally {
      await cluster.broker(coordId).kill('SIGCONT');
      await c0.close();
    }
  }, 120_000);
});

/**
 * Transactions in a 3-broker cluster: the coordinator (leader of the id's __transaction_state partition)
 * reaches data partitions and group coordinators on other brokers; a commit is visible on every
 * partition and moves the group's offsets; killing the coordinator mid-transaction hands the id to a new
 * coordinator that knows the transaction and aborts it as soon as it has loaded.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Connection } from 'tributary-protocol/connection.js';
import { Producer } from 'tributary-client/producer.js';
import { parseLine } from 'tributary-protocol/command.js';
import { TestCluster } from '../../helpers/cluster.js';
import { GroupMember } from '../groups/helpers.js';
import { RawTxnProducer, readAll } from '../transactions/helpers.js';

describe('transactions in a cluster', () => {
  let cluster: TestCluster;

  beforeAll(async () => {
    cluster = await TestCluster.start(3, ['--min-insync-replicas', '2']);
    const c = await cluster.connect();
    await c.command('CREATE', { topic: 'ctx-out', partitions: 3, replication_factor: 3 });
    await c.command('CREATE', { topic: 'ctx-in', partitions: 3, replication_factor: 3 });
    await cluster.waitFor('leaders for ctx topics', async () => {
      const s = await cluster.status();
      const ps = s.partitions.filter((p) => p.topic.startsWith('ctx-'));
      return ps.length === 6 && ps.every((p) => p.leader >= 0 && p.isr.length === 3);
    });
  }, 90_000);

  afterAll(async () => {
    await cluster?.dispose();
  });

  async function coordinatorOf(key: Record<string, string>): Promise<{ id: number; conn: Connection }> {
    const c = await cluster.connect();
    const r = parseLine(await c.command('FIND_COORDINATOR', key)).params;
    return { id: Number(r.get('coordinator_id')), conn: await cluster.connect(Number(r.get('coordinator_id'))) };
  }

  async function leaderConn(topic: string, partition: number): Promise<Connection> {
    const l = await cluster.leaderOf(topic, partition);
    return cluster.connect(l.id);
  }

  it('a transaction over partitions led by three brokers commits atomically, with offsets of a remote group', async () => {
    const input = await leaderConn('ctx-in', 0);
    for (let i = 0; i < 5; i++) await input.command('PUBLISH', { topic: 'ctx-in', partition: 0, acks: 'all', message: `in${i}` });
    const g = await coordinatorOf({ group: 'ctx-g' });
    const m = new GroupMember(g.conn, 'ctx-in', 'ctx-g', 'ctx-m');
    await m.join();
    await m.sync();
    const t = await coordinatorOf({ transactional_id: 'ctx-1' });
    const p = new RawTxnProducer(t.conn, 'ctx-1');
    await p.init();
    await p.begin();
    for (let i = 0; i < 6; i++) await p.publish('ctx-out', `c${i}`, { partition: i % 3 });
    expect(await p.sendOffsets('ctx-in', 'ctx-g', m.id, m.generation, 'P0:5')).toBe(1);
    for (let part = 0; part < 3; part++) expect(await readAll(await leaderConn('ctx-out', part), 'ctx-out', part, 'read_committed')).toEqual([]);
    expect(await p.end('commit')).toBe('committed');
    const seen = [];
    for (let part = 0; part < 3; part++) seen.push(...(await readAll(await leaderConn('ctx-out', part), 'ctx-out', part, 'read_committed')).map((r) => r.value));
    expect(seen.sort()).toEqual(['c0', 'c1', 'c2', 'c3', 'c4', 'c5']);
    const fetched = parseLine(await g.conn.command('FETCH_OFFSET', { topic: 'ctx-in', group: 'ctx-g', partition: 0 })).params;
    expect(fetched.get('offset')).toBe('5');
    await m.leave();
  });

  it('the SDK producer finds the coordinator and commits through it, binary records and headers included', async () => {
    const producer = new Producer({ brokers: cluster.addresses, transactionalId: 'ctx-sdk' });
    // Partitions led by three brokers: two of the records reach their leader as a coordinator's TXN_APPEND frame.
    const binary = (i: number) => Buffer.from([0xff, 0xfe, i]);
    try {
      const txn = await producer.transaction();
      await txn.send({ topic: 'ctx-out', messages: [0, 1, 2].map((i) => ({ value: `sdk${i}`, partition: i })) });
      await txn.send({ topic: 'ctx-out', messages: [0, 1, 2].map((i) => ({ key: binary(i), value: binary(i), partition: i, headers: { n: String(i), raw: binary(i) } })) });
      await txn.commit();
    } finally {
      await producer.close();
    }
    const seen = [];
    for (let part = 0; part < 3; part++) seen.push(...(await readAll(await leaderConn('ctx-out', part), 'ctx-out', part, 'read_committed')).map((r) => r.value));
    expect(seen.filter((v) => v.startsWith('sdk')).sort()).toEqual(['sdk0', 'sdk1', 'sdk2']);
    for (let part = 0; part < 3; part++) {
      const conn = await leaderConn('ctx-out', part);
      const records = (await conn.consume({ topic: 'ctx-out', partition: part, offset: 0, isolation: 'read_committed', batch: 1000 })).records;
      const r = records.find((x) => x.value.equals(binary(part)));
      expect(r, `partition ${part}`).toBeDefined();
      expect(r!.key!.equals(binary(part))).toBe(true);
      expect(r!.headers.map((h) => [h.key, h.value.toString('hex')])).toEqual([
        ['n', Buffer.from(String(part)).toString('hex')],
        ['raw', binary(part).toString('hex')],
      ]);
    }
  });

  it('TXN_APPEND (broker to broker) refuses an internal topic: a coordinator epoch that passes the gate writes nothing into __consumer_offsets', async () => {
    const leader = await leaderConn('__consumer_offsets', 0);
    const before = (await readAll(leader, '__consumer_offsets', 0, 'read_uncommitted')).length;
    const line = 'TXN_APPEND topic=__consumer_offsets partition=0 producerId=p-forged epoch=0 coordinator_partition=0 coordinator_epoch=2147483647 key=forged message={}';
    const reply = await leader.request(line).then((r) => (r.kind === 'text' ? r.text : '(batch)'));
    expect(reply).toMatch(/^ERROR: invalid_topic_name .*internal topics are written by the broker only/);
    expect((await readAll(leader, '__consumer_offsets', 0, 'read_uncommitted')).length).toBe(before);
  });

  it('kill -9 of the transaction coordinator mid-transaction: the new coordinator aborts it once loaded', async () => {
    const t = await coordinatorOf({ transactional_id: 'ctx-kill' });
    const p = new RawTxnProducer(t.conn, 'ctx-kill');
    await p.init();
    await p.begin();
    for (let i = 0; i < 3; i++) await p.publish('ctx-out', `dead${i}`, { partition: i });
    await cluster.broker(t.id).kill('SIGKILL');
    const next = await cluster.waitFor('a new transaction coordinator', async () => {
      const c = await cluster.connect();
      const r = parseLine(await c.command('FIND_COORDINATOR', { transactional_id: 'ctx-kill' })).params;
      const id = Number(r.get('coordinator_id'));
      if (id === t.id) return false;
      const conn = await cluster.connect(id);
      // Loaded once it answers for the id.
      await conn.command('TXN_STATUS', { transactional_id: 'ctx-kill' });
      return { id, conn };
    });
    // The new coordinator aborts the transaction it inherited open, before its producer comes back: the
    // output partitions are stable again without any client action.
    await cluster.waitFor('the inherited transaction aborted', async () => {
      const status = parseLine(await next.conn.command('TXN_STATUS', { transactional_id: 'ctx-kill' })).params;
      return status.get('state') === 'aborted';
    });
    await cluster.waitFor('the output partitions stable', async () => {
      for (let part = 0; part < 3; part++) {
        const csv = parseLine(await (await leaderConn('ctx-out', part)).command('LIST_OFFSETS', { topic: 'ctx-out', partition: part })).params.get('offsets')!;
        const [, latest, leo] = /latest=(\d+):leo=(\d+)/.exec(csv)!;
        if (latest !== leo) return false;
      }
      return true;
    });
    const fresh = new RawTxnProducer(next.conn, 'ctx-kill');
    await fresh.init();
    expect(fresh.epoch).toBe(p.epoch + 1);
    expect(parseLine(await next.conn.command('TXN_STATUS', { transactional_id: 'ctx-kill' })).params.get('state')).toBe('aborted');
    await fresh.begin();
    await fresh.publish('ctx-out', 'alive', { partition: 0 });
    expect(await fresh.end('commit')).toBe('committed');
    const seen = [];
    for (let part = 0; part < 3; part++) seen.push(...(await readAll(await leaderConn('ctx-out', part), 'ctx-out', part, 'read_committed')).map((r) => r.value));
    expect(seen).toContain('alive');
    expect(seen.filter((v) => v.startsWith('dead'))).toEqual([]);
    // Every output partition is stable again (no open transaction holds its LSO).
    for (let part = 0; part < 3; part++) {
      const csv = parseLine(await (await leaderConn('ctx-out', part)).command('LIST_OFFSETS', { topic: 'ctx-out', partition: part })).params.get('offsets')!;
      const [, latest, leo] = /latest=(\d+):leo=(\d+)/.exec(csv)!;
      expect(latest).toBe(leo);
    }
    await cluster.broker(t.id).relaunch();
  }, 60_000);
});

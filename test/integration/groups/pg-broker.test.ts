import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { BrokerProcess } from '../../helpers/launcher.js';
import { type PgRelay, startPgRelay } from '../../helpers/pg-relay.js';
import { type PostgresServer, startPostgres } from '../../helpers/postgres.js';
import { GroupMember, fetchOffset, fill, startBroker } from './helpers.js';
import { eventually, expectError } from '../../helpers/util.js';
import { PgOffsetStore } from 'tributary-broker/coordinator/pg-offset-store.js';
import type { Connection } from 'tributary-protocol/connection.js';

/** The broker with `--offset-store postgres`: commits land in the team's own database and survive kill -9. */
describe('broker with the PostgreSQL offset store', () => {
  let pgServer: PostgresServer;
  let broker: BrokerProcess;
  let db: pg.Client;

  beforeAll(async () => {
    pgServer = await startPostgres();
    db = new pg.Client({ connectionString: pgServer.connectionString });
    await db.connect();
    broker = await startBroker(['--offset-store', 'postgres', '--offset-store-postgres-url', pgServer.connectionString]);
  }, 90_000);

  afterAll(async () => {
    await broker?.dispose();
    await db?.end().catch(() => {});
    await pgServer?.stop();
  });

  it('stores commits in the table, refuses regressions, and keeps them across kill -9', async () => {
    const admin = await broker.connect();
    await admin.command('CREATE', { topic: 'pgt', partitions: 2 });
    await fill(admin, 'pgt', 2, 20);
    const m = await GroupMember.connect(broker, 'pgt', 'pg-group', 'w');
    await m.join();
    await m.sync();
    expect(m.owned).toEqual([0, 1]);

    await m.conn.command('COMMIT_OFFSET', { topic: 'pgt', group: 'pg-group', partition: 0, offset: 7, member: m.id, generation: m.generation });
    await m.conn.command('BATCH_COMMIT', { topic: 'pgt', group: 'pg-group', member: m.id, generation: m.generation }, ['P0:9,P1:4']);
    await expectError(
      m.conn.command('COMMIT_OFFSET', { topic: 'pgt', group: 'pg-group', partition: 0, offset: 3, member: m.id, generation: m.generation }),
      'offset_regression',
    );

    const rows = await db.query('select partition, next_offset from tributary_offsets where group_id = $1 and topic = $2 order by partition', [
      'pg-group',
      'pgt',
    ]);
    expect(rows.rows.map((r) => [r.partition, Number(r.next_offset)])).toEqual([
      [0, 9],
      [1, 4],
    ]);

    await broker.kill('SIGKILL');
    await broker.relaunch();
    const after = await broker.connect();
    expect(await fetchOffset(after, 'pgt', 'pg-group', 0)).toEqual({ offset: 9, committed: true });
    expect(await fetchOffset(after, 'pgt', 'pg-group', 1)).toEqual({ offset: 4, committed: true });
    // The group snapshot lives in the log: the member resumes with its id and generation.
    const resumed = await after.command('HEARTBEAT', { topic: 'pgt', group: 'pg-group', member: m.id, generation: m.generation });
    expect(resumed).toContain(`member=${m.id}`);
  });
});

/**
 * PostgreSQL failures whose outcome the broker cannot see at once: a COMMIT whose answer is lost on the
 * way back (the write happened), and a table locked by another session (a statement that would wait
 * forever). Neither may make the coordinator's offsets and the table disagree, nor hold a commit unbounded.
 */
describe('the PostgreSQL offset store when answers are lost or never come', () => {
  let pgServer: PostgresServer;
  let broker: BrokerProcess;
  /** The broker reaches PostgreSQL through it, and a message of its can be cut off (the answer lost). */
  let relay: PgRelay;

  beforeAll(async () => {
    pgServer = await startPostgres();
    relay = await startPgRelay(pgServer.port);
    broker = await startBroker(['--offset-store', 'postgres', '--offset-store-postgres-url', relay.url]);
  }, 90_000);

  afterAll(async () => {
    await broker?.dispose();
    await relay?.close();
    await pgServer?.stop();
  });

  async function stored(group: string): Promise<number[]> {
    const db = new pg.Client({ connectionString: pgServer.connectionString });
    await db.connect();
    try {
      const r = await db.query('select next_offset from tributary_offsets where group_id = $1 order by partition', [group]);
      return r.rows.map((x) => Number(x.next_offset));
    } finally {
      await db.end();
    }
  }

  /** A one-partition topic of 50 records and the only member of `group`, with a commit of partition 0 by it. */
  async function onlyMember(topic: string, group: string, join: Record<string, number> = {}) {
    const admin = await broker.connect();
    await admin.command('CREATE', { topic, partitions: 1 });
    await fill(admin, topic, 1, 50);
    const m = await GroupMember.connect(broker, topic, group, 'w');
    await m.join(join);
    await m.sync();
    const commit = (offset: number) => m.conn.command('COMMIT_OFFSET', { topic, group, partition: 0, offset, member: m.id, generation: m.generation });
    return { admin, m, commit };
  }

  it('a commit whose COMMIT answer was lost is known to be written: acknowledged, and what FETCH_OFFSET says', async () => {
    const { admin, commit } = await onlyMember('lost', 'g-lost');
    await commit(10);
    // The COMMIT reaches the server late, once the broker saw its connection fail and asked what became of it.
    relay.hold('COMMIT\0', { sendAfter: 'txid_status' });
    // Before: storage_error, with the table at 20 and the coordinator at 10; a commit of 15 then got offset_regression.
    await commit(20);
    expect(await stored('g-lost')).toEqual([20]);
    expect(await fetchOffset(admin, 'lost', 'g-lost', 0)).toEqual({ offset: 20, committed: true });
    await expectError(commit(15), 'offset_regression');
  });

  it('a reset whose COMMIT answer was lost: the next commit of the old offset is written, not answered from memory, and survives kill -9', async () => {
    const { admin, m, commit } = await onlyMember('reset', 'g-reset');
    await commit(20);
    relay.hold('COMMIT\0', { sendAfter: 'txid_status' });
    await admin.command('RESET_OFFSETS', { group: 'g-reset', topic: 'reset', to: 'offset', offset: 0 }).catch(() => {});
    expect(await stored('g-reset')).toEqual([0]);
    // The reset's generation comes when the join window closes; a rejoin before that is answered with the
    // old one and its SYNC refused. The member hears of the new generation on its heartbeat.
    await expectError(m.heartbeat(10_000), 'REBALANCE_IN_PROGRESS');
    await m.rejoin();
    await m.sync();
    // Before: OK without a write (the coordinator still held 20), so the table stayed at 0.
    await commit(20);
    expect(await stored('g-reset')).toEqual([20]);
    await broker.kill('SIGKILL');
    await broker.relaunch();
    expect(await fetchOffset(await broker.connect(), 'reset', 'g-reset', 0)).toEqual({ offset: 20, committed: true });
  });

  /** FETCH_OFFSET once it answers (a write of unknown outcome is refused with storage_error until it is known). */
  function fetchWhenKnown(admin: Connection, topic: string, group: string) {
    return eventually(`FETCH_OFFSET of ${group}`, () => fetchOffset(admin, topic, group, 0).catch((e: unknown) => ((e as { code?: string }).code === 'storage_error' ? undefined : Promise.reject(e))));
  }

  it('a DELETE_GROUP whose DELETE answer was lost: FETCH_OFFSET answers what the table holds', async () => {
    const { admin, m, commit } = await onlyMember('del-lost', 'g-del-lost');
    await commit(10);
    await m.leave();
    relay.hold('DELETE FROM');
    await expectError(admin.command('DELETE_GROUP', { group: 'g-del-lost' }), 'storage_error');
    // The server reads the DELETE late, on a connection whose client is gone.
    await relay.release();
    // Before: the table had no row (the DELETE applied) while FETCH_OFFSET still answered 10.
    const answered = await fetchWhenKnown(admin, 'del-lost', 'g-del-lost');
    const rows = await stored('g-del-lost');
    expect(answered).toEqual(rows.length === 0 ? { offset: 0, committed: false } : { offset: rows[0], committed: true });
    // Tried again, the deletion lands, in the table and in what FETCH_OFFSET answers.
    await admin.command('DELETE_GROUP', { group: 'g-del-lost' }).catch(() => {});
    expect(await stored('g-del-lost')).toEqual([]);
    expect(await fetchOffset(admin, 'del-lost', 'g-del-lost', 0)).toEqual({ offset: 0, committed: false });
  });

  it('a DELETE_GROUP whose COMMIT answer was lost and whose outcome cannot be asked: FETCH_OFFSET refuses until it can, then answers what the table holds', async () => {
    const { admin, m, commit } = await onlyMember('del-unknown', 'g-del-unknown');
    await commit(10);
    await m.leave();
    relay.hold('COMMIT\0', { refuse: true });
    try {
      await expectError(admin.command('DELETE_GROUP', { group: 'g-del-unknown' }), 'storage_error', { outcome: 'unknown' });
      // Neither 10 nor "none" while the deletion may or may not have landed.
      await expectError(fetchOffset(admin, 'del-unknown', 'g-del-unknown', 0), 'storage_error');
    } finally {
      relay.refusing = false;
      await relay.release();
    }
    expect(await fetchWhenKnown(admin, 'del-unknown', 'g-del-unknown')).toEqual({ offset: 0, committed: false });
    expect(await stored('g-del-unknown')).toEqual([]);
    await broker.kill('SIGKILL');
    await broker.relaunch();
    expect(await fetchOffset(await broker.connect(), 'del-unknown', 'g-del-unknown', 0)).toEqual({ offset: 0, committed: false });
  });

  it("a broker start whose deletion of a deleted topic's offsets has an unknown outcome answers them only once known, as the table holds them", async () => {
    // Its own database: a second broker deletes the offsets of every topic it does not know.
    const db = new pg.Client({ connectionString: pgServer.connectionString });
    await db.connect();
    try {
      await db.query('CREATE DATABASE orphans');
    } finally {
      await db.end();
    }
    const direct = pgServer.connectionString.replace(/\/postgres$/, '/orphans');
    const seed = new PgOffsetStore({ connectionString: direct });
    await seed.open();
    // Offsets of topic `ghost`, which this broker does not have: deleted at its start.
    await seed.commit('g-ghost', 'ghost', [{ partition: 0, offset: 10 }]);
    const url = relay.url.replace(/\/postgres$/, '/orphans');
    relay.hold('COMMIT\0', { refuse: true });
    let second: BrokerProcess | undefined;
    try {
      second = await startBroker(['--offset-store', 'postgres', '--offset-store-postgres-url', url]);
      const b = second;
      await eventually('the failed deletion logged', () => b.stderr.includes('deleting the committed offsets of a deleted topic failed'));
      relay.refusing = false;
      await relay.release();
      const admin = await b.connect();
      await eventually('the broker ready', () => admin.command('CREATE', { topic: 'ghost', partitions: 1 }).then(() => true, (e: { code?: string }) => (e.code === 'not_ready' ? false : Promise.reject(e))));
      // Before: 10, the offset from before the deletion, which the table no longer held.
      expect(await fetchWhenKnown(admin, 'ghost', 'g-ghost')).toEqual({ offset: 0, committed: false });
      expect((await seed.loadAll()).length).toBe(0);
    } finally {
      relay.refusing = false;
      await relay.release();
      await second?.dispose();
      await seed.close();
    }
  }, 60_000);

  it('a table locked by another session fails a commit after a bounded wait; the group goes on and a later commit lands', async () => {
    // A session longer than the wait: this member sends no heartbeat meanwhile.
    const { admin, commit } = await onlyMember('locked', 'g-locked', { session_timeout_ms: 30_000 });
    await commit(5);
    const locker = new pg.Client({ connectionString: pgServer.connectionString });
    await locker.connect();
    try {
      await locker.query('BEGIN');
      await locker.query('LOCK TABLE tributary_offsets IN ACCESS EXCLUSIVE MODE');
      // Before: the commit waited for the lock as long as it was held, and the group's JOINs behind it.
      const err = await commit(6).then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(err).toMatchObject({ code: 'storage_error' });
      await locker.query('ROLLBACK');
    } finally {
      await locker.end();
    }
    await commit(7);
    expect(await stored('g-locked')).toEqual([7]);
    expect(await fetchOffset(admin, 'locked', 'g-locked', 0)).toEqual({ offset: 7, committed: true });
  }, 60_000);
});

/**
 * Offsets retention against a real broker (`--offsets-retention-ms`): a group whose last member left is
 * deleted with its committed offsets once the retention has passed, so LIST_GROUPS and Admin.listGroups
 * no longer list it, FETCH_OFFSET answers as for an unknown group, /metrics counts it, and a restart does
 * not bring it back; a group with a member meanwhile keeps its offsets. With the log store (tombstones in
 * `__consumer_offsets`) and with the PostgreSQL store (its rows deleted).
 */
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Admin } from 'tributary-client/admin.js';
import type { Connection } from 'tributary-protocol/connection.js';
import type { BrokerProcess } from '../../helpers/launcher.js';
import { type PostgresServer, startPostgres } from '../../helpers/postgres.js';
import { until } from '../../helpers/util.js';
import { GroupMember, fetchOffset, fill, kv, startBroker } from './helpers.js';

const TOPIC = 'exp';
const RETENTION_MS = 1500;

describe.each(['log', 'postgres'] as const)('offsets retention of empty groups, %s offset store', (store) => {
  let broker: BrokerProcess;
  let conn: Connection;
  let admin: Admin;
  let pgServer: PostgresServer | undefined;
  let db: pg.Client | undefined;

  beforeAll(async () => {
    const storeArgs: string[] = [];
    if (store === 'postgres') {
      pgServer = await startPostgres();
      db = new pg.Client({ connectionString: pgServer.connectionString });
      await db.connect();
      storeArgs.push('--offset-store', 'postgres', '--offset-store-postgres-url', pgServer.connectionString);
    }
    broker = await startBroker(['--offsets-retention-ms', String(RETENTION_MS), ...storeArgs]);
    conn = await broker.connect();
    admin = new Admin({ brokers: [broker.address] });
    await conn.command('CREATE', { topic: TOPIC, partitions: 2 });
    await fill(conn, TOPIC, 2, 5);
  }, 90_000);

  afterAll(async () => {
    await admin?.close();
    await broker?.dispose();
    await db?.end().catch(() => {});
    await pgServer?.stop();
  });

  /** The group's rows in the PostgreSQL table (none to count with the log store). */
  const rows = async (group: string) => (db ? (await db.query('select partition from tributary_offsets where group_id = $1', [group])).rowCount : 0);

  const listed = async () => (kv(await conn.command('LIST_GROUPS')).get('groups') ?? '').split(',').filter((g) => g.length > 0);

  it('an abandoned group disappears with its offsets; a group with a member stays', { timeout: 90_000 }, async () => {
    // A member with a session far longer than the test: it needs no heartbeat to stay.
    const kept = await GroupMember.connect(broker, TOPIC, 'exp-kept', 'kept');
    await kept.join({ session_timeout_ms: 60_000 });
    await kept.sync();
    expect(await kept.commit(0, 2)).toBe('OK');

    const gone = await GroupMember.connect(broker, TOPIC, 'exp-gone', 'gone');
    await gone.join();
    await gone.sync();
    expect(await gone.commit(0, 3)).toBe('OK');
    expect(await gone.commit(1, 4)).toBe('OK');
    await gone.leave();
    expect(await listed()).toEqual(['exp-gone', 'exp-kept']);
    expect(await fetchOffset(conn, TOPIC, 'exp-gone', 0)).toEqual({ offset: 3, committed: true });
    if (db) expect(await rows('exp-gone')).toBe(2);

    await until(async () => !(await admin.listGroups()).includes('exp-gone'), 30_000, 'the abandoned group to expire', 50);
    expect(await listed()).toEqual(['exp-kept']);
    expect(await fetchOffset(conn, TOPIC, 'exp-gone', 0)).toEqual({ offset: 0, committed: false });
    expect(await fetchOffset(conn, TOPIC, 'exp-gone', 1)).toEqual({ offset: 0, committed: false });
    expect(await fetchOffset(conn, TOPIC, 'exp-kept', 0)).toEqual({ offset: 2, committed: true });
    expect((await broker.health('/metrics')).body).toMatch(/^tributary_groups_expired_total 1$/m);
    expect(await rows('exp-gone')).toBe(0);
    if (db) expect(await rows('exp-kept')).toBe(1);

    // The tombstones are durable: a restart replays no offsets of the expired group.
    await broker.restart();
    conn = await broker.connect();
    expect(await listed()).not.toContain('exp-gone');
    expect(await fetchOffset(conn, TOPIC, 'exp-gone', 0)).toEqual({ offset: 0, committed: false });
  });
});

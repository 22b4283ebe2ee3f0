import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { BrokerProcess } from '../../helpers/launcher.js';
import { type PostgresServer, startPostgres } from '../../helpers/postgres.js';
import { GroupMember, fetchOffset, fill, startBroker } from './helpers.js';
import { expectError } from '../../helpers/util.js';

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
    await expectError(m.conn.command('COMMIT_OFFSET', { topic: 'pgt', group: 'pg-group', partition: 0, offset: 3, member: m.id, generation: m.generation }), 'offset_regression');

    const rows = await db.query('select partition, next_offset from tributary_offsets where group_id = $1 and topic = $2 order by partition', ['pg-group', 'pgt']);
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

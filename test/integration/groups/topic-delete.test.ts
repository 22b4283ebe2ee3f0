/**
 * A deleted topic's committed offsets go with it (docs/operations.md, "Deleting a topic"), on a real
 * standalone broker with the default log store and with the PostgreSQL store: a group that had committed
 * sees none for the topic re-created under the same name, commits lower offsets into it, and a restarted
 * broker does not bring the old ones back.
 */
import pg from 'pg';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { Connection } from 'tributary-protocol/connection.js';
import type { BrokerProcess } from '../../helpers/launcher.js';
import { type PostgresServer, startPostgres } from '../../helpers/postgres.js';
import { expectError, until } from '../../helpers/util.js';
import { GroupMember, fetchAll, fill, groupStatus, startBroker } from './helpers.js';

let pgServer: PostgresServer | undefined;
let db: pg.Client | undefined;
const brokers: BrokerProcess[] = [];

beforeAll(async () => {
  pgServer = await startPostgres();
  db = new pg.Client({ connectionString: pgServer.connectionString });
  await db.connect();
}, 90_000);

afterEach(async () => {
  await Promise.all(brokers.splice(0).map((b) => b.dispose()));
});

afterAll(async () => {
  await db?.end().catch(() => {});
  await pgServer?.stop();
});

const committedColumn = async (c: Connection, group: string) => (await groupStatus(c, group)).offsets.map((o) => o.committed);

/** DELETE on Tributary's port, or the admin HTTP API's DELETE /api/v1/topics/{topic} (docs/http-api.md). */
const byCommand = async (_b: BrokerProcess, c: Connection, topic: string) => void (await c.command('DELETE', { topic }));
async function byHttp(b: BrokerProcess, _c: Connection, topic: string): Promise<void> {
  const res = await fetch(`http://127.0.0.1:${b.healthPort}/api/v1/topics/${topic}`, { method: 'DELETE' });
  expect(res.status).toBe(204);
}

const STORES: Array<{
  name: string;
  args: () => string[];
  del: (b: BrokerProcess, c: Connection, topic: string) => Promise<void>;
  rows?: (topic: string) => Promise<number>;
}> = [
  { name: 'log (default), deleted with DELETE', args: () => [], del: byCommand },
  {
    name: 'postgres, deleted over HTTP',
    args: () => ['--offset-store', 'postgres', '--offset-store-postgres-url', pgServer!.connectionString],
    del: byHttp,
    rows: async (topic) => (await db!.query('SELECT count(*)::int AS n FROM tributary_offsets WHERE topic = $1', [topic])).rows[0].n as number,
  },
];

describe.each(STORES)('deleting a topic, offset store $name', (store) => {
  it("takes every group's committed offsets of it; the re-created topic starts over, also after a restart", async () => {
    const broker = await startBroker(store.args());
    brokers.push(broker);
    const admin = await broker.connect();
    await admin.command('CREATE', { topic: 'td', partitions: 2 });
    await admin.command('CREATE', { topic: 'kept', partitions: 1 });
    await fill(admin, 'td', 2, 20);
    await fill(admin, 'kept', 1, 5);
    const m = await GroupMember.connect(broker, 'td', 'tdg', 'w');
    await m.join();
    expect(await m.sync()).toEqual([0, 1]);
    await m.batchCommit('P0:15,P1:12');
    const other = await GroupMember.connect(broker, 'kept', 'keptg', 'w');
    await other.join();
    await other.sync();
    await other.commit(0, 4);
    expect(await committedColumn(admin, 'tdg')).toEqual([15, 12]);
    if (store.rows) expect(await store.rows('td')).toBe(2);

    await store.del(broker, admin, 'td');
    if (store.rows) expect(await store.rows('td')).toBe(0);
    // A commit for the deleted topic is refused and changes nothing.
    await expectError(m.commit(0, 16), 'topic_not_found', { topic: 'td' });

    // Re-created with less data than the old offsets: nothing committed, a lower commit is accepted.
    await admin.command('CREATE', { topic: 'td', partitions: 2 });
    await fill(admin, 'td', 2, 3);
    expect(await committedColumn(admin, 'tdg')).toEqual([null, null]);
    expect(await fetchAll(admin, 'td', 'tdg', 2)).toEqual([
      { offset: 0, committed: false },
      { offset: 0, committed: false },
    ]);
    // The member's generation read the old topic: it may not commit into the new one until it rejoined.
    await expectError(m.commit(0, 2), 'REBALANCE_IN_PROGRESS', { reason: 'offsets_reset' });
    // Rejoined (again if the generation the topic change starts came after this member's rejoin), it commits.
    await until(
      async () => {
        await m.join();
        await m.sync();
        return m.commit(0, 2).then(
          () => true,
          () => false,
        );
      },
      15_000,
      'a commit into the re-created topic after rejoining',
    );
    expect(await committedColumn(admin, 'keptg')).toEqual([4]);

    await broker.restart();
    const after = await broker.connect();
    expect(await committedColumn(after, 'tdg')).toEqual([2, null]);
    expect(await fetchAll(after, 'td', 'tdg', 2)).toEqual([
      { offset: 2, committed: true },
      { offset: 0, committed: false },
    ]);
    expect(await committedColumn(after, 'keptg')).toEqual([4]);
    if (store.rows) expect(await store.rows('td')).toBe(1);
  });
});

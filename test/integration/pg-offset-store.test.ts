import pg from 'pg';
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from 'vitest';
import { PgOffsetStore, type PgOffsetStoreOptions, QUERY_READ_TIMEOUT_MS } from 'tributary-broker/coordinator/pg-offset-store.js';
import { TributaryError } from 'tributary-protocol/errors.js';
import { type PostgresServer, startPostgres } from '../helpers/postgres.js';
import { type PgRelay, startPgRelay } from '../helpers/pg-relay.js';
import { track, untilReal, useFakeTimersForIo } from '../helpers/fake-timers.js';
import { eventually, rejection } from '../helpers/util.js';

let server: PostgresServer;
let admin: pg.Pool;
const stores: PgOffsetStore[] = [];
let tableSeq = 0;

/** The test's own admin pool; its idle connections die when the server restarts (handled, not a crash). */
function adminPool(): pg.Pool {
  const pool = new pg.Pool({ connectionString: server.connectionString, max: 2 });
  pool.on('error', () => {});
  return pool;
}

/** Each test gets its own table so tests never see each other's rows. */
function nextTable(): string {
  tableSeq += 1;
  return `offsets_t${tableSeq}`;
}

async function openStore(opts: PgOffsetStoreOptions = {}): Promise<PgOffsetStore> {
  const store = new PgOffsetStore({ connectionString: server.connectionString, ...opts });
  stores.push(store);
  await store.open();
  return store;
}

interface Relayed {
  table: string;
  /** A store reaching the server directly. */
  direct: PgOffsetStore;
  /** A store reaching the server through `relay`. */
  store: PgOffsetStore;
  relay: PgRelay;
  /**
   * Pauses (SIGSTOP) the server process of the one transaction on the table left idle (its COMMIT held by
   * the relay), as one stuck in its COMMIT would be; resumed by resume() or at the end of the test.
   */
  pause(): Promise<void>;
  resume(): void;
}

/**
 * A table of its own whose row g/t/0 holds `offset`, with a store on it directly and one (with `opts`)
 * through a relay.
 */
async function withRelayedStore(offset: number, test: (r: Relayed) => Promise<void>, opts: PgOffsetStoreOptions = {}): Promise<void> {
  const table = nextTable();
  const direct = await openStore({ table });
  await direct.commit('g', 't', [{ partition: 0, offset }]);
  const relay = await startPgRelay(server.port);
  let paused: number | undefined;
  const resume = () => {
    if (paused !== undefined) process.kill(paused, 'SIGCONT');
    paused = undefined;
  };
  try {
    const store = await openStore({ ...opts, table, connectionString: relay.url });
    const pause = async () => {
      const res = await admin.query<{ pid: number }>(`SELECT pid FROM pg_stat_activity WHERE state = 'idle in transaction' AND query LIKE '%${table}%'`);
      expect(res.rows.length).toBe(1);
      paused = res.rows[0]!.pid;
      process.kill(paused, 'SIGSTOP');
    };
    await test({ table, direct, store, relay, pause, resume });
  } finally {
    resume();
    await relay.close();
  }
}

beforeAll(async () => {
  const t0 = Date.now();
  server = await startPostgres();
  console.log(`PostgreSQL started in ${Date.now() - t0} ms on port ${server.port}`);
  admin = adminPool();
});

afterEach(async () => {
  await Promise.all(stores.splice(0).map((s) => s.close().catch(() => {})));
});

afterAll(async () => {
  await admin?.end();
  await server?.stop();
});

// Commit, fetch, monotonicity, all-or-nothing, force, input checks and deleteGroup are the OffsetStore
// contract, run against this store too by offset-store-contract.test.ts; here: what is PostgreSQL's own.
describe('PgOffsetStore', () => {
  it('refuses at open a table that exists in another shape: a configuration error, not an outage to retry', async () => {
    // Before: a table without the primary key opened fine, and every commit then failed (retriable) forever.
    const shapes: Array<[string, RegExp]> = [
      [
        'group_id text NOT NULL, topic text NOT NULL, partition int NOT NULL, next_offset bigint NOT NULL, committed_at timestamptz NOT NULL',
        /primary key \(none\)/,
      ],
      [
        'group_id text, topic text, partition int, next_offset int, committed_at timestamptz, PRIMARY KEY (group_id, topic, partition)',
        /column next_offset is integer, not bigint/,
      ],
      ['id int PRIMARY KEY, payload text', /no column group_id/],
    ];
    for (const [columns, reason] of shapes) {
      const table = nextTable();
      await admin.query(`CREATE TABLE ${table} (${columns})`);
      const err = await rejection(openStore({ table }));
      expect(err).toMatchObject({ code: 'invalid_config', retriable: false });
      expect(String((err as TributaryError).fields.reason)).toMatch(reason);
    }
  });

  it('creates the table with the documented columns, idempotently', async () => {
    const table = nextTable();
    const store = await openStore({ table });
    expect(store.kind).toBe('postgres');
    await store.open(); // again: no error
    await openStore({ table }); // a second store on an existing table
    const cols = await admin.query(`SELECT column_name, data_type FROM information_schema.columns WHERE table_name = $1 ORDER BY ordinal_position`, [table]);
    expect(cols.rows).toEqual([
      { column_name: 'group_id', data_type: 'text' },
      { column_name: 'topic', data_type: 'text' },
      { column_name: 'partition', data_type: 'integer' },
      { column_name: 'next_offset', data_type: 'bigint' },
      { column_name: 'committed_at', data_type: 'timestamp with time zone' },
    ]);
    const pk = await admin.query(
      `SELECT a.attname FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey)
       WHERE i.indrelid = $1::regclass AND i.indisprimary ORDER BY array_position(i.indkey, a.attnum)`,
      [table],
    );
    expect(pk.rows.map((r) => r.attname)).toEqual(['group_id', 'topic', 'partition']);
  });

  it('treats group and topic names as data, never as SQL', async () => {
    const store = await openStore({ table: nextTable() });
    const group = `g'); DROP TABLE tributary_offsets; --`;
    const topic = 'tö"pic\\ $1';
    await store.commit(group, topic, [{ partition: 0, offset: 1 }]);
    expect(await store.fetch(group, topic, 0)).toBe(1);
    expect((await store.loadAll()).map((o) => [o.group, o.topic])).toEqual([[group, topic]]);
  });

  it('validates and quotes the table and schema identifiers', async () => {
    for (const table of ['Offsets', 'offsets; drop table x', 'a"b', '1abc', '', 'x'.repeat(64)]) {
      expect(() => new PgOffsetStore({ connectionString: server.connectionString, table })).toThrow(expect.objectContaining({ code: 'invalid_parameter' }));
    }
    expect(() => new PgOffsetStore({ connectionString: server.connectionString, schema: 'public.x' })).toThrow(
      expect.objectContaining({ code: 'invalid_parameter' }),
    );
    await admin.query('CREATE SCHEMA IF NOT EXISTS tributary_test');
    const table = nextTable();
    const store = await openStore({ schema: 'tributary_test', table });
    await store.commit('g', 't', [{ partition: 0, offset: 3 }]);
    const rows = await admin.query(`SELECT next_offset FROM tributary_test.${table}`);
    expect(rows.rows).toEqual([{ next_offset: '3' }]);
    // Same table name in the default schema is a different table.
    const other = await openStore({ table });
    expect(await other.fetch('g', 't', 0)).toBeUndefined();
    // A schema that does not exist is the configuration's fault (a start fails, not waits), not a crash.
    const missing = new PgOffsetStore({ connectionString: server.connectionString, schema: 'no_such_schema' });
    stores.push(missing);
    expect((await rejection(missing.open())).code).toBe('invalid_config');
  });

  it('two coordinators racing commits on the same partitions never regress', async () => {
    const table = nextTable();
    const a = await openStore({ table });
    const b = await openStore({ table });
    // Every update the database applies is logged (inside the committing transaction, under the row lock),
    // so the log is the true order of applied values and rolled-back batches leave nothing in it.
    const audit = `${table}_audit`;
    await admin.query(`CREATE TABLE ${audit} (seq bigserial PRIMARY KEY, partition int, old_offset bigint, new_offset bigint)`);
    await admin.query(`CREATE FUNCTION ${audit}_fn() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN
        INSERT INTO ${audit} (partition, old_offset, new_offset) VALUES (NEW.partition, OLD.next_offset, NEW.next_offset);
        RETURN NEW;
      END $$`);
    await admin.query(`CREATE TRIGGER ${audit}_trg AFTER UPDATE ON ${table} FOR EACH ROW EXECUTE FUNCTION ${audit}_fn()`);

    const partitions = [0, 1, 2];
    type Attempt = { partition: number; offset: number }[];
    const successes: { entries: Attempt; start: number; end: number }[] = [];
    const rejections: TributaryError[] = [];
    let clock = 0; // a logical clock: start/end ticks order calls in real time
    const worker = async (store: PgOffsetStore, n: number) => {
      for (let i = 0; i < n; i++) {
        // A random non-empty subset of the partitions, in random order, with random offsets.
        const entries = partitions
          .filter(() => Math.random() < 0.6)
          .sort(() => Math.random() - 0.5)
          .map((partition) => ({ partition, offset: Math.floor(Math.random() * 1000) }));
        if (entries.length === 0) entries.push({ partition: 0, offset: Math.floor(Math.random() * 1000) });
        const start = ++clock;
        try {
          await store.commit('race', 'topic', entries);
          successes.push({ entries, start, end: ++clock });
        } catch (err) {
          if (!(err instanceof TributaryError) || err.code !== 'offset_regression') throw err; // no deadlocks, no storage errors
          rejections.push(err);
        }
      }
    };
    // Several in-flight commits per coordinator, each on its own pooled connection.
    await Promise.all([...Array.from({ length: 4 }, () => worker(a, 60)), ...Array.from({ length: 4 }, () => worker(b, 60))]);

    expect(successes.length).toBeGreaterThan(0);
    expect(rejections.length).toBeGreaterThan(0);
    for (const p of partitions) {
      const committed = successes.flatMap((s) => s.entries.filter((e) => e.partition === p).map((e) => ({ ...e, start: s.start, end: s.end })));
      const max = Math.max(...committed.map((c) => c.offset));
      expect(await a.fetch('race', 'topic', p)).toBe(max);
      expect(await b.fetch('race', 'topic', p)).toBe(max);
      // Real-time order: a commit that succeeded before another started is never higher than it.
      for (const x of committed) {
        for (const y of committed) {
          if (x.end < y.start) expect(x.offset).toBeLessThanOrEqual(y.offset);
        }
      }
      // The order the database applied them in: non-decreasing, and each update starts from the last one.
      const log = await admin.query(`SELECT old_offset::int AS old, new_offset::int AS new FROM ${audit} WHERE partition = $1 ORDER BY seq`, [p]);
      for (let i = 0; i < log.rows.length; i++) {
        expect(log.rows[i].new).toBeGreaterThanOrEqual(log.rows[i].old);
        if (i > 0) expect(log.rows[i].old).toBe(log.rows[i - 1].new);
      }
      if (log.rows.length > 0) expect(log.rows[log.rows.length - 1].new).toBe(max);
    }
    // Every refusal names a value that really was committed and is higher than the request.
    const committedValues = new Set(successes.flatMap((s) => s.entries.map((e) => `${e.partition}:${e.offset}`)));
    for (const r of rejections) {
      expect(Number(r.fields.current)).toBeGreaterThan(Number(r.fields.requested));
      expect(committedValues.has(`${r.fields.partition}:${r.fields.current}`)).toBe(true);
    }
  });

  it('keeps data across closing and reopening the store, and across a server crash', async () => {
    const table = nextTable();
    const store = await openStore({ table });
    await store.commit('g', 't', [
      { partition: 0, offset: 42 },
      { partition: 1, offset: 43 },
    ]);
    await store.close();
    await store.close(); // idempotent
    expect((await rejection(store.fetch('g', 't', 0))).code).toBe('storage_error');

    const reopened = await openStore({ table });
    expect(await reopened.fetch('g', 't', 0)).toBe(42);
    await reopened.commit('g', 't', [{ partition: 0, offset: 44 }]);
    await reopened.close();

    // An acknowledged commit is durable: an immediate (crash) stop and WAL recovery keep it.
    await server.restart({ mode: 'immediate' });
    const afterCrash = await openStore({ table });
    expect((await afterCrash.loadAll()).map((o) => [o.partition, o.offset])).toEqual([
      [0, 44],
      [1, 43],
    ]);
    // The shared admin pool lost its connections in the restart; give it fresh ones.
    await admin.end();
    admin = adminPool();
  });

  it.each([
    ['deleteGroup', (s: PgOffsetStore) => s.deleteGroup('g')],
    ['deleteTopic', (s: PgOffsetStore) => s.deleteTopic('t', ['g'])],
  ])('%s whose COMMIT answer was lost rejects with outcome=unknown, and its rows are not read until it ended', async (_name, remove) => {
    await withRelayedStore(5, async ({ direct, store, relay }) => {
      await direct.commit('h', 't', [{ partition: 0, offset: 7 }]);
      relay.hold('COMMIT\0', { refuse: true });
      // Before: a DELETE in autocommit whose answer was lost was a plain storage_error, applied or not.
      const err = await rejection(remove(store));
      expect({ code: err.code, outcome: err.fields.outcome, held: relay.holding() }).toEqual({ code: 'storage_error', outcome: 'unknown', held: true });
      relay.refusing = false;
      // The server has not read the COMMIT: other connections still see the row, which it may yet delete.
      expect(await direct.fetch('g', 't', 0)).toBe(5);
      expect((await rejection(store.fetch('g', 't', 0))).code).toBe('storage_error');
      expect((await rejection(store.loadAll())).code).toBe('storage_error');
      // A row it does not cover is read as usual.
      expect(await store.fetch('h', 't', 0)).toBe(7);
      await relay.release();
      expect(await store.fetch('g', 't', 0)).toBeUndefined();
      expect((await store.loadAll()).map((o) => [o.group, o.offset])).toEqual([['h', 7]]);
    });
  });

  it.each([
    ['commit', (s: PgOffsetStore) => s.commit('g', 't', [{ partition: 0, offset: 8 }])],
    ['deletion', (s: PgOffsetStore) => s.deleteGroup('g')],
  ])('a commit is not taken as written from a row that a %s whose COMMIT answer was lost may still change', async (_name, lost) => {
    await withRelayedStore(6, async ({ direct, store, relay, pause, resume }) => {
      relay.hold('COMMIT\0', { refuse: true });
      expect((await rejection(lost(store))).fields.outcome).toBe('unknown');
      relay.refusing = false;
      // Its server process paused, as one stuck in its COMMIT would be (a synchronous standby that does not
      // answer, a stalled disk): the transaction stays in progress, its row locked, past any timeout.
      await pause();
      // This commit waits for that lock until its statement times out. Before: its row then still read 6,
      // so it was taken as written, and the coordinator answered 6 whatever the lost transaction came to.
      const err = await rejection(store.commit('g', 't', [{ partition: 0, offset: 6 }]));
      expect(err.code).toBe('storage_error');
      const released = relay.release();
      resume();
      await released;
      // Once it ended, the store answers what the table holds.
      const answered = await eventually('the row read', () => store.fetch('g', 't', 0).then((v) => ({ v }), () => undefined), 30_000);
      expect(answered.v).toBe(await direct.fetch('g', 't', 0));
    });
  }, 60_000);

  it('a transaction whose COMMIT never reaches the server is ended by the server: its rows are read and written again', async () => {
    await withRelayedStore(6, async ({ direct, store, relay }) => {
      // Never released: lost on the way, while the server's side of the connection stays open.
      relay.hold('COMMIT\0');
      expect((await rejection(store.commit('g', 't', [{ partition: 0, offset: 8 }]))).code).toBe('storage_error');
      // Before: the server kept the transaction open, its row locked, for as long as that connection lived
      // (until its TCP keepalive gave up, hours by default): the row could be neither read nor written.
      expect(await eventually('the row read again', () => store.fetch('g', 't', 0).catch(() => undefined), 40_000)).toBe(6);
      await store.commit('g', 't', [{ partition: 0, offset: 9 }]);
      expect(await direct.fetch('g', 't', 0)).toBe(9);
    });
  }, 60_000);

  it.each([
    ['commit', (s: PgOffsetStore) => s.commit('g', 't', [{ partition: 0, offset: 8 }])],
    ['deletion', (s: PgOffsetStore) => s.deleteGroup('g')],
  ])('a %s whose COMMIT answer times out is settled at once on another connection, its own one closed unused', async (_name, write) => {
    await withRelayedStore(6, async ({ direct, store, relay }) => {
      // Once COMMIT left, the network stops carrying the connection: the server never reads it, and the
      // store hears nothing until its query timeout.
      relay.hold('COMMIT\0', { stall: true });
      useFakeTimersForIo();
      try {
        const outcome = track(write(store));
        await untilReal(() => relay.holding(), 'the COMMIT held');
        // The server rolls the transaction back (idle in transaction), unseen by the store.
        await untilReal(() => relay.cut()?.serverClosed === true, 'the server ended the session', 30_000);
        await vi.advanceTimersByTimeAsync(QUERY_READ_TIMEOUT_MS);
        // With the clock stopped at the COMMIT's timeout, no other timeout can end the wait. Before: a
        // ROLLBACK was queued behind the unanswered COMMIT on the same connection, and txid_status was asked
        // only once the ROLLBACK's own query timeout had passed as well.
        await untilReal(() => outcome.settled, 'the write settled, the clock not moved past the COMMIT timeout');
        const err = await rejection(outcome.promise);
        expect({ code: err.code, outcome: err.fields.outcome }).toEqual({ code: 'storage_error', outcome: undefined });
        // Closed, not returned to the pool.
        expect(relay.cut()?.senderClosed).toBe(true);
      } finally {
        // Whatever is still waiting (a failure of this test) runs out before the real clock is back.
        await vi.advanceTimersByTimeAsync(2 * QUERY_READ_TIMEOUT_MS);
        vi.useRealTimers();
      }
      expect(await direct.fetch('g', 't', 0)).toBe(6);
      await store.commit('g', 't', [{ partition: 0, offset: 9 }]);
      expect(await direct.fetch('g', 't', 0)).toBe(9);
    });
  });

  it('a commit whose COMMIT answer was lost is not acknowledged before its transaction ends: a synchronous standby that does not answer', async () => {
    // A server of its own: every COMMIT on it waits for a standby that never comes, until this is undone.
    const own = await startPostgres();
    const db = new pg.Client({ connectionString: own.connectionString });
    await db.connect();
    const relay = await startPgRelay(own.port);
    try {
      const direct = await openStore({ connectionString: own.connectionString });
      await direct.commit('g', 't', [{ partition: 0, offset: 6 }]);
      await db.query("ALTER SYSTEM SET synchronous_standby_names = 'nosuch'");
      await db.query('SELECT pg_reload_conf()');
      const store = await openStore({ connectionString: relay.url });
      relay.hold('COMMIT\0');
      const outcome = store.commit('g', 't', [{ partition: 0, offset: 8 }]).then(
        () => 'acknowledged',
        (e: TributaryError) => e.fields.outcome ?? e.code,
      );
      await eventually('the COMMIT held', () => relay.holding());
      // The server reads it, marks the transaction committed and waits for the standby before it ends it:
      // until then no other session sees its row (nor would a failover to that standby keep it).
      const answered = relay.release();
      // Before: acknowledged, since txid_status says committed from the start of that wait.
      expect(await outcome).toBe('unknown');
      expect(await direct.fetch('g', 't', 0)).toBe(6);
      expect((await rejection(store.fetch('g', 't', 0))).code).toBe('storage_error');
      await db.query('ALTER SYSTEM RESET synchronous_standby_names');
      await db.query('SELECT pg_reload_conf()');
      await answered;
      expect(await eventually('the row read', () => store.fetch('g', 't', 0).catch(() => undefined))).toBe(8);
      expect(await direct.fetch('g', 't', 0)).toBe(8);
    } finally {
      await relay.close();
      await db.end().catch(() => {});
      await own.stop();
    }
  }, 60_000);

  it('a load (a restart, a takeover) does not read rows that a transaction of another session may still change', async () => {
    await withRelayedStore(6, async ({ table, direct, store: before, relay, pause, resume }) => {
      // A coordinator whose commit's COMMIT answer is lost; its server process paused with the COMMIT unread,
      // as one stuck in it would be.
      relay.hold('COMMIT\0', { refuse: true });
      expect((await rejection(before.commit('g', 't', [{ partition: 0, offset: 8 }]))).fields.outcome).toBe('unknown');
      relay.refusing = false;
      await pause();
      const answered = relay.release();
      // The broker restarted (or the group moved to another coordinator): a store that knows nothing of it.
      // Before: it loaded 6, and once the paused process read its COMMIT the table held 8.
      expect((await rejection(openStore({ table }).then((s) => s.loadAll()))).code).toBe('storage_error');
      resume();
      await answered;
      const after = await openStore({ table });
      expect((await after.loadAll()).map((o) => o.offset)).toEqual([(await direct.loadAll())[0]!.offset]);
    });
  }, 60_000);

  // Group g is in coordinator partition 0, every other group in 1.
  const partitionOf = (group: string) => (group === 'g' ? 0 : 1);
  it.each([
    ['a commit of a group of partition 0', { partitionOf }, (s: PgOffsetStore) => s.commit('g', 't', [{ partition: 0, offset: 8 }]), false],
    ['the same by a store that keys no writes (no partitionOf)', {}, (s: PgOffsetStore) => s.commit('g', 't', [{ partition: 0, offset: 8 }]), true],
    ["a deletion of a topic's offsets of every group", { partitionOf }, (s: PgOffsetStore) => s.deleteTopic('t'), true],
  ])('a load of coordinator partition 1 waits only for writes that may touch its groups: %s', async (_name, writerOpts, lost, waits) => {
    await withRelayedStore(
      6,
      async ({ table, direct, relay, store: before, pause, resume }) => {
        await direct.commit('h', 't', [{ partition: 0, offset: 3 }]);
        relay.hold('COMMIT\0', { refuse: true });
        expect((await rejection(lost(before))).fields.outcome).toBe('unknown');
        relay.refusing = false;
        await pause();
        const answered = relay.release();
        // The store that lost it, and one that knows nothing of it (another coordinator, or a restart).
        // Before: each waited for every writer of the table, whichever groups it wrote, and refused.
        for (const store of [before, await openStore({ table, partitionOf })]) {
          const load = store.loadAll({ partition: 1 });
          if (waits) expect((await rejection(load)).code).toBe('storage_error');
          else expect((await load).find((o) => o.group === 'h')?.offset).toBe(3);
          expect((await rejection(store.loadAll({ partition: 0 }))).code).toBe('storage_error');
        }
        resume();
        await answered;
      },
      writerOpts,
    );
  }, 60_000);

  it('a deletion that failed before its COMMIT was sent did not apply', async () => {
    await withRelayedStore(5, async ({ direct, store, relay }) => {
      relay.hold('DELETE FROM');
      const err = await rejection(store.deleteGroup('g'));
      expect({ code: err.code, outcome: err.fields.outcome }).toEqual({ code: 'storage_error', outcome: undefined });
      // The server carries the DELETE out late, on a connection whose client is gone: it never commits.
      await relay.release();
      expect(await direct.fetch('g', 't', 0)).toBe(5);
      expect(await store.fetch('g', 't', 0)).toBe(5);
    });
  });

  it('uses a caller-owned pool without ending it', async () => {
    const pool = new pg.Pool({ connectionString: server.connectionString, max: 2 });
    try {
      const store = new PgOffsetStore({ pool, table: nextTable() });
      await store.open();
      await store.commit('g', 't', [{ partition: 0, offset: 1 }]);
      await store.close();
      const res = await pool.query('SELECT 1 AS one');
      expect(res.rows[0].one).toBe(1);
    } finally {
      await pool.end();
    }
  });

  it('rejects with storage_error, not a crash, when the server is down', async () => {
    const other = await startPostgres();
    const store = new PgOffsetStore({ connectionString: other.connectionString });
    stores.push(store);
    try {
      await store.open();
      await store.commit('g', 't', [{ partition: 0, offset: 1 }]);
      expect(await store.fetch('g', 't', 0)).toBe(1); // leaves an idle pooled connection behind
    } finally {
      await other.stop(); // idempotent
    }

    for (const op of [
      () => store.commit('g', 't', [{ partition: 0, offset: 2 }]),
      () => store.fetch('g', 't', 0),
      () => store.loadAll(),
      () => store.deleteGroup('g'),
      () => store.open(),
    ]) {
      const err = await rejection(op());
      expect(err.code).toBe('storage_error');
      expect(err.retriable).toBe(true);
    }
    // A commit that never got a connection was not written: refused, not of unknown outcome.
    const refused = await rejection(store.commit('g', 't', [{ partition: 0, offset: 3 }]));
    expect([refused.code, refused.fields.outcome]).toEqual(['storage_error', undefined]);
    // A store that never reached the server fails the same way.
    const never = new PgOffsetStore({ connectionString: other.connectionString });
    stores.push(never);
    expect((await rejection(never.open())).code).toBe('storage_error');
    await store.close();
  });
});

/**
 * Committed offsets in a table of the team's own PostgreSQL database.
 *
 * One row per (group, topic, partition). A commit is one transaction: an upsert of every entry whose
 * ON CONFLICT branch only overwrites a stored offset that is not higher than the new one, so the database
 * itself refuses a regression even if two coordinators race (the row lock taken by ON CONFLICT serialises
 * them). If any entry was refused the whole transaction is rolled back and the commit rejects with
 * `offset_regression`. A deletion is one transaction as well (see remove). Identifiers (schema, table) are
 * validated and quoted; every value is a parameter.
 */
import type pg from 'pg';
import { invalidParam, TributaryError } from 'tributary-protocol/errors.js';
import { pgLib } from '../common/optional-deps.js';
import { type OffsetEntry, type OffsetStore, type StoredOffset, checkCommit, checkDeleteTopic, checkFetch, checkName } from './offset-store.js';

export interface PgOffsetStoreOptions {
  /** Used to create a pool the store owns (and ends on close). Ignored when `pool` is given. */
  connectionString?: string;
  /** A pool owned by the caller; `close()` leaves it open. */
  pool?: pg.Pool;
  /** Default `tributary_offsets`. */
  table?: string;
  /** Default: the connection's search_path. The schema must already exist. */
  schema?: string;
  /**
   * The coordinator partition of a group (the broker's `__consumer_offsets` mapping). Given, every write
   * holds a key of its groups' partitions, so a load of some partitions waits only for their writers
   * (loadAll); without it every load waits for every writer of the table.
   */
  partitionOf?: (group: string) => number;
}

/** The table's columns as CREATE makes them (format_type's names). */
const EXPECTED_COLUMNS: Record<string, string> = {
  group_id: 'text',
  topic: 'text',
  partition: 'integer',
  next_offset: 'bigint',
  committed_at: 'timestamp with time zone',
};

/** The longest a connection attempt or a statement may take (server side; the client gives up 2 s later). */
const QUERY_TIMEOUT_MS = 10_000;
/** How long the client waits for any answer (the pool's query_timeout). */
export const QUERY_READ_TIMEOUT_MS = QUERY_TIMEOUT_MS + 2_000;
/** Our transactions are never idle but between two statements of the same client (see the pool). */
const IDLE_IN_TRANSACTION_MS = 5_000;

const IDENTIFIER = /^[a-z_][a-z0-9_]*$/;
/** PostgreSQL silently truncates longer identifiers (NAMEDATALEN - 1). */
const MAX_IDENTIFIER_LENGTH = 63;

function quoteIdentifier(param: string, name: string): string {
  if (typeof name !== 'string' || !IDENTIFIER.test(name) || name.length > MAX_IDENTIFIER_LENGTH) {
    throw invalidParam(param, `must match [a-z_][a-z0-9_]* and be at most ${MAX_IDENTIFIER_LENGTH} characters`);
  }
  // The pattern admits no quote characters, so wrapping is a complete quoting.
  return `"${name}"`;
}

/**
 * SQLSTATEs that no wait fixes: invalid authorization (class 28: a wrong password or user), an unknown
 * database (3D000) or schema (3F000), insufficient privilege (42501).
 */
const PERMANENT_AT_OPEN = /^(28...|3D000|3F000|42501)$/;

/** Errors of an operation that never got a connection: nothing of it reached the server. */
const notSent = new WeakSet<Error>();

function storageError(op: string, cause: unknown): TributaryError {
  const detail = cause instanceof Error ? cause.message : String(cause);
  const code = typeof cause === 'object' && cause !== null && 'code' in cause ? String((cause as { code: unknown }).code) : undefined;
  const fields: Record<string, string> = { op, reason: detail || 'unknown database error' };
  if (code) fields.sqlstate = code;
  const err = new TributaryError('storage_error', fields);
  (err as Error & { cause?: unknown }).cause = cause;
  return err;
}

/** The second advisory key of a write that may touch every group (deleteTopic of all groups): above any partition. */
const EVERY_PARTITION = 2_147_483_647;

/** The first advisory key of a table's writes: a 31-bit FNV-1a hash of its qualified name. */
function tableKey(qualified: string): number {
  let h = 0x811c9dc5;
  for (const c of Buffer.from(qualified, 'utf8')) h = Math.imul(h ^ c, 0x01000193);
  return (h >>> 0) & 0x7fffffff;
}

/** A row's key in `lostCommits`. */
function rowKey(group: string, topic: string, partition: number): string {
  return JSON.stringify([group, topic, partition]);
}

/** bigint / numeric values arrive as strings; they are below 2^53 by construction, but check anyway. */
function toSafeNumber(value: unknown, what: string): number {
  const n = typeof value === 'number' ? value : typeof value === 'bigint' || typeof value === 'string' ? Number(value) : Number.NaN;
  if (!Number.isSafeInteger(n)) {
    throw new TributaryError('storage_error', { op: 'decode', reason: `${what} ${String(value)} is not a safe integer` });
  }
  return n;
}

export class PgOffsetStore implements OffsetStore {
  readonly kind = 'postgres';
  private readonly pool: pg.Pool;
  private readonly ownsPool: boolean;
  /** Schema-qualified (when a schema is given) and quoted. */
  private readonly qualified: string;
  private closed = false;
  /**
   * Per row (rowKey), transactions whose COMMIT answer was lost and whose end txid_status could not tell:
   * the server may still read that COMMIT and apply it, so until they end a read of the row (another
   * connection's snapshot: the value from before) is not what the row will hold.
   */
  private readonly lostCommits = new Map<string, Set<string>>();
  /**
   * Deletions (by transaction id) whose COMMIT answer was lost as above, with the rows they cover: a group's
   * (deleteGroup), or a topic's of some groups or all (deleteTopic). Until they end, reading a row they
   * cover is refused as for `lostCommits`.
   */
  private readonly lostDeletes = new Map<string, { topic?: string; groups?: ReadonlySet<string> }>();
  private readonly partitionOf?: (group: string) => number;
  private readonly tableKey: number;

  private readonly sql: {
    load: string;
    fetch: string;
    upsert: string;
    current: string;
    xidStatus: string;
    writers: string;
    running: string;
    deleteGroup: string;
    deleteTopic: string;
    create: string;
  };

  constructor(opts: PgOffsetStoreOptions = {}) {
    if (opts.partitionOf !== undefined && typeof opts.partitionOf !== 'function') throw invalidParam('partitionOf', 'must be a function');
    this.partitionOf = opts.partitionOf;
    const table = quoteIdentifier('table', opts.table ?? 'tributary_offsets');
    const schema = opts.schema === undefined ? undefined : quoteIdentifier('schema', opts.schema);
    this.qualified = schema ? `${schema}.${table}` : table;
    const t = this.qualified;
    this.tableKey = tableKey(t);

    if (opts.pool) {
      this.pool = opts.pool;
      this.ownsPool = false;
    } else {
      if (opts.connectionString !== undefined && (typeof opts.connectionString !== 'string' || opts.connectionString === '')) {
        throw invalidParam('connectionString', 'must be a non-empty string');
      }
      // Without a connection string, pg reads the PG* environment variables. Every wait is bounded: a frozen
      // database, or a table lock another session holds, would hold a commit (and its group's lock) and a shutdown.
      this.pool = new (pgLib().Pool)({
        connectionString: opts.connectionString,
        connectionTimeoutMillis: QUERY_TIMEOUT_MS,
        max: 10,
        statement_timeout: QUERY_TIMEOUT_MS,
        // A transaction whose COMMIT never arrives (lost with its connection, whose end the server may not
        // see for hours) is rolled back, its rows unlocked, before a lost COMMIT answer stops being waited
        // for (commit): so that wait mostly learns an outcome, and one it cannot learn ends soon after.
        idle_in_transaction_session_timeout: IDLE_IN_TRANSACTION_MS,
        query_timeout: QUERY_READ_TIMEOUT_MS,
        keepAlive: true,
      });
      this.ownsPool = true;
      // An idle connection that dies (server restart, network) emits 'error' on the pool; unhandled it would
      // crash the process. The next query gets a fresh connection or fails with storage_error.
      this.pool.on('error', () => {});
    }

    const cols = `group_id, topic, partition, next_offset::text AS next_offset,
      round(extract(epoch FROM committed_at) * 1000)::bigint::text AS committed_ms`;
    this.sql = {
      create: `CREATE TABLE IF NOT EXISTS ${t} (
        group_id text NOT NULL,
        topic text NOT NULL,
        partition int NOT NULL,
        next_offset bigint NOT NULL,
        committed_at timestamptz NOT NULL,
        PRIMARY KEY (group_id, topic, partition)
      )`,
      load: `SELECT ${cols} FROM ${t} ORDER BY group_id, topic, partition`,
      fetch: `SELECT next_offset::text AS next_offset FROM ${t} WHERE group_id = $1 AND topic = $2 AND partition = $3`,
      // Rows are fed in partition order so concurrent multi-partition commits lock rows in the same order
      // (no deadlocks). RETURNING lists only the rows actually inserted or updated.
      upsert: `INSERT INTO ${t} AS cur (group_id, topic, partition, next_offset, committed_at)
        SELECT $1::text, $2::text, u.p, u.o, to_timestamp($5::float8 / 1000)
        FROM unnest($3::int[], $4::bigint[]) WITH ORDINALITY AS u(p, o, n)
        ORDER BY u.n
        ON CONFLICT (group_id, topic, partition) DO UPDATE
          SET next_offset = EXCLUDED.next_offset, committed_at = EXCLUDED.committed_at
          WHERE $6::boolean OR cur.next_offset <= EXCLUDED.next_offset
        RETURNING partition, txid_current()::text AS xid`,
      current: `SELECT partition, next_offset::text AS next_offset FROM ${t}
        WHERE group_id = $1 AND topic = $2 AND partition = ANY($3::int[])`,
      xidStatus: `SELECT txid_status($1::bigint) AS status`,
      // The transactions of other sessions that wrote to the table and have not ended (each holds its table
      // lock, its id's lock and its advisory keys until it ends, a synchronous standby's wait included). Given
      // partitions ($3), not one holding keys of this table ($2) but none of them nor EVERY_PARTITION (begin).
      // One read of pg_locks, of one moment (a CTE referenced more than once is computed once).
      writers: `WITH l AS (SELECT locktype, relation, mode, granted, pid, transactionid, classid, objid, objsubid FROM pg_locks),
        k AS (SELECT pid, objid::int8 AS part FROM l WHERE locktype = 'advisory' AND objsubid = 2 AND classid::int8 = $2::int8)
        SELECT DISTINCT x.transactionid::text AS xid FROM l r
        JOIN l x ON x.pid = r.pid AND x.locktype = 'transactionid' AND x.mode = 'ExclusiveLock' AND x.granted
        WHERE r.locktype = 'relation' AND r.relation = $1::regclass AND r.mode = 'RowExclusiveLock' AND r.pid <> pg_backend_pid()
          AND ($3::int8[] IS NULL OR NOT EXISTS (SELECT 1 FROM k WHERE k.pid = r.pid)
            OR EXISTS (SELECT 1 FROM k WHERE k.pid = r.pid AND (k.part = ANY($3::int8[]) OR k.part = ${EVERY_PARTITION})))`,
      running: `SELECT count(*)::int AS n FROM pg_locks
        WHERE locktype = 'transactionid' AND mode = 'ExclusiveLock' AND granted AND transactionid::text = ANY($1::text[])`,
      // In a transaction of their own, whose id tells the outcome of a COMMIT whose answer is lost (remove).
      deleteGroup: `WITH d AS (DELETE FROM ${t} WHERE group_id = $1) SELECT txid_current()::text AS xid`,
      // A null group list: every group's offsets of the topic.
      deleteTopic: `WITH d AS (DELETE FROM ${t} WHERE topic = $1 AND ($2::text[] IS NULL OR group_id = ANY($2::text[]))) SELECT txid_current()::text AS xid`,
    };
  }

  async open(): Promise<void> {
    await this.withClient('open', async (client) => {
      // Skip CREATE when the table exists, so a role without CREATE on the schema can still use it.
      const exists = await client.query<{ oid: string | null }>('SELECT to_regclass($1)::text AS oid', [this.qualified]);
      if (exists.rows[0]?.oid) {
        await this.checkShape(client);
        return;
      }
      // A failed statement discards the connection, which ends the transaction (withClient).
      await client.query('BEGIN');
      // Two coordinators opening at once could otherwise both try to create the table's row type.
      await client.query('SELECT pg_advisory_xact_lock(hashtext($1))', [`tributary:${this.qualified}`]);
      await client.query(this.sql.create);
      await client.query('COMMIT');
    }).catch((err: unknown) => {
      // A refused login or a database, schema or privilege that does not exist is the configuration's
      // fault: the start fails saying so, instead of waiting for an outage to end (wait-for-store.ts).
      const sqlstate = err instanceof TributaryError ? err.fields.sqlstate : undefined;
      if (typeof sqlstate === 'string' && PERMANENT_AT_OPEN.test(sqlstate)) {
        throw new TributaryError('invalid_config', { option: 'offsetStorePostgresUrl', reason: `PostgreSQL refused it: ${String(err instanceof TributaryError ? err.fields.reason : err)} (SQLSTATE ${sqlstate})` });
      }
      throw err;
    });
  }

  /**
   * A table that exists must be the one CREATE would make: the columns and types, and the primary key that
   * ON CONFLICT needs. Without it the broker started, and then every commit failed; a wrong shape is a
   * configuration error, refused at start (not retried as an outage).
   */
  private async checkShape(client: pg.PoolClient): Promise<void> {
    const cols = await client.query<{ name: string; type: string }>(
      'SELECT attname AS name, format_type(atttypid, atttypmod) AS type FROM pg_attribute WHERE attrelid = $1::regclass AND attnum > 0 AND NOT attisdropped',
      [this.qualified],
    );
    const pk = await client.query<{ name: string }>(
      'SELECT a.attname AS name FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey) WHERE i.indrelid = $1::regclass AND i.indisprimary',
      [this.qualified],
    );
    const have = new Map(cols.rows.map((r) => [r.name, r.type]));
    const problems: string[] = [];
    for (const [name, type] of Object.entries(EXPECTED_COLUMNS)) {
      const t = have.get(name);
      if (t === undefined) problems.push(`no column ${name}`);
      else if (t !== type) problems.push(`column ${name} is ${t}, not ${type}`);
    }
    const key = pk.rows.map((r) => r.name).sort();
    if (key.join(',') !== 'group_id,partition,topic') problems.push(`primary key (${key.join(', ') || 'none'}), not (group_id, topic, partition)`);
    if (problems.length > 0) {
      throw new TributaryError('invalid_config', { option: 'offsetStorePostgresUrl', reason: `table ${this.qualified}: ${problems.join('; ')}` });
    }
  }

  /**
   * Every stored offset. With `partition` (and `partitionOf`), the caller keeps those of that coordinator
   * partition's groups only, and only writes that may touch them are waited for.
   */
  async loadAll(opts: { partition?: number } = {}): Promise<StoredOffset[]> {
    const part = opts.partition;
    if (part !== undefined && (!Number.isSafeInteger(part) || part < 0)) throw invalidParam('partition', 'must be a non-negative integer');
    const loaded = (group: string) => part === undefined || this.keyOf(group) === part || this.keyOf(group) === EVERY_PARTITION;
    // A coordinator taking groups over (back) here would otherwise take a row's value from before a
    // transaction that may still commit; refused until it ended, the load is tried again.
    for (const key of [...this.lostCommits.keys()]) if (loaded((JSON.parse(key) as [string])[0])) await this.lostCommitsEnded(key);
    await this.lostDeletesEnded((d) => d.groups === undefined || [...d.groups].some(loaded));
    await this.writersEnded(part === undefined || !this.partitionOf ? null : [part]);
    const res = await this.query<{ group_id: string; topic: string; partition: number; next_offset: string; committed_ms: string }>(
      'loadAll',
      this.sql.load,
      [],
    );
    return res.rows.map((r) => ({
      group: r.group_id,
      topic: r.topic,
      partition: toSafeNumber(r.partition, 'partition'),
      offset: toSafeNumber(r.next_offset, 'next_offset'),
      commitTimestamp: toSafeNumber(r.committed_ms, 'committed_at'),
    }));
  }

  async commit(group: string, topic: string, entries: OffsetEntry[], opts: { force?: boolean } = {}): Promise<void> {
    checkCommit(group, topic, entries);
    if (entries.length === 0) {
      this.assertOpen('commit');
      return;
    }
    const sorted = [...entries].sort((a, b) => a.partition - b.partition);
    const partitions = sorted.map((e) => e.partition);
    const offsets = sorted.map((e) => String(e.offset));
    const force = opts.force === true;

    const sent: { xid?: string } = {};
    try {
      await this.write(group, topic, sorted, entries, partitions, offsets, force, sent);
    } catch (err) {
      if (err instanceof TributaryError && err.code !== 'storage_error') throw err;
      // No connection, so nothing was sent: refused for certain (a reset the store refuses changes nothing,
      // coordinator/group-admin.ts), even when the rows cannot be read back either.
      if (notSent.has(err as Error)) throw err;
      // COMMIT was sent and its answer never came: the rows cannot tell, since the server may not have
      // applied it yet (a read on another connection can come first). The transaction's own status can.
      if (sent.xid !== undefined) {
        const xid = sent.xid;
        const committed = await this.settleLost('commit', xid, err, () => {
          for (const p of partitions) {
            const k = rowKey(group, topic, p);
            this.lostCommits.set(k, (this.lostCommits.get(k) ?? new Set()).add(xid));
          }
        });
        if (committed) return;
      }
      // Not written for certain: COMMIT never left, or the transaction aborted. Rows that already hold these
      // offsets (another coordinator's write) are what this write would have made.
      let stored: Map<number, number>;
      try {
        // Not while a transaction whose COMMIT answer was lost may still change them (it holds their locks,
        // which this write timed out waiting for): what they read now is not what they will hold.
        for (const p of partitions) await this.lostWritesEnded(group, topic, p);
        stored = await this.current(group, topic, partitions);
      } catch {
        throw err;
      }
      if (sorted.every((e) => stored.get(e.partition) === e.offset)) return;
      // Higher already (another coordinator's write): what this write would have been told.
      const above = force ? undefined : entries.find((e) => (stored.get(e.partition) ?? -1) > e.offset);
      if (above) throw new TributaryError('offset_regression', { current: stored.get(above.partition)!, requested: above.offset, partition: above.partition });
      throw err;
    }
  }

  /**
   * A transaction whose COMMIT was sent and whose answer was lost with `err`: true once it committed, false
   * if it aborted (not written), else `lost()` records it and the write rejects with outcome=unknown. Its
   * status is waited on until it settles (up to the statement timeout); one that cannot be asked is not known.
   */
  private async settleLost(op: string, xid: string, err: unknown, lost: () => void): Promise<boolean> {
    const status = await this.xidStatus(op, xid, QUERY_TIMEOUT_MS).catch(() => undefined);
    if (status === 'committed') return true;
    if (status === 'aborted') return false;
    lost();
    throw new TributaryError('storage_error', { ...(err as TributaryError).fields, outcome: 'unknown' });
  }

  /**
   * `txid_status` of a transaction whose COMMIT was sent: 'committed', 'aborted', 'in progress' (the server
   * has not read COMMIT yet) or null (too old to tell; not expected). While in progress it is asked again,
   * backing off, for up to `waitMs` (0: asked once). A query that fails throws its storage_error.
   */
  private async xidStatus(op: string, xid: string, waitMs = 0): Promise<string | null | undefined> {
    return pollUntil(async () => (await this.query<{ status: string | null }>(op, this.sql.xidStatus, [xid])).rows[0]?.status, (status) => status !== 'in progress', waitMs);
  }

  /**
   * Refuses (storage_error) while a transaction whose COMMIT answer was lost may still commit the row:
   * 'in progress', or its status cannot be asked. Null (too old to tell) and aborted or committed: ended.
   */
  private async lostCommitsEnded(key: string): Promise<void> {
    const xids = this.lostCommits.get(key);
    for (const xid of xids ?? []) {
      const status = await this.xidStatus('fetch', xid);
      if (status === 'in progress') {
        throw new TributaryError('storage_error', { op: 'fetch', reason: `transaction ${xid}, whose COMMIT answer was lost, has not ended yet` });
      }
      xids!.delete(xid);
    }
    if (xids?.size === 0) this.lostCommits.delete(key);
  }

  /**
   * Waits (up to the statement timeout) for the transactions writing the table now to end, else refuses
   * (storage_error): one this store cannot know of (a COMMIT of this broker's from before a restart, or of
   * the coordinator a group moved from, stuck in a synchronous standby's wait or read late by the server)
   * would land after the load read the rows, and the coordinator answer the value from before it.
   */
  private async writersEnded(partitions: number[] | null): Promise<void> {
    const xids = (await this.query<{ xid: string }>('loadAll', this.sql.writers, [this.qualified, this.tableKey, partitions])).rows.map((r) => r.xid);
    if (xids.length === 0) return;
    const running = await pollUntil(async () => (await this.query<{ n: number }>('loadAll', this.sql.running, [xids])).rows[0]?.n, (n) => n === 0, QUERY_TIMEOUT_MS);
    if (running !== 0) throw new TributaryError('storage_error', { op: 'loadAll', reason: 'a transaction of another session writing the offsets table has not ended' });
  }

  /** A group's coordinator partition (partitionOf), EVERY_PARTITION when it gives none that is valid. */
  private keyOf(group: string): number {
    let p: unknown;
    try {
      p = this.partitionOf?.(group);
    } catch {
      // Not known (yet): taken as possibly any, which only widens a load's wait.
    }
    return typeof p === 'number' && Number.isSafeInteger(p) && p >= 0 && p < EVERY_PARTITION ? p : EVERY_PARTITION;
  }

  /**
   * BEGIN, and with `partitionOf` a shared advisory key (table, partition) per partition of `groups`
   * (null: every group), held to the transaction's end: a load of other partitions then knows this write
   * does not touch them (writersEnded). The keys are integers made here, inlined into BEGIN's round trip.
   */
  private begin(groups: readonly string[] | null): string {
    const parts = groups === null ? [EVERY_PARTITION] : [...new Set(groups.map((g) => this.keyOf(g)))];
    if (!this.partitionOf || parts.length === 0) return 'BEGIN';
    return `BEGIN; SELECT ${parts.map((p) => `pg_advisory_xact_lock_shared(${this.tableKey}, ${p})`).join(', ')}`;
  }

  /** What the table holds for these partitions of a group's topic. */
  private async current(group: string, topic: string, partitions: number[]): Promise<Map<number, number>> {
    const cur = await this.query<{ partition: number; next_offset: string }>('current', this.sql.current, [group, topic, partitions]);
    return new Map(cur.rows.map((r) => [Number(r.partition), toSafeNumber(r.next_offset, 'next_offset')]));
  }

  /** One commit transaction (see commit). */
  private async write(
    group: string,
    topic: string,
    sorted: OffsetEntry[],
    entries: OffsetEntry[],
    partitions: number[],
    offsets: string[],
    force: boolean,
    sent: { xid?: string },
  ): Promise<void> {
    await this.withClient('commit', async (client) => {
      // A failed statement discards the connection, which ends the transaction (withClient).
      await client.query(this.begin([group]));
      const res = await client.query<{ partition: number; xid: string }>(this.sql.upsert, [group, topic, partitions, offsets, Date.now(), force]);
      if (res.rows.length !== sorted.length) {
        const applied = new Set(res.rows.map((r) => Number(r.partition)));
        // The refused rows stay locked by this transaction, so what we read here is what refused them.
        const cur = await client.query<{ partition: number; next_offset: string }>(this.sql.current, [group, topic, partitions.filter((p) => !applied.has(p))]);
        await client.query('ROLLBACK');
        // Decoded once the transaction ended: a TributaryError keeps the connection (withClient).
        const stored = new Map(cur.rows.map((r) => [Number(r.partition), toSafeNumber(r.next_offset, 'next_offset')]));
        // Report the first refused entry in the caller's order.
        const refused = entries.find((e) => !applied.has(e.partition)) as OffsetEntry;
        throw new TributaryError('offset_regression', {
          current: stored.get(refused.partition) ?? -1,
          requested: refused.offset,
          partition: refused.partition,
        });
      }
      // From here a lost answer leaves the outcome to the server (see commit).
      sent.xid = res.rows[0]?.xid;
      await client.query('COMMIT');
    });
  }

  async fetch(group: string, topic: string, partition: number): Promise<number | undefined> {
    checkFetch(group, topic, partition);
    await this.lostWritesEnded(group, topic, partition);
    const res = await this.query<{ next_offset: string }>('fetch', this.sql.fetch, [group, topic, partition]);
    const row = res.rows[0];
    return row === undefined ? undefined : toSafeNumber(row.next_offset, 'next_offset');
  }

  async deleteGroup(group: string): Promise<void> {
    checkName('group', group);
    await this.remove('deleteGroup', this.sql.deleteGroup, [group], { groups: new Set([group]) }, [group]);
  }

  async deleteTopic(topic: string, groups?: readonly string[]): Promise<void> {
    checkDeleteTopic(topic, groups);
    await this.remove('deleteTopic', this.sql.deleteTopic, [topic, groups === undefined ? null : [...groups]], { topic, groups: groups && new Set(groups) }, groups ?? null);
  }

  /**
   * A deletion, as one transaction: an autocommitted DELETE whose answer was lost may or may not have
   * applied, and nothing could tell which. With the transaction's id, a lost COMMIT answer is settled by
   * txid_status as a commit's is; one it cannot settle rejects with outcome=unknown (the coordinator then
   * answers none of the rows until it read them back: docs/architecture.md, "PostgreSQL offsets"), and the
   * rows it covers are not read until it ended (`lostDeletes`). Failing before COMMIT was sent, it did not
   * apply: the server rolls back a transaction whose connection is gone.
   */
  private async remove(op: string, text: string, values: unknown[], covers: { topic?: string; groups?: ReadonlySet<string> }, groups: readonly string[] | null): Promise<void> {
    const sent: { xid?: string } = {};
    try {
      await this.withClient(op, async (client) => {
        // A failed statement discards the connection, which ends the transaction (withClient).
        await client.query(this.begin(groups));
        sent.xid = (await client.query<{ xid: string }>(text, values)).rows[0]?.xid;
        await client.query('COMMIT');
      });
    } catch (err) {
      const xid = sent.xid;
      if (xid === undefined || !(await this.settleLost(op, xid, err, () => this.lostDeletes.set(xid, covers)))) throw err;
    }
  }

  /** Refuses (storage_error) while a commit or deletion of the row whose COMMIT answer was lost may still apply. */
  private async lostWritesEnded(group: string, topic: string, partition: number): Promise<void> {
    await this.lostCommitsEnded(rowKey(group, topic, partition));
    await this.lostDeletesEnded((d) => (d.topic === undefined || d.topic === topic) && (d.groups === undefined || d.groups.has(group)));
  }

  /** As lostCommitsEnded, for the lost deletions `picked` selects (those covering a row, or all). */
  private async lostDeletesEnded(picked: (covers: { topic?: string; groups?: ReadonlySet<string> }) => boolean): Promise<void> {
    for (const [xid, covers] of [...this.lostDeletes]) {
      if (!picked(covers)) continue;
      if ((await this.xidStatus('fetch', xid)) === 'in progress') {
        throw new TributaryError('storage_error', { op: 'fetch', reason: `transaction ${xid}, whose COMMIT answer was lost, has not ended yet` });
      }
      this.lostDeletes.delete(xid);
    }
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    if (this.ownsPool) {
      try {
        await this.pool.end();
      } catch (err) {
        throw storageError('close', err);
      }
    }
  }

  private assertOpen(op: string): void {
    if (this.closed) throw new TributaryError('storage_error', { op, reason: 'the offset store is closed' });
  }

  private async query<R extends pg.QueryResultRow>(op: string, text: string, values: unknown[]): Promise<pg.QueryResult<R>> {
    return this.withClient(op, (client) => client.query<R>(text, values));
  }

  /**
   * Runs `fn` on a pooled connection. Database and connection failures become `storage_error`;
   * TributaryErrors raised by `fn` (offset_regression) pass through, so `fn` raises none inside a transaction.
   * A connection whose statement failed is closed, never pooled again, and no ROLLBACK is sent on it: after
   * a lost answer (a query timeout) its state is unknown and a ROLLBACK would only wait its own timeout
   * behind the unanswered statement, delaying the txid_status check (commit) by as much. Its end rolls the
   * transaction back on the server; a server that does not see it (the network is down) ends the session
   * once it has been idle in the transaction for 5 s (see the pool).
   */
  private async withClient<T>(op: string, fn: (client: pg.PoolClient) => Promise<T>): Promise<T> {
    this.assertOpen(op);
    let client: pg.PoolClient;
    try {
      client = await this.pool.connect();
    } catch (err) {
      const e = storageError(op, err);
      notSent.add(e);
      throw e;
    }
    // A checked-out connection that breaks between queries emits 'error' on the client; without a listener
    // that would crash the process. The pending or next query fails instead.
    let broken: unknown;
    const onError = (err: unknown) => {
      broken = err;
    };
    client.on('error', onError);
    try {
      const result = await fn(client);
      client.off('error', onError);
      client.release(broken instanceof Error ? broken : undefined);
      return result;
    } catch (err) {
      client.off('error', onError);
      if (err instanceof TributaryError) {
        client.release(broken instanceof Error ? broken : undefined);
        throw err;
      }
      // Closes the socket even with the timed-out statement still unanswered (pg's Client.end).
      client.release(true);
      throw storageError(op, err);
    }
  }
}

/**
 * Asks `ask` until `done` holds of its answer or `waitMs` would pass (0: asked once), backing off from 10 to
 * 500 ms between asks; returns the last answer. A failed ask throws.
 */
async function pollUntil<T>(ask: () => Promise<T>, done: (v: T) => boolean, waitMs: number): Promise<T> {
  const deadline = Date.now() + waitMs;
  for (let pause = 10; ; pause = Math.min(pause * 2, 500)) {
    const v = await ask();
    if (done(v) || Date.now() + pause > deadline) return v;
    await new Promise((resolve) => setTimeout(resolve, pause));
  }
}

/**
 * PgOffsetStore when the answer to COMMIT is lost (the connection breaks after COMMIT was sent) and
 * txid_status cannot settle the transaction yet: the commit rejects with outcome=unknown, and until the
 * transaction has ended a read of its rows must not answer the value from before it (the server may still
 * read COMMIT and apply it). A fake pool stands in for the server: one row, MVCC as seen from another
 * connection (the old value until the transaction commits).
 */
import type pg from 'pg';
import { expect, it } from 'vitest';
import { PgOffsetStore } from 'tributary-broker/coordinator/pg-offset-store.js';
import { rejection } from '../../helpers/util.js';

class FakeServer {
  /** The committed row's next_offset (undefined: no row). */
  row: string | undefined = '6';
  /** What txid_status answers for the transaction whose COMMIT answer was lost. */
  status: string | null = null;
  /** The value that transaction wrote (applied once status becomes 'committed'). */
  pendingWrite: string | undefined;

  pool(): pg.Pool {
    const server = this;
    const client = {
      on() {},
      off() {},
      release() {},
      async query(text: string, values?: unknown[]) {
        if (text === 'BEGIN' || text === 'ROLLBACK') return { rows: [] };
        if (text === 'COMMIT') throw Object.assign(new Error('Connection terminated unexpectedly'), {});
        if (text.includes('txid_status')) {
          if (server.status === 'committed' && server.pendingWrite !== undefined) server.row = server.pendingWrite;
          return { rows: [{ status: server.status }] };
        }
        if (text.startsWith('INSERT')) {
          server.pendingWrite = (values![3] as string[])[0];
          return { rows: [{ partition: 0, xid: '1234' }] };
        }
        if (text.startsWith('SELECT group_id'))
          return { rows: server.row === undefined ? [] : [{ group_id: 'g', topic: 't', partition: 0, next_offset: server.row, committed_ms: '1000' }] };
        // No other session writes the table (the load's wait for such transactions).
        if (text.includes('pg_locks')) return { rows: [] };
        if (text.startsWith('SELECT next_offset')) return { rows: server.row === undefined ? [] : [{ next_offset: server.row }] };
        if (text.startsWith('SELECT partition')) return { rows: server.row === undefined ? [] : [{ partition: 0, next_offset: server.row }] };
        throw new Error(`unexpected query ${text}`);
      },
    };
    return { connect: async () => client, on() {} } as unknown as pg.Pool;
  }
}

it('a read of an offset whose commit answer was lost waits for that transaction to end, never answering the value from before it', async () => {
  const server = new FakeServer();
  const store = new PgOffsetStore({ pool: server.pool() });
  // txid_status cannot tell yet (null here, so the commit's own wait ends at once).
  const err = await rejection(store.commit('g', 't', [{ partition: 0, offset: 8 }]));
  expect({ code: err.code, outcome: err.fields.outcome }).toEqual({ code: 'storage_error', outcome: 'unknown' });
  // The server has not read COMMIT yet: the row still shows 6 to another connection.
  server.status = 'in progress';
  const read = await store.fetch('g', 't', 0).then(
    (v) => v,
    (e: { code?: string }) => e.code,
  );
  expect(read).toBe('storage_error');
  // It commits: from now on the read answers what it wrote.
  server.status = 'committed';
  expect(await store.fetch('g', 't', 0)).toBe(8);
});

it('a load (a coordinator taking groups over) waits for a transaction whose COMMIT answer was lost, too', async () => {
  const server = new FakeServer();
  const store = new PgOffsetStore({ pool: server.pool() });
  await rejection(store.commit('g', 't', [{ partition: 0, offset: 8 }]));
  server.status = 'in progress';
  expect((await rejection(store.loadAll())).code).toBe('storage_error');
  server.status = 'committed';
  expect((await store.loadAll()).map((o) => o.offset)).toEqual([8]);
});

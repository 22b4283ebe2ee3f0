/**
 * A cluster keeping committed offsets in PostgreSQL, with the database down at the moments that matter:
 * a coordinator taking over a group's `__consumer_offsets` partition, and a broker starting. Both wait for
 * the database and carry on once it answers; neither gives up for good (docs/architecture.md,
 * "PostgreSQL offsets").
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { TributaryError } from 'tributary-protocol/errors.js';
import { TestCluster } from '../../helpers/cluster.js';
import { type PostgresServer, startPostgres } from '../../helpers/postgres.js';
import { kv } from '../groups/helpers.js';

const TOPIC = 'pgc';

describe('a cluster with the PostgreSQL offset store while the database is down', () => {
  let pgServer: PostgresServer;
  let cluster: TestCluster;

  beforeAll(async () => {
    pgServer = await startPostgres();
    cluster = await TestCluster.start(2, ['--offset-store', 'postgres', '--offset-store-postgres-url', pgServer.connectionString]);
  }, 120_000);

  afterAll(async () => {
    await cluster?.dispose();
    await pgServer?.stop();
  });

  it('a coordinator that takes a group over while the database is down loads it once the database is back; a broker started meanwhile becomes ready', async () => {
    const admin = await cluster.connect(0);
    await admin.command('CREATE', { topic: TOPIC, partitions: 1, replication_factor: 2 });
    const group = 'g-pg';
    // Right after the start the coordinator may still be loading the group's partition from the database
    // (COORDINATOR_LOADING), or hand it over (NOT_COORDINATOR): both are retryable, so find it again and retry.
    const { coord, c, join } = await cluster.waitFor('the group joined at its coordinator', async () => {
      const coord = Number(kv(await admin.command('FIND_COORDINATOR', { group })).get('coordinator_id'));
      const c = await cluster.connect(coord);
      try {
        return { coord, c, join: kv(await c.command('JOIN_GROUP', { topic: TOPIC, group, member: 'w' })) };
      } catch (err) {
        await c.close();
        if ((err as TributaryError).code === 'COORDINATOR_LOADING' || (err as TributaryError).code === 'NOT_COORDINATOR') return false;
        throw err;
      }
    });
    const member = join.get('member');
    const generation = join.get('generation');
    await c.command('SYNC_GROUP', { topic: TOPIC, group, member, generation });
    const leader = await cluster.waitFor('the topic led', async () => {
      const l = await cluster.leaderOf(TOPIC, 0);
      return l.id >= 0 ? l : false;
    });
    const lc = await cluster.connect(leader.id);
    for (let i = 0; i < 10; i++) await lc.command('PUBLISH', { topic: TOPIC, partition: 0, acks: 'all', message: `m${i}` });
    await c.command('COMMIT_OFFSET', { topic: TOPIC, group, partition: 0, offset: 5, member, generation });

    await pgServer.down();
    await cluster.broker(coord).kill();
    const other = 1 - coord;
    const oc = await cluster.connect(other);
    const fetch = () => oc.command('FETCH_OFFSET', { topic: TOPIC, group, partition: 0 });
    // The survivor leads the group's partition now and cannot load it: it says so, it does not name itself.
    const refusal = await cluster.waitFor('the survivor answers for the group', async () => {
      const e = await fetch().then(
        () => undefined,
        (err: unknown) => err as TributaryError,
      );
      return e?.code === 'COORDINATOR_LOADING' || (e?.code === 'NOT_COORDINATOR' && Number(e.fields.coordinator_id ?? e.fields.id) === other) ? e : false;
    });
    expect(refusal.code).toBe('COORDINATOR_LOADING');

    // A broker started while the database is down waits for it instead of failing its start for good.
    const restarted = cluster.broker(coord);
    const relaunched = restarted.relaunch();
    await cluster.waitFor('the restarted broker waiting for the database', async () => restarted.stderr.includes('the offset store (postgres) unavailable; retrying'));
    await pgServer.up();
    await relaunched;
    const offset = await cluster.waitFor('the group loaded from the database', async () =>
      fetch().then(
        (r) => Number(kv(r).get('offset')),
        () => false as const,
      ),
    );
    expect(offset).toBe(5);
    await cluster.waitFor('the relaunched broker ready', async () => (await cluster.broker(coord).health('/ready')).status === 200);
  }, 120_000);
});

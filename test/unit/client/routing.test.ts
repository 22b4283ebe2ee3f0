/**
 * Routing of the SDK's Cluster client against scripted servers (no broker): NOT_COORDINATOR redirects
 * and rediscovery, coordinator connection failures, bootstrap failover, the NOT_LEADER leader cache,
 * non-retriable errors, and servers that misbehave at the framing level.
 */
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { Cluster } from 'tributary-client/cluster.js';
import { Connection } from 'tributary-protocol/connection.js';
import type { RetryOptions } from 'tributary-client/retry.js';
import { encodeBatch } from 'tributary-protocol/batch.js';
import { TributaryError } from 'tributary-protocol/errors.js';
import { track, untilReal, useFakeTimersForIo } from '../../helpers/fake-timers.js';
import { MALFORMED_BATCH, ScriptedServer, deadPort } from '../../helpers/scripted-server.js';
import { rejection, sleep } from '../../helpers/util.js';

const FAST = { initialDelayMs: 1, maxDelayMs: 5 };
const GROUP = { group: 'g1' };

const notCoordinator = (port?: number) =>
  port === undefined ? 'ERROR: NOT_COORDINATOR class=routing retryable=true' : `ERROR: NOT_COORDINATOR class=routing retryable=true host=127.0.0.1 port=${port}`;
const findReply = (port: number) => `OK coordinator_id=0 host=127.0.0.1 port=${port} partition=0`;

describe('Cluster routing', () => {
  const servers: ScriptedServer[] = [];
  const clusters: Cluster[] = [];
  const unhandled: unknown[] = [];
  const onUnhandled = (r: unknown) => unhandled.push(r);

  async function server(): Promise<ScriptedServer> {
    const s = await ScriptedServer.start();
    servers.push(s);
    return s;
  }

  function cluster(brokers: string[], retry: RetryOptions = FAST): Cluster {
    const c = new Cluster({ brokers, retry, connectTimeoutMs: 1000 });
    clusters.push(c);
    return c;
  }

  beforeEach(() => {
    unhandled.length = 0;
    process.on('unhandledRejection', onUnhandled);
  });

  afterEach(async () => {
    vi.useRealTimers();
    await Promise.all(clusters.splice(0).map((c) => c.close()));
    await Promise.all(servers.splice(0).map((s) => s.close()));
    // let late socket events run before checking
    await sleep(20);
    process.off('unhandledRejection', onUnhandled);
    expect(unhandled).toEqual([]);
  });

  describe('coordinator', () => {
    it('follows NOT_COORDINATOR host/port to the other server and retries there', async () => {
      const a = await server();
      const b = await server();
      a.on('FIND_COORDINATOR', () => findReply(a.port));
      a.on('HEARTBEAT', () => notCoordinator(b.port));
      b.on('HEARTBEAT', (l) => `OK member=${l.params.get('member')} generation=3`);
      const c = cluster([a.address]);

      const reply = await c.coordinatorCommand(GROUP, 'HEARTBEAT', { group: 'g1', member: 'm1', generation: 3 });
      expect(reply).toBe('OK member=m1 generation=3');
      expect(a.count('FIND_COORDINATOR')).toBe(1);
      expect(a.count('HEARTBEAT')).toBe(1);
      expect(b.count('HEARTBEAT')).toBe(1);
      expect(b.count('FIND_COORDINATOR')).toBe(0);
      // the redirect is remembered: the next group command goes straight to B, without rediscovery
      await c.coordinatorCommand(GROUP, 'HEARTBEAT', { group: 'g1', member: 'm1', generation: 3 });
      expect(b.count('HEARTBEAT')).toBe(2);
      expect(a.count('HEARTBEAT')).toBe(1);
      expect(a.count('FIND_COORDINATOR')).toBe(1);
      expect(await c.coordinator(GROUP)).toBe(b.address);
    });

    it('without host/port, NOT_COORDINATOR re-sends FIND_COORDINATOR and retries at the new answer', async () => {
      const a = await server();
      const b = await server();
      let finds = 0;
      // first answer: A (stale), then B
      a.on('FIND_COORDINATOR', () => findReply(++finds === 1 ? a.port : b.port));
      a.on('COMMIT_OFFSET', () => notCoordinator());
      b.on('COMMIT_OFFSET', () => 'OK');
      const c = cluster([a.address]);

      await expect(c.coordinatorCommand(GROUP, 'COMMIT_OFFSET', { group: 'g1', topic: 't', partition: 0, offset: 5 })).resolves.toBe('OK');
      expect(a.count('FIND_COORDINATOR')).toBe(2);
      expect(a.count('COMMIT_OFFSET')).toBe(1);
      expect(b.count('COMMIT_OFFSET')).toBe(1);
      // The retried request is the same request.
      expect(b.received('COMMIT_OFFSET')[0]!.body.toString()).toBe(a.received('COMMIT_OFFSET')[0]!.body.toString());
    });

    it('a coordinator that cannot be reached falls back to FIND_COORDINATOR', async () => {
      const a = await server();
      const b = await server();
      const dead = await deadPort();
      let finds = 0;
      a.on('FIND_COORDINATOR', () => findReply(++finds === 1 ? dead : b.port));
      b.on('FETCH_OFFSET', () => 'OK offset=7 committed=true');
      const c = cluster([a.address]);

      await expect(c.coordinatorCommand(GROUP, 'FETCH_OFFSET', { group: 'g1', topic: 't', partition: 0 })).resolves.toBe('OK offset=7 committed=true');
      expect(a.count('FIND_COORDINATOR')).toBe(2);
      expect(b.count('FETCH_OFFSET')).toBe(1);
      expect(await c.coordinator(GROUP)).toBe(b.address);
    });

    it('a coordinator connection that drops mid-request is rediscovered and the request retried', async () => {
      const a = await server();
      const b = await server();
      let finds = 0;
      a.on('FIND_COORDINATOR', () => findReply(++finds === 1 ? a.port : b.port));
      a.on('JOIN_GROUP', () => 'close');
      b.on('JOIN_GROUP', () => 'OK generation=1 member=m-1 leader=m-1 assignments=[0]');
      const c = cluster([a.address]);
      await expect(c.coordinatorCommand(GROUP, 'JOIN_GROUP', { group: 'g1', topic: 't', member: 'm' })).resolves.toMatch(/^OK generation=1/);
      expect(a.count('JOIN_GROUP')).toBe(1);
      expect(b.count('JOIN_GROUP')).toBe(1);
      expect(a.count('FIND_COORDINATOR')).toBe(2);
    });

    it('NOT_COORDINATOR forever gives up within the retry bounds with the routing error', async () => {
      const a = await server();
      a.on('FIND_COORDINATOR', () => findReply(a.port));
      a.on('HEARTBEAT', () => notCoordinator());
      const c = cluster([a.address], { ...FAST, retries: 3 });
      const err = await rejection(c.coordinatorCommand(GROUP, 'HEARTBEAT', { group: 'g1' }));
      expect(err.code).toBe('NOT_COORDINATOR');
      expect(err.retriable).toBe(true);
      expect(a.count('HEARTBEAT')).toBe(4); // 1 + 3 retries
      expect(a.count('FIND_COORDINATOR')).toBe(4); // rediscovered before every attempt
    });

    it.each([
      ['GEN_MISMATCH', 'ERROR: GEN_MISMATCH class=fencing retryable=false current=4 requested=3'],
      ['REBALANCE_IN_PROGRESS', 'ERROR: REBALANCE_IN_PROGRESS class=fencing retryable=false group=g1 generation=4'],
      ['member_not_found', 'ERROR: member_not_found class=fencing retryable=false member=m'],
      ['offset_regression', 'ERROR: offset_regression class=conflict retryable=false current=9 requested=3'],
      ['invalid_parameter', 'ERROR: invalid_parameter class=validation retryable=false param=offset reason=x'],
    ])('a non-retriable %s is not retried and keeps the coordinator', async (code, reply) => {
      const a = await server();
      a.on('FIND_COORDINATOR', () => findReply(a.port));
      a.on('COMMIT_OFFSET', () => reply);
      const c = cluster([a.address]);
      const err = await rejection(c.coordinatorCommand(GROUP, 'COMMIT_OFFSET', { group: 'g1' }));
      expect(err.code).toBe(code);
      expect(err.retriable).toBe(false);
      expect(a.count('COMMIT_OFFSET')).toBe(1);
      expect(a.count('FIND_COORDINATOR')).toBe(1);
      expect(await c.coordinator(GROUP)).toBe(a.address);
    });

    it('retriable availability errors are retried on the same coordinator', async () => {
      const a = await server();
      a.on('FIND_COORDINATOR', () => findReply(a.port));
      let n = 0;
      a.on('SYNC_GROUP', () => (++n <= 2 ? 'ERROR: COORDINATOR_LOADING class=availability retryable=true' : 'OK generation=1 member=m leader=m assignments=[]'));
      const c = cluster([a.address]);
      await expect(c.coordinatorCommand(GROUP, 'SYNC_GROUP', { group: 'g1' })).resolves.toMatch(/^OK/);
      expect(a.count('SYNC_GROUP')).toBe(3);
    });
  });

  describe('bootstrap failover', () => {
    it('skips a dead first bootstrap address and uses the second', async () => {
      const b = await server();
      b.on('FIND_COORDINATOR', () => findReply(b.port));
      b.on('METADATA', () => `OK topic=t partitions=1 leaders=${b.address} epochs=0`);
      const c = cluster([`127.0.0.1:${await deadPort()}`, b.address]);
      expect(await c.findCoordinator(GROUP)).toBe(b.address);
      const md = await c.fetchMetadata('t');
      expect(md).toEqual({ topic: 't', partitions: 1, leaders: [b.address], epochs: [0] });
      expect(b.count('FIND_COORDINATOR')).toBe(1);
    });

    it('moves to the next bootstrap broker when the current one dies', async () => {
      const a = await server();
      const b = await server();
      for (const s of [a, b]) s.on('LIST', () => `OK count=0 topics= from=${s.port}`);
      const c = cluster([a.address, b.address]);
      expect(await c.anyCommand('LIST')).toContain(`from=${a.port}`);
      await a.close();
      servers.splice(servers.indexOf(a), 1);
      expect(await c.anyCommand('LIST')).toContain(`from=${b.port}`);
    });

    it('no bootstrap broker ever reachable: brokers_unreachable (not retriable) after bootstrapTimeoutMs, however few the retries', async () => {
      const c = new Cluster({ brokers: [`127.0.0.1:${await deadPort()}`, `127.0.0.1:${await deadPort()}`], retry: { ...FAST, retries: 2 }, connectTimeoutMs: 1000, bootstrapTimeoutMs: 200 });
      clusters.push(c);
      const err = await rejection(c.anyCommand('LIST'));
      expect(err.code).toBe('brokers_unreachable');
      expect(err.retriable).toBe(false);
    });
  });

  describe('partition leaders', () => {
    it('NOT_LEADER LEADER_IS updates the leader cache so the retry goes to the new leader', async () => {
      const a = await server();
      const b = await server();
      a.on('METADATA', () => `OK topic=t partitions=2 leaders=${a.address},${a.address} epochs=0,0`);
      a.on('CONSUME', () => `ERROR: NOT_LEADER LEADER_IS ${b.address} class=routing retryable=true`);
      b.on('CONSUME', (l) => encodeBatch({ topic: 't', partition: Number(l.params.get('partition')), acks: '1', idempotent: false, firstSequence: 0, lastSequence: 0, records: [] }));
      const c = cluster([a.address]);

      expect(await c.leaderFor('t', 1)).toBe(a.address);
      const consumeOnce = async () => {
        const conn = await c.connection(await c.leaderFor('t', 1));
        return conn.consume({ topic: 't', partition: 1, offset: 0 });
      };
      const err = await rejection(consumeOnce());
      expect(err.code).toBe('NOT_LEADER');
      c.onLeaderError('t', 1, err);
      expect(await c.leaderFor('t', 1)).toBe(b.address);
      expect(await c.leaderFor('t', 0)).toBe(a.address); // only that partition moved
      const batch = await consumeOnce();
      expect(batch.partition).toBe(1);
      expect(b.count('CONSUME')).toBe(1);
      expect(a.count('CONSUME')).toBe(1);
      expect(a.count('METADATA')).toBe(1); // the redirect did not need a metadata refresh
    });

    it('a connection failure to a leader drops the cached metadata so it is fetched again', async () => {
      const a = await server();
      const b = await server();
      let n = 0;
      a.on('METADATA', () => `OK topic=t partitions=1 leaders=${++n === 1 ? a.address : b.address} epochs=${n}`);
      const c = cluster([a.address]);
      expect(await c.leaderFor('t', 0)).toBe(a.address);
      c.onLeaderError('t', 0, new TributaryError('connection_lost'));
      expect(await c.leaderFor('t', 0)).toBe(b.address);
      expect(a.count('METADATA')).toBe(2);
      // a non-routing error leaves the cache alone
      c.onLeaderError('t', 0, new TributaryError('OFFSET_OUT_OF_RANGE'));
      expect(await c.leaderFor('t', 0)).toBe(b.address);
      expect(a.count('METADATA')).toBe(2);
    });

    it('hands out an open shared connection at once (no abort listener per call), replaces a closed one, honours an aborted signal', async () => {
      const a = await server();
      const c = cluster([a.address]);
      const ac = new AbortController();
      const first = await c.connection(a.address, ac.signal);
      const listen = vi.spyOn(ac.signal, 'addEventListener');
      expect(await c.connection(a.address, ac.signal)).toBe(first);
      expect(listen).not.toHaveBeenCalled();
      await first.close();
      const second = await c.connection(a.address, ac.signal);
      expect(second).not.toBe(first);
      expect(second.closed).toBe(false);
      ac.abort(new Error('stop'));
      await expect(c.connection(a.address, ac.signal)).rejects.toThrow('stop');
    });

    it('a partition the metadata does not list is partition_not_found after one refresh', async () => {
      const a = await server();
      a.on('METADATA', () => `OK topic=t partitions=1 leaders=${a.address} epochs=0`);
      const c = cluster([a.address]);
      const err = await rejection(c.leaderFor('t', 5));
      expect(err.code).toBe('partition_not_found');
      expect(a.count('METADATA')).toBe(2);
    });
  });

  describe('misbehaving servers', () => {
    async function direct(s: ScriptedServer): Promise<Connection> {
      const conn = await Connection.connect({ host: '127.0.0.1', port: s.port });
      return conn;
    }

    it('a malformed batch reply rejects that request with invalid_batch; the connection stays in step', async () => {
      const a = await server();
      let n = 0;
      a.on('CONSUME', () => (++n === 1 ? 'garbage' : encodeBatch({ topic: 't', partition: 0, acks: '1', idempotent: false, firstSequence: 0, lastSequence: 0, records: [] })));
      const conn = await direct(a);
      try {
        const err = await rejection(conn.consume({ topic: 't', partition: 0, offset: 0 }));
        expect(err.code).toBe('invalid_batch');
        // framing was intact, so the next reply matches the next request
        await expect(conn.consume({ topic: 't', partition: 0, offset: 0 })).resolves.toMatchObject({ topic: 't', records: [] });
        expect(MALFORMED_BATCH[0]).toBe(0xba);
      } finally {
        await conn.close();
      }
    });

    it('a huge declared frame length fails the connection with a retriable connection_lost, no allocation', async () => {
      const a = await server();
      a.on('FIND_COORDINATOR', () => findReply(a.port));
      let n = 0;
      a.on('HEARTBEAT', () => (++n === 1 ? 'huge' : 'OK member=m generation=1'));
      const conn = await direct(a);
      const first = conn.command('HEARTBEAT', { group: 'g1' });
      const pipelined = conn.command('HEARTBEAT', { group: 'g1' }); // queued behind the broken reply
      const err = await rejection(first);
      // the connection is unusable after a framing error: every pending and later request fails the same way
      expect(err.code).toBe('connection_lost');
      expect(err.retriable).toBe(true);
      expect(conn.closed).toBe(true);
      expect((await rejection(pipelined)).code).toBe('connection_lost');
      expect((await rejection(conn.command('LIST'))).code).toBe('connection_lost');

      // through the Cluster the same failure is retried on a fresh connection
      const c = cluster([a.address]);
      n = 0;
      await expect(c.coordinatorCommand(GROUP, 'HEARTBEAT', { group: 'g1' })).resolves.toBe('OK member=m generation=1');
      expect(a.connections.length).toBeGreaterThanOrEqual(3);
    });

    it('a connection closed mid-frame is a retriable connection_lost, and the Cluster retries it', async () => {
      const a = await server();
      a.on('FIND_COORDINATOR', () => findReply(a.port));
      let n = 0;
      a.on('LEAVE_GROUP', () => (++n === 1 ? 'partial' : 'OK group=g1 member=m left=true'));
      const conn = await direct(a);
      const err = await rejection(conn.command('LEAVE_GROUP', { group: 'g1' }));
      expect(err.code).toBe('connection_lost');
      expect(err.retriable).toBe(true);
      const c = cluster([a.address]);
      n = 0;
      await expect(c.coordinatorCommand(GROUP, 'LEAVE_GROUP', { group: 'g1' })).resolves.toBe('OK group=g1 member=m left=true');
      expect(a.count('LEAVE_GROUP')).toBe(3); // 1 direct + 2 through the cluster
    });

    it('a server that closes without replying: connection_lost, retried, then succeeds', async () => {
      const a = await server();
      let n = 0;
      a.on('LIST', () => (++n <= 2 ? 'close' : 'OK count=0 topics='));
      const c = cluster([a.address]);
      await expect(c.anyCommand('LIST')).resolves.toBe('OK count=0 topics=');
      expect(a.count('LIST')).toBe(3);
    });

    it('a server that never answers: closing the cluster rejects the pending request with connection_lost', async () => {
      const a = await server();
      a.on('FIND_COORDINATOR', () => findReply(a.port));
      a.on('HEARTBEAT', () => 'hang');
      const c = cluster([a.address]);
      const p = c.coordinatorCommand(GROUP, 'HEARTBEAT', { group: 'g1' });
      const settled = p.then(
        () => 'resolved',
        (e: TributaryError) => e.code,
      );
      await sleep(50);
      expect(a.count('HEARTBEAT')).toBe(1);
      await c.close();
      // The request was in flight: it fails as a lost connection (retry stops because the cluster is closed).
      expect(await settled).toMatch(/^(connection_lost|client_closed)$/);
      await expect(c.anyCommand('LIST')).rejects.toMatchObject({ code: 'client_closed' });
    });

    it('a server that accepts but never answers NEGOTIATE: connect fails after connectTimeoutMs and closes the socket', async () => {
      const a = await server();
      a.on('NEGOTIATE', () => 'hang');
      useFakeTimersForIo();
      const connecting = track(Connection.connect({ host: '127.0.0.1', port: a.port, connectTimeoutMs: 200 }));
      await untilReal(() => a.count('NEGOTIATE') === 1, 'the handshake to arrive');
      // The clock has not moved since the connect began: one tick short of connectTimeoutMs it still waits.
      await vi.advanceTimersByTimeAsync(199);
      expect(connecting.settled).toBe(false);
      await vi.advanceTimersByTimeAsync(1);
      expect(connecting.settled).toBe(true);
      const err = await rejection(connecting.promise);
      expect(err).toMatchObject({
        code: 'connection_lost',
        retriable: true,
        fields: expect.objectContaining({ cause: 'no_handshake', reason: 'nothing within 200 ms' }),
      });
      await untilReal(() => a.connections[0]!.socket.destroyed, 'the socket to be closed');

      // an abort during the handshake rejects with the abort reason at once
      const ac = new AbortController();
      const p = track(Connection.connect({ host: '127.0.0.1', port: a.port, connectTimeoutMs: 10_000, signal: ac.signal }));
      await untilReal(() => a.count('NEGOTIATE') === 2, 'the second handshake to arrive');
      ac.abort(new TributaryError('client_closed'));
      // settled with the clock where it was: no timeout can have ended it
      await untilReal(() => p.settled, 'the aborted connect to give up');
      expect((await rejection(p.promise)).code).toBe('client_closed');
    });

    it('an aborted coordinator command stops waiting for a server that never answers', async () => {
      const a = await server();
      a.on('FIND_COORDINATOR', () => findReply(a.port));
      a.on('FETCH_OFFSET', () => 'hang');
      useFakeTimersForIo();
      const c = cluster([a.address]);
      const ac = new AbortController();
      const p = track(c.coordinatorCommand(GROUP, 'FETCH_OFFSET', { group: 'g1' }, { signal: ac.signal }));
      await untilReal(() => a.count('FETCH_OFFSET') === 1, 'the FETCH_OFFSET to arrive');
      ac.abort(new TributaryError('client_closed'));
      // Settled with the clock not moved: the abort ended the wait, no timeout (the stall bound included) did.
      await untilReal(() => p.settled, 'the command to give up');
      expect((await rejection(p.promise)).code).toBe('client_closed');
      expect(a.count('FETCH_OFFSET')).toBe(1); // not retried
    });

    it('a garbage NEGOTIATE reply fails connect cleanly', async () => {
      const a = await server();
      a.on('NEGOTIATE', () => 'huge');
      const err = await rejection(Connection.connect({ host: '127.0.0.1', port: a.port }));
      expect(err.code).toBe('connection_lost');
    });
  });
});

/**
 * Connections and lookups against scripted servers that stop answering: leader lookups go over control
 * connections (never behind another reply) and skip a broker that does not answer within the stall
 * bound; a connection that hears nothing past its oldest request's own wait is failed with a retriable
 * connection_lost, unless the broker still answers a ping (a slow reply, e.g. acks=all).
 */
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { Admin } from 'tributary-client/admin.js';
import { Cluster, type ClusterOptions } from 'tributary-client/cluster.js';
import { Connection } from 'tributary-protocol/connection.js';
import { encodeBatch } from 'tributary-protocol/batch.js';
import { track, untilReal, useFakeTimersForIo } from '../../helpers/fake-timers.js';
import { ScriptedServer } from '../../helpers/scripted-server.js';
import { rejection, sleep, until } from '../../helpers/util.js';

const FAST = { initialDelayMs: 1, maxDelayMs: 5 };
const GROUP = { group: 'g1' };
const findReply = (port: number) => `OK coordinator_id=0 host=127.0.0.1 port=${port} partition=0`;
const metadataReply = (leader: string, epoch = 0) => `OK topic=t partitions=1 leaders=${leader} epochs=${epoch}`;
const emptyBatch = () => encodeBatch({ topic: 't', partition: 0, acks: '1', idempotent: false, firstSequence: 0, lastSequence: 0, records: [] });

/** `p`, or a rejection once `ms` passed (so a request that hangs fails the test instead of timing it out). */
function within<T>(ms: number, p: Promise<T>): Promise<T> {
  p.catch(() => {});
  return Promise.race([p, sleep(ms).then(() => Promise.reject(new Error(`no result within ${ms} ms`)))]);
}

describe('stallTimeoutMs', () => {
  it.each([[0], [9], [2 ** 31], [1.5], ['3000'], [null]])('%j is refused with invalid_config (Cluster, Admin)', (v) => {
    for (const make of [() => new Cluster({ brokers: ['127.0.0.1:1'], stallTimeoutMs: v as number }), () => new Admin({ brokers: ['127.0.0.1:1'], stallTimeoutMs: v as number })]) {
      expect(make).toThrow(expect.objectContaining({ code: 'invalid_config', fields: expect.objectContaining({ option: 'stallTimeoutMs' }) }));
    }
  });

  it('defaults to 3000 ms', () => {
    expect(new Cluster({ brokers: ['127.0.0.1:1'] }).stallTimeoutMs).toBe(3000);
    expect(new Cluster({ brokers: ['127.0.0.1:1'], stallTimeoutMs: 10 }).stallTimeoutMs).toBe(10);
  });
});

describe('stalled connections and leader lookups', () => {
  const servers: ScriptedServer[] = [];
  const clusters: Cluster[] = [];
  const conns: Connection[] = [];
  const unhandled: unknown[] = [];
  const onUnhandled = (r: unknown) => unhandled.push(r);

  async function server(): Promise<ScriptedServer> {
    const s = await ScriptedServer.start();
    servers.push(s);
    return s;
  }

  function cluster(brokers: string[], opts: Partial<ClusterOptions> = {}): Cluster {
    const c = new Cluster({ brokers, retry: FAST, connectTimeoutMs: 1000, ...opts });
    clusters.push(c);
    return c;
  }

  async function connect(s: ScriptedServer, stallTimeoutMs: number): Promise<Connection> {
    const conn = await Connection.connect({ host: '127.0.0.1', port: s.port, stallTimeoutMs });
    conns.push(conn);
    return conn;
  }

  beforeEach(() => {
    unhandled.length = 0;
    process.on('unhandledRejection', onUnhandled);
  });

  afterEach(async () => {
    vi.useRealTimers();
    await Promise.all(clusters.splice(0).map((c) => c.close()));
    await Promise.all(conns.splice(0).map((c) => c.close()));
    await Promise.all(servers.splice(0).map((s) => s.close()));
    await sleep(20);
    process.off('unhandledRejection', onUnhandled);
    expect(unhandled).toEqual([]);
  });

  describe('streams', () => {
    it('a STREAM that stays silent past silenceMs fails with a retriable connection_lost; keepalives keep it open', async () => {
      const s = await server();
      let pushKeepalives = true;
      s.script.STREAM = (_line, conn) => {
        const t = setInterval(() => {
          if (pushKeepalives) conn.push(Buffer.alloc(0));
        }, 20);
        conn.socket.once('close', () => clearInterval(t));
        return 'hang';
      };
      const conn = await connect(s, 1000);
      const it = conn.stream({ topic: 't', partition: 0, offset: 0, keepalive_ms: 20 }, undefined, { silenceMs: 150 });
      const next = it.next();
      next.catch(() => {});
      // Kept open by keepalives for several times silenceMs, then silent: the stream fails.
      await sleep(400);
      expect(conn.closed).toBe(false);
      pushKeepalives = false;
      const err = await within(2000, rejection(next));
      expect(err).toMatchObject({ code: 'connection_lost', retriable: true, fields: expect.objectContaining({ reason: 'stalled' }) });
      expect(s.requests.find((r) => r.command === 'STREAM')?.line?.params.get('keepalive_ms')).toBe('20');
    });

    it('a STREAM gone silent marks its broker unresponsive: the next lookup asks another broker first', async () => {
      const a = await server();
      const b = await server();
      let frozen = false;
      a.on('METADATA', () => (frozen ? 'hang' : metadataReply(a.address)));
      a.on('PROTOCOL_INFO', () => (frozen ? 'hang' : undefined));
      a.script.STREAM = (_line, conn) => {
        const t = setInterval(() => {
          if (!frozen) conn.push(Buffer.alloc(0));
        }, 20);
        conn.socket.once('close', () => clearInterval(t));
        return 'hang';
      };
      b.on('METADATA', () => metadataReply(b.address, 1));
      const c = cluster([a.address, b.address], { stallTimeoutMs: 1000 });
      expect(await c.leaderFor('t', 0)).toBe(a.address); // a answered: asked first from now on
      const conn = await c.dedicated(a.address);
      const it = conn.stream({ topic: 't', partition: 0, offset: 0, keepalive_ms: 20 }, undefined, { silenceMs: 150 });
      const next = it.next();
      next.catch(() => {});
      await sleep(100);
      frozen = true; // a frozen or cut-off broker: the stream, METADATA and pings all go unanswered
      const err = await within(2000, rejection(next));
      expect(err).toMatchObject({ code: 'connection_lost', fields: expect.objectContaining({ reason: 'stalled' }) });
      c.onLeaderError('t', 0, err);
      // Not a lookup that first waits out the stall bound on the broker that just went silent.
      expect(await within(1000, c.leaderFor('t', 0))).toBe(b.address);
      expect(a.count('METADATA')).toBe(1);
    });
    it('a broker marked unresponsive in an earlier outage is dialled at once once it leads, not re-checked first', async () => {
      const a = await server();
      const b = await server();
      let frozen = true;
      a.on('METADATA', () => metadataReply(b.address, 1));
      b.on('METADATA', () => (frozen ? 'hang' : metadataReply(b.address, 1)));
      b.on('PROTOCOL_INFO', () => (frozen ? 'hang' : undefined));
      const c = cluster([b.address, a.address], { stallTimeoutMs: 100 });
      // b does not answer its lookup: marked unresponsive; a answers, naming b. Right after the outage b
      // is looked up once more before it is dialled.
      await expect(within(2000, c.leaderFor('t', 0))).rejects.toMatchObject({ code: 'NOT_LEADER' });
      frozen = false;
      // Two stall bounds later the mark has lapsed: b is named and returned without a re-check.
      await sleep(250);
      c.invalidateMetadata('t');
      expect(await within(1000, c.leaderFor('t', 0))).toBe(b.address);
    });
  });

  describe('leader lookups', () => {
    it('METADATA and FIND_COORDINATOR do not wait behind a reply the broker holds on the shared connection', async () => {
      const a = await server();
      a.on('METADATA', () => metadataReply(a.address));
      a.on('FIND_COORDINATOR', () => findReply(a.port));
      a.on('CONSUME', () => 'hang'); // e.g. a produce waiting on the broker for its 30 s timeout
      const c = cluster([a.address]);
      const shared = await c.connection(a.address);
      shared.consume({ topic: 't', partition: 0, offset: 0 }).catch(() => {});
      await until(() => a.count('CONSUME') === 1, 3000, 'the CONSUME to arrive', 5);

      expect((await within(1000, c.fetchMetadata('t'))).leaders).toEqual([a.address]);
      expect(await within(1000, c.findCoordinator(GROUP))).toBe(a.address);
      const held = a.received('CONSUME')[0]!.conn;
      expect(a.received('METADATA')[0]!.conn).not.toBe(held);
      expect(a.received('FIND_COORDINATOR')[0]!.conn).not.toBe(held);
    });

    it('a bootstrap broker that accepts but does not answer is skipped for the next one after stallTimeoutMs', async () => {
      const frozen = await server();
      frozen.on('METADATA', () => 'hang');
      frozen.on('FIND_COORDINATOR', () => 'hang');
      const b = await server();
      b.on('METADATA', () => metadataReply(b.address));
      b.on('FIND_COORDINATOR', () => findReply(b.port));
      useFakeTimersForIo();
      const c = cluster([frozen.address, b.address], { stallTimeoutMs: 200 });

      const lookup = track(c.fetchMetadata('t'));
      await untilReal(() => frozen.count('METADATA') === 1, 'the lookup to reach the frozen broker');
      // The clock has not moved since the lookup began: one tick short of the bound, b is not asked yet.
      await vi.advanceTimersByTimeAsync(199);
      expect(lookup.settled).toBe(false);
      expect(b.count('METADATA')).toBe(0);
      await vi.advanceTimersByTimeAsync(1);
      await untilReal(() => lookup.settled, 'the lookup to move on to b at the bound');
      expect((await lookup.promise).leaders).toEqual([b.address]);
      // asked at the bound itself (the clock stands still while the lookup goes on to b)
      expect(b.received('METADATA')[0]!.at - frozen.received('METADATA')[0]!.at).toBe(200);
      // the broker that answered is asked first from now on
      c.invalidateMetadata('t');
      await c.fetchMetadata('t');
      expect(await c.findCoordinator(GROUP)).toBe(b.address);
      expect(frozen.count('METADATA')).toBe(1);
      expect(frozen.count('FIND_COORDINATOR')).toBe(0);
      expect(b.count('METADATA')).toBe(2);
    });

    it('a bootstrap broker frozen mid-handshake is skipped too (the handshake is bounded by stallTimeoutMs)', async () => {
      const frozen = await server();
      frozen.on('NEGOTIATE', () => 'hang');
      const b = await server();
      b.on('METADATA', () => metadataReply(b.address));
      useFakeTimersForIo();
      // connectTimeoutMs alone would wait 5 s
      const c = cluster([frozen.address, b.address], { stallTimeoutMs: 200, connectTimeoutMs: 5000 });
      const lookup = track(c.fetchMetadata('t'));
      await untilReal(() => frozen.count('NEGOTIATE') === 1, 'the handshake to reach the frozen broker');
      await vi.advanceTimersByTimeAsync(199);
      expect(lookup.settled).toBe(false);
      expect(b.connections).toHaveLength(0);
      await vi.advanceTimersByTimeAsync(1);
      await untilReal(() => lookup.settled, 'the lookup to move on to b at the bound');
      expect((await lookup.promise).leaders).toEqual([b.address]);
      // The handshake itself was given up at the bound (the lookup's own bound cannot close a connection
      // still in its handshake): the frozen broker's socket is closed with the clock still at 200 ms, long
      // before connectTimeoutMs.
      await untilReal(() => frozen.connections[0]!.socket.destroyed, 'the frozen handshake to be dropped');
    });

    it('when the only bootstrap broker stops answering, a broker learned from METADATA answers the lookup', async () => {
      const a = await server();
      const b = await server();
      a.on('METADATA', () => metadataReply(b.address, 1));
      b.on('METADATA', () => metadataReply(b.address, 2));
      const c = cluster([a.address], { stallTimeoutMs: 200 });
      expect((await c.fetchMetadata('t')).epochs).toEqual([1]);
      a.on('METADATA', () => 'hang');
      c.invalidateMetadata('t');
      expect((await within(2000, c.fetchMetadata('t'))).epochs).toEqual([2]);
      expect(b.count('METADATA')).toBe(1);
    });
  });

  describe('stall watchdog', () => {
    it('a broker that goes silent: pending requests fail with a retriable connection_lost after stallTimeoutMs', async () => {
      const a = await server();
      a.on('LIST', () => 'hang');
      useFakeTimersForIo();
      const conn = await connect(a, 200);
      const first = track(conn.command('LIST'));
      const behind = conn.command('HELP');
      behind.catch(() => {});
      await untilReal(() => a.count('LIST') === 1, 'the LIST to arrive');
      await vi.advanceTimersByTimeAsync(199);
      expect(first.settled).toBe(false);
      expect(conn.closed).toBe(false);
      await vi.advanceTimersByTimeAsync(1);
      expect(first.settled).toBe(true);
      const err = await rejection(first.promise);
      expect(err.code).toBe('connection_lost');
      expect(err.retriable).toBe(true);
      expect(err.fields.reason).toBe('stalled');
      expect((await rejection(behind)).code).toBe('connection_lost');
      expect(conn.closed).toBe(true);
    });

    it('long polls may be silent for their wait_ms: only silence past the wait fails the connection', async () => {
      const a = await server();
      const STALL = 150;
      // answered 1 ms before the stall bound past the wait runs out
      const held = (l: { params: Map<string, string> }) => sleep(Number(l.params.get('wait_ms')) + STALL - 1);
      a.on('CONSUME', async (l) => {
        await held(l);
        return emptyBatch();
      });
      a.on('HEARTBEAT', async (l) => {
        await held(l);
        return 'OK member=m generation=1';
      });
      useFakeTimersForIo();
      const conn = await connect(a, STALL);
      const consume = conn.consume({ topic: 't', partition: 0, offset: 0, wait_ms: 600 });
      await untilReal(() => a.count('CONSUME') === 1, 'the CONSUME to arrive');
      await vi.advanceTimersByTimeAsync(600 + STALL - 1);
      await expect(consume).resolves.toMatchObject({ records: [] });
      const heartbeat = conn.command('HEARTBEAT', { group: 'g1', member: 'm', generation: 1, wait_ms: 500 });
      await untilReal(() => a.count('HEARTBEAT') === 1, 'the HEARTBEAT to arrive');
      await vi.advanceTimersByTimeAsync(500 + STALL - 1);
      await expect(heartbeat).resolves.toBe('OK member=m generation=1');
      expect(conn.closed).toBe(false);

      // a long poll whose reply does not come by the end of its wait plus the bound is a stall
      a.on('CONSUME', () => 'hang');
      const silent = track(conn.consume({ topic: 't', partition: 0, offset: 0, wait_ms: 300 }));
      await untilReal(() => a.count('CONSUME') === 2, 'the second CONSUME to arrive');
      await vi.advanceTimersByTimeAsync(300 + STALL - 1);
      expect(silent.settled).toBe(false);
      await vi.advanceTimersByTimeAsync(1);
      expect(silent.settled).toBe(true);
      const err = await rejection(silent.promise);
      expect(err.code).toBe('connection_lost');
      expect(err.fields.reason).toBe('stalled');
    });

    it('through the Cluster: a frozen coordinator is given up after the bound and the command rerouted', async () => {
      const a = await server();
      const b = await server();
      let frozen = false;
      a.on('FIND_COORDINATOR', () => (frozen ? 'hang' : findReply(a.port)));
      a.on('COMMIT_OFFSET', () => 'hang');
      a.on('PROTOCOL_INFO', () => (frozen ? 'hang' : undefined));
      b.on('FIND_COORDINATOR', () => findReply(b.port));
      b.on('COMMIT_OFFSET', () => 'OK');
      useFakeTimersForIo();
      const c = cluster([a.address, b.address], { stallTimeoutMs: 200 });
      expect(await c.coordinator(GROUP)).toBe(a.address);
      frozen = true;
      const commit = track(c.coordinatorCommand(GROUP, 'COMMIT_OFFSET', { group: 'g1', topic: 't', partition: 0, offset: 1 }));
      await untilReal(() => a.count('COMMIT_OFFSET') === 1, 'the COMMIT_OFFSET to reach the frozen coordinator');
      // Halfway the watchdog asks the frozen broker for a sign of life (unanswered); one tick short of the
      // bound nothing is given up yet.
      await vi.advanceTimersByTimeAsync(199);
      expect(commit.settled).toBe(false);
      expect(b.count('FIND_COORDINATOR')).toBe(0);
      await vi.advanceTimersByTimeAsync(1);
      // Rerouted with the clock at the bound: not after the request's own wait.
      await untilReal(() => commit.settled, 'the command to be rerouted at the bound');
      await expect(commit.promise).resolves.toBe('OK');
      expect(a.count('PROTOCOL_INFO')).toBeGreaterThanOrEqual(1);
      expect(a.count('COMMIT_OFFSET')).toBe(1);
      expect(b.count('COMMIT_OFFSET')).toBe(1);
    });

    it('a broker that still answers a ping keeps a slow connection: an acks=all-style reply arrives late, not retried', async () => {
      const a = await server();
      a.on('LIST', async () => {
        await sleep(1200);
        return 'OK count=0 topics=';
      });
      const c = cluster([a.address], { stallTimeoutMs: 300 });
      const conn = await c.connection(a.address);
      await expect(within(3000, conn.command('LIST'))).resolves.toBe('OK count=0 topics=');
      expect(conn.closed).toBe(false);
      expect(a.count('LIST')).toBe(1);
      // the watchdog asked the broker over the control connection while the reply was pending
      expect(a.count('PROTOCOL_INFO')).toBeGreaterThanOrEqual(1);
      expect(a.received('PROTOCOL_INFO')[0]!.conn).not.toBe(a.received('LIST')[0]!.conn);
    });
  });
});

/**
 * The Admin's calls against scripted servers that stop answering: an aborted call rejects with its
 * signal's reason, as every SDK call does on abort (abort.ts), also while its connection is still being
 * established; and requestTimeoutMs bounds every call, so a broker that never answers costs a caller a
 * retriable request_timeout instead of a call that never settles.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { Admin, type AdminOptions } from 'tributary-client/admin.js';
import { ScriptedServer } from '../../helpers/scripted-server.js';
import { sleep, until } from '../../helpers/util.js';

/** What `p` rejected with, or a failure once `ms` passed (so a call that hangs fails the test instead of timing it out). */
async function rejectionWithin(ms: number, p: Promise<unknown>): Promise<unknown> {
  p.catch(() => {});
  const outcome = await Promise.race([p.then(() => ({ resolved: true }), (err: unknown) => ({ err })), sleep(ms).then(() => ({ pending: true }))]);
  if ('err' in outcome) return outcome.err;
  throw new Error('resolved' in outcome ? 'expected the call to reject' : `the call did not settle within ${ms} ms`);
}

describe('Admin calls that cannot be answered', () => {
  const servers: ScriptedServer[] = [];
  const admins: Admin[] = [];

  async function server(): Promise<ScriptedServer> {
    const s = await ScriptedServer.start();
    servers.push(s);
    return s;
  }

  function admin(options: AdminOptions): Admin {
    const a = new Admin(options);
    admins.push(a);
    return a;
  }

  afterEach(async () => {
    await Promise.all(admins.splice(0).map((a) => a.close()));
    await Promise.all(servers.splice(0).map((s) => s.close()));
  });

  describe('aborted while the connection is being established', () => {
    it('rejects with the signal reason, not connection_lost', async () => {
      const s = await server();
      s.on('NEGOTIATE', () => 'hang'); // a broker that accepts and then says nothing
      const a = admin({ brokers: [s.address] });
      const ac = new AbortController();
      const call = a.listTopics({ signal: ac.signal });
      await until(() => s.count('NEGOTIATE') === 1, 3000, 'the handshake to start', 5);
      ac.abort();
      const err = await rejectionWithin(1000, call);
      expect(err).toBe(ac.signal.reason);
      expect((err as Error).name).toBe('AbortError');
    });

    it('with several bootstrap brokers too: the abort is not a failover to the next one', async () => {
      const s = await server();
      const t = await server();
      s.on('NEGOTIATE', () => 'hang');
      const a = admin({ brokers: [s.address, t.address] });
      const ac = new AbortController();
      const call = a.describeTopic('t', { signal: ac.signal });
      await until(() => s.count('NEGOTIATE') === 1, 3000, 'the handshake to start', 5);
      const reason = new Error('caller gave up');
      ac.abort(reason);
      expect(await rejectionWithin(1000, call)).toBe(reason);
      expect(t.count('NEGOTIATE')).toBe(0);
    });

    it('a call waiting for a dial another call started stops waiting when its own signal aborts', async () => {
      const s = await server();
      s.on('NEGOTIATE', () => 'hang');
      // The first call dials (and waits out the 2 s handshake bound); the second waits for that dial.
      const a = admin({ brokers: [s.address], connectTimeoutMs: 2000, retry: { retries: 0 } });
      const first = a.listTopics();
      first.catch(() => {});
      await until(() => s.count('NEGOTIATE') === 1, 3000, 'the handshake to start', 5);
      const ac = new AbortController();
      const second = a.clusterStatus({ signal: ac.signal });
      await sleep(50);
      ac.abort();
      expect(await rejectionWithin(1000, second)).toBe(ac.signal.reason);
      expect(s.count('NEGOTIATE')).toBe(1);
    });
  });
  describe('requestTimeoutMs', () => {
    const LONG_RETRY = { retries: 1_000_000, initialDelayMs: 1, maxDelayMs: 20, maxElapsedMs: 600_000 };

    it.each([[0], [2 ** 31], [1.5], ['100'], [null]])('%j is refused with invalid_config', (v) => {
      expect(() => new Admin({ brokers: ['127.0.0.1:1'], requestTimeoutMs: v as number })).toThrow(
        expect.objectContaining({ code: 'invalid_config', fields: expect.objectContaining({ option: 'requestTimeoutMs' }) }),
      );
    });

    it('a reply a live broker never sends: the call rejects with a retriable request_timeout, and the next call is not stuck behind it', async () => {
      const s = await server();
      let hang = true;
      s.on('LIST', () => (hang ? 'hang' : 'OK topics=a,b'));
      s.on('PROTOCOL_INFO', () => 'OK protocol_version=1'); // alive: the stall watchdog leaves the connection alone
      const a = admin({ brokers: [s.address], stallTimeoutMs: 100, requestTimeoutMs: 300 });
      const started = Date.now();
      const err = await rejectionWithin(3000, a.listTopics());
      expect(err).toMatchObject({ code: 'request_timeout', retriable: true, fields: expect.objectContaining({ timeoutMs: 300 }) });
      expect((err as Error).message).toBe('admin LIST: no answer within 300 ms (requestTimeoutMs)');
      expect(Date.now() - started).toBeGreaterThanOrEqual(290);
      // The connection that owed the reply was dropped: the next LIST goes out on a new one.
      hang = false;
      expect(await a.listTopics()).toEqual(['a', 'b']);
      const lists = s.received('LIST');
      expect(lists).toHaveLength(2);
      expect(lists[1]!.conn).not.toBe(lists[0]!.conn);
    });

    it('a frozen broker (nothing answered, not even a handshake) bounds the call whatever the retry options', async () => {
      const s = await server();
      let frozen = false;
      s.on('NEGOTIATE', () => (frozen ? 'hang' : undefined));
      s.on('PROTOCOL_INFO', () => (frozen ? 'hang' : undefined));
      s.on('DESCRIBE', () => (frozen ? 'hang' : '{"topic":"t","partitions":[]}'));
      const a = admin({ brokers: [s.address], stallTimeoutMs: 100, requestTimeoutMs: 500, retry: LONG_RETRY });
      expect((await a.describeTopic('t')).topic).toBe('t');
      frozen = true; // as a SIGSTOPped process: TCP still accepted, nothing answered
      const started = Date.now();
      const err = await rejectionWithin(3000, a.describeTopic('t'));
      expect(err).toMatchObject({ code: 'request_timeout', retriable: true });
      expect(Date.now() - started).toBeGreaterThanOrEqual(490);
    });

    it('group commands (to the coordinator) and readRecords (from the leader, plus its waitMs) are bounded too', async () => {
      const s = await server();
      s.on('FIND_COORDINATOR', () => `OK coordinator_id=0 host=127.0.0.1 port=${s.port} partition=0`);
      s.on('METADATA', () => `OK topic=t partitions=1 leaders=${s.address} epochs=0`);
      s.on('GROUP_STATUS', () => 'hang');
      s.on('CONSUME', () => 'hang');
      s.on('PROTOCOL_INFO', () => 'OK protocol_version=1');
      const a = admin({ brokers: [s.address], stallTimeoutMs: 100, requestTimeoutMs: 200, retry: LONG_RETRY });
      expect(await rejectionWithin(3000, a.describeGroup('g'))).toMatchObject({ code: 'request_timeout' });
      const started = Date.now();
      expect(await rejectionWithin(3000, a.readRecords({ topic: 't', partition: 0, offset: 0, waitMs: 400 }))).toMatchObject({ code: 'request_timeout', fields: expect.objectContaining({ timeoutMs: 600 }) });
      expect(Date.now() - started).toBeGreaterThanOrEqual(590);
    });

    it('the caller aborting first still rejects with its reason', async () => {
      const s = await server();
      s.on('LIST', () => 'hang');
      s.on('PROTOCOL_INFO', () => 'OK protocol_version=1');
      const a = admin({ brokers: [s.address], requestTimeoutMs: 5000 });
      const ac = new AbortController();
      const call = a.listTopics({ signal: ac.signal });
      await until(() => s.count('LIST') === 1, 3000, 'the LIST to arrive', 5);
      ac.abort();
      expect(await rejectionWithin(1000, call)).toBe(ac.signal.reason);
    });
  });
});

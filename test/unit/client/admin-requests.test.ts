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
});

/**
 * The password-check queue (two checks at once) is broker-wide: a check still waiting when its connection
 * closes leaves the queue without running, so a client that queued checks and hung up does not delay
 * everyone else's login by them; waiting checks are served fairly (docs/security.md "Login fairness").
 */

import { failedLoginLog } from 'tributary-broker/broker/auth-queue.js';
import type { ConnectionContext } from 'tributary-broker/broker/command-context.js';
import { hashToken, Limiter, Security, type UserEntry } from 'tributary-broker/broker/security.js';
import { resolveConfig } from 'tributary-broker/common/config.js';
import { createLogger } from 'tributary-broker/common/logger.js';
import { describe, expect, it } from 'vitest';
import { until } from '../../helpers/util.js';

function gate(): { open: () => void; opened: Promise<void> } {
  let open!: () => void;
  const opened = new Promise<void>((r) => (open = r));
  return { open, opened };
}

describe('the password-check queue', () => {
  it('drops a waiting check whose connection closed; the running one and those behind it go on', async () => {
    const limiter = new Limiter(1, 4);
    const ran: string[] = [];
    const first = gate();
    const running = limiter.run(async () => {
      ran.push('running');
      await first.opened;
    });
    const closed = new AbortController();
    const dropped = limiter.run(async () => void ran.push('dropped'), closed.signal);
    const after = limiter.run(async () => void ran.push('after'));
    expect(limiter.queued).toBe(2);
    closed.abort();
    await expect(dropped).rejects.toMatchObject({ code: 'throttled' });
    expect(limiter.queued).toBe(1);
    first.open();
    await running;
    await after;
    expect(ran).toEqual(['running', 'after']);
    // A check of a connection already closed does not queue at all.
    await expect(limiter.run(async () => void ran.push('late'), closed.signal)).rejects.toMatchObject({ code: 'throttled' });
    expect(ran).toEqual(['running', 'after']);
  });

  it("AUTH's check, queued behind two others, is dropped when its connection closes: no session, the right token notwithstanding", async () => {
    const token = 'the-token-0123456789';
    const users: Record<string, UserEntry> = { u: { ...hashToken(token), permissions: ['topic.read'] } };
    const sec = new Security(resolveConfig({ authentication: true, users }), createLogger('silent'));
    const busy = [0, 1].map(() => sec.authenticate({ features: new Set(), principal: undefined, remote: 'busy' } as ConnectionContext, 'u', token));
    const closed = new AbortController();
    const c = { features: new Set(), principal: undefined, remote: 'gone', closedSignal: closed.signal } as ConnectionContext;
    const queued = sec.authenticate(c, 'u', token);
    closed.abort();
    await expect(queued).rejects.toMatchObject({ code: 'throttled' });
    await Promise.all(busy);
    expect(c.principal).toBeUndefined();
    expect(sec.authorize('LIST', c, undefined)).toMatchObject({ code: 'authentication_required' });
  });

  it('serves waiting checks fairly: addresses take turns, first checks newest first before retries, one per connection', async () => {
    const limiter = new Limiter(1, 100);
    const ran: string[] = [];
    const first = gate();
    const running = limiter.run(async () => void (await first.opened));
    const owner = (source: string, name: string, retry = false) => ({ source, key: { name }, retry });
    const queued = [
      ['a', 'a-retry1', true],
      ['a', 'a-first1', false],
      ['a', 'a-first2', false],
      ['a', 'a-retry2', true],
      ['b', 'b-first', false],
    ].map(([source, name, retry]) =>
      limiter.run(async () => void ran.push(name as string), undefined, owner(source as string, name as string, retry as boolean)),
    );
    const key = { name: 'busy' };
    const busy = limiter.run(async () => {}, undefined, { source: 'c', key });
    await expect(limiter.run(async () => {}, undefined, { source: 'c', key })).rejects.toMatchObject({ code: 'throttled' });
    first.open();
    await running;
    await Promise.all([...queued, busy]);
    expect(ran).toEqual(['a-first2', 'b-first', 'a-first1', 'a-retry1', 'a-retry2']);
  });

  it('logs failed logins one line each up to the burst, then one summary per interval', async () => {
    const lines: Array<[Record<string, unknown>, string]> = [];
    const logger = {
      warn: (f: Record<string, unknown>, m: string) => void lines.push([f, m]),
    } as unknown as import('tributary-broker/common/logger.js').Logger;
    const log = failedLoginLog(logger, 3, 50);
    for (let i = 0; i < 10; i++) log({ i });
    expect(lines).toEqual([0, 1, 2].map((i) => [{ i }, 'authentication failed']));
    await until(() => lines.length === 4, 5000, 'the summary line');
    expect(lines.at(-1)).toEqual([{ suppressed: 7, intervalMs: 50 }, 'authentication failures not logged one by one']);
  });
});

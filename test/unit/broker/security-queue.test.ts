/**
 * The password-check queue (two checks at once, 256 waiting) is broker-wide: a check still waiting when its
 * connection closes leaves the queue without running, so a client that queued checks and hung up does not
 * delay everyone else's login by them.
 */
import { describe, expect, it } from 'vitest';
import { Limiter, Security, type UserEntry, hashToken } from 'tributary-broker/broker/security.js';
import type { ConnectionContext } from 'tributary-broker/broker/command-context.js';
import { resolveConfig } from 'tributary-broker/common/config.js';
import { createLogger } from 'tributary-broker/common/logger.js';

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
});

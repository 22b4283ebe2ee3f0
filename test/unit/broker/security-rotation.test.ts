/**
 * A token check that spans a reload of the users (SIGHUP): AUTH's scrypt runs on the thread pool behind a
 * queue, and a SCRAM exchange reads the keys at its first message and checks the proof at its last. A user
 * rotated or removed meanwhile must not end up authenticated, with the new entry's rights, by the old token.
 */
import { describe, expect, it } from 'vitest';
import { Security, type UserEntry, hashToken, scramEntry } from 'tributary-broker/broker/security.js';
import type { ConnectionContext } from 'tributary-broker/broker/command-context.js';
import { resolveConfig } from 'tributary-broker/common/config.js';
import { createLogger } from 'tributary-broker/common/logger.js';

const entry = (token: string): UserEntry => ({ ...hashToken(token), permissions: ['topic.read'], scram: scramEntry(token) });
const connection = (): ConnectionContext => ({ features: new Set(), principal: undefined, remote: 'test' }) as ConnectionContext;

function security(users: Record<string, UserEntry>): Security {
  return new Security(resolveConfig({ authentication: true, users }), createLogger('silent'));
}

describe('a token check across a reload of the users', () => {
  it('AUTH with the old token, answered after the rotation, fails and leaves the connection unauthenticated', async () => {
    const sec = security({ rot: entry('old-token-0123456789') });
    const c = connection();
    const auth = sec.authenticate(c, 'rot', 'old-token-0123456789');
    sec.reload({ rot: entry('new-token-0123456789') }, {}, {});
    await expect(auth).rejects.toMatchObject({ code: 'authentication_failed' });
    expect(sec.authorize('LIST', c, undefined)).toMatchObject({ code: 'authentication_required' });
    // The new token works.
    await sec.authenticate(c, 'rot', 'new-token-0123456789');
    expect(sec.authorize('LIST', c, undefined)).toBeUndefined();
  });

  it('AUTH of a user removed, then added again with another token, while it was checked: refused', async () => {
    const sec = security({ gone: entry('first-token-0123456789') });
    const c = connection();
    const auth = sec.authenticate(c, 'gone', 'first-token-0123456789');
    sec.reload({}, {}, {});
    sec.reload({ gone: entry('someone-elses-0123456789') }, {}, {});
    await expect(auth).rejects.toMatchObject({ code: 'authentication_failed' });
    expect(sec.authorize('LIST', c, undefined)).toMatchObject({ code: 'authentication_required' });
  });

  it('a SCRAM check passed with keys read before a rotation or removal settles as a failure', () => {
    const sec = security({ rot: entry('old-token-0123456789') });
    const { credential } = sec.scramKeys('rot');
    expect(credential).toBeDefined();
    sec.reload({ rot: entry('new-token-0123456789') }, {}, {});
    const c = connection();
    expect(() => sec.settle(c, 'rot', credential!)).toThrow(expect.objectContaining({ code: 'authentication_failed' }));
    expect(sec.authorize('LIST', c, undefined)).toMatchObject({ code: 'authentication_required' });
    const unchanged = sec.scramKeys('rot');
    sec.settle(c, 'rot', unchanged.credential!);
    expect(sec.authorize('LIST', c, undefined)).toBeUndefined();
    sec.reload({}, {}, {});
    expect(sec.authorize('LIST', c, undefined)).toMatchObject({ code: 'authentication_required' });
  });
});

/**
 * The gate's group ACL check (docs/security.md, "Group ACLs"): every command naming a group, on either
 * port (the Kafka port authorizes the same commands with the API's group id), is refused with
 * NOT_AUTHORIZED_FOR_GROUP for a principal the group's ACL does not list; admin passes; a reload applies.
 */
import { describe, expect, it } from 'vitest';
import { parseLine } from 'tributary-protocol/command.js';
import { Security, type UserEntry, hashToken } from 'tributary-broker/broker/security.js';
import type { ConnectionContext } from 'tributary-broker/broker/command-context.js';
import { type Permission, resolveConfig } from 'tributary-broker/common/config.js';
import { createLogger } from 'tributary-broker/common/logger.js';

const ALL: Permission[] = ['topic.read', 'topic.write', 'group', 'transaction'];
const users: Record<string, UserEntry> = {
  alice: { ...hashToken('alice-token-0123456789'), permissions: ALL },
  bob: { ...hashToken('bob-token-0123456789'), permissions: ALL },
  root: { ...hashToken('root-token-0123456789'), permissions: ['admin'] },
};

/** Every main-port command that names a group, with the other parameters it needs to get past the gate. */
const GROUP_COMMANDS = [
  'JOIN_GROUP topic=t group=G member=',
  'SYNC_GROUP topic=t group=G member=m generation=1',
  'HEARTBEAT topic=t group=G member=m generation=1',
  'LEAVE_GROUP topic=t group=G member=m',
  'FETCH_OFFSET topic=t group=G partition=0',
  'COMMIT_OFFSET topic=t group=G member=m generation=1 partition=0 offset=1',
  'BATCH_COMMIT topic=t group=G member=m generation=1 P0:1',
  'CONSUME topic=t partition=0 offset=0 group=G',
  'STREAM topic=t partition=0 offset=0 group=G',
  'GROUP_STATUS group=G',
  'FIND_COORDINATOR group=G',
  'SEND_OFFSETS_TO_TXN transactional_id=x topic=t group=G P0:1',
];
const ADMIN_GROUP_COMMANDS = ['DELETE_GROUP group=G', 'RESET_OFFSETS group=G topic=t to=earliest'];

function setup(groupAcls: Record<string, string[]>) {
  const sec = new Security(resolveConfig({ authentication: true, users, groupAcls }), createLogger('silent'));
  const as = (principal: string): ConnectionContext => {
    const c = { features: new Set(), principal: undefined, remote: 'test' } as unknown as ConnectionContext;
    sec.settle(c, principal, users[principal]!.hash);
    return c;
  };
  const check = (c: ConnectionContext, line: string, group: string) => {
    const req = parseLine(line.replace('group=G', `group=${group}`));
    return sec.authorize(req.head, c, req);
  };
  return { sec, as, check };
}

describe('group ACLs at the gate', () => {
  it('every command naming a group is refused for a principal the ACL does not list, and passes for one it lists', () => {
    const { as, check } = setup({ 'alice-*': ['alice'] });
    const alice = as('alice');
    const bob = as('bob');
    for (const line of GROUP_COMMANDS) {
      expect(check(alice, line, 'alice-orders'), line).toBeUndefined();
      const refused = check(bob, line, 'alice-orders');
      expect(refused?.code, line).toBe('NOT_AUTHORIZED_FOR_GROUP');
      expect(refused?.message, line).toMatch(/^NOT_AUTHORIZED_FOR_GROUP group=alice-orders principal=bob$/);
      // A group no entry matches: as without group ACLs.
      expect(check(bob, line, 'bob-orders'), line).toBeUndefined();
    }
  });

  it('admin passes every group ACL, including for the admin-only group commands', () => {
    const { as, check } = setup({ 'alice-*': ['alice'] });
    const root = as('root');
    for (const line of [...GROUP_COMMANDS, ...ADMIN_GROUP_COMMANDS]) expect(check(root, line, 'alice-orders'), line).toBeUndefined();
    // Without admin they stay refused for the permission, before any ACL.
    for (const line of ADMIN_GROUP_COMMANDS) expect(check(as('alice'), line, 'alice-orders')?.code, line).toBe('NOT_AUTHORIZED_FOR_OPERATION');
  });

  it("'*' lets every authenticated principal use the group; a missing group permission is refused as before", () => {
    const { as, check } = setup({ shared: ['*'] });
    expect(check(as('bob'), 'JOIN_GROUP topic=t group=G member=', 'shared')).toBeUndefined();
    const { as: as2, check: check2 } = setup({});
    expect(check2(as2('bob'), 'LIST_GROUPS', 'x')).toBeUndefined();
  });

  it('a reload that adds or withdraws a principal applies from the next request', () => {
    const { sec, as, check } = setup({ team: ['alice'] });
    const bob = as('bob');
    const line = 'HEARTBEAT topic=t group=G member=m generation=1';
    expect(check(bob, line, 'team')?.code).toBe('NOT_AUTHORIZED_FOR_GROUP');
    sec.reload(users, {}, { team: ['alice', 'bob'] });
    expect(check(bob, line, 'team')).toBeUndefined();
    sec.reload(users, {}, { team: ['alice'] });
    expect(check(bob, line, 'team')?.code).toBe('NOT_AUTHORIZED_FOR_GROUP');
    expect(sec.snapshot().groupAcls).toEqual({ team: ['alice'] });
  });

  it('with authentication off nothing is checked', () => {
    const sec = new Security(resolveConfig({}), createLogger('silent'));
    const c = { features: new Set(), principal: undefined, remote: 'test' } as unknown as ConnectionContext;
    const req = parseLine('JOIN_GROUP topic=t group=g member=');
    expect(sec.authorize(req.head, c, req)).toBeUndefined();
  });
});

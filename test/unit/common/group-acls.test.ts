/**
 * Group ACL matching and the `groupAcls` setting (docs/security.md, "Group ACLs"): an exact group id beats
 * any prefix, the longest prefix wins, `*` lists any principal, and the setting is refused with a reason
 * naming the key when it is malformed or authentication is off.
 */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { groupAclFor, groupAllowed } from 'tributary-broker/common/group-acls.js';
import { type ConfigResult, loadBrokerConfig } from 'tributary-broker/cli/config-loader.js';
import { removeDirSync, tempDirSync } from '../../helpers/util.js';

const dir = tempDirSync('tributary-group-acls-');
afterAll(() => removeDirSync(dir));

function load(text: string): ConfigResult {
  const path = join(dir, `c${Math.random().toString(36).slice(2)}.yaml`);
  writeFileSync(path, text);
  return loadBrokerConfig({ configFile: path, env: {} });
}

describe('group ACL matching', () => {
  const acls = {
    'billing-*': ['billing'],
    'billing-audit-*': ['audit'],
    'billing-audit-main': ['auditor'],
    shared: ['*'],
  };

  it('an exact group id beats every prefix that also matches it', () => {
    expect(groupAclFor(acls, 'billing-audit-main')).toEqual(['auditor']);
    expect(groupAllowed(acls, 'billing-audit-main', 'audit')).toBe(false);
    expect(groupAllowed(acls, 'billing-audit-main', 'auditor')).toBe(true);
  });

  it('the longest matching prefix wins over a shorter one', () => {
    expect(groupAclFor(acls, 'billing-audit-2')).toEqual(['audit']);
    expect(groupAllowed(acls, 'billing-audit-2', 'billing')).toBe(false);
    expect(groupAclFor(acls, 'billing-x')).toEqual(['billing']);
    // The order of the keys does not matter.
    const reversed = Object.fromEntries(Object.entries(acls).reverse());
    expect(groupAclFor(reversed, 'billing-audit-2')).toEqual(['audit']);
    // A prefix matches the group named by the prefix itself.
    expect(groupAclFor(acls, 'billing-')).toEqual(['billing']);
  });

  it("'*' as a principal lets any principal use the group; a group no entry matches is not restricted", () => {
    expect(groupAllowed(acls, 'shared', 'anyone')).toBe(true);
    expect(groupAclFor(acls, 'other')).toBeUndefined();
    expect(groupAllowed(acls, 'other', 'anyone')).toBe(true);
    expect(groupAllowed(acls, 'billing', 'anyone')).toBe(true); // "billing" is not under "billing-*"
  });

  it("'*' as a key is the empty prefix: every group, the shortest match", () => {
    const all = { '*': ['ops'], 'team-*': ['team'] };
    expect(groupAclFor(all, 'anything')).toEqual(['ops']);
    expect(groupAclFor(all, 'team-1')).toEqual(['team']);
    expect(groupAllowed(all, 'anything', 'team')).toBe(false);
    // An empty list under '*': every group no other entry names is refused to all but admin.
    const closed = { '*': [], 'team-*': ['team'] };
    expect(groupAllowed(closed, 'stray', 'team')).toBe(false);
    expect(groupAllowed(closed, 'team-2', 'team')).toBe(true);
  });

  it('an exact entry is not taken for a prefix: "a" does not match "ab"', () => {
    expect(groupAclFor({ a: ['x'] }, 'ab')).toBeUndefined();
  });
});

describe('the groupAcls setting', () => {
  it('is read from a config file with authentication on', () => {
    const r = load("authentication: true\ngroupAcls:\n  'billing-*': [billing]\n  shared: ['*']\n");
    expect(r.ok && r.config.groupAcls).toEqual({ 'billing-*': ['billing'], shared: ['*'] });
  });

  it("refuses a '*' inside a key, a value that is not a list of principals and an empty principal, naming the key", () => {
    const cases: Array<[string, RegExp]> = [
      ["  'a*b': [x]\n", /^invalid config: groupAcls\.a\*b: '\*' may only end a key/],
      ['  g: billing\n', /^invalid config: groupAcls\.g: /],
      ["  g: ['']\n", /^invalid config: groupAcls\.g\.0: /],
      ['  g:\n    read: [x]\n', /^invalid config: groupAcls\.g: /],
    ];
    for (const [entry, message] of cases) {
      const r = load(`authentication: true\ngroupAcls:\n${entry}`);
      expect(r.ok ? [] : r.errors, entry).toEqual([expect.stringMatching(message)]);
    }
  });

  it('refuses a misspelt key rather than ignore it', () => {
    const r = load('authentication: true\ngroupAcl:\n  g: [x]\n');
    expect(r.ok ? [] : r.errors.join('\n')).toMatch(/groupAcl\b.*groupAcls/);
  });

  it('is refused with authentication off: nothing would check it', () => {
    const r = load('groupAcls:\n  g: [x]\n');
    expect(r.ok ? [] : r.errors).toEqual([expect.stringMatching(/^invalid config: groupAcls: is for authentication \(--authentication\), which is off/)]);
  });
});

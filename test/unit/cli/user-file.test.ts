/**
 * `tributary user` reads the config file as the broker does and never writes one the broker would refuse:
 * a key given twice is refused (JSON.parse kept the last and the rewrite lost the other), what would be
 * written is checked as the broker checks a file's settings, and `user list` names a malformed entry by
 * its path instead of printing JavaScript's errors. Never a hash or salt in the messages. In-process.
 */
import fs from 'node:fs';
import path from 'node:path';
import { afterEach, beforeEach, expect, it } from 'vitest';
import { loadBrokerConfig } from 'tributary-broker/cli/config-loader.js';
import { cliInProcess as cli } from '../../helpers/cli-in-process.js';
import { removeDir, tempDir } from '../../helpers/util.js';

const HASH = 'c2VjcmV0LWhhc2gtdmFsdWU';
const SALT = 'c2FsdHktc2FsdC12YWx1ZQ';

let dir: string;
beforeEach(async () => {
  dir = await tempDir('trib-user-file-');
});
afterEach(async () => {
  await removeDir(dir);
});

function file(name: string, text: string): string {
  const f = path.join(dir, name);
  fs.writeFileSync(f, text);
  return f;
}

it('user add refuses a file with a key twice, as the broker does, and leaves it as it was', async () => {
  for (const [name, text] of [
    ['dup.json', '{"port": 1, "port": 2}'],
    ['dup-users.json', `{"users": {"a": {"hash": "${HASH}", "salt": "${SALT}"}, "a": {"hash": "${HASH}", "salt": "${SALT}"}}}`],
    ['dup.yaml', 'port: 1\nport: 2\n'],
  ] as const) {
    const f = file(name, text);
    const r = await cli('user', 'add', 'bob', '--permissions', 'admin', '--token', 'tok', '--config', f);
    // Before (JSON): exit 0 and the file rewritten as {"port": 2, "users": ...}.
    expect([r.code, r.stderr], name).toEqual([1, expect.stringMatching(new RegExp(`^error: cannot update ${f}: the broker would refuse it:\\n  cannot parse config file .*Map keys must be unique`))]);
    expect(fs.readFileSync(f, 'utf8')).toBe(text);
    expect(r.stderr).not.toContain(HASH);
    const b = await cli('broker', 'start', '--config', f);
    expect(b.code, name).toBe(2); // the broker refuses it too
  }
});

it('user add and remove never write a file the broker would refuse, naming why; a broken entry can be removed or replaced', async () => {
  const typo = file('typo.yaml', 'prot: 9000\n');
  const r = await cli('user', 'add', 'bob', '--permissions', 'admin', '--token', 'tok', '--config', typo);
  expect([r.code, r.stderr]).toEqual([1, `error: cannot update ${typo}: the broker would refuse it:\n  prot: unknown key (did you mean port?) (file ${typo}, line 1, column 1)\n`]);
  expect(fs.readFileSync(typo, 'utf8')).toBe('prot: 9000\n');

  const broken = `users:\n  eve:\n    hash: ${HASH}\n    salt: ${SALT}\n    permissions: admin\n  ok:\n    hash: ${HASH}\n    salt: ${SALT}\n`;
  const f = file('broken.yaml', broken);
  const other = await cli('user', 'add', 'bob', '--permissions', 'admin', '--token', 'tok', '--config', f);
  expect([other.code, other.stderr]).toEqual([1, `error: cannot update ${f}: the broker would refuse it:\n  users.eve.permissions: must be an array (file ${f}, line 1, column 1)\n`]);
  expect(fs.readFileSync(f, 'utf8')).toBe(broken);
  expect((await cli('user', 'remove', 'eve', '--config', f)).code).toBe(0);
  expect((await cli('user', 'list', '--config', f)).stdout).toBe('ok permissions= scram=no\n');
  fs.writeFileSync(f, broken);
  expect((await cli('user', 'add', 'eve', '--permissions', 'admin', '--token', 'tok', '--config', f)).code).toBe(0);
  // Users are in force only with authentication on (without it a broker refuses them as unused).
  fs.appendFileSync(f, 'authentication: true\n');
  expect(loadBrokerConfig({ configFile: f, env: {} })).toMatchObject({ ok: true });
});

it('user list names a malformed entry by its path, under its own verb, never printing JS errors or hashes', async () => {
  const cases: Array<[string, string, string]> = [
    // Before: "error: cannot update ...: (u.permissions ?? []).join is not a function".
    ['perm.yaml', `users:\n  bob:\n    hash: ${HASH}\n    salt: ${SALT}\n    permissions: admin\n`, 'users.bob.permissions: must be an array'],
    // Before: "error: cannot update ...: Cannot read properties of null (reading 'permissions')".
    ['null.yaml', 'users:\n  bob: null\n', 'users.bob: must be an object'],
    ['unknown.json', `{"users": {"bob": {"hash": "${HASH}", "salt": "${SALT}", "extra": 1}}}`, 'users.bob.extra: unknown key'],
    ['perm-value.json', `{"users": {"bob": {"hash": "${HASH}", "salt": "${SALT}", "permissions": ["root"]}}}`, 'users.bob.permissions.0: must be one of'],
  ];
  for (const [name, text, problem] of cases) {
    const f = file(name, text);
    const r = await cli('user', 'list', '--config', f);
    expect(r.code, name).toBe(1);
    expect(r.stderr, name).toMatch(new RegExp(`^error: cannot list the users of ${f}: the broker would refuse it:\\n  ${problem.replace(/[.()]/g, '\\$&')}`));
    expect(r.stderr, name).not.toMatch(/is not a function|Cannot read properties|cannot update/);
    expect(r.stderr).not.toContain(HASH);
    expect(r.stderr).not.toContain(SALT);
    expect(fs.readFileSync(f, 'utf8')).toBe(text);
  }
});

it('an empty file is no settings, for add as for the broker', async () => {
  for (const name of ['empty.yaml', 'empty.json']) {
    const f = file(name, '\n');
    expect((await cli('user', 'add', 'bob', '--permissions', 'admin', '--token', 'tok', '--config', f)).code, name).toBe(0);
    expect((await cli('user', 'list', '--config', f)).stdout).toBe('bob permissions=admin scram=yes\n');
  }
});

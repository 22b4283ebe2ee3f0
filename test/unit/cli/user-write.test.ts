/**
 * `tributary user` writes the config file through a new temp file of a random name, created exclusively
 * with mode 0600 (docs/security.md): a symlink planted at the old predictable name (`<file>.<pid>.tmp`) is
 * not followed, and the config ends 0600 whatever mode it had. In-process, so `process.pid` is the CLI's.
 */
import fs from 'node:fs';
import path from 'node:path';
import { afterEach, beforeEach, expect, it } from 'vitest';
import { cliInProcess as cli } from '../../helpers/cli-in-process.js';
import { removeDir, tempDir } from '../../helpers/util.js';

let dir: string;
beforeEach(async () => {
  dir = await tempDir('trib-user-write-');
});
afterEach(async () => {
  await removeDir(dir);
});

it('does not follow a symlink planted at the old temp name; the config is a regular 0600 file', async () => {
  const config = path.join(dir, 'broker.yaml');
  fs.writeFileSync(config, 'authentication: true\n', { mode: 0o644 });
  fs.chmodSync(config, 0o644);
  const victim = path.join(dir, 'victim.txt');
  fs.writeFileSync(victim, 'do not touch\n');
  const planted = `${config}.${process.pid}.tmp`;
  fs.symlinkSync(victim, planted);

  const r = await cli('user', 'add', 'bob', '--permissions', 'admin', '--config', config);
  expect(r.code, r.stderr).toBe(0);
  expect(fs.readFileSync(victim, 'utf8')).toBe('do not touch\n');
  expect(fs.lstatSync(planted).isSymbolicLink()).toBe(true);
  const st = fs.lstatSync(config);
  expect(st.isFile()).toBe(true);
  expect(st.mode & 0o777).toBe(0o600);
  expect(fs.readFileSync(config, 'utf8')).toMatch(/bob:/);
  // Nothing left behind but what was there.
  expect(fs.readdirSync(dir).sort()).toEqual(['broker.yaml', path.basename(planted), 'victim.txt'].sort());
});

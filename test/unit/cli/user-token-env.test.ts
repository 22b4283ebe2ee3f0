/**
 * `tributary user add` takes the new user's token from TRIBUTARY_USER_TOKEN as well as `--token`, so it
 * need not be on the command line (docs/security.md "Authentication"). In-process.
 */
import fs from 'node:fs';
import path from 'node:path';
import { hashToken } from 'tributary-broker/broker/security.js';
import { afterEach, beforeEach, expect, it } from 'vitest';
import { parseDocument } from 'yaml';
import { cliInProcess as cli } from '../../helpers/cli-in-process.js';
import { removeDir, tempDir } from '../../helpers/util.js';

let dir: string;
beforeEach(async () => {
  dir = await tempDir('trib-user-env-');
});
afterEach(async () => {
  delete process.env.TRIBUTARY_USER_TOKEN;
  await removeDir(dir);
});

it('user add uses TRIBUTARY_USER_TOKEN, prints no token, and refuses an empty one', async () => {
  const config = path.join(dir, 'broker.yaml');
  process.env.TRIBUTARY_USER_TOKEN = 'from-the-environment-0123456789';
  const r = await cli('user', 'add', 'bob', '--permissions', 'topic.read', '--config', config);
  expect(r.code, r.stderr).toBe(0);
  expect(r.stdout).not.toMatch(/token:/);
  const bob = (parseDocument(fs.readFileSync(config, 'utf8')).toJS() as { users: Record<string, { hash: string; salt: string }> }).users.bob!;
  expect(hashToken('from-the-environment-0123456789', Buffer.from(bob.salt, 'base64')).hash).toBe(bob.hash);

  process.env.TRIBUTARY_USER_TOKEN = '';
  const empty = await cli('user', 'add', 'carol', '--permissions', 'topic.read', '--config', config);
  expect([empty.code, empty.stderr]).toEqual([2, expect.stringMatching(/must not be empty/)]);
});

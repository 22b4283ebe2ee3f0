/**
 * `tributary dev-cluster` whose brokers run with authentication on (`--broker-args "--config <users>"`):
 * dev-cluster's own status checks authenticate as `--principal` (`TRIBUTARY_TOKEN` from the environment),
 * so it sees the cluster form and prints its bootstrap line. They went unauthenticated before, and
 * dev-cluster waited for a cluster it could not see until its start timed out.
 */
import { spawn } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { afterAll, expect, it } from 'vitest';
import { envWithoutTributary, runCli } from '../helpers/cli.js';
import { CLI } from '../helpers/launcher.js';
import { trackChild } from '../helpers/process-registry.js';
import { removeDir, tempDir } from '../helpers/util.js';

let dir = '';

afterAll(async () => {
  if (dir) await removeDir(dir);
});

it('forms a cluster of brokers with authentication on, checked as --principal, and refuses --token alone', async () => {
  dir = await tempDir('trib-dev-auth-');
  const config = path.join(dir, 'broker.yaml');
  const token = 'admin-token-for-the-dev-cluster';
  const added = await runCli(['user', 'add', 'admin', '--permissions', 'admin', '--token', token, '--config', config], { env: envWithoutTributary() });
  expect(added.code, added.stderr).toBe(0);
  // The brokers authenticate to each other as admin too (docs/security.md, "interBrokerPrincipal").
  writeFileSync(config, `${readFileSync(config, 'utf8')}authentication: true\ninterBrokerPrincipal: admin\ninterBrokerToken: ${token}\n`);

  const lonely = await runCli(['dev-cluster', '--brokers', '1', '--token', 'x'], { env: envWithoutTributary() });
  expect([lonely.code, lonely.stderr.trim()]).toEqual([2, 'error: --token needs --principal']);

  const env = { ...envWithoutTributary(), TRIBUTARY_TOKEN: token };
  const proc = trackChild(spawn(process.execPath, [CLI, 'dev-cluster', '--brokers', '2', '--broker-args', `--config ${config}`, '--principal', 'admin'], { env, stdio: ['ignore', 'pipe', 'pipe'] }), 'dev-cluster');
  const exited = new Promise<number | null>((resolve) => proc.once('exit', (code) => resolve(code)));
  let out = '';
  let err = '';
  proc.stderr!.on('data', (d: Buffer) => (err += d.toString()));
  try {
    const formed = await new Promise<boolean>((resolve) => {
      proc.stdout!.on('data', (d: Buffer) => {
        out += d.toString();
        if (/^bootstrap: \S+$/m.test(out)) resolve(true);
      });
      void exited.then(() => resolve(false));
    });
    expect(formed, `dev-cluster ended before its bootstrap line\nstdout:\n${out}\nstderr:\n${err.slice(-4000)}`).toBe(true);
    // The cluster answers the same principal.
    const bootstrap = /^bootstrap: (\S+)$/m.exec(out)![1]!;
    const status = await runCli(['cluster', 'status', '--bootstrap', bootstrap, '--principal', 'admin'], { env });
    expect(status.code, status.stderr).toBe(0);
    expect(status.stdout).toMatch(/^brokers \(2\):/m);
  } finally {
    proc.kill('SIGTERM');
    const timer = setTimeout(() => proc.kill('SIGKILL'), 30_000);
    await exited;
    clearTimeout(timer);
  }
}, 150_000);

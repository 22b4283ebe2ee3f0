/**
 * `tributary consume --group` (the SDK Consumer) against a bootstrap address that accepts connections and
 * never answers: it exits 1 saying why, once the SDK's bootstrapTimeoutMs has passed (docs/sdk.md,
 * "Connecting"), instead of retrying its coordinator lookup for ever without a word.
 */
import { spawn } from 'node:child_process';
import { afterEach, describe, expect, it } from 'vitest';
import { envWithoutTributary } from '../helpers/cli.js';
import { CLI } from '../helpers/launcher.js';
import { trackChild } from '../helpers/process-registry.js';
import { ScriptedServer } from '../helpers/scripted-server.js';
import { type SilentServer, silentServer } from '../helpers/silent-server.js';

/** Far above the SDK's defaults (10 s of bootstrap plus one handshake bound): a guard against a hang, no timing assertion. */
const HANG_MS = 45_000;

describe('tributary consume --group at a broker that never answers', () => {
  let server: SilentServer | undefined;
  afterEach(async () => {
    await server?.close();
  });

  it('exits 1 with an error line naming the address and the handshake that never came', async () => {
    server = await silentServer();
    const child = trackChild(spawn(process.execPath, [CLI, 'consume', 't', '--group', 'g', '--bootstrap', server.address], { env: envWithoutTributary(), stdio: ['ignore', 'pipe', 'pipe'] }), 'cli');
    let stdout = '';
    let stderr = '';
    child.stdout!.on('data', (d: Buffer) => (stdout += d.toString()));
    child.stderr!.on('data', (d: Buffer) => (stderr += d.toString()));
    const hang = setTimeout(() => child.kill('SIGKILL'), HANG_MS);
    const [code, signal] = await new Promise<[number | null, NodeJS.Signals | null]>((resolve) => child.once('close', (c, s) => resolve([c, s])));
    clearTimeout(hang);
    expect(signal, `killed after ${HANG_MS} ms: the command hung (stderr: ${stderr})`).toBeNull();
    expect(code).toBe(1);
    expect(stdout).toBe('');
    expect(stderr).toMatch(new RegExp(`^error: no broker reachable after \\d+ ms \\(bootstrapTimeoutMs \\d+\\): ${server.address.replaceAll('.', '\\.')} accepted the connection but did not answer the handshake`));
  });

  it('at a broker that answers the handshake and nothing after: says what it retries, once, and stops on Ctrl-C', { timeout: 200_000 }, async () => {
    const scripted = await ScriptedServer.start({ script: { NEGOTIATE: () => undefined, '*': () => 'hang' } });
    try {
      const child = trackChild(spawn(process.execPath, [CLI, 'consume', 't', '--group', 'g', '--bootstrap', scripted.address], { env: envWithoutTributary(), stdio: ['ignore', 'pipe', 'pipe'] }), 'cli');
      let stdout = '';
      let stderr = '';
      child.stdout!.on('data', (d: Buffer) => (stdout += d.toString()));
      const warned = new Promise<void>((resolve) =>
        child.stderr!.on('data', (d: Buffer) => {
          stderr += d.toString();
          if (stderr.includes('\n')) resolve();
        }),
      );
      const closed = new Promise<[number | null, NodeJS.Signals | null]>((resolve) => child.once('close', (c, s) => resolve([c, s])));
      // The first warning comes after a session of failed rebalance attempts, each of a lookup's retries
      // (SDK defaults: tens of seconds, more under load): a guard against a hang, no timing assertion.
      const hang = setTimeout(() => child.kill('SIGKILL'), 4 * HANG_MS);
      // Before: nothing at all until killed.
      await Promise.race([warned, closed]);
      child.kill('SIGINT');
      const [code, signal] = await closed;
      clearTimeout(hang);
      expect(signal, `killed after ${4 * HANG_MS} ms (stderr: ${stderr})`).toBeNull();
      expect(stderr).toMatch(/^warning: FIND_COORDINATOR to [^\n]*: no answer within \d+ ms \(retrying\)\n$/);
      expect([code, stdout]).toEqual([0, '']);
    } finally {
      await scripted.close();
    }
  });
});

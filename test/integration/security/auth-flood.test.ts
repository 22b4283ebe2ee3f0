import { type ChildProcess, spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Connection } from 'tributary-protocol/connection.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BrokerProcess } from '../../helpers/launcher.js';
import { trackChild } from '../../helpers/process-registry.js';
import { tempDir } from '../../helpers/util.js';
import { addUser } from './pki.js';

/**
 * A login flood (docs/security.md "Login fairness"): 300 unauthenticated connections from 127.0.0.1 keep
 * sending `AUTH principal=admin token=guessN`, more than the 256 checks the queue once held. A correct login
 * from another address and one from the same address still succeed, and the failures are not logged one
 * line each. The flood runs in its own process, so it does not share the test's event loop.
 */

const FLOOD = 300;

const FLOOD_SCRIPT = `
const net = require('node:net');
const [port, n] = process.argv.slice(1).map(Number);
let sent = 0, stopping = false;
const frame = (s) => { const b = Buffer.from(s); const h = Buffer.alloc(4); h.writeUInt32BE(b.length); return Buffer.concat([h, b]); };
function one() {
  if (stopping) return;
  const s = net.connect({ host: '127.0.0.1', port, localAddress: '127.0.0.1' });
  const guess = () => { sent++; s.write(frame('AUTH principal=admin token=guess' + sent)); };
  s.on('connect', guess);
  s.on('data', guess);
  s.on('error', () => {});
  s.on('close', () => setTimeout(one, 5));
}
for (let i = 0; i < n; i++) one();
setInterval(() => process.stdout.write(JSON.stringify({ sent }) + '\\n'), 250);
process.on('SIGTERM', () => { stopping = true; process.exit(0); });
`;

describe('a login flood from one address', () => {
  let dir: string;
  let broker: BrokerProcess;
  let token: string;
  let flood: ChildProcess | undefined;

  beforeAll(async () => {
    dir = await tempDir('tributary-auth-flood-');
    const config = path.join(dir, 'broker.yaml');
    fs.writeFileSync(config, 'authentication: true\n');
    addUser(config, 'admin', ['admin']);
    token = addUser(config, 'alice', ['topic.read']);
    // Default limits (auth timeout 10 s, no per-address connection limit).
    broker = await BrokerProcess.start({ args: ['--config', config, '--log-level', 'info'] });
  });

  afterAll(async () => {
    flood?.kill('SIGKILL');
    await broker?.dispose();
    if (dir) fs.rmSync(dir, { recursive: true, force: true });
  });

  it('a correct login from another address and from the same address succeeds; failures are logged in summary', { timeout: 120_000 }, async () => {
    let stats = { sent: 0 };
    flood = trackChild(
      spawn(process.execPath, ['-e', FLOOD_SCRIPT, String(broker.port), String(FLOOD)], { stdio: ['ignore', 'pipe', 'inherit'] }),
      'auth-flood',
    );
    if (flood.pid !== undefined) os.setPriority(flood.pid, 19);
    flood.stdout!.on('data', (d: Buffer) => {
      const last = d.toString().trim().split('\n').pop();
      if (last) stats = JSON.parse(last);
    });
    await expect.poll(() => stats.sent, { timeout: 20_000 }).toBeGreaterThan(FLOOD + 20);

    for (const localAddress of ['127.0.0.2', '127.0.0.1']) {
      const t0 = performance.now();
      const c = await Connection.connect({ host: '127.0.0.1', port: broker.port, localAddress, connectTimeoutMs: 10_000, auth: { principal: 'alice', token } });
      console.log(`login from ${localAddress} during the flood: ${(performance.now() - t0).toFixed(0)} ms`);
      expect(await c.command('LIST', {})).toBeDefined();
      await c.close();
    }
    // Enough answered guesses that the log's burst of 20 lines was passed.
    await expect.poll(() => stats.sent, { timeout: 30_000 }).toBeGreaterThan(FLOOD + 60);
    flood.kill('SIGTERM');

    const failedLines = broker.stderr.split('\n').filter((l) => l.includes('"authentication failed"')).length;
    const summaries = broker.stderr.split('\n').filter((l) => l.includes('not logged one by one')).length;
    console.log(`flood sent ${stats.sent} guesses; ${failedLines} failure lines, ${summaries} summary lines`);
    // 20 lines per 10 s interval, then one summary line per interval (unit-tested in security-queue.test.ts).
    expect(failedLines).toBeLessThanOrEqual(20 * 4);
  });
});

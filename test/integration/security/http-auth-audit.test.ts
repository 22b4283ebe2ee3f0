import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import http from 'node:http';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BrokerProcess, CLI } from '../../helpers/launcher.js';
import { addUser } from './pki.js';
import { tempDir } from '../../helpers/util.js';

/**
 * The HTTP API's failed logins against a real broker with authentication on (docs/http-api.md,
 * "Authentication"): a removed user's credentials are authentication_failed and count towards the
 * address's backoff, and the "authentication failed" log line names the HTTP client's address, not
 * the API's loopback connection to the broker.
 */
describe('HTTP API: revoked credentials and the audit line', () => {
  let dir: string;
  let config: string;
  let broker: BrokerProcess;
  const tokens: Record<string, string> = {};

  /** A GET from `from` (a loopback address of its own, so it differs from the API's connection to the broker). */
  const get = (p: string, user: string, token: string, from: string) =>
    new Promise<{ status: number; body: string }>((resolve, reject) => {
      const req = http.get({ host: '127.0.0.1', port: broker.healthPort, path: p, localAddress: from, agent: false, auth: `${user}:${token}` }, (res) => {
        let body = '';
        res.setEncoding('utf8');
        res.on('data', (d: string) => (body += d));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
      });
      req.on('error', reject);
    });

  beforeAll(async () => {
    dir = await tempDir('tributary-httpaudit-');
    config = path.join(dir, 'broker.yaml');
    fs.writeFileSync(config, 'authentication: true\n');
    tokens.admin = addUser(config, 'admin', ['admin']);
    tokens.bob = addUser(config, 'bob', ['topic.read', 'group']);
    broker = await BrokerProcess.start({ args: ['--config', config, '--offsets-topic-partitions', '1', '--log-level', 'info'] });
  });

  afterAll(async () => {
    await broker?.dispose();
    if (dir) fs.rmSync(dir, { recursive: true, force: true });
  });

  it("a wrong token's log line carries the HTTP client's address", async () => {
    const mark = broker.stderr.length;
    expect((await get('/api/v1/topics', 'admin', 'wrong', '127.0.0.31')).status).toBe(401);
    await expect.poll(() => broker.stderr.slice(mark).split('\n').some((l) => l.includes('authentication failed') && l.includes('127.0.0.31')), { timeout: 5000 }).toBe(true);
  });

  it('a removed user is authentication_failed, counted by the backoff and logged with the client address', async () => {
    // bob's client is cached by the API (logged in) before the removal.
    expect((await get('/api/v1/topics', 'bob', tokens.bob!, '127.0.0.32')).status).toBe(200);
    const from = '127.0.0.33';
    for (let i = 0; i < 4; i++) expect((await get('/api/v1/topics', 'admin', 'wrong', from)).status).toBe(401);
    execFileSync(process.execPath, [CLI, 'user', 'remove', 'bob', '--config', config]);
    const mark = broker.stderr.length;
    broker.proc!.kill('SIGHUP');
    await expect.poll(() => broker.stderr.slice(mark).includes('users and topic ACLs reloaded'), { timeout: 5000 }).toBe(true);
    const revoked = await get('/api/v1/topics', 'bob', tokens.bob!, from);
    expect(revoked.status).toBe(401);
    expect(JSON.parse(revoked.body)).toMatchObject({ error: { code: 'authentication_failed' } });
    // The log line reaches this process through the broker's stderr pipe, not with the response: waited for.
    await expect.poll(() => broker.stderr.slice(mark).split('\n').some((l) => l.includes('authentication failed') && l.includes('bob') && l.includes(from)), { timeout: 5000 }).toBe(true);
    // The fifth failure in a row from `from`: the address is now held off, valid credentials or not.
    const held = await get('/api/v1/topics', 'admin', tokens.admin!, from);
    expect(held.status).toBe(429);
    expect(JSON.parse(held.body)).toMatchObject({ error: { code: 'throttled' } });
  });
});

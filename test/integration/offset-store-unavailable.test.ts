/**
 * A broker whose offset store (PostgreSQL) cannot be reached says so: it retries with a logged reason,
 * /ready answers 503 with that reason, `not_ready` replies carry it, it becomes ready by itself once the
 * database answers, and `--startup-timeout-ms` / `--exit-on-startup-failure` bound the wait for service
 * managers. A real PostgreSQL behind a TCP relay that the test opens and closes.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import net from 'node:net';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { Connection } from 'tributary-protocol/connection.js';
import { CLI } from '../helpers/launcher.js';
import { type PostgresServer, startPostgres } from '../helpers/postgres.js';
import { trackChild } from '../helpers/process-registry.js';
import { freePort } from '../helpers/scripted-server.js';
import { rejection, relay, removeDir, tempDir, until } from '../helpers/util.js';

let pgServer: PostgresServer;
const children: ChildProcess[] = [];
const dirs: string[] = [];
const relays: net.Server[] = [];

beforeAll(async () => {
  pgServer = await startPostgres();
}, 120_000);

afterEach(async () => {
  for (const c of children.splice(0)) if (c.exitCode === null && c.signalCode === null) c.kill('SIGKILL');
  for (const r of relays.splice(0)) r.close();
  await Promise.all(dirs.splice(0).map((d) => removeDir(d)));
});

afterAll(async () => {
  await pgServer?.stop();
});

/** A broker process on fixed ports with its output collected; nothing waits for it to be ready. */
async function spawnBroker(pgPort: number, extra: string[] = [], database?: string) {
  const dir = await tempDir('tributary-pgdown-');
  dirs.push(dir);
  const [port, healthPort] = [await freePort(), await freePort()];
  let url = pgServer.connectionString.replace(/:(\d+)\//, `:${pgPort}/`);
  if (database !== undefined) url = url.replace(/\/[^/?]*(\?|$)/, `/${database}$1`);
  const args = [CLI, 'broker', 'start', '--host', '127.0.0.1', '--port', String(port), '--health-port', String(healthPort), '--data-dir', dir, '--offsets-topic-partitions', '1'];
  const child = trackChild(spawn(process.execPath, [...args, '--offset-store', 'postgres', '--offset-store-postgres-url', url, ...(extra.includes('--log-level') ? [] : ['--log-level', 'warn']), ...extra], { stdio: ['ignore', 'pipe', 'pipe'] }), 'broker');
  children.push(child);
  const out = { stdout: '', stderr: '' };
  child.stdout!.on('data', (d) => (out.stdout += d));
  child.stderr!.on('data', (d) => (out.stderr += d));
  const exited = new Promise<number>((resolve) => child.once('exit', (c) => resolve(c ?? -1)));
  const ready = async () => {
    const res = await fetch(`http://127.0.0.1:${healthPort}/ready`).catch(() => undefined);
    return res ? { status: res.status, body: await res.text() } : undefined;
  };
  return { child, out, port, healthPort, exited, ready };
}

/** A relay on `port` to the real PostgreSQL: the database "comes back" when it opens. */
function openRelay(port: number): Promise<void> {
  const server = net.createServer((client) => {
    relay(client, net.connect(Number(/:(\d+)\//.exec(pgServer.connectionString)![1]), '127.0.0.1'));
  });
  relays.push(server);
  return new Promise((resolve) => server.listen(port, '127.0.0.1', () => resolve()));
}

describe('offset store unreachable at start', () => {
  it('retries with the reason on /ready, in not_ready and in the log, and becomes ready once the database answers', async () => {
    const pgPort = await freePort(); // nothing listens yet: connection refused
    const b = await spawnBroker(pgPort);
    await until(async () => (await b.ready())?.body.includes('waiting for the offset store (postgres)') ?? false, 20_000, '/ready names the offset store');
    const unready = (await b.ready())!;
    expect(unready.status).toBe(503);
    expect(unready.body).toMatch(/^not ready: waiting for the offset store \(postgres\): .*ECONNREFUSED|refused/);
    const conn = await Connection.connect({ host: '127.0.0.1', port: b.port });
    try {
      const e = await rejection(conn.command('CREATE', { topic: 't' }));
      expect(e.code).toBe('not_ready');
      expect(String(e.fields.reason)).toMatch(/waiting for the offset store \(postgres\)/);
    } finally {
      await conn.close();
    }
    expect(b.out.stderr).toMatch(/the offset store \(postgres\) unavailable; retrying/);
    await openRelay(pgPort);
    await until(async () => (await b.ready())?.status === 200, 30_000, 'ready once PostgreSQL answers');
    await until(() => b.out.stdout.includes('tributary broker listening on'), 5000, 'the listening line');
    expect(b.out.stdout).toMatch(/health paths \/live \/ready \/metrics; TLS off, authentication off\)/);
    b.child.kill('SIGTERM');
    expect(await b.exited).toBe(0);
  });

  it('a SIGTERM while it waits for the database stops it cleanly', async () => {
    const b = await spawnBroker(await freePort());
    await until(async () => (await b.ready())?.body.includes('waiting for the offset store') ?? false, 20_000, 'waiting');
    b.child.kill('SIGTERM');
    expect(await b.exited).toBe(0);
  });

  it('a SIGTERM during that wait is a stop, logged at info, not a failed recovery', async () => {
    // Before: a level-50 "recovery failed; the broker stays unready" with a stack, then exit 0.
    const b = await spawnBroker(await freePort(), ['--log-level', 'info', '--exit-on-startup-failure']);
    await until(async () => (await b.ready())?.body.includes('waiting for the offset store') ?? false, 20_000, 'waiting');
    b.child.kill('SIGTERM');
    expect(await b.exited).toBe(0);
    const levels = b.out.stderr.split('\n').filter((l) => l.startsWith('{')).map((l) => JSON.parse(l) as { level: number; msg: string });
    expect(levels.filter((l) => l.level >= 50)).toEqual([]);
    expect(levels).toContainEqual(expect.objectContaining({ level: 30, msg: 'recovery stopped: the broker is stopping' }));
  });

  it('--startup-timeout-ms fails the start: unready with the reason; with --exit-on-startup-failure it exits 1', async () => {
    const stays = await spawnBroker(await freePort(), ['--startup-timeout-ms', '1500']);
    await until(() => stays.out.stdout.includes('listening on'), 20_000, 'the listening line');
    expect(stays.out.stdout).toMatch(/NOT READY: not ready after startupTimeoutMs 1500: waiting for the offset store \(postgres\)/);
    const r = (await stays.ready())!;
    expect(r.status).toBe(503);
    expect(r.body).toMatch(/^not ready: recovery failed: not ready after startupTimeoutMs 1500/);

    const exits = await spawnBroker(await freePort(), ['--startup-timeout-ms', '1000', '--exit-on-startup-failure']);
    expect(await exits.exited).toBe(1);
    expect(exits.out.stderr).toMatch(/error: broker failed to start: not ready after startupTimeoutMs 1000: waiting for the offset store \(postgres\)/);
    expect(exits.out.stdout).not.toMatch(/listening on/);
  });

  it('a database that does not exist fails the start with the reason, not a wait for an outage to end', async () => {
    const pgPort = Number(/:(\d+)\//.exec(pgServer.connectionString)![1]);
    const b = await spawnBroker(pgPort, ['--exit-on-startup-failure'], 'no_such_database');
    // A configuration problem the broker finds itself: exit 2 (docs/operations.md), not a runtime failure's 1.
    expect(await b.exited).toBe(2);
    expect(b.out.stderr).toMatch(/invalid_config.*no_such_database.*SQLSTATE 3D000/);
    expect(b.out.stderr).not.toMatch(/unavailable; retrying/);
  });
});

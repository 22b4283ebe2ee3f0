/**
 * A throwaway PostgreSQL server for integration tests: its own temp data directory, a free loopback port,
 * trust authentication, fsync on. `scripts/test.mjs` installs the Debian `postgresql` package when the
 * binaries are missing; if they still cannot be found, startPostgres() throws (tests never skip silently).
 *
 * PostgreSQL refuses to run as root, so when the tests run as root the server runs as the `postgres`
 * system user (via runuser) and the temp directory is handed to that user.
 */
import { execFile, spawnSync } from 'node:child_process';
import { existsSync, readdirSync } from 'node:fs';
import fs from 'node:fs/promises';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import pg from 'pg';
import { registerPid, unregisterPid } from './process-registry.js';
import { removeDir, sleep, tempDir } from './util.js';

export interface PostgresServer {
  connectionString: string;
  port: number;
  /** `pg_ctl stop -m fast`, then removes the data directory. Idempotent. */
  stop(): Promise<void>;
  /**
   * Stops and starts the server on the same port and data directory. `immediate` is a crash stop
   * (no checkpoint; the restart runs WAL recovery).
   */
  restart(opts?: { mode?: 'fast' | 'immediate' }): Promise<void>;
  /** Stops the server, keeping its port and data directory for up(). */
  down(opts?: { mode?: 'fast' | 'immediate' }): Promise<void>;
  /** Starts a server stopped by down() and waits until it takes connections. */
  up(): Promise<void>;
}

const PG_USER = 'postgres';
const START_TIMEOUT_MS = 30_000;

interface Binaries {
  initdb: string;
  pgCtl: string;
}

function versionOf(dir: string): number {
  return Number.parseFloat(path.basename(dir)) || 0;
}

/** A directory holding initdb, pg_ctl and postgres: PATH first, then /usr/lib/postgresql/<newest>/bin. */
export function findPostgresBinaries(): Binaries | undefined {
  const candidates = (process.env.PATH ?? '').split(path.delimiter).filter(Boolean);
  const debianRoot = '/usr/lib/postgresql';
  if (existsSync(debianRoot)) {
    const versions = readdirSync(debianRoot)
      .map((v) => path.join(debianRoot, v))
      .sort((a, b) => versionOf(b) - versionOf(a));
    for (const v of versions) candidates.push(path.join(v, 'bin'));
  }
  for (const dir of candidates) {
    const initdb = path.join(dir, 'initdb');
    const pgCtl = path.join(dir, 'pg_ctl');
    if (existsSync(initdb) && existsSync(pgCtl) && existsSync(path.join(dir, 'postgres'))) return { initdb, pgCtl };
  }
  return undefined;
}

function run(cmd: string, args: string[], opts: { asUser?: string; cwd?: string } = {}): Promise<{ stdout: string; stderr: string }> {
  const [file, argv] = opts.asUser ? ['runuser', ['-u', opts.asUser, '--', cmd, ...args]] : [cmd, args];
  return new Promise((resolve, reject) => {
    execFile(file, argv, { env: { ...process.env, LC_ALL: 'C' }, timeout: 60_000, cwd: opts.cwd ?? os.tmpdir() }, (err, stdout, stderr) => {
      if (err) {
        reject(new Error(`${[cmd, ...args].join(' ')} failed: ${err.message}\n${stdout}\n${stderr}`.trim()));
      } else {
        resolve({ stdout, stderr });
      }
    });
  });
}

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = net.createServer();
    srv.once('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const addr = srv.address();
      const port = typeof addr === 'object' && addr ? addr.port : 0;
      srv.close(() => resolve(port));
    });
  });
}

function lookupUser(name: string): { uid: number; gid: number } {
  const uid = spawnSync('id', ['-u', name], { encoding: 'utf8' });
  const gid = spawnSync('id', ['-g', name], { encoding: 'utf8' });
  if (uid.status !== 0 || gid.status !== 0) {
    throw new Error(
      `PostgreSQL refuses to run as root and there is no '${name}' system user to run it as ` +
        `(install the Debian 'postgresql' package, which creates it, or run the tests as a non-root user)`,
    );
  }
  return { uid: Number(uid.stdout.trim()), gid: Number(gid.stdout.trim()) };
}

async function waitForConnections(connectionString: string, deadline: number): Promise<void> {
  let lastErr: unknown;
  while (Date.now() < deadline) {
    const client = new pg.Client({ connectionString, connectionTimeoutMillis: 2_000 });
    client.on('error', () => {});
    try {
      await client.connect();
      await client.query('SELECT 1');
      await client.end();
      return;
    } catch (err) {
      lastErr = err;
      await client.end().catch(() => {});
      await sleep(50);
    }
  }
  throw new Error(`PostgreSQL did not accept connections within ${START_TIMEOUT_MS} ms: ${String(lastErr)}`);
}

/** Servers still running when the process exits are stopped (best effort) so no postmaster is leaked. */
const running = new Map<string, () => void>();
let exitHookInstalled = false;
function installExitHook(): void {
  if (exitHookInstalled) return;
  exitHookInstalled = true;
  process.once('exit', () => {
    for (const stopSync of running.values()) stopSync();
  });
}

export async function startPostgres(): Promise<PostgresServer> {
  const bins = findPostgresBinaries();
  if (!bins) {
    throw new Error(
      'PostgreSQL is not installed: initdb/pg_ctl/postgres not found on PATH or in /usr/lib/postgresql/*/bin. ' +
        "Run the test suite with `npm test` as root (it installs the Debian 'postgresql' package) or install PostgreSQL.",
    );
  }
  const asRoot = typeof process.getuid === 'function' && process.getuid() === 0;
  const asUser = asRoot ? PG_USER : undefined;
  const owner = asRoot ? lookupUser(PG_USER) : undefined;

  const dir = await tempDir('tributary-pg-');
  const dataDir = path.join(dir, 'data');
  const logFile = path.join(dir, 'postgres.log');
  let started = false;
  let stopped = false;
  let port = 0;
  let postmasterPid: number | undefined;
  try {
    if (owner) await fs.chown(dir, owner.uid, owner.gid);
    // Trust auth for every local and loopback connection; --no-sync only skips initdb's own flush of the
    // template files, the server itself runs with fsync=on.
    await run(bins.initdb, ['-D', dataDir, '-U', 'postgres', '--auth=trust', '--encoding=UTF8', '--locale=C', '--no-sync'], { asUser });

    const pgCtlStart = async () => {
      const opts = ['-c listen_addresses=127.0.0.1', `-c port=${port}`, `-c unix_socket_directories='${dir}'`, '-c fsync=on', '-c synchronous_commit=on'].join(
        ' ',
      );
      // -w: pg_ctl returns once the postmaster is up, or fails if it exits during startup.
      await run(bins.pgCtl, ['start', '-D', dataDir, '-l', logFile, '-w', '-t', String(START_TIMEOUT_MS / 1000), '-o', opts], { asUser });
      // pg_ctl has detached the postmaster: its pid is only in postmaster.pid.
      postmasterPid = Number((await fs.readFile(path.join(dataDir, 'postmaster.pid'), 'utf8').catch(() => '')).split('\n')[0]) || undefined;
      registerPid(postmasterPid, 'postgres', `postgres -D ${dataDir}`);
    };
    const pgCtlStop = async (mode: string) => {
      await run(bins.pgCtl, ['stop', '-D', dataDir, '-m', mode, '-w'], { asUser });
      unregisterPid(postmasterPid);
    };

    // The port is free when probed but could be taken before postgres binds it: retry with a new one.
    for (let attempt = 1; ; attempt++) {
      port = await freePort();
      try {
        await pgCtlStart();
        break;
      } catch (err) {
        const log = await fs.readFile(logFile, 'utf8').catch(() => '');
        if (attempt < 3 && /could not (bind|create listen socket)|Address already in use/i.test(log)) continue;
        throw new Error(`${(err as Error).message}\n--- postgres log ---\n${log}`);
      }
    }
    started = true;
    const connectionString = `postgresql://postgres@127.0.0.1:${port}/postgres`;
    await waitForConnections(connectionString, Date.now() + START_TIMEOUT_MS);

    const stopSync = () => {
      const args = [bins.pgCtl, 'stop', '-D', dataDir, '-m', 'immediate', '-w'];
      spawnSync(asUser ? 'runuser' : args[0], asUser ? ['-u', asUser, '--', ...args] : args.slice(1), { stdio: 'ignore' });
      unregisterPid(postmasterPid);
      spawnSync('rm', ['-rf', dir], { stdio: 'ignore' });
    };
    running.set(dir, stopSync);
    installExitHook();
    /** Between down() and up(): nothing to stop. */
    let serving = true;
    const down = async (opts: { mode?: 'fast' | 'immediate' } = {}) => {
      if (stopped) throw new Error('the PostgreSQL server was stopped');
      await pgCtlStop(opts.mode ?? 'fast');
      serving = false;
    };
    const up = async () => {
      if (stopped) throw new Error('the PostgreSQL server was stopped');
      await pgCtlStart();
      serving = true;
      await waitForConnections(connectionString, Date.now() + START_TIMEOUT_MS);
    };

    return {
      connectionString,
      port,
      async stop() {
        if (stopped) return;
        stopped = true;
        running.delete(dir);
        try {
          if (serving) await pgCtlStop('fast');
        } finally {
          await removeDir(dir);
        }
      },
      async restart(opts = {}) {
        await down(opts);
        await up();
      },
      down,
      up,
    };
  } catch (err) {
    if (started)
      await run(bins.pgCtl, ['stop', '-D', dataDir, '-m', 'immediate', '-w'], { asUser }).then(
        () => unregisterPid(postmasterPid),
        () => {},
      );
    await removeDir(dir);
    throw err;
  }
}

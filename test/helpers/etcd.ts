/**
 * A throwaway single-member etcd server for cluster tests: its own temp data directory, free loopback client
 * and peer ports, started from Debian's `etcd-server` binary (`scripts/test.mjs` installs it when missing). If
 * the binary cannot be found, startEtcd() throws (tests never skip silently).
 *
 * `kill('SIGSTOP')` / `kill('SIGCONT')` freeze and resume it for unavailability tests; `dispose()` kills it and
 * removes its data directory. Servers still running when the test process exits are killed (no etcd leaks).
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { existsSync, readFileSync, rmSync } from 'node:fs';
import https from 'node:https';
import net from 'node:net';
import path from 'node:path';
import { trackChild } from './process-registry.js';
import { removeDir, sleep, tempDir } from './util.js';

const START_TIMEOUT_MS = 30_000;

/** PEM files for an etcd that serves TLS only and requires client certificates from `caFile`. */
export interface EtcdTlsFiles {
  caFile: string;
  certFile: string;
  keyFile: string;
  /** The client certificate the helper itself presents (health checks). */
  clientCertFile: string;
  clientKeyFile: string;
}

/** GET over https with a client certificate (fetch cannot present one). */
function httpsGet(url: string, files: EtcdTlsFiles, timeoutMs: number): Promise<{ ok: boolean; status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const req = https.get(
      url,
      { ca: readFileSync(files.caFile), cert: readFileSync(files.clientCertFile), key: readFileSync(files.clientKeyFile), timeout: timeoutMs },
      (res) => {
        let body = '';
        res.setEncoding('utf8');
        res.on('data', (d: string) => {
          body += d;
        });
        res.on('end', () => resolve({ ok: (res.statusCode ?? 0) < 300, status: res.statusCode ?? 0, body }));
      },
    );
    req.on('timeout', () => req.destroy(new Error('timeout')));
    req.on('error', reject);
  });
}

/** The process state letter of /proc/<pid>/stat (R, S, T, ...); undefined off Linux or once it is gone. */
function processState(pid: number): string | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2, stat.lastIndexOf(')') + 3);
  } catch {
    return undefined;
  }
}

/** Waits (bounded, 2 s) for the process state to satisfy `ok`; where /proc is missing it returns at once. */
async function untilProcessState(pid: number, ok: (state: string) => boolean): Promise<void> {
  const deadline = Date.now() + 2000;
  for (;;) {
    const s = processState(pid);
    if (s === undefined || ok(s) || Date.now() > deadline) return;
    await sleep(1);
  }
}

/** PATH first, then where Debian puts it. */
export function findEtcdBinary(): string | undefined {
  const dirs = [...(process.env.PATH ?? '').split(path.delimiter).filter(Boolean), '/usr/bin', '/usr/local/bin'];
  for (const dir of dirs) {
    const file = path.join(dir, 'etcd');
    if (existsSync(file)) return file;
  }
  return undefined;
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

/** Processes and directories to clean up if the test process exits without dispose(). */
const live = new Map<EtcdServer, { pid: number | undefined; dir: string }>();
let exitHookInstalled = false;
function installExitHook(): void {
  if (exitHookInstalled) return;
  exitHookInstalled = true;
  process.once('exit', () => {
    for (const { pid, dir } of live.values()) {
      if (pid !== undefined) {
        try {
          process.kill(pid, 'SIGKILL');
        } catch {
          // already gone
        }
      }
      rmSync(dir, { recursive: true, force: true });
    }
  });
}

export class EtcdServer {
  proc: ChildProcess | undefined;
  clientPort = 0;
  peerPort = 0;
  /** The last 1 MB of etcd's output, for failure messages. */
  output = '';
  private exited: Promise<void> = Promise.resolve();
  private disposed = false;

  private constructor(
    readonly binary: string,
    readonly dir: string,
    /** TLS only, client certificates required (`--client-cert-auth`); plain HTTP when undefined. */
    readonly tls?: EtcdTlsFiles,
  ) {}

  /** Client URLs for the etcd3 client (`hosts`) or for `--etcd` flags. */
  get endpoints(): string[] {
    return [`${this.tls ? 'https' : 'http'}://127.0.0.1:${this.clientPort}`];
  }

  get pid(): number | undefined {
    return this.proc?.pid;
  }

  static async start(opts: { tls?: EtcdTlsFiles } = {}): Promise<EtcdServer> {
    const binary = findEtcdBinary();
    if (!binary) {
      throw new Error(
        "etcd is not installed (no 'etcd' on PATH or in /usr/bin). Run the test suite with `npm test` as root (it installs the Debian 'etcd-server' package) or install etcd.",
      );
    }
    const dir = await tempDir('tributary-etcd-');
    const server = new EtcdServer(binary, dir, opts.tls);
    live.set(server, { pid: undefined, dir });
    installExitHook();
    try {
      // Ports are free when probed but can be taken before etcd binds them: retry with new ones.
      for (let attempt = 1; ; attempt++) {
        server.clientPort = await freePort();
        server.peerPort = await freePort();
        try {
          await server.launch();
          return server;
        } catch (err) {
          await server.killNow();
          if (attempt < 3 && /address already in use/i.test(server.output)) continue;
          throw err;
        }
      }
    } catch (err) {
      await server.dispose();
      throw err;
    }
  }

  private async launch(): Promise<void> {
    const client = this.endpoints[0]!;
    const peer = `http://127.0.0.1:${this.peerPort}`;
    const args = [
      '--name',
      'tributary-test',
      '--data-dir',
      path.join(this.dir, 'data'),
      '--listen-client-urls',
      client,
      '--advertise-client-urls',
      client,
      '--listen-peer-urls',
      peer,
      '--initial-advertise-peer-urls',
      peer,
      '--initial-cluster',
      `tributary-test=${peer}`,
      '--initial-cluster-state',
      'new',
      '--initial-cluster-token',
      `tributary-test-${path.basename(this.dir)}`,
      '--logger',
      'zap',
      '--log-level',
      'warn',
      ...(this.tls
        ? ['--cert-file', this.tls.certFile, '--key-file', this.tls.keyFile, '--client-cert-auth', '--trusted-ca-file', this.tls.caFile]
        : []),
    ];
    // ETCD_* variables from the environment would override or clash with the flags.
    const env = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('ETCD_')));
    const proc = trackChild(spawn(this.binary, args, { env, stdio: ['ignore', 'pipe', 'pipe'] }), 'etcd');
    this.proc = proc;
    this.output = '';
    this.exited = new Promise((resolve) => proc.once('exit', () => resolve()));
    live.set(this, { pid: proc.pid, dir: this.dir });
    const keep = (d: Buffer) => {
      this.output += d.toString();
      if (this.output.length > 1_000_000) this.output = this.output.slice(-500_000);
    };
    proc.stdout!.on('data', keep);
    proc.stderr!.on('data', keep);
    let exitCode: number | null | undefined;
    proc.once('exit', (code, signal) => {
      exitCode = code ?? (signal ? -1 : null);
    });
    await this.waitHealthy(() => exitCode !== undefined);
  }

  /** Polls GET /health until etcd reports it can serve (it has a leader and answers a read). */
  private async waitHealthy(hasExited: () => boolean): Promise<void> {
    const deadline = Date.now() + START_TIMEOUT_MS;
    let last = '';
    while (Date.now() < deadline) {
      if (hasExited()) throw new Error(`etcd exited before it was healthy\n--- etcd output ---\n${this.output}`);
      try {
        const url = `${this.endpoints[0]}/health`;
        const res = this.tls
          ? await httpsGet(url, this.tls, 1_000)
          : await fetch(url, { signal: AbortSignal.timeout(1_000) }).then(async (r) => ({ ok: r.ok, status: r.status, body: await r.text() }));
        const body = res.body;
        if (res.ok && /"health"\s*:\s*"true"/.test(body)) return;
        last = `${res.status} ${body}`;
      } catch (err) {
        last = String(err);
      }
      await sleep(50);
    }
    throw new Error(`etcd was not healthy within ${START_TIMEOUT_MS} ms (${last})\n--- etcd output ---\n${this.output}`);
  }

  /** Sends a signal: 'SIGSTOP' / 'SIGCONT' to freeze and resume, 'SIGKILL' / 'SIGTERM' wait for the exit. */
  async kill(signal: NodeJS.Signals = 'SIGKILL'): Promise<void> {
    if (!this.running) return;
    this.proc!.kill(signal);
    if (signal === 'SIGKILL' || signal === 'SIGTERM') await this.exited;
    // A signal is queued, not applied, when kill() returns: on a loaded machine etcd could still answer
    // a request sent right after. Wait until the kernel reports the process stopped (or running again).
    if (signal === 'SIGSTOP') await untilProcessState(this.proc!.pid!, (s) => s === 'T' || s === 't');
    if (signal === 'SIGCONT') await untilProcessState(this.proc!.pid!, (s) => s !== 'T' && s !== 't');
  }

  /** SIGTERM and wait for etcd's clean exit; the data directory stays (see restart()). */
  async stop(): Promise<void> {
    if (!this.running) return;
    // A stopped (SIGSTOPped) process would hold SIGTERM until resumed.
    this.proc!.kill('SIGCONT');
    this.proc!.kill('SIGTERM');
    await this.exited;
  }

  /** Starts again on the same ports and data directory, after stop() or kill(). */
  async restart(): Promise<void> {
    if (this.disposed) throw new Error('the etcd server was disposed');
    await this.stop();
    await this.launch();
  }

  /** Kills etcd (no shutdown path) and removes the data directory. Idempotent. */
  async dispose(): Promise<void> {
    this.disposed = true;
    await this.killNow();
    live.delete(this);
    await removeDir(this.dir);
  }

  private get running(): boolean {
    return this.proc !== undefined && this.proc.exitCode === null && this.proc.signalCode === null;
  }

  private async killNow(): Promise<void> {
    if (!this.running) return;
    this.proc!.kill('SIGKILL');
    await this.exited;
  }
}

export function startEtcd(opts: { tls?: EtcdTlsFiles } = {}): Promise<EtcdServer> {
  return EtcdServer.start(opts);
}

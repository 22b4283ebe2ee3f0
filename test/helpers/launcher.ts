import { type ChildProcess, spawn } from 'node:child_process';
import { createWriteStream } from 'node:fs';
import path from 'node:path';
import type tls from 'node:tls';
import { fileURLToPath } from 'node:url';
import { Connection } from 'tributary-protocol/connection.js';
import { withOverrides } from 'tributary-broker/cli/flags.js';
import { trackChild } from './process-registry.js';
import { removeDir, tempDir } from './util.js';

export const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');
export const CLI = path.join(ROOT, 'packages', 'broker', 'dist', 'cli', 'main.js');

export interface BrokerOptions {
  dataDir?: string;
  /** Extra `broker start` flags, e.g. ['--flush', 'os']. */
  args?: string[];
  env?: Record<string, string>;
  /** Milliseconds to wait for the listening line. */
  startTimeoutMs?: number;
  /** Also appends everything the broker writes to stderr (its log) to this file, restarts included. */
  stderrFile?: string;
  /** TLS options of connect() (a broker with --tls-cert). */
  clientTls?: tls.ConnectionOptions;
  /** connect() logs in as this user (a broker with authentication on). */
  clientAuth?: { principal: string; token: string };
  /** Runs the broker under this process fd limit (`ulimit -n`, through bash, which execs node). */
  fdLimit?: number;
}

/**
 * A real broker process on free loopback ports (port 0, read back from its listening line), with its own
 * data directory. Restarting keeps the data directory; ports may change.
 */
export class BrokerProcess {
  proc: ChildProcess | undefined;
  port = 0;
  healthPort = 0;
  /** The Kafka listener's port (`--kafka-port`), 0 when there is none. */
  kafkaPort = 0;
  stderr = '';
  stdout = '';
  private exited: Promise<number | null> = Promise.resolve(null);
  private readonly connections = new Set<Connection>();

  private constructor(
    readonly dataDir: string,
    private readonly opts: BrokerOptions,
    private readonly ownsDir: boolean,
  ) {}

  static async start(opts: BrokerOptions = {}): Promise<BrokerProcess> {
    const dir = opts.dataDir ?? (await tempDir());
    const b = new BrokerProcess(dir, opts, opts.dataDir === undefined);
    try {
      await b.launch();
    } catch (err) {
      await b.dispose(); // a broker that never printed its listening line may still be running
      throw err;
    }
    return b;
  }

  get address(): string {
    return `127.0.0.1:${this.port}`;
  }

  private async launch(): Promise<void> {
    // A second process on the same directory would be lost track of (and left running): stop or kill first.
    if (this.running) throw new Error(`broker pid ${this.proc!.pid} is still running: stop() or kill() it before starting again`);
    const args = [CLI, 'broker', 'start', ...withOverrides(['--host', '127.0.0.1', '--port', '0', '--health-port', '0', '--data-dir', this.dataDir, '--log-level', 'warn'], this.opts.args ?? [])];
    const limit = this.opts.fdLimit;
    const [cmd, argv] = limit === undefined ? [process.execPath, args] : ['bash', ['-c', `ulimit -n ${limit} && exec "$0" "$@"`, process.execPath, ...args]];
    const proc = trackChild(spawn(cmd, argv, { env: { ...process.env, ...this.opts.env }, stdio: ['ignore', 'pipe', 'pipe'] }), 'broker');
    this.proc = proc;
    this.stdout = '';
    this.stderr = '';
    this.exited = new Promise((resolve) => proc.once('exit', (code) => resolve(code)));
    if (this.opts.stderrFile) proc.stderr!.pipe(createWriteStream(this.opts.stderrFile, { flags: 'a' }));
    proc.stderr!.on('data', (d: Buffer) => {
      this.stderr += d.toString();
      if (this.stderr.length > 1_000_000) this.stderr = this.stderr.slice(-500_000);
    });
    await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`broker did not start in time\nstderr: ${this.stderr}`)), this.opts.startTimeoutMs ?? 30_000);
      proc.stdout!.on('data', (d: Buffer) => {
        this.stdout += d.toString();
        const m = /listening on [^:\s]+:(\d+) \(health [^:\s]+:(\d+)/.exec(this.stdout);
        if (m) {
          this.port = Number(m[1]);
          this.healthPort = Number(m[2]);
          this.kafkaPort = Number(/Kafka protocol on [^:\s]+:(\d+)/.exec(this.stdout)?.[1] ?? 0);
          clearTimeout(timer);
          resolve();
        }
      });
      proc.once('exit', (code) => {
        clearTimeout(timer);
        reject(new Error(`broker exited with ${code} before listening\nstderr: ${this.stderr}`));
      });
    });
  }

  private get running(): boolean {
    return this.proc !== undefined && this.proc.exitCode === null && this.proc.signalCode === null;
  }

  async connect(opts: { features?: string[] } = {}): Promise<Connection> {
    const c = await Connection.connect({ host: '127.0.0.1', port: this.port, ...(this.opts.clientTls ? { tls: this.opts.clientTls } : {}), ...(this.opts.clientAuth ? { auth: this.opts.clientAuth } : {}), ...opts });
    this.connections.add(c);
    return c;
  }

  async health(pathname: '/live' | '/ready' | '/metrics'): Promise<{ status: number; body: string }> {
    const res = await fetch(`http://127.0.0.1:${this.healthPort}${pathname}`);
    return { status: res.status, body: await res.text() };
  }

  /** SIGTERM and wait for a clean exit; returns the exit code. */
  async stop(): Promise<number | null> {
    await this.closeClients();
    if (!this.proc || this.proc.exitCode !== null) return this.proc?.exitCode ?? null;
    this.proc.kill('SIGTERM');
    return this.exited;
  }

  /** kill -9: no shutdown path runs. */
  async kill(signal: NodeJS.Signals = 'SIGKILL'): Promise<void> {
    if (!this.proc || this.proc.exitCode !== null || this.proc.signalCode !== null) return;
    this.proc.kill(signal);
    if (signal === 'SIGKILL' || signal === 'SIGTERM') await this.exited;
  }

  async restart(): Promise<void> {
    await this.stop();
    await this.launch();
  }

  /** Start again after kill(). */
  async relaunch(): Promise<void> {
    await this.launch();
  }

  private async closeClients(): Promise<void> {
    await Promise.all([...this.connections].map((c) => c.close().catch(() => {})));
    this.connections.clear();
  }

  /** Stop the process and remove the data directory if the launcher created it. */
  async dispose(): Promise<void> {
    await this.closeClients();
    if (this.running) {
      this.proc!.kill('SIGKILL');
      await this.exited;
    }
    if (this.ownsDir) await removeDir(this.dataDir);
  }
}

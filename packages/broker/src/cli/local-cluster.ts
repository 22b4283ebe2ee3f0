/**
 * A whole cluster on this machine: one etcd and N broker processes on loopback ports, for
 * `tributary dev-cluster` and the failover benchmark. Everything runs as real child processes (the same
 * `broker start` a user would run), so what it shows is what a deployment does.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import https from 'node:https';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { Connection } from 'tributary-protocol/connection.js';
import { OFFSETS_TOPIC } from '../coordinator/group-log.js';
import { TXN_STATE_TOPIC } from '../txn/txn-log.js';
import { type DevPki, makeDevPki } from './dev-pki.js';
import { withOverrides } from './flags.js';

const HOST = '127.0.0.1';
/** Output kept per process for error messages: enough for the last few log lines. */
const TAIL_BYTES = 64 * 1024;

export interface LocalClusterOptions {
  /** Number of brokers (ids 0..n-1); default 3. */
  brokers?: number;
  /** Kept after stop() when given (`<dir>/etcd`, `<dir>/broker-<id>`); otherwise a temp dir that stop() removes. */
  dataDir?: string;
  /** Fixed ports: brokers on P+id, their health ports on P+80+id, etcd on P+90 (client) and P+91 (peer). Default: free ports. */
  basePort?: number;
  /** Extra `broker start` flags for every broker; they come last, so they override the defaults here. */
  brokerArgs?: string[];
  /** Called with every line a broker or etcd writes to stderr (`who` is `broker <id>` or `etcd`). */
  onLog?: (who: string, line: string) => void;
  /** Called when a broker exits without kill(), restart() or stop() asking for it. */
  onUnexpectedExit?: (id: number, code: number | null, signal: NodeJS.Signals | null) => void;
  /** How long start() and restart() may take; default 60 s. */
  timeoutMs?: number;
  /**
   * TLS everywhere (`dev-cluster --tls`): certificates made with openssl in `<dir>/tls` (dev-pki.ts), etcd
   * over https with client certificates, every broker's listener and inter-broker traffic over TLS.
   */
  tls?: boolean;
  /** Where free ports come from (without basePort); default: a port the kernel just handed out and took back. */
  freePort?: () => Promise<number>;
  /**
   * Who this process's own status checks authenticate as, for brokers with authentication on (brokerArgs
   * with a --config of users): unanswered, start() waited for a cluster it could not see form.
   */
  auth?: { principal: string; token: string };
}

export interface LocalBroker {
  id: number;
  /** `127.0.0.1:port`, what clients bootstrap from. */
  address: string;
  port: number;
  healthPort: number;
  /** Undefined while the broker is down. */
  pid: number | undefined;
  dataDir: string;
}

/** A child process with its exit and a bounded tail of its stderr. */
interface Proc {
  child: ChildProcess;
  exited: Promise<void>;
  tail: () => string;
}

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = net.createServer();
    srv.once('error', reject);
    srv.listen(0, HOST, () => {
      const addr = srv.address();
      srv.close(() => resolve(typeof addr === 'object' && addr ? addr.port : 0));
    });
  });
}

/** PATH first, then where Debian's etcd-server package puts it. */
export function findEtcdBinary(): string | undefined {
  const dirs = [...(process.env.PATH ?? '').split(path.delimiter).filter(Boolean), '/usr/bin'];
  for (const dir of dirs) {
    const file = path.join(dir, 'etcd');
    if (existsSync(file)) return file;
  }
  return undefined;
}

/** The CLI entry point next to this module in dist/; from the TypeScript sources (tests), the compiled one. */
function defaultCli(): string {
  const here = path.dirname(fileURLToPath(import.meta.url));
  const sibling = path.join(here, '..', 'cli', 'main.js');
  return existsSync(sibling) ? sibling : path.join(here, '..', '..', 'dist', 'cli', 'main.js');
}

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

/** Runs `start`; when it failed on a port in use, `newPorts` and again, at most `retries` more times. */
async function retryOnPortClash(retries: number, start: () => Promise<void>, newPorts: () => Promise<void>): Promise<void> {
  for (let attempt = 0; ; attempt++) {
    try {
      return await start();
    } catch (err) {
      if (attempt >= retries || !(err instanceof StartFailed) || !/EADDRINUSE|already in use/i.test(err.message)) throw err;
      await newPorts();
    }
  }
}

/** A start that cannot succeed any more (the process exited): ends a wait at once instead of at its timeout. */
class StartFailed extends Error {}

function running(p: Proc | undefined): boolean {
  return p !== undefined && p.child.exitCode === null && p.child.signalCode === null;
}

/**
 * etcd's client URL. With TLS by the name `localhost` (its certificate has it besides 127.0.0.1): the
 * brokers' etcd client (grpc-js) sends the URL's host as the TLS server name whatever it is, and for an
 * IP address Node prints a DEP0123 warning in every broker (SNI takes host names only, RFC 6066).
 */
function etcdUrl(pki: DevPki | undefined, port: number): string {
  return pki ? `https://localhost:${port}` : `http://${HOST}:${port}`;
}

export class LocalCluster {
  /** Client URLs of etcd, the value of the brokers' `--etcd`. */
  readonly etcdEndpoints: string[];
  private etcd: Proc | undefined;
  private readonly procs = new Map<number, Proc>();
  /** Brokers being stopped or killed on purpose: their exit is not reported as unexpected. */
  private readonly expectingExit = new Set<number>();
  private stopping = false;

  private constructor(
    readonly dataDir: string,
    private readonly ownsDir: boolean,
    readonly brokers: LocalBroker[],
    private readonly etcdPorts: { client: number; peer: number },
    private readonly opts: LocalClusterOptions & { brokers: number; timeoutMs: number },
    /** The certificates of a TLS cluster; undefined for a plain one. */
    readonly pki: DevPki | undefined,
  ) {
    this.etcdEndpoints = [etcdUrl(pki, etcdPorts.client)];
  }

  /** etcd, then every broker; resolves once each broker is ready and the internal topics have leaders. */
  static async start(options: LocalClusterOptions = {}): Promise<LocalCluster> {
    const opts = { ...options, brokers: options.brokers ?? 3, timeoutMs: options.timeoutMs ?? 60_000 };
    if (!Number.isInteger(opts.brokers) || opts.brokers < 1) throw new Error(`brokers must be a positive integer, got ${opts.brokers}`);
    const etcdBinary = findEtcdBinary();
    // Checked before anything is created, so a missing etcd leaves nothing behind.
    if (!etcdBinary) throw new Error("etcd not found (no 'etcd' on PATH or in /usr/bin): install it, e.g. `apt-get install etcd-server` on Debian or Ubuntu");
    const ownsDir = opts.dataDir === undefined;
    const dir = opts.dataDir === undefined ? mkdtempSync(path.join(os.tmpdir(), 'tributary-cluster-')) : path.resolve(opts.dataDir);
    mkdirSync(dir, { recursive: true });
    let pki: DevPki | undefined;
    try {
      pki = opts.tls ? makeDevPki(path.join(dir, 'tls'), opts.brokers) : undefined;
    } catch (err) {
      if (ownsDir) rmSync(dir, { recursive: true, force: true });
      throw err;
    }
    // Fixed ports make addresses stable across runs; free ones let several clusters share a host. Ports
    // chosen now stay the broker's for its restarts, so a bootstrap list stays valid.
    const base = opts.basePort;
    const nextPort = opts.freePort ?? freePort;
    const brokers: LocalBroker[] = [];
    for (let id = 0; id < opts.brokers; id++) {
      const port = base === undefined ? await nextPort() : base + id;
      const healthPort = base === undefined ? await nextPort() : base + 80 + id;
      brokers.push({ id, address: `${HOST}:${port}`, port, healthPort, pid: undefined, dataDir: path.join(dir, `broker-${id}`) });
    }
    const etcdPorts = base === undefined ? { client: await nextPort(), peer: await nextPort() } : { client: base + 90, peer: base + 91 };
    const cluster = new LocalCluster(dir, ownsDir, brokers, etcdPorts, opts, pki);
    // A free port can be taken (by any process's outgoing connection) between freePort() and the
    // child's bind: then the start is tried again on new free ports.
    const again = base === undefined ? 3 : 0;
    try {
      await retryOnPortClash(again, () => cluster.startEtcd(etcdBinary), async () => {
        rmSync(path.join(dir, 'etcd'), { recursive: true, force: true }); // it may hold the old peer URL
        etcdPorts.client = await nextPort();
        etcdPorts.peer = await nextPort();
        cluster.etcdEndpoints[0] = etcdUrl(pki, etcdPorts.client);
      });
      await Promise.all(
        brokers.map((b) =>
          retryOnPortClash(again, () => cluster.launch(b), async () => {
            b.port = await nextPort();
            b.healthPort = await nextPort();
            b.address = `${HOST}:${b.port}`;
          }),
        ),
      );
      await cluster.waitFormed();
    } catch (err) {
      await cluster.stop();
      throw err;
    }
    return cluster;
  }

  /** `127.0.0.1:p0,127.0.0.1:p1,...`: the bootstrap list of every broker. */
  get bootstrap(): string {
    return this.brokers.map((b) => b.address).join(',');
  }

  get etcdPid(): number | undefined {
    return this.etcd?.child.pid;
  }

  broker(id: number): LocalBroker {
    const b = this.brokers[id];
    if (!b) throw new Error(`no broker ${id} (ids 0..${this.brokers.length - 1})`);
    return b;
  }

  isRunning(id: number): boolean {
    return running(this.procs.get(id));
  }

  /** The last lines a broker wrote to stderr (its warnings and errors), for failure reports. */
  stderrTail(id: number): string {
    return this.procs.get(id)?.tail() ?? '';
  }

  /**
   * Sends a signal to a broker. SIGKILL and SIGTERM wait for the exit; SIGSTOP / SIGCONT return at once.
   * A broker stopped this way stays down until restart().
   */
  async kill(id: number, signal: NodeJS.Signals = 'SIGKILL'): Promise<void> {
    const p = this.procs.get(id);
    if (!p || !running(p)) return;
    if (signal === 'SIGKILL' || signal === 'SIGTERM') this.expectingExit.add(id);
    p.child.kill(signal);
    if (signal === 'SIGKILL' || signal === 'SIGTERM') await p.exited;
  }

  /** Stops the broker if it runs (SIGTERM), then starts it again on the same ports and data; resolves once ready. */
  async restart(id: number): Promise<void> {
    const b = this.broker(id);
    const p = this.procs.get(id);
    if (p && running(p)) {
      this.expectingExit.add(id);
      p.child.kill('SIGCONT'); // a SIGSTOPped process would hold the SIGTERM until resumed
      p.child.kill('SIGTERM');
      await p.exited;
    }
    await this.launch(b);
  }

  /** SIGTERM every broker and wait (a clean shutdown closes logs and revokes leases), then etcd; removes a temp dir. */
  async stop(): Promise<void> {
    this.stopping = true;
    await Promise.all([...this.procs.values()].map((p) => this.terminate(p, 20_000)));
    if (this.etcd) await this.terminate(this.etcd, 10_000);
    if (this.ownsDir) rmSync(this.dataDir, { recursive: true, force: true });
  }

  /** SIGTERM, then SIGKILL if the process has not exited within `graceMs`. */
  private async terminate(p: Proc, graceMs: number): Promise<void> {
    if (!running(p)) return;
    p.child.kill('SIGCONT');
    p.child.kill('SIGTERM');
    const timer = setTimeout(() => p.child.kill('SIGKILL'), graceMs);
    await p.exited;
    clearTimeout(timer);
  }

  private spawnProc(who: string, file: string, args: string[], env: NodeJS.ProcessEnv): Proc {
    // Own process group: a Ctrl-C in the terminal reaches only the parent, which stops brokers before
    // etcd (a broker that loses etcd first would wait out its etcd timeouts while shutting down).
    const child = spawn(file, args, { env, stdio: ['ignore', 'pipe', 'pipe'], detached: true });
    let tail = '';
    let partial = '';
    child.stderr!.setEncoding('utf8');
    child.stderr!.on('data', (d: string) => {
      tail = (tail + d).slice(-TAIL_BYTES);
      if (!this.opts.onLog) return;
      const lines = (partial + d).split('\n');
      partial = lines.pop() ?? '';
      for (const line of lines) if (line) this.opts.onLog(who, line);
    });
    const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
    child.once('error', (err) => {
      tail += `\nspawn failed: ${err.message}`;
    });
    killChildOnExit(child);
    return { child, exited, tail: () => tail };
  }

  private async startEtcd(binary: string): Promise<void> {
    const client = this.etcdEndpoints[0]!;
    const peer = `http://${HOST}:${this.etcdPorts.peer}`;
    const args = [
      ...['--name', 'tributary-local', '--data-dir', path.join(this.dataDir, 'etcd')],
      ...['--listen-client-urls', `${this.pki ? 'https' : 'http'}://${HOST}:${this.etcdPorts.client}`, '--advertise-client-urls', client],
      ...['--listen-peer-urls', peer, '--initial-advertise-peer-urls', peer, '--initial-cluster', `tributary-local=${peer}`],
      ...['--initial-cluster-state', 'new', '--initial-cluster-token', `tributary-local-${path.basename(this.dataDir)}`],
      ...['--logger', 'zap', '--log-level', 'warn'],
      ...(this.pki
        ? ['--cert-file', this.pki.etcdServer.cert, '--key-file', this.pki.etcdServer.key, '--client-cert-auth', '--trusted-ca-file', this.pki.etcdCa]
        : []),
    ];
    // ETCD_* variables would override or contradict the flags.
    const env = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('ETCD_')));
    const p = this.spawnProc('etcd', binary, args, env);
    this.etcd = p;
    await this.until('etcd to be healthy', async () => {
      if (!running(p)) throw new StartFailed(`etcd exited (${p.child.exitCode ?? p.child.signalCode}):\n${p.tail()}`);
      const body = await this.etcdHealth(`${client}/health`).catch(() => undefined);
      return body !== undefined && /"health"\s*:\s*"true"/.test(body);
    });
  }

  /** The body of a 2xx answer of etcd's /health (with TLS: trusting its CA, presenting the brokers' client certificate). */
  private etcdHealth(url: string): Promise<string | undefined> {
    const pki = this.pki;
    if (!pki) return fetch(url, { signal: AbortSignal.timeout(1000) }).then((res) => (res.ok ? res.text() : undefined));
    return new Promise((resolve, reject) => {
      const tlsFiles = { ca: readFileSync(pki.etcdCa), cert: readFileSync(pki.etcdClient.cert), key: readFileSync(pki.etcdClient.key) };
      const req = https.get(url, { ...tlsFiles, timeout: 1000 }, (res) => {
        let body = '';
        res.setEncoding('utf8');
        res.on('data', (d: string) => {
          body += d;
        });
        res.on('end', () => resolve((res.statusCode ?? 0) < 300 ? body : undefined));
      });
      req.on('timeout', () => req.destroy(new Error('timeout')));
      req.on('error', reject);
    });
  }

  /** `broker start` flags of a TLS cluster for broker `id`. */
  private tlsArgs(id: number): string[] {
    const pki = this.pki;
    if (!pki) return [];
    const own = pki.brokers[id]!;
    return [
      ...['--tls-cert', own.cert, '--tls-key', own.key, '--inter-broker-tls-ca', pki.ca],
      ...['--etcd-tls-ca', pki.etcdCa, '--etcd-tls-cert', pki.etcdClient.cert, '--etcd-tls-key', pki.etcdClient.key],
    ];
  }

  /** What a client passes to reach the brokers: the brokers' CA with TLS on. */
  get clientTls(): { ca: Buffer } | undefined {
    return this.pki ? { ca: readFileSync(this.pki.ca) } : undefined;
  }

  /** Starts one broker process and waits for its listening line and for /ready. */
  private async launch(b: LocalBroker): Promise<void> {
    const internalRf = Math.min(3, this.brokers.length);
    const args = [
      defaultCli(),
      'broker',
      'start',
      ...withOverrides(
        [
          ...['--cluster', '--etcd', this.etcdEndpoints.join(','), '--broker-id', String(b.id)],
          ...['--host', HOST, '--port', String(b.port), '--health-port', String(b.healthPort), '--data-dir', b.dataDir],
          // Below 3 brokers the internal topics could never be created with the default factor of 3.
          ...['--internal-replication-factor', String(internalRf), '--log-level', 'warn'],
          ...this.tlsArgs(b.id),
        ],
        this.opts.brokerArgs ?? [],
      ),
    ];
    this.expectingExit.delete(b.id);
    const env = { ...process.env };
    for (const k of Object.keys(env)) if (k.startsWith('TRIBUTARY_')) delete env[k]; // flags only: nothing inherited
    const p = this.spawnProc(`broker ${b.id}`, process.execPath, args, env);
    this.procs.set(b.id, p);
    b.pid = p.child.pid;
    // An exit while starting is this launch's failure (StartFailed, perhaps retried on new ports), not an
    // unexpected exit of a running broker.
    let started = false;
    let reported = false;
    const reportExit = () => {
      if (reported || !started || running(p) || this.stopping || this.expectingExit.has(b.id)) return;
      reported = true;
      this.opts.onUnexpectedExit?.(b.id, p.child.exitCode, p.child.signalCode);
    };
    void p.exited.then(() => {
      if (this.procs.get(b.id) === p) b.pid = undefined;
      reportExit();
    });
    let stdout = '';
    p.child.stdout!.setEncoding('utf8');
    p.child.stdout!.on('data', (d: string) => {
      stdout = (stdout + d).slice(-TAIL_BYTES);
    });
    const exitedEarly = () => {
      if (!running(p)) throw new StartFailed(`broker ${b.id} exited (${p.child.exitCode ?? p.child.signalCode}) while starting:\n${p.tail()}`);
    };
    // The line comes once the broker has joined (after a kill -9 that includes waiting out its old lease).
    await this.until(`broker ${b.id} to listen`, async () => {
      exitedEarly();
      const m = /tributary broker listening on \S+:(\d+) \(health \S+:(\d+), data /.exec(stdout);
      if (m && (Number(m[1]) !== b.port || Number(m[2]) !== b.healthPort))
        throw new StartFailed(`broker ${b.id} listens on ${m[1]}/${m[2]}, expected ${b.port}/${b.healthPort}`);
      return m !== null;
    });
    await this.until(`broker ${b.id} to be ready`, async () => {
      exitedEarly();
      const res = await fetch(`http://${HOST}:${b.healthPort}/ready`, { signal: AbortSignal.timeout(1000) }).catch(() => undefined);
      return res?.status === 200;
    });
    started = true;
    // It may have exited between the last check and here: reported as any later exit would be.
    reportExit();
  }

  /** Every broker registered and every internal partition led: groups and transactions work from here on. */
  private async waitFormed(): Promise<void> {
    await this.until('the cluster to form (every broker registered, internal topics led)', async () => {
      const s = await this.status();
      const internal = s.partitions.filter((p) => p.topic === OFFSETS_TOPIC || p.topic === TXN_STATE_TOPIC);
      return (
        s.brokers.length === this.brokers.length && internal.length > 0 && internal.every((p) => p.leader >= 0 && s.brokers.some((x) => x.id === p.leader))
      );
    });
  }

  /** CLUSTER_STATUS from the first broker that answers. */
  async status(): Promise<LocalClusterStatus> {
    let last: unknown = new Error('no broker is running');
    for (const b of this.brokers) {
      if (!this.isRunning(b.id)) continue;
      try {
        const tls = this.clientTls;
        const c = await Connection.connect({ host: HOST, port: b.port, connectTimeoutMs: 2000, ...(tls ? { tls } : {}), ...(this.opts.auth ? { auth: this.opts.auth } : {}) });
        try {
          return await c.json<LocalClusterStatus>('CLUSTER_STATUS');
        } finally {
          await c.close().catch(() => {});
        }
      } catch (err) {
        last = err;
      }
    }
    throw last;
  }

  /** Polls `fn` every 100 ms until it returns true or throws StartFailed; other errors are retried. */
  private async until(what: string, fn: () => Promise<boolean>): Promise<void> {
    const deadline = performance.now() + this.opts.timeoutMs;
    let last: unknown;
    for (;;) {
      let ok = false;
      try {
        ok = await fn();
      } catch (err) {
        if (err instanceof StartFailed) throw err;
        last = err;
      }
      if (ok) return;
      if (performance.now() > deadline) {
        const tails = [...this.procs].map(([id, p]) => `--- broker ${id} stderr ---\n${p.tail().slice(-3000)}`).join('\n');
        throw new Error(`timed out after ${this.opts.timeoutMs} ms waiting for ${what}${last ? ` (${String(last)})` : ''}\n${tails}`);
      }
      await sleep(100);
    }
  }
}

/** What CLUSTER_STATUS answers in cluster mode (ClusterNode.status()). */
export interface LocalClusterStatus {
  mode: string;
  broker_id: number;
  controller: number | null;
  brokers: Array<{ id: number; address: string }>;
  partitions: Array<{ topic: string; partition: number; leader: number; leader_epoch: number; replicas: number[]; isr: number[] }>;
  under_replicated: number;
  leaderless: number;
}

/**
 * Children run in their own process groups, so nothing else would stop them if this process ends
 * without stop() (an uncaught error, process.exit): kill them rather than leave a cluster behind.
 */
const killOnExit = new Set<ChildProcess>();
let exitHookInstalled = false;
function killChildOnExit(child: ChildProcess): void {
  if (!exitHookInstalled) {
    exitHookInstalled = true;
    process.once('exit', () => {
      for (const c of killOnExit) {
        try {
          c.kill('SIGKILL');
        } catch {
          // already gone
        }
      }
    });
  }
  killOnExit.add(child);
  child.once('exit', () => killOnExit.delete(child));
}

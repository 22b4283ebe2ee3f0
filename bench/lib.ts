/**
 * Shared helpers of the benchmarks: child processes (broker, relay, workers) with guaranteed cleanup,
 * temp directories, percentiles and table formatting.
 */
import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, readdirSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { withOverrides } from 'tributary-broker/cli/flags.js';

/** dist/bench → repository root. */
export const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');
export const CLI = path.join(ROOT, 'packages', 'broker', 'dist', 'cli', 'main.js');
export const BENCH_DIR = path.dirname(fileURLToPath(import.meta.url));

/** Wall-clock milliseconds with sub-millisecond resolution, comparable across processes on one host. */
export function nowMs(): number {
  return performance.timeOrigin + performance.now();
}

/** CPU time (user + system, ms) this process used so far. */
export function selfCpuMs(): number {
  const u = process.cpuUsage();
  return (u.user + u.system) / 1000;
}

let clockTicks: number | undefined;

/**
 * CPU time (user + system, all threads, ms) another process used so far, from /proc (Linux; 10 ms
 * resolution at the usual 100 Hz clock). Undefined where /proc is unavailable or the process is gone.
 */
export function procCpuMs(pid: number | undefined): number | undefined {
  const t = procCpuSplitMs(pid);
  return t && t.user + t.system;
}

/** procCpuMs in its two parts: user and system (kernel) time, ms. */
export function procCpuSplitMs(pid: number | undefined): { user: number; system: number } | undefined {
  if (pid === undefined || process.platform !== 'linux') return undefined;
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    // Fields after the command name (which may contain spaces): state is field 3, utime 14, stime 15.
    const rest = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    if (clockTicks === undefined) {
      try {
        clockTicks = Number(execFileSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).trim()) || 100;
      } catch {
        clockTicks = 100;
      }
    }
    return { user: (Number(rest[11]) * 1000) / clockTicks, system: (Number(rest[12]) * 1000) / clockTicks };
  } catch {
    return undefined;
  }
}

/** Median of a list of numbers (NaN when empty). */
export function median(xs: number[]): number {
  const s = xs.filter((x) => Number.isFinite(x)).sort((a, b) => a - b);
  if (s.length === 0) return Number.NaN;
  const m = s.length >> 1;
  return s.length % 2 === 1 ? s[m]! : (s[m - 1]! + s[m]!) / 2;
}

// ---------------------------------------------------------------- cleanup registry

const children = new Set<ChildProcess>();
const tempDirs = new Set<string>();
let handlersInstalled = false;

export function makeTempDir(prefix: string): string {
  const dir = mkdtempSync(path.join(os.tmpdir(), prefix));
  tempDirs.add(dir);
  return dir;
}

export function removeTempDir(dir: string): void {
  tempDirs.delete(dir);
  rmSync(dir, { recursive: true, force: true });
}

/** Keep a temp dir on disk (it is no longer removed by cleanup). */
export function keepTempDir(dir: string): void {
  tempDirs.delete(dir);
}

/** SIGKILL every live child this process started and remove registered temp dirs. Synchronous. */
export function cleanupAll(): void {
  for (const c of children) {
    if (c.exitCode === null && c.signalCode === null) {
      try {
        c.kill('SIGKILL');
      } catch {
        // already gone
      }
    }
  }
  children.clear();
  for (const d of tempDirs) {
    try {
      rmSync(d, { recursive: true, force: true });
    } catch {
      // best effort
    }
  }
  tempDirs.clear();
}

/** On SIGINT/SIGTERM or process exit: kill children, remove temp dirs. */
export function installCleanupHandlers(): void {
  if (handlersInstalled) return;
  handlersInstalled = true;
  process.on('exit', cleanupAll);
  for (const sig of ['SIGINT', 'SIGTERM', 'SIGHUP'] as const) {
    process.on(sig, () => {
      process.stderr.write(`\n${sig}: stopping child processes and removing temp dirs\n`);
      cleanupAll();
      process.exit(sig === 'SIGINT' ? 130 : 143);
    });
  }
}

// ---------------------------------------------------------------- child processes

export interface Child {
  proc: ChildProcess;
  name: string;
  /** Everything written to stderr (bounded). */
  stderr(): string;
  /** Resolves with the exit code (or the signal name). */
  exited: Promise<number | string>;
  /**
   * The first stdout line that parses as a JSON object satisfying `pred`, from after the furthest line an
   * earlier wait took (waits pending at once each read every line, so two could take the same one).
   */
  waitJson<T = Record<string, unknown>>(pred: (o: Record<string, unknown>) => boolean, timeoutMs: number): Promise<T>;
  /** The first stdout line matching `re`, from where waitJson would start. */
  waitLine(re: RegExp, timeoutMs: number): Promise<RegExpExecArray>;
  /** SIGTERM, then SIGKILL after `graceMs`; resolves on exit. */
  stop(graceMs?: number): Promise<number | string>;
}

export interface SpawnOptions {
  nodeArgs?: string[];
  /** Pipe stdin (for workers that listen to commands on it); otherwise ignored. */
  stdin?: boolean;
  /** Echo stderr lines with a prefix as they arrive. */
  echoStderr?: boolean;
}

/** Spawn `node [nodeArgs] script args` with line-based stdout handling, registered for cleanup. */
export function spawnNode(name: string, script: string, args: string[], opts: SpawnOptions = {}): Child {
  const proc = spawn(process.execPath, [...(opts.nodeArgs ?? []), script, ...args], {
    stdio: [opts.stdin ? 'pipe' : 'ignore', 'pipe', 'pipe'],
    cwd: ROOT,
  });
  children.add(proc);
  let err = '';
  let out = '';
  const lines: string[] = [];
  let lineWaiters: Array<() => void> = [];
  // Swap the list before calling: a waiter whose line has not come yet queues itself again.
  const wakeLineWaiters = () => {
    const waiting = lineWaiters;
    lineWaiters = [];
    for (const w of waiting) w();
  };
  const exited = new Promise<number | string>((resolve) => {
    proc.once('exit', (code, signal) => {
      children.delete(proc);
      resolve(code ?? signal ?? 'unknown');
      wakeLineWaiters();
    });
  });
  proc.stdout!.setEncoding('utf8');
  proc.stdout!.on('data', (d: string) => {
    out += d;
    let nl = out.indexOf('\n');
    while (nl >= 0) {
      lines.push(out.slice(0, nl));
      out = out.slice(nl + 1);
      nl = out.indexOf('\n');
    }
    wakeLineWaiters();
  });
  proc.stderr!.setEncoding('utf8');
  proc.stderr!.on('data', (d: string) => {
    err += d;
    if (err.length > 200_000) err = err.slice(-100_000);
    if (opts.echoStderr) process.stderr.write(d.replace(/^(?=.)/gm, `[${name}] `));
  });
  proc.once('error', (e) => {
    err += `spawn error: ${e.message}\n`;
  });

  // Where the next waiter starts: after the last line a waiter took. Each waiter reads on with a cursor of
  // its own, so waiters for different lines at once (a consumer's `half` and `result`) do not take each
  // other's lines.
  let lineCursor = 0;
  const nextLine = <T>(match: (line: string) => T | undefined, timeoutMs: number, what: string): Promise<T> =>
    new Promise<T>((resolve, reject) => {
      let cursor = lineCursor;
      const timer = setTimeout(() => {
        finish();
        reject(new Error(`${name}: timed out after ${timeoutMs} ms waiting for ${what}\nstderr: ${tail(err)}`));
      }, timeoutMs);
      let done = false;
      const finish = () => {
        done = true;
        clearTimeout(timer);
      };
      const check = () => {
        if (done) return;
        while (cursor < lines.length) {
          const line = lines[cursor++]!;
          const m = match(line);
          if (m !== undefined) {
            lineCursor = Math.max(lineCursor, cursor);
            finish();
            resolve(m);
            return;
          }
        }
        if (proc.exitCode !== null || proc.signalCode !== null) {
          finish();
          reject(new Error(`${name} exited (${proc.exitCode ?? proc.signalCode}) before ${what}\nstderr: ${tail(err)}`));
          return;
        }
        lineWaiters.push(check);
      };
      check();
    });

  const child: Child = {
    proc,
    name,
    stderr: () => err,
    exited,
    waitJson: <T>(pred: (o: Record<string, unknown>) => boolean, timeoutMs: number) =>
      nextLine<T>(
        (line) => {
          if (!line.startsWith('{')) return undefined;
          try {
            const o = JSON.parse(line) as Record<string, unknown>;
            return pred(o) ? (o as T) : undefined;
          } catch {
            return undefined;
          }
        },
        timeoutMs,
        'its JSON report',
      ),
    waitLine: (re: RegExp, timeoutMs: number) => nextLine((line) => re.exec(line) ?? undefined, timeoutMs, `a line matching ${re}`),
    stop: async (graceMs = 15_000) => {
      if (proc.exitCode === null && proc.signalCode === null) {
        proc.kill('SIGTERM');
        const timer = setTimeout(() => proc.kill('SIGKILL'), graceMs);
        const code = await exited;
        clearTimeout(timer);
        return code;
      }
      return exited;
    },
  };
  return child;
}

function tail(s: string, n = 4000): string {
  return s.length > n ? `...${s.slice(-n)}` : s;
}

// ---------------------------------------------------------------- broker

export interface BrokerHandle {
  child: Child;
  host: string;
  port: number;
  /** The HTTP port (/live, /ready, /metrics, the admin API). */
  healthPort: number;
  dataDir: string;
}

/**
 * `tributary broker start` on free loopback ports (port 0, read back from its listening line).
 * `nodeArgs` go to node itself (e.g. --cpu-prof), `args` to `broker start` (e.g. --flush os).
 */
export async function startBroker(dataDir: string, opts: { nodeArgs?: string[]; args?: string[]; echoStderr?: boolean; startTimeoutMs?: number } = {}): Promise<BrokerHandle> {
  const args = ['broker', 'start', ...withOverrides(['--host', '127.0.0.1', '--port', '0', '--health-port', '0', '--data-dir', dataDir, '--log-level', 'warn'], opts.args ?? [])];
  const child = spawnNode('broker', CLI, args, { nodeArgs: opts.nodeArgs, echoStderr: opts.echoStderr });
  const m = await child.waitLine(/listening on ([^\s]+):(\d+) \(health [^\s,]*:(\d+)/, opts.startTimeoutMs ?? 30_000);
  return { child, host: '127.0.0.1', port: Number(m[2]), healthPort: Number(m[3]), dataDir };
}

/**
 * A broker's /metrics samples by name (`tributary_` prefix included; a labelled sample under its name and
 * labels as printed, `name{kind="major"}`), or undefined when it does not answer within 5 s.
 */
export async function scrapeMetrics(healthPort: number): Promise<Map<string, number> | undefined> {
  try {
    const text = await (await fetch(`http://127.0.0.1:${healthPort}/metrics`, { signal: AbortSignal.timeout(5000) })).text();
    const out = new Map<string, number>();
    for (const m of text.matchAll(/^(\w+(?:\{[^}]*\})?) (\S+)$/gm)) out.set(m[1]!, Number(m[2]));
    return out;
  } catch {
    return undefined;
  }
}

// ---------------------------------------------------------------- statistics and formatting

/** Nearest-rank percentile of an ascending-sorted array (p in 0..100). */
export function percentile(sorted: ArrayLike<number>, p: number): number {
  if (sorted.length === 0) return Number.NaN;
  const rank = Math.ceil((p / 100) * sorted.length);
  return sorted[Math.min(sorted.length - 1, Math.max(0, rank - 1))]!;
}

export function fmtInt(n: number): string {
  return Number.isFinite(n) ? Math.round(n).toLocaleString('en-US') : '-';
}

export function fmtFixed(n: number, digits: number): string {
  return Number.isFinite(n) ? n.toFixed(digits) : '-';
}

/** Right-aligned text table (first column left-aligned). */
export function table(header: string[], rows: string[][]): string {
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] ?? '').length)));
  const line = (cells: string[]) => cells.map((c, i) => (i === 0 ? c.padEnd(widths[i]!) : c.padStart(widths[i]!))).join('  ');
  return [line(header), line(widths.map((w) => '-'.repeat(w))), ...rows.map(line)].join('\n');
}

/** Split "--a --b=c" style option strings into an argv array (whitespace separated, no quoting). */
export function splitArgs(s: string | undefined): string[] {
  return s ? s.split(/\s+/).filter(Boolean) : [];
}

/** Print one JSON line on stdout (worker → orchestrator reports). */
export function report(obj: Record<string, unknown>): void {
  process.stdout.write(`${JSON.stringify(obj)}\n`);
}

// ---------------------------------------------------------------- process figures and waiting

/** A process's resident memory and open file descriptors, from /proc (NaN when it is gone). */
export function procStats(pid: number | undefined): { rssMiB: number; fds: number } {
  if (pid === undefined) return { rssMiB: Number.NaN, fds: Number.NaN };
  try {
    const status = readFileSync(`/proc/${pid}/status`, 'utf8');
    const rss = Number(/VmRSS:\s+(\d+) kB/.exec(status)?.[1] ?? Number.NaN) / 1024;
    return { rssMiB: rss, fds: readdirSync(`/proc/${pid}/fd`).length };
  } catch {
    return { rssMiB: Number.NaN, fds: Number.NaN };
  }
}

/**
 * The machine's CPU time so far, all CPUs, in clock ticks (/proc/stat): in total, stolen by the hypervisor,
 * and idle (waiting for I/O included).
 */
export function cpuTicks(): { total: number; steal: number; idle: number } | undefined {
  try {
    const f = readFileSync('/proc/stat', 'utf8').split('\n', 1)[0]!.trim().split(/\s+/).slice(1).map(Number);
    // user nice system idle iowait irq softirq steal (guest time is counted in user already).
    return { total: f.slice(0, 8).reduce((a, b) => a + b, 0), steal: f[7] ?? 0, idle: (f[3] ?? 0) + (f[4] ?? 0) };
  } catch {
    return undefined;
  }
}

/** Per cent of the CPU time between two cpuTicks() readings that the hypervisor stole (NaN without /proc). */
export function stealPercent(from: ReturnType<typeof cpuTicks>, to: ReturnType<typeof cpuTicks>): number {
  if (!from || !to || to.total <= from.total) return Number.NaN;
  return (100 * (to.steal - from.steal)) / (to.total - from.total);
}

/**
 * Per cent of the CPU time between two cpuTicks() readings that this machine's processes and kernel used
 * (neither idle nor stolen). Near 100 the processes of a run wait for a CPU, and their latencies show it.
 */
export function busyPercent(from: ReturnType<typeof cpuTicks>, to: ReturnType<typeof cpuTicks>): number {
  if (!from || !to || to.total <= from.total) return Number.NaN;
  const total = to.total - from.total;
  return (100 * (total - (to.steal - from.steal) - (to.idle - from.idle))) / total;
}

/** Polls `fn` every `intervalMs` (100) until it returns a value (not false or undefined); errors count as not yet. */
export async function waitFor<T>(
  what: string,
  fn: () => Promise<T | false | undefined> | T | false | undefined,
  timeoutMs: number,
  describe: (err: unknown) => string = String,
  intervalMs = 100,
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let last: unknown;
  for (;;) {
    try {
      const v = await fn();
      if (v !== false && v !== undefined) return v;
    } catch (err) {
      last = err;
    }
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}${last ? ` (${describe(last)})` : ''}`);
    await new Promise((r) => setTimeout(r, intervalMs));
  }
}

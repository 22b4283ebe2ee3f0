/**
 * Every process the tests start, so the run can fail if one outlives it. Global setup creates a registry
 * directory and names it in TEST_PROCESS_REGISTRY (inherited by the vitest workers and everything they
 * spawn; not a TRIBUTARY_* name, which the CLI tests strip from child environments). Helpers register
 * each child as `<pid>.json` and remove it when the child exits; global teardown lists the survivors, plus
 * on Linux any process whose environment names this run's registry (the brokers and etcd a CLI child
 * started), kills them and fails the run.
 */
import type { ChildProcess } from 'node:child_process';
import { mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { expect } from 'vitest';
import { processStartTime } from 'tributary-broker/broker/data-dir-lock.js';

export const REGISTRY_ENV = 'TEST_PROCESS_REGISTRY';

interface Entry {
  pid: number;
  kind: string;
  command: string;
  started?: string | null;
  /** The test that started it, when known. */
  test?: string;
}

function registryDir(): string | undefined {
  return process.env[REGISTRY_ENV] || undefined;
}

function currentTest(): string | undefined {
  try {
    const s = expect.getState();
    const file = s.testPath ? path.relative(process.cwd(), s.testPath) : undefined;
    return [file, s.currentTestName].filter(Boolean).join(' > ') || undefined;
  } catch {
    return undefined;
  }
}

/** Records a process by pid (e.g. a daemon started through a wrapper); a no-op outside a test run. */
export function registerPid(pid: number | undefined, kind: string, command: string): void {
  const dir = registryDir();
  if (!dir || pid === undefined) return;
  const entry: Entry = { pid, kind, command, started: processStartTime(pid), test: currentTest() };
  writeFileSync(path.join(dir, `${pid}.json`), JSON.stringify(entry));
}

export function unregisterPid(pid: number | undefined): void {
  const dir = registryDir();
  if (!dir || pid === undefined) return;
  rmSync(path.join(dir, `${pid}.json`), { force: true });
}

/** Registers a child until it exits. */
export function trackChild<T extends ChildProcess>(child: T, kind: string): T {
  registerPid(child.pid, kind, child.spawnargs.join(' '));
  child.once('exit', () => unregisterPid(child.pid));
  return child;
}

/** Global setup: a fresh registry for this run, named in the environment the workers inherit. */
export function createRegistry(): string {
  const dir = path.join(os.tmpdir(), `tributary-test-run-${process.pid}-${Date.now()}`);
  mkdirSync(dir, { recursive: true });
  process.env[REGISTRY_ENV] = dir;
  return dir;
}

function alive(pid: number, started?: string | null): boolean {
  try {
    process.kill(pid, 0);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ESRCH') return false;
  }
  const now = processStartTime(pid);
  if (now === null) return false; // zombie
  return !started || now === undefined || now === started; // a reused pid is not ours
}

function procRead(pid: number, file: string): string | undefined {
  try {
    return readFileSync(`/proc/${pid}/${file}`, 'utf8');
  } catch {
    return undefined;
  }
}

/** Linux: processes whose environment names this registry, except this process and its direct children. */
function scanEnvironments(dir: string): Entry[] {
  const needle = `\0${REGISTRY_ENV}=${dir}\0`;
  const out: Entry[] = [];
  let pids: string[];
  try {
    pids = readdirSync('/proc').filter((n) => /^\d+$/.test(n));
  } catch {
    return out;
  }
  for (const p of pids) {
    const pid = Number(p);
    if (pid === process.pid) continue;
    const env = procRead(pid, 'environ');
    if (env === undefined || !`\0${env}`.includes(needle)) continue;
    const stat = procRead(pid, 'stat');
    const ppid = stat ? Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]) : -1;
    // The vitest workers: they carry the variable too, and vitest ends them itself.
    if (ppid === process.pid) continue;
    const command = (procRead(pid, 'cmdline') ?? '').split('\0').filter(Boolean).join(' ');
    out.push({ pid, kind: `process (parent ${ppid})`, command, started: processStartTime(pid) });
  }
  return out;
}

/**
 * Global teardown: the processes still running (after a grace period for ones being killed right now),
 * killed. Returns what was found; removes the registry.
 */
export async function reapSurvivors(dir: string, graceMs = 5_000): Promise<Entry[]> {
  const find = (): Entry[] => {
    const byPid = new Map<number, Entry>();
    for (const name of readdirSync(dir, { withFileTypes: true })) {
      if (!name.isFile() || !name.name.endsWith('.json')) continue;
      try {
        const e = JSON.parse(readFileSync(path.join(dir, name.name), 'utf8')) as Entry;
        if (alive(e.pid, e.started)) byPid.set(e.pid, e);
      } catch {
        // half written by a worker that died: nothing to go on
      }
    }
    for (const e of scanEnvironments(dir)) if (!byPid.has(e.pid) && alive(e.pid, e.started)) byPid.set(e.pid, e);
    return [...byPid.values()];
  };
  const deadline = Date.now() + graceMs;
  let left = find();
  while (left.length > 0 && Date.now() < deadline) {
    await new Promise((r) => setTimeout(r, 100));
    left = find();
  }
  for (const e of left) {
    try {
      process.kill(e.pid, 'SIGCONT'); // a SIGSTOPped one
      process.kill(e.pid, 'SIGKILL');
    } catch {
      // gone meanwhile
    }
  }
  rmSync(dir, { recursive: true, force: true });
  return left;
}

export function describeSurvivors(left: Entry[]): string {
  const lines = left.map((e) => `  pid ${e.pid} [${e.kind}${e.test ? `, started by ${e.test}` : ''}]: ${e.command}`);
  return `${left.length} process(es) started by the tests were still running at the end of the run (now killed):\n${lines.join('\n')}`;
}

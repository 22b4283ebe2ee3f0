/**
 * Shared helpers of the etcd cluster tests: unique key prefixes (one etcd serves a whole file) and a
 * cluster member in its own process (cluster-member.mjs) to SIGSTOP or kill. Polling and typed-error
 * checks are in test/helpers/util.ts.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import type { ControllerState } from 'tributary-broker/cluster/controller-election.js';
import { trackChild } from '../../helpers/process-registry.js';
import { eventually } from '../../helpers/util.js';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..', '..');

/** etcd's smallest lease TTL with its default election timeout (shorter ones are rounded up to it). */
export const TTL_SECONDS = 2;
/**
 * Per-call deadline for test clients: bounds how long a change waits on a frozen etcd. Not much lower:
 * a client's first call also sets up its connection, which takes ~1 s on a loaded two-core machine.
 */
export const REQUEST_TIMEOUT_MS = 2_000;

let prefixSeq = 0;
/** A key prefix no other test in the file uses. */
export function uniquePrefix(name: string): string {
  prefixSeq += 1;
  return `/tributary-test/${process.pid}-${prefixSeq}-${name}/`;
}

export interface MemberLine {
  type: 'registered' | 'controller' | 'error' | 'closed';
  brokerId?: number;
  state?: ControllerState;
  message?: string;
}

/** A BrokerRegistry and/or ControllerElection in a child process (built code, packages/broker/dist/cluster). */
export class ClusterMember {
  readonly lines: MemberLine[] = [];
  stderr = '';
  private readonly exited: Promise<void>;

  private constructor(readonly proc: ChildProcess) {
    this.exited = new Promise((r) => proc.once('exit', () => r()));
    let buf = '';
    proc.stdout!.on('data', (d: Buffer) => {
      buf += d.toString();
      for (let nl = buf.indexOf('\n'); nl >= 0; nl = buf.indexOf('\n')) {
        this.lines.push(JSON.parse(buf.slice(0, nl)) as MemberLine);
        buf = buf.slice(nl + 1);
      }
    });
    proc.stderr!.on('data', (d: Buffer) => {
      this.stderr += d.toString();
    });
  }

  static async start(cfg: { endpoints: string[]; prefix: string; brokerId: number; register?: boolean; campaign?: boolean }): Promise<ClusterMember> {
    const script = path.join(ROOT, 'test', 'helpers', 'cluster-member.mjs');
    const proc = trackChild(
      spawn(process.execPath, [script, JSON.stringify({ leaseTtlSeconds: TTL_SECONDS, requestTimeoutMs: REQUEST_TIMEOUT_MS, ...cfg })], {
        stdio: ['ignore', 'pipe', 'pipe'],
      }),
      'cluster-member',
    );
    const m = new ClusterMember(proc);
    const ready = (l: MemberLine) => (cfg.campaign ? l.type === 'controller' : l.type === 'registered');
    try {
      await eventually(`member ${cfg.brokerId} to start (stderr: ${m.stderr})`, () => m.lines.some(ready) || m.failed(), 15_000);
      if (m.failed()) throw new Error(`member ${cfg.brokerId} failed: ${JSON.stringify(m.lines)} ${m.stderr}`);
    } catch (err) {
      await m.dispose(); // never handed to the test, so nobody else would kill it
      throw err;
    }
    return m;
  }

  /** The member's last reported controller state. */
  get controller(): ControllerState | undefined {
    return this.lines.filter((l) => l.type === 'controller').at(-1)?.state;
  }

  private failed(): boolean {
    return this.lines.some((l) => l.type === 'error') || this.proc.exitCode !== null;
  }

  signal(sig: NodeJS.Signals): void {
    if (this.proc.exitCode === null && this.proc.signalCode === null) this.proc.kill(sig);
  }

  async dispose(): Promise<void> {
    if (this.proc.exitCode === null && this.proc.signalCode === null) {
      this.proc.kill('SIGKILL');
      await this.exited;
    }
  }
}

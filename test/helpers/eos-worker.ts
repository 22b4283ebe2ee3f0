/**
 * A kafka-eos-worker.mjs process (a kafkajs exactly-once consume-process-produce member) and the JSON
 * lines it printed; kill() is also what a test's finally calls.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import path from 'node:path';
import readline from 'node:readline';
import { ROOT } from './launcher.js';
import { trackChild } from './process-registry.js';

const WORKER = path.join(ROOT, 'test', 'helpers', 'kafka-eos-worker.mjs');

interface Line {
  type: string;
  partition?: number;
  offset?: number;
  count?: number;
  message?: string;
}

export class EosWorker {
  readonly lines: Line[] = [];
  readonly proc: ChildProcess;
  stderr = '';
  readonly exited: Promise<void>;

  constructor(cfg: Record<string, unknown>) {
    this.proc = trackChild(spawn(process.execPath, [WORKER, JSON.stringify(cfg)], { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'] }), 'kafka-eos-worker');
    this.exited = new Promise((resolve) => this.proc.once('exit', () => resolve()));
    readline.createInterface({ input: this.proc.stdout! }).on('line', (l) => {
      try {
        this.lines.push(JSON.parse(l) as Line);
      } catch {
        this.lines.push({ type: 'garbled', message: l });
      }
    });
    this.proc.stderr!.on('data', (d: Buffer) => {
      this.stderr += d.toString();
    });
  }

  of(type: string): Line[] {
    return this.lines.filter((l) => l.type === type);
  }

  async kill(): Promise<void> {
    if (this.proc.exitCode === null && this.proc.signalCode === null) this.proc.kill('SIGKILL');
    await this.exited;
  }
}


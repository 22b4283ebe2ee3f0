/** The compiled `tributary` command run as a child process by the CLI tests. */
import { spawn } from 'node:child_process';
import { CLI } from './launcher.js';
import { trackChild } from './process-registry.js';

export interface CliResult {
  code: number | null;
  stdout: string;
  stderr: string;
}

/** Runs `tributary <args>` to its end (registered, so a test run never leaves it behind). */
export function runCli(args: string[], opts: { env?: NodeJS.ProcessEnv; stdin?: string } = {}): Promise<CliResult> {
  return new Promise((resolve, reject) => {
    const proc = trackChild(spawn(process.execPath, [CLI, ...args], { env: opts.env ?? process.env, stdio: [opts.stdin === undefined ? 'ignore' : 'pipe', 'pipe', 'pipe'] }), 'cli');
    if (opts.stdin !== undefined) proc.stdin!.end(opts.stdin);
    let stdout = '';
    let stderr = '';
    proc.stdout!.on('data', (d: Buffer) => {
      stdout += d.toString();
    });
    proc.stderr!.on('data', (d: Buffer) => {
      stderr += d.toString();
    });
    proc.once('error', reject);
    proc.once('close', (code) => resolve({ code, stdout, stderr }));
  });
}

/** No TRIBUTARY_* settings leak in from the environment: flags only. */
export function envWithoutTributary(): NodeJS.ProcessEnv {
  return Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('TRIBUTARY_')));
}

/**
 * `tributary dev-cluster --tls` end to end: the compiled CLI makes a CA and certificates with openssl,
 * starts etcd (TLS, client certificates) and 3 TLS brokers, and prints the client commands with `--ca`.
 * Those printed commands work as printed; the same commands without the CA are refused; SIGTERM stops
 * everything and removes the temp directory (certificates included).
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CLI } from '../helpers/launcher.js';
import { type CliResult, envWithoutTributary, runCli } from '../helpers/cli.js';
import { trackChild } from '../helpers/process-registry.js';
import { sleep } from '../helpers/util.js';

const cli = (args: string[], stdin?: string): Promise<CliResult> => runCli(args, { env: envWithoutTributary(), stdin });

/** The arguments of a command dev-cluster printed (`  tributary <args>     # comment`). */
function printed(out: string, start: string): string[] {
  const line = out.split('\n').find((l) => l.trim().startsWith(`tributary ${start}`));
  if (!line) throw new Error(`dev-cluster printed no "tributary ${start}" line:\n${out}`);
  return line.replace(/#.*$/, '').trim().split(/\s+/).slice(1);
}

describe('tributary dev-cluster --tls', () => {
  let dev: ChildProcess | undefined;
  let devOut = '';
  let devErr = '';
  let devExit: Promise<number | null> = Promise.resolve(null);
  let dataDir = '';

  beforeAll(async () => {
    const proc = trackChild(spawn(process.execPath, [CLI, 'dev-cluster', '--brokers', '3', '--tls'], { env: envWithoutTributary(), stdio: ['ignore', 'pipe', 'pipe'] }), 'dev-cluster');
    dev = proc;
    devExit = new Promise((resolve) => proc.once('exit', (code) => resolve(code)));
    proc.stderr!.on('data', (d: Buffer) => {
      devErr += d.toString();
    });
    await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`no bootstrap line from dev-cluster --tls in time\nstdout:\n${devOut}\nstderr:\n${devErr.slice(-5000)}`)), 100_000);
      proc.stdout!.on('data', (d: Buffer) => {
        devOut += d.toString();
        if (/^bootstrap: \S+$/m.test(devOut)) {
          clearTimeout(timer);
          resolve();
        }
      });
      proc.once('exit', (code) => {
        clearTimeout(timer);
        reject(new Error(`dev-cluster --tls exited with ${code} before its bootstrap line\nstdout:\n${devOut}\nstderr:\n${devErr.slice(-5000)}`));
      });
    });
    dataDir = /^data: (\S+) \(temporary/m.exec(devOut)?.[1] ?? '';
  }, 120_000);

  afterAll(async () => {
    // Only after a failure: dev-cluster stops what it started on SIGTERM.
    if (dev && dev.exitCode === null && dev.signalCode === null) {
      dev.kill('SIGTERM');
      const timer = setTimeout(() => dev?.kill('SIGKILL'), 30_000);
      await devExit;
      clearTimeout(timer);
    }
  }, 60_000);

  it('prints the CA clients need, and etcd over https; the brokers print no TLS deprecation warning', () => {
    expect(devErr).not.toMatch(/DEP0123|DeprecationWarning/);
    // --bootstrap takes a list, as the SDK's brokers do.
    expect(devOut).toMatch(/^Try it \(--bootstrap takes one address or a comma-separated list/m);
    // By name: etcd's client would send an IP address as the TLS server name, which Node warns about (DEP0123).
    expect(devOut).toMatch(/etcd https:\/\/localhost:\d+/);
    expect(devOut).toMatch(/^TLS: clients, brokers and etcd; certificates in \S+, clients trust \S+ca\.crt$/m);
    const status = printed(devOut, 'cluster status');
    expect(status).toContain('--ca');
    expect(existsSync(status[status.indexOf('--ca') + 1]!)).toBe(true);
    expect(devOut).toMatch(/new Producer\(\{ brokers: \[.*\], tls: \{ ca: fs\.readFileSync\(".*ca\.crt"\) \} \}\)/);
  });

  it('the printed commands work as printed: status, topic create, produce and consume over TLS', async () => {
    const status = await cli(printed(devOut, 'cluster status'));
    expect(status.code, status.stderr).toBe(0);
    expect(status.stdout).toContain('brokers (3):');
    const create = printed(devOut, 'topic create');
    const made = await cli(create);
    expect(made.code, made.stderr).toBe(0);
    // The connection flags of the printed command (bootstrap and CA), for produce and consume.
    const conn = create.slice(create.indexOf('--bootstrap'));
    const input = `${Array.from({ length: 30 }, (_, i) => `rec-${i}`).join('\n')}\n`;
    let produced: CliResult | undefined;
    for (let attempt = 0; attempt < 20; attempt++) {
      produced = await cli(['produce', 'orders', '--acks', 'all', ...conn], input);
      if (produced.code === 0) break;
      await sleep(250); // right after CREATE the leaders may not have taken their roles yet
    }
    expect(produced!.code, produced!.stderr).toBe(0);
    const consumed = await cli(['consume', 'orders', '--from-beginning', '--max', '30', '--format', 'json', ...conn]);
    expect(consumed.code, consumed.stderr).toBe(0);
    const values = consumed.stdout
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l).value as string);
    expect(values.sort()).toEqual(Array.from({ length: 30 }, (_, i) => `rec-${i}`).sort());
  });

  it('without the CA a client is refused', async () => {
    const args = printed(devOut, 'cluster status');
    const plain = await cli(args.slice(0, args.indexOf('--ca')));
    expect(plain.code).toBe(1);
    expect(plain.stderr).toMatch(/TLS/i);
  });

  it('SIGTERM stops everything and removes the temp directory with its certificates', async () => {
    dev!.kill('SIGTERM');
    const code = await Promise.race([devExit, new Promise<string>((r) => setTimeout(() => r('timeout'), 60_000))]);
    expect(code, devErr.slice(-5000)).toBe(0);
    expect(dataDir).not.toBe('');
    expect(existsSync(dataDir)).toBe(false);
  }, 90_000);
});

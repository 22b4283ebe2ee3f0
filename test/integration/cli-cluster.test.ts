/**
 * `tributary dev-cluster` and `tributary cluster status` end to end: the compiled CLI as child processes.
 * dev-cluster starts a real etcd and 3 brokers; on SIGTERM every one of those processes must be gone
 * (brokers first, then etcd) and its temp data directory removed. `cluster status` also runs against a
 * standalone broker, which answers CLUSTER_STATUS with mode=standalone.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BrokerProcess, CLI } from '../helpers/launcher.js';
import { type CliResult, envWithoutTributary, runCli } from '../helpers/cli.js';
import { trackChild } from '../helpers/process-registry.js';
import { sleep } from '../helpers/util.js';

const cli = (args: string[], stdin?: string): Promise<CliResult> => runCli(args, { env: envWithoutTributary(), stdin });

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

async function waitGone(pids: number[], timeoutMs: number): Promise<number[]> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const left = pids.filter(alive);
    if (left.length === 0 || Date.now() > deadline) return left;
    await sleep(100);
  }
}

describe('tributary dev-cluster and cluster status', () => {
  let dev: ChildProcess | undefined;
  let devOut = '';
  let devErr = '';
  let devExit: Promise<number | null> = Promise.resolve(null);
  let bootstrap: string[] = [];
  let etcdPid = 0;
  let brokerPids: number[] = [];
  let dataDir = '';

  beforeAll(async () => {
    const proc = trackChild(spawn(process.execPath, [CLI, 'dev-cluster', '--brokers', '3'], { env: envWithoutTributary(), stdio: ['ignore', 'pipe', 'pipe'] }), 'dev-cluster');
    dev = proc;
    devExit = new Promise((resolve) => proc.once('exit', (code) => resolve(code)));
    proc.stderr!.on('data', (d: Buffer) => {
      devErr += d.toString();
    });
    await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(
        () => reject(new Error(`no bootstrap line from dev-cluster in time\nstdout:\n${devOut}\nstderr:\n${devErr.slice(-5000)}`)),
        100_000,
      );
      proc.stdout!.on('data', (d: Buffer) => {
        devOut += d.toString();
        const m = /^bootstrap: (\S+)$/m.exec(devOut);
        if (m) {
          clearTimeout(timer);
          bootstrap = m[1]!.split(',');
          resolve();
        }
      });
      proc.once('exit', (code) => {
        clearTimeout(timer);
        reject(new Error(`dev-cluster exited with ${code} before its bootstrap line\nstdout:\n${devOut}\nstderr:\n${devErr.slice(-5000)}`));
      });
    });
    etcdPid = Number(/etcd \S+ \(pid (\d+)\)/.exec(devOut)?.[1]);
    brokerPids = [...devOut.matchAll(/^ {2}\d+\s+127\.0\.0\.1:\d+\s+http:\/\/\S+\s+(\d+)$/gm)].map((m) => Number(m[1]));
    dataDir = /^data: (\S+) \(temporary/m.exec(devOut)?.[1] ?? '';
  }, 120_000);

  afterAll(async () => {
    // Only after a failure. SIGTERM first: dev-cluster stops what it started, including processes whose
    // pids it had not printed yet; they run in their own process groups, so a SIGKILL would orphan them.
    if (dev && dev.exitCode === null && dev.signalCode === null) {
      dev.kill('SIGTERM');
      const timer = setTimeout(() => dev?.kill('SIGKILL'), 30_000);
      await devExit;
      clearTimeout(timer);
    }
    for (const pid of [...brokerPids, etcdPid]) if (pid > 0 && alive(pid)) process.kill(pid, 'SIGKILL');
  }, 60_000);

  it('dev-cluster prints 3 brokers with pids, the etcd pid and a bootstrap list of 3 addresses', () => {
    expect(bootstrap).toHaveLength(3);
    for (const a of bootstrap) expect(a).toMatch(/^127\.0\.0\.1:\d+$/);
    expect(etcdPid).toBeGreaterThan(0);
    expect(brokerPids).toHaveLength(3);
    for (const pid of [etcdPid, ...brokerPids]) expect(alive(pid)).toBe(true);
    expect(dataDir).not.toBe('');
    expect(existsSync(dataDir)).toBe(true);
    expect(devOut).toContain(`tributary cluster status --bootstrap ${bootstrap[0]}`);
  });

  it('cluster status shows 3 brokers, a controller and led internal topics', async () => {
    const plain = await cli(['cluster', 'status', '--bootstrap', bootstrap[0]!]);
    expect(plain.code).toBe(0);
    expect(plain.stdout).not.toContain('__consumer_offsets'); // internal topics only with --internal
    const r = await cli(['cluster', 'status', '--internal', '--bootstrap', bootstrap[0]!]);
    expect(r.stderr).toBe('');
    expect(r.code).toBe(0);
    const lines = r.stdout.split('\n');
    expect(lines[0]).toMatch(/^mode:\s+cluster \(answered by broker 0\)$/);
    expect(lines).toContain('leaderless:        0');
    const controller = Number(/^controller:\s+(\d+)$/m.exec(r.stdout)?.[1]);
    expect([0, 1, 2]).toContain(controller);
    expect(lines).toContain('brokers (3):');
    const brokerRows = lines.filter((l) => /^ {2}\d\s{2,}127\.0\.0\.1:\d+/.test(l)).map((l) => l.trim().split(/\s{2,}/));
    expect(brokerRows.map((row) => row[1])).toEqual(bootstrap);
    expect(brokerRows.filter((row) => row[2] === 'controller').map((row) => Number(row[0]))).toEqual([controller]);
    const header = lines.find((l) => l.trim().startsWith('TOPIC'))!;
    expect(header.trim().split(/\s{2,}/)).toEqual(['TOPIC', 'PARTITION', 'LEADER', 'EPOCH', 'REPLICAS', 'ISR', 'STATE']);
    const offsets = lines.filter((l) => l.trim().startsWith('__consumer_offsets ')).map((l) => l.trim().split(/\s{2,}/));
    expect(offsets.length).toBeGreaterThan(0);
    for (const row of offsets) {
      expect(['0', '1', '2']).toContain(row[2]); // a live leader
      expect(row[4]!.split(',').sort()).toEqual(['0', '1', '2']); // replicated on every broker
    }
  });

  it('cluster status --json prints CLUSTER_STATUS (internal topics with --internal); a dead address in the list is skipped', async () => {
    const r = await cli(['cluster', 'status', '--bootstrap', `127.0.0.1:1,${bootstrap.join(',')}`, '--json', '--internal']);
    expect(r.stderr).toBe('');
    expect(r.code).toBe(0);
    const s = JSON.parse(r.stdout);
    expect(s.mode).toBe('cluster');
    expect(s.brokers.map((b: { id: number; address: string }) => [b.id, b.address]).sort()).toEqual(bootstrap.map((a, id) => [id, a]));
    expect([0, 1, 2]).toContain(s.controller);
    const internal = s.partitions.filter((p: { topic: string }) => p.topic === '__consumer_offsets' || p.topic === '__transaction_state');
    expect(internal.length).toBeGreaterThan(0);
    for (const p of internal) expect([0, 1, 2]).toContain(p.leader);
    expect(s.leaderless).toBe(0);
  });

  it('topic create --replication-factor asks for the replicas explicitly, and more than the live brokers is refused', async () => {
    const ok = await cli(['topic', 'create', 'pairs', '--partitions', '2', '--replication-factor', '2', '--bootstrap', bootstrap[0]!]);
    expect(ok.code).toBe(0);
    expect(ok.stdout).toContain('replication factor 2');
    const tooMany = await cli(['topic', 'create', 'quads', '--replication-factor', '4', '--bootstrap', bootstrap[0]!]);
    expect(tooMany.code).not.toBe(0);
    expect(tooMany.stdout + tooMany.stderr).toContain('NOT_ENOUGH_REPLICAS');
  });

  it('produce sends each batch to its partition leader, whichever broker is the bootstrap', async () => {
    const made = await cli(['topic', 'create', 'lines', '--partitions', '3', '--replication-factor', '3', '--bootstrap', bootstrap[0]!]);
    expect(made.code).toBe(0);
    // Leaders are spread, so a single-broker client would hit NOT_LEADER on two partitions of three.
    const input = `${Array.from({ length: 90 }, (_, i) => `line-${i}`).join('\n')}\n`;
    let produced: { code: number | null; stdout: string; stderr: string } | undefined;
    for (let attempt = 0; attempt < 20; attempt++) {
      produced = await cli(['produce', 'lines', '--batch-size', '10', '--acks', 'all', '--bootstrap', bootstrap[1]!], input);
      if (produced.code === 0) break;
      // Right after CREATE the leaders may not have taken their roles yet.
      await sleep(250);
    }
    expect(produced!.stderr).toBe('');
    expect(produced!.stdout).toContain('produced 90 records to lines');
    const consumed = await cli(['consume', 'lines', '--from-beginning', '--max', '90', '--format', 'json', '--bootstrap', bootstrap[2]!]);
    expect(consumed.code).toBe(0);
    const values = consumed.stdout
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l).value as string);
    expect(values.sort()).toEqual(Array.from({ length: 90 }, (_, i) => `line-${i}`).sort());
    const partitions = new Set(consumed.stdout.trim().split('\n').map((l) => JSON.parse(l).partition as number));
    expect(partitions.size).toBe(3);
  });

  it('a topic created on the dev cluster is replicated on 3 brokers', async () => {
    const c = await cli(['topic', 'create', 'orders', '--partitions', '3', '--bootstrap', bootstrap[1]!]);
    expect(c.code).toBe(0);
    expect(c.stdout).toContain('replication factor 3');
    const r = await cli(['cluster', 'status', '--bootstrap', bootstrap[2]!, '--topic', 'orders']);
    expect(r.code).toBe(0);
    const rows = r.stdout
      .split('\n')
      .filter((l) => l.trim().startsWith('orders '))
      .map((l) => l.trim().split(/\s{2,}/));
    expect(rows.map((row) => row[1])).toEqual(['0', '1', '2']);
    for (const row of rows) expect(row[4]!.split(',').sort()).toEqual(['0', '1', '2']);
    expect(r.stdout).toContain('partitions (3 of orders):');
  });

  it('SIGTERM stops every broker and etcd and removes the temp data directory', async () => {
    dev!.kill('SIGTERM');
    const code = await Promise.race([devExit, new Promise<string>((r) => setTimeout(() => r('timeout'), 60_000))]);
    expect(code, devErr.slice(-5000)).toBe(0);
    expect(devOut).toMatch(/dev-cluster: stopped\n$/);
    expect(devErr).toContain('dev-cluster: SIGTERM, stopping brokers, then etcd');
    // A clean stop is not an error: a stopping broker whose lease the controller revoked once its listener
    // closed logged "error cluster: broker registration lost ... re-registering" and tried to register again.
    // (The controllers' warnings that they revoke the leases of brokers whose listeners are gone stay.)
    const shutdown = devErr.slice(devErr.indexOf('dev-cluster: SIGTERM'));
    expect(shutdown.split('\n').filter((l) => /^\[broker \d+\] (error|fatal) /.test(l) || /re-?registering|registered again/.test(l))).toEqual([]);
    expect(await waitGone([...brokerPids, etcdPid], 5000)).toEqual([]);
    expect(existsSync(dataDir)).toBe(false);
  }, 90_000);
});

describe('tributary cluster status against a standalone broker', () => {
  let broker: BrokerProcess;

  beforeAll(async () => {
    broker = await BrokerProcess.start({ args: ['--offsets-topic-partitions', '2', '--transaction-state-partitions', '2'] });
    const c = await broker.connect();
    await c.command('CREATE', { topic: 'solo', partitions: 2 });
  });

  afterAll(async () => {
    await broker?.dispose();
  });

  it('prints mode standalone, the broker as its own controller, and its partitions', async () => {
    const r = await cli(['cluster', 'status', '--bootstrap', broker.address, '--topic', 'solo']);
    expect(r.stderr).toBe('');
    expect(r.code).toBe(0);
    const lines = r.stdout.split('\n');
    expect(lines.slice(0, 4)).toEqual(['mode:              standalone', 'controller:        0', 'under-replicated:  0', 'leaderless:        0']);
    expect(lines).toContain('brokers (1):');
    expect(
      lines
        .find((l) => l.includes(broker.address))!
        .trim()
        .split(/\s{2,}/),
    ).toEqual(['0', broker.address, 'controller', '-']);
    const rows = lines.filter((l) => l.trim().startsWith('solo ')).map((l) => l.trim().split(/\s{2,}/));
    expect(rows).toEqual([
      ['solo', '0', '0', '0', '0', '0', 'ok'],
      ['solo', '1', '0', '0', '0', '0', 'ok'],
    ]);
  });

  it('--json prints the standalone CLUSTER_STATUS', async () => {
    const r = await cli(['cluster', 'status', '--bootstrap', broker.address, '--json']);
    expect(r.code).toBe(0);
    const s = JSON.parse(r.stdout);
    expect(s).toMatchObject({ mode: 'standalone', controller: 0, under_replicated: 0, leaderless: 0 });
    expect(s.brokers).toEqual([{ id: 0, host: '127.0.0.1', port: broker.port, alive: true }]);
    expect(s.partitions.filter((p: { topic: string }) => p.topic === 'solo')).toHaveLength(2);
  });

  it('an unreachable broker is exit 1 with one error line; a malformed address is exit 2', async () => {
    const r = await cli(['cluster', 'status', '--bootstrap', '127.0.0.1:1']);
    expect(r).toEqual({ code: 1, stdout: '', stderr: 'error: connection refused by 127.0.0.1:1: is a broker running there? (start one with `npm start`)\n' });
    const bad = await cli(['cluster', 'status', '--bootstrap', 'nonsense']);
    expect(bad.code).toBe(2);
    expect(bad.stderr).toBe('error: --bootstrap must be host:port[,host:port...], got "nonsense"\n');
  });
});

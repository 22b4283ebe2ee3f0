import { execFile, spawn } from 'node:child_process';
import fs from 'node:fs/promises';
import path from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BrokerProcess, CLI } from '../helpers/launcher.js';
import { trackChild } from '../helpers/process-registry.js';
import { removeDir, tempDir, until } from '../helpers/util.js';

const run = promisify(execFile);

async function cli(args: string[], input?: string): Promise<{ code: number; stdout: string; stderr: string }> {
  const child = trackChild(execFile(process.execPath, [CLI, ...args]), 'cli');
  if (input !== undefined) child.stdin!.end(input);
  else child.stdin!.end();
  let stdout = '';
  let stderr = '';
  child.stdout!.on('data', (d) => (stdout += d));
  child.stderr!.on('data', (d) => (stderr += d));
  const code = await new Promise<number>((resolve) => child.once('exit', (c) => resolve(c ?? -1)));
  return { code, stdout, stderr };
}

/** The `tributary` command end to end against a real broker process. */
describe('tributary CLI', () => {
  let broker: BrokerProcess;
  let dir: string;

  beforeAll(async () => {
    broker = await BrokerProcess.start({ args: ['--offsets-topic-partitions', '2'] });
    dir = await tempDir('tributary-cli-');
  });

  afterAll(async () => {
    await broker?.dispose();
    await removeDir(dir);
  });

  it('creates, lists and describes topics', async () => {
    const b = ['--bootstrap', broker.address];
    const created = await cli(['topic', 'create', 'cli-t', '--partitions', '3', ...b]);
    expect(created.code).toBe(0);
    expect(created.stdout).toBe('created topic cli-t: 3 partitions, replication factor 1, retention 168 h, cleanup delete\n');
    const again = await cli(['topic', 'create', 'cli-t', '--partitions', '3', '--format', 'json', ...b]);
    expect(JSON.parse(again.stdout)).toMatchObject({ topic: 'cli-t', partitions: '3', created: 'false' });
    // one name per line, internal topics only with --internal; a table by default, JSON for scripts
    const listed = await cli(['topic', 'list', ...b]);
    expect(listed.stdout.split('\n')).toContain('cli-t');
    expect(listed.stdout).not.toContain('__consumer_offsets');
    expect((await cli(['topic', 'list', '--internal', ...b])).stdout.split('\n')).toContain('__consumer_offsets');
    expect(JSON.parse((await cli(['topic', 'list', '--format', 'json', ...b])).stdout)).toContain('cli-t');
    const described = await cli(['topic', 'describe', 'cli-t', ...b]);
    expect(described.stdout).toMatch(/^topic cli-t: 3 partitions, replication factor 1/);
    const header = described.stdout.split('\n')[1]!.trim().split(/\s{2,}/);
    expect(header).toEqual(['PARTITION', 'LEADER', 'EPOCH', 'REPLICAS', 'ISR', 'EARLIEST', 'HWM', 'LEO', 'LSO']);
    expect(described.stdout.trim().split('\n')).toHaveLength(2 + 3);
    const asJson = await cli(['topic', 'describe', 'cli-t', '--format', 'json', ...b]);
    expect(JSON.parse(asJson.stdout).partitions).toHaveLength(3);
    // --bootstrap takes a list and fails over past a dead address
    const failover = await cli(['topic', 'list', '--bootstrap', `127.0.0.1:1,${broker.address}`]);
    expect(failover).toMatchObject({ code: 0, stderr: '' });
    expect(failover.stdout.split('\n')).toContain('cli-t');
    await cli(['topic', 'create', 'cli-del', ...b]);
    expect(await cli(['topic', 'delete', 'cli-del', ...b])).toEqual({ code: 0, stdout: 'deleted topic cli-del\n', stderr: '' });
    // consume --group reads what the group assigns: a partition or an offset of its own is a usage mistake
    const mixed = await cli(['consume', 'cli-t', '--group', 'g', '--partition', '0', ...b]);
    expect(mixed.code).toBe(2);
    expect(mixed.stderr).toMatch(/--partition cannot be combined with --group/);
    const bad = await cli(['topic', 'create', '../evil', ...b]);
    expect(bad.code).toBe(1);
    expect(bad.stderr).toMatch(/error: invalid_topic_name/);
  });

  it('produces lines from a file and from stdin, and consumes them back as JSON', async () => {
    const b = ['--bootstrap', broker.address];
    await cli(['topic', 'create', 'cli-p', '--partitions', '2', ...b]);
    const file = path.join(dir, 'lines.txt');
    await fs.writeFile(file, Array.from({ length: 1000 }, (_, i) => `line-${i}`).join('\n'));
    const fromFile = await cli(['produce', 'cli-p', '--file', file, '--partition', '0', ...b]);
    expect(fromFile.code).toBe(0);
    expect(fromFile.stdout).toContain('produced 1000 records to cli-p');
    const fromStdin = await cli(['produce', 'cli-p', '--key', 'k1', ...b], 'a\nb\nc\n');
    expect(fromStdin.stdout).toContain('produced 3 records to cli-p');
    const asJson = await cli(['produce', 'cli-p', '--partition', '1', '--json', ...b], 'd\n');
    expect(asJson).toMatchObject({ code: 0, stdout: '{"topic":"cli-p","records":1}\n' });

    const consumed = await cli(['consume', 'cli-p', '--from-beginning', '--format', 'json', ...b]);
    expect(consumed.code).toBe(0);
    const records = consumed.stdout.trim().split('\n').map((l) => JSON.parse(l) as { partition: number; offset: number; key: string | null; value: string });
    expect(records).toHaveLength(1004);
    const p0 = records.filter((r) => r.partition === 0 && r.key === null);
    expect(p0.map((r) => r.value)).toEqual(Array.from({ length: 1000 }, (_, i) => `line-${i}`));
    expect(p0.map((r) => r.offset)).toEqual(p0.map((_, i) => i));
    expect(records.filter((r) => r.key === 'k1').map((r) => r.value)).toEqual(['a', 'b', 'c']);

    const tail = await cli(['consume', 'cli-p', '--partition', '0', '--offset', '998', ...b]);
    expect(tail.stdout.trim().split('\n')).toEqual(['line-998', 'line-999']);
  });

  it('reports an unreachable broker and a broker error with exit code 1', async () => {
    const down = await cli(['topic', 'list', '--bootstrap', '127.0.0.1:1']);
    expect(down.code).toBe(1);
    expect(down.stderr).toContain('connection refused by 127.0.0.1:1: is a broker running there?');
    const missing = await cli(['topic', 'describe', 'nope', '--bootstrap', broker.address]);
    expect(missing.code).toBe(1);
    expect(missing.stderr).toMatch(/error: topic_not_found/);
  });

  it('refuses an invalid broker configuration with exit code 2 before starting', async () => {
    const res = await run(process.execPath, [CLI, 'broker', 'start', '--port', '70000', '--data-dir', dir]).catch((e: { code: number; stderr: string }) => e);
    expect((res as { code: number }).code).toBe(2);
    expect((res as { stderr: string }).stderr).toMatch(/invalid config: port/);
  });

  it('--version prints the version of the broker package', async () => {
    const pkg = JSON.parse(await fs.readFile(path.join(import.meta.dirname, '../../packages/broker/package.json'), 'utf8')) as { version: string };
    const r = await cli(['--version']);
    expect(r.code).toBe(0);
    expect(r.stdout.trim()).toBe(pkg.version);
  });

  it('a reader that goes away (`| head`) ends a command quietly: exit 0, no EPIPE stack', async () => {
    await cli(['topic', 'create', 'cli-epipe', '--partitions', '40', '--bootstrap', broker.address]);
    for (const args of [['topic', 'describe', 'cli-epipe'], ['topic', 'list'], ['group', 'list']]) {
      const child = trackChild(execFile(process.execPath, [CLI, ...args, '--bootstrap', broker.address]), 'cli');
      child.stdin!.end();
      // The read end closes before the command writes anything: its first write fails with EPIPE.
      child.stdout!.destroy();
      let stderr = '';
      child.stderr!.on('data', (d) => (stderr += d));
      const code = await new Promise<number>((resolve) => child.once('exit', (c) => resolve(c ?? -1)));
      expect(stderr, args.join(' ')).toBe('');
      expect(code, args.join(' ')).toBe(0);
    }
  });
});

describe('a broker that stops answering', () => {
  it('a command waiting on it fails with exit 1 instead of hanging (the broker frozen by SIGSTOP)', { timeout: 60_000 }, async () => {
    const broker = await BrokerProcess.start({ args: ['--offsets-topic-partitions', '1'] });
    try {
      const admin = await broker.connect();
      await admin.command('CREATE', { topic: 'frozen', partitions: 1 });
      await admin.command('PUBLISH', { topic: 'frozen', partition: 0, message: 'before' });
      await admin.close();
      const child = trackChild(spawn(process.execPath, [CLI, 'consume', 'frozen', '--from-beginning', '--follow', '--bootstrap', broker.address], { stdio: ['ignore', 'pipe', 'pipe'] }), 'cli');
      let stdout = '';
      let stderr = '';
      child.stdout!.on('data', (d: Buffer) => (stdout += d.toString()));
      child.stderr!.on('data', (d: Buffer) => (stderr += d.toString()));
      const exited = new Promise<number>((resolve) => child.once('exit', (c) => resolve(c ?? -1)));
      await until(() => stdout.includes('before'), 15_000, 'the record consumed');
      broker.proc!.kill('SIGSTOP');
      try {
        expect(await exited).toBe(1);
        expect(stderr).toMatch(/lost connection to broker/);
      } finally {
        broker.proc!.kill('SIGCONT');
      }
    } finally {
      await broker.dispose();
    }
  });
});


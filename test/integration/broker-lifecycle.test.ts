import { spawn } from 'node:child_process';
import net from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import type { Batch, } from 'tributary-protocol/batch.js';
import { parseLine } from 'tributary-protocol/command.js';
import { BrokerProcess, CLI } from '../helpers/launcher.js';
import { trackChild } from '../helpers/process-registry.js';
import { batchRec, removeDir, sleep, tempDir, until } from '../helpers/util.js';

const FAST = ['--offsets-topic-partitions', '1'];

describe('broker lifecycle', () => {
  let broker: BrokerProcess | undefined;

  afterEach(async () => {
    await broker?.dispose();
    broker = undefined;
  });

  it('reports itself in CLUSTER_STATUS as the standalone controller and leader', async () => {
    broker = await BrokerProcess.start({ args: [...FAST, '--broker-id', '7'] });
    const c = await broker.connect();
    await c.command('CREATE', { topic: 'cs', partitions: 2 });
    await c.command('PUBLISH', { topic: 'cs', partition: 1, message: 'x' });
    const s = await c.json<{ mode: string; controller: number; brokers: Array<{ id: number; port: number; alive: boolean }>; partitions: Array<{ topic: string; partition: number; leader: number; hwm: number }>; under_replicated: number; leaderless: number }>('CLUSTER_STATUS');
    expect(s.mode).toBe('standalone');
    expect(s.controller).toBe(7);
    expect(s.brokers).toEqual([{ id: 7, host: '127.0.0.1', port: broker.port, alive: true }]);
    expect(s.partitions.filter((p) => p.topic === 'cs')).toEqual([
      { topic: 'cs', partition: 0, leader: 7, leader_epoch: 0, isr: [7], hwm: 0 },
      { topic: 'cs', partition: 1, leader: 7, leader_epoch: 0, isr: [7], hwm: 1 },
    ]);
    expect(s.under_replicated + s.leaderless).toBe(0);
  });

  it('closes a connection that stays idle past the idle timeout, but not a streaming one', async () => {
    broker = await BrokerProcess.start({ args: [...FAST, '--idle-timeout-ms', '400', '--stream-keepalive-ms', '100'] });
    const c = await broker.connect();
    await c.command('CREATE', { topic: 'idle', partitions: 1 });
    const raw = net.connect({ host: '127.0.0.1', port: broker.port });
    const closedAt = await new Promise<number>((resolve) => {
      const t0 = Date.now();
      raw.on('close', () => resolve(Date.now() - t0));
      raw.on('error', () => {});
    });
    expect(closedAt).toBeGreaterThanOrEqual(350);
    const s = await broker.connect();
    const it = s.stream({ topic: 'idle', partition: 0, offset: 0 });
    const pending = it.next();
    await sleep(1000);
    // `c` itself sat idle meanwhile and was closed: a fresh connection publishes.
    expect(c.closed).toBe(true);
    const p = await broker.connect();
    await p.command('PUBLISH', { topic: 'idle', partition: 0, message: 'still here' });
    const n = await pending;
    expect(n.done).toBe(false);
    const batch = n.value as Batch;
    expect(batch.records[0]!.value.toString()).toBe('still here');
  });

  it('finishes in-flight appends on SIGTERM and keeps every acknowledged record', async () => {
    broker = await BrokerProcess.start({ args: FAST });
    const c = await broker.connect();
    await c.command('CREATE', { topic: 'term', partitions: 1 });
    const acked: number[] = [];
    const sends = Array.from({ length: 200 }, (_, i) =>
      c.produceBatch({ topic: 'term', partition: 0, acks: '1', idempotent: false, firstSequence: 0, lastSequence: 0, records: [batchRec(`t${i}`)] }).then(
        (r) => acked.push(r.base_offset),
        () => undefined,
      ),
    );
    await sleep(5);
    const exit = broker.stop();
    await Promise.all(sends);
    expect(await exit).toBe(0);
    await broker.relaunch();
    const after = await broker.connect();
    const offs = parseLine(await after.command('LIST_OFFSETS', { topic: 'term' })).params.get('offsets')!;
    const leo = Number(/leo=(\d+)/.exec(offs)![1]);
    expect(leo).toBeGreaterThanOrEqual(acked.length);
    const batch = await after.consume({ topic: 'term', partition: 0, offset: 0, batch: 1000 });
    for (const o of acked) expect(batch.records[o]!.offset).toBe(o);
  });

  it('deletes whole old segments by retention bytes and moves the earliest offset', async () => {
    broker = await BrokerProcess.start({ args: [...FAST, '--segment-bytes', '4096', '--retention-check-ms', '200'] });
    const c = await broker.connect();
    await c.command('CREATE', { topic: 'ret', partitions: 1, retention_bytes: 8192 });
    for (let i = 0; i < 20; i++) {
      await c.produceBatch({ topic: 'ret', partition: 0, acks: '1', idempotent: false, firstSequence: 0, lastSequence: 0, records: Array.from({ length: 10 }, (_, j) => batchRec(`${i}-${j}`.padEnd(100, '.'))) });
    }
    const earliest = async () => Number(/earliest=(\d+)/.exec(parseLine(await c.command('LIST_OFFSETS', { topic: 'ret' })).params.get('offsets')!)![1]);
    const deadline = Date.now() + 10_000;
    while ((await earliest()) === 0 && Date.now() < deadline) await sleep(100);
    const first = await earliest();
    expect(first).toBeGreaterThan(0);
    const b = await c.consume({ topic: 'ret', partition: 0, offset: first, batch: 1 });
    expect(b.records[0]!.offset).toBe(first);
    await expect(c.consume({ topic: 'ret', partition: 0, offset: 0 })).rejects.toMatchObject({ code: 'OFFSET_OUT_OF_RANGE' });
  });

  it('logs JSON lines when stderr is not a terminal, readable lines with --log-format pretty', async () => {
    const json = await BrokerProcess.start({ args: ['--offsets-topic-partitions', '1', '--log-level', 'info'] });
    const pretty = await BrokerProcess.start({ args: ['--offsets-topic-partitions', '1', '--log-level', 'info', '--log-format', 'pretty'] });
    try {
      const jsonLines = json.stderr.trim().split('\n');
      expect(jsonLines.length).toBeGreaterThan(0);
      for (const l of jsonLines) expect(JSON.parse(l)).toMatchObject({ name: 'tributary', level: expect.any(Number) });
      expect(jsonLines.some((l) => JSON.parse(l).msg === 'broker ready')).toBe(true);
      const prettyLines = pretty.stderr.trim().split('\n');
      expect(prettyLines.some((l) => /^\[\d\d:\d\d:\d\d\.\d{3}\] INFO: broker ready \{.*"port":/.test(l))).toBe(true);
      for (const l of prettyLines) expect(() => JSON.parse(l)).toThrow();
    } finally {
      await Promise.all([json.dispose(), pretty.dispose()]);
    }
  });

  it('stops on SIGTERM after the reader of its log pipe went away (a log collector that died)', async () => {
    for (const format of ['json', 'pretty']) {
      const dir = await tempDir('tributary-deadlog-');
      try {
        const child = trackChild(
          spawn(process.execPath, [CLI, 'broker', 'start', '--port', '0', '--health-port', '0', '--data-dir', dir, '--offsets-topic-partitions', '1', '--log-level', 'info', '--log-format', format], {
            stdio: ['ignore', 'pipe', 'pipe'],
          }),
          'broker',
        );
        const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
        // The readers go away after the first log line, while the broker still starts: its listening
        // line and every later log line go into a broken pipe.
        await new Promise((resolve) => child.stderr!.once('data', resolve));
        child.stderr!.destroy();
        child.stdout!.destroy();
        const state = await until(() => child.exitCode !== null, 5000, 'exit by itself').then(
          () => 'exited',
          () => 'running',
        );
        if (state === 'running') child.kill('SIGTERM');
        const code = await Promise.race([exited, sleep(15_000).then(() => 'still running' as const)]);
        if (code === 'still running') child.kill('SIGKILL');
        expect(code, format).not.toBe('still running');
      } finally {
        await removeDir(dir);
      }
    }
  });
});

/**
 * `--max-open-segment-files` on a real broker: with far more partitions than the bound, written and read
 * all over, the process holds about the bound in fds rather than one per partition; a clean restart
 * (which used to fail with EMFILE once partitions outnumbered the fd limit) finds every record.
 */
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Connection } from 'tributary-protocol/connection.js';
import { BrokerProcess, CLI } from '../helpers/launcher.js';
import { removeDir, tempDir } from '../helpers/util.js';

const BOUND = 40;
const TOPICS = 3;
const PARTITIONS = 80;

function fdsOf(pid: number): number {
  return fs.readdirSync(`/proc/${pid}/fd`).length;
}

describe('a bounded number of open segment files', () => {
  let broker: BrokerProcess;
  let c: Connection;
  let dir: string;
  let log: string;

  beforeAll(async () => {
    dir = await tempDir('trib-fd-budget-');
    log = path.join(dir, 'broker.log');
    broker = await BrokerProcess.start({ stderrFile: log, args: ['--max-open-segment-files', String(BOUND), '--offsets-topic-partitions', '2', '--transaction-state-partitions', '2'] });
    c = await broker.connect();
  });

  afterAll(async () => {
    await c?.close().catch(() => {});
    await broker?.dispose();
    if (dir) await removeDir(dir);
  });

  async function readAll(conn: Connection): Promise<string[]> {
    const values: string[] = [];
    for (let t = 0; t < TOPICS; t++) {
      for (let p = 0; p < PARTITIONS; p++) {
        const b = await conn.consume({ topic: `fd${t}`, partition: p, offset: 0, batch: 10 });
        for (const r of b.records) values.push(r.value.toString());
      }
    }
    return values;
  }

  it(`${TOPICS * PARTITIONS} partitions written and read hold about ${BOUND} segment fds; a restart finds every record`, async () => {
    for (let t = 0; t < TOPICS; t++) await c.command('CREATE', { topic: `fd${t}`, partitions: PARTITIONS });
    const expected: string[] = [];
    for (let t = 0; t < TOPICS; t++) {
      await Promise.all(
        Array.from({ length: PARTITIONS }, (_, p) => {
          expected.push(`t${t}p${p}`);
          return c.command('PUBLISH', { topic: `fd${t}`, partition: p, acks: 1, message: `t${t}p${p}` });
        }),
      );
    }
    expect((await readAll(c)).sort()).toEqual(expected.sort());
    const metrics = (await broker.health('/metrics')).body;
    const open = Number(/^tributary_open_segment_files (\d+)/m.exec(metrics)?.[1]);
    expect(open).toBeLessThanOrEqual(BOUND);
    // Sockets, the data directory lock, etcd-free standalone: a few dozen fds beside the segments.
    const fds = fdsOf(broker.proc!.pid!);
    expect(fds).toBeLessThan(BOUND + 60);
    expect(fds).toBeLessThan(TOPICS * PARTITIONS);

    await c.close();
    await broker.restart();
    c = await broker.connect();
    // The first shutdown closed every log cleanly (no EMFILE), so the restart trusted them.
    expect(fs.readFileSync(log, 'utf8')).not.toContain('clean shutdown failed');
    expect((await readAll(c)).sort()).toEqual(expected.sort());
    expect(fdsOf(broker.proc!.pid!)).toBeLessThan(BOUND + 60);
  });

  it('refuses a bound below 8', async () => {
    const r = await promisify(execFile)(process.execPath, [CLI, 'broker', 'start', '--max-open-segment-files', '2', '--data-dir', path.join(dir, 'bad')]).then(
      () => ({ code: 0, stderr: '' }),
      (e: { code?: number; stderr?: string }) => ({ code: e.code ?? -1, stderr: e.stderr ?? '' }),
    );
    expect(r.code).not.toBe(0);
    expect(r.stderr).toMatch(/max-open-segment-files|maxOpenSegmentFiles/);
  });
});

describe('a burst of appends to more partitions than the bound, under the fd limit docs/operations.md advises', () => {
  const bound = 100;
  const conns = 8;
  const partitions = 600;
  let broker: BrokerProcess;
  const clients: Connection[] = [];

  beforeAll(async () => {
    // The bound, the connections and 200 more (docs/operations.md, "Limits").
    const args = ['--max-open-segment-files', String(bound), '--offsets-topic-partitions', '2', '--transaction-state-partitions', '2'];
    broker = await BrokerProcess.start({ fdLimit: bound + conns + 200, args });
    for (let i = 0; i < conns; i++) clients.push(await broker.connect());
  });

  afterAll(async () => {
    for (const c of clients) await c.close().catch(() => {});
    await broker?.dispose();
  });

  it(`${partitions} partitions written all at once, 3 times over ${conns} connections: no append is refused for want of fds`, async () => {
    await clients[0]!.command('CREATE', { topic: 'burst', partitions });
    const refused: string[] = [];
    for (let round = 0; round < 3; round++) {
      await Promise.all(
        Array.from({ length: partitions }, (_, p) =>
          clients[p % conns]!.command('PUBLISH', { topic: 'burst', partition: p, acks: 1, message: `r${round}p${p}` }).catch((err: unknown) => {
            refused.push(String((err as Error).message));
          }),
        ),
      );
    }
    expect(refused.slice(0, 3)).toEqual([]);
    expect(refused.length).toBe(0);
    const metrics = (await broker.health('/metrics')).body;
    expect(Number(/^tributary_open_segment_files (\d+)/m.exec(metrics)?.[1])).toBeLessThanOrEqual(bound);
    for (const p of [0, 299, 599]) {
      const b = await clients[0]!.consume({ topic: 'burst', partition: p, offset: 0, batch: 10 });
      expect(b.records.map((r) => r.value.toString())).toEqual([0, 1, 2].map((r) => `r${r}p${p}`));
    }
  });
});

/**
 * `--tail-cache-bytes` on a real broker: many partitions written hold at most the bound in their tail
 * caches together (`tributary_tail_cache_bytes`) and every record still reads back; 0 turns the caches off.
 * A standalone broker does not rewrite its partitions' HWM checkpoints on the flush timer.
 */
import fs from 'node:fs';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { BrokerProcess } from '../helpers/launcher.js';
import { removeDir, tempDir } from '../helpers/util.js';

const PARTITIONS = 40;
const PER_PARTITION = 5;

async function gauge(broker: BrokerProcess, name: string): Promise<number> {
  const m = new RegExp(`^${name} (\\S+)$`, 'm').exec((await broker.health('/metrics')).body);
  if (!m) throw new Error(`no ${name} in /metrics`);
  return Number(m[1]);
}

describe('the tail cache budget of a broker', () => {
  let broker: BrokerProcess | undefined;
  let dir: string | undefined;
  afterEach(async () => {
    await broker?.dispose();
    broker = undefined;
    if (dir) await removeDir(dir);
    dir = undefined;
  });

  async function writeAndReadBack(args: string[]): Promise<number> {
    dir = await tempDir('trib-tail-budget-');
    broker = await BrokerProcess.start({ dataDir: path.join(dir, 'data'), args: [...args, '--flush', 'interval', '--flush-interval-ms', '50', '--offsets-topic-partitions', '2', '--transaction-state-partitions', '2'] });
    const c = await broker.connect();
    try {
      await c.command('CREATE', { topic: 'tc', partitions: PARTITIONS });
      const value = 'v'.repeat(300);
      for (let i = 0; i < PER_PARTITION; i++) {
        await Promise.all(Array.from({ length: PARTITIONS }, (_, p) => c.command('PUBLISH', { topic: 'tc', partition: p, acks: 1, message: `${p}-${i}-${value}` })));
      }
      for (let p = 0; p < PARTITIONS; p++) {
        const b = await c.consume({ topic: 'tc', partition: p, offset: 0, batch: 100 });
        expect(b.records.map((r) => r.value.toString().split('-').slice(0, 2).join('-'))).toEqual(Array.from({ length: PER_PARTITION }, (_, i) => `${p}-${i}`));
      }
      return await gauge(broker, 'tributary_tail_cache_bytes');
    } finally {
      await c.close();
    }
  }

  it('holds at most --tail-cache-bytes over every partition, and every record reads back', async () => {
    const bound = 20_000; // far less than 40 partitions x 5 records of 300 B
    const held = await writeAndReadBack(['--tail-cache-bytes', String(bound)]);
    expect(held).toBeGreaterThan(0);
    expect(held).toBeLessThanOrEqual(bound);
    // A standalone broker leaves the HWM checkpoint to close: none was written by the 50 ms flush timer
    // (armed here for flush interval's fsyncs).
    const partitionDirs = fs.readdirSync(path.join(dir!, 'data', 'logs')).filter((d) => d.startsWith('tc~'));
    expect(partitionDirs).toHaveLength(1);
    const checkpoints = fs.readdirSync(path.join(dir!, 'data', 'logs', partitionDirs[0]!)).filter((p) => fs.existsSync(path.join(dir!, 'data', 'logs', partitionDirs[0]!, p, 'hwm.checkpoint')));
    expect(checkpoints).toEqual([]);
  });

  it('--tail-cache-bytes 0 turns the caches off; reads come from the segments', async () => {
    expect(await writeAndReadBack(['--tail-cache-bytes', '0'])).toBe(0);
  });

  it('by default the caches hold what was written (below the default bound)', async () => {
    const held = await writeAndReadBack([]);
    expect(held).toBeGreaterThan(PARTITIONS * PER_PARTITION * 300);
  });
});

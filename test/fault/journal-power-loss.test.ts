/**
 * The journal on a real broker process (--journal true; docs/architecture.md "The journal"): acknowledged
 * records are durable in the journal before any segment fsync, so a crash of the machine that takes the
 * segments' unsynced bytes loses none of them. Simulated here by a kill -9 and then cutting every segment
 * file to nothing (no segment was fsynced: the flush interval is longer than the test), before the restart.
 */
import { readdir, truncate, unlink } from 'node:fs/promises';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { expectAcknowledgedStored, readValues, type StoredAt } from '../helpers/acked-records.js';
import { BrokerProcess } from '../helpers/launcher.js';

const PARTITIONS = 3;

async function filesUnder(dir: string): Promise<string[]> {
  const out: string[] = [];
  for (const e of await readdir(dir, { withFileTypes: true })) {
    const p = path.join(dir, e.name);
    if (e.isDirectory()) out.push(...(await filesUnder(p)));
    else out.push(p);
  }
  return out;
}

describe('the journal', () => {
  let broker: BrokerProcess | undefined;
  afterEach(async () => {
    await broker?.dispose();
    broker = undefined;
  });

  it('a restart after the segments lost every unsynced byte still has each acknowledged record where it was acknowledged', async () => {
    broker = await BrokerProcess.start({ args: ['--journal', 'true', '--flush-interval-ms', '600000', '--offsets-topic-partitions', '1'] });
    const c = await broker.connect();
    await c.command('CREATE', { topic: 'j', partitions: PARTITIONS });
    const acked = new Map<string, StoredAt>();
    await Promise.all(
      Array.from({ length: PARTITIONS }, async (_, partition) => {
        for (let i = 0; i < 150; i++) {
          const value = `p${partition}-${i}`;
          const r = await c.json<{ offset: number }>('PUBLISH', { topic: 'j', partition, acks: 'all', message: value });
          acked.set(value, { partition, offset: r.offset });
        }
      }),
    );
    // Every acknowledgement came from a journal write (one write may cover several appends).
    const metrics = (await broker.health('/metrics')).body;
    const writes = Number(/^tributary_journal_write_seconds_count (\d+)/m.exec(metrics)?.[1]);
    expect(writes).toBeGreaterThan(0);
    expect(writes).toBeLessThanOrEqual(acked.size + 10);
    await broker.kill();
    const segments = (await filesUnder(path.join(broker.dataDir, 'logs'))).filter((f) => f.includes(`${path.sep}j~`) && /\.(log|index)$/.test(f));
    expect(segments.filter((f) => f.endsWith('.log'))).toHaveLength(PARTITIONS);
    for (const f of segments) {
      if (f.endsWith('.log')) await truncate(f, 0);
      else await unlink(f);
    }
    await broker.relaunch();
    const r = await broker.connect();
    const stored = new Map<string, StoredAt>();
    for (let p = 0; p < PARTITIONS; p++) await readValues(r, 'j', p, stored);
    expect(stored.size).toBe(acked.size);
    expectAcknowledgedStored(acked, stored);
    expect(broker.stderr).toMatch(/replayed records from the journal/);
  });
});

/**
 * kill -9 while producers are sending: with flush=always every acknowledged record must survive at
 * exactly its acknowledged offset, logs stay contiguous from 0, and nothing is stored twice.
 */
import { afterEach, describe, expect, it } from 'vitest';
import type { Connection } from 'tributary-protocol/connection.js';
import type { Batch } from 'tributary-protocol/batch.js';
import { parseLine } from 'tributary-protocol/command.js';
import { BrokerProcess } from '../helpers/launcher.js';
import { sleep } from '../helpers/util.js';

const TOPIC = 'k9';
const PARTITIONS = 4;
const PRODUCERS = 4;
const BATCH = 50;
const WINDOW = 8; // batches in flight per producer
const RUN_MS = 2000;
const CYCLES = 3;
const PAD = '.'.repeat(80);
/** These tests use no consumer groups: one `__consumer_offsets` partition instead of 50 makes every start faster. */
const BASE_ARGS = ['--offsets-topic-partitions', '1'];

interface Ack {
  partition: number;
  base: number;
  last: number;
  ids: string[];
}

function batchOf(partition: number, ids: string[]): Batch {
  return {
    topic: TOPIC,
    partition,
    acks: '1',
    idempotent: false,
    firstSequence: 0,
    lastSequence: 0,
    records: ids.map((id) => ({ offset: 0, sequence: 0, producerId: '', key: null, epoch: -1, value: Buffer.from(`${id}|${PAD}`), timestamp: 0, attributes: 0, headers: [] })),
  };
}

/** Pipelines batches (WINDOW in flight) until the connection dies; records every ack it receives. */
async function produceUntilDeath(conn: Connection, name: string, acks: Ack[], stats: { sent: number; failed: number }): Promise<void> {
  const inflight = new Set<Promise<void>>();
  let n = 0;
  let dead = false;
  while (!dead && !conn.closed) {
    const partition = n % PARTITIONS;
    const ids = Array.from({ length: BATCH }, (_, i) => `${name}-${n}-${i}`);
    n++;
    const p = conn.produceBatch(batchOf(partition, ids)).then(
      (r) => {
        // A wrong ack is a failure in itself, not just a missing one.
        expect(r).toMatchObject({ partition, count: BATCH, last_offset: r.base_offset + BATCH - 1 });
        acks.push({ partition, base: r.base_offset, last: r.last_offset, ids });
      },
      () => {
        dead = true;
        stats.failed++;
      },
    );
    stats.sent++;
    inflight.add(p);
    p.finally(() => inflight.delete(p)).catch(() => {});
    if (inflight.size >= WINDOW) await Promise.race(inflight);
  }
  await Promise.all(inflight);
}

async function readPartition(c: Connection, partition: number): Promise<Array<{ offset: number; id: string }>> {
  const out: Array<{ offset: number; id: string }> = [];
  let offset = 0;
  for (;;) {
    const b = await c.consume({ topic: TOPIC, partition, offset, batch: 10_000, max_bytes: 16 * 1024 * 1024 });
    if (b.records.length === 0) return out;
    for (const r of b.records) {
      const v = r.value.toString();
      out.push({ offset: r.offset, id: v.slice(0, v.indexOf('|')) });
      offset = r.offset + 1;
    }
  }
}

describe('kill -9 during produce (flush=always)', () => {
  let broker: BrokerProcess | undefined;

  afterEach(async () => {
    await broker?.dispose();
    broker = undefined;
  });

  it('keeps every acknowledged record at its acknowledged offset across repeated kill -9', async () => {
    broker = await BrokerProcess.start({ args: BASE_ARGS });
    const admin = await broker.connect();
    await admin.command('CREATE', { topic: TOPIC, partitions: PARTITIONS });
    await admin.close();

    const acks: Ack[] = [];
    for (let cycle = 0; cycle < CYCLES; cycle++) {
      const conns = await Promise.all(Array.from({ length: PRODUCERS }, () => broker!.connect()));
      const stats = { sent: 0, failed: 0 };
      const before = acks.length;
      const running = conns.map((c, i) => produceUntilDeath(c, `c${cycle}p${i}`, acks, stats));
      await sleep(RUN_MS);
      await broker.kill('SIGKILL');
      await Promise.all(running);
      // The producers were still going when the broker died, and had been acknowledged for a while.
      expect(stats.failed).toBeGreaterThan(0);
      expect(acks.length - before).toBeGreaterThan(10);

      await broker.relaunch();
      expect((await broker.health('/ready')).status).toBe(200);
      const c = await broker.connect();
      const logs: string[][] = [];
      const offsets = parseLine(await c.command('LIST_OFFSETS', { topic: TOPIC })).params.get('offsets')!;
      const seen = new Set<string>();
      const duplicates: string[] = [];
      for (let p = 0; p < PARTITIONS; p++) {
        const log = await readPartition(c, p);
        // Contiguous from 0, and the log end the broker reports is the end of what it serves.
        const gaps = log.filter((r, i) => r.offset !== i).slice(0, 5);
        expect(gaps, `p${p} offsets not contiguous from 0`).toEqual([]);
        expect(offsets).toContain(`P${p}:earliest=0:latest=${log.length}:leo=${log.length}:hwm=${log.length}`);
        for (const r of log) {
          if (seen.has(r.id)) duplicates.push(r.id);
          seen.add(r.id);
        }
        logs.push(log.map((r) => r.id));
      }
      expect(duplicates.slice(0, 5), 'payload ids stored twice').toEqual([]);
      // Every ack from every cycle so far: present, at exactly its offset, in batch order.
      const wrong: string[] = [];
      for (const a of acks) {
        const log = logs[a.partition]!;
        if (a.last - a.base + 1 !== a.ids.length || a.ids.some((id, i) => log[a.base + i] !== id)) {
          wrong.push(`p${a.partition} ${a.base}..${a.last}: acked ${a.ids[0]}.. stored ${log[a.base]}..`);
        }
      }
      expect(wrong.slice(0, 5), `${wrong.length} of ${acks.length} acknowledged batches lost or moved`).toEqual([]);
      // Acked offset ranges never overlap.
      for (let p = 0; p < PARTITIONS; p++) {
        const ranges = acks.filter((a) => a.partition === p).sort((x, y) => x.base - y.base);
        for (let i = 1; i < ranges.length; i++) expect(ranges[i]!.base).toBeGreaterThan(ranges[i - 1]!.last);
      }
      // The log accepts appends at its end after recovery.
      const end = logs[0]!.length;
      const r = await c.produceBatch(batchOf(0, [`after-kill-${cycle}`]));
      expect(r.base_offset).toBe(end);
      acks.push({ partition: 0, base: r.base_offset, last: r.last_offset, ids: [`after-kill-${cycle}`] });
      await c.close();
    }
  });
});

/**
 * Replication of logs stored as append blocks (`--stored-layout blocks`, docs/architecture.md "Stored
 * batches") on a real 3-broker cluster: SDK producers (idempotent and plain) write blocks, a killed leader's
 * successor serves every acknowledged record, the killed broker catches up once relaunched, and each
 * broker's log then holds the same records and the same bytes, blocks included.
 */
import { readFile, readdir } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Producer } from 'tributary-client/producer.js';
import type { LogRecord } from 'tributary-protocol/record.js';
import { PartitionLog } from 'tributary-broker/storage/partition-log.js';
import { TestCluster } from '../../helpers/cluster.js';

const TOPIC = 'blk';

/** The partition's segment files of a broker's data directory, concatenated, and the blocks among their units. */
async function segments(dataDir: string): Promise<{ dir: string; bytes: Buffer; blocks: number }> {
  const logs = join(dataDir, 'logs');
  const topicDir = (await readdir(logs)).find((d) => d.startsWith(`${TOPIC}~`));
  if (!topicDir) throw new Error(`no ${TOPIC} directory in ${logs}`);
  const dir = join(logs, topicDir, '0');
  const files = (await readdir(dir)).filter((f) => f.endsWith('.log')).sort();
  const bytes = Buffer.concat(await Promise.all(files.map((f) => readFile(join(dir, f)))));
  let blocks = 0;
  for (let p = 0; p < bytes.length; ) {
    const w = bytes.readUInt32BE(p);
    if (w >= 0x80000000) blocks++;
    p += 4 + (w & 0x7fffffff);
  }
  return { dir, bytes, blocks };
}

async function allRecords(dir: string): Promise<LogRecord[]> {
  const log = await PartitionLog.open(dir, { flush: 'os' });
  try {
    const out: LogRecord[] = [];
    for (let next = log.logStartOffset; next < log.logEndOffset; ) {
      const got = await log.read(next, { maxRecords: 5000, maxBytes: 1 << 24, keepAppendMarker: true });
      if (got.length === 0) break;
      out.push(...got);
      next = got[got.length - 1]!.offset + 1;
    }
    return out;
  } finally {
    await log.close();
  }
}

describe('a cluster storing append blocks (--stored-layout blocks)', () => {
  let cluster: TestCluster;
  const producers: Producer[] = [];

  beforeAll(async () => {
    cluster = await TestCluster.start(3, ['--stored-layout', 'blocks']);
  }, 90_000);

  afterAll(async () => {
    await Promise.all(producers.map((p) => p.close().catch(() => {})));
    await cluster?.dispose();
  });

  it('replicates blocks: the new leader serves every acknowledged record, a relaunched broker catches up, the logs are equal', async () => {
    const c = cluster;
    const first = await c.createInSync(TOPIC);
    const producer = (idempotent: boolean) => {
      const p = new Producer({
        brokers: c.addresses,
        acks: 'all',
        idempotent,
        lingerMs: 2,
        retry: { retries: 100, initialDelayMs: 50, maxDelayMs: 500, maxElapsedMs: 30_000 },
      });
      producers.push(p);
      return p;
    };
    const [idem, plain] = [producer(true), producer(false)];
    const acked = new Map<number, string>();
    const produce = async (tag: string, n: number) => {
      const sends: Array<Promise<void>> = [];
      for (let i = 0; i < n; i += 10) {
        for (const [p, kind] of [
          [idem, 'i'],
          [plain, 'p'],
        ] as const) {
          const values = Array.from({ length: 10 }, (_, j) => `${tag}-${kind}${i + j}`);
          sends.push(
            p.send({ topic: TOPIC, messages: values.map((value, j) => ({ key: `k${j}`, value, headers: j === 0 ? { h: 'x' } : undefined })) }).then((mds) => {
              for (const [j, md] of mds.entries()) acked.set(md.offset, values[j]!);
            }),
          );
        }
      }
      await Promise.all(sends);
    };
    await produce('a', 200);
    expect(acked.size).toBe(400);

    // kill -9 of the leader: its successor has every acknowledged record (acks all), and takes more.
    await c.broker(first.id).kill('SIGKILL');
    const next = await c.waitFor('a new leader', async () => {
      const l = await c.leaderOf(TOPIC, 0);
      return l.id >= 0 && l.id !== first.id ? l : false;
    });
    await produce('b', 100);
    const served = new Map<number, string>();
    const conn = await c.connect(next.id);
    try {
      for (let offset = 0; ; ) {
        const b = await conn.consume({ topic: TOPIC, partition: 0, offset, batch: 5000, isolation: 'read_uncommitted' });
        if (b.records.length === 0) break;
        for (const r of b.records) served.set(r.offset, r.value.toString());
        offset = b.records.at(-1)!.offset + 1;
      }
    } finally {
      await conn.close();
    }
    expect([...acked].filter(([o, v]) => served.get(o) !== v)).toEqual([]);

    // The killed broker comes back as a follower and catches up; one more acks=all send once it is in the
    // ISR means every broker has every record before it.
    await c.broker(first.id).relaunch();
    await c.waitFor('the relaunched broker back in the ISR', async () => (await c.leaderOf(TOPIC, 0)).isr.length === 3, 60_000);
    await produce('c', 10);
    for (const b of c.brokers) expect(await b.stop()).toBe(0);

    const logs = await Promise.all(c.brokers.map((b) => segments(b.dataDir)));
    // Blocks were written (SDK frames are blockable), and every broker's log holds the same bytes.
    for (const l of logs) expect(l.blocks).toBeGreaterThan(0);
    for (const l of logs.slice(1)) expect(l.bytes.equals(logs[0]!.bytes)).toBe(true);
    const records = await Promise.all(logs.map((l) => allRecords(l.dir)));
    for (const r of records.slice(1)) expect(r).toEqual(records[0]);
    const values = new Map(records[0]!.map((r) => [r.offset, r.value.toString()]));
    expect([...acked].filter(([o, v]) => values.get(o) !== v)).toEqual([]);
  }, 180_000);
});

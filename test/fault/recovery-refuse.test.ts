/**
 * Damage recovery may not repair, with real broker processes (docs/architecture.md "Storage", Recovery;
 * docs/operations.md "A partition that does not open"): a flipped byte in a closed segment leaves the broker
 * unready with the file and position named and every file as it was, and a compacted segment of
 * __consumer_offsets whose index file is lost keeps every committed offset. Under --flush os what no fsync
 * covered is cut instead, so a power loss does not keep the broker down.
 */
import fs from 'node:fs/promises';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import type { Connection } from 'tributary-protocol/connection.js';
import { parseLine } from 'tributary-protocol/command.js';
import { parseIndex } from 'tributary-broker/storage/offset-index.js';
import { decodeRecords } from 'tributary-broker/storage/record-codec.js';
import { BrokerProcess } from '../helpers/launcher.js';
import { sleep } from '../helpers/util.js';

const ARGS = ['--offsets-topic-partitions', '1', '--group-join-window-ms', '20', '--segment-bytes', '1024'];
const N = 100;

/** The partition directory logs/<topic>~<id>/<partition>. */
async function partitionDir(dataDir: string, topic: string, partition = 0): Promise<string> {
  const logs = path.join(dataDir, 'logs');
  const dirs = (await fs.readdir(logs)).filter((d) => d.startsWith(`${topic}~`));
  expect(dirs).toHaveLength(1);
  return path.join(logs, dirs[0]!, String(partition));
}

async function segmentFiles(dir: string): Promise<Map<string, Buffer>> {
  const out = new Map<string, Buffer>();
  for (const n of (await fs.readdir(dir)).filter((f) => f.endsWith('.log')).sort()) out.set(n, await fs.readFile(path.join(dir, n)));
  return out;
}

const message = (i: number) => `m-${i}-${'x'.repeat(40)}`;

async function readAll(c: Connection, topic: string): Promise<string[]> {
  const out: string[] = [];
  for (let offset = 0; ; ) {
    const b = await c.consume({ topic, partition: 0, offset, batch: 10_000 });
    if (b.records.length === 0) return out;
    for (const r of b.records) out.push(r.value.toString());
    offset = b.records.at(-1)!.offset + 1;
  }
}

async function fetchOffset(c: Connection, group: string): Promise<string> {
  const p = parseLine(await c.command('FETCH_OFFSET', { topic: 't', group, partition: 0 })).params;
  return `${p.get('offset')}:${p.get('committed')}`;
}

/** A closed segment of `dir` that compaction rewrote and that ends in a gap (its newest offsets superseded). */
async function compactedWithGap(dir: string): Promise<string | null> {
  const logs = (await fs.readdir(dir)).filter((f) => f.endsWith('.log')).sort();
  for (const name of logs.slice(0, -1)) {
    const idx = parseIndex(await fs.readFile(path.join(dir, name.replace('.log', '.index'))).catch(() => Buffer.alloc(0)));
    const records = decodeRecords(await fs.readFile(path.join(dir, name))).records;
    if (idx?.meta.compacted && (records.at(-1)?.offset ?? idx.meta.baseOffset - 1) + 1 < idx.meta.nextOffset) return name;
  }
  return null;
}

describe('recovery refuses damage it may not cut (real broker)', () => {
  let broker: BrokerProcess | undefined;

  afterEach(async () => {
    await broker?.dispose();
    broker = undefined;
  });

  it('a flipped byte in a closed segment: unready, the file and byte named, nothing removed; restored, every record is back', async () => {
    broker = await BrokerProcess.start({ args: ARGS });
    const c = await broker.connect();
    await c.command('CREATE', { topic: 't', partitions: 1 });
    for (let i = 0; i < N; i++) await c.command('PUBLISH', { topic: 't', partition: 0, message: message(i) });
    expect(await broker.stop()).toBe(0);

    const dir = await partitionDir(broker.dataDir, 't');
    const names = [...(await segmentFiles(dir)).keys()];
    expect(names.length).toBeGreaterThan(4);
    const file = path.join(dir, names[1]!);
    const original = await fs.readFile(file);
    const second = 4 + original.readUInt32BE(0);
    const flipped = Buffer.from(original);
    flipped[second + 30] ^= 0x01;
    await fs.writeFile(file, flipped);
    const before = await segmentFiles(dir);

    await broker.relaunch();
    const ready = await broker.health('/ready');
    expect(ready.status).toBe(503);
    expect(ready.body).toContain(`${file} at byte ${second}`);
    expect(broker.stdout).toContain('NOT READY');
    expect(broker.stderr).toMatch(/recovery failed/);
    expect(broker.stderr).not.toMatch(/recovery cut|not contiguous/);
    expect(await segmentFiles(dir)).toEqual(before);

    await broker.stop();
    await fs.writeFile(file, original); // the operator restores the file
    await broker.relaunch();
    expect((await broker.health('/ready')).status).toBe(200);
    const again = await broker.connect();
    expect(await readAll(again, 't')).toEqual(Array.from({ length: N }, (_, i) => message(i)));
    expect(await again.json('PUBLISH', { topic: 't', partition: 0, message: 'next' })).toMatchObject({ offset: N });
  });

  it('__consumer_offsets: a compacted segment without its index keeps every committed offset; a flipped byte there refuses', async () => {
    broker = await BrokerProcess.start({ args: [...ARGS, '--retention-check-ms', '500'] });
    const c = await broker.connect();
    await c.command('CREATE', { topic: 't', partitions: 1 });
    for (let i = 0; i < N; i++) await c.command('PUBLISH', { topic: 't', partition: 0, message: message(i) });
    // Group h commits once (its record stays in an old segment); group g commits 1..60 (superseding each other).
    for (const [group, upTo] of [
      ['h', 5],
      ['g', 60],
    ] as const) {
      const join = parseLine(await c.command('JOIN_GROUP', { topic: 't', group, member: `${group}-client` })).params;
      const member = join.get('member')!;
      const generation = join.get('generation')!;
      await c.command('SYNC_GROUP', { topic: 't', group, member, generation });
      for (let o = group === 'h' ? upTo : 1; o <= upTo; o++) await c.command('COMMIT_OFFSET', { topic: 't', group, partition: 0, offset: o, member, generation });
    }
    expect(await fetchOffset(c, 'g')).toBe('60:true');
    const dir = await partitionDir(broker.dataDir, '__consumer_offsets');
    let victim: string | null = null;
    for (const deadline = Date.now() + 20_000; victim === null && Date.now() < deadline; ) {
      await sleep(200);
      victim = await compactedWithGap(dir);
    }
    expect(victim, 'compaction left a segment ending in a gap').not.toBeNull();
    expect(await broker.stop()).toBe(0);

    const logsBefore = [...(await segmentFiles(dir)).keys()];
    await fs.unlink(path.join(dir, victim!.replace('.log', '.index')));
    await broker.relaunch();
    expect((await broker.health('/ready')).status).toBe(200);
    const after = await broker.connect();
    expect(await fetchOffset(after, 'g')).toBe('60:true');
    expect(await fetchOffset(after, 'h')).toBe('5:true');
    expect([...(await segmentFiles(dir)).keys()]).toEqual(logsBefore);
    expect(broker.stderr).toMatch(/segment index lost on a compacted topic/);

    // A flipped byte in a closed segment of it (one that holds records) refuses, as on any topic.
    expect(await broker.stop()).toBe(0);
    const files = await segmentFiles(dir);
    const [name, bytes] = [...files].slice(0, -1).find(([, b]) => b.length > 0)!;
    const flipped = Buffer.from(bytes);
    flipped[20] ^= 0x01;
    await fs.writeFile(path.join(dir, name), flipped);
    await broker.relaunch();
    const ready = await broker.health('/ready');
    expect(ready.status).toBe(503);
    expect(ready.body).toContain(`${path.join(dir, name)} at byte 0`);
  });

  it('--flush os, kill -9, then a power loss took a closed segment\'s tail: ready, the log ends there, later segments gone', async () => {
    broker = await BrokerProcess.start({ args: [...ARGS, '--flush', 'os'] });
    const c = await broker.connect();
    await c.command('CREATE', { topic: 't', partitions: 1 });
    for (let i = 0; i < N; i++) await c.command('PUBLISH', { topic: 't', partition: 0, message: message(i) });
    await broker.kill();

    const dir = await partitionDir(broker.dataDir, 't');
    const names = [...(await segmentFiles(dir)).keys()];
    expect(names.length).toBeGreaterThan(4);
    // What a power loss can leave under --flush os (a roll fsyncs nothing): the third segment without its tail.
    const file = path.join(dir, names[2]!);
    const bytes = await fs.readFile(file);
    const records = decodeRecords(bytes).records;
    let cutAt = 0;
    for (let i = 0; i < 3; i++) cutAt += 4 + bytes.readUInt32BE(cutAt);
    await fs.truncate(file, cutAt + 7);
    const kept = records[3]!.offset;

    await broker.relaunch();
    expect((await broker.health('/ready')).status).toBe(200);
    expect(broker.stderr).toMatch(/recovery after an unclean shutdown with --flush os: the log ends at offset \d+/);
    expect([...(await segmentFiles(dir)).keys()]).toEqual(names.slice(0, 3));
    const after = await broker.connect();
    expect(await readAll(after, 't')).toEqual(Array.from({ length: kept }, (_, i) => message(i)));
    expect(await after.json('PUBLISH', { topic: 't', partition: 0, message: 'next' })).toMatchObject({ offset: kept });
  });
});

/**
 * Tail corruption after kill -9: a torn tail (nothing valid after the bad bytes) is cut, and the broker must
 * come up, serve exactly the valid prefix of the damaged partition (and everything of the others), warn on
 * stderr about what it cut, and append at the next offset. A bad record with valid ones after it is no torn
 * tail: the broker stays unready naming the file and byte, and changes nothing.
 */
import { randomBytes } from 'node:crypto';
import fs from 'node:fs/promises';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import type { Connection } from 'tributary-protocol/connection.js';
import { parseLine } from 'tributary-protocol/command.js';
import { BrokerProcess } from '../helpers/launcher.js';

const TOPIC = 'fragile';
const N = 20;
/** These tests use no consumer groups: one `__consumer_offsets` partition instead of 50 makes every start faster. */
const BASE_ARGS = ['--offsets-topic-partitions', '1'];

function value(p: number, i: number): string {
  return `p${p}-record-${i}-${'x'.repeat(60 + i)}`;
}

async function readAll(c: Connection, partition: number): Promise<Array<{ offset: number; value: string }>> {
  const out: Array<{ offset: number; value: string }> = [];
  let offset = 0;
  for (;;) {
    const b = await c.consume({ topic: TOPIC, partition, offset, batch: 10_000 });
    if (b.records.length === 0) return out;
    for (const r of b.records) out.push({ offset: r.offset, value: r.value.toString() });
    offset = b.records[b.records.length - 1]!.offset + 1;
  }
}

/** The newest `*.log` segment of a partition: logs/<topic>~<id>/<partition>/<20-digit base>.log */
async function lastSegment(dataDir: string, partition: number): Promise<{ file: string; base: number }> {
  const logs = path.join(dataDir, 'logs');
  const topicDirs = (await fs.readdir(logs)).filter((d) => d.startsWith(`${TOPIC}~`));
  expect(topicDirs).toHaveLength(1);
  const dir = path.join(logs, topicDirs[0]!, String(partition));
  const segs = (await fs.readdir(dir)).filter((f) => f.endsWith('.log')).sort();
  expect(segs.length).toBeGreaterThan(1); // the corruption is in the last of several segments
  const name = segs[segs.length - 1]!;
  return { file: path.join(dir, name), base: Number(name.slice(0, 20)) };
}

/** Start offsets (byte positions) of every record in a segment file: u32 length, then that many bytes. */
function recordPositions(buf: Buffer): number[] {
  const out: number[] = [];
  let pos = 0;
  while (pos + 4 <= buf.length) {
    out.push(pos);
    pos += 4 + buf.readUInt32BE(pos);
  }
  expect(pos).toBe(buf.length);
  return out;
}

/** Writes N records to each of 2 partitions (several small segments each) and kills the broker. */
async function writeThenKill(): Promise<BrokerProcess> {
  const b = await BrokerProcess.start({ args: [...BASE_ARGS, '--segment-bytes', '1024'] });
  try {
    const c = await b.connect();
    await c.command('CREATE', { topic: TOPIC, partitions: 2 });
    for (let i = 0; i < N; i++) {
      for (const p of [0, 1]) await c.command('PUBLISH', { topic: TOPIC, partition: p, message: value(p, i) });
    }
    await b.kill('SIGKILL');
  } catch (err) {
    await b.dispose(); // not yet the test's to dispose
    throw err;
  }
  return b;
}

/** Relaunch, then check readiness, the served prefix, the stderr warning and the next append. */
async function expectRecovered(b: BrokerProcess, validPrefix: number, cutBytes: number): Promise<void> {
  await b.relaunch();
  expect((await b.health('/ready')).status).toBe(200);
  const c = await b.connect();
  const p0 = await readAll(c, 0);
  expect(p0.map((r) => r.offset)).toEqual(Array.from({ length: validPrefix }, (_, i) => i));
  expect(p0.map((r) => r.value)).toEqual(Array.from({ length: validPrefix }, (_, i) => value(0, i)));
  const p1 = await readAll(c, 1);
  expect(p1.map((r) => r.value)).toEqual(Array.from({ length: N }, (_, i) => value(1, i)));
  const offs = parseLine(await c.command('LIST_OFFSETS', { topic: TOPIC })).params.get('offsets');
  expect(offs).toBe(`P0:earliest=0:latest=${validPrefix}:leo=${validPrefix}:hwm=${validPrefix},P1:earliest=0:latest=${N}:leo=${N}:hwm=${N}`);

  // One warning, for partition 0 only, naming the cut.
  const warnings = b.stderr
    .split('\n')
    .filter((l) => l.startsWith('{'))
    .map((l) => JSON.parse(l) as { level: number; msg: string; partition?: number; truncatedBytes?: number; atOffset?: number })
    .filter((l) => /recovery cut/.test(l.msg));
  expect(warnings).toHaveLength(1);
  expect(warnings[0]).toMatchObject({ level: 40, partition: 0, truncatedBytes: cutBytes, atOffset: validPrefix });

  // Appends continue at the next offset, and survive a further restart.
  expect(await c.json('PUBLISH', { topic: TOPIC, partition: 0, message: 'after-recovery' })).toMatchObject({ offset: validPrefix });
  await b.kill('SIGKILL');
  await b.relaunch();
  const again = await b.connect();
  const after = await readAll(again, 0);
  expect(after.map((r) => r.value)).toEqual([...Array.from({ length: validPrefix }, (_, i) => value(0, i)), 'after-recovery']);
  expect(b.stderr).not.toMatch(/recovery cut/);
}

describe('recovery from a corrupt log tail', () => {
  let broker: BrokerProcess | undefined;

  afterEach(async () => {
    await broker?.dispose();
    broker = undefined;
  });

  it('cuts random garbage appended after the last record', async () => {
    broker = await writeThenKill();
    const { file, base } = await lastSegment(broker.dataDir, 0);
    const intact = await fs.readFile(file);
    expect(recordPositions(intact)).toHaveLength(N - base);
    const garbage = randomBytes(777);
    garbage.writeUInt32BE(0x00000040, 0); // a plausible record length, so the junk is parsed as a record
    await fs.appendFile(file, garbage);
    await expectRecovered(broker, N, garbage.length);
    // The file itself was cut back to the valid records (plus the new one).
    expect((await fs.readFile(file)).subarray(0, intact.length)).toEqual(intact);
  });

  it('cuts a last record with a flipped byte in its middle', async () => {
    broker = await writeThenKill();
    const { file, base } = await lastSegment(broker.dataDir, 0);
    const buf = await fs.readFile(file);
    const pos = recordPositions(buf);
    expect(pos).toHaveLength(N - base);
    const last = pos[pos.length - 1]!;
    const mid = last + Math.floor((buf.length - last) / 2);
    buf[mid] = buf[mid]! ^ 0x5a;
    await fs.writeFile(file, buf);
    await expectRecovered(broker, N - 1, buf.length - last);
  });

  it('refuses a corrupt record in the middle of the last segment (valid records follow: no torn tail), changing nothing', async () => {
    broker = await writeThenKill();
    const { file, base } = await lastSegment(broker.dataDir, 0);
    const original = await fs.readFile(file);
    const buf = Buffer.from(original);
    const pos = recordPositions(buf);
    expect(pos.length).toBeGreaterThanOrEqual(3);
    const victim = Math.floor(pos.length / 2); // neither the first nor the last record of the segment
    const mid = pos[victim]! + Math.floor((pos[victim + 1]! - pos[victim]!) / 2);
    buf[mid] = buf[mid]! ^ 0x01;
    await fs.writeFile(file, buf);
    await broker.relaunch();
    const ready = await broker.health('/ready');
    expect(ready.status).toBe(503);
    expect(ready.body).toContain(`${file} at byte ${pos[victim]}`);
    expect(ready.body).toContain(`followed by a valid record at byte ${pos[victim + 1]} (offset ${base + victim + 1})`);
    expect(broker.stderr).not.toMatch(/recovery cut/);
    expect(await fs.readFile(file)).toEqual(buf);
    // Restored, the broker serves every record of both partitions again.
    await broker.kill('SIGKILL');
    await fs.writeFile(file, original);
    await broker.relaunch();
    expect((await broker.health('/ready')).status).toBe(200);
    const c = await broker.connect();
    expect((await readAll(c, 0)).map((r) => r.value)).toEqual(Array.from({ length: N }, (_, i) => value(0, i)));
    expect((await readAll(c, 1)).map((r) => r.value)).toEqual(Array.from({ length: N }, (_, i) => value(1, i)));
  });
});

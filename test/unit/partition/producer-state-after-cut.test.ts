/**
 * The producer state of a partition whose log recovery cut below every batch its producer snapshot holds
 * (a torn tail after a crash under --flush os): it is what the log left says (docs/architecture.md,
 * "Idempotent producers"). A producer whose last batches the cut took goes on after its last batch still in
 * the log; one with no batch left is unknown.
 */
import fs from 'node:fs/promises';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { type IdempotentBatch, Partition, PRODUCER_SNAPSHOT_FILE } from 'tributary-broker/partition/partition.js';
import type { RecordInput } from 'tributary-protocol/record.js';
import { simulateCrash } from 'tributary-broker/storage/log-test-hooks.js';
import { PartitionLog } from 'tributary-broker/storage/partition-log.js';
import { rec, removeDir, tempDir } from '../../helpers/util.js';

const dirs: string[] = [];
afterEach(async () => {
  for (const d of dirs.splice(0)) await removeDir(d);
});

const batch = (producerId: string, seq: number, anyFirstSequence = false) => ({ producerId, epoch: 0, firstSequence: seq, lastSequence: seq, anyFirstSequence });
/** One record of producer `id` at `seq`, and its batch. */
const one = (id: string, seq: number, anyFirst = false): [RecordInput[], IdempotentBatch] => [[rec(`${id}${seq}`, { producerId: id, epoch: 0, sequence: seq })], batch(id, seq, anyFirst)];

/** Snapshots `p`'s state, crashes it, tears the record at offset `at` (one record per append) and reopens the log. */
async function snapshotAndTear(p: Partition, dir: string, at: number): Promise<Partition> {
  const snaps = (p as unknown as { snapshots: { onTick(): void; settled(): Promise<void> } }).snapshots;
  snaps.onTick();
  await snaps.settled();
  expect(JSON.parse(await fs.readFile(path.join(dir, PRODUCER_SNAPSHOT_FILE), 'utf8')).offset).toBe(p.log.logEndOffset);
  await simulateCrash(p.log);
  // A power loss tore the record at offset `at` and lost everything after it.
  const file = path.join(dir, (await fs.readdir(dir)).find((n) => n.endsWith('.log'))!);
  const buf = await fs.readFile(file);
  let pos = 0;
  for (let i = 0; i < at; i++) pos += 4 + buf.readUInt32BE(pos);
  await fs.truncate(file, pos + 10);
  const reopened = new Partition('t', 0, await PartitionLog.open(dir, { flush: 'os' }));
  try {
    expect(reopened.log.logEndOffset).toBe(at);
    await reopened.whenProducerStateReady();
  } catch (err) {
    await reopened.close();
    throw err;
  }
  return reopened;
}
const outcome = (p: Promise<{ baseOffset: number; duplicate: boolean }>) =>
  p.then(
    (r) => `${r.duplicate ? 'duplicate' : 'appended'} at ${r.baseOffset}`,
    (e: { code?: string; fields?: { expected?: unknown } }) => `${e.code} expected=${String(e.fields?.expected)}`,
  );

describe('producer state after a recovery cut below the snapshot', () => {
  it('follows the log left: the last kept batch, or an unknown producer', async () => {
    const dir = await tempDir('trib-pcut-');
    dirs.push(dir);
    let p = new Partition('t', 0, await PartitionLog.open(dir, { flush: 'os' }));
    await p.whenProducerStateReady();
    // A: seq 0..6 at offsets 0..6 (its 5-batch window: 2..6); B: seq 0..1 at offsets 7..8.
    for (let s = 0; s < 7; s++) expect((await p.appendIdempotent(...one('A', s))).baseOffset).toBe(s);
    for (let s = 0; s < 2; s++) expect((await p.appendIdempotent(...one('B', s))).baseOffset).toBe(7 + s);
    p = await snapshotAndTear(p, dir, 2);
    try {
      expect(p.producerState()?.describe('A')).toEqual({ epoch: 0, lastSeq: 1 });
      expect(p.producerState()?.describe('B')).toBeUndefined();
      // A resend of a kept batch is its duplicate; of a cut one, stored once.
      expect(await outcome(p.appendIdempotent(...one('A', 1)))).toBe('duplicate at 1');
      expect(await outcome(p.appendIdempotent(...one('A', 2)))).toBe('appended at 2');
      expect(await outcome(p.appendIdempotent(...one('A', 2)))).toBe('duplicate at 2');
      expect(await outcome(p.appendIdempotent(...one('A', 4)))).toBe('out_of_order_sequence expected=3');
      // B is unknown: its numbers start at 0 (the SDK renumbers from `expected`), or anywhere for Kafka's.
      expect(await outcome(p.appendIdempotent(...one('B', 1)))).toBe('out_of_order_sequence expected=0');
      expect(await outcome(p.appendIdempotent(...one('B', 1, true)))).toBe('appended at 3');
      expect(await outcome(p.appendIdempotent(...one('B', 1)))).toBe('duplicate at 3');
    } finally {
      await p.close();
    }
  });

  it('keeps an epoch whose records the cut took: the older one stays refused', async () => {
    const dir = await tempDir('trib-pcut-');
    dirs.push(dir);
    let p = new Partition('t', 0, await PartitionLog.open(dir, { flush: 'os' }));
    await p.whenProducerStateReady();
    await p.appendIdempotent(...one('C', 0));
    await p.appendIdempotent([rec('C1-0', { producerId: 'C', epoch: 1, sequence: 0 })], { producerId: 'C', epoch: 1, firstSequence: 0, lastSequence: 0 });
    p = await snapshotAndTear(p, dir, 1);
    try {
      expect(p.producerState()?.describe('C')).toEqual({ epoch: 1, lastSeq: -1 });
      expect(await outcome(p.appendIdempotent(...one('C', 1)))).toMatch(/^stale_producer_epoch/);
    } finally {
      await p.close();
    }
  });
});

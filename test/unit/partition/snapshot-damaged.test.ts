/**
 * A partition whose producer.snapshot or txn.snapshot is missing (with segments present), empty, not JSON
 * or not a snapshot rebuilds the state from the whole log, with a warning naming the file. Every log this
 * broker creates gets both snapshots before its first append, so such a file is damage; the rebuild used
 * to scan only the last segment, and lost what the older ones held: an aborted transaction's range
 * (read_committed readers got ABORTED-1 and -2) and an idempotent producer's last batch (its resend was
 * answered out_of_order_sequence expected=0, not as the duplicate it is).
 */
import fs from 'node:fs/promises';
import { join } from 'node:path';
import pino from 'pino';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { type Isolation, Partition } from 'tributary-broker/partition/partition.js';
import { PRODUCER_SNAPSHOT_FILE, TXN_SNAPSHOT_FILE } from 'tributary-broker/partition/partition-snapshots.js';
import { PartitionLog } from 'tributary-broker/storage/partition-log.js';
import { rec, removeDir, tempDir } from '../../helpers/util.js';

let dir: string;
let warnings: Array<Record<string, unknown>>;
const open: Partition[] = [];
beforeEach(async () => {
  dir = await tempDir('trib-snap-damaged-');
  warnings = [];
});
afterEach(async () => {
  for (const p of open.splice(0)) await p.close().catch(() => {});
  await removeDir(dir);
});

/** Small segments: each append of these tests rolls one (as --segment-bytes 1024 with 40 records). */
async function openPartition(): Promise<Partition> {
  const logger = pino({ level: 'warn' }, { write: (s: string) => void warnings.push(JSON.parse(s)) });
  const log = await PartitionLog.open(dir, { flush: 'os', segmentBytes: 200 }, logger, { lazy: true });
  const p = new Partition('t', 0, log);
  open.push(p);
  return p;
}

async function closePartition(p: Partition): Promise<void> {
  open.splice(open.indexOf(p), 1);
  await p.close();
}

const RC = { maxRecords: 1000, maxBytes: 1 << 20, isolation: 'read_committed' as Isolation };
const pad = 'x'.repeat(150);

/** What is done to the snapshot file: gone, or replaced by this content. */
const damages: Array<[string, string | null]> = [
  ['missing', null],
  ['empty', ''],
  ['garbage', '\u0000garbage{'],
  ['{}', '{}'],
  ['null', 'null'],
  ['of producers that are not entries', '{"version":1,"offset":0,"producers":[{"id":5}],"open":[{"producerId":1}],"aborted":[]}'],
];

async function damage(file: string, content: string | null): Promise<void> {
  if (content === null) await fs.rm(join(dir, file));
  else await fs.writeFile(join(dir, file), content);
}

function expectWarning(file: string): void {
  expect(warnings.some((w) => w.file === join(dir, file) && /snapshot (missing|unusable); rebuilding it from the whole log/.test(String(w.msg)))).toBe(true);
}

describe('a damaged txn.snapshot', () => {
  for (const [what, content] of damages) {
    it(`(${what}): read_committed still skips an aborted transaction of an older segment`, async () => {
      let p = await openPartition();
      await p.whenTxnIndexReady();
      await p.appendTransactional([rec('ABORTED-1'), rec('ABORTED-2')], { producerId: '1', epoch: 0 });
      await p.writeMarker('1', 0, 'abort');
      for (let i = 0; i < 6; i++) await p.append([rec(`plain-${i}-${pad}`)]);
      expect(p.log.segmentInfos().length).toBeGreaterThan(3);
      await closePartition(p);
      await damage(TXN_SNAPSHOT_FILE, content);

      p = await openPartition();
      // At once, before the rebuild is done: read_committed waits for it rather than read past the abort.
      const first = await p.read(0, RC);
      expect(first.records.map((r) => r.value.toString().slice(0, 7))).toEqual(Array.from({ length: 6 }, (_, i) => `plain-${i}`));
      await p.whenTxnIndexReady();
      expect(p.txnIndex()!.abortedTxns()).toEqual([{ producerId: '1', firstOffset: 0, lastOffset: 2 }]);
      expectWarning(TXN_SNAPSHOT_FILE);
    });
  }
});

describe('a damaged producer.snapshot', () => {
  for (const [what, content] of damages) {
    it(`(${what}): a resend of the last idempotent batch, in an older segment, is answered as the duplicate`, async () => {
      let p = await openPartition();
      await p.whenProducerStateReady();
      const idem = (v: string, sequence: number) => rec(v, { producerId: '7', epoch: 0, sequence });
      await p.appendIdempotent([idem(`a${pad}`, 0)], { producerId: '7', epoch: 0, firstSequence: 0, lastSequence: 0 });
      await p.appendIdempotent([idem(`b${pad}`, 1)], { producerId: '7', epoch: 0, firstSequence: 1, lastSequence: 1 });
      for (let i = 0; i < 4; i++) await p.append([rec(`plain-${i}-${pad}`)]);
      expect(p.log.segmentInfos().length).toBeGreaterThan(3);
      await closePartition(p);
      await damage(PRODUCER_SNAPSHOT_FILE, content);

      p = await openPartition();
      await p.whenProducerStateReady();
      expect(await p.appendIdempotent([idem(`b${pad}`, 1)], { producerId: '7', epoch: 0, firstSequence: 1, lastSequence: 1 })).toMatchObject({
        baseOffset: 1,
        duplicate: true,
      });
      expect(await p.appendIdempotent([idem('c', 2)], { producerId: '7', epoch: 0, firstSequence: 2, lastSequence: 2 })).toMatchObject({
        baseOffset: 6,
        duplicate: false,
      });
      expectWarning(PRODUCER_SNAPSHOT_FILE);
    });
  }

  it('no warning for a log without files (dormant), which has no snapshot to find', async () => {
    const p = await openPartition();
    await Promise.all([p.whenProducerStateReady(), p.whenTxnIndexReady()]);
    expect(p.log.dormant).toBe(true);
    expect(warnings).toEqual([]);
  });
});

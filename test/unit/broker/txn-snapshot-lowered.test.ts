/**
 * A transaction snapshot taken while a transactional append has not landed is lowered to that append's
 * lower bound, below the HWM (docs/architecture.md, "Transactions on the log"): closed transactions are
 * forgotten only below the snapshot's own offset, so an abort whose marker lies between the bound and the
 * HWM survives a crash (replayed from the snapshot) and read_committed still hides its records.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { Partition, TXN_SNAPSHOT_FILE } from 'tributary-broker/partition/partition.js';
import { PartitionLog } from 'tributary-broker/storage/partition-log.js';
import { simulateCrash } from 'tributary-broker/storage/log-test-hooks.js';
import fs from 'node:fs/promises';
import path from 'node:path';
import { removeDir, tempDir } from '../../helpers/util.js';

const RC = { maxRecords: 100, maxBytes: 1 << 20, isolation: 'read_committed' as const };
const dirs: string[] = [];
afterEach(async () => {
  for (const d of dirs.splice(0)) await removeDir(d);
});

describe('txn snapshot lowered below the HWM', () => {
  it('keeps an abort whose marker lies between the unconfirmed lower bound and the HWM', async () => {
    const dir = await tempDir('trib-txnsnap-');
    dirs.push(dir);
    const open = async () => {
      const p = new Partition('t', 0, await PartitionLog.open(dir, { segmentBytes: 512 }));
      await p.whenTxnIndexReady();
      await p.whenProducerStateReady();
      return p;
    };
    let p = await open();
    // Q's transaction: one record at offset 0.
    await p.appendTransactional([{ key: null, value: Buffer.from('Q-aborted') }], { producerId: 'Q', epoch: 0, firstSequence: 0, lastSequence: 0 });
    // Same turn: Q's abort marker (lands at 1) and P's big transactional append (needs a segment roll, lands later).
    const a = p.writeMarker('Q', 0, 'abort');
    const t = p.appendTransactional([{ key: null, value: Buffer.alloc(1000, 0x61) }], { producerId: 'P', epoch: 0, firstSequence: 0, lastSequence: 0 });
    const m = await a;
    expect(m.offset).toBe(1);
    expect(p.highWatermark).toBe(2);
    // The 10 s snapshot tick fires now (PartitionSnapshots.onTick).
    const snaps = (p as unknown as { snapshots: { onTick(): void; settled(): Promise<void> } }).snapshots;
    snaps.onTick();
    await snaps.settled();
    const onDisk = JSON.parse(await fs.readFile(path.join(dir, TXN_SNAPSHOT_FILE), 'utf8'));
    expect(onDisk.offset).toBe(1); // lowered to P's bound
    expect((await t).baseOffset).toBe(2);
    await p.writeMarker('P', 0, 'commit');
    const before = (await p.read(0, RC)).records.map((r) => r.value.toString().slice(0, 12));
    expect(before).toEqual(['aaaaaaaaaaaa']);
    // kill -9 before the next tick.
    await simulateCrash(p.log);
    p = await open();
    const seen = (await p.read(0, RC)).records.map((r) => r.value.toString().slice(0, 12));
    expect(seen).toEqual(before);
    await p.close();
  });
});

/**
 * The last stable offset of a partition whose log recovery cut below its transaction snapshot (a crash under
 * --flush interval or os): until the index is rebuilt (from the log start, as loadTxnIndex does for such a
 * snapshot) it may not pass a transaction whose commit marker the cut took, now open again.
 */
import fs from 'node:fs/promises';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { Partition, TXN_SNAPSHOT_FILE } from 'tributary-broker/partition/partition.js';
import { simulateCrash } from 'tributary-broker/storage/log-test-hooks.js';
import { PartitionLog } from 'tributary-broker/storage/partition-log.js';
import { removeDir, tempDir } from '../../helpers/util.js';

const dirs: string[] = [];
afterEach(async () => {
  for (const d of dirs.splice(0)) await removeDir(d);
});

describe('transaction floor after a recovery cut', () => {
  it('a snapshot past the cut log end does not let the LSO pass a transaction the cut reopened', async () => {
    const dir = await tempDir('trib-txnfloor-');
    dirs.push(dir);
    let p = new Partition('t', 0, await PartitionLog.open(dir, { flush: 'os' }));
    await p.whenTxnIndexReady();
    await p.append([{ key: null, value: Buffer.from('plain') }]);
    await p.appendTransactional([{ key: null, value: Buffer.from('P-txn') }], { producerId: 'P', epoch: 0, firstSequence: 0, lastSequence: 0 });
    const marker = await p.writeMarker('P', 0, 'commit');
    expect(marker.offset).toBe(2);
    const snaps = (p as unknown as { snapshots: { onTick(): void; settled(): Promise<void> } }).snapshots;
    snaps.onTick();
    await snaps.settled();
    expect(JSON.parse(await fs.readFile(path.join(dir, TXN_SNAPSHOT_FILE), 'utf8')).offset).toBe(3);
    await simulateCrash(p.log);
    // The power loss took the commit marker's bytes (the last record of the only segment).
    const file = path.join(dir, (await fs.readdir(dir)).find((n) => n.endsWith('.log'))!);
    const buf = await fs.readFile(file);
    let last = 0;
    for (let pos = 0; pos < buf.length; pos += 4 + buf.readUInt32BE(pos)) last = pos;
    await fs.truncate(file, last);
    p = new Partition('t', 0, await PartitionLog.open(dir, { flush: 'os' }));
    try {
      expect(p.log.logEndOffset).toBe(2);
      // Before the rebuild: P's transaction (offset 1) has no marker any more.
      const before = p.lastStableOffset;
      await p.whenTxnIndexReady();
      expect(p.lastStableOffset).toBe(1);
      expect(before).toBeLessThanOrEqual(1);
    } finally {
      await p.close();
    }
  });
});

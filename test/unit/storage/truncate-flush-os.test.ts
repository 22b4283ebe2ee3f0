/**
 * flush=os: a truncation inside a compacted segment closes that segment (a new one starts at the cut) without
 * an fsync, as a roll does in that mode. Its unsynced writes must stay for a later flush() to fsync before
 * that flush writes the segment's index as synced (docs/architecture.md "Storage", Durability): recovery
 * trusts a synced index without scanning the log.
 */
import { join } from 'node:path';
import { afterEach, beforeEach, expect, it, vi } from 'vitest';
import type { LogRecord } from 'tributary-protocol/record.js';
import { PartitionLog } from 'tributary-broker/storage/partition-log.js';
import { ATTR_END_OF_APPEND } from 'tributary-broker/storage/record-codec.js';
import { Segment } from 'tributary-broker/storage/segment.js';
import { removeDir, tempDir } from '../../helpers/util.js';

let dir: string;
let log: PartitionLog | undefined;
beforeEach(async () => {
  dir = await tempDir('trib-truncate-os-');
});
afterEach(async () => {
  vi.restoreAllMocks();
  await log?.close().catch(() => {});
  await removeDir(dir);
});

/** A leader's record past what the active segment's index can address: the replica rolls, stretching it. */
function farRecord(offset: number): LogRecord {
  return {
    offset,
    timestamp: 1_700_000_000_000,
    key: null,
    value: Buffer.from('far'),
    headers: [],
    producerId: '',
    epoch: -1,
    sequence: -1,
    attributes: ATTR_END_OF_APPEND,
  };
}

it('a flush after the truncation fsyncs the kept compacted segment before it writes its index as synced', async () => {
  const l = await PartitionLog.open(join(dir, 'l'), { flush: 'os', indexIntervalBytes: 64 });
  log = l;
  for (let i = 0; i < 10; i++) await l.append([{ key: null, value: Buffer.from(`r${i}`) }]);
  // Written without an fsync; the roll flags the segment compacted (its end stretched over the gap).
  await l.appendReplica([farRecord(2 ** 32 + 100)]);
  expect(l.segmentInfos()[0]).toMatchObject({ baseOffset: 0, compacted: true });
  await l.truncateTo(5);
  expect(l.segmentInfos().map((s) => s.baseOffset)).toEqual([0, 5]);

  const events: string[] = [];
  const datasync = Segment.prototype.datasync;
  vi.spyOn(Segment.prototype, 'datasync').mockImplementation(function (this: Segment) {
    events.push(`datasync ${this.baseOffset}`);
    return datasync.call(this);
  });
  const writeIndex = Segment.prototype.writeIndex;
  vi.spyOn(Segment.prototype, 'writeIndex').mockImplementation(function (this: Segment, synced: boolean) {
    events.push(`writeIndex ${this.baseOffset} ${synced}`);
    return writeIndex.call(this, synced);
  });
  await l.flush();
  const synced = events.indexOf('writeIndex 0 true');
  expect(synced).toBeGreaterThanOrEqual(0);
  expect(events.slice(0, synced)).toContain('datasync 0');
});

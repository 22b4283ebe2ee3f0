/**
 * Records whose timestamp is kept as given (a Kafka producer's CreateTime, RecordInput.keepTimestamp): 0
 * stays 0 and -1 ("no timestamp") stays -1, and a record without a timestamp counts as of its append in
 * its segment's age, so retention neither deletes its segment at once nor keeps it for ever (also after a
 * recovery that rebuilds the index, and on a replica).
 */
import { readdir, unlink } from 'node:fs/promises';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { LogRecord, RecordInput } from 'tributary-protocol/record.js';
import { type LogOptions, PartitionLog } from 'tributary-broker/storage/partition-log.js';
import { ATTR_END_OF_APPEND } from 'tributary-broker/storage/record-codec.js';
import { removeDir, tempDir } from '../../helpers/util.js';

let dir: string;
const opened: PartitionLog[] = [];

beforeEach(async () => {
  dir = await tempDir('trib-untimed-');
});
afterEach(async () => {
  for (const l of opened.splice(0)) await l.close().catch(() => {});
  await removeDir(dir);
});

const HOUR = 3_600_000;
const OPTS: Partial<LogOptions> = { flush: 'os', segmentBytes: 400, retentionMs: HOUR, segmentMs: 24 * HOUR, tailCacheBytes: 0 };

async function openLog(sub = 'a', opts: Partial<LogOptions> = {}): Promise<PartitionLog> {
  const l = await PartitionLog.open(join(dir, sub), { ...OPTS, ...opts });
  opened.push(l);
  return l;
}

const kept = (i: number, timestamp: number): RecordInput => ({ key: null, value: Buffer.from(`v${i}-${'x'.repeat(40)}`), timestamp, keepTimestamp: true });

async function timestamps(log: PartitionLog): Promise<number[]> {
  return (await log.read(log.logStartOffset, { maxRecords: 1000, maxBytes: 1 << 20 })).map((r) => r.timestamp);
}

describe('timestamps kept as given', () => {
  it('0 and -1 are stored and read back as given, also after a reopen; without keepTimestamp 0 is stamped and -1 refused', async () => {
    let log = await openLog('a', { segmentBytes: 1 << 20 });
    const before = Date.now();
    await log.append([kept(0, 0), kept(1, -1), kept(2, 1_700_000_000_000)]);
    expect(await timestamps(log)).toEqual([0, -1, 1_700_000_000_000]);
    await log.append([{ key: null, value: Buffer.from('native'), timestamp: 0 }]);
    const [native] = await log.read(3, { maxRecords: 1, maxBytes: 1000 });
    expect(native!.timestamp).toBeGreaterThanOrEqual(before);
    await expect(log.append([{ key: null, value: Buffer.from('x'), timestamp: -1 }])).rejects.toMatchObject({ code: 'invalid_parameter' });
    await log.close();
    log = await openLog('a', { segmentBytes: 1 << 20 });
    expect((await timestamps(log)).slice(0, 3)).toEqual([0, -1, 1_700_000_000_000]);
  });

  it('a segment of records without a timestamp ages from its appends: kept within retention.ms, deleted past it', async () => {
    const log = await openLog();
    const appendedFrom = Date.now();
    for (let i = 0; i < 30; i++) await log.append([kept(i, -1)]);
    const appendedTo = Date.now();
    const infos = log.segmentInfos();
    expect(infos.length).toBeGreaterThan(2);
    for (const s of infos.slice(0, -1)) {
      expect(s.maxTimestamp).toBeGreaterThanOrEqual(appendedFrom);
      expect(s.maxTimestamp).toBeLessThanOrEqual(appendedTo);
    }
    log.setHighWatermark(log.logEndOffset);
    // Not "infinitely old": nothing goes while the appends are within the retention.
    expect((await log.applyRetention(appendedTo + HOUR / 2)).deletedSegments).toBe(0);
    expect(await timestamps(log)).toEqual(Array.from({ length: 30 }, () => -1));
    // Not kept for ever: past the retention every closed segment goes.
    expect((await log.applyRetention(appendedTo + HOUR + 1)).deletedSegments).toBe(infos.length - 1);
  });

  it('records stamped 0 make a segment as old as Kafka finds it (1970): past any retention once closed', async () => {
    const log = await openLog();
    for (let i = 0; i < 30; i++) await log.append([kept(i, 0)]);
    const closed = log.segmentInfos().length - 1;
    expect(log.segmentInfos()[0]!.maxTimestamp).toBe(0);
    log.setHighWatermark(log.logEndOffset);
    expect((await log.applyRetention(Date.now())).deletedSegments).toBe(closed);
  });

  it('a segment recovered without its index ages records without a timestamp from the file, not from -1', async () => {
    let log = await openLog();
    for (let i = 0; i < 30; i++) await log.append([kept(i, -1)]);
    await log.close();
    for (const n of (await readdir(join(dir, 'a'))).filter((f) => f.endsWith('.index'))) await unlink(join(dir, 'a', n));
    const reopened = Date.now();
    log = await openLog();
    expect(log.logEndOffset).toBe(30);
    for (const s of log.segmentInfos()) expect(s.maxTimestamp).toBeGreaterThan(reopened - HOUR);
    log.setHighWatermark(log.logEndOffset);
    expect((await log.applyRetention(reopened)).deletedSegments).toBe(0);
  });

  it('a truncation that drops a record stamped in the future ages the records without a timestamp it keeps by now, not by it', async () => {
    const log = await openLog();
    const y2100 = Date.UTC(2100, 0, 1);
    await log.append([kept(0, -1)]);
    await log.append([kept(1, y2100)]);
    expect(log.segmentInfos()[0]!.maxTimestamp).toBe(y2100);
    await log.truncateTo(1);
    const cutAt = Date.now();
    expect(log.segmentInfos()[0]!.maxTimestamp).toBeLessThanOrEqual(cutAt);
    // Rolled past, the segment goes once its -1 record is past the retention.
    for (let i = 2; i < 12; i++) await log.append([kept(i, Date.now())]);
    expect(log.segmentInfos().length).toBeGreaterThan(1);
    log.setHighWatermark(log.logEndOffset);
    expect((await log.applyRetention(Date.now() + 2 * HOUR)).deletedSegments).toBeGreaterThan(0);
    expect(log.logStartOffset).toBeGreaterThan(0);
  });

  it('a replica takes the leader records of -1 and 0 as stored and ages its segment from the append', async () => {
    const log = await openLog('replica', { segmentBytes: 1 << 20 });
    const leader: LogRecord[] = [-1, 0, -1].map((timestamp, offset) => ({
      offset,
      timestamp,
      key: null,
      value: Buffer.from(`r${offset}`),
      headers: [],
      producerId: '',
      epoch: -1,
      sequence: -1,
      attributes: offset === 2 ? ATTR_END_OF_APPEND : 0,
    }));
    const before = Date.now();
    await log.appendReplica(leader);
    expect(await timestamps(log)).toEqual([-1, 0, -1]);
    expect(log.segmentInfos()[0]!.maxTimestamp).toBeGreaterThanOrEqual(before);
  });
});

/**
 * What the three reads of the segment files answer when retention, a truncation, a bad record or a failed
 * read meets them (storage/segment-walk.ts's policies, docs/architecture.md "Storage"): read() and a replica
 * fetch return what they read before a race, or OFFSET_OUT_OF_RANGE when the offset is gone, and a
 * storage_error for damage or a failed read of a current segment; the wire read answers null for any of
 * it (read() answers instead).
 */
import { open } from 'node:fs/promises';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { TributaryError } from 'tributary-protocol/errors.js';
import { PartitionLog } from 'tributary-broker/storage/partition-log.js';
import { Segment } from 'tributary-broker/storage/segment.js';
import { removeDir, rec, tempDir } from '../../helpers/util.js';

type Kind = 'read' | 'wire' | 'stored';
const KINDS: Kind[] = ['read', 'wire', 'stored'];
const OPTS = { maxRecords: 1000, maxBytes: 1 << 20 };
// Small segments (a few records each), no tail cache: every read is from the files.
const LOG_OPTS = { flush: 'os' as const, segmentBytes: 700, indexIntervalBytes: 64, tailCacheBytes: 0, retentionBytes: 1 };

let root: string;
const logs: PartitionLog[] = [];
beforeEach(async () => {
  root = await tempDir('trib-read-races-');
});
afterEach(async () => {
  vi.restoreAllMocks();
  for (const l of logs.splice(0)) await l.close().catch(() => {});
  await removeDir(root);
});

/** A log of 30 one-record appends over several segments, in its own directory. */
async function filled(name: string): Promise<PartitionLog> {
  const log = await PartitionLog.open(join(root, name), LOG_OPTS);
  logs.push(log);
  for (let i = 0; i < 30; i++) await log.append([rec(`value-${i}-${'x'.repeat(100)}`)]);
  log.setHighWatermark(log.logEndOffset);
  return log;
}

/** Flips a byte of the first record's timestamp in segment `base` of log `p`: its CRC no longer matches. */
async function flipTimestampByte(base: number): Promise<void> {
  const fh = await open(join(root, 'p', `${String(base).padStart(20, '0')}.log`), 'r+');
  const b = Buffer.alloc(1);
  await fh.read(b, 0, 1, 20);
  b[0]! ^= 1;
  await fh.write(b, 0, 1, 20);
  await fh.close();
}

/** One read from `offset`: the offsets read() returns, [count, next] of the others, or the error's code and reason. */
async function readOnce(log: PartitionLog, kind: Kind, offset: number): Promise<unknown> {
  try {
    if (kind === 'read') return (await log.read(offset, { ...OPTS, keepAppendMarker: true })).map((r) => r.offset);
    if (kind === 'wire') {
      const w = await log.readWireFromDisk(offset, OPTS, { topic: 't', partition: 0, extensions: true, skipControl: false });
      return w && [w.count, w.nextOffset];
    }
    const s = await log.readStoredAppends(offset, { ...OPTS, headerCost: 0 });
    return [s.count, s.next];
  } catch (err) {
    if (!(err instanceof TributaryError)) throw err;
    return `${err.code} ${err.fields.reason ?? ''}`.trim();
  }
}

/** Runs `before` once, before the first segment read (of any segment). */
function beforeFirstRead(before: () => Promise<void>): void {
  const read = Segment.prototype.read;
  let armed = true;
  vi.spyOn(Segment.prototype, 'read').mockImplementation(async function (this: Segment, position: number, length: number) {
    if (armed) {
      armed = false;
      await before();
    }
    return read.call(this, position, length);
  });
}

describe('reads of the segment files meeting a race or damage', () => {
  it('retention deletes the segment before its first read: the offset is gone', async () => {
    const got: Record<string, unknown> = {};
    for (const kind of KINDS) {
      const log = await filled(kind);
      expect(log.segmentInfos().length).toBeGreaterThan(4);
      beforeFirstRead(async () => {
        await log.applyRetention(Date.now());
      });
      got[kind] = await readOnce(log, kind, 0);
      vi.restoreAllMocks();
      expect(log.logStartOffset).toBeGreaterThan(0);
    }
    expect(got).toEqual({ read: 'OFFSET_OUT_OF_RANGE', wire: null, stored: 'OFFSET_OUT_OF_RANGE' });
  });

  it('a truncation inside the segment being read: what was read before the cut', async () => {
    const got: Record<string, unknown> = {};
    for (const kind of KINDS) {
      const log = await filled(kind);
      expect(log.segmentInfos()[0]!.nextOffset).toBeGreaterThan(2);
      beforeFirstRead(() => log.truncateTo(2));
      got[kind] = await readOnce(log, kind, 0);
      vi.restoreAllMocks();
    }
    expect(got).toEqual({ read: [0, 1], wire: null, stored: [2, 2] });
  });

  it('a flipped byte in a closed segment its index vouches for: storage_error naming segment and position', async () => {
    const log = await filled('p');
    const seg = log.segmentInfos()[1]!;
    await log.close();
    await flipTimestampByte(seg.baseOffset);
    const reopened = await PartitionLog.open(join(root, 'p'), LOG_OPTS);
    logs.push(reopened);
    const corrupt = `storage_error corrupt record in segment ${seg.baseOffset} at position 0`;
    for (const from of [0, seg.baseOffset]) {
      const got: Record<string, unknown> = {};
      for (const kind of KINDS) got[kind] = await readOnce(reopened, kind, from);
      expect(got).toEqual({ read: corrupt, wire: null, stored: corrupt });
    }
  });

  it('a log released and written again still reports a flipped byte as damage, not as a race with a truncation', async () => {
    const log = await filled('p');
    await log.release();
    for (let i = 0; i < 30; i++) await log.append([rec(`again-${i}-${'x'.repeat(100)}`)]);
    log.setHighWatermark(log.logEndOffset);
    const seg = log.segmentInfos()[1]!;
    await flipTimestampByte(seg.baseOffset);
    const corrupt = `storage_error corrupt record in segment ${seg.baseOffset} at position 0`;
    expect(await readOnce(log, 'read', seg.baseOffset)).toBe(corrupt);
  });

  it('a failed read of a current segment: storage_error', async () => {
    const log = await filled('p');
    vi.spyOn(Segment.prototype, 'read').mockRejectedValue(new Error('EIO: i/o error, read'));
    const got: Record<string, unknown> = {};
    for (const kind of KINDS) got[kind] = await readOnce(log, kind, 0);
    const failed = 'storage_error read failed: EIO: i/o error, read';
    expect(got).toEqual({ read: failed, wire: null, stored: failed });
  });
});

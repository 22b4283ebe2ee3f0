/**
 * PartitionLog.truncateTo at an offset inside a multi-record append (docs/architecture.md "Storage",
 * Atomic appends): the records kept before the cut must end an append, or the next open cuts them as an
 * incomplete one (a torn write) and the log loses records it kept.
 */
import { join } from 'node:path';
import { type Logger, pino } from 'pino';
import { afterEach, beforeEach, expect, it, vi } from 'vitest';
import type { RecordInput } from 'tributary-protocol/record.js';
import { type FlushMode, PartitionLog } from 'tributary-broker/storage/partition-log.js';
import { simulateCrash } from 'tributary-broker/storage/log-test-hooks.js';
import { Segment } from 'tributary-broker/storage/segment.js';
import { removeDir, tempDir } from '../../helpers/util.js';

let dir: string;
const open: PartitionLog[] = [];
beforeEach(async () => {
  dir = await tempDir('trib-truncate-append-');
});
afterEach(async () => {
  vi.restoreAllMocks();
  for (const l of open.splice(0)) await l.close().catch(() => {});
  await removeDir(dir);
});

function rec(i: number): RecordInput {
  return { key: Buffer.from(`k${i}`), value: Buffer.from(`v${i}`) };
}

function captureLogger() {
  const lines: Array<Record<string, unknown>> = [];
  const logger: Logger = pino({ level: 'info' }, { write: (s: string) => lines.push(JSON.parse(s)) });
  return { logger, lines };
}

async function openLog(flush: FlushMode, segmentBytes: number, logger?: Logger): Promise<PartitionLog> {
  const l = await PartitionLog.open(join(dir, 'p'), { flush, segmentBytes, indexIntervalBytes: 64 }, logger);
  open.push(l);
  return l;
}

async function values(l: PartitionLog): Promise<string[]> {
  const got = await l.read(l.logStartOffset, { maxRecords: 100, maxBytes: 1 << 20 });
  return got.map((r) => `${r.offset}:${r.value.toString()}`);
}

const cases: Array<{ flush: FlushMode; segmentBytes: number; end: 'close' | 'crash' }> = [
  // One segment: the cut is in the active segment.
  { flush: 'always', segmentBytes: 1 << 20, end: 'close' },
  { flush: 'always', segmentBytes: 1 << 20, end: 'crash' },
  { flush: 'os', segmentBytes: 1 << 20, end: 'close' },
  // Every append in a segment of its own, a later one active: the cut segment becomes the active one.
  { flush: 'always', segmentBytes: 1, end: 'close' },
  { flush: 'os', segmentBytes: 1, end: 'crash' },
];

it.each(cases)('the records kept before a cut inside an append survive a reopen (%o)', async ({ flush, segmentBytes, end }) => {
  const l = await openLog(flush, segmentBytes);
  await l.append([rec(0)]);
  await l.append([rec(1), rec(2), rec(3)]);
  await l.append([rec(4), rec(5)]);
  await l.append([rec(6)]);
  await l.truncateTo(5);
  expect(l.logEndOffset).toBe(5);
  expect(await values(l)).toEqual(['0:v0', '1:v1', '2:v2', '3:v3', '4:v4']);
  if (end === 'close') await l.close();
  else {
    if (flush === 'os') await l.flush();
    await simulateCrash(l);
  }
  open.length = 0;

  const { logger, lines } = captureLogger();
  const again = await openLog(flush, segmentBytes, logger);
  expect(lines.filter((x) => String(x.msg).startsWith('recovery cut'))).toEqual([]);
  expect(again.logEndOffset).toBe(5);
  expect(await values(again)).toEqual(['0:v0', '1:v1', '2:v2', '3:v3', '4:v4']);
  // The kept part is an append of its own: the next one follows it, and both survive another reopen.
  await again.append([rec(7)]);
  await again.close();
  open.length = 0;
  const third = await openLog(flush, segmentBytes);
  expect(await values(third)).toEqual(['0:v0', '1:v1', '2:v2', '3:v3', '4:v4', '5:v7']);
});

it('a replica read of the kept part ends at the cut, as a whole append', async () => {
  const l = await openLog('always', 1 << 20);
  await l.append([rec(0)]);
  await l.append([rec(1), rec(2), rec(3)]);
  await l.truncateTo(3);
  const got = await l.read(0, { maxRecords: 100, maxBytes: 1 << 20, keepAppendMarker: true, wholeAppends: true });
  expect(got.map((r) => r.offset)).toEqual([0, 1, 2]);
  const stored = await l.readStoredAppends(1, { maxRecords: 100, maxBytes: 1, headerCost: 0 });
  expect({ count: stored.count, next: stored.next }).toEqual({ count: 2, next: 3 });
});

it.each(['always', 'os'] as FlushMode[])('under flush=%s the mark is written (and synced if the mode syncs) before the cut', async (flush) => {
  const l = await openLog(flush, 1 << 20);
  await l.append([rec(0)]);
  await l.append([rec(1), rec(2), rec(3)]);
  const sizeBefore = l.segmentInfos()[0].sizeBytes;
  const events: string[] = [];
  const writeAt = Segment.prototype.writeAt;
  vi.spyOn(Segment.prototype, 'writeAt').mockImplementation(function (this: Segment, buf: Buffer | readonly Buffer[], position: number) {
    events.push(`write ${Buffer.concat(Array.isArray(buf) ? buf : [buf as Buffer]).length}@${position} size ${this.size === sizeBefore ? 'uncut' : 'cut'}`);
    return writeAt.call(this, buf, position);
  });
  const datasync = Segment.prototype.datasync;
  vi.spyOn(Segment.prototype, 'datasync').mockImplementation(function (this: Segment) {
    events.push(`datasync size ${this.size === sizeBefore ? 'uncut' : 'cut'}`);
    return datasync.call(this);
  });
  await l.truncateTo(3);
  // Four records of one size: the last kept one (offset 2) starts half way.
  const markAt = sizeBefore / 2;
  const write = `write 25@${markAt} size uncut`;
  expect(events).toEqual(flush === 'always' ? [write, 'datasync size uncut', 'datasync size cut'] : [write]);
});

/**
 * Storage failures an operator needs to see are logged, rate-limited (docs/operations.md, "A full
 * disk"): appends refused by a full disk, a read that meets a corrupt record in a closed segment, and
 * offset commits an offset store fails (PostgreSQL stopped). Each is answered with storage_error; without
 * a log line only the request_errors metric said so. The first is logged at once, the rest of a flood are
 * counted into at most one line per interval.
 */
import { open } from 'node:fs/promises';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import { pino } from 'pino';
import { afterEach, beforeEach, expect, it, vi } from 'vitest';
import { TributaryError } from 'tributary-protocol/errors.js';
import { PartitionLog } from 'tributary-broker/storage/partition-log.js';
import { Segment } from 'tributary-broker/storage/segment.js';
import { RateLimitedLog } from 'tributary-broker/common/rate-limited-log.js';
import { MemoryOffsetStore } from 'tributary-broker/coordinator/memory-offset-store.js';
import type { OffsetEntry } from 'tributary-broker/coordinator/offset-store.js';
import { GROUP_CONFIG, openCoordinators } from '../../helpers/coordinators.js';
import { FakeClock } from '../../helpers/fake-clock.js';
import { useFakeTimersForIo } from '../../helpers/fake-timers.js';
import { rec, removeDir, tempDir, until } from '../../helpers/util.js';

const LOG_OPTS = { flush: 'os' as const, segmentBytes: 700, indexIntervalBytes: 64, tailCacheBytes: 0, retentionBytes: 1 };

let root: string;
const closers: Array<() => Promise<unknown>> = [];
beforeEach(async () => {
  root = await tempDir('trib-storage-logs-');
});
afterEach(async () => {
  vi.useRealTimers();
  vi.restoreAllMocks();
  for (const c of closers.splice(0)) await c().catch(() => {});
  await removeDir(root);
});

/** A logger whose warn lines land in `lines`. */
function capture() {
  const lines: Array<Record<string, unknown>> = [];
  const sink = new Writable({
    write(chunk: Buffer, _enc, done) {
      for (const l of chunk.toString().split('\n')) if (l) lines.push(JSON.parse(l) as Record<string, unknown>);
      done();
    },
  });
  return { lines, logger: pino({ level: 'warn' }, sink) };
}

const failure = async (p: Promise<unknown>) => {
  const err = await p.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(TributaryError);
  return err as TributaryError;
};

it('appends refused by a full disk: one line at once naming the directory and the full disk, not one per append', async () => {
  const { lines, logger } = capture();
  const dir = join(root, 'p');
  const log = await PartitionLog.open(dir, LOG_OPTS, logger);
  closers.push(() => log.close());
  await log.append([rec('before')]);
  const enospc = () => {
    throw Object.assign(new Error('ENOSPC: no space left on device, write'), { code: 'ENOSPC' });
  };
  vi.spyOn(Segment.prototype, 'writeNow').mockImplementation(enospc);
  vi.spyOn(Segment.prototype, 'writeAt').mockImplementation(async () => enospc());
  for (let i = 0; i < 50; i++) {
    const err = await failure(log.append([rec(`v${i}`)]));
    expect(err.code).toBe('storage_error');
    expect(String(err.fields.reason)).toMatch(/disk is full/);
  }
  const warned = lines.filter((l) => l.msg === 'an append failed (storage_error)');
  expect(warned).toHaveLength(1);
  expect(warned[0]).toMatchObject({ dir });
  expect(String(warned[0]!.reason)).toMatch(/disk is full: ENOSPC/);
});

it('a read that meets a corrupt record in a closed segment: logged naming the segment and position', async () => {
  const dir = join(root, 'p');
  const log = await PartitionLog.open(dir, LOG_OPTS);
  for (let i = 0; i < 30; i++) await log.append([rec(`value-${i}-${'x'.repeat(100)}`)]);
  log.setHighWatermark(log.logEndOffset);
  const seg = log.segmentInfos()[1]!;
  await log.close();
  const fh = await open(join(dir, `${String(seg.baseOffset).padStart(20, '0')}.log`), 'r+');
  const b = Buffer.alloc(1);
  await fh.read(b, 0, 1, 20);
  b[0]! ^= 1;
  await fh.write(b, 0, 1, 20);
  await fh.close();
  const { lines, logger } = capture();
  const reopened = await PartitionLog.open(dir, LOG_OPTS, logger);
  closers.push(() => reopened.close());
  for (let i = 0; i < 20; i++) {
    const err = await failure(reopened.read(seg.baseOffset, { maxRecords: 10, maxBytes: 1 << 20 }));
    expect(err.code).toBe('storage_error');
  }
  const warned = lines.filter((l) => l.msg === 'a read failed (storage_error)');
  expect(warned).toHaveLength(1);
  expect(warned[0]).toMatchObject({ dir, reason: `corrupt record in segment ${seg.baseOffset} at position 0` });
});

/** An offset store (not the log) that is down, answering as PgOffsetStore does with PostgreSQL stopped. */
class DownStore extends MemoryOffsetStore {
  down = false;
  override async commit(group: string, topic: string, entries: OffsetEntry[], opts?: { force?: boolean }): Promise<void> {
    if (this.down) throw new TributaryError('storage_error', { op: 'commit', reason: 'connect ECONNREFUSED 127.0.0.1:5432' });
    return super.commit(group, topic, entries, opts);
  }
}

it('offset commits an offset store fails (PostgreSQL stopped): logged naming the store and the cause, not once per commit', async () => {
  const { lines, logger } = capture();
  const clock = new FakeClock();
  let store!: DownStore;
  const cs = await openCoordinators(join(root, 'data'), clock, { topics: { t: 1 }, logger, offsetStore: () => (store = new DownStore()) });
  closers.push(() => cs.close());
  await cs.topics.get('t').partitions[0]!.append(Array.from({ length: 10 }, (_, i) => rec(`r${i}`)));
  const gc = cs.groups;
  const j = gc.join({ topic: 't', group: 'g', member: 'a', host: 'h' });
  await until(() => gc.scheduler.has('window:g'), 5000, 'join window');
  await clock.advance(GROUP_CONFIG.joinWindowMs);
  const v = await j;
  await gc.sync({ topic: 't', group: 'g', member: v.memberId, generation: v.generation });
  store.down = true;
  for (let i = 0; i < 30; i++) {
    const err = await failure(gc.commit({ topic: 't', group: 'g', member: v.memberId, generation: v.generation, entries: [{ partition: 0, offset: (i % 9) + 1 }] }));
    expect(err.code).toBe('storage_error');
  }
  const warned = lines.filter((l) => l.msg === 'an offset commit failed in the offset store');
  expect(warned).toHaveLength(1);
  expect(warned[0]).toMatchObject({ store: 'memory', group: 'g', reason: 'connect ECONNREFUSED 127.0.0.1:5432' });
});

it('a flood is counted: the lines left out are reported in one line at the end of the interval', async () => {
  const { lines, logger } = capture();
  const log = new RateLimitedLog(() => logger, { intervalMs: 100 });
  for (let i = 0; i < 500; i++) log.warn('k', { dir: '/d', reason: 'ENOSPC' }, 'an append failed');
  log.warn('other', { dir: '/e' }, 'an append failed');
  expect(lines).toHaveLength(2);
  await until(() => lines.length === 3, 5000, 'the summary line');
  expect(lines[2]).toMatchObject({ dir: '/d', notLogged: 499, intervalMs: 100, msg: 'an append failed (repeated)' });
});

it('with a burst, a steady flood logs at most that many lines per interval, its summary among them', async () => {
  const { lines, logger } = capture();
  useFakeTimersForIo();
  const log = new RateLimitedLog(() => logger, { intervalMs: 1000, burst: 3, summary: ({ left }) => [{ left }, 'left out'] });
  const flood = (n: number) => {
    for (let i = 0; i < n; i++) log.warn('k', { i }, 'failed');
  };
  flood(10);
  expect(lines.map((l) => l.msg)).toEqual(['failed', 'failed', 'failed']);
  await vi.advanceTimersByTimeAsync(1000);
  expect(lines.at(-1)).toMatchObject({ left: 7, msg: 'left out' });
  // The summary opened the next interval: two more lines in it, then counting again.
  flood(5);
  expect(lines.map((l) => l.msg)).toEqual(['failed', 'failed', 'failed', 'left out', 'failed', 'failed']);
  await vi.advanceTimersByTimeAsync(1000);
  expect(lines.at(-1)).toMatchObject({ left: 3, msg: 'left out' });
  // A quiet interval: the next failure is logged at once again.
  await vi.advanceTimersByTimeAsync(1000);
  flood(1);
  expect(lines.at(-1)).toMatchObject({ i: 0, msg: 'failed' });
  expect(lines).toHaveLength(8);
});

it('each log has its own suppression: a log reopened on the same directory logs its first failure', async () => {
  const dir = join(root, 'p');
  const enospc = () => {
    throw Object.assign(new Error('ENOSPC: no space left on device, write'), { code: 'ENOSPC' });
  };
  for (let round = 0; round < 2; round++) {
    const { lines, logger } = capture();
    const log = await PartitionLog.open(dir, LOG_OPTS, logger);
    await log.append([rec(`before${round}`)]);
    const spies = [vi.spyOn(Segment.prototype, 'writeNow').mockImplementation(enospc), vi.spyOn(Segment.prototype, 'writeAt').mockImplementation(async () => enospc())];
    expect((await failure(log.append([rec('v')]))).code).toBe('storage_error');
    expect(lines.filter((l) => l.msg === 'an append failed (storage_error)'), `round ${round}`).toHaveLength(1);
    for (const s of spies) s.mockRestore();
    await log.close();
  }
});

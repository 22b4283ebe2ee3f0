/**
 * The shared timer of partition work (storage/log-ticker.ts): one timer for everything that asked within
 * a period, none while nothing asks; and the logs and partitions of a broker on it: a standalone broker's
 * logs (flush=always, no timed HWM checkpoint) never arm it, a flush=interval log is synced at the next
 * tick, and the snapshot checks of many partitions share one timer.
 */
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { LogTicker, type Tickable } from 'tributary-broker/storage/log-ticker.js';
import { HWM_CHECKPOINT_FILE, type LogOptions, PartitionLog } from 'tributary-broker/storage/partition-log.js';
import { PRODUCER_SNAPSHOT_FILE, Partition } from 'tributary-broker/partition/partition.js';
import { FakeClock } from '../../helpers/fake-clock.js';
import { removeDir, tempDir, until } from '../../helpers/util.js';

const PERIOD = 1000;

function counter(onTick: (n: number) => void = () => {}): Tickable & { ticks: number } {
  const t = {
    ticks: 0,
    onTick() {
      t.ticks++;
      onTick(t.ticks);
    },
  };
  return t;
}

describe('LogTicker', () => {
  it('arms nothing until asked, one timer for every ask of a period, and nothing after the tick', async () => {
    const clock = new FakeClock();
    const ticker = new LogTicker(PERIOD, clock);
    expect(clock.pending).toBe(0);
    const [a, b, c] = [counter(), counter(), counter()];
    ticker.want(a);
    await clock.advance(300);
    ticker.want(b);
    ticker.want(a);
    ticker.want(c);
    expect(clock.pending).toBe(1);
    await clock.advance(699);
    expect([a.ticks, b.ticks, c.ticks]).toEqual([0, 0, 0]);
    await clock.advance(1);
    // Within one period of the first ask, each once, however often it asked.
    expect([a.ticks, b.ticks, c.ticks]).toEqual([1, 1, 1]);
    expect(ticker.armed).toBe(false);
    expect(clock.pending).toBe(0);
    await clock.advance(10 * PERIOD);
    expect([a.ticks, b.ticks, c.ticks]).toEqual([1, 1, 1]);
  });

  it('an ask made during a tick waits for the next period', async () => {
    const clock = new FakeClock();
    const ticker = new LogTicker(PERIOD, clock);
    const again: Tickable & { ticks: number } = counter((n) => {
      if (n < 3) ticker.want(again);
    });
    ticker.want(again);
    await clock.advance(PERIOD);
    expect(again.ticks).toBe(1);
    await clock.advance(PERIOD - 1);
    expect(again.ticks).toBe(1);
    await clock.advance(1);
    expect(again.ticks).toBe(2);
    await clock.advance(5 * PERIOD);
    expect(again.ticks).toBe(3);
    expect(clock.pending).toBe(0);
  });

  it('forget: no tick for it, and the timer goes once nothing waits', async () => {
    const clock = new FakeClock();
    const ticker = new LogTicker(PERIOD, clock);
    const [a, b] = [counter(), counter()];
    ticker.want(a);
    ticker.want(b);
    ticker.forget(a);
    expect(clock.pending).toBe(1);
    ticker.forget(b);
    expect(clock.pending).toBe(0);
    await clock.advance(2 * PERIOD);
    expect([a.ticks, b.ticks]).toEqual([0, 0]);
  });

  it('one that throws does not cost the others their tick', async () => {
    const clock = new FakeClock();
    const ticker = new LogTicker(PERIOD, clock);
    const bad: Tickable = {
      onTick() {
        throw new Error('boom');
      },
    };
    const good = counter();
    ticker.want(bad);
    ticker.want(good);
    await clock.advance(PERIOD);
    expect(good.ticks).toBe(1);
  });
});

describe('partition logs and partitions on a shared ticker', () => {
  let dir: string;
  const open: Array<{ close(): Promise<void> }> = [];

  beforeEach(async () => {
    dir = await tempDir('log-ticker-');
  });

  afterEach(async () => {
    for (const x of open.splice(0).reverse()) await x.close().catch(() => {});
    await removeDir(dir);
  });

  async function openLog(name: string, opts: Partial<LogOptions>): Promise<PartitionLog> {
    const log = await PartitionLog.open(join(dir, name), opts);
    open.push(log);
    return log;
  }

  const record = (i: number) => ({ key: null, value: Buffer.from(`v${i}`), timestamp: 0 });
  const dirtyCount = (l: PartitionLog) => (l as unknown as { sync: { dirtyCount: number } }).sync.dirtyCount;

  it('logs as a standalone broker opens them (flush=always, no timed checkpoint) never arm it', async () => {
    const clock = new FakeClock();
    const ticker = new LogTicker(PERIOD, clock);
    const logs = await Promise.all([0, 1, 2].map((i) => openLog(String(i), { flush: 'always', checkpointHwmOnTimer: false, ticker })));
    for (const log of logs) {
      for (let i = 0; i < 5; i++) await log.append([record(i)]);
      log.setHighWatermark(log.logEndOffset);
    }
    expect(ticker.armed).toBe(false);
    expect(clock.pending).toBe(0);
  });

  it('flush=interval: a write arms it, the tick syncs the segment and checkpoints the HWM; then it is idle again', async () => {
    const clock = new FakeClock();
    const ticker = new LogTicker(PERIOD, clock);
    const idle = await openLog('idle', { flush: 'interval', ticker });
    const log = await openLog('busy', { flush: 'interval', ticker });
    expect(ticker.armed).toBe(false);
    await log.append([record(0), record(1)]);
    expect(dirtyCount(log)).toBe(1);
    expect(ticker.armed).toBe(true);
    log.setHighWatermark(2);
    await clock.advance(PERIOD);
    await until(() => dirtyCount(log) === 0, 5000, 'the segment synced by the tick');
    const checkpoint = () => readFile(join(log.dir, HWM_CHECKPOINT_FILE), 'utf8').catch(() => '');
    await until(async () => (await checkpoint()).endsWith(' 2\n'), 5000, 'the HWM checkpointed by the tick');
    expect(dirtyCount(idle)).toBe(0);
    // Nothing left to do: no timer.
    await until(() => !ticker.armed, 5000, 'the ticker idle again');
    expect(clock.pending).toBe(0);
  });

  it('the snapshot checks of many partitions share one timer, which idle partitions leave alone', async () => {
    const clock = new FakeClock();
    const snapshotTicker = new LogTicker(10_000, clock);
    const parts: Partition[] = [];
    for (let i = 0; i < 20; i++) {
      const p = new Partition('t', i, await PartitionLog.open(join(dir, `p${i}`), { flush: 'os' }), { snapshotTicker });
      parts.push(p);
      open.push(p);
    }
    // Both snapshot files of every partition check on the one timer, once loaded.
    await Promise.all(parts.flatMap((p) => [p.whenTxnIndexReady(), p.whenProducerStateReady()]));
    expect(clock.pending).toBe(1);
    await clock.advance(10_000);
    // Nothing changed: no partition asks again, so no timer (it held 20,000 checks every 10 s at scale).
    expect(clock.pending).toBe(0);
    // An append moves one partition's HWM: its checks come back, and write its producer snapshot.
    const p3 = parts[3]!;
    const snapshot = () => readFile(join(dir, 'p3', PRODUCER_SNAPSHOT_FILE), 'utf8').then((t) => JSON.parse(t) as { offset: number }, () => undefined);
    await p3.appendIdempotent([{ key: null, value: Buffer.from('x'), producerId: '7', epoch: 0, sequence: 0 }], { producerId: '7', epoch: 0, firstSequence: 0, lastSequence: 0 });
    expect(clock.pending).toBe(1);
    const before = await snapshot();
    await clock.advance(10_000);
    await until(async () => (await snapshot())?.offset === 1, 5000, 'the producer snapshot written as of offset 1');
    expect(before?.offset ?? 0).toBe(0);
    expect(clock.pending).toBe(0);
    for (const p of parts) await p.close();
    open.splice(0);
    expect(clock.pending).toBe(0);
  });
});

/**
 * Group commit after a failed fsync (docs/architecture.md, "Storage"): the log fails, and no append waiting
 * for a later pass is acknowledged. On Linux a failed fdatasync may drop the dirty pages it could not
 * write, and the next fdatasync can then succeed without them, so an append written while the failing
 * fsync ran must not be answered OK by the pass after it.
 */
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { GroupCommit } from 'tributary-broker/storage/group-commit.js';
import type { LogState } from 'tributary-broker/storage/log-state.js';
import { LogWriter } from 'tributary-broker/storage/log-writer.js';
import { PartitionLog } from 'tributary-broker/storage/partition-log.js';
import { Segment } from 'tributary-broker/storage/segment.js';
import { removeDir, tempDir } from '../../helpers/util.js';

let dir: string;
beforeEach(async () => {
  dir = await tempDir('trib-group-commit-');
});
afterEach(async () => {
  vi.restoreAllMocks();
  await removeDir(dir);
});

const rec = (i: number) => ({ key: null, value: Buffer.from(`v${i}`) });

describe('group commit', () => {
  it('acknowledges nothing after an fsync failed, also appends that wait for the next pass', async () => {
    const log = await PartitionLog.open(dir, { flush: 'always' });
    await log.append([rec(0)]); // files created, one good fsync
    const real = Segment.prototype.datasync;
    let fail!: (e: Error) => void;
    const first = new Promise<void>((_, reject) => {
      fail = reject;
    });
    // The first fsync hangs until told to fail; later ones succeed, as Linux may report after a write-back error.
    const spy = vi.spyOn(Segment.prototype, 'datasync').mockImplementationOnce(() => first);
    const a = log.append([rec(1)]).then(
      () => 'acknowledged',
      (e: Error) => `rejected: ${e.message}`,
    );
    await vi.waitFor(() => expect(spy).toHaveBeenCalledTimes(1));
    // Written while that fsync runs: it waits for the next pass.
    const b = log.append([rec(2)]).then(
      () => 'acknowledged',
      (e: Error) => `rejected: ${e.message}`,
    );
    await vi.waitFor(() => expect(log.logEndOffset).toBe(3));
    expect(log.failed).toBe(false);
    fail(Object.assign(new Error('EIO: i/o error, fdatasync'), { code: 'EIO' }));
    expect(await a).toMatch(/^rejected: .*fsync failed/);
    expect(await b).toMatch(/^rejected: .*log failed/);
    // Nothing later is accepted either, and the log says so (tributary_failed_logs counts it).
    await expect(log.append([rec(3)])).rejects.toThrow(/log failed/);
    expect(log.failed).toBe(true);
    spy.mockImplementation(real);
    await log.close().catch(() => {});
  });
});

describe('group commit beside another fsync of the log', () => {
  // Linux reports a write-back error to only one of two fsyncs of one open file: the other may return
  // success although the pages it was to make durable were dropped.
  it("does not run a roll's fsync of the old segment beside a pass", async () => {
    const log = await PartitionLog.open(dir, { flush: 'always', segmentBytes: 200 });
    await log.append([rec(0)]);
    const real = Segment.prototype.datasync;
    let passDone!: () => void;
    const pass = new Promise<void>((resolve) => {
      passDone = resolve;
    });
    const spy = vi
      .spyOn(Segment.prototype, 'datasync')
      .mockImplementationOnce(() => pass) // the pass of append a: held until told
      .mockImplementationOnce(() => Promise.reject(Object.assign(new Error('EIO: i/o error, fdatasync'), { code: 'EIO' }))); // the next one: the roll's
    const roll = vi.spyOn(LogWriter.prototype, 'roll');
    const settle = (p: Promise<unknown>) =>
      p.then(
        () => 'acknowledged',
        (e: Error) => `rejected: ${e.message}`,
      );
    const a = settle(log.append([{ key: null, value: Buffer.alloc(60) }]));
    await vi.waitFor(() => expect(spy).toHaveBeenCalledTimes(1));
    // Does not fit the active segment: the drain rolls, and the roll fsyncs the old segment.
    const b = settle(log.append([{ key: null, value: Buffer.alloc(150) }]));
    await vi.waitFor(() => expect(roll).toHaveBeenCalledTimes(1));
    await new Promise((r) => setImmediate(r));
    // The roll waits for the pass: its fsync has not started.
    expect(spy).toHaveBeenCalledTimes(1);
    passDone();
    // The pass ran alone and succeeded: a is durable. The roll's fsync then failed: b is not, nor anything later.
    expect(await a).toBe('acknowledged');
    expect(await b).toMatch(/^rejected: .*fsync failed/);
    expect(spy).toHaveBeenCalledTimes(2);
    await expect(log.append([rec(3)])).rejects.toThrow(/log failed/);
    spy.mockImplementation(real);
    await log.close().catch(() => {});
  });

  it('acknowledges none of a pass during which the log failed, though its own fsync succeeded', async () => {
    let st!: { failed: Error | null; dir: string; options: object; fail(e: unknown): void };
    st = {
      failed: null,
      dir,
      options: {},
      fail(e: unknown) {
        st.failed = e as Error;
      },
    };
    let passDone!: () => void;
    const seg = {
      deleted: false,
      datasync: vi.fn(
        () =>
          new Promise<void>((resolve) => {
            passDone = resolve;
          }),
      ),
    };
    const commit = new GroupCommit(st as unknown as LogState);
    commit.markDirty(seg as unknown as Segment);
    const outcome = new Promise<string>((resolve) => {
      commit.wait({
        resolve: () => resolve('acknowledged'),
        reject: (e) => resolve(`rejected: ${e.message}`),
        result: { baseOffset: 0, lastOffset: 0, timestamp: 0 },
      });
    });
    commit.kick();
    expect(seg.datasync).toHaveBeenCalledTimes(1);
    st.fail(Object.assign(new Error('EIO: i/o error, fdatasync'), { code: 'EIO' })); // another fsync of the log
    passDone();
    expect(await outcome).toMatch(/^rejected: .*log failed/);
  });
});

describe('flush=interval: the timer beside a segment roll', () => {
  it("does not fsync the old segment beside the roll's fsync of it", async () => {
    const log = await PartitionLog.open(dir, { flush: 'interval', flushIntervalMs: 20, segmentBytes: 200 });
    await log.append([{ key: null, value: Buffer.alloc(60) }]); // dirty: the flush timer is armed
    const real = Segment.prototype.datasync;
    const inFlight = new Map<Segment, number>();
    let overlapping = 0;
    let releaseRoll!: () => void;
    let ticksAtRoll = 0;
    const tick = vi.spyOn(PartitionLog.prototype, 'onTick');
    const spy = vi.spyOn(Segment.prototype, 'datasync').mockImplementation(function (this: Segment) {
      const n = (inFlight.get(this) ?? 0) + 1;
      inFlight.set(this, n);
      if (n > 1) overlapping++;
      const done = () => inFlight.set(this, inFlight.get(this)! - 1);
      if (releaseRoll === undefined) {
        // The roll's: held until told.
        ticksAtRoll = tick.mock.calls.length;
        return new Promise<void>((resolve) => {
          releaseRoll = () => {
            done();
            resolve();
          };
        });
      }
      done();
      return real.call(this);
    });
    // Does not fit: the drain rolls, and the roll fsyncs the old segment.
    const b = log.append([{ key: null, value: Buffer.alloc(150) }]);
    await vi.waitFor(() => expect(releaseRoll).toBeDefined());
    // The timer, armed by the first append's write, fires while the roll's fsync runs.
    await vi.waitFor(() => expect(tick.mock.calls.length).toBeGreaterThan(ticksAtRoll));
    await new Promise((r) => setImmediate(r));
    expect(overlapping).toBe(0);
    expect(spy).toHaveBeenCalledTimes(1);
    releaseRoll();
    await b;
    spy.mockImplementation(real);
    await log.close();
  });
});

describe('after a failed fsync', () => {
  // The pages a failed fsync could not write may stay in the page cache for a while: a reopen in the same
  // process read them as records the disk lacks (their offsets later read as other bytes once evicted).
  const eio = () => Promise.reject(Object.assign(new Error('EIO: i/o error, fdatasync'), { code: 'EIO' }));

  it('cuts the segment back to the last good fsync: a reopen reads none of the unacknowledged records', async () => {
    const log = await PartitionLog.open(dir, { flush: 'always' });
    await log.append([rec(0)]);
    await log.append([rec(1)]);
    vi.spyOn(Segment.prototype, 'datasync').mockImplementationOnce(eio);
    await expect(log.append([rec(2), rec(3)])).rejects.toThrow(/fsync failed/);
    await log.close().catch(() => {});
    vi.restoreAllMocks();

    const again = await PartitionLog.open(dir, { flush: 'always' });
    try {
      expect(again.logEndOffset).toBe(2);
      // The next append takes offset 2, and a read gives its value, not the unacknowledged one's.
      expect((await again.append([rec(9)])).baseOffset).toBe(2);
      const read = await again.read(0, { maxRecords: 10, maxBytes: 1 << 20 });
      expect(read.map((r) => r.value.toString())).toEqual(['v0', 'v1', 'v9']);
    } finally {
      await again.close();
    }
  });

  it('cuts an old segment whose roll fsync failed back to its last fsync (flush=interval)', async () => {
    const opts = { flush: 'interval' as const, flushIntervalMs: 3_600_000, segmentBytes: 200 };
    const log = await PartitionLog.open(dir, opts);
    await log.append([rec(0)]);
    await log.flush();
    // Acknowledged without an fsync (interval), then the roll's fsync of the segment fails.
    await log.append([{ key: null, value: Buffer.alloc(60) }]);
    vi.spyOn(Segment.prototype, 'datasync').mockImplementationOnce(eio);
    await expect(log.append([{ key: null, value: Buffer.alloc(150) }])).rejects.toThrow(/fsync failed/);
    await log.close().catch(() => {});
    vi.restoreAllMocks();

    const again = await PartitionLog.open(dir, opts);
    try {
      // What the interval mode loses in a crash, lost now rather than when the page cache lets it go.
      expect(again.logEndOffset).toBe(1);
    } finally {
      await again.close();
    }
  });
});

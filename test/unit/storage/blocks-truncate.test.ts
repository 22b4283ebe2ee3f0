/**
 * Truncation of a log written with storedLayout 'blocks' (docs/architecture.md "Stored batches"): a cut
 * inside an append block rewrites that block as the block of the records kept, and every read, later
 * append, restart and the idempotent producer state then see what a per-record log truncated the same way
 * gives; no crash during the cut loses a kept record.
 */
import { cp, readdir, readFile, stat, unlink } from 'node:fs/promises';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { encodeBatch, type ScannedBatch, scanBatch } from 'tributary-protocol/batch.js';
import type { LogRecord } from 'tributary-protocol/record.js';
import { Partition } from 'tributary-broker/partition/partition.js';
import { PRODUCER_SNAPSHOT_FILE } from 'tributary-broker/partition/partition-snapshots.js';
import { type LogOptions, PartitionLog } from 'tributary-broker/storage/partition-log.js';
import { simulateCrash } from 'tributary-broker/storage/log-test-hooks.js';
import { Segment } from 'tributary-broker/storage/segment.js';
import { removeDir, tempDir } from '../../helpers/util.js';

let dir: string;
beforeEach(async () => {
  dir = await tempDir('trib-blocks-truncate-');
});
afterEach(async () => {
  vi.restoreAllMocks();
  await removeDir(dir);
});

const NOW = 1_700_000_000_000;

/** One append: a blockable plain or idempotent produce frame, or records through append() (per-record layout). */
type Step = { kind: 'plain' | 'idem' | 'objects'; n: number };

/** Producer 9's idempotent frame of `n` records from sequence `seq`. */
function frame(kind: 'plain' | 'idem', first: number, n: number, seq = 0): ScannedBatch {
  const idem = kind === 'idem';
  const records = Array.from({ length: n }, (_, i) => {
    const o = first + i;
    return {
      offset: 0,
      sequence: idem ? seq + i : 0,
      producerId: idem ? '9' : '',
      key: o % 3 === 0 ? null : Buffer.from(`k${o}`),
      epoch: idem ? 4 : 0,
      value: Buffer.from(`v${o}-${'w'.repeat((o * 5) % 17)}`),
      // Some records without a timestamp (stamped with the append's time), the others out of order.
      timestamp: o % 4 === 0 ? 0 : NOW - 1000 + ((o * 37) % 29),
      attributes: 0,
      headers: o % 5 === 0 ? [{ key: 'h', value: Buffer.from(`x${o}`) }] : [],
    };
  });
  const body = encodeBatch(
    { topic: 't', partition: 0, acks: '1', idempotent: idem, firstSequence: idem ? seq : 0, lastSequence: idem ? seq + n - 1 : 0, records },
    { extensions: true },
  );
  return scanBatch(body, { extensions: true, request: true });
}

/** Appends `steps` to `log` from offset `first`, one after the other; idempotent frames numbered from `seq`. */
async function appendSteps(log: PartitionLog, steps: Step[], first: number, seq = 0): Promise<number> {
  let o = first;
  for (const s of steps) {
    if (s.kind === 'objects') {
      const recs = Array.from({ length: s.n }, (_, i) => ({ key: null, value: Buffer.from(`o${o + i}`), timestamp: NOW - 500 + o + i }));
      await log.append(recs);
    } else {
      await log.appendWire(frame(s.kind, o, s.n, seq), undefined, s.kind === 'idem' ? seq : -1);
      if (s.kind === 'idem') seq += s.n;
    }
    o += s.n;
  }
  return o;
}

const STEPS: Step[] = [
  { kind: 'plain', n: 3 },
  { kind: 'idem', n: 4 },
  { kind: 'objects', n: 2 },
  { kind: 'plain', n: 1 },
  { kind: 'plain', n: 5 },
  { kind: 'objects', n: 1 },
  { kind: 'idem', n: 3 },
  { kind: 'plain', n: 4 },
];
const TOTAL = STEPS.reduce((a, s) => a + s.n, 0);

const EXT = { topic: 't', partition: 0, extensions: true, skipControl: false };
const NOEXT = { ...EXT, extensions: false };

/** Every read of every offset: read() and the wire reads (from the tail cache when it serves them, and from the files). */
async function reads(log: PartitionLog): Promise<unknown[]> {
  const out: unknown[] = [log.logEndOffset];
  const wire = (w: { frame: Buffer; count: number; valueBytes: number; nextOffset: number } | null) =>
    w && { frame: w.frame.toString('hex'), count: w.count, valueBytes: w.valueBytes, nextOffset: w.nextOffset };
  for (let o = 0; o < log.logEndOffset; o++) {
    for (const [maxRecords, maxBytes] of [
      [1000, 1 << 20],
      [2, 1 << 20],
      [1000, 250],
    ] as const) {
      const opts = { maxRecords, maxBytes };
      out.push(await log.read(o, opts));
      for (const w of [EXT, NOEXT]) {
        const disk = await log.readWireFromDisk(o, opts, w);
        out.push(wire(log.readWire(o, opts, w) ?? disk), wire(disk));
      }
    }
  }
  for (const ts of [0, NOW - 990, NOW - 980, NOW - 400, NOW, NOW + 1]) out.push(await log.offsetForTimestamp(ts));
  return out;
}

/** Units of the log files: each one's first offset and record count (a per-record record: 1). */
async function units(d: string): Promise<Array<{ offset: number; count: number; block: boolean }>> {
  const out: Array<{ offset: number; count: number; block: boolean }> = [];
  for (const f of (await readdir(d)).filter((n) => n.endsWith('.log')).sort()) {
    const b = await readFile(join(d, f));
    for (let p = 0; p < b.length; ) {
      const w = b.readUInt32BE(p);
      const block = w >= 0x80000000;
      const offset = Number(b.readBigUInt64BE(block ? p + 10 : p + 8));
      out.push({ offset, count: block ? b.readUInt32BE(p + 18) : 1, block });
      p += 4 + (block ? w - 0x80000000 : w);
    }
  }
  return out;
}

describe("truncation of a log written with storedLayout 'blocks'", () => {
  it.each([
    { tailCacheBytes: 1 << 20, segmentBytes: 1 << 20 },
    { tailCacheBytes: 0, segmentBytes: 400 },
    { tailCacheBytes: 1 << 20, segmentBytes: 400 },
  ])('to every offset gives what a per-record log truncated the same way gives (%o)', async ({ tailCacheBytes, segmentBytes }) => {
    vi.spyOn(Date, 'now').mockReturnValue(NOW);
    const opts: Partial<LogOptions> = { flush: 'os', indexIntervalBytes: 64, tailCacheBytes, segmentBytes };
    let insideBlocks = 0;
    for (let cut = 0; cut <= TOTAL; cut++) {
      const r = await tempDir('r-', dir);
      const b = await tempDir('b-', dir);
      let lr = await PartitionLog.open(r, opts);
      let lb = await PartitionLog.open(b, { ...opts, storedLayout: 'blocks' });
      try {
        await appendSteps(lr, STEPS, 0);
        await appendSteps(lb, STEPS, 0);
        const before = await units(b);
        if (before.some((u) => u.block && u.offset < cut && cut < u.offset + u.count)) insideBlocks++;
        await lr.truncateTo(cut);
        await lb.truncateTo(cut);
        const what = `cut at ${cut}`;
        // The tail cache keeps what the cut kept (a block's chunk cut to its records kept) and serves it.
        const last = { maxRecords: 10, maxBytes: 1 << 20 };
        if (tailCacheBytes > 0 && cut > 0) expect(lb.readWire(cut - 1, last, EXT), what).toMatchObject({ count: 1, nextOffset: cut });
        const expected = await reads(lr);
        expect(await reads(lb), what).toEqual(expected);
        // The kept part of a block is a block of its own, and the files hold nothing past the cut.
        const after = await units(b);
        expect(after.map((u) => u.offset + u.count).at(-1) ?? 0, what).toBe(cut);
        expect(after.filter((u) => u.block).length, what).toBe(before.filter((u) => u.block && u.offset < cut).length);
        // Appends go on from the cut, in both layouts alike; then a clean restart and one after a crash.
        await appendSteps(lr, STEPS.slice(0, 3), cut, 100);
        await appendSteps(lb, STEPS.slice(0, 3), cut, 100);
        const appended = await reads(lr);
        expect(await reads(lb), what).toEqual(appended);
        await lb.close();
        lb = await PartitionLog.open(b, { ...opts, storedLayout: 'blocks' });
        expect(await reads(lb), what).toEqual(appended);
        await simulateCrash(lb);
        for (const f of await readdir(b)) if (f.endsWith('.index')) await unlink(join(b, f));
        lb = await PartitionLog.open(b, { ...opts, storedLayout: 'blocks' });
        expect(await reads(lb), what).toEqual(appended);
      } finally {
        await lr.close();
        await lb.close();
      }
      lr = lb = undefined as unknown as PartitionLog;
    }
    expect(insideBlocks).toBe(STEPS.filter((s) => s.kind !== 'objects').reduce((a, s) => a + s.n - 1, 0));
  }, 300_000);

  /** Each cut inside a block of STEPS, with the end of that block. */
  const insideCuts: Array<{ cut: number; blockEnd: number }> = [];
  for (let o = 0, i = 0; i < STEPS.length; o += STEPS[i]!.n, i++) {
    if (STEPS[i]!.kind === 'objects') continue;
    for (let cut = o + 1; cut < o + STEPS[i]!.n; cut++) insideCuts.push({ cut, blockEnd: o + STEPS[i]!.n });
  }

  it.each(insideCuts)('no crash during a cut inside a block loses a kept record (flush=always: recovery refuses damage) %o', async ({ cut, blockEnd }) => {
    vi.spyOn(Date, 'now').mockReturnValue(NOW);
    const opts: Partial<LogOptions> = { flush: 'always', indexIntervalBytes: 64, storedLayout: 'blocks' };
    const src = join(dir, 'l');
    const log = await PartitionLog.open(src, opts);
    // One segment: the units after the cut block are dropped with it.
    await appendSteps(log, STEPS, 0);
    const all = (await log.read(0, { maxRecords: 1000, maxBytes: 1 << 20 })).map((r) => r.value.toString());
    expect(all.length).toBe(TOTAL);
    const images: string[] = [];
    const image = async () => {
      const to = join(dir, `image-${images.length}`);
      await cp(src, to, { recursive: true });
      images.push(to);
    };
    // An image of the files before each write and fsync of the cut (as a crash there leaves them).
    const writeAt = Segment.prototype.writeAt;
    vi.spyOn(Segment.prototype, 'writeAt').mockImplementation(async function (this: Segment, buf: Buffer | readonly Buffer[], position: number) {
      await image();
      return writeAt.call(this, buf, position);
    });
    const datasync = Segment.prototype.datasync;
    vi.spyOn(Segment.prototype, 'datasync').mockImplementation(async function (this: Segment) {
      await image();
      return datasync.call(this);
    });
    await image();
    await log.truncateTo(cut);
    await image();
    vi.restoreAllMocks();
    await simulateCrash(log);
    const lengths = new Set<number>();
    let tornTails = 0;
    const fileSize = async (d: string) => (await stat(join(d, '00000000000000000000.log'))).size;
    for (const [i, img] of images.entries()) {
      const size = await fileSize(img);
      const l = await PartitionLog.open(img, opts);
      if ((await fileSize(img)) < size) tornTails++;
      try {
        const got = (await l.read(0, { maxRecords: 1000, maxBytes: 1 << 20 })).map((r) => r.value.toString());
        lengths.add(got.length);
        // Whatever the crash kept is a prefix of the old log that holds every record below the cut.
        expect(got.length, `image ${i}`).toBeGreaterThanOrEqual(cut);
        expect(got, `image ${i}`).toEqual(all.slice(0, got.length));
        expect(l.logEndOffset, `image ${i}`).toBe(got.length);
        expect((await l.appendWire(frame('plain', got.length, 2))).baseOffset).toBe(got.length);
      } finally {
        await l.close();
      }
    }
    // The images met the old log whole, the old log up to the cut block's end (when units followed it),
    // the shorter block before the dropped records' bytes (recovered as the cut), and the cut.
    expect([...lengths].sort((a, b) => a - b)).toEqual([...new Set([cut, blockEnd, TOTAL])]);
    expect(tornTails).toBeGreaterThanOrEqual(1);
  });

  it('rebuilds the idempotent producer state as a per-record log does: a resent batch cut away is appended again, a kept one is a duplicate', async () => {
    vi.spyOn(Date, 'now').mockReturnValue(NOW);
    const batch = (seq: number, n: number) => ({ producerId: '9', epoch: 4, firstSequence: seq, lastSequence: seq + n - 1 });
    const results: Record<string, unknown[]> = {};
    for (const layout of ['records', 'blocks'] as const) {
      const d = join(dir, layout);
      const opts: Partial<LogOptions> = { flush: 'os', segmentBytes: 500, storedLayout: layout };
      let p = new Partition('t', 0, await PartitionLog.open(d, opts));
      const out: unknown[] = (results[layout] = []);
      const send = async (first: number, seq: number, n: number) => {
        const r = await p.appendIdempotent(frame('idem', first, n, seq), batch(seq, n)).then(
          (x) => ({ base: x.baseOffset, last: x.lastOffset, duplicate: x.duplicate }),
          (e: { code?: string }) => e.code,
        );
        out.push(r);
        return r;
      };
      try {
        await p.whenProducerStateReady();
        // Batches of sequences 0-2, 3-6 and 7-9 at offsets 0-2, 3-6, 7-9; cut at 5, inside the second.
        expect(await send(0, 0, 3)).toMatchObject({ base: 0, duplicate: false });
        expect(await send(3, 3, 4)).toMatchObject({ base: 3, duplicate: false });
        expect(await send(7, 7, 3)).toMatchObject({ base: 7, duplicate: false });
        await p.truncateTo(5);
        expect(p.log.logEndOffset).toBe(5);
        // The first batch was kept whole: a duplicate with its offsets.
        expect(await send(0, 0, 3)).toEqual({ base: 0, last: 2, duplicate: true });
        // The third was cut away: its resend is no duplicate (its sequences now follow a gap); the second's
        // resend is answered as the per-record log answers it; the records cut from it are appended again.
        expect(await send(7, 7, 3)).not.toMatchObject({ duplicate: true });
        await send(3, 3, 4);
        expect(await send(5, 5, 2)).toEqual({ base: 5, last: 6, duplicate: false });
        expect(await send(7, 7, 3)).toEqual({ base: 7, last: 9, duplicate: false });
        out.push(p.log.logEndOffset);
        // And again from the log alone, after a restart without the producer snapshot.
        await p.close();
        await unlink(join(d, PRODUCER_SNAPSHOT_FILE)).catch(() => {});
        p = new Partition('t', 0, await PartitionLog.open(d, opts));
        await p.whenProducerStateReady();
        expect(await send(0, 0, 3)).toEqual({ base: 0, last: 2, duplicate: true });
        expect(await send(5, 5, 2)).toEqual({ base: 5, last: 6, duplicate: true });
        expect(await send(7, 7, 3)).toEqual({ base: 7, last: 9, duplicate: true });
        const read: LogRecord[] = await p.log.read(0, { maxRecords: 100, maxBytes: 1 << 20 });
        out.push(read.map((r) => [r.offset, r.producerId, r.epoch, r.sequence, r.value.toString()]));
      } finally {
        await p.close();
      }
    }
    expect(results.blocks).toEqual(results.records);
  });
});

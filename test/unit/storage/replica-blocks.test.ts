/**
 * REPLICA_FETCH format=stored of a log written with storedLayout 'blocks' (docs/architecture.md "Stored
 * batches"): the leader ships whole blocks as its segments hold them, a fetch from inside a block gets the
 * rest of that block as a new block, and a follower storing the replies as they are holds the leader's
 * bytes exactly, with the leader's producer state. Older followers' batch frames carry the same records.
 */
import { readFile, readdir } from 'node:fs/promises';
import { join } from 'node:path';
import fc from 'fast-check';
import { describe, expect, it, vi } from 'vitest';
import { type BatchRecord, decodeBatch, encodeBatch, logRecordsToBatch, scanBatch } from 'tributary-protocol/batch.js';
import type { LogRecord } from 'tributary-protocol/record.js';
import { Partition } from 'tributary-broker/partition/partition.js';
import type { LogOptions, PartitionLog } from 'tributary-broker/storage/partition-log.js';
import { ATTR_END_OF_APPEND, READ_HEADER_COST, encodeRecords } from 'tributary-broker/storage/record-codec.js';
import type { StoredRead } from 'tributary-broker/storage/replica-read.js';
import { StoredAppends } from 'tributary-broker/storage/stored-appends.js';
import { encodeBatchReply, encodeStoredReply } from 'tributary-broker/cluster/replica-wire.js';
import { useTempLogs } from '../../helpers/temp-logs.js';

const logs = useTempLogs('trib-rblocks-', { flush: 'os', indexIntervalBytes: 64 });
const openLog = (sub: string, opts?: Partial<LogOptions>): Promise<PartitionLog> => logs.open(sub, opts);

const bytes = (max: number) => fc.uint8Array({ maxLength: max }).map((a) => Buffer.from(a));
type Frame = { records: Array<Pick<BatchRecord, 'key' | 'value' | 'timestamp' | 'headers'>>; kind: 'plain' | 'idem' | 'pid' | 'objects' };
const frameArb: fc.Arbitrary<Frame> = fc.record({
  records: fc.array(
    fc.record({
      key: fc.option(bytes(12), { nil: null }),
      value: fc.oneof(bytes(8), bytes(90)),
      timestamp: fc.oneof(fc.constant(0), fc.integer({ min: 1, max: 2 ** 45 })),
      headers: fc.array(fc.record({ key: fc.string({ maxLength: 4 }), value: bytes(10) }), { maxLength: 3 }),
    }),
    { minLength: 1, maxLength: 6 },
  ),
  // plain and idem are stored as blocks; pid (a plain frame whose records carry a producer id) and objects are not.
  kind: fc.constantFrom('plain', 'plain', 'idem', 'pid', 'objects'),
});

/** Appends `frames` one by one; `seq` numbers the idempotent producer's batches. */
async function appendFrames(log: PartitionLog, frames: Frame[], seq: { next: number }): Promise<void> {
  for (const f of frames) {
    if (f.kind === 'objects') {
      await log.append(f.records.map((r) => ({ ...r, headers: r.headers })));
      continue;
    }
    const idem = f.kind === 'idem';
    const first = seq.next;
    if (idem) seq.next += f.records.length;
    const records = f.records.map((r, i) => ({ ...r, offset: 0, attributes: 0, producerId: f.kind === 'plain' ? '' : 'P7', epoch: idem ? 2 : 0, sequence: idem ? first + i : 0 }));
    const body = encodeBatch(
      { topic: 't', partition: 0, acks: '1', idempotent: idem, firstSequence: idem ? first : 0, lastSequence: idem ? first + records.length - 1 : 0, records },
      { extensions: true },
    );
    await log.appendWire(scanBatch(body, { extensions: true, request: true }), undefined, idem ? first : -1);
  }
}

async function segmentBytes(d: string): Promise<Buffer> {
  const files = (await readdir(d)).filter((f) => f.endsWith('.log')).sort();
  return Buffer.concat(await Promise.all(files.map((f) => readFile(join(d, f)))));
}

async function allRecords(log: PartitionLog, keepAppendMarker = true): Promise<LogRecord[]> {
  const out: LogRecord[] = [];
  for (let next = log.logStartOffset; next < log.logEndOffset; ) {
    const got = await log.read(next, { maxRecords: 1000, maxBytes: 1 << 24, keepAppendMarker });
    if (got.length === 0) break;
    out.push(...got);
    next = got[got.length - 1]!.offset + 1;
  }
  return out;
}

/** A reply through the wire: encodeStoredReply, then the follower's parse. */
function throughWire(read: StoredRead): StoredAppends {
  const reply = encodeStoredReply(read, { nextOffset: read.next, highWatermark: 0, logStartOffset: 0 });
  const parsed = StoredAppends.parse(reply, 30, reply.length, reply.readUInt32BE(26));
  if (typeof parsed === 'string') throw new Error(parsed);
  return parsed;
}

/** Blocks in a run of units (bit 31 of each unit's length). */
function blocksIn(b: Buffer): number {
  let n = 0;
  for (let p = 0; p < b.length; ) {
    const w = b.readUInt32BE(p);
    if (w >= 0x80000000) n++;
    p += 4 + (w & 0x7fffffff);
  }
  return n;
}

const joined = (r: StoredRead) => Buffer.concat(r.runs.map((x) => x.buf.subarray(x.from, x.to)));

describe('REPLICA_FETCH format=stored with append blocks', () => {
  it('a follower holds the leader log byte for byte (blocks, per-record records, mixed segments); batch frames carry the same records', async () => {
    let runs = 0;
    await fc.assert(
      fc.asyncProperty(
        fc.array(frameArb, { minLength: 1, maxLength: 8 }),
        fc.array(frameArb, { minLength: 1, maxLength: 8 }),
        fc.record({ maxRecords: fc.integer({ min: 1, max: 9 }), maxBytes: fc.integer({ min: 1, max: 3000 }), followerSegmentBytes: fc.constantFrom(400, 1 << 20) }),
        async (before, after, f) => {
          const sub = `l${runs++}`;
          const seq = { next: 0 };
          // The first appends in the per-record layout, then blocks: segments that hold both.
          const first = await openLog(sub, { segmentBytes: 900, storedLayout: 'records' });
          await appendFrames(first, before, seq);
          await first.close();
          const log = await openLog(sub, { segmentBytes: 900, storedLayout: 'blocks', tailCacheBytes: 0 });
          await appendFrames(log, after, seq);
          const all = await allRecords(log);
          const follower = await openLog(`f${sub}`, { segmentBytes: f.followerSegmentBytes });
          while (follower.logEndOffset < log.logEndOffset) {
            const got = await log.readStoredAppends(follower.logEndOffset, { maxRecords: f.maxRecords, maxBytes: f.maxBytes, headerCost: 0 });
            expect(got.count).toBeGreaterThan(0);
            await follower.appendReplica(throughWire(got));
          }
          expect((await segmentBytes(join(logs.dir, `f${sub}`))).equals(await segmentBytes(join(logs.dir, sub)))).toBe(true);
          expect(await allRecords(follower)).toEqual(all);
          // A follower of an older version: the batch frame of the records read as objects, byte for byte.
          for (let o = 0; o < log.logEndOffset; o++) {
            const opts = { maxRecords: f.maxRecords, maxBytes: f.maxBytes };
            const objects = await log.read(o, { ...opts, keepAppendMarker: true, wholeAppends: true, maxOffset: log.logEndOffset });
            const charged = await log.readStoredAppends(o, { ...opts, headerCost: READ_HEADER_COST });
            expect([charged.count, charged.next]).toEqual([objects.length, objects[objects.length - 1]!.offset + 1]);
            const trailer = { nextOffset: charged.next, highWatermark: 1, logStartOffset: 0 };
            expect(encodeBatchReply('t', 0, charged, trailer).equals(encodeBatch(logRecordsToBatch('t', 0, objects, trailer), { extensions: true })), `from ${o}`).toBe(true);
          }
          await follower.close();
          await log.close();
        },
      ),
      { numRuns: 25 },
    );
  }, 120_000);

  it('a fetch from inside a block gets the rest of it as a new block, whole whatever max_bytes', async () => {
    const log = await openLog('leader', { storedLayout: 'blocks' });
    const frames: Frame[] = [0, 1].map((j) => ({
      kind: 'plain',
      records: Array.from({ length: 5 }, (_, i) => ({ key: null, value: Buffer.from(`v${j}${i}`), timestamp: 100 + 10 * j + i, headers: [] })),
    }));
    await appendFrames(log, frames, { next: 0 });
    const all = await allRecords(log);
    // A follower whose log ends at 2, inside the first block (the first two records, as one append).
    const follower = await openLog('follower', { storedLayout: 'blocks' });
    await follower.appendReplica(all.slice(0, 2).map((r, i) => ({ ...r, attributes: i === 1 ? r.attributes | ATTR_END_OF_APPEND : r.attributes })));
    const got = await log.readStoredAppends(2, { maxRecords: 1, maxBytes: 1, headerCost: 0 });
    expect([got.count, got.next]).toEqual([3, 5]);
    const body = joined(got);
    expect(blocksIn(body)).toBe(1);
    // Its header: base offset 2, 3 records, the largest timestamp of those three.
    expect([body.readUInt32BE(14), body.readUInt32BE(18), body.readUInt32BE(34)]).toEqual([2, 3, 104]);
    await follower.appendReplica(throughWire(got));
    await follower.appendReplica(throughWire(await log.readStoredAppends(5, { maxRecords: 100, maxBytes: 1 << 20, headerCost: 0 })));
    expect(follower.logEndOffset).toBe(10);
    expect(await allRecords(follower, false)).toEqual(await allRecords(log, false));
    // The old followers' batch frame from inside a block: the same records as read as objects.
    const charged = await log.readStoredAppends(3, { maxRecords: 1, maxBytes: 1, headerCost: READ_HEADER_COST });
    const objects = await log.read(3, { maxRecords: 1, maxBytes: 1, keepAppendMarker: true, wholeAppends: true });
    expect(decodeBatch(encodeBatchReply('t', 0, charged, { nextOffset: 5, highWatermark: 0, logStartOffset: 0 }), { extensions: true }).records.length).toBe(2);
    expect(objects.map((r) => r.offset)).toEqual([3, 4]);
  });

  it('StoredAppends.parse refuses a damaged block, a block inside an append, offsets going back, a wrong count', async () => {
    const log = await openLog('leader', { storedLayout: 'blocks' });
    await appendFrames(
      log,
      [0, 1].map(() => ({ kind: 'plain', records: [{ key: null, value: Buffer.from('ab'), timestamp: 7, headers: [] }, { key: null, value: Buffer.from('c'), timestamp: 8, headers: [] }] })),
      { next: 0 },
    );
    const body = joined(await log.readStoredAppends(0, { maxRecords: 100, maxBytes: 1 << 20, headerCost: 0 }));
    expect(StoredAppends.parse(body, 0, body.length, 4)).toBeInstanceOf(StoredAppends);
    expect(StoredAppends.parse(body, 0, body.length, 3)).toMatch(/announced/);
    const flipped = Buffer.from(body);
    flipped[flipped.length - 3]! ^= 1;
    expect(StoredAppends.parse(flipped, 0, flipped.length, 4)).toMatch(/corrupt/);
    const half = body.length / 2;
    expect(StoredAppends.parse(Buffer.concat([body.subarray(half), body.subarray(0, half)]), 0, body.length, 4)).toMatch(/increasing/);
    expect(StoredAppends.parse(body, 0, body.length - 1, 4)).toMatch(/truncated/);
    // A per-record record that does not end its append, then a block: a block is one whole append.
    const open = encodeRecords([{ offset: 1, timestamp: 1, key: null, value: Buffer.from('x'), headers: [], producerId: '', epoch: -1, sequence: -1, attributes: 0 }]);
    expect(StoredAppends.parse(Buffer.concat([open, body.subarray(half)]), 0, open.length + half, 3)).toMatch(/a block \(one whole append\) inside an append/);
    const closed = encodeRecords([{ offset: 1, timestamp: 1, key: null, value: Buffer.from('x'), headers: [], producerId: '', epoch: -1, sequence: -1, attributes: ATTR_END_OF_APPEND }]);
    expect(StoredAppends.parse(Buffer.concat([closed, body.subarray(half)]), 0, closed.length + half, 3)).toBeInstanceOf(StoredAppends);
    // A gap before a block (compaction's, between appends): stored, read alike from the tail cache and the files.
    const gap = encodeRecords([{ offset: 0, timestamp: 1, key: null, value: Buffer.from('x'), headers: [], producerId: '', epoch: -1, sequence: -1, attributes: ATTR_END_OF_APPEND }]);
    const parsed = StoredAppends.parse(Buffer.concat([gap, body.subarray(half)]), 0, gap.length + half, 3);
    expect(parsed).toBeInstanceOf(StoredAppends);
    for (const tailCacheBytes of [1 << 20, 0]) {
      const f = await openLog(`gap${tailCacheBytes}`, { tailCacheBytes });
      await f.appendReplica(parsed as StoredAppends);
      expect(f.logEndOffset).toBe(4);
      const got = await f.read(0, { maxRecords: 10, maxBytes: 1 << 20 });
      expect(got.map((r) => [r.offset, r.value.toString()])).toEqual([
        [0, 'x'],
        [2, 'ab'],
        [3, 'c'],
      ]);
    }
  });
});

describe('REPLICA_FETCH format=stored without blocks=true (a follower of the previous version)', () => {
  it('gets every block as per-record layout records: the follower log is byte for byte a per-record leader log', async () => {
    // Stamped timestamps (records with none take the append time) alike in both leaders.
    vi.spyOn(Date, 'now').mockReturnValue(1_700_000_000_000);
    let runs = 0;
    await fc.assert(
      fc.asyncProperty(
        fc.array(frameArb, { minLength: 1, maxLength: 6 }),
        // At least one blockable frame (plain, idempotent): the leader holds blocks.
        fc.tuple(frameArb.filter((x) => x.kind === 'plain' || x.kind === 'idem'), fc.array(frameArb, { maxLength: 7 })).map(([b, xs]) => [...xs, b]),
        fc.record({ maxRecords: fc.integer({ min: 1, max: 9 }), maxBytes: fc.integer({ min: 1, max: 3000 }) }),
        async (before, after, f) => {
          const sub = `o${runs++}`;
          // The blocks leader: per-record records first, then blocks, in segments that hold both.
          const seq = { next: 0 };
          const first = await openLog(sub, { segmentBytes: 900, storedLayout: 'records' });
          await appendFrames(first, before, seq);
          await first.close();
          const log = await openLog(sub, { segmentBytes: 900, storedLayout: 'blocks', tailCacheBytes: 0 });
          await appendFrames(log, after, seq);
          // A per-record leader given the same appends.
          const ref = await openLog(`r${sub}`, { segmentBytes: 1 << 20, storedLayout: 'records' });
          const refSeq = { next: 0 };
          await appendFrames(ref, before, refSeq);
          await appendFrames(ref, after, refSeq);
          expect(blocksIn(await segmentBytes(join(logs.dir, sub)))).toBeGreaterThan(0);
          const follower = await openLog(`f${sub}`, { segmentBytes: 1 << 20 });
          while (follower.logEndOffset < log.logEndOffset) {
            const opts = { maxRecords: f.maxRecords, maxBytes: f.maxBytes, headerCost: 0 };
            const got = await log.readStoredAppends(follower.logEndOffset, { ...opts, blocks: false });
            // What the per-record leader answers the same fetch: the same bytes, so the same max_bytes cut.
            const want = await ref.readStoredAppends(follower.logEndOffset, opts);
            expect([got.count, got.next, got.bytes]).toEqual([want.count, want.next, want.bytes]);
            expect(joined(got).equals(joined(want))).toBe(true);
            await follower.appendReplica(throughWire(got));
          }
          const stored = await segmentBytes(join(logs.dir, `f${sub}`));
          expect(blocksIn(stored)).toBe(0);
          expect(stored.equals(await segmentBytes(join(logs.dir, `r${sub}`)))).toBe(true);
          expect(await allRecords(follower)).toEqual(await allRecords(log));
          await follower.close();
          await ref.close();
          await log.close();
        },
      ),
      { numRuns: 25 },
    );
  }, 120_000);

  it('from inside a block: the rest of it as per-record records, the last one ending the append', async () => {
    const log = await openLog('leader', { storedLayout: 'blocks' });
    const records = Array.from({ length: 5 }, (_, i) => ({ key: null, value: Buffer.from(`v${i}`), timestamp: 100 + i, headers: [] }));
    await appendFrames(log, [{ kind: 'plain', records }], { next: 0 });
    const got = await log.readStoredAppends(2, { maxRecords: 1, maxBytes: 1, headerCost: 0, blocks: false });
    expect([got.count, got.next]).toEqual([3, 5]);
    const body = joined(got);
    expect(blocksIn(body)).toBe(0);
    const parsed = throughWire(got);
    const follower = await openLog('follower');
    // A follower that truncated inside the block: its first two records, the second ending the append.
    await follower.appendReplica((await allRecords(log)).slice(0, 2).map((r, i) => ({ ...r, attributes: i === 1 ? ATTR_END_OF_APPEND : 0 })));
    await follower.appendReplica(parsed);
    expect(await allRecords(follower, false)).toEqual(await allRecords(log, false));
    expect((await allRecords(follower)).map((r) => r.attributes)).toEqual([0, ATTR_END_OF_APPEND, 0, 0, ATTR_END_OF_APPEND]);
    // With blocks (this version's followers): the rest of the block as a block.
    expect(blocksIn(joined(await log.readStoredAppends(2, { maxRecords: 1, maxBytes: 1, headerCost: 0, blocks: true })))).toBe(1);
  });
});

describe('a follower of a blocks leader', () => {
  it('has the leader producer state, replayed from the blocks it stores', async () => {
    const leaderLog = await openLog('leader', { storedLayout: 'blocks' });
    const leader = new Partition('t', 0, leaderLog, {});
    await leader.whenProducerStateReady();
    const followerLog = await openLog('follower', { storedLayout: 'blocks' });
    const follower = new Partition('t', 0, followerLog, { replicated: true });
    await follower.whenProducerStateReady();
    await follower.whenTxnIndexReady();
    follower.enableReplication(() => {});
    let seq = 0;
    for (const n of [3, 2, 4]) {
      const records = Array.from({ length: n }, (_, i) => ({ key: null, value: Buffer.from(`i${i}`), timestamp: 0, headers: [], offset: 0, attributes: 0, producerId: 'I', epoch: 5, sequence: seq + i }));
      const body = encodeBatch({ topic: 't', partition: 0, acks: '1', idempotent: true, firstSequence: seq, lastSequence: seq + n - 1, records }, { extensions: true });
      await leader.appendIdempotent(scanBatch(body, { extensions: true, request: true }), { producerId: 'I', epoch: 5, firstSequence: seq, lastSequence: seq + n - 1 });
      seq += n;
      const read = await leaderLog.readStoredAppends(follower.logEndOffset, { maxRecords: 100, maxBytes: 1 << 20, headerCost: 0 });
      expect(blocksIn(joined(read))).toBe(1);
      await follower.appendReplica(throughWire(read));
    }
    expect(follower.producerState()!.describe('I')).toEqual(leader.producerState()!.describe('I'));
    expect(follower.producerState()!.describe('I')).toEqual({ epoch: 5, lastSeq: 8 });
    await follower.close();
    await leader.close();
  });
});

/**
 * REPLICA_FETCH from the stored bytes (storage/replica-read.ts, cluster/replica-wire.ts) and a follower
 * storing them as they are (storage/stored-appends.ts): the same records, boundaries and replies as the
 * object path (read with keepAppendMarker and wholeAppends, encodeBatch), a follower log holding the
 * leader's bytes exactly, and the same producer state and transactions on the follower.
 */
import { readFile, readdir } from 'node:fs/promises';
import { join } from 'node:path';
import fc from 'fast-check';
import { describe, expect, it, vi } from 'vitest';
import { decodeBatch, encodeBatch, logRecordsToBatch } from 'tributary-protocol/batch.js';
import type { LogRecord, RecordInput } from 'tributary-protocol/record.js';
import { type Isolation, Partition } from 'tributary-broker/partition/partition.js';
import { type LogOptions, PartitionLog } from 'tributary-broker/storage/partition-log.js';
import { ATTR_END_OF_APPEND, READ_HEADER_COST, encodeRecords, storedHeaderCount } from 'tributary-broker/storage/record-codec.js';
import type { StoredRead } from 'tributary-broker/storage/replica-read.js';
import { Segment } from 'tributary-broker/storage/segment.js';
import { StoredAppends } from 'tributary-broker/storage/stored-appends.js';
import { encodeBatchReply, encodeStoredReply } from 'tributary-broker/cluster/replica-wire.js';
import { rec, } from '../../helpers/util.js';
import { useTempLogs } from '../../helpers/temp-logs.js';

const logs = useTempLogs('trib-rstored-', { flush: 'os', indexIntervalBytes: 64 });
const openLog = (sub: string, opts?: Partial<LogOptions>): Promise<PartitionLog> => logs.open(sub, opts);

const bytes = (max: number) => fc.uint8Array({ maxLength: max }).map((a) => Buffer.from(a));
const recordArb: fc.Arbitrary<RecordInput> = fc.record({
  key: fc.oneof(
    fc.constant(null),
    fc.constantFrom('a', 'b', 'c', '').map((s) => Buffer.from(s)),
  ),
  value: fc.oneof(fc.constant(Buffer.alloc(0)), bytes(60)),
  // Null header values (a Kafka producer's) included: a follower's log holds them; the batch frame carries them empty.
  headers: fc.array(fc.oneof(fc.record({ key: fc.string({ maxLength: 4 }), value: bytes(6) }), fc.constant({ key: 'n', value: Buffer.alloc(0), nullValue: true as const })), {
    maxLength: 30,
  }),
  producerId: fc.constantFrom('', 'p1', 'prod-ü'),
  epoch: fc.oneof(fc.constant(-1), fc.nat(5)),
  sequence: fc.oneof(fc.constant(-1), fc.nat(1000)),
  timestamp: fc.oneof(fc.constant(0), fc.integer({ min: 1, max: 2 ** 45 })),
  attributes: fc.integer({ min: 0, max: 0x7f }),
});

const joined = (r: StoredRead) => Buffer.concat(r.runs.map((x) => x.buf.subarray(x.from, x.to)));

/** Every record with its append marker, from the log start. */
async function allRecords(log: PartitionLog): Promise<LogRecord[]> {
  const out: LogRecord[] = [];
  for (let next = log.logStartOffset; next < log.logEndOffset; ) {
    const got = await log.read(next, { maxRecords: 1000, maxBytes: 1 << 24, keepAppendMarker: true });
    if (got.length === 0) break;
    out.push(...got);
    next = got[got.length - 1]!.offset + 1;
  }
  return out;
}

/** What readStoredAppends takes from `all` (the rule of read() with wholeAppends, each header costing `headerCost`). */
function model(all: LogRecord[], offset: number, maxRecords: number, maxBytes: number, limit: number, headerCost: number): LogRecord[] {
  const out: LogRecord[] = [];
  let cost = 0;
  let inAppend = false;
  let kept = 0;
  for (const r of all) {
    if (r.offset < offset) continue;
    if (!inAppend && out.length >= maxRecords) break;
    const size = encodeRecords([r]).length;
    const c = size + r.headers.length * headerCost;
    if (r.offset >= limit || (out.length > 0 && cost + c > maxBytes && !inAppend)) break;
    out.push(r);
    cost += c;
    inAppend = (r.attributes & ATTR_END_OF_APPEND) === 0;
    if (!inAppend) kept = out.length;
  }
  return out.slice(0, kept);
}

describe('readStoredAppends', () => {
  it('reads the bytes of the records read() with wholeAppends returns; the batch reply is encodeBatch of them', async () => {
    let runs = 0;
    await fc.assert(
      fc.asyncProperty(
        fc.array(fc.array(recordArb, { minLength: 1, maxLength: 6 }), { minLength: 1, maxLength: 14 }),
        fc.boolean(),
        fc.record({
          maxRecords: fc.integer({ min: 1, max: 9 }),
          maxBytes: fc.integer({ min: 1, max: 4000 }),
          cut: fc.nat(3),
          followerSegmentBytes: fc.constantFrom(300, 1 << 20),
        }),
        async (batches, compact, f) => {
          const log = await openLog(`l${runs++}`, { segmentBytes: 700, tailCacheBytes: 0 });
          for (const b of batches) await log.append(b);
          log.setHighWatermark(log.logEndOffset);
          if (compact) await log.compact({ now: 2 ** 44, tombstoneRetentionMs: 2 ** 40 });
          const all = await allRecords(log);
          const limit = log.logEndOffset - f.cut;
          for (let o = log.logStartOffset; o <= log.logEndOffset; o++) {
            const opts = { maxRecords: f.maxRecords, maxBytes: f.maxBytes, maxOffset: limit };
            const objects = await log.read(o, { ...opts, keepAppendMarker: true, wholeAppends: true });
            const charged = await log.readStoredAppends(o, { ...opts, headerCost: READ_HEADER_COST });
            expect(joined(charged).equals(encodeRecords(objects)), `from ${o}`).toBe(true);
            expect([charged.count, charged.next]).toEqual([objects.length, objects.length > 0 ? objects[objects.length - 1]!.offset + 1 : o]);
            const trailer = { nextOffset: charged.count > 0 ? charged.next : o, highWatermark: 7, logStartOffset: log.logStartOffset };
            const old = encodeBatch(logRecordsToBatch('tø', 3, objects, trailer), { extensions: true });
            expect(encodeBatchReply('tø', 3, charged, trailer).equals(old)).toBe(true);
            // Headers not charged (a reply stored as bytes): the same rule on bytes alone.
            const free = await log.readStoredAppends(o, { ...opts, headerCost: 0 });
            expect(joined(free).equals(encodeRecords(model(all, o, f.maxRecords, f.maxBytes, limit, 0)))).toBe(true);
          }
          // A follower fetching from its log end as bytes ends up with every record as the leader has it.
          const follower = await openLog(`f${runs}`, { segmentBytes: f.followerSegmentBytes });
          while (follower.logEndOffset < log.logEndOffset) {
            const got = await log.readStoredAppends(Math.max(follower.logEndOffset, log.logStartOffset), {
              maxRecords: f.maxRecords,
              maxBytes: f.maxBytes,
              headerCost: 0,
            });
            const parsed = StoredAppends.parse(joined(got), 0, got.bytes, got.count);
            expect(parsed).toBeInstanceOf(StoredAppends);
            await follower.appendReplica(parsed as StoredAppends);
          }
          expect(await allRecords(follower)).toEqual(all);
          await follower.close();
          await log.close();
        },
      ),
      { numRuns: 30 },
    );
  }, 120_000);

  it('a first append of 2,000 records of 300 headers is read whole, without a header charge, as one reply', async () => {
    const log = await openLog('big', { tailCacheBytes: 0 });
    const headers = Array.from({ length: 300 }, () => ({ key: '', value: Buffer.alloc(0) }));
    await log.append(Array.from({ length: 2000 }, (_, i) => rec(`v${i}`, { headers })));
    await log.append([rec('after')]);
    const got = await log.readStoredAppends(0, { maxRecords: 1, maxBytes: 1, headerCost: 0 });
    expect([got.count, got.next]).toEqual([2000, 2000]);
    const parsed = StoredAppends.parse(joined(got), 0, got.bytes, got.count);
    expect(parsed).toBeInstanceOf(StoredAppends);
    expect(storedHeaderCount((parsed as StoredAppends).buf, 0)).toBe(300);
  });

  it('a key over 65,535 bytes (a Kafka producer may send one) goes as bytes; the batch frame cannot carry it', async () => {
    const log = await openLog('longkey');
    await log.append([rec('v', { key: Buffer.alloc(70_000, 7) })]);
    const got = await log.readStoredAppends(0, { maxRecords: 10, maxBytes: 1 << 20, headerCost: 0 });
    expect(() => encodeBatchReply('t', 0, got, { nextOffset: 1, highWatermark: 0, logStartOffset: 0 })).toThrow(/key longer than 65535 bytes/);
    const follower = await openLog('longkey-f');
    await follower.appendReplica(StoredAppends.parse(joined(got), 0, got.bytes, got.count) as StoredAppends);
    expect(await allRecords(follower)).toEqual(await allRecords(log));
  });

  it('racing a compaction swap, starts the append it was reading over in the new file: whole appends, no gap inside one', async () => {
    const T0 = 1_700_000_000_000;
    const r = (key: string, value: string) => ({ key: Buffer.from(key), value: Buffer.from(value), timestamp: T0 });
    const leader = await openLog('leader', { tailCacheBytes: 0, segmentBytes: 600 });
    await leader.append([r('a', '1'), r('b', '1'), r('c', '1')]);
    await leader.append([r('d', '1')]);
    for (let i = 0; i < 40; i++) await leader.append([r(`x${i % 4}`, `v${i}-${'p'.repeat(20)}`)]);
    await leader.append([r('c', '2')]);
    for (let i = 0; i < 20; i++) await leader.append([r(`y${i % 4}`, `v${i}-${'p'.repeat(20)}`)]);
    leader.setHighWatermark(leader.logEndOffset);
    const sizes: number[] = [];
    await (leader as unknown as { st: { segments: Segment[] } }).st.segments[0]!.scan(0, 1 << 20, (x) => {
      sizes.push(x.size);
      return sizes.length < 3;
    });
    const read = Segment.prototype.read;
    let entered!: () => void;
    const inRead = new Promise<void>((res) => (entered = res));
    let release!: () => void;
    const gate = new Promise<void>((res) => (release = res));
    let step = 0;
    // The first chunk ends after two records of the 3-record append; the next read waits while compaction swaps the segment.
    vi.spyOn(Segment.prototype, 'read').mockImplementation(async function (this: Segment, pos: number, len: number) {
      step++;
      if (step === 1) return read.call(this, pos, Math.min(len, sizes[0]! + sizes[1]!));
      if (step === 2) {
        entered();
        await gate;
      }
      return read.call(this, pos, len);
    });
    const fetching = leader.readStoredAppends(0, { maxRecords: 1, maxBytes: 1 << 20, headerCost: 0 });
    await inRead;
    vi.restoreAllMocks();
    expect((await leader.compact({ now: T0 })).segmentsCompacted).toBeGreaterThan(0);
    release();
    const got = await fetching;
    const parsed = StoredAppends.parse(joined(got), 0, got.bytes, got.count);
    expect(parsed).toBeInstanceOf(StoredAppends);
    expect((parsed as StoredAppends).offsets).not.toContain(2);
    const follower = await openLog('follower');
    await follower.appendReplica(parsed as StoredAppends);
    while (follower.logEndOffset < leader.logEndOffset) {
      const next = await leader.readStoredAppends(follower.logEndOffset, { maxRecords: 5, maxBytes: 1 << 20, headerCost: 0 });
      await follower.appendReplica(StoredAppends.parse(joined(next), 0, next.bytes, next.count) as StoredAppends);
    }
    expect(await allRecords(follower)).toEqual(await allRecords(leader));
  });
});

/** A stored record (the layout of record-codec.ts) with its fields as given. */
function stored(offset: number, end: boolean, over: Partial<LogRecord> = {}): Buffer {
  return encodeRecords([
    {
      offset,
      timestamp: 5,
      key: null,
      value: Buffer.from('v'),
      headers: [],
      producerId: '',
      epoch: -1,
      sequence: -1,
      attributes: end ? ATTR_END_OF_APPEND : 0,
      ...over,
    },
  ]);
}

describe('StoredAppends.parse', () => {
  it('in turns of the event loop, gives what parse gives', async () => {
    const n = 40_000;
    const buf = encodeRecords(
      Array.from({ length: n }, (_, i) => ({
        offset: i,
        timestamp: i,
        key: null,
        value: Buffer.alloc(0),
        headers: [],
        producerId: '',
        epoch: -1,
        sequence: -1,
        attributes: i % 3 === 2 ? ATTR_END_OF_APPEND : 0,
      })),
    );
    let turns = 0;
    const counting = setInterval(() => turns++, 0);
    const inTurns = await StoredAppends.parseInTurns(buf, 0, buf.length, n - 1);
    clearInterval(counting);
    expect(inTurns).toEqual(StoredAppends.parse(buf, 0, buf.length, n - 1));
    expect(inTurns).toMatch(/more records than the 39999 announced/);
    const end = buf.length - buf.length / n; // without the last record: the one before it ends an append
    const whole = (await StoredAppends.parseInTurns(buf, 0, end, n - 1)) as StoredAppends;
    expect(whole).toBeInstanceOf(StoredAppends);
    expect([whole.count, whole.starts.at(-1), whole.maxTimestamp]).toEqual([n - 1, end, n - 2]);
    expect(whole).toEqual(StoredAppends.parse(buf, 0, end, n - 1));
    expect(turns).toBeGreaterThan(0);
  });

  it('takes whole appends and refuses what appendReplica refuses as objects, and broken bytes', () => {
    const ok = Buffer.concat([stored(4, false), stored(5, true), stored(9, true)]);
    const s = StoredAppends.parse(ok, 0, ok.length, 3) as StoredAppends;
    expect([s.count, s.offsets, s.starts[3]]).toEqual([3, [4, 5, 9], ok.length]);
    const refused = (b: Buffer, count: number) => StoredAppends.parse(b, 0, b.length, count);
    expect(refused(ok, 2)).toMatch(/more records than the 2 announced/);
    expect(refused(ok, 4)).toMatch(/3 records, 4 announced/);
    expect(refused(ok.subarray(0, ok.length - 1), 3)).toMatch(/record 2: truncated/);
    const flipped = Buffer.from(ok);
    flipped[ok.length - 3]! ^= 1;
    expect(refused(flipped, 3)).toMatch(/record 2: corrupt/);
    expect(refused(Buffer.concat([stored(4, false), stored(6, true)]), 2)).toMatch(/offset gap \(4 to 6\) inside an append/);
    expect(refused(Buffer.concat([stored(4, true), stored(4, true)]), 2)).toMatch(/strictly increasing/);
    expect(refused(Buffer.concat([stored(4, true), stored(5, false)]), 2)).toMatch(/does not end an append/);
    expect(refused(stored(4, true, { epoch: -2 }), 1)).toMatch(/epoch and sequence must be >= -1/);
    expect(refused(stored(4, true, { sequence: -5 }), 1)).toMatch(/epoch and sequence must be >= -1/);
  });
});

async function openPartition(sub: string, replicated: boolean): Promise<Partition> {
  const log = await PartitionLog.open(join(logs.dir, sub), { flush: 'os' });
  const p = new Partition('t', 0, log, { replicated });
  logs.track(p);
  await p.whenTxnIndexReady();
  await p.whenProducerStateReady();
  if (replicated) p.enableReplication(() => {});
  return p;
}

async function segmentBytes(sub: string): Promise<Buffer> {
  const files = (await readdir(join(logs.dir, sub))).filter((f) => f.endsWith('.log')).sort();
  return Buffer.concat(await Promise.all(files.map((f) => readFile(join(logs.dir, sub, f)))));
}

describe('a follower storing its leader appends as bytes', () => {
  it('holds the leader log byte for byte, with the producer state and transactions of the object path', async () => {
    const leader = await openPartition('leader', false);
    const fromBytes = await openPartition('bytes', true);
    const fromObjects = await openPartition('objects', true); // as a follower of an older version
    const h = [{ key: 'k', value: Buffer.from('v') }];
    const steps: Array<() => Promise<unknown>> = [
      () => leader.append([rec('plain', { key: Buffer.alloc(0), headers: h }), rec('two')]),
      () => leader.appendTransactional([rec('t1'), rec('t2')], { producerId: 'P', epoch: 3, firstSequence: 0, lastSequence: 1 }),
      () => leader.appendTransactional([rec('u1')], { producerId: 'Q', epoch: 1 }),
      () =>
        leader.appendIdempotent([rec('i0', { producerId: 'I', epoch: 0, sequence: 0 }), rec('i1', { producerId: 'I', epoch: 0, sequence: 1 })], {
          producerId: 'I',
          epoch: 0,
          firstSequence: 0,
          lastSequence: 1,
        }),
      () => leader.writeMarker('P', 3, 'abort'),
      () => leader.appendTransactional([rec('t3')], { producerId: 'P', epoch: 4, firstSequence: 0, lastSequence: 0 }),
      () => leader.writeMarker('Q', 1, 'commit'),
    ];
    for (const step of steps) {
      await step();
      const from = fromBytes.logEndOffset;
      const read = await leader.log.readStoredAppends(from, { maxRecords: 10_000, maxBytes: 1 << 24, maxOffset: leader.logEndOffset, headerCost: 0 });
      // Through the wire format: the reply's header, then the records.
      const reply = encodeStoredReply(read, { nextOffset: read.next, highWatermark: 0, logStartOffset: 0 });
      const parsed = StoredAppends.parse(reply, 30, reply.length, reply.readUInt32BE(26));
      expect(parsed).toBeInstanceOf(StoredAppends);
      await fromBytes.appendReplica(parsed as StoredAppends);
      // A follower of an older version: the batch frame, decoded.
      const charged = await leader.log.readStoredAppends(from, {
        maxRecords: 10_000,
        maxBytes: 1 << 24,
        maxOffset: leader.logEndOffset,
        headerCost: READ_HEADER_COST,
      });
      const frame = encodeBatchReply('t', 0, charged, { nextOffset: charged.next, highWatermark: 0, logStartOffset: 0 });
      await fromObjects.appendReplica(decodeBatch(frame, { extensions: true }).records as unknown as LogRecord[]);
    }
    const end = leader.logEndOffset;
    for (const p of [fromBytes, fromObjects]) p.setReplicatedHighWatermark(end);
    expect(fromBytes.logEndOffset).toBe(end);
    expect((await segmentBytes('bytes')).equals(await segmentBytes('leader'))).toBe(true);
    const state = (p: Partition) => ({
      lso: p.lastStableOffset,
      open: p
        .txnIndex()!
        .openTxns()
        .map((t) => [t.producerId, t.epoch, t.firstOffset]),
      aborted: p.txnIndex()!.abortedOverlapping(0, end),
      producers: ['P', 'Q', 'I'].map((id) => p.producerState()!.describe(id)),
    });
    expect(state(fromBytes)).toEqual(state(leader));
    // Through the batch frame, a sequence of -1 arrives as 0 and an empty key as null: the follower's log
    // differs from the leader's there, and so does its state of a producer whose records have no sequence.
    expect(state(fromObjects).open).toEqual(state(leader).open);
    expect(state(fromObjects).aborted).toEqual(state(leader).aborted);
    expect(state(fromObjects).producers[1]).toEqual({ epoch: 1, lastSeq: 0 });
    expect(state(leader).producers[1]).toEqual({ epoch: 1, lastSeq: -1 });
    expect((await segmentBytes('objects')).equals(await segmentBytes('leader'))).toBe(false);
    const rc = { maxRecords: 100, maxBytes: 1 << 20, isolation: 'read_committed' as Isolation };
    expect((await fromBytes.read(0, rc)).records).toEqual((await leader.read(0, rc)).records);
    expect((await fromBytes.read(0, rc)).records.map((r) => r.value.toString())).toEqual(['plain', 'two', 'u1', 'i0', 'i1']);
    expect((await fromBytes.read(0, rc)).records[0]!.key).toEqual(Buffer.alloc(0));
  });
});

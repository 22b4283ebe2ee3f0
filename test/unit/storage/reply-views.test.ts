/**
 * CONSUME replies whose block records go out as views of the tail cache's memory (TailCache.readWire with
 * `views`, docs/architecture.md "Broker", reply buffers): the pieces put together are, byte for byte, the
 * reply built by copying (the path without views), for every read; a view handed out keeps its bytes
 * whatever the log does afterwards; the reply's own (pooled) buffer holds only what is not a view.
 * How the connection writes the pieces and gives the buffer back: test/unit/broker/reply-body.test.ts.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { encodeBatch, logRecordsToBatch, scanBatch } from 'tributary-protocol/batch.js';
import { BLOCK_CONTROL, BLOCK_HEADER_BYTES, BLOCK_TRANSACTIONAL, blockSize, recordEnd, writeBlockFromWire } from 'tributary-broker/storage/append-block.js';
import { replyWriter } from 'tributary-broker/storage/reply-writer.js';
import { MIN_VIEW_BYTES, TailCache, type WireReadRequest, wireParts } from 'tributary-broker/storage/tail-cache.js';
import { WriteArena } from 'tributary-broker/storage/write-arena.js';
import { ReplyBuffers } from 'tributary-broker/broker/reply-buffers.js';
import type { PartitionLog } from 'tributary-broker/storage/partition-log.js';
import { encodedWrite } from '../../helpers/tail-cache.js';
import { useTempLogs } from '../../helpers/temp-logs.js';

const END = { nextOffset: 0, highWatermark: 77, logStartOffset: 3 };

type Kind = 'plain' | 'idem' | 'txn' | 'control';

/** A produce frame's records of values `sizes` (key and a header on every other one), scanned as appendWire takes it. */
function frame(sizes: number[], idem: boolean, ext = true) {
  const records = sizes.map((size, i) => ({
    key: i % 2 === 0 ? Buffer.from(`k${i}`) : null,
    value: Buffer.alloc(size, 0x41 + (i % 26)),
    timestamp: i % 3 === 0 ? 0 : 1_700_000_000_000 + i,
    headers: i % 2 === 1 ? [{ key: 'h', value: Buffer.from([i & 0xff]) }] : [],
    offset: 0,
    attributes: 0,
    producerId: idem ? 'P' : '',
    epoch: idem ? 4 : 0,
    sequence: idem ? i : 0,
  }));
  const body = encodeBatch({ topic: 't', partition: 0, acks: '1', idempotent: idem, firstSequence: 0, lastSequence: idem ? sizes.length - 1 : 0, records }, { extensions: ext });
  return scanBatch(body, { extensions: ext, request: true });
}

/** Caches one append block of `kind` at `base` as the log writer does (a chunk of its wire records), in memory from `arena`. */
function cacheBlock(cache: TailCache, arena: WriteArena, base: number, kind: Kind, sizes: number[]): number {
  const batch = frame(sizes, kind !== 'plain');
  const flags = kind === 'txn' ? BLOCK_TRANSACTIONAL : kind === 'control' ? BLOCK_TRANSACTIONAL | BLOCK_CONTROL : 0;
  const buf = arena.take(blockSize(batch));
  const end = writeBlockFromWire(batch, buf, 0, { baseOffset: base, now: 1_700_000_000_000, flags, firstSequence: 0 });
  const starts: number[] = [];
  for (let p = BLOCK_HEADER_BYTES, j = 0; j < sizes.length; j++, p = recordEnd(buf, p)) starts.push(p);
  starts.push(end);
  cache.append(buf, base, starts, buf[9]);
  return base + sizes.length;
}

/** The reply TailCache.readWire writes, completed, as its pieces (with `views`) or as one buffer. */
function reply(cache: TailCache, offset: number, limit: number, maxRecords: number, maxBytes: number, w: WireReadRequest) {
  const writer = replyWriter(w.format, w.topic, w.partition, w.extensions)!;
  const r = cache.readWire(offset, limit, maxRecords, maxBytes, w, writer);
  if (!r) return null;
  const at = writer.finish(r.buf, r.at, r.count, { ...END, nextOffset: r.nextOffset });
  return { parts: wireParts(r, at), buf: r.buf, count: r.count, valueBytes: r.valueBytes, nextOffset: r.nextOffset };
}

describe('CONSUME replies with views of the tail cache', () => {
  it('put together, the pieces are the copied reply: reads inside blocks, across chunks, mixed layouts, cut by limits, read_committed', () => {
    const cache = new TailCache(1 << 24);
    const arena = new WriteArena();
    // Per-record chunks, plain and idempotent blocks (large runs go out as views, small ones are copied),
    // transactional and control blocks (record by record, as a read may leave some out).
    let o = 0;
    const perRecord = (sizes: number[]) => {
      const w = encodedWrite(o, sizes);
      cache.append(w.buf, o, w.starts);
      o += sizes.length;
    };
    perRecord([100, 3000, 50]);
    o = cacheBlock(cache, arena, o, 'plain', [1500, 200, 2500, 10, 900]);
    o = cacheBlock(cache, arena, o, 'txn', [1200, 1200, 1200]);
    o = cacheBlock(cache, arena, o, 'plain', [20, 30]);
    o = cacheBlock(cache, arena, o, 'control', [0]);
    o = cacheBlock(cache, arena, o, 'idem', [800, 800, 800, 800]);
    o = cacheBlock(cache, arena, o, 'plain', [3000, 3000, 3000]);
    o = cacheBlock(cache, arena, o, 'txn', [2500, 2500]);
    perRecord([2000, 2000]);
    o = cacheBlock(cache, arena, o, 'plain', [1000, 1000, 1000, 1000, 1000, 1000]);
    o = cacheBlock(cache, arena, o, 'plain', [5000]);
    const end = o;
    const pool = new ReplyBuffers();
    let viewed = 0;
    let compared = 0;
    let leftOut = 0;
    for (let offset = 0; offset < end; offset++) {
      for (const limit of [end, end - 3])
        for (const maxRecords of [1, 2, 3, 7, 1000])
          for (const maxBytes of [1, 2500, 6000, 1 << 20])
            for (const ext of [true, false])
              for (const committed of [false, true]) {
                if (offset >= limit) continue;
                const w: WireReadRequest = {
                  topic: 'topic',
                  partition: 2,
                  extensions: ext,
                  skipControl: committed,
                  // Under read_committed the transaction of the first transactional block was aborted.
                  skipAborted: committed ? (off, pid) => pid === 'P' && off >= 8 && off < 11 : null,
                };
                const copied = reply(cache, offset, limit, maxRecords, maxBytes, w)!;
                const inPieces = reply(cache, offset, limit, maxRecords, maxBytes, { ...w, views: true, alloc: pool.take })!;
                expect(copied.parts.length).toBe(1);
                expect(Buffer.concat(inPieces.parts).equals(copied.parts[0]!)).toBe(true);
                expect([inPieces.count, inPieces.valueBytes, inPieces.nextOffset]).toEqual([copied.count, copied.valueBytes, copied.nextOffset]);
                if (copied.nextOffset - offset > copied.count) leftOut++;
                compared++;
                // A piece is the reply's own (pooled) buffer or a view of cached memory, which the pool never owns.
                for (const p of inPieces.parts) {
                  expect(p.length).toBeGreaterThan(0);
                  expect(pool.owns(p)).toBe(p.buffer === inPieces.buf.buffer);
                  if (p.buffer !== inPieces.buf.buffer) {
                    viewed++;
                    expect(p.length).toBeGreaterThanOrEqual(MIN_VIEW_BYTES);
                  }
                }
                // Without extensions a record goes out cut after its value: never a view.
                if (!ext) expect(inPieces.parts.length).toBe(1);
                pool.give(inPieces.buf);
              }
    }
    expect(compared).toBeGreaterThan(4000);
    expect(viewed).toBeGreaterThan(1000);
    expect(leftOut).toBeGreaterThan(100);
  });

  it('the reply buffer holds only what is not a view', () => {
    const cache = new TailCache(1 << 24);
    cacheBlock(cache, new WriteArena(), 0, 'plain', [4000, 4000, 4000]);
    const w: WireReadRequest = { topic: 't', partition: 0, extensions: true, skipControl: false };
    const copied = reply(cache, 0, 3, 1000, 1 << 20, w)!;
    const taken: number[] = [];
    const inPieces = reply(cache, 1, 3, 1000, 1 << 20, {
      ...w,
      views: true,
      alloc: (n) => {
        taken.push(n);
        return Buffer.alloc(n);
      },
    })!;
    expect(copied.buf.length).toBeGreaterThan(12_000);
    // Header, one view of the two records, trailer: the buffer is the header and trailer's size.
    expect(inPieces.parts.length).toBe(3);
    expect(taken).toHaveLength(1);
    expect(taken[0]).toBeLessThan(200);
  });
});

const logs = useTempLogs('trib-views-', { flush: 'os', storedLayout: 'blocks' });

/** Appends produce frames of `sizes` through the wire path (stored as blocks); `idem` frames numbered from `seq`. */
async function appendFrames(log: PartitionLog, frames: Array<{ sizes: number[]; idem: boolean }>): Promise<void> {
  let seq = 0;
  for (const f of frames) {
    const batch = frame(f.sizes, f.idem);
    if (f.idem) {
      // Renumbered: each idempotent frame follows the last.
      const records = f.sizes.map((size, i) => ({ key: null, value: Buffer.alloc(size, 0x61 + i), timestamp: 5, headers: [], offset: 0, attributes: 0, producerId: 'P', epoch: 1, sequence: seq + i }));
      const body = encodeBatch({ topic: 't', partition: 0, acks: '1', idempotent: true, firstSequence: seq, lastSequence: seq + records.length - 1, records }, { extensions: true });
      await log.appendWire(scanBatch(body, { extensions: true, request: true }), undefined, seq);
      seq += records.length;
    } else await log.appendWire(batch);
  }
}

describe('PartitionLog.readWire with views', () => {
  it('gives the bytes of the copied reply and of read(), and a view keeps its bytes through truncation, appends, eviction and close', async () => {
    let views = 0;
    await fc.assert(
      fc.asyncProperty(
        fc.array(fc.record({ sizes: fc.array(fc.integer({ min: 0, max: 4000 }), { minLength: 1, maxLength: 6 }), idem: fc.boolean() }), { minLength: 1, maxLength: 6 }),
        fc.constantFrom(20_000, 1 << 20),
        fc.nat(),
        async (frames, tailCacheBytes, cutAt) => {
          const log = await logs.open(`l${Math.random().toString(36).slice(2)}`, { tailCacheBytes });
          await appendFrames(log, frames);
          await log.append([{ key: null, value: Buffer.alloc(3000, 1) }]);
          await appendFrames(log, frames.slice(0, 2));
          log.setHighWatermark(log.logEndOffset);
          const held: Array<{ parts: Buffer[]; bytes: Buffer }> = [];
          for (let offset = 0; offset < log.logEndOffset; offset++) {
            for (const [maxRecords, maxBytes] of [
              [1000, 1 << 20],
              [2, 1 << 20],
              [1000, 5000],
              [1, 1],
            ] as const) {
              const opts = { maxRecords, maxBytes };
              const w = { topic: 't', partition: 0, extensions: true, skipControl: false };
              const copied = log.readWire(offset, opts, w);
              const inPieces = log.readWire(offset, opts, { ...w, views: true });
              if (copied === null) {
                expect(inPieces).toBeNull();
                continue;
              }
              expect(copied.parts).toBeUndefined();
              const bytes = inPieces!.parts ? Buffer.concat(inPieces!.parts) : inPieces!.frame;
              expect(bytes.equals(copied.frame)).toBe(true);
              const res = await log.read(offset, opts);
              const trailer = { nextOffset: res[res.length - 1]!.offset + 1, highWatermark: log.highWatermark, logStartOffset: log.logStartOffset };
              expect(bytes.equals(encodeBatch(logRecordsToBatch('t', 0, res, trailer), { extensions: true }))).toBe(true);
              if (inPieces!.parts) {
                expect(inPieces!.frame).toBe(inPieces!.parts[0]);
                held.push({ parts: inPieces!.parts, bytes });
                views++;
              }
            }
          }
          // What may change the cache after the reads: a truncation (inside a block too), appends in its place
          // (which join or follow the truncated chunks), eviction by a small cache, and close.
          await log.truncateTo(cutAt % (log.logEndOffset + 1));
          await appendFrames(log, frames);
          await log.append([{ key: null, value: Buffer.alloc(100, 2) }]);
          await log.close();
          for (const h of held) expect(Buffer.concat(h.parts).equals(h.bytes)).toBe(true);
        },
      ),
      { numRuns: 25 },
    );
    expect(views).toBeGreaterThan(100);
  }, 60_000);
});

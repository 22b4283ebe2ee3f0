import fc from 'fast-check';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { Partition } from 'tributary-broker/partition/partition.js';
import { decodeBatch, encodeBatch, logRecordsToBatch } from 'tributary-protocol/batch.js';
import { type RecordInput, RecordAttr } from 'tributary-protocol/record.js';
import { asRecordBatch } from 'tributary-broker/kafka/apis/fetch.js';
import { PartitionLog } from 'tributary-broker/storage/partition-log.js';
import { removeDir, tempDir } from '../../helpers/util.js';

let dir: string;
beforeEach(async () => {
  dir = await tempDir('trib-wire-');
});
afterEach(async () => {
  await removeDir(dir);
});

const bytes = (max: number) => fc.uint8Array({ maxLength: max }).map((a) => Buffer.from(a));
const str = fc.oneof(fc.constant(''), fc.string({ maxLength: 12 }), fc.string({ unit: 'grapheme', maxLength: 6 }), fc.string({ unit: 'binary', maxLength: 4 }));

const recordArb: fc.Arbitrary<RecordInput> = fc.record({
  key: fc.oneof(fc.constant(null), bytes(40)),
  value: fc.oneof(bytes(8), bytes(120)),
  // A Kafka producer's null header value (stored apart from an empty one): empty on the main port, null through Fetch.
  headers: fc.array(fc.oneof(fc.record({ key: str, value: bytes(40) }), str.map((key) => ({ key, value: Buffer.alloc(0), nullValue: true as const }))), { maxLength: 3 }),
  producerId: str,
  epoch: fc.oneof(fc.constant(-1), fc.integer({ min: 0, max: 2 ** 31 }), fc.constant(Number.MAX_SAFE_INTEGER)),
  sequence: fc.oneof(fc.constant(-1), fc.integer({ min: 0, max: 2 ** 31 }), fc.constant(2 ** 40 + 7)),
  timestamp: fc.oneof(fc.constant(0), fc.integer({ min: 1, max: 2 ** 31 }), fc.constant(2 ** 45 + 3)),
  // Includes the CONTROL bit and the storage-internal bit (which the log masks off).
  attributes: fc.oneof(fc.constant(0), fc.constant(RecordAttr.CONTROL), fc.constant(RecordAttr.NULL_VALUE), fc.integer({ min: 0, max: 255 })),
  // A null value (NULL_VALUE) is stored empty: Fetch answers it as null on both paths.
}).map((r) => ((r.attributes & RecordAttr.NULL_VALUE) !== 0 ? { ...r, value: Buffer.alloc(0) } : r));

const V2 = { topic: '', extensions: true, format: 'record_batch_v2' } as const;

const queryArb = fc.record({
  at: fc.nat(),
  maxRecords: fc.integer({ min: 1, max: 40 }),
  maxBytes: fc.integer({ min: 1, max: 4000 }),
  ext: fc.boolean(),
  committed: fc.boolean(),
});

describe('PartitionLog.readWire', () => {
  it('writes the same bytes as read() + encodeBatch(logRecordsToBatch(...))', async () => {
    let served = 0;
    let fromDisk = 0;
    let controlSkipped = 0;
    let v2Compared = 0;
    await fc.assert(
      fc.asyncProperty(
        fc.array(fc.array(recordArb, { minLength: 1, maxLength: 8 }), { minLength: 1, maxLength: 6 }),
        fc.array(queryArb, { minLength: 1, maxLength: 10 }),
        fc.constantFrom(512, 4096, 1 << 20),
        fc.oneof(
          fc.constant('t'),
          str.filter((s) => s.length > 0),
        ),
        fc.nat({ max: 3 }),
        async (appends, queries, tailCacheBytes, topic, hwmBack) => {
          const d = await tempDir('p-', dir);
          const log = await PartitionLog.open(d, { flush: 'os', tailCacheBytes });
          try {
            for (const a of appends) await log.append(a);
            const part = new Partition(topic, 3, log);
            // The index rebuild may lower the last stable offset (records flagged transactional, no snapshot):
            // wait for it, so every read of a query sees the same one.
            await part.whenTxnIndexReady();
            // A high watermark below the LEO bounds reads below the end too.
            log.setHighWatermark(Math.max(0, log.logEndOffset - hwmBack));
            for (const q of queries) {
              const offset = q.at % (log.logEndOffset + 1);
              const opts = {
                maxRecords: q.maxRecords,
                maxBytes: q.maxBytes,
                isolation: q.committed ? ('read_committed' as const) : ('read_uncommitted' as const),
              };
              const wire = part.readWire(offset, opts, { topic, extensions: q.ext });
              const res = await part.read(offset, opts);
              const trailerOf = () => (q.ext ? { nextOffset: res.nextOffset, highWatermark: part.highWatermark, logStartOffset: part.earliest } : undefined);
              // The segment files' wire path writes the same bytes; it declines only when nothing is readable.
              const disk = await part.readWireFromDisk(offset, opts, { topic, extensions: q.ext });
              if (disk) {
                fromDisk++;
                expect(Buffer.compare(disk.frame, encodeBatch(logRecordsToBatch(topic, part.id, res.records, trailerOf()), { extensions: q.ext }))).toBe(0);
                expect([disk.nextOffset, disk.count]).toEqual([res.nextOffset, res.records.length]);
                expect(disk.valueBytes).toBe(res.records.reduce((s, r) => s + r.value.length, 0));
              } else expect(res.nextOffset).toBe(offset);
              // One RecordBatch v2 (the Kafka listener's Fetch): the bytes asRecordBatch encodes from read()'s
              // records, markers left out at both isolations; a read of markers only is left to that path.
              const kafkaRes = q.committed ? res : await part.read(offset, opts);
              const expectedV2 = asRecordBatch(kafkaRes.records, kafkaRes.nextOffset, offset);
              const dataCount = kafkaRes.records.filter((r) => (r.attributes & RecordAttr.CONTROL) === 0).length;
              for (const v2 of [part.readWire(offset, opts, V2), await part.readWireFromDisk(offset, opts, V2)]) {
                if (!v2) continue;
                if (v2.count === 0) {
                  expect(dataCount).toBe(0);
                  continue;
                }
                v2Compared++;
                expect(Buffer.compare(v2.frame, expectedV2)).toBe(0);
                expect([v2.count, v2.nextOffset]).toEqual([dataCount, kafkaRes.nextOffset]);
              }
              if (!wire) {
                // Null only when the tail cache cannot serve the read, or it is empty.
                continue;
              }
              served++;
              if (q.committed && wire.nextOffset - offset > wire.count) controlSkipped++;
              const trailer = q.ext ? { nextOffset: res.nextOffset, highWatermark: part.highWatermark, logStartOffset: part.earliest } : undefined;
              const expected = encodeBatch(logRecordsToBatch(topic, part.id, res.records, trailer), { extensions: q.ext });
              expect(Buffer.compare(wire.frame, expected)).toBe(0);
              expect(wire.nextOffset).toBe(res.nextOffset);
              expect(wire.count).toBe(res.records.length);
              expect(wire.valueBytes).toBe(res.records.reduce((s, r) => s + r.value.length, 0));
              if (q.committed) for (const r of decodeBatch(wire.frame, { extensions: q.ext }).records) expect(r.attributes & RecordAttr.CONTROL).toBe(0);
            }
            // With the big cache every non-empty read is served from it.
            if (tailCacheBytes === 1 << 20) {
              const end = log.highWatermark;
              if (end > 0)
                expect(part.readWire(0, { maxRecords: 1000, maxBytes: 1 << 20, isolation: 'read_uncommitted' }, { topic, extensions: true })).not.toBeNull();
            }
          } finally {
            await log.close();
          }
        },
      ),
      { numRuns: 60 },
    );
    // The property must have compared real frames, some of them with control records left out.
    expect(served).toBeGreaterThan(50);
    expect(fromDisk).toBeGreaterThan(served);
    expect(controlSkipped).toBeGreaterThan(0);
    expect(v2Compared).toBeGreaterThan(100);
  }, 60_000);

  it('falls back (null) below the tail cache and past the high watermark', async () => {
    const log = await PartitionLog.open(dir, { flush: 'os', tailCacheBytes: 300 });
    try {
      for (let i = 0; i < 20; i++) await log.append([{ key: null, value: Buffer.alloc(50, i) }]);
      const part = new Partition('t', 0, log);
      // Records without a txn.snapshot: read_committed waits for the index rebuilt from the whole log.
      await part.whenTxnIndexReady();
      const opts = { maxRecords: 10, maxBytes: 1 << 20, isolation: 'read_committed' as const };
      expect(part.readWire(0, opts, { topic: 't', extensions: false })).toBeNull();
      expect(part.readWire(20, opts, { topic: 't', extensions: false })).toBeNull();
      const w = part.readWire(19, opts, { topic: 't', extensions: true });
      expect(w?.count).toBe(1);
      expect(w?.nextOffset).toBe(20);
    } finally {
      await log.close();
    }
  });
});

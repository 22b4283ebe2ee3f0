import fc from 'fast-check';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { Partition } from 'tributary-broker/partition/partition.js';
import { PartitionLog } from 'tributary-broker/storage/partition-log.js';
import { encodeRecords, READ_HEADER_COST, storedHeaderCount } from 'tributary-broker/storage/record-codec.js';
import { decodeBatch } from 'tributary-protocol/batch.js';
import type { RecordInput } from 'tributary-protocol/record.js';
import { removeDir, tempDir } from '../../helpers/util.js';

let dir: string;
beforeEach(async () => {
  dir = await tempDir('trib-hdr-cost-');
});
afterEach(async () => {
  await removeDir(dir);
});

/** Records of 1,000 empty headers: 6 KB stored, about 100 KB once read as objects. */
const HEADERS = 1000;
const record = (i: number): RecordInput => ({ key: null, value: Buffer.from(`v${i}`), headers: Array.from({ length: HEADERS }, () => ({ key: '', value: Buffer.alloc(0) })) });

/** What reading one of them is charged: its stored bytes and READ_HEADER_COST per header. */
const STORED = 46 + 2 + HEADERS * 6;
const COST = STORED + HEADERS * READ_HEADER_COST;

describe('reads charge each header READ_HEADER_COST against maxBytes', () => {
  // Room for two records' charges, not three: by bytes alone all ten (61 KB) would fit.
  const opts = { maxRecords: 1000, maxBytes: 2 * COST + COST / 2 };

  it.each([
    ['the tail cache', 1 << 20],
    ['the segment files', 0],
  ])('read() from %s', async (_where, tailCacheBytes) => {
    const log = await PartitionLog.open(await tempDir('l-', dir), { flush: 'os', tailCacheBytes });
    try {
      await log.append(Array.from({ length: 10 }, (_, i) => record(i)));
      const got = await log.read(0, opts);
      expect(got.map((r) => r.value.toString())).toEqual(['v0', 'v1']);
      expect(got[1]!.headers).toHaveLength(HEADERS);
      // The first record is always returned, whatever it costs.
      expect((await log.read(3, { maxRecords: 1000, maxBytes: 1 })).map((r) => r.value.toString())).toEqual(['v3']);
    } finally {
      await log.close();
    }
  });

  it('a CONSUME reply from the tail cache (readWire) holds the same records as read()', async () => {
    const log = await PartitionLog.open(await tempDir('l-', dir), { flush: 'os', tailCacheBytes: 1 << 20 });
    try {
      await log.append(Array.from({ length: 10 }, (_, i) => record(i)));
      const part = new Partition('t', 0, log);
      const wire = part.readWire(0, { ...opts, isolation: 'read_uncommitted' }, { topic: 't', extensions: true });
      expect(wire).not.toBeNull();
      const batch = decodeBatch(wire!.frame, { extensions: true });
      expect(batch.records.map((r) => r.value.toString())).toEqual(['v0', 'v1']);
      expect(batch.trailer?.nextOffset).toBe(2);
    } finally {
      await log.close();
    }
  });
});

describe('storedHeaderCount', () => {
  it('reads the header count of a stored record, whatever its producer id, key and value', () => {
    const bytes = (max: number) => fc.uint8Array({ maxLength: max }).map((a) => Buffer.from(a));
    fc.assert(
      fc.property(
        fc.string({ maxLength: 8 }),
        fc.option(bytes(300), { nil: null }),
        bytes(300),
        fc.array(fc.record({ key: fc.string({ maxLength: 4 }), value: bytes(8) }), { maxLength: 300 }),
        (producerId, key, value, headers) => {
          const buf = encodeRecords([{ offset: 0, timestamp: 0, producerId, key, value, headers }]);
          expect(storedHeaderCount(buf, 0)).toBe(headers.length);
        },
      ),
    );
  });
});

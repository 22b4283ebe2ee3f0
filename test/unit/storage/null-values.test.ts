/**
 * A Kafka null value, stored empty with RecordAttr.NULL_VALUE. Compaction's tombstones: in a user topic
 * (nullTombstonesOnly) only a null value deletes its key, as in Kafka; an empty value is data and stays.
 * Without the option (the internal topics, whose tombstones the broker writes empty) an empty value is one
 * too. And Fetch's batch from records read (asRecordBatch, when the wire paths decline) gives it as null.
 */
import { afterEach, beforeEach, expect, it } from 'vitest';
import { type LogRecord, RecordAttr, type RecordInput } from 'tributary-protocol/record.js';
import { splitRecordBatches } from 'tributary-protocol/record-batch/split.js';
import { asRecordBatch } from 'tributary-broker/kafka/apis/fetch.js';
import { PartitionLog } from 'tributary-broker/storage/partition-log.js';
import { removeDir, tempDir } from '../../helpers/util.js';

let dir: string;
let log: PartitionLog | undefined;

beforeEach(async () => {
  dir = await tempDir('trib-null-tomb-');
});
afterEach(async () => {
  await log?.close().catch(() => {});
  log = undefined;
  await removeDir(dir);
});

const T0 = 1_700_000_000_000;
const rec = (key: string, value: string, attributes = 0): RecordInput => ({ key: Buffer.from(key), value: Buffer.from(value), timestamp: T0, attributes });

/** Each key's value then its delete candidate, then filler past the first segments, compacted with no tombstone retention. */
async function compacted(nullTombstonesOnly: boolean): Promise<Array<[string, string, boolean]>> {
  log = await PartitionLog.open(dir, { flush: 'os', segmentBytes: 1024, indexIntervalBytes: 64 });
  await log.append([rec('empty', 'v1'), rec('null', 'v1')]);
  await log.append([rec('empty', ''), rec('null', '', RecordAttr.NULL_VALUE)]);
  for (let i = 0; i < 40; i++) await log.append([rec(`filler-${i}`, 'x'.repeat(40))]);
  log.setHighWatermark(log.logEndOffset);
  expect(log.segmentInfos().length).toBeGreaterThan(2);
  await log.compact({ now: T0 + 1000, tombstoneRetentionMs: 0, nullTombstonesOnly });
  const kept = await log.read(0, { maxRecords: 4, maxBytes: 1 << 20 });
  return kept.filter((r) => !r.key!.toString().startsWith('filler')).map((r) => [r.key!.toString(), r.value.toString(), (r.attributes & RecordAttr.NULL_VALUE) !== 0]);
}

it('a user topic: the null value is a tombstone and goes, the empty value stays as its key latest record', async () => {
  // Before: both were tombstones (an empty value was the only mark), so the empty value was deleted too.
  expect(await compacted(true)).toEqual([['empty', '', false]]);
});

it('an internal topic: an empty value is a tombstone as well', async () => {
  expect(await compacted(false)).toEqual([]);
});

it("Fetch's batch from records read gives a NULL_VALUE record a null value and an empty one an empty value", () => {
  const r = (offset: number, attributes: number): LogRecord => ({ offset, timestamp: T0, key: null, value: Buffer.alloc(0), headers: [], producerId: '', epoch: -1, sequence: -1, attributes });
  const batch = asRecordBatch([r(0, RecordAttr.NULL_VALUE), r(1, 0), r(2, RecordAttr.NULL_VALUE | RecordAttr.TRANSACTIONAL)], 3, 0);
  // Before: [0, 0, 0].
  expect(splitRecordBatches(batch).batches[0]!.decode().records.map((x) => x.value?.length ?? -1)).toEqual([-1, 0, -1]);
});

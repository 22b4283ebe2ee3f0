/**
 * A Kafka header whose value is null (varint length -1) is stored apart from an empty one: value length
 * 0xffffffff in the stored layout, read back as a StoredHeader with `nullValue` and an empty `value`
 * (docs/architecture.md, "Storage"). Fetch gives it as null again, from the tail cache, the segment files
 * and records read; the main port's CONSUME as an empty value (docs/protocol.md 5.2); recovery and
 * compaction keep it. Before, it was stored as an empty value and every reader got empty bytes.
 */
import { afterEach, beforeEach, expect, it } from 'vitest';
import { decodeBatch } from 'tributary-protocol/batch.js';
import type { LogRecord, RecordHeader, RecordInput } from 'tributary-protocol/record.js';
import { splitRecordBatches } from 'tributary-protocol/record-batch/split.js';
import { asRecordBatch } from 'tributary-broker/kafka/apis/fetch.js';
import { simulateCrash } from 'tributary-broker/storage/log-test-hooks.js';
import { PartitionLog } from 'tributary-broker/storage/partition-log.js';
import {
  decodeOwnRecord,
  decodeRecords,
  encodedSize,
  encodeRecords,
  encodeRecordView,
  inspectRecord,
  type StoredHeader,
  validateEncodable,
} from 'tributary-broker/storage/record-codec.js';
import { removeDir, tempDir } from '../../helpers/util.js';

let dir: string;
let log: PartitionLog | undefined;

beforeEach(async () => {
  dir = await tempDir('trib-null-hdr-');
});
afterEach(async () => {
  await log?.close().catch(() => {});
  log = undefined;
  await removeDir(dir);
});

const T0 = 1_700_000_000_000;
const EMPTY = Buffer.alloc(0);
const HEADERS: StoredHeader[] = [
  { key: 'n', value: EMPTY, nullValue: true },
  { key: 'e', value: EMPTY },
  { key: 'v', value: Buffer.from('x') },
];
/** What the headers of HEADERS read back as: null, '' and 'x'. */
const SHOWN = ['n=null', 'e=', 'v=x'];

/** A header as `key=value`, `key=null` for a null value (StoredHeader, or a RecordBatch v2 header's null). */
function show(h: RecordHeader | StoredHeader | { key: string; value: Buffer | null }): string {
  return h.value === null || (h as StoredHeader).nullValue ? `${h.key}=null` : `${h.key}=${h.value.toString()}`;
}

const rec = (key: string, headers: StoredHeader[] = HEADERS): RecordInput => ({ key: Buffer.from(key), value: Buffer.from('v'), timestamp: T0, headers });

it('the codec stores a null header value as length 0xffffffff and every decoder reads it back as null', () => {
  const r = { offset: 7, timestamp: T0, key: null, value: Buffer.from('v'), headers: HEADERS };
  expect(validateEncodable(r)).toBeNull();
  const buf = encodeRecords([r]);
  expect(buf.length).toBe(encodedSize(r));
  // The first header's value length: before the headers 'v' (8 bytes stored) and 'e' (7), the record's last.
  const at = buf.length - 8 - 7 - 4;
  // Before: 0 (stored as an empty value).
  expect(buf.readUInt32BE(at)).toBe(0xffffffff);
  expect(inspectRecord(buf, 0)).toMatchObject({ ok: true, size: buf.length });
  const { records, failure } = decodeRecords(buf);
  expect(failure).toBeNull();
  expect(records[0]!.headers.map(show)).toEqual(SHOWN);
  expect(records[0]!.headers[0]!.value.length).toBe(0);
  expect(decodeOwnRecord(buf, 0).headers.map(show)).toEqual(SHOWN);
  const view = encodeRecordView(Buffer.alloc(buf.length), 0, r);
  expect(view.record.headers.map(show)).toEqual(SHOWN);
});

it('refuses a null header value that is not empty', () => {
  const r = { key: null, value: EMPTY, headers: [{ key: 'n', value: Buffer.from('x'), nullValue: true as const }] };
  expect(validateEncodable(r)).toMatch(/null header value/);
});

const V2 = { topic: '', partition: 0, extensions: true, skipControl: false, format: 'record_batch_v2' } as const;
const OPTS = { maxRecords: 100, maxBytes: 1 << 20, isolation: 'read_uncommitted' as const };

/** The headers of every record of the log as Kafka's Fetch gives them, from the tail cache when it holds them and from the segment files. */
async function kafkaHeaders(l: PartitionLog): Promise<{ cache: string[][] | null; disk: string[][] }> {
  const decode = (frame: Buffer) => splitRecordBatches(frame).batches.flatMap((b) => b.decode().records.map((x) => x.headers.map(show)));
  const cached = l.readWire(0, OPTS, V2);
  const disk = await l.readWireFromDisk(0, OPTS, V2);
  return { cache: cached ? decode(cached.frame) : null, disk: decode(disk!.frame) };
}

it("Kafka's Fetch gives a null header value as null, from the tail cache and the segment files; CONSUME as an empty value", async () => {
  log = await PartitionLog.open(dir, { flush: 'os' });
  await log.append([rec('a'), rec('b', [])]);
  log.setHighWatermark(log.logEndOffset);
  // Before: 'n=' on both paths.
  expect(await kafkaHeaders(log)).toEqual({ cache: [SHOWN, []], disk: [SHOWN, []] });
  // The main port's wire has no null header value: an empty one, with record_extensions_v1.
  const wire = log.readWire(0, OPTS, { topic: 't', partition: 0, extensions: true, skipControl: false })!;
  expect(decodeBatch(wire.frame, { extensions: true }).records[0]!.headers.map(show)).toEqual(['n=', 'e=', 'v=x']);
  // Records read as objects keep it too, and Fetch's batch from them (asRecordBatch) gives it as null.
  const read = await log.read(0, OPTS);
  expect(read[0]!.headers.map(show)).toEqual(SHOWN);
  const batch = asRecordBatch(read, 2, 0);
  expect(splitRecordBatches(batch).batches[0]!.decode().records[0]!.headers.map(show)).toEqual(SHOWN);
});

it("asRecordBatch gives a record's null header value as null", () => {
  const r: LogRecord = { offset: 0, timestamp: T0, key: null, value: EMPTY, headers: HEADERS, producerId: '', epoch: -1, sequence: -1, attributes: 0 };
  // Before: 'n='.
  expect(splitRecordBatches(asRecordBatch([r], 1, 0)).batches[0]!.decode().records[0]!.headers.map(show)).toEqual(SHOWN);
});

it('recovery after a crash keeps a null header value', async () => {
  const l = await PartitionLog.open(dir, { flush: 'os', tailCacheBytes: 0 });
  await l.append([rec('a')]);
  await l.append([rec('b')]);
  await simulateCrash(l);
  log = await PartitionLog.open(dir, { flush: 'os', tailCacheBytes: 0 });
  // Before: both records read back with 'n=' (stored empty); the recovery scan now accepts 0xffffffff.
  expect(log.logEndOffset).toBe(2);
  expect((await log.read(0, OPTS)).map((r) => r.headers.map(show))).toEqual([SHOWN, SHOWN]);
  log.setHighWatermark(log.logEndOffset);
  expect((await kafkaHeaders(log)).disk).toEqual([SHOWN, SHOWN]);
});

it('compaction keeps a null header value of a record it keeps', async () => {
  log = await PartitionLog.open(dir, { flush: 'os', segmentBytes: 1024, indexIntervalBytes: 64 });
  await log.append([rec('k', [{ key: 'old', value: Buffer.from('1') }])]);
  await log.append([rec('k')]);
  for (let i = 0; i < 40; i++) await log.append([{ key: Buffer.from(`filler-${i}`), value: Buffer.from('x'.repeat(40)), timestamp: T0 }]);
  log.setHighWatermark(log.logEndOffset);
  expect(log.segmentInfos().length).toBeGreaterThan(2);
  const result = await log.compact({ now: T0 + 1000 });
  expect(result.recordsRemoved).toBeGreaterThan(0);
  const kept = (await log.read(0, { ...OPTS, maxRecords: 2 })).filter((r) => r.key!.toString() === 'k');
  // Before: 'n=' (stored empty in the first place).
  expect(kept.map((r) => [r.offset, r.headers.map(show)])).toEqual([[1, SHOWN]]);
});

/**
 * `npm run bench -- record-batch`: CPU cost per record of the RecordBatch v2 codec
 * (packages/protocol/src/record-batch) beside the current Tributary batch codec (packages/protocol/src/batch.ts,
 * with record_extensions_v1 so both carry timestamps and headers), in this process, no I/O.
 *
 * Per value size (`--sizes`, 100 B and 1 KiB), one batch of `--batch` records (16-byte key, one small header):
 * - encode: encodeRecordBatch (CRC-32C included) against encodeBatch;
 * - validate+iterate: RecordBatchView.validate() (length, magic, CRC) and forEachRecord reading each
 *   record's offset, timestamp and value slice, against scanBatch (validates, no record objects) and
 *   decodeBatch (a record object each), reading the same fields;
 * - decode: RecordBatchView.decode() (objects, for tools) against decodeBatch;
 * - gzip encode and validate+iterate (no reference: the current codec has no compression);
 * - the storage conversions (packages/broker/src/storage/stored-batch.ts against record-codec.ts): a produce
 *   frame's records stored as one batch (writeStoredBatchFromWire, one CRC-32C) against one stored record
 *   each (writeStoredFromWire, a CRC-32C each), and stored records written out as a CONSUME reply's wire
 *   records (writeWireFromStoredBatch against writeWireRecord);
 * - the same two conversions for append blocks (packages/broker/src/storage/append-block.ts: the records as
 *   sent, stamped in place under one header and one CRC-32C per append), against the same per-record functions.
 * Each figure is CPU time (process.cpuUsage, so other load on the machine disturbs it less than wall time), the
 * median of `--rounds` rounds of `--round-ms` of CPU after a warm-up; ratios are ours / the
 * reference (below 1 is faster).
 */
import { parseArgs } from 'node:util';
import { type Batch, type BatchRecord, decodeBatch, encodeBatch, scanBatch } from 'tributary-protocol/batch.js';
import { crc32cImpl } from 'tributary-protocol/record-batch/crc32c.js';
import { encodeRecordBatch } from 'tributary-protocol/record-batch/encode.js';
import type { RecordBatchInput } from 'tributary-protocol/record-batch/types.js';
import { RecordBatchView } from 'tributary-protocol/record-batch/view.js';
import { storedSizeOfWire, writeStoredFromWire, writeWireRecord } from 'tributary-broker/storage/record-codec.js';
import { storedBatchBound, writeStoredBatchFromWire, writeWireFromStoredBatch } from 'tributary-broker/storage/stored-batch.js';
import { blockSize, wireBlockable, writeBlockFromWire, writeWireFromBlock } from 'tributary-broker/storage/append-block.js';
import { fmtFixed, median, table } from './lib.js';

export const description = 'CPU per record of the RecordBatch v2 codec (encode, validate+iterate) beside the current batch codec, at 100 B and 1 KiB';

const USAGE = 'usage: npm run bench -- record-batch [--sizes 100,1024] [--batch 100] [--rounds 7] [--round-ms 300]\n';

interface Options {
  sizes: number[];
  batch: number;
  rounds: number;
  roundMs: number;
  help: boolean;
}

/** The options, or a message for a bad one (unknown options and non-numbers are refused, never ignored). */
function parseOptions(argv: string[]): Options | string {
  let v: Record<string, string | boolean | undefined>;
  try {
    v = parseArgs({
      args: argv,
      options: {
        sizes: { type: 'string', default: '100,1024' },
        batch: { type: 'string', default: '100' },
        rounds: { type: 'string', default: '7' },
        'round-ms': { type: 'string', default: '300' },
        help: { type: 'boolean', default: false },
      },
      strict: true,
    }).values as Record<string, string | boolean | undefined>;
  } catch (err) {
    return `${(err as Error).message}\n${USAGE}`;
  }
  const num = (name: string, min: number): number | string => {
    const x = Number(v[name]);
    return Number.isSafeInteger(x) && x >= min ? x : `--${name} must be an integer >= ${min}\n${USAGE}`;
  };
  const sizes = String(v.sizes).split(',').filter(Boolean).map(Number);
  if (sizes.length === 0 || !sizes.every((x) => Number.isSafeInteger(x) && x >= 0)) return `--sizes takes a comma-separated list of byte counts\n${USAGE}`;
  const batch = num('batch', 1);
  const rounds = num('rounds', 1);
  const roundMs = num('round-ms', 10);
  for (const x of [batch, rounds, roundMs]) if (typeof x === 'string') return x;
  return { sizes, batch: batch as number, rounds: rounds as number, roundMs: roundMs as number, help: v.help === true };
}

/** Keeps results observable so the JIT cannot drop the work. */
let sink = 0;

/** CPU time (user + system) of this process in ms: less disturbed than wall time on a shared machine. */
function cpuMs(): number {
  const u = process.cpuUsage();
  return (u.user + u.system) / 1000;
}

/** CPU nanoseconds per record of `op` (which handles `perOp` records): median of timed rounds after a warm-up. */
function measure(op: () => void, perOp: number, rounds: number, roundMs: number): number {
  const warm = cpuMs() + roundMs;
  while (cpuMs() < warm) for (let i = 0; i < 16; i++) op();
  const results: number[] = [];
  for (let r = 0; r < rounds; r++) {
    let n = 0;
    const t0 = cpuMs();
    let t = t0;
    while (t - t0 < roundMs) {
      for (let i = 0; i < 16; i++) op();
      n += 16;
      t = cpuMs();
    }
    results.push(((t - t0) * 1e6) / (n * perOp));
  }
  return median(results);
}

function fixtures(size: number, count: number): { input: RecordBatchInput; ref: Batch } {
  const now = 1_700_000_000_000;
  const value = Buffer.alloc(size);
  for (let i = 0; i < size; i++) value[i] = (i * 31 + 7) & 0xff;
  const records = Array.from({ length: count }, (_, i) => ({
    key: Buffer.from(`key-${String(i).padStart(12, '0')}`),
    value: Buffer.from(value),
    headers: [{ key: 'trace', value: Buffer.from('0123456789abcdef') }],
    timestamp: now + i,
  }));
  const input: RecordBatchInput = { records, producerId: 1234, producerEpoch: 0, baseSequence: 0 };
  const refRecords: BatchRecord[] = records.map((r, i) => ({
    offset: i,
    sequence: i,
    producerId: '1234',
    key: r.key,
    epoch: 0,
    value: r.value,
    timestamp: r.timestamp,
    attributes: 0,
    headers: [{ key: 'trace', value: r.headers[0]!.value }],
  }));
  const ref: Batch = { topic: 'bench', partition: 0, acks: '1', idempotent: true, firstSequence: 0, lastSequence: count - 1, records: refRecords };
  return { input, ref };
}

export async function run(argv: string[]): Promise<number> {
  const o = parseOptions(argv);
  if (typeof o === 'string') {
    process.stderr.write(o);
    return 2;
  }
  if (o.help) {
    process.stdout.write(USAGE);
    return 0;
  }
  const ext = { extensions: true };
  const rows: string[][] = [];
  const notes: string[] = [];
  const m = (op: () => void) => measure(op, o.batch, o.rounds, o.roundMs);
  for (const size of o.sizes) {
    const { input, ref } = fixtures(size, o.batch);
    const v2 = encodeRecordBatch(input);
    const v2gz = encodeRecordBatch({ ...input, compression: 'gzip' });
    const old = encodeBatch(ref, ext);

    const encV2 = m(() => {
      sink += encodeRecordBatch(input).length;
    });
    const encOld = m(() => {
      sink += encodeBatch(ref, ext).length;
    });
    const iterV2 = m(() => {
      const view = new RecordBatchView(v2).validate();
      view.forEachRecord((r) => {
        sink += r.offset + r.timestamp + r.valueStart + r.valueLength;
      });
    });
    const iterNoCrc = m(() => {
      const view = new RecordBatchView(v2).validate({ verifyCrc: false });
      view.forEachRecord((r) => {
        sink += r.offset + r.timestamp + r.valueStart + r.valueLength;
      });
    });
    const iterScan = m(() => {
      const s = scanBatch(old, ext);
      // scanBatch gives record starts only: reading a field means parsing from the start (offset, value length).
      for (let i = 0; i < s.count; i++) sink += s.starts[i]! + old.readUInt32BE(s.starts[i]! + 4);
    });
    const iterDecode = m(() => {
      for (const r of decodeBatch(old, ext).records) sink += r.offset + r.timestamp + r.value.length;
    });
    const decV2 = m(() => {
      sink += new RecordBatchView(v2).validate().decode().records.length;
    });
    const decOld = m(() => {
      sink += decodeBatch(old, ext).records.length;
    });
    const encGz = m(() => {
      sink += encodeRecordBatch({ ...input, compression: 'gzip' }).length;
    });
    const iterGz = m(() => {
      new RecordBatchView(v2gz).validate().forEachRecord((r) => {
        sink += r.offset + r.valueLength;
      });
    });
    // Storage conversions, from the produce frame's records as the broker scanned them.
    const scanned = scanBatch(old, { extensions: true, request: true });
    const stamp = { baseOffset: 1000, now: 1_700_000_000_000, leaderEpoch: -1, producerId: 1234, producerEpoch: 0, firstSequence: 0, wireAttributes: 0 };
    const v2Store = Buffer.alloc(storedBatchBound(scanned));
    const v2End = writeStoredBatchFromWire(scanned, v2Store, 0, stamp);
    let v1Size = 0;
    for (let i = 0; i < scanned.count; i++) v1Size += storedSizeOfWire(scanned.body, scanned.starts[i]!, scanned.starts[i + 1]!, true, true);
    const v1Store = Buffer.alloc(v1Size);
    const v1Starts: number[] = [];
    const storeV1 = (): void => {
      let p = 0;
      v1Starts.length = 0;
      for (let i = 0; i < scanned.count; i++) {
        v1Starts.push(p);
        p = writeStoredFromWire(scanned.body, scanned.starts[i]!, scanned.starts[i + 1]!, true, v1Store, p, 1000 + i, stamp.now, 0, i);
      }
      sink += p;
    };
    storeV1();
    const storeV2Ns = m(() => {
      sink += writeStoredBatchFromWire(scanned, v2Store, 0, stamp);
    });
    const storeV1Ns = m(storeV1);
    const wireBuf = Buffer.alloc(v1Size + v2End + 64 * o.batch);
    const outV2 = m(() => {
      sink += writeWireFromStoredBatch(v2Store, 0, 1000, wireBuf, 0, true);
    });
    const outV1 = m(() => {
      let at = 0;
      for (let i = 0; i < scanned.count; i++) at = writeWireRecord(v1Store, v1Starts[i]!, wireBuf, at, true);
      sink += at;
    });
    if (!wireBlockable(scanned)) throw new Error('the benchmark frame should be blockable');
    const blockBuf = Buffer.alloc(blockSize(scanned));
    const blockStamp = { baseOffset: 1000, now: stamp.now, flags: 0, firstSequence: 0 };
    const storeBlock = m(() => {
      sink += writeBlockFromWire(scanned, blockBuf, 0, blockStamp);
    });
    const outBlock = m(() => {
      sink += writeWireFromBlock(blockBuf, 0, 1000, wireBuf, 0, true);
    });
    const label = size >= 1024 && size % 1024 === 0 ? `${size / 1024} KiB` : `${size} B`;
    const row = (op: string, ours: number, refName: string, refNs: number | undefined): string[] => [
      label,
      op,
      fmtFixed(ours, 1),
      refName,
      refNs === undefined ? '' : fmtFixed(refNs, 1),
      refNs === undefined ? '' : fmtFixed(ours / refNs, 2),
    ];
    rows.push(row('encode', encV2, 'encodeBatch', encOld));
    rows.push(row('validate+iterate', iterV2, 'scanBatch', iterScan));
    rows.push(row('validate+iterate', iterV2, 'decodeBatch', iterDecode));
    rows.push(row('  same, CRC not checked', iterNoCrc, 'scanBatch', iterScan));
    rows.push(row('decode (objects)', decV2, 'decodeBatch', decOld));
    rows.push(row('store a produce frame', storeV2Ns, 'per record', storeV1Ns));
    rows.push(row('stored -> CONSUME wire', outV2, 'per record', outV1));
    rows.push(row('block: store a produce frame', storeBlock, 'per record', storeV1Ns));
    rows.push(row('block: stored -> CONSUME wire', outBlock, 'per record', outV1));
    rows.push(row('gzip encode', encGz, '', undefined));
    rows.push(row('gzip validate+iterate', iterGz, '', undefined));
    notes.push(`${label}: bytes per batch: v2 ${v2.length}, v2 gzip ${v2gz.length}, current ${old.length}; stored: v2 ${v2End}, block ${blockBuf.length}, current ${v1Size}`);
  }
  process.stdout.write(
    `record-batch: ${o.batch} records per batch, 16-byte key, one 16-byte header; CPU ns per record, median of ${o.rounds} x ${o.roundMs} ms; CRC-32C ${crc32cImpl}; node ${process.version}\n\n`,
  );
  process.stdout.write(`${table(['value', 'operation', 'ns/rec', 'reference', 'ref ns/rec', 'ratio'], rows)}\n\n${notes.join('\n')}\n`);
  if (sink === 0.5) process.stdout.write('\n');
  return 0;
}

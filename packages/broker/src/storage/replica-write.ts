/**
 * PartitionLog.appendReplica of records given as objects (log-writer.ts): the checks of the call and the
 * encoding of its records with their own offsets, in the per-record layout (record-codec.ts); and what the
 * tail cache takes of a replica write, whose units (StoredAppends) may be append blocks.
 */
import { invalidParam } from 'tributary-protocol/errors.js';
import type { LogRecord } from 'tributary-protocol/record.js';
import { BLOCK_HEADER_BYTES, recordEnd } from './append-block.js';
import { isBlockAt } from './block-records.js';
import { storageError } from './log-fs.js';
import type { TailCache } from './tail-cache.js';
import { ATTR_END_OF_APPEND, encodedSize, encodeRecordInto, validateEncodable } from './record-codec.js';

/** The records of an appendReplica call, encoded when the call is accepted (the caller's objects may change later). */
export interface ReplicaWrite {
  buf: Buffer;
  /** Position of unit i (a record, or an append block: block-records.ts) in `buf`, then the end. */
  starts: number[];
  /** First offset of unit i (increasing, maybe with gaps between appends). */
  offsets: number[];
  /** The last record's offset. */
  lastOffset: number;
  /** Of the records with a timestamp (-1 when none has one). */
  maxTimestamp: number;
  /** Some record has none (negative): the segment's age counts it as written when it is (ageTimestamp). */
  untimed: boolean;
  /** Records (a block holds several). */
  count: number;
}

/** Checks the records of an appendReplica call: whole appends, offsets increasing; their encoded sizes, or the error. */
export function checkReplicaRecords(records: LogRecord[]): { offsets: number[]; sizes: number[]; bytes: number } | Error {
  if (!Array.isArray(records) || records.length === 0) return invalidParam('records', 'must be a non-empty array');
  const n = records.length;
  const sizes = new Array<number>(n);
  const offsets = new Array<number>(n);
  let bytes = 0;
  for (let i = 0; i < n; i++) {
    const r = records[i];
    const offset = r?.offset;
    if (!Number.isSafeInteger(offset) || offset < 0) return invalidParam('records', `record ${i}: bad offset ${offset}`);
    if (typeof r.timestamp !== 'number') return invalidParam('records', `record ${i}: timestamp must be a safe integer`);
    // Timestamps as stored on the leader: a Kafka producer's 0 or -1 included.
    const reason = validateEncodable(r, true);
    if (reason) return invalidParam('records', `record ${i}: ${reason}`);
    if (i > 0) {
      const prev = offsets[i - 1];
      if (offset <= prev) return invalidParam('records', `record ${i}: offsets must be strictly increasing (${offset} after ${prev})`);
      if (offset !== prev + 1 && ((records[i - 1].attributes ?? 0) & ATTR_END_OF_APPEND) === 0) {
        return invalidParam('records', `record ${i}: offset gap (${prev} to ${offset}) inside an append`);
      }
    }
    offsets[i] = offset;
    sizes[i] = encodedSize(r);
    bytes += sizes[i];
  }
  if (((records[n - 1].attributes ?? 0) & ATTR_END_OF_APPEND) === 0) {
    return invalidParam('records', 'the last record does not end an append (ATTR_END_OF_APPEND): pass whole appends only');
  }
  return { offsets, sizes, bytes };
}

/** Encodes checked records (checkReplicaRecords: `sizes`, `offsets`) into `buf`, which has room for them all. */
export function encodeReplicaRecords(records: LogRecord[], sizes: number[], offsets: number[], buf: Buffer, dir: string): ReplicaWrite {
  const n = records.length;
  const starts = new Array<number>(n + 1);
  let maxTimestamp = -1;
  let untimed = false;
  let p = 0;
  for (let i = 0; i < n; i++) {
    const r = records[i];
    const end = encodeRecordInto(buf, p, r);
    if (end - p !== sizes[i]) throw storageError(dir, 'record encoding size mismatch');
    starts[i] = p;
    if (r.timestamp > maxTimestamp) maxTimestamp = r.timestamp;
    if (r.timestamp < 0) untimed = true;
    p = end;
  }
  starts[n] = p;
  return { buf, starts, offsets, lastOffset: offsets[n - 1], maxTimestamp, untimed, count: n };
}

/**
 * Caches a written replica call: the tail cache holds consecutive offsets ending at the LEO, so the last run
 * of its units without a gap (a gap before it, from the LEO or inside the call, empties the cache first).
 */
export function cacheReplica(cache: TailCache, rw: ReplicaWrite): void {
  const { buf, starts, offsets } = rw;
  const blockCount = (u: number) => (isBlockAt(buf, starts[u]) ? buf.readUInt32BE(starts[u] + 18) : 1);
  let run = offsets.length - 1;
  let blocks: Map<number, number[]> | null = isBlockAt(buf, starts[run]) ? new Map() : null;
  while (run > 0 && offsets[run - 1] + blockCount(run - 1) === offsets[run]) {
    run--;
    if (blocks === null && isBlockAt(buf, starts[run])) blocks = new Map();
  }
  if (blocks === null) {
    cache.append(buf, offsets[run], run === 0 ? starts : starts.slice(run));
    return;
  }
  // The blocks among the units: their records' positions, then the block's end (TailCache.appendUnits).
  for (let u = run; u < offsets.length; u++) {
    if (!isBlockAt(buf, starts[u])) continue;
    const rs: number[] = [];
    for (let p = starts[u] + BLOCK_HEADER_BYTES, j = blockCount(u); j > 0; j--, p = recordEnd(buf, p)) rs.push(p);
    rs.push(starts[u + 1]);
    blocks.set(u - run, rs);
  }
  cache.appendUnits(buf, starts.slice(run), offsets.slice(run), blocks);
}

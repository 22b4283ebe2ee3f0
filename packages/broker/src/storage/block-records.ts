/**
 * The records of a stored append block (append-block.ts) as the log's walkers see them: a segment holds
 * "units", each a per-record layout record (record-codec.ts) or a block, told apart by bit 31 of the length
 * (docs/architecture.md "Stored batches"). A block's records are read with the field values the per-record
 * layout stores for the same append, so a reader cannot tell the layouts apart: a plain append's records
 * have no producer id and epoch and sequence -1, an empty key is null, and the last record of the block
 * carries ATTR_END_OF_APPEND (a block is always one whole append).
 */
import type { LogRecord, RecordHeader } from 'tributary-protocol/record.js';
import type { WireReadRequest } from './tail-cache.js';
import { BLOCK_CONTROL, BLOCK_HEADER_BYTES, BLOCK_IDEMPOTENT, BLOCK_TRANSACTIONAL, type BlockInfo, checkBlock, recordEnd, valueEndOf } from './append-block.js';
import { r32u, r64n } from 'tributary-protocol/record-batch/layout.js';
import { ATTR_END_OF_APPEND, type DecodeFailure, READ_HEADER_COST } from './record-codec.js';

const EMPTY = Buffer.alloc(0);

/**
 * What a block's wire record weighs against a read's byte limit: the size the per-record layout would store
 * it in (RECORD_OVERHEAD, 53 fixed bytes, against the wire record's 43 with extensions; the producer id is
 * in both or, for a plain append, in neither), so a read returns the same records from either layout.
 */
export const BLOCK_RECORD_EXTRA = 10;

/** Whether the unit at `pos` is a block (bit 31 of its length); a per-record record has it clear. */
export function isBlockAt(buf: Buffer, pos: number): boolean {
  return pos < buf.length && (buf[pos]! & 0x80) !== 0;
}

/** One record of a block: where its wire bytes lie and what the walkers need of it. */
export interface BlockRecord {
  /** Start and end of the wire record in the buffer. */
  at: number;
  end: number;
  offset: number;
  timestamp: number;
  /** Stored attributes: the user bits, and ATTR_END_OF_APPEND on the block's last record. */
  attributes: number;
  /** Header count. */
  headers: number;
}

/** The timestamp of the block's wire record at `s`. */
export function blockRecordTimestamp(buf: Buffer, s: number): number {
  return r64n(buf, valueEndOf(buf, s));
}

/** The block record [at, end) of offset `offset` (`last`: the block's last record). */
export function blockRecordAt(buf: Buffer, at: number, end: number, offset: number, last: boolean): BlockRecord {
  const ve = valueEndOf(buf, at);
  return {
    at,
    end,
    offset,
    timestamp: r64n(buf, ve),
    attributes: buf[ve + 8]! | (last ? ATTR_END_OF_APPEND : 0),
    headers: (buf[ve + 9]! << 8) | buf[ve + 10]!,
  };
}

/** The records of the (checked) block at `pos`, in order. */
export function blockRecords(buf: Buffer, pos: number, info: BlockInfo): BlockRecord[] {
  const out = new Array<BlockRecord>(info.count);
  let p = pos + BLOCK_HEADER_BYTES;
  for (let i = 0; i < info.count; i++) {
    const end = recordEnd(buf, p);
    out[i] = blockRecordAt(buf, p, end, info.baseOffset + i, i === info.count - 1);
    p = end;
  }
  return out;
}

/** A block record's charge against a read's byte limit (as the per-record layout's: stored size, READ_HEADER_COST per header). */
export function blockRecordCost(r: BlockRecord): number {
  return chargeOf(r.end - r.at, r.headers);
}

/** blockRecordCost of the block record [s, e) of `buf`, without a BlockRecord (a wire read's first pass). */
export function blockRecordCostAt(buf: Buffer, s: number, e: number): number {
  const ve = valueEndOf(buf, s);
  return chargeOf(e - s, (buf[ve + 9]! << 8) | buf[ve + 10]!);
}

function chargeOf(wireBytes: number, headers: number): number {
  return wireBytes + BLOCK_RECORD_EXTRA + headers * READ_HEADER_COST;
}

/**
 * The LogRecord of the block record `r` (of a block with `flags`), with the per-record layout's field values;
 * buffers are views into `buf`.
 */
export function decodeBlockRecord(buf: Buffer, r: BlockRecord, flags: number): LogRecord {
  const s = r.at;
  const idempotent = (flags & BLOCK_IDEMPOTENT) !== 0;
  const pidLen = (buf[s + 16]! << 8) | buf[s + 17]!;
  const k = s + 18 + pidLen;
  const keyLen = (buf[k]! << 8) | buf[k + 1]!;
  const e = k + 2 + keyLen;
  const v = e + 8;
  const valueLen = r32u(buf, v);
  const ve = v + 4 + valueLen;
  let p = ve + 11;
  const headers: RecordHeader[] = [];
  for (let h = 0; h < r.headers; h++) {
    const kl = (buf[p]! << 8) | buf[p + 1]!;
    const key = buf.toString('utf8', p + 2, p + 2 + kl);
    p += 2 + kl;
    const vl = r32u(buf, p);
    headers.push({ key, value: buf.subarray(p + 4, p + 4 + vl) });
    p += 4 + vl;
  }
  return {
    offset: r.offset,
    timestamp: r.timestamp,
    key: keyLen === 0 ? null : buf.subarray(k + 2, e),
    value: valueLen === 0 ? EMPTY : buf.subarray(v + 4, ve),
    headers,
    producerId: idempotent && pidLen > 0 ? buf.toString('utf8', s + 18, k) : '',
    epoch: idempotent ? r64n(buf, e) : -1,
    sequence: idempotent ? r64n(buf, s + 8) : -1,
    attributes: r.attributes,
  };
}

/**
 * Whether a CONSUME reply leaves out the record `r` of a block with `flags` (tail-cache.ts leftOut, for the
 * per-record layout): the block's flags say control or transactional, as they are the same for every
 * record of an append.
 */
export function blockLeftOut(buf: Buffer, r: BlockRecord, flags: number, skipControl: boolean, skipAborted: WireReadRequest['skipAborted']): boolean {
  if (skipControl && (flags & BLOCK_CONTROL) !== 0) return true;
  if (skipAborted && (flags & BLOCK_TRANSACTIONAL) !== 0) {
    const s = r.at;
    const producerId = buf.toString('utf8', s + 18, s + 18 + ((buf[s + 16]! << 8) | buf[s + 17]!));
    return skipAborted(r.offset, producerId, r.attributes & ~ATTR_END_OF_APPEND & 0xff);
  }
  return false;
}

/** A block as a walker's unit (INSPECT): its header fields and its records. */
export interface BlockUnit {
  ok: true;
  size: number;
  /** The first offset (its base), and its largest timestamp. */
  offset: number;
  timestamp: number;
  /** ATTR_END_OF_APPEND: a block is one whole append. */
  attributes: number;
  block: BlockInfo;
}

/** Checks the block at `pos` (checkBlock: length, CRC, header, records) as a walker's unit. Never throws. */
export function inspectBlock(buf: Buffer, pos: number, end: number = buf.length): BlockUnit | DecodeFailure {
  const c = checkBlock(buf, pos, Math.min(end, buf.length));
  if (!c.ok) return c.needed === undefined ? { ok: false, reason: c.reason } : { ok: false, reason: c.reason, needed: c.needed };
  return { ok: true, size: c.size, offset: c.baseOffset, timestamp: c.maxTimestamp, attributes: ATTR_END_OF_APPEND, block: c };
}


/**
 * Append blocks: the stored layout chosen for issue 14 (docs/architecture.md, "Stored batches"). One block
 * holds one append: a small header, then the append's records in the main port's wire record layout
 * (docs/protocol.md sections 5.1 and 5.2, with record_extensions_v1), stamped in place with their offsets,
 * timestamps and attributes. So storing a produce frame is one copy of its record bytes plus a few fixed-width
 * writes per record and one CRC-32C per append, and a CONSUME reply's records are one copy of a block's bytes
 * from the first offset asked for. Segments use it only under the internal LogOptions.storedLayout 'blocks'
 * (log-writer.ts writes blocks, block-records.ts reads them): this is the codec the segment format moves to,
 * tested byte for byte against the per-record layout (record-codec.ts) so that a consumer cannot tell which
 * layout its records came from.
 *
 * Layout (big-endian):
 *
 *   length u32          bit 31 set (a block; a per-record layout record has it clear, MAX_RECORD_BODY),
 *                       bits 0-30 the bytes after this field
 *   crc32c u32          over every byte after this field
 *   version u8          1
 *   flags u8            bit 0 idempotent (records carry their producer id, epoch and sequence), bit 1
 *                       transactional, bit 2 control: the same for every record of an append
 *   baseOffset u64      offset of the first record; record i has baseOffset + i
 *   count u32           records, at least 1
 *   appendTime i64      the broker's clock at the append: records sent without a timestamp (0 or negative) got it
 *   maxTimestamp i64    the largest record timestamp (the segment's age, retention by time)
 *   records             `count` wire records with extensions, exactly as a CONSUME reply carries them
 *
 * What the per-record layout normalises is normalised here too, in place and without changing a record's
 * length: a plain append's records get epoch -1 and sequence 0 (what a CONSUME reply gives for a stored -1),
 * an idempotent append's records the sequences firstSequence + i. A frame without record_extensions_v1 gets
 * them added to each record (a timestamp, attributes, no headers). A plain append whose records carry a
 * producer id, which the per-record layout drops, is not blockable (wireBlockable) and keeps that layout.
 */
import type { ScannedBatch } from 'tributary-protocol/batch.js';
import { crc32c } from 'tributary-protocol/record-batch/crc32c.js';
import { r32u, r64n, w32, w64 } from 'tributary-protocol/record-batch/layout.js';

export const BLOCK_FLAG = 0x80000000;
export const BLOCK_VERSION = 1;
export const BLOCK_IDEMPOTENT = 1;
export const BLOCK_TRANSACTIONAL = 2;
export const BLOCK_CONTROL = 4;
/** Header bytes before the first record. */
export const BLOCK_HEADER_BYTES = 4 + 4 + 1 + 1 + 8 + 4 + 8 + 8;
/** The wire record attributes (docs/protocol.md 5.2) the block's flags stand for. */
const WIRE_CONTROL = 1;
const WIRE_TRANSACTIONAL = 2;
/** The smallest wire record with extensions: offset, sequence, producer id and key lengths, epoch, value length, timestamp, attributes, header count. */
const MIN_WIRE_RECORD = 8 + 8 + 2 + 2 + 8 + 4 + 8 + 1 + 2;

/** Where the value ends in the wire record at `s` (its producer id, key and value lengths walked). */
export function valueEndOf(b: Buffer, s: number): number {
  const k = s + 18 + ((b[s + 16]! << 8) | b[s + 17]!);
  const v = k + 10 + ((b[k]! << 8) | b[k + 1]!);
  return v + 4 + r32u(b, v);
}

/**
 * A scanned produce frame this layout can hold: no producer id on a plain append's records (the per-record
 * layout drops it). A frame without extensions is blockable too: each record gets a timestamp, attributes
 * and a header count of 0 (EXT_TAIL), so its records move apart after their copy (stampLegacyRecords).
 */
export function wireBlockable(batch: ScannedBatch): boolean {
  if (batch.count === 0) return false;
  if (batch.idempotent) return true;
  const { body, starts } = batch;
  for (let i = 0; i < batch.count; i++) {
    const s = starts[i]!;
    if (body[s + 16] !== 0 || body[s + 17] !== 0) return false;
  }
  return true;
}

/** What a record of a frame without extensions gets in a block: timestamp i64, attributes u8, header count u16. */
const EXT_TAIL = 8 + 1 + 2;
const TWO_32 = 0x100000000;

/** Bytes a blockable frame's block takes. */
export function blockSize(batch: ScannedBatch): number {
  return BLOCK_HEADER_BYTES + batch.starts[batch.count]! - batch.starts[0]! + (batch.extensions ? 0 : EXT_TAIL * batch.count);
}

/** Where record i of a blockable frame lies in its block written at `pos` (the frame's positions, moved). */
export function blockRecordStart(batch: ScannedBatch, pos: number, i: number): number {
  return pos + BLOCK_HEADER_BYTES + batch.starts[i]! - batch.starts[0]! + (batch.extensions ? 0 : EXT_TAIL * i);
}

/** What an append stamps on its block. */
export interface BlockStamp {
  baseOffset: number;
  /** The append's time: the timestamp of records sent without one. */
  now: number;
  /** BLOCK_TRANSACTIONAL / BLOCK_CONTROL (BLOCK_IDEMPOTENT is the frame's). */
  flags: number;
  /** An idempotent append's first sequence (the frame's records are numbered from it). */
  firstSequence: number;
}

/**
 * Writes a blockable frame's records (wireBlockable) as one block at `pos` of `buf` (blockSize bytes of
 * room). Returns the end.
 */
export function writeBlockFromWire(batch: ScannedBatch, buf: Buffer, pos: number, stamp: BlockStamp): number {
  const { body, starts, count } = batch;
  const s0 = starts[0]!;
  const at = pos + BLOCK_HEADER_BYTES;
  const bytes = starts[count]! - s0 + (batch.extensions ? 0 : EXT_TAIL * count);
  let maxTs: number;
  if (batch.extensions) {
    buf.set(new Uint8Array(body.buffer, body.byteOffset + s0, bytes), at);
    maxTs = stampRecords(batch, buf, at - s0, stamp);
  } else {
    maxTs = stampLegacyRecords(batch, buf, at, stamp);
  }
  writeBlockHeader(batch, buf, pos, new Uint8Array(buf.buffer, buf.byteOffset + at, bytes), stamp, maxTs);
  return at + bytes;
}

/**
 * A frame whose block is stamped in its own buffer rather than copied (stampBlockInPlace): one with
 * extensions (its records are the block's bytes as they are) and at least this many record bytes, below
 * which the write arena's shared blocks cost less than a chunk of the tail cache per frame (about 300
 * bytes of objects). At W2's frames of about 10 KiB the copy into fresh arena memory cost more than the
 * chunk: the frame pool's memory is used again, the arena's is new (bench/README.md, "latency").
 */
export const IN_PLACE_MIN_BYTES = 4 * 1024;

/**
 * From this size a block stamped in place is always written alone; a smaller one joins other appends
 * waiting (copied into their write) rather than cost a write of its own (log-write-queue.ts nextGroup).
 */
export const IN_PLACE_ALONE_BYTES = 16 * 1024;

/**
 * Whether a blockable frame is stamped in place: with extensions, large (IN_PLACE_MIN_BYTES), and owning
 * nearly all of its buffer. The tail cache then keeps the frame's buffer (docs/architecture.md, "Stored
 * batches"), charged whole: a frame cut out of a larger socket read would pin the rest of that read.
 */
export function inPlaceBlockable(batch: ScannedBatch): boolean {
  if (!batch.extensions) return false;
  const bytes = batch.starts[batch.count]! - batch.starts[0]!;
  return bytes >= IN_PLACE_MIN_BYTES && batch.body.buffer.byteLength - bytes <= 4096;
}

/**
 * writeBlockFromWire without the copy, for a frame inPlaceBlockable accepts: stamps its records where
 * they lie in the frame's buffer (nothing reads the frame's bytes after its append) and writes the block's
 * header at `hpos` of `header` (BLOCK_HEADER_BYTES of room). Returns the records: the header, then them,
 * are the block.
 */
export function stampBlockInPlace(batch: ScannedBatch, header: Buffer, hpos: number, stamp: BlockStamp): Buffer {
  const { body, starts, count } = batch;
  const maxTs = stampRecords(batch, body, 0, stamp);
  const records = body.subarray(starts[0]!, starts[count]!);
  writeBlockHeader(batch, header, hpos, records, stamp, maxTs);
  return records;
}

/** The wire record attributes of a block of `flags`. */
function wireAttributes(flags: number): number {
  return ((flags & BLOCK_TRANSACTIONAL) !== 0 ? WIRE_TRANSACTIONAL : 0) | ((flags & BLOCK_CONTROL) !== 0 ? WIRE_CONTROL : 0);
}

/**
 * Stamps the records of a frame with extensions, which `buf` holds moved by `shift` (`buf` is the frame's
 * own buffer with shift 0 when stamped in place). Returns the largest timestamp.
 */
function stampRecords(batch: ScannedBatch, buf: Buffer, shift: number, stamp: BlockStamp): number {
  const { starts, count } = batch;
  const idempotent = batch.idempotent;
  const attributes = wireAttributes(stamp.flags);
  const now = stamp.now;
  let maxTs = 0;
  for (let i = 0; i < count; i++) {
    const s = starts[i]! + shift;
    w64(buf, s, stamp.baseOffset + i);
    if (idempotent) {
      w64(buf, s + 8, stamp.firstSequence + i);
    } else {
      for (let j = 8; j < 16; j++) buf[s + j] = 0;
    }
    const k = s + 18 + ((buf[s + 16]! << 8) | buf[s + 17]!);
    const e = k + 2 + ((buf[k]! << 8) | buf[k + 1]!);
    // A plain append's records have no epoch (the per-record layout stores -1).
    if (!idempotent) for (let j = 0; j < 8; j++) buf[e + j] = 0xff;
    const ve = e + 12 + r32u(buf, e + 8);
    let ts = r64n(buf, ve);
    if (!(ts > 0)) {
      ts = now;
      w64(buf, ve, ts);
    }
    if (ts > maxTs) maxTs = ts;
    buf[ve + 8] = attributes;
  }
  return maxTs;
}

/**
 * Bytes of records copied at once before they are moved apart (stampLegacyRecords) or together
 * (writeRunCutAtValues): small enough that the moves find them in the CPU's cache, which a whole block of
 * large records would not be (at 4 KiB a record, a block in one copy cost more than a copy per record).
 */
const RUN_BYTES = 8 * 1024;
/** A record this large gains nothing from a shared copy: it would be moved after it. */
const LARGE_RECORD_BYTES = 2 * 1024;

/**
 * Writes the records of a frame without extensions at `at` of `buf`, each followed by its EXT_TAIL (the
 * append time as its timestamp: such a record has none, the block's attributes, no headers), and stamps
 * them. A run of records (RUN_BYTES) goes in one copy to where its first record goes, then each of the
 * others moves up past the tails before it (copyWithin, the last first), which costs less than a view and
 * a copy per record; the fixed-width fields go through a DataView, one write each rather than one per
 * byte. Returns the largest timestamp.
 */
function stampLegacyRecords(batch: ScannedBatch, buf: Buffer, at: number, stamp: BlockStamp): number {
  const { body, starts, count } = batch;
  const dv = new DataView(buf.buffer, buf.byteOffset, buf.length);
  const idempotent = batch.idempotent;
  const attributes = wireAttributes(stamp.flags);
  const now = stamp.now;
  const nowHi = Math.floor(now / TWO_32);
  const nowLo = now - nowHi * TWO_32;
  // The offset as two words, counted up: no division per record.
  let offHi = Math.floor(stamp.baseOffset / TWO_32);
  let offLo = stamp.baseOffset - offHi * TWO_32;
  const seq0 = stamp.firstSequence;
  let s = at;
  for (let i = 0; i < count; ) {
    const a = starts[i]!;
    let j = i + 1;
    while (j < count && starts[j + 1]! - a <= RUN_BYTES) j++;
    buf.set(new Uint8Array(body.buffer, body.byteOffset + a, starts[j]! - a), s);
    // Record k's place ends EXT_TAIL before record k + 1's, already moved: no record is overwritten.
    for (let k = j - 1; k > i; k--) {
      const from = s + starts[k]! - a;
      buf.copyWithin(from + EXT_TAIL * (k - i), from, from + starts[k + 1]! - starts[k]!);
    }
    for (let k = i; k < j; k++) {
      dv.setUint32(s, offHi);
      dv.setUint32(s + 4, offLo);
      if (++offLo === TWO_32) {
        offLo = 0;
        offHi++;
      }
      if (idempotent) {
        w64(buf, s + 8, seq0 + k);
      } else {
        dv.setUint32(s + 8, 0);
        dv.setUint32(s + 12, 0);
        // A plain append's records have no epoch (the per-record layout stores -1).
        const key = s + 18 + dv.getUint16(s + 16);
        const e = key + 2 + dv.getUint16(key);
        dv.setInt32(e, -1);
        dv.setInt32(e + 4, -1);
      }
      // The value ends where the record does: a record without extensions ends at its value.
      const ve = s + starts[k + 1]! - starts[k]!;
      dv.setInt32(ve, nowHi);
      dv.setUint32(ve + 4, nowLo);
      buf[ve + 8] = attributes;
      dv.setUint16(ve + 9, 0);
      s = ve + EXT_TAIL;
    }
    i = j;
  }
  return Math.max(now, 0);
}

/** The block header at `pos` of `buf` for `records`, its CRC-32C over the header's fields after it and the records. */
function writeBlockHeader(batch: ScannedBatch, buf: Buffer, pos: number, records: Uint8Array, stamp: BlockStamp, maxTs: number): void {
  w32(buf, pos, (BLOCK_HEADER_BYTES - 4 + records.length + BLOCK_FLAG) >>> 0);
  buf[pos + 8] = BLOCK_VERSION;
  buf[pos + 9] = (stamp.flags & (BLOCK_TRANSACTIONAL | BLOCK_CONTROL)) | (batch.idempotent ? BLOCK_IDEMPOTENT : 0);
  w64(buf, pos + 10, stamp.baseOffset);
  w32(buf, pos + 18, batch.count);
  w64(buf, pos + 22, stamp.now);
  w64(buf, pos + 30, maxTs);
  const fields = crc32c(new Uint8Array(buf.buffer, buf.byteOffset + pos + 8, BLOCK_HEADER_BYTES - 8));
  w32(buf, pos + 4, crc32c(records, fields));
}

/** A block's header fields, as checkBlock found them. */
export interface BlockInfo {
  size: number;
  flags: number;
  baseOffset: number;
  count: number;
  appendTime: number;
  maxTimestamp: number;
}

export type BlockCheck = ({ ok: true } & BlockInfo) | { ok: false; reason: 'incomplete' | 'corrupt'; needed?: number };

const CORRUPT: BlockCheck = { ok: false, reason: 'corrupt' };

/**
 * Checks the block at `pos` (bytes up to `end`): its length, CRC-32C, header, and every record's structure,
 * offset and attributes. Never throws: a short buffer gives 'incomplete' (with `needed` once the length is
 * readable), anything else 'corrupt'.
 */
export function checkBlock(buf: Buffer, pos: number, end: number = buf.length): BlockCheck {
  if (pos < 0 || pos > end) return CORRUPT;
  if (end - pos < 4) return { ok: false, reason: 'incomplete' };
  const word = r32u(buf, pos);
  if (word < BLOCK_FLAG) return CORRUPT;
  const len = word - BLOCK_FLAG;
  if (len < BLOCK_HEADER_BYTES - 4 + MIN_WIRE_RECORD) return CORRUPT;
  const blockEnd = pos + 4 + len;
  if (blockEnd > end) return { ok: false, reason: 'incomplete', needed: 4 + len };
  if (r32u(buf, pos + 4) !== crc32c(new Uint8Array(buf.buffer, buf.byteOffset + pos + 8, len - 4))) return CORRUPT;
  const flags = buf[pos + 9]!;
  if (buf[pos + 8] !== BLOCK_VERSION || flags > 7) return CORRUPT;
  const baseOffset = r64n(buf, pos + 10);
  const count = r32u(buf, pos + 18);
  const appendTime = r64n(buf, pos + 22);
  const maxTimestamp = r64n(buf, pos + 30);
  if (!Number.isSafeInteger(baseOffset) || baseOffset < 0 || !Number.isSafeInteger(baseOffset + count) || count < 1) return CORRUPT;
  if (!Number.isSafeInteger(appendTime) || !Number.isSafeInteger(maxTimestamp)) return CORRUPT;
  const attributes = wireAttributes(flags);
  let p = pos + BLOCK_HEADER_BYTES;
  let maxTs = 0;
  for (let i = 0; i < count; i++) {
    if (blockEnd - p < MIN_WIRE_RECORD || r64n(buf, p) !== baseOffset + i) return CORRUPT;
    const pidLen = (buf[p + 16]! << 8) | buf[p + 17]!;
    if ((flags & BLOCK_IDEMPOTENT) === 0 && pidLen !== 0) return CORRUPT;
    let q = p + 18 + pidLen;
    if (blockEnd - q < 2) return CORRUPT;
    q += 2 + ((buf[q]! << 8) | buf[q + 1]!) + 8;
    if (blockEnd - q < 4) return CORRUPT;
    q += 4 + r32u(buf, q);
    if (blockEnd - q < 11) return CORRUPT;
    const ts = r64n(buf, q);
    if (!Number.isSafeInteger(ts) || ts <= 0 || buf[q + 8] !== attributes) return CORRUPT;
    if (ts > maxTs) maxTs = ts;
    const hc = (buf[q + 9]! << 8) | buf[q + 10]!;
    q += 11;
    for (let h = 0; h < hc; h++) {
      if (blockEnd - q < 2) return CORRUPT;
      q += 2 + ((buf[q]! << 8) | buf[q + 1]!);
      if (blockEnd - q < 4) return CORRUPT;
      q += 4 + r32u(buf, q);
      if (q > blockEnd) return CORRUPT;
    }
    p = q;
  }
  if (p !== blockEnd || maxTs !== maxTimestamp) return CORRUPT;
  return { ok: true, size: blockEnd - pos, flags, baseOffset, count, appendTime, maxTimestamp };
}

/**
 * Writes the CONSUME reply records of the (checked or own) block at `pos`, from offset `from` (inside the
 * block) to its end, at `at` of `dst`: with extensions one copy of the block's bytes, without them each
 * record up to its value. Returns the end; `blockOut.records` is the count written.
 */
export function writeWireFromBlock(src: Buffer, pos: number, from: number, dst: Buffer, at: number, ext: boolean): number {
  const base = r64n(src, pos + 10);
  const count = r32u(src, pos + 18);
  const end = pos + 4 + (r32u(src, pos) - BLOCK_FLAG);
  let p = pos + BLOCK_HEADER_BYTES;
  const skip = from - base;
  for (let i = 0; i < skip; i++) p = recordEnd(src, p);
  blockOut.records = count - skip;
  if (ext) {
    dst.set(new Uint8Array(src.buffer, src.byteOffset + p, end - p), at);
    return at + end - p;
  }
  return writeRunCutAtValues(src, p, end, dst, at);
}

/** After writeWireFromBlock: the records it wrote; after writeRunCutAtValues: their value bytes. */
export const blockOut = { records: 0, values: 0 };

/**
 * Writes the run [s, e) of whole wire records with extensions at `at` of `dst` as records without them
 * (each cut after its value, a CONSUME reply without record_extensions_v1); `dst` needs e - s bytes of room
 * at `at`. Returns the end; `blockOut.values` is the value bytes written. The bytes go in windows of one
 * copy (RUN_BYTES, from a record's start), then each record in a window moves down over the tails cut
 * before it (copyWithin, in order: a record's place ends before where the next one lies), which costs less
 * than a view and a copy per record.
 */
export function writeRunCutAtValues(src: Buffer, s: number, e: number, dst: Buffer, at: number): number {
  let values = 0;
  // src's bytes up to `copied` are in dst, moved by `lift`.
  let copied = s;
  let lift = 0;
  for (let p = s; p < e; ) {
    const k = p + 18 + ((src[p + 16]! << 8) | src[p + 17]!);
    const v = k + 10 + ((src[k]! << 8) | src[k + 1]!);
    const vl = r32u(src, v);
    const ve = v + 4 + vl;
    if (ve > copied) {
      // A new window, from this record: it goes where it is copied. A large record is copied alone.
      copied = ve - p >= LARGE_RECORD_BYTES ? ve : Math.min(e, Math.max(p + RUN_BYTES, ve));
      dst.set(new Uint8Array(src.buffer, src.byteOffset + p, copied - p), at);
      lift = at - p;
    } else if (at !== p + lift) dst.copyWithin(at, p + lift, ve + lift);
    values += vl;
    at += ve - p;
    const hc = (src[ve + 9]! << 8) | src[ve + 10]!;
    p = ve + 11;
    for (let h = 0; h < hc; h++) {
      p += 2 + ((src[p]! << 8) | src[p + 1]!);
      p += 4 + r32u(src, p);
    }
  }
  blockOut.values = values;
  return at;
}

/** Where the wire record (with extensions) at `p` ends. */
export function recordEnd(b: Buffer, p: number): number {
  let q = valueEndOf(b, p);
  const hc = (b[q + 9]! << 8) | b[q + 10]!;
  q += 11;
  for (let h = 0; h < hc; h++) {
    q += 2 + ((b[q]! << 8) | b[q + 1]!);
    q += 4 + r32u(b, q);
  }
  return q;
}

/**
 * Rewrites the (checked) block at `pos` of `buf` in place as the block of its first `keep` records (at least
 * 1, fewer than its count): same base offset, flags and append time, the kept records' count and largest
 * timestamp, the new length and CRC. Returns the new block's end; its records' bytes do not move, so only
 * the header (BLOCK_HEADER_BYTES) changes (a truncation inside a block, segment-cut.ts).
 */
export function shortenBlock(buf: Buffer, pos: number, keep: number): number {
  let p = pos + BLOCK_HEADER_BYTES;
  let maxTs = 0;
  for (let i = 0; i < keep; i++) {
    const ts = r64n(buf, valueEndOf(buf, p));
    if (ts > maxTs) maxTs = ts;
    p = recordEnd(buf, p);
  }
  w32(buf, pos, (p - pos - 4 + BLOCK_FLAG) >>> 0);
  w32(buf, pos + 18, keep);
  w64(buf, pos + 30, maxTs);
  w32(buf, pos + 4, crc32c(new Uint8Array(buf.buffer, buf.byteOffset + pos + 8, p - pos - 8)));
  return p;
}

/**
 * A log truncation's cut of the segment it keeps, prepared before the log changes (log-truncate.ts). A
 * compacted segment's index file is the only record of the flag (docs/architecture.md "Storage",
 * Compaction): without it, recovery would scan the segment as not compacted, end it at its last record + 1
 * below the cut, and drop every later segment as not contiguous. So its next index file is written to a
 * temp file and fsynced here, and the cut renames it over the old one, which needs no file descriptor.
 */
import { unlink } from 'node:fs/promises';
import { dirname } from 'node:path';
import { BLOCK_HEADER_BYTES, checkBlock, shortenBlock } from './append-block.js';
import { inspectBlock } from './block-records.js';
import { storageError, writeFileSynced } from './log-fs.js';
import { OffsetIndex, serializeIndex } from './offset-index.js';
import { ATTR_END_OF_APPEND, ATTRIBUTES_AT, ageTimestamp, markEndOfAppend } from './record-codec.js';
import type { Segment } from './segment.js';

/** Where a segment is cut (Segment.truncateTo). */
export interface SegmentCut {
  /** The first offset dropped. */
  offset: number;
  /** File position of the first record dropped (a cut inside a block: the shortened block's end). */
  position: number;
  /** Of the records kept; -1 when none. */
  maxTimestamp: number;
  /** A compacted segment's next index file (not synced: recovery scans the log, and keeps the flag). */
  tmpIndex: string | null;
  /**
   * A cut inside an append: the last record kept, rewritten to end an append (its first bytes, up to and
   * with its attributes, and its new CRC), written at `position` before the cut. Without it recovery would
   * cut the kept records as an incomplete append (docs/architecture.md "Storage", Atomic appends).
   */
  endMark: { position: number; bytes: Buffer } | null;
  /**
   * A cut inside an append block: `endMark` is that block's rewritten header (shortenBlock), `position` the
   * shortened block's end, and this the old block's end, where the file is cut (and synced) before the
   * header is written, so no valid unit follows the dropped records' bytes (Segment.truncateTo).
   */
  blockEnd: number | null;
}

/** Reads where `seg` is cut at `offset` (at or above its base) and writes a compacted one's next index. */
export async function prepareCut(seg: Segment, offset: number): Promise<SegmentCut> {
  if (offset >= seg.nextOffset) return { offset, position: seg.size, maxTimestamp: seg.maxTimestamp, tmpIndex: null, endMark: null, blockEnd: null };
  const unit = offset <= seg.baseOffset ? null : await seg.unitOf(offset);
  const inBlock = unit?.inside ? await blockCut(seg, unit.position, unit.size, offset) : null;
  const position = inBlock?.end ?? unit?.position ?? 0;
  let maxTimestamp = inBlock?.maxTimestamp ?? -1;
  let last: { position: number; size: number; attributes: number } | null = null;
  // A record without a timestamp was appended no later than now, nor than the segment's age: the age may
  // come from a record this cut drops (one stamped in the future would keep the segment for ever).
  const appendedBy = Math.min(seg.maxTimestamp, Date.now());
  await seg.scan(0, unit?.position ?? 0, (r) => {
    const age = ageTimestamp(r.timestamp, appendedBy);
    if (age > maxTimestamp) maxTimestamp = age;
    last = { position: r.position, size: r.size, attributes: r.attributes };
    return true;
  });
  // A shortened block ends its append: the unit before it needs no mark.
  const endMark = inBlock !== null ? { position: inBlock.position, bytes: inBlock.header } : await endMarkFor(seg, last);
  const cut: SegmentCut = { offset, position, maxTimestamp, tmpIndex: null, endMark, blockEnd: inBlock?.blockEnd ?? null };
  if (!seg.compacted) return cut;
  const index = new OffsetIndex(seg.baseOffset, seg.index.intervalBytes);
  for (let i = 0; i < seg.index.length && seg.index.entry(i).offset < offset; i++) {
    const e = seg.index.entry(i);
    index.append(e.offset, e.position);
  }
  const meta = {
    baseOffset: seg.baseOffset,
    nextOffset: offset,
    maxTimestamp,
    logSize: position,
    createdMs: Math.floor(seg.createdMs),
    synced: false,
    compacted: true,
  };
  const tmp = `${seg.indexPath}.cut.tmp`;
  try {
    await writeFileSynced(tmp, serializeIndex(meta, index));
  } catch (err) {
    await discardCut({ ...cut, tmpIndex: tmp });
    throw err;
  }
  cut.tmpIndex = tmp;
  return cut;
}

/** The block of `seg` at `position` (`size` bytes), shortened to end before `offset`: its new header and end. */
async function blockCut(seg: Segment, position: number, size: number, offset: number) {
  // Compaction writes no blocks (docs/architecture.md "Stored batches"), and a cut inside one of a compacted
  // segment would need its index and its next segment thought through: a block there is damage.
  if (seg.compacted) throw storageError(dirname(seg.logPath), `truncation to ${offset}`, new Error(`compacted segment ${seg.baseOffset} holds an append block at byte ${position}`));
  const buf = await seg.read(position, size);
  const u = inspectBlock(buf, 0);
  // The scan just checked it: otherwise the file changed under the truncation.
  if (!u.ok || offset <= u.offset || offset >= u.offset + u.block.count) throw new Error(`segment ${seg.baseOffset}: the block at ${position} changed under a truncation`);
  const end = shortenBlock(buf, 0, offset - u.offset);
  const check = checkBlock(buf, 0, end);
  if (!check.ok) throw new Error(`segment ${seg.baseOffset}: the block at ${position} could not be shortened`);
  return {
    position,
    header: buf.subarray(0, BLOCK_HEADER_BYTES),
    end: position + end,
    blockEnd: position + size,
    maxTimestamp: check.maxTimestamp,
  };
}

/** The rewritten start of `last` (the last record kept) when it does not end an append; null when it does. */
async function endMarkFor(seg: Segment, last: { position: number; size: number; attributes: number } | null): Promise<SegmentCut['endMark']> {
  if (last === null || (last.attributes & ATTR_END_OF_APPEND) !== 0) return null;
  const buf = await seg.read(last.position, last.size);
  // The scan just read it whole: shorter, the file changed under the truncation.
  if (buf.length !== last.size) throw new Error(`segment ${seg.baseOffset}: short read of the record at ${last.position}`);
  markEndOfAppend(buf, 0, last.size);
  return { position: last.position, bytes: buf.subarray(0, ATTRIBUTES_AT + 1) };
}

/** A prepared cut that will not be made: its temp file goes (a reopen would remove it too). */
export async function discardCut(cut: SegmentCut | null): Promise<void> {
  if (cut?.tmpIndex) await unlink(cut.tmpIndex).catch(() => {});
}

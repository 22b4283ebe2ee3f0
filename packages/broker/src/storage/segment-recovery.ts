/**
 * Loading one segment on open (docs/architecture.md "Storage", Recovery): its index file is trusted when it
 * vouches for the log file, otherwise every record is checked and the index rebuilt (log-loader.ts runs it
 * for every segment of a partition).
 */
import { stat } from 'node:fs/promises';
import { join } from 'node:path';
import type { SegmentFdPolicy } from './fd-budget.js';
import { type IndexEntry, OffsetIndex, readIndexFile } from './offset-index.js';
import { OrderCheck } from './offset-order.js';
import { ageTimestamp } from './record-codec.js';
import { Segment } from './segment.js';
import { INDEX_SUFFIX, LOG_SUFFIX, segmentFileName } from './segment-names.js';
import { findValidRecord } from './segment-scan.js';

/** What recoverSegment found. */
export interface RecoveryInfo {
  segment: Segment;
  /** Bytes cut from the end of the file (torn or corrupt tail). */
  truncatedBytes: number;
  /** The offset the cut happened at (the new next offset). */
  truncatedAtOffset: number;
  /** Why the tail was cut: 'incomplete' | 'corrupt' | 'offset_gap' | 'incomplete_append'. */
  reason: string | null;
  /** Valid records cut because the append they belonged to was not complete. */
  droppedRecords: number;
  /** The index file was missing, stale or inconsistent and was rebuilt from the log. */
  rebuiltIndex: boolean;
  /**
   * `mayCut` applied and the segment was cut at a bad record (not only an incomplete append at its end):
   * the log ends here, and the caller drops every later segment.
   */
  endsLog: boolean;
  /** The index file says the log file was fsynced whole (it was written after a datasync, at this size). */
  vouched: boolean;
}

/**
 * Damage recovery may not repair: the partition is not opened (docs/operations.md, "A partition that does
 * not open"). The message names the file and the byte position (or the offsets) at fault.
 */
export class SegmentDamage extends Error {
  constructor(
    readonly file: string,
    readonly position: number | null,
    detail: string,
  ) {
    super(`${file}${position === null ? '' : ` at byte ${position}`}: ${detail}; the partition is not opened, nothing was cut or removed (restore or remove the file: docs/operations.md)`);
    this.name = 'SegmentDamage';
  }
}

/** What a scan failure is, for SegmentDamage; `expected`: the lowest offset the failed record could have had. */
function describeFailure(reason: string, expected: number): string {
  if (reason === 'offset_gap') return `a record out of offset order (offset ${expected} or above expected)`;
  if (reason === 'incomplete') return 'a record that runs past the end of the file';
  return `a corrupt record (bad length, CRC or layout) where offset ${expected} or above was expected`;
}

/**
 * Loads an existing segment. The index file is trusted only when `fullScan` is false, its CRC and
 * metadata match the file, the log was fsynced before it was written, and the records after its last
 * entry decode to exactly its next offset. Otherwise every record is validated (length, CRC, offset
 * order) and the index is rebuilt. Only the `last` segment may be cut (after the last record that ends a
 * complete append), and only where no valid record follows the bad one (a torn tail). A closed segment was
 * fsynced at its roll before the next segment took an append, so it never has a torn tail: a bad record
 * in it is damage, as is one in the last segment with a valid record after it: SegmentDamage, the file
 * unchanged. `mayCut` (a crash under --flush interval or os): unless the index vouches for the file, a bad
 * record is cut with everything after it, in any segment (`endsLog`).
 */
export async function recoverSegment(
  dir: string,
  baseOffset: number,
  opts: { intervalBytes: number; fullScan: boolean; last: boolean; fds?: SegmentFdPolicy; mayCut?: boolean },
): Promise<RecoveryInfo> {
  const logPath = join(dir, segmentFileName(baseOffset, LOG_SUFFIX));
  const indexPath = join(dir, segmentFileName(baseOffset, INDEX_SUFFIX));
  const st = await stat(logPath);
  const fileSize = st.size;
  const loaded = await readIndexFile(indexPath, opts.intervalBytes);
  const metaOk = loaded !== null && loaded.meta.baseOffset === baseOffset;
  const createdMs = metaOk ? loaded.meta.createdMs : st.birthtimeMs > 0 ? st.birthtimeMs : st.mtimeMs;
  // Only the index knows a segment was compacted (its nextOffset may lie past its last record).
  const compacted = metaOk && loaded.meta.compacted === true;
  const vouched = metaOk && loaded.meta.synced && loaded.meta.logSize === fileSize;
  // After a crash under --flush interval or os, bytes no fsync covered may be torn, zeroed or missing in
  // any order (log-loader.ts): a bad record in them ends the log, whatever follows it.
  const cutAny = opts.mayCut === true && !vouched;

  if (!opts.fullScan && vouched) {
    const seg = new Segment(
      dir,
      baseOffset,
      loaded.index,
      {
        size: fileSize,
        nextOffset: loaded.meta.nextOffset,
        maxTimestamp: loaded.meta.maxTimestamp,
        createdMs,
      },
      opts.fds,
    );
    seg.compacted = compacted;
    if (await tailMatchesIndex(seg)) {
      seg.indexState = 'synced';
      return { segment: seg, truncatedBytes: 0, truncatedAtOffset: seg.nextOffset, reason: null, droppedRecords: 0, rebuiltIndex: false, endsLog: false, vouched };
    }
    await seg.close();
  }

  const seg = new Segment(
    dir,
    baseOffset,
    new OffsetIndex(baseOffset, opts.intervalBytes),
    {
      size: fileSize,
      nextOffset: baseOffset,
      maxTimestamp: -1,
      createdMs,
    },
    opts.fds,
  );
  seg.compacted = compacted;
  try {
    const order = new OrderCheck(baseOffset, false);
    let maxTs = -1;
    // End of the last complete append: a torn append is cut as a whole.
    let valid = 0;
    let next = baseOffset;
    let validMaxTs = -1;
    let partial = 0;
    const index = seg.index;
    let reason: string | null = null;
    const out = await seg.scan(0, fileSize, (r) => {
      if (!order.accept(r.offset, r.attributes, r.lastOffset)) {
        reason = 'offset_gap';
        return false;
      }
      index.onRecord(r.offset, r.position);
      // A record without a timestamp counts as of the file's last write (Kafka's fallback, lastModified).
      const age = ageTimestamp(r.timestamp, st.mtimeMs);
      if (age > maxTs) maxTs = age;
      if (order.inAppend) {
        partial++;
      } else {
        valid = r.position + r.size;
        next = r.lastOffset + 1;
        validMaxTs = maxTs;
        partial = 0;
      }
      return true;
    });
    const failure = reason ?? out.failure;
    if (!opts.last && !(cutAny && failure !== null)) {
      if (failure !== null) throw new SegmentDamage(logPath, out.position, `${describeFailure(failure, order.next)} in a closed segment`);
      // Its last append may lack its end mark only where a truncation cut inside an append and a roll
      // followed: its records are whole and fsynced, and the next segment starts after them.
      valid = out.position;
      next = order.next;
      validMaxTs = maxTs;
      partial = 0;
    } else if (failure !== null && !cutAny) {
      // A torn tail is the bytes of appends never acknowledged, at the end of the file: nothing valid
      // follows them. A valid record after the bad one (a flipped byte, not a crash) means acknowledged
      // appends would go with the cut: cutting there, as recovery once did, lost them without a word.
      const after = await findValidRecord((p, n) => seg.read(p, n), out.position, fileSize, order.next);
      if (after !== null) {
        throw new SegmentDamage(
          logPath,
          out.position,
          `${describeFailure(failure, order.next)} in the last segment, followed by a valid record at byte ${after.position} (offset ${after.offset}): not a torn tail`,
        );
      }
    }
    reason ??= out.failure ?? (partial > 0 ? 'incomplete_append' : null);
    index.truncateToOffset(next);
    if (valid < fileSize) await seg.withHandle((fh) => fh.truncate(valid));
    seg.setRecovered(valid, next, validMaxTs);
    // Make the cut (and whatever the scan accepted) durable before the index vouches for it.
    await seg.datasync();
    const endsLog = cutAny && failure !== null;
    // A closed segment's rebuilt index vouches for it only once log-loader.ts found the next segment
    // starting where it ends, or removed the later ones (a cut that ends the log), and writes it then:
    // whether the segment lost its tail shows only there. Written as vouching at once, a crash before the
    // removal left the later segments after a segment whose index said it was whole, and an open refused
    // for the gap (under --flush always) left an index that had the next open under os refuse the gap it
    // should cut. The old index vouched: the file is what that fsync covered, and stays vouched for.
    if (opts.last || vouched) await seg.writeIndex(true);
    return {
      segment: seg,
      truncatedBytes: fileSize - valid,
      truncatedAtOffset: next,
      reason: valid < fileSize ? reason : null,
      droppedRecords: partial,
      rebuiltIndex: true,
      endsLog,
      // Scanned whole (its index disagreed with it, or this is the last segment after a crash) and nothing
      // cut: the file is still what the fsync its index vouched for covered, and lost no tail. Said false,
      // log-loader.ts took a gap after it for its lost tail and removed every later segment, while the scan
      // here had refused damage inside it as vouched for.
      vouched: vouched && valid === fileSize,
    };
  } catch (err) {
    await seg.close().catch(() => {});
    throw err;
  }
}

/**
 * Cheap consistency check of a loaded index: the records after its last entry are in order, end with a
 * complete append exactly at size, and at nextOffset (before it, once compacted).
 */
async function tailMatchesIndex(seg: Segment): Promise<boolean> {
  const last = seg.index.last();
  const start: IndexEntry = last ?? { offset: seg.baseOffset, position: 0 };
  if (start.position > seg.size || seg.nextOffset < start.offset) return false;
  if (seg.size === 0) return (seg.compacted || seg.nextOffset === seg.baseOffset) && seg.index.length === 0;
  const order = new OrderCheck(start.offset, last !== null);
  let tsOk = true;
  const out = await seg.scan(start.position, seg.size, (r) => {
    if (!order.accept(r.offset, r.attributes, r.lastOffset)) return false;
    if (r.timestamp > seg.maxTimestamp) tsOk = false;
    return true;
  });
  const endOk = seg.compacted ? order.next <= seg.nextOffset : order.next === seg.nextOffset;
  return out.failure === null && out.position === seg.size && !order.inAppend && endOk && tsOk;
}

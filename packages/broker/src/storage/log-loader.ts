/**
 * Recovery of a partition log on open (docs/architecture.md, "Storage"): leftovers of interrupted writes are
 * removed, every segment is recovered (the last one scanned record by record unless the previous shutdown was
 * clean; only it may lose a torn tail), segments that are not contiguous refuse the open (SegmentDamage), and
 * the clean-shutdown marker is removed before the log takes any append. After a crash under --flush
 * interval or os, what no fsync vouches for is cut at its first bad record or gap instead, later segments
 * removed.
 */
import { mkdir, readdir, rm, unlink } from 'node:fs/promises';
import { join } from 'node:path';
import type { Logger } from 'pino';
import { readHwmCheckpoint } from './hwm-checkpoint.js';
import { fsyncDir, RELEASED_SUFFIX, storageError } from './log-fs.js';
import { readTombstoneHorizon, TOMBSTONE_HORIZON_FILE } from './tombstone-horizon.js';
import type { SegmentFdPolicy } from './fd-budget.js';
import type { LogOptions } from './log-options.js';
import { Segment } from './segment.js';
import { recoverSegment, SegmentDamage } from './segment-recovery.js';
import { INDEX_SUFFIX, LOG_SUFFIX, parseSegmentFileName, segmentFileName } from './segment-names.js';

export const CLEAN_SHUTDOWN_FILE = 'clean-shutdown';

export interface LoadedLog {
  segments: Segment[];
  /** The previous shutdown was clean (its marker was there). */
  clean: boolean;
  /** The HWM checkpoint (0 when there is none), not yet clamped to the segments. */
  checkpointedHwm: number;
  /** The tombstone horizon (tombstone-horizon.ts): 0 without its file. */
  tombstoneHorizon: number;
}

/**
 * Opens (creating if needed) the segments in `dir` and runs recovery, after removing a `<dir>.deleting`
 * leftover. `lazy`: a directory without segment files is left as it is (or absent) and gives no segments,
 * a dormant log (log-state.ts).
 */
export async function loadLog(dir: string, o: LogOptions, log: Logger, opts: { lazy?: boolean } = {}, fds?: SegmentFdPolicy): Promise<LoadedLog> {
  // A release cut short by a crash (PartitionLog.release): what was renamed away is never adopted.
  await rm(dir + RELEASED_SUFFIX, { recursive: true, force: true }).catch((err: unknown) => log.warn({ err }, 'could not remove a released log directory'));
  if (opts.lazy) {
    const names = await readdir(dir).catch((err: NodeJS.ErrnoException): string[] => {
      if (err.code === 'ENOENT') return [];
      throw storageError(dir, 'recovery failed', err);
    });
    if (!names.some((n) => parseSegmentFileName(n)?.kind === 'log')) {
      // A replica being added learns its leader's horizon before its first record (cluster/tombstone-horizon.ts).
      const tombstoneHorizon = names.includes(TOMBSTONE_HORIZON_FILE) ? await readTombstoneHorizon(dir, log, 0) : 0;
      return { segments: [], clean: false, checkpointedHwm: 0, tombstoneHorizon };
    }
  }
  await mkdir(dir, { recursive: true });
  const names = await readdir(dir);
  const clean = names.includes(CLEAN_SHUTDOWN_FILE);
  const logBases = new Set<number>();
  for (const n of names) {
    const p = parseSegmentFileName(n);
    if (p?.kind === 'log') logBases.add(p.baseOffset);
  }
  for (const n of names) {
    const p = parseSegmentFileName(n);
    // Leftovers of interrupted writes/deletions.
    if (n.endsWith('.tmp') || (p?.kind === 'index' && !logBases.has(p.baseOffset))) await unlink(join(dir, n)).catch(() => {});
  }
  const bases = [...logBases].sort((a, b) => a - b);

  const segments: Segment[] = [];
  // The last segment kept had its index rebuilt from the log (its file was missing, stale or unreadable).
  let prevRebuilt = false;
  let prevVouched = true;
  // After a crash under --flush interval or os, what no fsync covered may have reached the disk in any
  // order, or not at all (a power loss): a bad record or a gap in it ends the log there, and later
  // segments go, as Kafka recovers past its recovery point. With --flush always every acknowledged append
  // was fsynced, so damage is refused instead (docs/architecture.md "Storage", Recovery).
  // Journaled, the journal holds what a segment lacks (journal-replay.ts): the segment recovers as under interval.
  const mayCut = !clean && (o.flush !== 'always' || o.journal !== undefined);
  // Under interval a roll fsyncs the segment it closes before the next one exists: only the last segment
  // can hold bytes no fsync covered. A closed one whose index was lost (written in place, never fsynced)
  // is still what its fsync made it, so damage or a gap after it is refused: cutting there removed the
  // fsynced segments after it.
  const closedMayCut = mayCut && o.flush === 'os';
  const warnDropped = (cutAt: number, gone: number[], why: string, more: object = {}): void => {
    log.warn({ flush: o.flush, cutAt, removedSegments: gone, reason: why, ...more }, `recovery after an unclean shutdown with --flush ${o.flush}: the log ends at offset ${cutAt}; ${gone.length} later segment(s) removed (data no fsync had covered)`);
  };
  const dropFrom = async (i: number): Promise<number[]> => {
    const gone = bases.slice(i);
    for (const b of gone) {
      await unlink(join(dir, segmentFileName(b, LOG_SUFFIX)));
      await unlink(join(dir, segmentFileName(b, INDEX_SUFFIX))).catch(() => {});
    }
    // The removals are on disk before the segment that now ends the log vouches for its cut size: after a
    // crash a vouched segment followed by a gap is refused, not cut again.
    await fsyncDir(dir);
    return gone;
  };
  try {
    for (let i = 0; i < bases.length; i++) {
      const isLast = i === bases.length - 1;
      const info = await recoverSegment(dir, bases[i], { intervalBytes: o.indexIntervalBytes, fullScan: !clean && isLast, last: isLast, fds, mayCut: isLast ? mayCut : closedMayCut });
      const seg = info.segment;
      if (info.truncatedBytes > 0) {
        log.warn(
          {
            segment: seg.baseOffset,
            truncatedBytes: info.truncatedBytes,
            atOffset: info.truncatedAtOffset,
            reason: info.reason,
            droppedRecords: info.droppedRecords,
          },
          `recovery cut ${info.truncatedBytes} bytes of torn/corrupt log at offset ${info.truncatedAtOffset}` +
            (info.droppedRecords > 0 ? ` (including ${info.droppedRecords} valid records of an incomplete append)` : ''),
        );
      } else if (info.rebuiltIndex && !isLast) {
        log.info({ segment: seg.baseOffset }, 'rebuilt segment index');
      }
      const prev = segments[segments.length - 1];
      if (prev && !prev.compacted && prevRebuilt && o.cleanupPolicy === 'compact' && seg.baseOffset > prev.nextOffset) {
        // Its index file, the only record of the compacted flag, was lost or unreadable: on a compacted
        // topic a gap after its last record is what compaction leaves (superseded records, an emptied
        // segment removed after it was stretched over). Taking it for missing data refused the open (it
        // once deleted every later segment, the committed offsets of __consumer_offsets with them).
        log.warn({ segment: prev.baseOffset, lastRecordEnds: prev.nextOffset, nextSegment: seg.baseOffset }, 'segment index lost on a compacted topic: the segment is taken as compacted and reaches the next one');
        prev.compacted = true;
        prev.nextOffset = seg.baseOffset;
        // The log was fsynced by its scan: the flag is on disk before anything else happens.
        await prev.writeIndex(true);
      }
      // A compacted segment may end in a gap (its newest records were superseded): it reaches the next one.
      if (prev?.compacted && seg.baseOffset > prev.nextOffset) {
        prev.nextOffset = seg.baseOffset;
        prev.markModified();
      }
      if (prev && seg.size === 0 && seg.baseOffset < prev.nextOffset) {
        // A roll that failed after creating the file (a crash between its two writes, or an unlink that
        // failed too): the old segment went on past its base. Or a segment compaction emptied, whose
        // predecessor was stretched over it before a crash came between that and its removal. It holds
        // nothing; the rest of the log is whole.
        log.warn({ segment: seg.baseOffset, previousEnds: prev.nextOffset }, 'removing an empty segment left by a failed roll or by compaction');
        await seg.remove();
        continue;
      }
      if (prev && seg.baseOffset > prev.nextOffset && closedMayCut && !prevVouched) {
        // The segment before lost its tail: it is the last now, recovered as one (a torn append is cut whole).
        await seg.close();
        const gone = await dropFrom(i);
        segments.pop();
        await prev.close();
        const again = await recoverSegment(dir, prev.baseOffset, { intervalBytes: o.indexIntervalBytes, fullScan: true, last: true, fds, mayCut });
        segments.push(again.segment);
        // Said once it is recovered as the last: an incomplete append at its end went too, and the log ends
        // where that left it (the warning said prev.nextOffset, an offset the next append then took).
        warnDropped(again.segment.nextOffset, gone, `offsets ${prev.nextOffset}..${seg.baseOffset - 1} missing`, { droppedRecords: again.droppedRecords });
        break;
      }
      if (prev && seg.baseOffset !== prev.nextOffset) {
        // A segment file gone or cut short, or one that overlaps the one before: dropping the later
        // segments (as this once did) lost acknowledged records and let their offsets be given out again.
        await seg.close();
        throw new SegmentDamage(
          seg.logPath,
          null,
          seg.baseOffset > prev.nextOffset
            ? `starts at offset ${seg.baseOffset}, but ${prev.logPath} ends at ${prev.nextOffset}: offsets ${prev.nextOffset}..${seg.baseOffset - 1} are missing (a segment file gone or cut short${o.cleanupPolicy === 'compact' ? '' : '; the topic is not compacted'})`
            : `starts at offset ${seg.baseOffset}, inside ${prev.logPath}, which ends at ${prev.nextOffset}`,
        );
      }
      // The segment before it is whole up to here: its rebuilt index (scanned and fsynced) may now vouch for it.
      if (prev && prevRebuilt && prev.indexState !== 'synced') await prev.writeIndex(true);
      segments.push(seg);
      prevRebuilt = info.rebuiltIndex;
      prevVouched = info.vouched;
      if (info.endsLog && !isLast) {
        warnDropped(seg.nextOffset, await dropFrom(i + 1), info.reason ?? 'a bad record');
        // Its log was fsynced at the cut; recoverSegment left the index unvouched until the drop was durable.
        await seg.writeIndex(true);
        break;
      }
    }
    if (segments.length === 0) {
      segments.push(await Segment.create(dir, 0, o.indexIntervalBytes, Date.now(), fds));
    }
    // Release fds of old segments; reads reopen them on demand.
    for (let i = 0; i < segments.length - 2; i++) await segments[i].release();
  } catch (err) {
    for (const s of segments) await s.close().catch(() => {});
    throw storageError(dir, 'recovery failed', err);
  }

  // The marker must be gone (durably) before any append, or a later crash would skip recovery: a marker
  // that cannot be removed fails the open rather than being left for a crash to pass as a clean stop.
  try {
    if (clean) await unlink(join(dir, CLEAN_SHUTDOWN_FILE)).catch((err: NodeJS.ErrnoException) => {
      if (err.code !== 'ENOENT') throw err;
    });
    await fsyncDir(dir);
  } catch (err) {
    for (const s of segments) await s.close().catch(() => {});
    throw storageError(dir, clean ? 'cannot remove the clean-shutdown marker' : 'cannot fsync the recovered directory', err);
  }
  const end = segments[segments.length - 1].nextOffset;
  return { segments, clean, checkpointedHwm: await readHwmCheckpoint(dir, log), tombstoneHorizon: await readTombstoneHorizon(dir, log, end) };
}

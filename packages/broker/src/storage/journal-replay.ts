/**
 * A log's journal entries replayed as it opens (journal.ts; docs/architecture.md, "The journal"): in
 * order, each write appends what the recovered log lacks of it, each truncation truncates. What recovery
 * kept of the segments is a prefix of the log's history up to its first truncation in the journal (the
 * writes before the last segment fsync are on disk, later ones whole appends or not at all), and a
 * truncation brings that history back in step, so a write ending below the log end is already there.
 */
import type { Logger } from 'pino';
import { isBlockAt } from './block-records.js';
import type { JournalEntry } from './journal-format.js';
import { storageError } from './log-fs.js';
import type { Segment } from './segment.js';
import { StoredAppends } from './stored-appends.js';

/** What replay needs of a PartitionLog (the journal is not active yet, so nothing here is journaled). */
export interface ReplayTarget {
  readonly dir: string;
  readonly logEndOffset: number;
  readonly logger: Logger;
  appendReplica(records: StoredAppends): Promise<unknown>;
  truncateTo(offset: number): Promise<void>;
}

/**
 * Replays the log's entries, then fsyncs every segment holding offsets from the first they concern (and
 * the active one): after a crash of the process alone what recovery found may be in the page cache only,
 * and the journal files go once every log has opened.
 */
export async function replayJournal(log: ReplayTarget, entries: readonly JournalEntry[], segments: () => readonly Segment[]): Promise<void> {
  let from = Number.POSITIVE_INFINITY;
  for (const e of entries) from = Math.min(from, e.kind === 'write' ? e.from : e.kind === 'truncate' ? e.offset : 0);
  const appended = await replayEntries(log, entries);
  const segs = segments();
  for (const s of segs) if (s.nextOffset > from || s === segs[segs.length - 1]) await s.datasync();
  if (appended > 0) log.logger.warn({ appended, logEndOffset: log.logEndOffset }, 'replayed records from the journal that the segments lacked');
}

/** Replays `entries`; resolves with the records appended (the caller then fsyncs the log). */
export async function replayEntries(log: ReplayTarget, entries: readonly JournalEntry[]): Promise<number> {
  let appended = 0;
  for (const e of entries) {
    if (e.kind === 'truncate') {
      if (e.offset < log.logEndOffset) await log.truncateTo(e.offset);
      continue;
    }
    if (e.kind !== 'write' || e.last < log.logEndOffset) continue;
    // Below where the log ended when this was written: records acknowledged before it are missing (damage
    // recovery cut, or a journal entry lost), and appending would hide that as a gap.
    if (log.logEndOffset < e.from) throw storageError(log.dir, `the log ends at ${log.logEndOffset}, but the journal's next write was made on a log ending at ${e.from}: records ${log.logEndOffset}..${e.from - 1} are missing`);
    const all = StoredAppends.parse(e.bytes, 0, e.bytes.length, e.count);
    if (typeof all === 'string') throw storageError(log.dir, `journal entry of offsets ${e.first}..${e.last} is not valid: ${all}`);
    const part = from(all, e, log.logEndOffset);
    if (typeof part === 'string') throw storageError(log.dir, part);
    await log.appendReplica(part);
    appended += part.count;
  }
  return appended;
}

/**
 * The units of `all` from the first at or above `leo`, when every unit before it ends below `leo` (recovery
 * keeps whole appends; a compacted leader's appends, and so a replica's entries, may have gaps between them).
 */
function from(all: StoredAppends, e: { first: number; last: number; count: number; bytes: Buffer }, leo: number): StoredAppends | string {
  if (e.first >= leo) return all;
  const { offsets, starts, buf } = all;
  let before = 0;
  for (let i = 0; i < offsets.length; i++) {
    const n = isBlockAt(buf, starts[i]) ? buf.readUInt32BE(starts[i] + 18) : 1;
    if (offsets[i] >= leo) {
      const part = StoredAppends.parse(buf, starts[i], buf.length, e.count - before);
      return typeof part === 'string' ? `journal entry of offsets ${e.first}..${e.last} cut at ${leo}: ${part}` : part;
    }
    if (offsets[i] + n > leo) break;
    before += n;
  }
  return `the log ends at ${leo}, inside an append of the journal entry of offsets ${e.first}..${e.last}`;
}

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
 * Replays the log's entries, then fsyncs (`syncFrom`) every segment holding offsets from the first they
 * concern: after a crash of the process alone what recovery found may be in the page cache only, and the
 * journal files go once every log has opened.
 */
export async function replayJournal(log: ReplayTarget, entries: readonly JournalEntry[], syncFrom: (offset: number) => Promise<void>): Promise<void> {
  let from = Number.POSITIVE_INFINITY;
  for (const e of entries) from = Math.min(from, e.kind === 'write' ? e.first : e.kind === 'truncate' ? e.offset : 0);
  const appended = await replayEntries(log, entries);
  await syncFrom(from);
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
    const all = StoredAppends.parse(e.bytes, 0, e.bytes.length, e.count);
    if (typeof all === 'string') throw storageError(log.dir, `journal entry of offsets ${e.first}..${e.last} is not valid: ${all}`);
    const part = from(all, e, log.logEndOffset);
    if (typeof part === 'string') throw storageError(log.dir, part);
    await log.appendReplica(part);
    appended += part.count;
  }
  return appended;
}

/** The units of `all` from the one that starts at `leo` (recovery keeps whole appends), or all of them above it. */
function from(all: StoredAppends, e: { first: number; last: number; count: number; bytes: Buffer }, leo: number): StoredAppends | string {
  if (e.first >= leo) return all;
  const { offsets, starts, buf } = all;
  let before = 0;
  for (let i = 0; i < offsets.length; i++) {
    if (offsets[i] === leo) {
      const part = StoredAppends.parse(buf, starts[i], buf.length, e.count - before);
      return typeof part === 'string' ? `journal entry of offsets ${e.first}..${e.last} cut at ${leo}: ${part}` : part;
    }
    if (offsets[i] > leo) break;
    before += isBlockAt(buf, starts[i]) ? buf.readUInt32BE(starts[i] + 18) : 1;
  }
  return `the log ends at ${leo}, inside an append of the journal entry of offsets ${e.first}..${e.last}`;
}

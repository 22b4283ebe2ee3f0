/**
 * Journal files that only failed logs still need (journal.ts, Journal.logFailed): a log that failed refuses
 * appends until a restart, whose replay needs its entries, so the files holding them stay; but every other
 * log's entries in them are covered by its segment fsyncs, and the files after them hold none of its. Such a
 * file is rewritten with the failed logs' entries alone (atomically: a crash leaves the old file or the new
 * one), or deleted when it holds none, so a failed log holds its own entries rather than every file written
 * after it (which grew the journal by its file size again and again until the restart).
 * docs/architecture.md, "The journal".
 */
import { readFile, unlink } from 'node:fs/promises';
import { join } from 'node:path';
import { writeFileAtomic } from './atomic-file.js';
import { journalFileName } from './journal-files.js';
import { decodeEntries, encodeReset, encodeTruncate, encodeWrite, type JournalEntry, journalKey } from './journal-format.js';
import { fsyncDir } from './log-fs.js';

/** What writeFileAtomic names the copy before it replaces the file: one a crash left is deleted at open (Journal.open). */
export const COMPACT_TMP_SUFFIX = '.tmp';

function encodeEntry(e: JournalEntry): Buffer[] {
  const key = journalKey(e.key);
  if (e.kind === 'write') return encodeWrite(key, e.from, e.first, e.last, e.count, [e.bytes]);
  if (e.kind === 'truncate') return encodeTruncate(key, e.offset);
  return encodeReset(key);
}

/**
 * Keeps only the entries of `keep` (log keys), and resets, in the journal file `seq` of `dir`: 'kept' with
 * them rewritten, 'deleted' when it held none. The file is complete (not the one written to), so its entries end where it does.
 */
export async function compactJournalFile(dir: string, seq: number, keep: ReadonlySet<string>): Promise<'kept' | 'deleted'> {
  const file = join(dir, journalFileName(seq));
  const { entries } = decodeEntries(await readFile(file));
  // Every reset too: the set of failed logs shrinks (a failed log released or truncated leaves it), and an
  // older compacted file may still hold such a log's writes, which only its reset keeps from being replayed.
  const kept = entries.filter((e) => keep.has(e.key) || e.kind === 'reset');
  if (kept.length === 0) {
    await unlink(file);
    await fsyncDir(dir);
    return 'deleted';
  }
  if (kept.length < entries.length) {
    await writeFileAtomic(file, Buffer.concat(kept.flatMap(encodeEntry)), { syncDir: true }).catch(async (err: unknown) => {
      // A full disk, say: what was written of the copy goes, the file stays whole.
      await unlink(`${file}${COMPACT_TMP_SUFFIX}`).catch(() => {});
      throw err;
    });
  }
  return 'kept';
}

/**
 * The files of the broker's journal (journal.ts): named by a sequence number, written sequentially with
 * O_DSYNC, so one write call both writes and makes durable a round of entries (one thread-pool round trip
 * rather than a write and an fdatasync). Files are never reused: a reader stops at the first entry that
 * is cut or damaged (journal-format.ts), and nothing older lies past it. Zero-filling a file ahead made
 * each write cheaper (0.16 ms against 0.23 on this machine's disk) but the fill's own writes lengthened
 * the latency tail more than that saved (bench/README.md, "latency").
 */
import { constants, openSync, write } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { failpointRefuse } from '../common/failpoints.js';

export const JOURNAL_SUFFIX = '.journal';

export const journalFileName = (seq: number) => `${String(seq).padStart(16, '0')}${JOURNAL_SUFFIX}`;

export interface JournalFile {
  seq: number;
  fd: number;
  /** Where the next entries go. */
  size: number;
  /** Its directory entry is not known to be durable yet (fsynced before an entry in it is acknowledged). */
  newEntry: boolean;
  /** Rewritten with the entries of failed logs alone (journal-compact.ts); its fd is closed (-1). */
  compacted?: boolean;
}

const writeAt = promisify(write);

/** A new, empty file that grows as it is written (its directory entry is fsynced before its first acknowledgement). */
export function createGrowing(dir: string, seq: number): JournalFile {
  const fd = openSync(join(dir, journalFileName(seq)), constants.O_WRONLY | constants.O_CREAT | constants.O_TRUNC | constants.O_DSYNC, 0o600);
  return { seq, fd, size: 0, newEntry: true };
}

/** Writes `buf` at `at` (O_DSYNC: durable when it resolves), looping over short writes. */
export async function writeDurably(fd: number, buf: Buffer, at: number): Promise<void> {
  if (failpointRefuse('journal.full')) {
    // As a disk that fills up during the write: part of it lands (a short write), then ENOSPC.
    await writeAt(fd, buf, 0, buf.length >> 1, at);
    throw Object.assign(new Error('ENOSPC: no space left on device, write'), { code: 'ENOSPC' });
  }
  for (let done = 0; done < buf.length; ) {
    const n = (await writeAt(fd, buf, done, buf.length - done, at + done)).bytesWritten;
    if (n <= 0) throw new Error('journal write wrote nothing');
    done += n;
  }
}

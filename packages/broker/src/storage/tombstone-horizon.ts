/**
 * The tombstone horizon of a partition log (docs/architecture.md, "Compaction"): 1 + the highest offset of a
 * tombstone that compaction dropped from this log, or that a log this one copied (its leader's) had dropped;
 * 0 when none was. A replica whose log ends at or below it may hold a value that tombstone deleted, and
 * rebuilds its copy from its leader (cluster/tombstone-horizon.ts). Monotonic; one small file, replaced
 * atomically (temp file, fsync, rename, directory fsync) before compaction swaps in a segment without the
 * tombstone, read back on open. A missing file (a log written before the horizon existed) reads as 0.
 */
import { join } from 'node:path';
import type { Logger } from 'pino';
import { readSmallFile, writeFileAtomic } from './atomic-file.js';
import { SETTLED } from '../common/settled.js';

export const TOMBSTONE_HORIZON_FILE = 'tombstone-horizon.checkpoint';

const HORIZON_RE = /^tributary-tombstone-horizon 1 (\d+)\n$/;

/**
 * The horizon on disk, 0 when there is no file. An unreadable or malformed one is taken as `fallback` (the
 * log end: every tombstone below it may have been dropped), which at worst makes replicas below it rebuild,
 * where 0 could keep a deleted key on one of them.
 */
export async function readTombstoneHorizon(dir: string, logger: Logger, fallback: number): Promise<number> {
  try {
    const m = HORIZON_RE.exec(await readSmallFile(join(dir, TOMBSTONE_HORIZON_FILE), 'utf8'));
    if (m && Number.isSafeInteger(Number(m[1]))) return Number(m[1]);
    logger.warn({ fallback }, 'malformed tombstone horizon; taking the log end');
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return 0;
    logger.warn({ err, fallback }, 'could not read the tombstone horizon; taking the log end');
  }
  return fallback;
}

/** The horizon in memory and its file, raised one write at a time. */
export class TombstoneHorizon {
  /** The horizon as far as it is on disk (raised only once its write returned). */
  private current: number;
  private chain: Promise<void> = SETTLED;

  constructor(
    private readonly dir: string,
    value: number,
  ) {
    this.current = value;
  }

  get value(): number {
    return this.current;
  }

  /** Raises the horizon to `h` (never lowers it): resolves once the file holds it, then `value` does. */
  raise(h: number, beforeWrite?: () => Promise<void>): Promise<void> {
    const run = this.chain.then(async () => {
      if (h <= this.current) return;
      await beforeWrite?.();
      await writeFileAtomic(join(this.dir, TOMBSTONE_HORIZON_FILE), `tributary-tombstone-horizon 1 ${h}\n`);
      this.current = h;
    });
    this.chain = run.catch(() => {});
    return run;
  }

  /** The log's directory is gone (a release): the empty log has dropped nothing. Call with no raise in flight. */
  reset(): void {
    this.current = 0;
  }

  /** Resolves once the raises asked for so far are done. */
  idle(): Promise<void> {
    return this.chain;
  }
}

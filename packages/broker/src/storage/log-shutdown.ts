/**
 * PartitionLog.close (clean) and the close of a simulated crash (not clean): docs/architecture.md "Storage".
 * A clean close syncs what is dirty, writes the indexes, the HWM checkpoint and the clean-shutdown marker;
 * either closes the fds once the queued appends are written.
 */
import { join } from 'node:path';
import { writeFileAtomic } from './atomic-file.js';
import type { GroupCommit } from './group-commit.js';
import type { HwmCheckpoint } from './hwm-checkpoint.js';
import type { LogCleaner } from './log-cleaner.js';
import { fsyncDir, isSyncFailure, storageError } from './log-fs.js';
import { CLEAN_SHUTDOWN_FILE } from './log-loader.js';
import type { LogState } from './log-state.js';
import type { LogWriter } from './log-writer.js';
import type { Segment } from './segment.js';
import type { TombstoneHorizon } from './tombstone-horizon.js';

export interface ShutdownParts {
  st: LogState;
  dir: string;
  /** The log's flush ticks stop. */
  forgetTicks: () => void;
  cleaner: LogCleaner | null;
  horizon: TombstoneHorizon;
  writer: LogWriter;
  sync: GroupCommit;
  checkpoint: HwmCheckpoint;
}

export async function shutdownLog(p: ShutdownParts, clean: boolean): Promise<void> {
  const st = p.st;
  if (st.state !== 'open') return;
  st.state = 'closing';
  p.forgetTicks();
  // An append or read waiting for a slot of the fd budget is refused (retriable) rather than holding up the
  // close, until the queued appends are written; then the close's own opens wait for a slot.
  const fds = st.fdPolicy;
  fds?.budget.refuseWaits(fds, storageError(p.dir, 'log is closed'));
  // A running compaction sees the state and gives up at its next record; let it clean up first.
  if (p.cleaner?.compacting) await p.cleaner.idle();
  await p.horizon.idle();
  await p.writer.run(async () => {
    // Appends accepted before close still get written (those that would wait for an fd are refused).
    await p.writer.drain(true);
    if (fds) fds.budget.admitWaits(fds);
    await p.sync.idle();
    await st.retryCuts();
    let error: unknown = null;
    if (clean && !st.failed && !st.dormant) {
      // The segment whose datasync runs (null once they all succeeded).
      let syncing: Segment | null = null;
      try {
        // The active segment first: its unsynced writes keep its fd, which an older segment reopening may need.
        for (const s of [...st.segments].reverse()) {
          syncing = s;
          if (p.sync.isDirty(s) || s.indexState !== 'synced') await s.datasync();
        }
        syncing = null;
        p.sync.forgetAll();
        p.sync.journalForget();
        for (const s of st.segments) if (s.indexState !== 'synced') await s.writeIndex(true);
        await p.checkpoint.write();
        await writeFileAtomic(join(p.dir, CLEAN_SHUTDOWN_FILE), `${Date.now()}\n`, { syncDir: false });
        await fsyncDir(p.dir);
      } catch (err) {
        error = err;
        st.logger.error({ err }, 'clean shutdown failed; the next open will run recovery');
        // As after a pass's failed fsync: pages the disk may lack would read as there to a restart on this machine.
        if (isSyncFailure(err)) {
          st.failSync(err, syncing);
          await st.cutting;
        }
      }
    }
    while (p.checkpoint.inFlight) await p.checkpoint.inFlight;
    for (const s of st.segments) await s.close().catch(() => {});
    st.state = 'closed';
    // A closed log's records no longer count against the broker's tail cache budget.
    st.madeCache?.clear();
    p.writer.rejectQueued();
    if (error) throw storageError(p.dir, 'close failed', error);
  });
}

/**
 * The segments' part of PartitionLog.truncateTo (docs/architecture.md "Storage", Open files). Every file it
 * needs is opened before it changes anything, so a wait for a slot of the fd budget that the log's close
 * ends, or a process out of fds (EMFILE), refuses it with the log unchanged instead of failing the log.
 */
import { TributaryError } from 'tributary-protocol/errors.js';
import type { GroupCommit } from './group-commit.js';
import { isFdExhaustion, isSyncFailure, storageError, withDirOpen } from './log-fs.js';
import type { LogState } from './log-state.js';
import type { SegmentFds } from './segment-fds.js';
import { Segment } from './segment.js';
import { type SegmentCut, discardCut, prepareCut } from './segment-cut.js';

interface Truncation {
  st: LogState;
  sync: GroupCommit;
  fds: SegmentFds;
  offset: number;
  /** Segments kept; `kept` is the last of them (none: the log is emptied and starts again at offset). */
  keep: number;
  kept: Segment | null;
  /** A new empty active segment at offset (an emptied log, or after a compacted kept segment). */
  created: Segment | null;
  /** Where `kept` is cut, read (and a compacted one's index written) before anything changes. */
  cut: SegmentCut | null;
  /** The files began to change: a failure from now on fails the log. */
  changing: boolean;
  /** The log's failure as the truncation began (a segment pass may fail it meanwhile). */
  failedBefore: Error | null;
}

/**
 * Drops every record >= offset (below the log end), inside the writer's mutex with the group commit idle.
 * Refused with the retriable storage_error, nothing changed, when a file could not be opened; a failure
 * once the files began to change fails the log (its next open recovers them).
 */
export async function truncateSegments(st: LogState, sync: GroupCommit, fds: SegmentFds, offset: number): Promise<void> {
  const segments = st.segments;
  let keep = 0;
  if (offset >= st.logStartOffset) {
    keep = segments.indexOf(st.segmentFor(offset) as Segment) + 1;
    // An empty segment starting exactly at offset is dropped too, so the name can be reused; not after a
    // compacted segment (even one compaction emptied), which would need a new one at offset (see below).
    const prev = segments[keep - 2];
    if (segments[keep - 1].baseOffset === offset && keep > 1 && !prev.compacted) keep--;
  }
  const t: Truncation = { st, sync, fds, offset, keep, kept: keep > 0 ? segments[keep - 1] : null, created: null, cut: null, changing: false, failedBefore: st.failed };
  try {
    const kept = t.kept;
    if (kept === null) return await withNewSegment(t, () => apply(t));
    // A compacted segment may end in a gap (its last record below offset, or none at all): a crash's full
    // scan of the last segment would put the log end after that record, below offset, and hand those
    // offsets out again. An empty segment based at offset carries the end across a crash.
    const needsNext = kept.compacted && offset > kept.baseOffset;
    // Held open to the end: its cut, scan and fsync then wait for no slot of the fd budget. The new
    // segment is made first: holding no slot while it waits for one, no truncation waits for itself.
    const run = () =>
      kept.holdOpen(async () => {
        t.cut = await prepareCut(kept, offset);
        await apply(t);
      });
    await (needsNext ? withNewSegment(t, run) : run());
  } catch (err) {
    if (!t.changing) await discardCut(t.cut);
    // Nothing changed and no write or fsync ran: refused, as an append is (log-writer.ts writeAtEnd).
    if (!t.changing && isFdExhaustion(err)) throw storageError(st.dir, 'out of file descriptors', err);
    if (!t.changing && err instanceof TributaryError) throw err;
    // A failed fsync (the kept segment's, after its cut): its unsynced pages may be lost on disk yet read as
    // there by a restart on this machine, which would skip their journal entries. Cut back, as a pass does.
    if (isSyncFailure(err)) st.failSync(err, t.kept);
    else st.fail(err);
    throw storageError(st.dir, 'truncate failed', err);
  }
}

/**
 * Runs `run` with an empty segment at offset created (its fd may close meanwhile: nothing writes it before
 * it is in the log). No segment has that name: the kept one ends past it, or the log starts above it. A
 * crash before it is in the log leaves it inside the kept one (the loader removes it as a failed roll's)
 * or before the log (the loader keeps it alone: the truncation done).
 */
async function withNewSegment(t: Truncation, run: () => Promise<void>): Promise<void> {
  const { st } = t;
  const created = await Segment.create(st.dir, t.offset, st.options.indexIntervalBytes, Date.now(), st.fdPolicy);
  t.created = created;
  try {
    await run();
  } catch (err) {
    if (!st.segments.includes(created)) {
      // Refused: it goes again, as if never created (as log-writer.ts syncDirOrFail removes one). Past
      // the first change, the log is failed and its next open recovers: only the fd goes.
      await (t.changing ? created.close() : created.remove()).catch((e: unknown) => st.fail(e));
    }
    throw err;
  }
}

/** With the directory open for its fsync, changes the files: nothing here waits for a slot of the fd budget. */
function apply(t: Truncation): Promise<void> {
  const { st, sync, fds, keep, kept, created, cut } = t;
  const durable = st.options.flush !== 'os';
  const change = async (syncDir: (() => Promise<void>) | null): Promise<void> => {
    // The new segment's directory entry first: a power loss must not keep the cut without it (the cut
    // segment, scanned as the last one, would end below offset).
    if (created !== null && syncDir !== null) await syncDir();
    // A segment pass started since truncateTo waited for none (the flush timer's, the fd budget's) ends first,
    // and none fsyncs the kept segment beside the truncation's own fsyncs, as a roll leaves out the old
    // segment: of two fsyncs of one file at once only one may hear of a write-back error, and the truncation's
    // "success" then released the journal entries of records the pass's failure cut away.
    await sync.segmentsIdle();
    if (st.failed !== t.failedBefore) throw storageError(st.dir, 'log failed', st.failed);
    t.changing = true;
    // (Under flush=os the truncation fsyncs nothing, and the kept segment stays dirty for a flush to sync.)
    if (kept !== null && durable) sync.forget(kept);
    // A compaction planned before this aborts its swap; so must one planned during it, which may read the
    // kept segment before its cut (log-cleaner.ts reads the count outside the mutex).
    st.truncations++;
    try {
      await changeFiles(syncDir);
    } finally {
      st.truncations++;
    }
  };
  const changeFiles = async (syncDir: (() => Promise<void>) | null): Promise<void> => {
    const doomed = st.segments.splice(keep);
    // Readers of an emptied log find the new segment at once.
    if (kept === null) st.segments.push(created as Segment);
    // Newest first: a crash part-way leaves a prefix of the old log, not a hole a compacted segment's
    // stretch over the next one would bridge.
    for (const s of doomed.reverse()) {
      sync.forget(s);
      fds.forget(s);
      await s.remove();
    }
    if (kept !== null) {
      // The removals on disk before the cut: a power loss between them brought removed segments back after
      // a segment that then ended short of them, which recovery refuses (offsets missing).
      if (syncDir !== null && doomed.length > 0) await syncDir();
      await kept.truncateTo(cut as SegmentCut, durable);
      // Synced through the fd it holds; before a new segment, closed like a roll's old one (log-writer.ts).
      // Under flush=os it stays dirty, for a flush to sync before it writes the index as synced.
      if (durable) await kept.datasync();
      if (created !== null) {
        // Not fatal: the cut left it an index file, not synced, that keeps the flag (segment-cut.ts).
        await kept.writeIndex(durable).catch((err: unknown) => st.logger.warn({ err, segment: kept.baseOffset }, 'could not write segment index'));
        st.segments.push(created);
        const older = st.segments[st.segments.length - 3];
        if (older) fds.releaseLater(older);
      }
    }
    // A new segment is empty: the directory's fsync makes it durable, as a roll's.
    if (syncDir !== null) await syncDir();
    else sync.markDirty(st.active);
  };
  return durable ? withDirOpen(st.dir, change) : change(null);
}

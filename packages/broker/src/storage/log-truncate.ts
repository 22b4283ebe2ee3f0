/** The segments' part of PartitionLog.truncateTo (docs/architecture.md "Storage"), kept out of the facade. */
import type { GroupCommit } from './group-commit.js';
import { fsyncDir, storageError } from './log-fs.js';
import type { LogState } from './log-state.js';
import type { LogWriter } from './log-writer.js';
import type { SegmentFds } from './segment-fds.js';
import { Segment } from './segment.js';

/** Drops every record >= offset (below the log end), inside the writer's mutex with the group commit idle. A failure fails the log. */
export async function truncateSegments(st: LogState, sync: GroupCommit, fds: SegmentFds, writer: LogWriter, offset: number): Promise<void> {
  st.truncations++;
  try {
    let keep: number;
    if (offset < st.logStartOffset) {
      keep = 0;
    } else {
      keep = st.segments.indexOf(st.segmentFor(offset) as Segment) + 1;
      // An empty segment starting exactly at offset is dropped too, so the name can be reused.
      if (st.segments[keep - 1].baseOffset === offset && keep > 1) keep--;
    }
    const doomed = st.segments.splice(keep);
    for (const s of doomed) {
      sync.forget(s);
      fds.forget(s);
      await s.remove();
    }
    if (st.segments.length === 0) {
      st.segments.push(await Segment.create(st.dir, offset, st.options.indexIntervalBytes, Date.now(), st.fdPolicy));
    } else {
      await st.active.truncateTo(offset);
      // A compacted segment may end in a gap (its last record below `offset`): a crash's full scan of the
      // last segment would put the log end after that record, below `offset`, and hand those offsets out
      // again. An empty segment based at `offset` carries the end across a crash.
      if (st.active.compacted && st.active.size > 0) await writer.roll();
    }
    if (st.options.flush !== 'os') {
      await st.active.datasync();
      await fsyncDir(st.dir);
    } else {
      sync.markDirty(st.active);
    }
  } catch (err) {
    st.fail(err);
    throw storageError(st.dir, 'truncate failed', err);
  }
}

/**
 * What a leader answers a follower's REPLICA_FETCH with: whole appends as the segment files hold them, each
 * record's frame, CRC and structure checked, nothing decoded (docs/architecture.md, "Cluster mode"). The
 * records read() with keepAppendMarker and wholeAppends returns, as bytes: read as objects, one accepted
 * append of 11M empty headers took about 2 GB, since a fetch takes an append whole and the read's header
 * charge applies only between appends.
 */
import { TributaryError, invalidParam } from 'tributary-protocol/errors.js';
import { storageError } from './log-fs.js';
import type { LogState } from './log-state.js';
import { ATTR_END_OF_APPEND, inspectRecord, storedHeaderCount } from './record-codec.js';
import type { SegmentFds } from './segment-fds.js';

/** Records (whole, in the stored layout) at buf[from, to). */
export interface StoredRun {
  buf: Buffer;
  from: number;
  to: number;
}

/** Whole appends read as stored bytes, in offset order. */
export interface StoredRead {
  runs: StoredRun[];
  /** Records in `runs`. */
  count: number;
  /** Their stored bytes. */
  bytes: number;
  /** One past the last record's offset (the requested offset when there is none). */
  next: number;
}

export interface StoredReadOptions {
  maxRecords: number;
  /** Checked only between appends (as read()'s wholeAppends): the first append is taken whole however large. */
  maxBytes: number;
  /** Exclusive upper bound (the leader's durable log end); an append it cuts is left out. */
  maxOffset?: number;
  /**
   * What each header costs the maxBytes budget beyond its bytes: READ_HEADER_COST for a reply its reader
   * decodes into objects (the batch frame of followers of an older version), 0 for one it stores as bytes.
   */
  headerCost: number;
}

const READ_CHUNK_MIN = 16 * 1024;
const READ_CHUNK_MAX = 8 * 1024 * 1024;
/** Reads inside an append past the budget: large enough that a 64 MiB append is 64 reads, not 4,000. */
const READ_CHUNK_IN_APPEND = 1024 * 1024;
const MAX_SWAP_RETRIES = 8;

/**
 * The bytes of the records read(offset, { keepAppendMarker: true, wholeAppends: true, ... }) returns, with
 * the same errors (OFFSET_OUT_OF_RANGE, storage_error for a corrupt record or a failed read) and the same
 * answer to a compaction swap: an append read in part starts over in the replacement file.
 */
export async function readStoredAppends(st: LogState, fds: SegmentFds, offset: number, opts: StoredReadOptions): Promise<StoredRead> {
  if (st.state === 'closed') throw storageError(st.dir, 'log is closed');
  if (!Number.isSafeInteger(offset)) throw invalidParam('offset', 'must be a safe integer');
  const start = st.logStartOffset;
  const leo = st.logEndOffset;
  if (offset < start || offset > leo) throw new TributaryError('OFFSET_OUT_OF_RANGE', { requested: offset, earliest: start, latest: leo });
  const limit = opts.maxOffset === undefined ? leo : Math.min(leo, opts.maxOffset);
  const { maxRecords, maxBytes, headerCost } = opts;
  const runs: StoredRun[] = [];
  // Taken so far (budget: `cost`), and as of the end of the last whole append (`kept*`): what is returned.
  let n = 0;
  let cost = 0;
  let stored = 0;
  let next = offset;
  const kept: Kept = { runs: 0, partial: null, n: 0, cost: 0, stored: 0, next: offset };
  /** The last record taken does not end its append: the limits do not apply yet. */
  let inAppend = false;
  let done = false;
  let retries = 0;
  if (offset >= limit || !(maxRecords >= 1)) return { runs, count: 0, bytes: 0, next: offset };
  while (!done && next < limit && (n < maxRecords || inAppend)) {
    const seg = st.segmentFor(next);
    if (!seg || seg.deleted) return raced(st, kept, runs, offset, n);
    const version = seg.version;
    // Read together (appends update both at once): the records below segNext all lie before `end`.
    const end = seg.size;
    const segNext = seg.nextOffset;
    let pos = seg.index.lookup(next).position;
    const startNext = next;
    let need = 0;
    let stale = false;
    fds.touch(seg);
    while (!done && !stale && pos < end) {
      const avg = seg.recordCount > 0 ? Math.ceil(end / seg.recordCount) : READ_CHUNK_MIN;
      const wanted = inAppend ? READ_CHUNK_IN_APPEND : Math.min(maxBytes - cost, (maxRecords - n) * avg, READ_CHUNK_MAX);
      const chunk = Math.min(end - pos, Math.max(need, READ_CHUNK_MIN, wanted + seg.index.intervalBytes));
      let buf: Buffer;
      try {
        buf = await seg.read(pos, chunk);
      } catch (err) {
        if (seg.deleted || seg.version !== version) {
          stale = true;
          break;
        }
        throw storageError(st.dir, 'read failed', err);
      }
      if (buf.length === 0) {
        stale = true;
        break;
      }
      need = 0;
      let p = 0;
      let from = -1;
      while (p < buf.length) {
        const r = inspectRecord(buf, p);
        if (!r.ok) {
          const needed = r.needed ?? 4;
          if (r.reason === 'incomplete' && buf.length === chunk && pos + p + needed <= end) {
            need = needed;
            break;
          }
          if (seg.deleted || seg.version !== version) {
            stale = true;
            break;
          }
          throw storageError(st.dir, `corrupt record in segment ${seg.baseOffset} at position ${pos + p}`);
        }
        // Below `next`: the skip from the index entry. Above it: a gap left by compaction.
        if (r.offset < next) {
          p += r.size;
          continue;
        }
        const c = r.size + (headerCost > 0 ? storedHeaderCount(buf, p) * headerCost : 0);
        if (r.offset >= limit || (n > 0 && cost + c > maxBytes && !inAppend)) {
          done = true;
          break;
        }
        if (from < 0) from = p;
        n++;
        cost += c;
        stored += r.size;
        next = r.offset + 1;
        p += r.size;
        inAppend = (r.attributes & ATTR_END_OF_APPEND) === 0;
        if (!inAppend) {
          kept.runs = runs.length;
          if (kept.partial?.buf === buf) kept.partial.to = p;
          else kept.partial = { buf, from, to: p };
          kept.n = n;
          kept.cost = cost;
          kept.stored = stored;
          kept.next = next;
        }
        if (n >= maxRecords && !inAppend) {
          done = true;
          break;
        }
      }
      // The records taken are contiguous in the chunk: from the first taken to where the walk stopped.
      if (from >= 0) runs.push({ buf, from, to: p });
      pos += p;
    }
    if (stale) {
      // Compaction swapped the file in: the replacement holds the same offsets, so carry on from the end
      // of the last whole append (records of the one read in part may be gone, each kept one an append of
      // its own: reading on would leave a gap inside the append).
      if (seg.superseded && retries++ < MAX_SWAP_RETRIES) {
        cut(runs, kept);
        ({ n, cost, stored, next } = kept);
        inAppend = false;
        continue;
      }
      return raced(st, kept, runs, offset, n);
    }
    // Past the segment's last record but not its end (a compacted tail): the rest is in later segments.
    if (!done && next < segNext) next = segNext;
    // No progress means the segment view went stale (truncation); never spin.
    if (next === startNext) break;
  }
  cut(runs, kept);
  return { runs, count: kept.n, bytes: kept.stored, next: kept.n > 0 ? kept.next : offset };
}

/** What was taken as of the end of the last whole append: runs[0, runs) and `partial` of the chunk after them. */
interface Kept {
  runs: number;
  partial: StoredRun | null;
  n: number;
  cost: number;
  stored: number;
  next: number;
}

/** Drops what was read past the last whole append. */
function cut(runs: StoredRun[], kept: Kept): void {
  runs.length = kept.runs;
  if (kept.partial) runs.push({ ...kept.partial });
}

/**
 * A read that raced with retention or truncation: the whole appends read (none when `taken` records were
 * all of an append read in part), or, with nothing read, the now-missing offset reported.
 */
function raced(st: LogState, kept: Kept, runs: StoredRun[], offset: number, taken: number): StoredRead {
  cut(runs, kept);
  if (taken > 0) return { runs, count: kept.n, bytes: kept.stored, next: kept.n > 0 ? kept.next : offset };
  const start = st.logStartOffset;
  const leo = st.logEndOffset;
  if (offset < start || offset > leo) throw new TributaryError('OFFSET_OUT_OF_RANGE', { requested: offset, earliest: start, latest: leo });
  return { runs: [], count: 0, bytes: 0, next: offset };
}

/**
 * What a leader answers a follower's REPLICA_FETCH with: whole appends as the segment files hold them, each
 * unit's frame, CRC and structure checked, nothing decoded (docs/architecture.md, "Cluster mode"): per-record
 * layout records and append blocks (a block whole; from inside one, its rest as a new block). The
 * records read() with keepAppendMarker and wholeAppends returns, as bytes: read as objects, one accepted
 * append of 11M empty headers took about 2 GB, since a fetch takes an append whole and the read's header
 * charge applies only between appends.
 */
import { TributaryError, invalidParam } from 'tributary-protocol/errors.js';
import { BLOCK_FLAG, BLOCK_HEADER_BYTES, type BlockInfo } from './append-block.js';
import { type BlockRecord, blockRecords, decodeBlockRecord } from './block-records.js';
import { crc32c } from 'tributary-protocol/record-batch/crc32c.js';
import { w64 } from 'tributary-protocol/record-batch/layout.js';
import { storageError } from './log-fs.js';
import type { LogState } from './log-state.js';
import { ATTR_END_OF_APPEND, encodeRecordInto, encodedSize, storedHeaderCount } from './record-codec.js';
import type { SegmentFds } from './segment-fds.js';
import { INSPECT, walkLog } from './segment-walk.js';

/** Units (records in the per-record layout, append blocks; whole) at buf[from, to). */
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
  /** Their stored bytes (the units'). */
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
  /**
   * Whether the reader takes append blocks (REPLICA_FETCH blocks=true); false (a follower of an older
   * version, docs/protocol.md "Cluster mode"): each block's records in the per-record layout, as a
   * per-record leader would have stored the same append. Default true.
   */
  blocks?: boolean;
}

/** Reads inside an append past the budget: large enough that a 64 MiB append is 64 reads, not 4,000. */
const READ_CHUNK_IN_APPEND = 1024 * 1024;

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
  const perRecord = opts.blocks === false;
  const runs: StoredRun[] = [];
  // Taken so far (budget: `cost`), and as of the end of the last whole append (`kept*`): what is returned.
  let n = 0;
  let cost = 0;
  let stored = 0;
  const kept: Kept = { runs: 0, partial: null, n: 0, cost: 0, stored: 0, next: offset };
  /** The last record taken does not end its append: the limits do not apply yet. */
  let inAppend = false;
  // Where the records taken of the current chunk begin: they are contiguous up to where its walk stopped.
  let from = -1;
  /** The current append is the rest of a block, already in `runs` (blockFrom). */
  let sliced = false;
  if (offset >= limit || !(maxRecords >= 1)) return { runs, count: 0, bytes: 0, next: offset };
  const end = await walkLog(
    st,
    fds,
    offset,
    limit,
    INSPECT,
    {
      wanted: (avg) => (inAppend ? READ_CHUNK_IN_APPEND : Math.min(maxBytes - cost, (maxRecords - n) * avg)),
      record: (buf, p, r) => {
        const block = r.block;
        const rec = r.rec;
        // A block's records come one by one, p at the block (segment-walk.ts); its bytes go whole. The
        // budget counts what the per-record layout would (r.size), as read() does, checked between appends.
        const headers = headerCost > 0 ? (rec ? rec.headers : storedHeaderCount(buf, p)) : 0;
        const c = r.size + headers * headerCost;
        if (n > 0 && cost + c > maxBytes && !inAppend) return 'stop';
        if (block && rec && !inAppend) {
          if (perRecord) {
            // Blocks follow whole appends: the per-record units taken of this chunk go before the converted ones.
            if (from >= 0) runs.push({ buf, from, to: p });
            from = -1;
            const recs = perRecordFrom(buf, p, block, rec);
            runs.push({ buf: recs, from: 0, to: recs.length });
            stored += recs.length;
            sliced = true;
          } else if (rec.offset > block.baseOffset) {
            // A fetch from inside a block (a follower that truncated inside one): the rest of it, as a block of its own.
            const rest = blockFrom(buf, p, block, rec);
            runs.push({ buf: rest, from: 0, to: rest.length });
            stored += rest.length;
            sliced = true;
          } else {
            if (from < 0) from = p;
            stored += block.size;
          }
        } else if (!block) {
          if (from < 0) from = p;
          stored += r.size;
        }
        n++;
        cost += c;
        inAppend = (r.attributes & ATTR_END_OF_APPEND) === 0;
        if (!inAppend) {
          if (sliced) {
            kept.runs = runs.length;
            kept.partial = null;
            sliced = false;
          } else {
            const to = p + (block ? block.size : r.size);
            kept.runs = runs.length;
            if (kept.partial?.buf === buf) kept.partial.to = to;
            else kept.partial = { buf, from, to };
          }
          kept.n = n;
          kept.cost = cost;
          kept.stored = stored;
          kept.next = r.offset + 1;
        }
        return n >= maxRecords && !inAppend ? 'last' : 'next';
      },
      chunkEnd: (buf, to) => {
        if (from >= 0) runs.push({ buf, from, to });
        from = -1;
      },
      // A compaction swap: go on from the end of the last whole append (records of the one read in part
      // may be gone, each kept one an append of its own: reading on would leave a gap inside the append).
      rewind: () => {
        cut(runs, kept);
        ({ n, cost, stored } = kept);
        inAppend = false;
        sliced = false;
        return kept.next;
      },
    },
    'strict',
  );
  if (end === 'raced') return raced(st, kept, runs, offset, n);
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

/**
 * The records of the block at `pos` from `rec` on, as a block of their own (append-block.ts): the same
 * flags and append time, `rec`'s offset as its base, their count and largest timestamp, a new CRC. The
 * records keep their bytes (their offsets and sequences are absolute), so checkBlock accepts it.
 */
export function blockFrom(buf: Buffer, pos: number, info: BlockInfo, rec: BlockRecord): Buffer {
  const end = pos + info.size;
  const out = Buffer.allocUnsafe(BLOCK_HEADER_BYTES + end - rec.at);
  buf.copy(out, 0, pos, pos + BLOCK_HEADER_BYTES);
  buf.copy(out, BLOCK_HEADER_BYTES, rec.at, end);
  let maxTs = 0;
  for (const r of blockRecords(buf, pos, info)) if (r.offset >= rec.offset && r.timestamp > maxTs) maxTs = r.timestamp;
  out.writeUInt32BE((out.length - 4 + BLOCK_FLAG) >>> 0, 0);
  w64(out, 10, rec.offset);
  out.writeUInt32BE(info.baseOffset + info.count - rec.offset, 18);
  w64(out, 30, maxTs);
  out.writeUInt32BE(crc32c(new Uint8Array(out.buffer, out.byteOffset + 8, out.length - 8)), 4);
  return out;
}

/**
 * The records of the block at `pos` from `rec` on, in the per-record layout (record-codec.ts), with the
 * field values a per-record leader stores for the same append (decodeBlockRecord; the last one ends it).
 */
export function perRecordFrom(buf: Buffer, pos: number, info: BlockInfo, rec: BlockRecord): Buffer {
  const recs = blockRecords(buf, pos, info)
    .filter((r) => r.offset >= rec.offset)
    .map((r) => decodeBlockRecord(buf, r, info.flags));
  let size = 0;
  for (const r of recs) size += encodedSize(r);
  const out = Buffer.allocUnsafe(size);
  let at = 0;
  for (const r of recs) at = encodeRecordInto(out, at, r);
  return out;
}


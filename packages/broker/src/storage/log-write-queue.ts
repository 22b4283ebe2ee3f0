/**
 * What the write path of a partition log (log-writer.ts) queues and writes: an accepted append waiting
 * for its write, and a written group as it is published to the index and the tail cache.
 */
import type { ScannedBatch } from 'tributary-protocol/batch.js';
import { IN_PLACE_ALONE_BYTES } from './append-block.js';
import type { RecordInput } from 'tributary-protocol/record.js';
import type { SyncWaiter } from './group-commit.js';
import type { AppendGuard } from './log-options.js';
import type { ReplicaWrite } from './replica-write.js';
import type { Segment } from './segment.js';

/** A group's write, as groupWritten publishes it. */
export interface GroupWrite {
  seg: Segment;
  group: PendingAppend[];
  buf: Buffer;
  bytes: number;
  startSize: number;
  firstOffset: number;
  nextOffset: number;
  maxTs: number;
  recStarts: number[];
  unitOffsets: number[] | null;
  blocks: Map<number, number[]> | null;
  /** The blocks among the units whose records carry no headers (TailCache.appendUnits). */
  headerless: Set<number> | null;
  /** The bytes written, when not `buf` alone (writeInPlace: the header, then the frame's records). */
  pieces?: Buffer[];
  /** A block written in place (writeInPlace): the tail cache keeps the frame's buffer, its records at `starts`. */
  inPlace?: { body: Buffer; starts: number[]; flags: number };
}

export interface PendingAppend extends SyncWaiter {
  records: RecordInput[];
  /** Instead of `records`: the records of a produce batch, encoded straight from its wire bytes. */
  wire?: ScannedBatch;
  /** With `wire`: the sequence of its first record, an idempotent batch's (-1: a plain batch). */
  wireSequence?: number;
  /** With `wire`: stored as one append block (LogOptions.storedLayout 'blocks'; `bytes` is its size). */
  block?: boolean;
  /** With `block`: may be stamped in the frame's own buffer, and is then written alone (inPlaceBlockable, nextGroup). */
  inPlace?: boolean;
  /** Instead of `records`: an appendReplica call, already encoded with its own offsets. */
  replica?: ReplicaWrite;
  sizes: number[];
  bytes: number;
  guard?: AppendGuard;
}

/**
 * The appends at the head of `pending` (non-empty, its head not a replica's) that one write takes: a batch
 * never spans segments, and several share one write while they fit in `maxBytes`. A block stamped in place
 * (`inPlace`) is written alone; a small one (under IN_PLACE_ALONE_BYTES) only when nothing waits to join
 * it, as one write for many appends costs less than a copy of each. A refused append is failed at the head
 * of a group (LogWriter.drain): the group ends before one.
 */
export function nextGroup(pending: readonly PendingAppend[], segSize: number, segmentBytes: number, maxBytes: number): { n: number; bytes: number; inPlace: boolean } {
  const first = pending[0]!;
  let n = 1;
  let bytes = first.bytes;
  const joins = (q: PendingAppend | undefined): q is PendingAppend =>
    q !== undefined &&
    !q.replica &&
    !(q.inPlace && q.bytes >= IN_PLACE_ALONE_BYTES) &&
    q.guard?.refused() === undefined &&
    bytes + q.bytes <= maxBytes &&
    segSize + bytes + q.bytes <= segmentBytes;
  const inPlace = first.inPlace === true && (first.bytes >= IN_PLACE_ALONE_BYTES || !joins(pending[1]));
  if (inPlace) return { n, bytes, inPlace };
  for (let q = pending[n]; joins(q); q = pending[n]) {
    bytes += q.bytes;
    n++;
  }
  return { n, bytes, inPlace };
}

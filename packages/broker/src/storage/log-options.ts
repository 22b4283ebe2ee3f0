/** The options and result types of PartitionLog (docs/architecture.md, "Storage"), and how options are checked. */
import { invalidParam } from 'tributary-protocol/errors.js';
import { DEFAULT_INDEX_INTERVAL_BYTES } from './offset-index.js';
import type { FdBudget, SegmentFdPolicy } from './fd-budget.js';
import type { FramePool } from './frame-pool.js';
import type { Journal } from './journal.js';
import type { LogTicker } from './log-ticker.js';
import type { TailCacheBudget } from './tail-cache-budget.js';

export type FlushMode = 'always' | 'interval' | 'os';

export interface LogOptions {
  /** Roll when the active segment would exceed this (default 128 MiB). */
  segmentBytes: number;
  /** Roll when the active segment is older than this (default 7 days). */
  segmentMs: number;
  /** -1 = unlimited; delete whole closed segments whose max timestamp is older. */
  retentionMs: number;
  /** -1 = unlimited; delete oldest closed segments while the total size exceeds it. */
  retentionBytes: number;
  /** 'always': append resolves after fsync (group commit); 'interval': fsync on a timer; 'os': only on close. */
  flush: FlushMode;
  /** fsync period for 'interval'; also the HWM checkpoint period in every mode (unless checkpointHwmOnTimer is false). */
  flushIntervalMs: number;
  indexIntervalBytes: number;
  maxRecordBytes?: number;
  /** Bytes of recently appended records kept in memory for tail readers (default 4 MiB; 0 disables). */
  tailCacheBytes?: number;
  /**
   * Whether the flush timer checkpoints the HWM (default true). A standalone broker sets its HWM to the log
   * end on open and never reads the checkpoint, so a periodic write per partition is work for nothing: with
   * 1,000 partitions written to, 1,000 atomic file writes a second. Close, flush and truncation still write it.
   */
  checkpointHwmOnTimer?: boolean;
  /** The broker-wide bound every partition's tail cache shares (none: only tailCacheBytes bounds this one). */
  tailCacheBudget?: TailCacheBudget;
  /** Where the broker's connections read produce frames into: the tail cache holds what it keeps of it (frame-pool.ts). */
  framePool?: FramePool;
  /** Told how long each fsync pass of appends took, in seconds (the broker's fsync histogram). */
  onSync?: (seconds: number) => void;
  /**
   * The topic's cleanup policy (default 'delete'). Only recovery reads it: on a compacted topic a gap
   * between a segment whose index file was lost and the next segment is what compaction leaves, so that
   * segment is taken as compacted; on any other topic the gap is missing data and refuses the open.
   */
  cleanupPolicy?: 'delete' | 'compact';
  /** The broker-wide bound on open segment files this log's segments share (none: each keeps its fd). */
  fdBudget?: FdBudget;
  /**
   * The flush timer every log of the broker shares (none: the log gets its own, of flushIntervalMs). Its
   * period is then the one flushIntervalMs means.
   */
  ticker?: LogTicker;
  /**
   * How appends are stored: 'records' (the default here; the broker's --stored-layout defaults to blocks)
   * the per-record layout, 'blocks' a blockable produce frame as one append block (append-block.ts;
   * docs/architecture.md "Stored batches").
   */
  storedLayout?: 'records' | 'blocks';
  /**
   * The largest append block (default MAX_APPEND_BLOCK_BYTES): a larger append keeps the per-record layout. A read
   * of any record of a block holds the whole block (its CRC covers it), so a block of a 64 MiB frame made
   * four CONSUMEs at once of a few of its records hold 256 MiB.
   */
  maxBlockBytes?: number;
  /**
   * The broker's journal (journal.ts). The log replays its entries as it opens, whatever its flush mode
   * (an earlier run may have journaled it); under flush=always its appends are then made durable by the
   * journal's writes, and its segments fsynced on the flush timer. None: each append under flush=always
   * waits for an fsync of its own segment.
   */
  journal?: Journal;
}

/** Default LogOptions.maxBlockBytes: 1 MiB, four times the SDK producer's default batch. */
export const MAX_APPEND_BLOCK_BYTES = 1024 * 1024;

/** How a log's segments take part in the fd budget (one per log: it names the log's waits): only fsynced writes let a segment close its fd. */
export function segmentFdPolicy(o: LogOptions): SegmentFdPolicy | undefined {
  return o.fdBudget ? { budget: o.fdBudget, syncTracked: o.flush !== 'os', log: undefined } : undefined;
}

export const DEFAULT_LOG_OPTIONS: Readonly<LogOptions> = Object.freeze({
  segmentBytes: 128 * 1024 * 1024,
  segmentMs: 7 * 24 * 60 * 60 * 1000,
  retentionMs: -1,
  retentionBytes: -1,
  flush: 'always' as FlushMode,
  flushIntervalMs: 1000,
  indexIntervalBytes: DEFAULT_INDEX_INTERVAL_BYTES,
  tailCacheBytes: 4 * 1024 * 1024,
});

/**
 * Conditions of an append decided at write time, not at call time (an idempotent producer's batch must not
 * be written after an earlier batch of its failed: docs/architecture.md, "Idempotent producers").
 */
export interface AppendGuard {
  /** Asked as the append is taken for a write: an error refuses it, unwritten. */
  refused(): Error | undefined;
  /** The append failed (or was refused): called before any later append is taken for a write. */
  failed(): void;
}

export interface AppendResult {
  baseOffset: number;
  lastOffset: number;
  /** The append time used for records given timestamp 0. */
  timestamp: number;
  /** performance.now() when the records were in the file (before any fsync wait): the produce phases. */
  writtenAt?: number;
}

export interface ReadOptions {
  maxRecords: number;
  maxBytes: number;
  /** Exclusive upper bound, e.g. the high watermark. */
  maxOffset?: number;
  /**
   * Read from disk and keep ATTR_END_OF_APPEND in `attributes` (the last record of each append), e.g. to
   * rebuild per-append state such as idempotent producer batches. Not for serving consumers.
   */
  keepAppendMarker?: boolean;
  /**
   * With keepAppendMarker: end at an append boundary. maxRecords and maxBytes are only checked after a record
   * that ends an append, so the first append is returned whole however large it is, and records of an append
   * cut by maxOffset are left out (which can make the result empty). For a follower fetching from its leader
   * (PartitionLog.appendReplica takes whole appends only).
   */
  wholeAppends?: boolean;
}

export interface SegmentInfo {
  baseOffset: number;
  nextOffset: number;
  sizeBytes: number;
  maxTimestamp: number;
  createdMs: number;
  /** Rewritten by compaction (may hold fewer records than offsets). */
  compacted: boolean;
}

/** Options of one compact() call (its crash test hook is armed through log-test-hooks.ts). */
export interface CompactOptions {
  /** How long a tombstone stays as its key's latest record before it is dropped (default 24 h). */
  tombstoneRetentionMs?: number;
  /**
   * Only a null value (RecordAttr.NULL_VALUE) is a tombstone, as in Kafka: a user topic's records, where an
   * empty value is data. Without it any empty value is one, as the internal topics write theirs.
   */
  nullTombstonesOnly?: boolean;
  /** The clock used for tombstone expiry and the age roll (default Date.now()). */
  now?: number;
}

export interface CompactResult {
  segmentsCompacted: number;
  recordsRemoved: number;
  /** Size of the rewritten segments before and after. */
  bytesBefore: number;
  bytesAfter: number;
}

export const DEFAULT_TOMBSTONE_RETENTION_MS = 24 * 60 * 60 * 1000;

/** Segment positions are u32 in the index; keep segments well inside that. */
const MAX_SEGMENT_BYTES = 0x7fffffff;

const resolved = new WeakSet<object>();

/**
 * The defaults completed with `o` (undefined values ignored), checked and frozen, or invalid_parameter
 * naming the first bad option. Resolved options come back as they are, so the partitions of a topic can
 * share one object (TopicManager) rather than keep a copy each.
 */
export function resolveOptions(o: Partial<LogOptions>): Readonly<LogOptions> {
  if (resolved.has(o)) return o as LogOptions;
  const opts: LogOptions = { ...DEFAULT_LOG_OPTIONS };
  for (const [k, v] of Object.entries(o)) if (v !== undefined) (opts as unknown as Record<string, unknown>)[k] = v;
  const posInt = (name: keyof LogOptions, min: number, max = Number.MAX_SAFE_INTEGER) => {
    const v = opts[name];
    if (typeof v !== 'number' || !Number.isSafeInteger(v) || v < min || v > max) throw invalidParam(name, `must be an integer in [${min}, ${max}]`);
  };
  posInt('segmentBytes', 1, MAX_SEGMENT_BYTES);
  posInt('segmentMs', 1);
  if (opts.maxBlockBytes !== undefined) posInt('maxBlockBytes', 1);
  posInt('retentionMs', -1);
  posInt('retentionBytes', -1);
  posInt('flushIntervalMs', 1, 0x7fffffff);
  posInt('indexIntervalBytes', 1, MAX_SEGMENT_BYTES);
  if (opts.maxRecordBytes !== undefined) posInt('maxRecordBytes', 1);
  if (opts.tailCacheBytes !== undefined) posInt('tailCacheBytes', 0);
  if (opts.flush !== 'always' && opts.flush !== 'interval' && opts.flush !== 'os') throw invalidParam('flush', "must be 'always', 'interval' or 'os'");
  if (opts.cleanupPolicy !== undefined && opts.cleanupPolicy !== 'delete' && opts.cleanupPolicy !== 'compact') throw invalidParam('cleanupPolicy', "must be 'delete' or 'compact'");
  if (opts.storedLayout !== undefined && opts.storedLayout !== 'records' && opts.storedLayout !== 'blocks') throw invalidParam('storedLayout', "must be 'records' or 'blocks'");
  resolved.add(Object.freeze(opts));
  return opts;
}

/**
 * What the parts of a partition log share: its directory, options and logger, the segment list (the last one
 * active), the high watermark, the tail cache and whether the log is open or failed. The PartitionLog facade
 * owns it and hands it to the writer, the reader, the syncer and the cleaner.
 */
import type { Logger } from 'pino';
import type { SegmentFdPolicy } from './fd-budget.js';
import type { LogOptions } from './log-options.js';
import type { Segment } from './segment.js';
import { TailCache } from './tail-cache.js';
import type { TributaryError } from 'tributary-protocol/errors.js';
import { RateLimitedLog } from '../common/rate-limited-log.js';
import { SETTLED } from '../common/settled.js';

/** The owner of a dormant log's files beside the segments (PartitionLog.onFilesCreated). */
export interface FilesCreatedListener {
  onFilesCreated(): Promise<void>;
}

export class LogState {
  segments: Segment[];
  hwm = 0;
  totalBytes = 0;
  /** Made on first use (`cache`): most partitions of a big broker are never written or read. */
  private cachePart: TailCache | undefined;
  /** PartitionLog.readFloor. */
  readFloor: (() => number) | null = null;
  failed: Error | null = null;
  state: 'open' | 'closing' | 'closed' = 'open';
  /**
   * Bumped by truncateTo as it starts and as it ends changing the files (odd while it does): a compaction
   * planned before it may drop what became the latest record.
   */
  truncations = 0;
  /**
   * Writes the files the log's owner keeps beside the segments (a Partition: its empty snapshots) when a
   * dormant log's files are created, before its first segment (PartitionLog.onFilesCreated).
   */
  onCreate: FilesCreatedListener | null = null;
  /** Told once, when the log fails (GroupCommit: the journal keeps a failed log's entries, Journal.logFailed). */
  onFailed: (() => void) | null = null;
  /** Told when a failure ends (endFailure). */
  onRecovered: (() => void) | null = null;
  /**
   * Storage failures an operator must see (a full disk, a corrupt record): answered to clients as
   * storage_error, logged per kind, rate-limited (docs/operations.md, "A full disk"). The log's own, so no
   * other log, broker or test shares its suppression.
   */
  private failures: RateLimitedLog | undefined;
  /** Retention set after open (ALTER_TOPIC); until then the options' (no object per idle partition). */
  private altered: Readonly<{ retentionMs: number; retentionBytes: number }> | undefined;

  constructor(
    readonly dir: string,
    readonly options: Readonly<LogOptions>,
    readonly logger: Logger,
    segments: Segment[],
    /** How this log's segments take part in the broker's fd budget (log-options.ts segmentFdPolicy); its waits are this log's. */
    readonly fdPolicy?: SegmentFdPolicy,
  ) {
    this.segments = segments;
    for (const s of segments) this.totalBytes += s.size;
  }

  get cache(): TailCache {
    this.cachePart ??= new TailCache(this.options.tailCacheBytes ?? 0, this.options.tailCacheBudget, this.options.framePool, undefined, () => this.readFloor?.() ?? this.hwm);
    return this.cachePart;
  }

  /** The tail cache if it was made: dropping from one never made has nothing to do. */
  get madeCache(): TailCache | undefined {
    return this.cachePart;
  }

  /** Time and size retention: the options' at open, changed in place when the topic's are (ALTER_TOPIC). */
  get retention(): Readonly<{ retentionMs: number; retentionBytes: number }> {
    return this.altered ?? this.options;
  }

  set retention(r: Readonly<{ retentionMs: number; retentionBytes: number }>) {
    this.altered = { retentionMs: r.retentionMs, retentionBytes: r.retentionBytes };
  }

  /** Logs a storage_error this log raises or answers (rate-limited per kind); returns it to throw. */
  reported(kind: 'append' | 'read', err: TributaryError): TributaryError {
    const msg = kind === 'append' ? 'an append failed (storage_error)' : 'a read failed (storage_error)';
    // Made at the first failure: an idle partition's heap is budgeted (test/integration/idle-partitions-heap.test.ts).
    this.failures ??= new RateLimitedLog(() => this.logger);
    this.failures.warn(kind, { dir: this.dir, reason: err.fields.reason }, msg);
    return err;
  }

  /**
   * A read or scan that took `truncations` (this.truncations as it began) and met a bad record raced a
   * truncation, which cut, removed or rewrote what it read, if one ran meanwhile or was under way then.
   */
  truncatedSince(truncations: number): boolean {
    return this.truncations !== truncations || truncations % 2 === 1;
  }

  get active(): Segment {
    return this.segments[this.segments.length - 1];
  }

  /**
   * No segment files (docs/architecture.md, "Hosted partitions"): a log never written, or released when
   * this broker stopped being a replica. It reads as an empty log at 0; the first append creates its files.
   */
  get dormant(): boolean {
    return this.segments.length === 0;
  }

  get logStartOffset(): number {
    return this.segments.length === 0 ? 0 : this.segments[0].baseOffset;
  }

  get logEndOffset(): number {
    return this.segments.length === 0 ? 0 : this.active.nextOffset;
  }

  clampHwm(v: number): number {
    return Math.max(this.logStartOffset, Math.min(v, this.logEndOffset));
  }

  /** The segment holding `offset`: the last one starting at or below it. */
  segmentFor(offset: number): Segment | null {
    const segs = this.segments;
    let lo = 0;
    let hi = segs.length - 1;
    let found = -1;
    while (lo <= hi) {
      const mid = (lo + hi) >>> 1;
      if (segs[mid].baseOffset <= offset) {
        found = mid;
        lo = mid + 1;
      } else {
        hi = mid - 1;
      }
    }
    return found < 0 ? null : segs[found];
  }

  /** After a failed fsync the page cache state is unknown: refuse further appends (reads still work). */
  fail(err: unknown): void {
    if (this.failed) return;
    this.failed = err instanceof Error ? err : new Error(String(err));
    this.logger.error({ err: this.failed }, 'partition log failed; appends are refused until reopen');
    this.onFailed?.();
  }

  /** The failed files are gone (a release, a destroy): the log takes appends again. */
  endFailure(): void {
    this.failed = null;
    this.onRecovered?.();
  }

  /**
   * A datasync failed (of `failed`, when one segment's): fail() and cut back to what a datasync covered
   * (Segment.cutToDurable); `cutting` ends with it. Journaled, every segment is cut: the journal holds what
   * is past that point, and a restart replays it over what the disk lost. Else only the segment whose
   * fsync failed: another's unsynced bytes are not known to be lost, and under flush=interval they may be
   * acknowledged. Under flush=os none (a segment rolled without an fsync would be cut to nothing, and the
   * loader then drops every later one): the mode promised nothing past the page cache.
   */
  failSync(err: unknown, failed: Segment | null): void {
    this.fail(err);
    const journaled = this.options.journal !== undefined && this.options.flush === 'always';
    const segments = journaled ? [...this.segments] : failed !== null && this.options.flush !== 'os' ? [failed] : [];
    if (segments.length === 0) return;
    this.cutting = this.cutting.then(() => this.cutBack(segments));
  }

  /** The cut of failSync, while it runs (close waits for it). */
  cutting: Promise<void> = SETTLED;
  /** Segments whose cut failed (an open the closing log refused, say), for the close to cut again (retryCuts). */
  private uncut: Segment[] | null = null;

  private async cutBack(segments: readonly Segment[]): Promise<void> {
    const outcomes = await Promise.allSettled(segments.map((s) => s.cutToDurable()));
    let n = 0;
    let err: unknown = null;
    outcomes.forEach((o, i) => {
      if (o.status === 'fulfilled') n += o.value ? 1 : 0;
      else {
        err ??= o.reason;
        (this.uncut ??= []).push(segments[i]);
      }
    });
    if (n > 0) this.logger.warn({ segments: n }, 'cut segments back to their last fsync');
    if (err !== null) this.logger.error({ err }, 'could not cut the log back to its last fsync; a reopen before a restart of the machine may read records the disk lacks');
  }

  /**
   * The close, once its own opens wait for a slot of the fd budget again: the cuts that failed, once more.
   * The close refuses the log's waits for a slot first, and a cut waiting for one (the budget had closed the
   * segment's fd) was refused with them.
   */
  async retryCuts(): Promise<void> {
    await this.cutting;
    const segments = this.uncut;
    if (segments === null) return;
    this.uncut = null;
    this.cutting = this.cutting.then(() => this.cutBack(segments));
    await this.cutting;
  }
}

/**
 * Durability of a partition log's writes (docs/architecture.md, "Storage"): the segments written since their
 * last fsync, and group commit for flush=always, where one datasync covers every append written before it
 * started.
 */
import { SETTLED } from '../common/settled.js';
import type { AppendResult } from './log-options.js';
import { storageError } from './log-fs.js';
import type { LogState } from './log-state.js';
import type { Segment } from './segment.js';

/** An append waiting for its fsync: `result` is set when its write completed. */
export interface SyncWaiter {
  resolve: (r: AppendResult) => void;
  reject: (e: Error) => void;
  result?: AppendResult;
}

const NO_SEGMENTS: readonly Segment[] = [];

export class GroupCommit {
  /** Segments written since their last fsync; null until the first write (most partitions of a big broker are idle). */
  private dirty: Set<Segment> | null = null;
  private waiters: SyncWaiter[] = [];
  private requested = false;
  private syncing = false;
  /** idle() callers, woken when a pass ends with nothing more requested. */
  private idleWaiters: Array<() => void> | null = null;

  constructor(
    private readonly st: LogState,
    /** Told each time a write leaves a segment to be synced (the flush=interval timer, LogTicker). */
    private readonly onDirty: (() => void) | null = null,
  ) {}

  /** `seg` was written and needs a datasync. */
  markDirty(seg: Segment): void {
    (this.dirty ??= new Set()).add(seg);
    this.onDirty?.();
  }

  /** Written since its last fsync. */
  isDirty(seg: Segment): boolean {
    return this.dirty?.has(seg) === true;
  }

  get dirtyCount(): number {
    return this.dirty?.size ?? 0;
  }

  /** `seg` is gone (deleted, replaced) or was synced outside a pass: no pass syncs it. */
  forget(seg: Segment): void {
    this.dirty?.delete(seg);
  }

  /** Every segment was synced outside a pass, or is gone. */
  forgetAll(): void {
    this.dirty?.clear();
  }

  /** Resolves `w` (or rejects it) after the next fsync pass; call kick() to start it. */
  wait(w: SyncWaiter): void {
    this.waiters.push(w);
  }

  kick(): void {
    this.requested = true;
    if (this.syncing) return;
    this.syncing = true;
    this.pass();
  }

  /**
   * Group commit: every waiter taken at the start of a pass had its write completed before the fsync
   * starts, so one datasync covers all of them; appends finishing meanwhile wait for the next pass.
   * Callbacks rather than an async loop: a partition written one record at a time runs a pass per append.
   */
  private pass(): void {
    if (!this.requested) {
      this.syncing = false;
      const idle = this.idleWaiters;
      this.idleWaiters = null;
      if (idle !== null) for (const wake of idle) wake();
      return;
    }
    this.requested = false;
    const waiters = this.waiters;
    this.waiters = [];
    if (this.st.failed) {
      // After a failed fsync no later one proves anything: Linux may have dropped the pages it could not
      // write, and report the next fsync as a success without them.
      this.settle(waiters, this.logFailed());
      return;
    }
    const segs = this.dirty === null || this.dirty.size === 0 ? NO_SEGMENTS : [...this.dirty];
    this.dirty?.clear();
    this.syncFrom(segs, 0, waiters, performance.now());
  }

  /** Datasyncs segs[i..] one after another, then settles the pass's waiters. */
  private syncFrom(segs: readonly Segment[], i: number, waiters: SyncWaiter[], started: number): void {
    while (i < segs.length && segs[i].deleted) i++;
    if (i < segs.length) {
      segs[i].datasync().then(
        () => this.syncFrom(segs, i + 1, waiters, started),
        (err: unknown) => {
          this.st.failSync(err);
          this.settle(waiters, storageError(this.st.dir, 'fsync failed', err));
        },
      );
      return;
    }
    if (segs.length > 0) this.st.options.onSync?.((performance.now() - started) / 1000);
    // Another fsync of this log failed while the pass ran: Linux reports a write-back error to one fsync of
    // an open file only, so this pass's success does not show that its appends' pages reached the disk.
    this.settle(waiters, this.st.failed ? this.logFailed() : null);
  }

  private logFailed(): Error {
    return storageError(this.st.dir, 'log failed', this.st.failed);
  }

  private settle(waiters: SyncWaiter[], error: Error | null): void {
    for (const w of waiters) {
      if (error) w.reject(error);
      else w.resolve(w.result as AppendResult);
    }
    this.pass();
  }

  /** Resolves once no fsync pass is running. */
  idle(): Promise<void> {
    if (!this.syncing) return SETTLED;
    return new Promise<void>((resolve) => (this.idleWaiters ??= []).push(resolve));
  }
}

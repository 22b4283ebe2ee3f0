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

export class GroupCommit {
  /** Segments written since their last fsync; null until the first write (most partitions of a big broker are idle). */
  private dirty: Set<Segment> | null = null;
  private waiters: SyncWaiter[] = [];
  private requested = false;
  private syncing = false;
  private done: Promise<void> = SETTLED;

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
    this.done = this.loop();
  }

  /**
   * Group commit: every waiter taken at the start of a pass had its write completed before the fsync
   * starts, so one datasync covers all of them; appends finishing meanwhile wait for the next pass.
   */
  private async loop(): Promise<void> {
    try {
      while (this.requested) {
        this.requested = false;
        const waiters = this.waiters;
        this.waiters = [];
        const segs = this.dirty === null ? [] : [...this.dirty];
        this.dirty?.clear();
        let error: Error | null = null;
        const started = performance.now();
        try {
          for (const s of segs) if (!s.deleted) await s.datasync();
          if (segs.length > 0) this.st.options.onSync?.((performance.now() - started) / 1000);
        } catch (err) {
          this.st.fail(err);
          error = storageError(this.st.dir, 'fsync failed', err);
        }
        for (const w of waiters) {
          if (error) w.reject(error);
          else w.resolve(w.result as AppendResult);
        }
      }
    } finally {
      this.syncing = false;
    }
  }

  /** Resolves once no fsync pass is running. */
  async idle(): Promise<void> {
    while (this.syncing) await this.done;
  }
}

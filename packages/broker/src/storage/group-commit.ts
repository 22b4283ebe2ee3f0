/**
 * Durability of a partition log's writes (docs/architecture.md, "Storage"): the segments written since their
 * last fsync, and group commit for flush=always, where one datasync covers every append written before it
 * started. With the broker's journal (journal.ts) an append is durable once the journal's fdatasync covers
 * it, and the segments are fsynced later, when the flush timer asks (syncSegments).
 */
import { SETTLED } from '../common/settled.js';
import type { AppendResult } from './log-options.js';
import type { Journal, SyncToken } from './journal.js';
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
  /** Passes whose waiters wait for the journal (truncation, roll and close wait for them too, as for an fsync). */
  private journalWaits = 0;
  /** Journaled: the next pass fsyncs the dirty segments too (syncSegments). */
  private segmentsWanted = false;
  /** This log's key in the journal (journal.keyOf). */
  private journalKey = '';

  constructor(
    private readonly st: LogState,
    /** Told each time a write leaves a segment to be synced (the flush timer, LogTicker). */
    private readonly onDirty: (() => void) | null = null,
    private readonly journal: Journal | null = null,
  ) {
    if (journal) this.journalKey = journal.keyOf(st.dir);
  }

  /** Appends are made durable by the journal (it has ended its recovery), not by segment fsyncs. */
  get journaled(): boolean {
    return this.journal?.active === true;
  }

  /**
   * Journaled: what the log just wrote to its segment, offsets first..last, goes to the journal too (the
   * waiters then wait for its fdatasync). A failed write fails the log: its segment holds bytes no journal
   * entry covers.
   */
  journalWrite(first: number, last: number, count: number, bytes: readonly Buffer[]): void {
    if (!this.journaled) return;
    try {
      (this.journal as Journal).write(this.journalKey, first, last, count, bytes);
    } catch (err) {
      this.st.fail(err);
      throw storageError(this.st.dir, 'journal write failed', err);
    }
  }

  /** Journaled: a truncation to `offset` (durable before the log truncates). */
  journalTruncate(offset: number): Promise<void> {
    return this.journaled ? (this.journal as Journal).truncate(this.journalKey, offset) : Promise.resolve();
  }

  /** Journaled: the log's files go (durable before they do). */
  journalReset(): Promise<void> {
    return this.journaled ? (this.journal as Journal).reset(this.journalKey) : Promise.resolve();
  }

  /** Journaled: every segment was fsynced outside a pass (a clean close). */
  journalForget(): void {
    if (this.journaled) (this.journal as Journal).forget(this.journalKey);
  }

  /** Journaled: the next pass fsyncs every dirty segment (the checkpoint that lets journal files go); else kick(). */
  syncSegments(): void {
    this.segmentsWanted = true;
    this.kick();
  }

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
      this.wakeIdle();
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
    let token: SyncToken;
    if (this.journaled) {
      if (waiters.length > 0) {
        this.journalWaits++;
        (this.journal as Journal).whenDurable((err) => this.settleJournaled(waiters, err));
      }
      if (!this.segmentsWanted) {
        this.pass();
        return;
      }
      this.segmentsWanted = false;
      token = (this.journal as Journal).segmentSyncStarted(this.journalKey);
    }
    const segs = this.dirty === null || this.dirty.size === 0 ? NO_SEGMENTS : [...this.dirty];
    this.dirty?.clear();
    this.syncFrom(segs, 0, this.journaled ? [] : waiters, performance.now(), token);
  }

  /** Datasyncs segs[i..] one after another, then settles the pass's waiters. */
  private syncFrom(segs: readonly Segment[], i: number, waiters: SyncWaiter[], started: number, token?: SyncToken): void {
    while (i < segs.length && segs[i].deleted) i++;
    if (i < segs.length) {
      segs[i].datasync().then(
        () => this.syncFrom(segs, i + 1, waiters, started, token),
        (err: unknown) => {
          if (this.journaled) {
            // The journal holds what the segments lack (a restart replays it): the log stops taking
            // appends, but nothing acknowledged is cut from it.
            this.st.fail(err);
            (this.journal as Journal).segmentSyncEnded(this.journalKey, token, false);
          } else this.st.failSync(err);
          this.settle(waiters, storageError(this.st.dir, 'fsync failed', err));
        },
      );
      return;
    }
    if (this.journaled) (this.journal as Journal).segmentSyncEnded(this.journalKey, token, true);
    if (segs.length > 0) this.st.options.onSync?.((performance.now() - started) / 1000);
    // Another fsync of this log failed while the pass ran: Linux reports a write-back error to one fsync of
    // an open file only, so this pass's success does not show that its appends' pages reached the disk.
    this.settle(waiters, this.st.failed ? this.logFailed() : null);
  }

  private logFailed(): Error {
    return storageError(this.st.dir, 'log failed', this.st.failed);
  }

  /** Waiters of a journaled pass, once the journal's fdatasync ended: only the journal decides. */
  private settleJournaled(waiters: SyncWaiter[], err: Error | null): void {
    this.journalWaits--;
    if (err) this.st.fail(err);
    const e = err ? storageError(this.st.dir, 'journal fsync failed', err) : null;
    for (const w of waiters) {
      if (e) w.reject(e);
      else w.resolve(w.result as AppendResult);
    }
    this.wakeIdle();
  }

  private settle(waiters: SyncWaiter[], error: Error | null): void {
    for (const w of waiters) {
      if (error) w.reject(error);
      else w.resolve(w.result as AppendResult);
    }
    this.pass();
  }

  /** Wakes idle() callers once no pass runs and no pass's waiters wait for the journal. */
  private wakeIdle(): void {
    if (this.syncing || this.journalWaits > 0 || this.idleWaiters === null) return;
    const idle = this.idleWaiters;
    this.idleWaiters = null;
    for (const wake of idle) wake();
  }

  /** Resolves once no fsync pass is running, and (journaled) no append waits for the journal. */
  idle(): Promise<void> {
    if (!this.syncing && this.journalWaits === 0) return SETTLED;
    return new Promise<void>((resolve) => (this.idleWaiters ??= []).push(resolve));
  }
}

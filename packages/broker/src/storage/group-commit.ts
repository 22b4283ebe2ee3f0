/**
 * Durability of a partition log's writes (docs/architecture.md, "Storage"): the segments written since their
 * last fsync, and group commit for flush=always, where one datasync covers every append written before it
 * started. With the broker's journal (journal.ts) an append is durable once a journal write covers it, and
 * the segments are fsynced later, in passes of their own, when the flush timer asks (syncSegments).
 */
import { SETTLED } from '../common/settled.js';
import type { AppendResult } from './log-options.js';
import type { Journal, SyncToken } from './journal.js';
import { type JournalKey, journalKey } from './journal-format.js';
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
/** The key of a log without a journal (never written anywhere). */
const NO_KEY = journalKey('');

export class GroupCommit {
  /** Segments written since their last fsync; null until the first write (most partitions of a big broker are idle). */
  private dirty: Set<Segment> | null = null;
  private waiters: SyncWaiter[] = [];
  private requested = false;
  private syncing = false;
  /** idle() callers, woken when a pass ends with nothing more requested. */
  private idleWaiters: Array<() => void> | null = null;
  /** segmentsIdle() callers, woken when no fsync pass runs. */
  private segmentWaiters: Array<() => void> | null = null;
  /** Passes whose waiters wait for the journal (truncation, roll and close wait for them too, as for an fsync). */
  private journalWaits = 0;
  /** Journaled: a segment pass was asked for (syncSegments). */
  private segmentsWanted = false;
  /** This log's key in the journal (journal.keyOf). */
  private readonly journalKey: JournalKey;

  constructor(
    private readonly st: LogState,
    /** Told each time a write leaves a segment to be synced (the flush timer, LogTicker). */
    private readonly onDirty: (() => void) | null = null,
    private readonly journal: Journal | null = null,
  ) {
    this.journalKey = journal ? journal.keyOf(st.dir) : NO_KEY;
    if (journal) {
      st.onFailed = () => journal.logFailed(this.journalKey);
      st.onRecovered = () => journal.logRecovered(this.journalKey);
    }
  }

  /** Appends are made durable by the journal (flush=always, and the journal ended its recovery), not by segment fsyncs. */
  get journaled(): boolean {
    return this.journal?.active === true && this.st.options.flush === 'always';
  }

  /**
   * Journaled: what the log just wrote to its segment, offsets first..last on a log that ended at `from`,
   * goes to the journal too (the waiters then wait for its write). A failed write fails the log: its
   * segment holds bytes no journal entry covers.
   */
  journalWrite(from: number, first: number, last: number, count: number, bytes: readonly Buffer[]): void {
    if (!this.journaled) return;
    try {
      (this.journal as Journal).write(this.journalKey, from, first, last, count, bytes);
    } catch (err) {
      this.st.fail(err);
      throw storageError(this.st.dir, 'journal write failed', err);
    }
  }

  /** Journaled: a truncation to `offset` (durable before the log truncates). Rejects with storage_error. */
  journalTruncate(offset: number): Promise<void> {
    return this.journaled ? this.journalDurable((j) => j.truncate(this.journalKey, offset)) : SETTLED;
  }

  /**
   * Journaled: the log's files went or changed durably (its earlier entries are not needed any more). A
   * failed log stays failed for the journal (LogState.endFailure ends that, with its files).
   */
  journalReset(): Promise<void> {
    return this.journaled ? this.journalDurable((j) => j.reset(this.journalKey)) : SETTLED;
  }

  private journalDurable(write: (j: Journal) => Promise<void>): Promise<void> {
    let p: Promise<void>;
    try {
      p = write(this.journal as Journal);
    } catch (err) {
      p = Promise.reject(err);
    }
    return p.catch((err: unknown) => {
      throw storageError(this.st.dir, 'journal write failed', err);
    });
  }

  /** Journaled: every segment was fsynced outside a pass (a clean close). */
  journalForget(): void {
    if (this.journaled) (this.journal as Journal).forget(this.journalKey);
  }

  /** Journaled: a pass fsyncs every dirty segment (the checkpoint that lets journal files go); else kick(). */
  syncSegments(): void {
    this.segmentsWanted = true;
    this.kick();
  }

  /** `seg` was written and needs a datasync. */
  markDirty(seg: Segment): void {
    (this.dirty ??= new Set()).add(seg);
    this.onDirty?.();
    // A segment pass asked for before this write was marked (the fd budget asks as a write ends) runs now.
    if (this.segmentsWanted && this.journaled) this.kickJournaled();
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
    if (this.journaled) {
      this.kickJournaled();
      return;
    }
    this.requested = true;
    if (this.syncing) return;
    this.syncing = true;
    this.pass();
  }

  /**
   * Journaled: the waiters go to the journal at once, whatever segment fsync runs (a segment pass never
   * holds up an acknowledgement); the dirty segments are fsynced in a pass of their own when syncSegments
   * asked for one, a pass at a time.
   */
  private kickJournaled(): void {
    const journal = this.journal as Journal;
    const waiters = this.waiters;
    if (waiters.length > 0) {
      this.waiters = [];
      if (this.st.failed) {
        const e = this.logFailed();
        for (const w of waiters) w.reject(e);
      } else {
        this.journalWaits++;
        journal.whenDurable((err) => this.settleJournaled(waiters, err));
      }
    }
    if (!this.segmentsWanted || this.syncing || this.dirtyCount === 0) return;
    this.segmentsWanted = false;
    if (this.st.failed) {
      // A failed log trusts no later fsync (Linux reports a write-back error to one fsync only): none may
      // release its journal entries (its acknowledged records were lost at the restart) or raise what the
      // cut back keeps; its segments only let go of their slots in the fd budget (an open may wait for one).
      for (const seg of this.dirty ?? []) seg.forgetUnsynced();
      this.dirty?.clear();
      return;
    }
    this.syncing = true;
    const token = journal.segmentSyncStarted(this.journalKey);
    const segs = this.dirty === null || this.dirty.size === 0 ? NO_SEGMENTS : [...this.dirty];
    this.dirty?.clear();
    this.syncFrom(segs, 0, [], performance.now(), token);
  }

  /**
   * Group commit: every waiter taken at the start of a pass had its write completed before the fsync
   * starts, so one datasync covers all of them; appends finishing meanwhile wait for the next pass.
   * Callbacks rather than an async loop: a partition written one record at a time runs a pass per append.
   */
  private pass(): void {
    if (this.journaled) {
      // A journaled segment pass ended (syncFrom): another if one was asked for meanwhile.
      this.syncing = false;
      this.kickJournaled();
      this.wakeIdle();
      return;
    }
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
    const segs = this.dirty === null || this.dirty.size === 0 ? NO_SEGMENTS : [...this.dirty];
    this.dirty?.clear();
    this.syncFrom(segs, 0, waiters, performance.now());
  }

  /** Datasyncs segs[i..] one after another, then settles the pass's waiters. */
  private syncFrom(segs: readonly Segment[], i: number, waiters: SyncWaiter[], started: number, token?: SyncToken): void {
    while (i < segs.length && segs[i].deleted) i++;
    if (i < segs.length) {
      segs[i].datasync().then(
        () => this.syncFrom(segs, i + 1, waiters, started, token),
        (err: unknown) => {
          // Cut back to what an fsync covered even when journaled: a restart on this machine would read the
          // pages the disk lacks as present, skip their journal entries and let the files go. The journal
          // keeps them (the token is not released), so a restart replays them.
          this.st.failSync(err, segs[i]);
          if (token !== undefined) (this.journal as Journal).segmentSyncEnded(this.journalKey, token, false);
          this.settle(waiters, storageError(this.st.dir, 'fsync failed', err));
        },
      );
      return;
    }
    // A pass that ended on a failed log (another fsync of it failed meanwhile) covers nothing for the journal.
    if (token !== undefined) (this.journal as Journal).segmentSyncEnded(this.journalKey, token, this.st.failed === null);
    if (segs.length > 0) this.st.options.onSync?.((performance.now() - started) / 1000);
    // Another fsync of this log failed while the pass ran: Linux reports a write-back error to one fsync of
    // an open file only, so this pass's success does not show that its appends' pages reached the disk.
    this.settle(waiters, this.st.failed ? this.logFailed() : null);
  }

  private logFailed(): Error {
    return storageError(this.st.dir, 'log failed', this.st.failed);
  }

  /** Journaled waiters, once the journal's write that covers them ended: only the journal decides. */
  private settleJournaled(waiters: SyncWaiter[], err: Error | null): void {
    this.journalWaits--;
    if (err) this.st.fail(err);
    const e = err ? storageError(this.st.dir, 'journal write failed', err) : null;
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
    if (this.syncing) return;
    if (this.segmentWaiters !== null) {
      const waiting = this.segmentWaiters;
      this.segmentWaiters = null;
      for (const wake of waiting) wake();
    }
    if (this.journalWaits > 0 || this.idleWaiters === null) return;
    const idle = this.idleWaiters;
    this.idleWaiters = null;
    for (const wake of idle) wake();
  }

  /**
   * Appends wait for a journal write that waits for space (Journal.retryWhenFull): what waits for idle()
   * would wait as long, so retention and compaction do without it (a roll, a swap) until the next pass.
   */
  get waitsForSpace(): boolean {
    return this.journalWaits > 0 && this.journal?.waitingForSpace === true;
  }

  /**
   * Resolves once no fsync pass is running, whatever appends wait for the journal: what deleting a closed
   * segment needs (retention). Waiting for idle() there stalled every partition's retention behind an
   * append whose journal write waited for space, which retention may be what frees.
   */
  segmentsIdle(): Promise<void> {
    if (!this.syncing) return SETTLED;
    return new Promise<void>((resolve) => (this.segmentWaiters ??= []).push(resolve));
  }

  /**
   * idle(), then a refusal (storage_error) when the log failed (a pass waited for failed it): a roll that went
   * on fsynced the old segment again, wrote its index at its full size and started the next segment there,
   * past the cut back to the last good fsync, and the restart refused the gap.
   */
  async idleUnfailed(): Promise<void> {
    await this.idle();
    if (this.st.failed) throw this.logFailed();
  }

  /** Resolves once no fsync pass is running, and (journaled) no append waits for the journal. */
  idle(): Promise<void> {
    if (!this.syncing && this.journalWaits === 0) return SETTLED;
    return new Promise<void>((resolve) => (this.idleWaiters ??= []).push(resolve));
  }
}

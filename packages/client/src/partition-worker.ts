import type { Connection } from 'tributary-protocol/connection.js';
import type { HandlerWindow } from './handler-window.js';
import { Signal } from './wake-signal.js';

/** One installed partition: its reader, its position and what has been processed. */
export class PartitionWorker {
  readonly ac: AbortController;
  /** Next offset to fetch. */
  position: number;
  /** Next offset to commit (last processed + 1); -1 until something is processed. */
  processed = -1;
  committed: number;
  /**
   * The highest offset of a commit sent and not answered, or failed (-1: none): the broker may hold it
   * already, or get it later; cleared once an answered commit reaches it.
   */
  committing = -1;
  paused = false;
  readonly resumed = new Signal();
  loop: Promise<void> = Promise.resolve();
  conn: Connection | undefined;
  /** Set by seek(): the reader restarts from here. */
  seekTo: number | undefined;
  /**
   * Lost (the member expired, a read was refused as fenced) or its offset reset by an admin: nothing of it
   * is committed any more, also by a commit asked for before (docs/sdk.md, "Rebalancing").
   */
  discarded = false;
  /** Consecutive handler failures, for the retry backoff. */
  failures = 0;
  /** Consecutive failed reads, for the re-route backoff; reset by any read that delivers. */
  readFailures = 0;
  /** run()'s handlers of this installation under `concurrency` (docs/sdk.md, "Concurrency"). */
  window: HandlerWindow | undefined;
  /** Ends the open STREAM read, if any, so that a new `seekTo` takes effect without new records. */
  interruptRead: (() => void) | undefined;

  constructor(
    readonly partition: number,
    readonly assignmentGeneration: number,
    start: number,
    committed: number,
    parent: AbortSignal,
  ) {
    this.ac = new AbortController();
    this.position = start;
    this.committed = committed;
    parent.addEventListener('abort', () => this.ac.abort(), { once: true, signal: this.ac.signal });
  }

  get signal(): AbortSignal {
    return this.ac.signal;
  }
}

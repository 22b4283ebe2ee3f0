/**
 * How far behind the log end a partition's readers have read lately, so its tail cache keeps what they
 * will still read rather than always its whole bound (docs/architecture.md, "Storage", tail cache): a
 * fresh topic's caches then fill only as far as its consumers lag, and evicted frames go back to the frame
 * pool at once, where the next frames take them (memory the process touched already: new memory costs a
 * page fault per 4 KiB on its first write).
 *
 * Readers are not told apart: the lag of every read that reaches the log (CONSUME, STREAM, Kafka Fetch;
 * not one parked at the end of what it may read: the cache keeps that end, PartitionLog.readFloor) is its
 * distance from the log end when it was made, and what counts is the largest over the current and the
 * previous window. A reader that polls once a window is covered by its own reads; one that stops is
 * forgotten after one to two.
 */
import { type Clock, systemClock } from '../common/clock.js';

/**
 * Long next to a poll: a reader that polls every few seconds, or pauses now and then, is covered by the
 * lag of its own last reads even while others read close behind the end.
 */
export const READ_WINDOW_MS = 10_000;

export class TailReaders {
  private current = -1;
  private previous = -1;
  private since = 0;

  constructor(private readonly clock: Pick<Clock, 'monotonic'> = systemClock) {}

  /** A read from `lag` records behind the log end. */
  note(lag: number): void {
    this.roll();
    if (lag > this.current) this.current = lag;
  }

  /** The most records behind the log end any read of the last one to two windows was; -1 when none read. */
  get lag(): number {
    if (this.current < 0 && this.previous < 0) return -1;
    this.roll();
    return Math.max(this.current, this.previous);
  }

  private roll(): void {
    const now = this.clock.monotonic();
    const age = now - this.since;
    if (age < READ_WINDOW_MS) return;
    // The current window ended less than a window ago: its reads still count, as the previous window's.
    // Windows stay aligned, so a read counts for one to two windows however rarely this is asked.
    this.previous = age < 2 * READ_WINDOW_MS ? this.current : -1;
    this.current = -1;
    this.since = this.since === 0 ? now : this.since + READ_WINDOW_MS * Math.floor(age / READ_WINDOW_MS);
  }
}

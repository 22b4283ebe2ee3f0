/**
 * Which segments of a partition log keep an open fd: the active and previous segment always, plus the few
 * closed segments readers touched last (LRU); the others are released and reopened on demand.
 */
import type { LogState } from './log-state.js';
import type { Segment } from './segment.js';

/** Closed segments whose fds stay open after a read (active and previous are kept anyway). */
const MAX_OPEN_CLOSED_SEGMENTS = 4;

export class SegmentFds {
  /** Closed segments with an open fd, least recently read first. */
  private openClosed: Segment[] = [];

  constructor(private readonly st: LogState) {}

  /** Bounds fds held by closed segments that readers touched (LRU). */
  touch(seg: Segment): void {
    const segments = this.st.segments;
    const n = segments.length;
    if (seg === segments[n - 1] || seg === segments[n - 2]) return;
    const i = this.openClosed.indexOf(seg);
    if (i >= 0) this.openClosed.splice(i, 1);
    this.openClosed.push(seg);
    while (this.openClosed.length > MAX_OPEN_CLOSED_SEGMENTS) this.releaseLater(this.openClosed.shift() as Segment);
  }

  releaseLater(seg: Segment): void {
    seg.release().catch((err: unknown) => this.st.logger.debug({ err }, 'could not release segment fd'));
  }

  /** Compaction reads reopen fds of old segments; give them back unless readers hold them. */
  releaseIfIdle(seg: Segment): void {
    const segments = this.st.segments;
    const n = segments.length;
    if (seg.deleted || seg === segments[n - 1] || seg === segments[n - 2] || this.openClosed.includes(seg)) return;
    this.releaseLater(seg);
  }

  /** A segment leaves the log (deleted or replaced): stop tracking it. */
  forget(seg: Segment): void {
    const i = this.openClosed.indexOf(seg);
    if (i >= 0) this.openClosed.splice(i, 1);
  }

  /** After a truncation: drop deleted segments and the (new) active one. */
  prune(): void {
    this.openClosed = this.openClosed.filter((s) => !s.deleted && s !== this.st.active);
  }
}

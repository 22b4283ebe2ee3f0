/**
 * The window of one partition under run()'s `concurrency` (docs/sdk.md, "Concurrency"), as a state
 * machine without I/O or timers: which admitted message may start next, and how far the contiguous
 * prefix of handled messages reaches. Messages are admitted in offset order; at most `perPartition` run
 * at once; at most `maxBuffered` are held, from the first unhandled one to the last admitted (handled
 * ones behind an unhandled one still count: they cannot be committed yet). With `ordering: 'key'` a
 * message starts only once every earlier message with the same key is handled; messages without a key
 * are one key of their own. `'partition'` is one key for all; `'none'` orders nothing.
 */

export type Ordering = 'key' | 'partition' | 'none';

type State = 'queued' | 'running' | 'done';

export interface WindowEntry<M> {
  readonly offset: number;
  /** Dropped once handled: a handled message is not held. */
  message: M | undefined;
  readonly key: string | null;
  state: State;
}

/** Key of messages without a key under `'key'` ordering, and of every message under `'partition'`. */
const ONE_KEY = '';

export class KeyScheduler<M> {
  /** Admitted entries from the first unhandled one on (`head` is the first live index). */
  private entries: Array<WindowEntry<M>> = [];
  private head = 0;
  /** Per key, its unhandled entries in offset order: the first may run, the others wait for it. */
  private readonly byKey = new Map<string | null, Array<WindowEntry<M>>>();
  /** Entries that may start now, as a min-heap by offset (the lowest first moves the prefix soonest). */
  private readonly ready: Array<WindowEntry<M>> = [];
  private runningCount = 0;
  private last = -1;

  constructor(
    readonly limits: { perPartition: number; maxBuffered: number; ordering: Ordering },
    private readonly keyOf: (m: M) => Buffer | null,
  ) {}

  /** Messages held: from the first unhandled one to the last admitted. */
  get buffered(): number {
    return this.entries.length - this.head;
  }

  get running(): number {
    return this.runningCount;
  }

  /** The last offset admitted since the window was created or cleared; -1 before any. */
  get lastAdmitted(): number {
    return this.last;
  }

  hasRoom(): boolean {
    return this.buffered < this.limits.maxBuffered;
  }

  /**
   * The first offset not handled yet, or undefined when every admitted message is handled (then
   * everything up to `lastAdmitted` is).
   */
  frontier(): number | undefined {
    return this.head < this.entries.length ? this.entries[this.head]!.offset : undefined;
  }

  /** Handled offsets above the frontier (a failure's redelivery need not run them again). */
  handledAhead(): number[] {
    const out: number[] = [];
    for (let i = this.head; i < this.entries.length; i++) if (this.entries[i]!.state === 'done') out.push(this.entries[i]!.offset);
    return out;
  }

  /**
   * Admits the next message (offsets rise). `handled`: it was handled before (a redelivery after a
   * failure), so it only takes its place in the prefix.
   */
  admit(offset: number, message: M, handled = false): void {
    if (!this.hasRoom()) throw new Error('KeyScheduler.admit: window full');
    if (offset <= this.last) throw new Error(`KeyScheduler.admit: offset ${offset} after ${this.last}`);
    this.last = offset;
    const o = this.limits.ordering;
    const raw = o === 'key' ? this.keyOf(message) : null;
    const key = o === 'none' ? null : raw === null ? ONE_KEY : `k${raw.toString('latin1')}`;
    const e: WindowEntry<M> = { offset, message: handled ? undefined : message, key, state: handled ? 'done' : 'queued' };
    this.entries.push(e);
    if (handled) {
      this.advance();
      return;
    }
    if (o === 'none') {
      this.pushReady(e);
      return;
    }
    const q = this.byKey.get(key);
    if (q) q.push(e);
    else {
      this.byKey.set(key, [e]);
      this.pushReady(e);
    }
  }

  /** The next entry to start (now counted as running), or undefined when none may start. */
  take(): WindowEntry<M> | undefined {
    if (this.runningCount >= this.limits.perPartition || this.ready.length === 0) return undefined;
    const e = this.popReady();
    e.state = 'running';
    this.runningCount++;
    return e;
  }

  /** A running entry was handled: the next of its key may start, and the prefix may move. */
  complete(e: WindowEntry<M>): void {
    if (e.state !== 'running') throw new Error(`KeyScheduler.complete: offset ${e.offset} is not running`);
    this.runningCount--;
    e.state = 'done';
    e.message = undefined;
    if (this.limits.ordering !== 'none') {
      const q = this.byKey.get(e.key)!;
      q.shift();
      if (q.length === 0) this.byKey.delete(e.key);
      else this.pushReady(q[0]!);
    }
    this.advance();
  }

  /**
   * A running entry failed: it stays unhandled and blocks the prefix and its key. Nothing of its key
   * starts until `clear()` (the caller settles the window and reads again from the frontier).
   */
  fail(e: WindowEntry<M>): void {
    if (e.state !== 'running') throw new Error(`KeyScheduler.fail: offset ${e.offset} is not running`);
    this.runningCount--;
    e.state = 'queued';
  }

  /** Forgets every entry; only when nothing runs. The next admitted offset may be any. */
  clear(): void {
    if (this.runningCount > 0) throw new Error('KeyScheduler.clear: entries still running');
    this.entries = [];
    this.head = 0;
    this.byKey.clear();
    this.ready.length = 0;
    this.last = -1;
  }

  private advance(): void {
    while (this.head < this.entries.length && this.entries[this.head]!.state === 'done') this.head++;
    // compact now and then: the array holds only the live window plus at most as many dead slots
    if (this.head > 1024 && this.head * 2 > this.entries.length) {
      this.entries = this.entries.slice(this.head);
      this.head = 0;
    }
  }

  private pushReady(e: WindowEntry<M>): void {
    const h = this.ready;
    h.push(e);
    let i = h.length - 1;
    while (i > 0) {
      const p = (i - 1) >> 1;
      if (h[p]!.offset <= e.offset) break;
      h[i] = h[p]!;
      i = p;
    }
    h[i] = e;
  }

  private popReady(): WindowEntry<M> {
    const h = this.ready;
    const top = h[0]!;
    const end = h.pop()!;
    if (h.length > 0) {
      let i = 0;
      for (;;) {
        const l = 2 * i + 1;
        if (l >= h.length) break;
        const c = l + 1 < h.length && h[l + 1]!.offset < h[l]!.offset ? l + 1 : l;
        if (h[c]!.offset >= end.offset) break;
        h[i] = h[c]!;
        i = c;
      }
      h[i] = end;
    }
    return top;
  }
}

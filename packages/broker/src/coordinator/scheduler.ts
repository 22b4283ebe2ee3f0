import { type Clock, type ClockTimer, systemClock } from '../common/clock.js';

/**
 * One timer per coordinator: a min-heap of deadlines drives session expiry, join windows and rebalance
 * timeouts, instead of one Node timer per member. Entries are keyed; scheduling a key again replaces its
 * deadline (the stale heap entry is skipped when it surfaces). Deadlines are `clock.monotonic()`
 * readings, never wall times: a wall step must not make every entry due at once.
 */
/**
 * The longest delay a Node timer takes (2^31-1 ms, about 24.8 days): a longer one fires at once. A deadline
 * further away (an offsets retention of 30 days) is reached in steps of at most this.
 */
const MAX_TIMER_MS = 0x7fffffff;

interface Entry {
  at: number;
  key: string;
  seq: number;
}

export class Scheduler {
  private heap: Entry[] = [];
  private live = new Map<string, { seq: number; fn: () => void }>();
  private seq = 0;
  private timer: ClockTimer | undefined;
  private timerAt = Number.POSITIVE_INFINITY;
  private stopped = false;

  constructor(private readonly clock: Clock = systemClock) {}

  schedule(key: string, at: number, fn: () => void): void {
    if (this.stopped) return;
    const seq = ++this.seq;
    this.live.set(key, { seq, fn });
    this.push({ at, key, seq });
    this.arm();
  }

  cancel(key: string): void {
    this.live.delete(key);
  }

  has(key: string): boolean {
    return this.live.has(key);
  }

  get size(): number {
    return this.live.size;
  }

  stop(): void {
    this.stopped = true;
    this.clock.clearTimeout(this.timer);
    this.heap = [];
    this.live.clear();
  }

  private arm(): void {
    const top = this.heap[0];
    if (!top) return;
    if (top.at >= this.timerAt && this.timer) return;
    this.clock.clearTimeout(this.timer);
    this.timerAt = top.at;
    this.timer = this.clock.setTimeout(() => this.fire(), Math.min(MAX_TIMER_MS, Math.max(0, top.at - this.clock.monotonic())));
    this.timer.unref();
  }

  private fire(): void {
    this.timer = undefined;
    this.timerAt = Number.POSITIVE_INFINITY;
    const now = this.clock.monotonic();
    while (this.heap.length > 0 && this.heap[0]!.at <= now) {
      const e = this.pop()!;
      const cur = this.live.get(e.key);
      if (!cur || cur.seq !== e.seq) continue;
      this.live.delete(e.key);
      try {
        cur.fn();
      } catch {
        // a failing task must not stop the others; tasks log their own errors
      }
    }
    this.arm();
  }

  private push(e: Entry): void {
    // Cancelled and replaced entries stay in the heap until they surface: fine for deadlines seconds away,
    // not for a 7-day offsets retention cancelled each time its group comes back. Past twice the live
    // entries, only the live ones are kept.
    if (this.heap.length > 2 * this.live.size + 1024) {
      const kept = this.heap.filter((x) => this.live.get(x.key)?.seq === x.seq);
      this.heap = [];
      for (const x of kept) this.push(x);
    }
    const h = this.heap;
    h.push(e);
    let i = h.length - 1;
    while (i > 0) {
      const parent = (i - 1) >> 1;
      if (h[parent]!.at <= e.at) break;
      h[i] = h[parent]!;
      i = parent;
    }
    h[i] = e;
  }

  private pop(): Entry | undefined {
    const h = this.heap;
    const top = h[0];
    const last = h.pop();
    if (h.length === 0 || !last) return top;
    let i = 0;
    for (;;) {
      const l = 2 * i + 1;
      const r = l + 1;
      let m = i;
      const mAt = () => (m === i ? last.at : h[m]!.at);
      if (l < h.length && h[l]!.at < mAt()) m = l;
      if (r < h.length && h[r]!.at < mAt()) m = r;
      if (m === i) break;
      h[i] = h[m]!;
      i = m;
    }
    h[i] = last;
    return top;
  }
}

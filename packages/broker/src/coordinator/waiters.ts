import type { Clock } from '../common/clock.js';

/**
 * Requests parked outside a group's lock (long-poll heartbeats, a join waiting for its window, a SYNC
 * waiting for the leader's plan), by key, until woken or their timeout on the coordinator's clock.
 */
export class Waiters {
  private readonly registry = new Map<string, Set<() => void>>();

  constructor(
    private readonly clock: Clock,
    private readonly stopped: () => boolean,
  ) {}

  wait(key: string, timeoutMs: number, signal?: AbortSignal): Promise<void> {
    const registry = this.registry;
    if (timeoutMs <= 0 || this.stopped() || signal?.aborted) return Promise.resolve();
    return new Promise<void>((resolve) => {
      let set = registry.get(key);
      if (!set) registry.set(key, (set = new Set()));
      const done = () => {
        this.clock.clearTimeout(timer);
        signal?.removeEventListener('abort', done);
        set!.delete(done);
        if (set!.size === 0 && registry.get(key) === set) registry.delete(key);
        resolve();
      };
      const timer = this.clock.setTimeout(done, timeoutMs);
      signal?.addEventListener('abort', done, { once: true });
      set.add(done);
    });
  }

  wake(key: string): void {
    const set = this.registry.get(key);
    if (set) for (const w of [...set]) w();
  }

  /** The sets of every key, for stop() to wake them all. */
  sets(): Set<() => void>[] {
    return [...this.registry.values()];
  }
}

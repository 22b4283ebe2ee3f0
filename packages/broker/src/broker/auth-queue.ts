/** The queue of password checks and the log of failed logins (docs/security.md "Login fairness"). */
import { TributaryError } from 'tributary-protocol/errors.js';
import type { Logger } from '../common/logger.js';
import { RateLimitedLog } from '../common/rate-limited-log.js';

/**
 * Verification runs on libuv's thread pool, which storage shares: at most two at once, and `throttled`
 * past `maxQueue` waiting, so an AUTH flood cannot starve fsyncs of other clients. Waiting checks are
 * served fairly (docs/security.md "Login fairness"): one pending check per connection (`owner.key`); the
 * addresses (`owner.source`) with checks waiting take turns, so a flood from one address delays another's
 * login by one check per turn; within an address, a connection's first check goes before the retries of
 * connections that already failed one, newest first, so a login arriving during a flood from its own
 * address (all of loopback is one) is not stuck behind every check queued before it. A queued check whose
 * `signal` aborts (its connection closed) leaves the queue without running: nobody waits for its answer.
 */
export class Limiter {
  private running = 0;
  private waiting = 0;
  /** Waiting checks by source; Map order is the turn order (a served source goes to the back). */
  private readonly queues = new Map<string, { first: Array<() => void>; retry: Array<() => void> }>();
  private readonly pending = new WeakSet<object>();
  constructor(
    private readonly max: number,
    private readonly maxQueue: number,
  ) {}
  get queued(): number {
    return this.waiting;
  }
  async run<T>(fn: () => Promise<T>, signal?: AbortSignal, owner?: { source: string; key: object; retry?: boolean }): Promise<T> {
    const dropped = () => new TributaryError('throttled', { reason: 'the connection closed before its check started' });
    if (signal?.aborted) throw dropped();
    if (owner && this.pending.has(owner.key)) throw new TributaryError('throttled', { reason: 'an authentication of this connection is in progress' });
    if (this.running >= this.max && this.waiting >= this.maxQueue) throw new TributaryError('throttled', { reason: 'too many authentications in progress' });
    if (owner) this.pending.add(owner.key);
    try {
      if (this.running >= this.max) await this.wait(owner?.source ?? '', owner?.retry === true, signal, dropped);
      else this.running++;
      try {
        return await fn();
      } finally {
        const next = this.next();
        if (next) next();
        else this.running--;
      }
    } finally {
      if (owner) this.pending.delete(owner.key);
    }
  }
  private wait(source: string, retry: boolean, signal: AbortSignal | undefined, dropped: () => Error): Promise<void> {
    return new Promise<void>((resolve, reject) => {
      let q = this.queues.get(source);
      if (!q) this.queues.set(source, (q = { first: [], retry: [] }));
      const lanes = q;
      const queue = retry ? q.retry : q.first;
      const onAbort = () => {
        const i = queue.indexOf(start);
        if (i >= 0) {
          queue.splice(i, 1);
          this.waiting--;
          if (lanes.first.length + lanes.retry.length === 0 && this.queues.get(source) === lanes) this.queues.delete(source);
        }
        reject(dropped());
      };
      // Handed the slot of a finished check (which is then not released).
      const start = () => {
        signal?.removeEventListener('abort', onAbort);
        resolve();
      };
      queue.push(start);
      this.waiting++;
      signal?.addEventListener('abort', onAbort, { once: true });
    });
  }
  /** The first waiting check of the source whose turn it is; that source then goes to the back. */
  private next(): (() => void) | undefined {
    for (const [source, q] of this.queues) {
      this.queues.delete(source);
      const start = q.first.length > 0 ? q.first.pop()! : q.retry.shift()!;
      if (q.first.length + q.retry.length > 0) this.queues.set(source, q);
      this.waiting--;
      return start;
    }
    return undefined;
  }
}

/**
 * Failed logins are logged one line each up to `burst` per interval; past that they are only counted, and
 * one summary line per interval says how many were left out (a guessing flood cannot flood the log).
 */
export function failedLoginLog(logger: Logger, burst = 20, intervalMs = 10_000): (fields: Record<string, unknown>) => void {
  const log = new RateLimitedLog(() => logger, { burst, intervalMs, summary: ({ left }) => [{ suppressed: left, intervalMs }, 'authentication failures not logged one by one'] });
  return (fields) => log.warn('', fields, 'authentication failed');
}

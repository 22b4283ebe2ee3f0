import { TributaryError } from 'tributary-protocol/errors.js';
import type { Logger } from './logger.js';

export interface RateLimitOptions {
  /** The window's length (10 s). */
  intervalMs?: number;
  /** Lines logged one by one per key and window (1). */
  burst?: number;
  /**
   * The line that reports the lines left out: by default the last one left out, with `notLogged` and
   * `intervalMs` added and `(repeated)` after its message.
   */
  summary?: (s: { left: number; intervalMs: number; last: Record<string, unknown>; msg: string }) => [Record<string, unknown>, string];
}

interface KeyState {
  /** Start of the key's window. */
  at: number;
  lines: number;
  left: number;
  last: Record<string, unknown>;
  msg: string;
  log?: Logger;
  timer?: NodeJS.Timeout;
}

/**
 * Warn lines for what can repeat thousands of times a minute (a full disk, a stopped offset store, a
 * password-guessing flood): per key, up to `burst` lines per interval are logged at once; past that they
 * are only counted, and at the interval's end one summary line says how many were left out. The summary
 * opens the next interval as one of its lines, so a steady flood logs at most `burst` lines per interval.
 * docs/operations.md, "A full disk"; docs/security.md, "2. Authentication" (failed logins).
 */
export class RateLimitedLog {
  private readonly keys = new Map<string, KeyState>();
  private readonly intervalMs: number;
  private readonly burst: number;
  private readonly summary: NonNullable<RateLimitOptions['summary']>;

  constructor(
    private readonly logger: () => Logger | undefined,
    options: RateLimitOptions = {},
  ) {
    this.intervalMs = options.intervalMs ?? 10_000;
    this.burst = options.burst ?? 1;
    this.summary = options.summary ?? (({ left, intervalMs, last, msg }) => [{ ...last, notLogged: left, intervalMs }, `${msg} (repeated)`]);
  }

  /** `logger`: the line's own (a partition log's child logger), else the constructor's. */
  warn(key: string, fields: Record<string, unknown>, msg: string, logger: Logger | undefined = this.logger()): void {
    const now = performance.now();
    let k = this.keys.get(key);
    if (k !== undefined && now - k.at >= this.intervalMs) {
      // A late timer (a busy event loop): the count goes out before this line.
      if (k.left > 0) this.flush(key);
      if (now - k.at >= this.intervalMs) k = undefined;
    }
    if (k === undefined) {
      k = { at: now, lines: 0, left: 0, last: fields, msg };
      this.keys.set(key, k);
      if (this.keys.size > 10_000) this.prune(now);
    }
    if (k.lines < this.burst) {
      k.lines++;
      logger?.warn(fields, msg);
      return;
    }
    k.left++;
    k.last = fields;
    k.msg = msg;
    k.log = logger;
    k.timer ??= setTimeout(() => this.flush(key), Math.max(0, k.at + this.intervalMs - now)).unref();
  }

  /** An error log line with the stack, but a storage_error, which repeats while its cause lasts, rate-limited per message. */
  failure(err: unknown, fields: Record<string, unknown>, msg: string, key = msg): void {
    if (err instanceof TributaryError && err.code === 'storage_error') this.warn(key, { ...fields, reason: err.fields.reason }, msg);
    else this.logger()?.error({ err, ...fields }, msg);
  }

  /** The summary of the lines left out; it opens the key's next window as its first line. */
  private flush(key: string): void {
    const k = this.keys.get(key);
    if (k === undefined) return;
    clearTimeout(k.timer);
    k.timer = undefined;
    if (k.left === 0) return;
    k.log?.warn(...this.summary({ left: k.left, intervalMs: this.intervalMs, last: k.last, msg: k.msg }));
    k.left = 0;
    k.lines = 1;
    k.at = performance.now();
  }

  private prune(now: number): void {
    for (const [key, k] of this.keys) if (k.timer === undefined && now - k.at >= this.intervalMs) this.keys.delete(key);
  }
}

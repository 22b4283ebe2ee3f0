import { TributaryError } from 'tributary-protocol/errors.js';
import type { Logger } from './logger.js';

/**
 * Warn lines for failures that can repeat thousands of times a minute (a full disk, a stopped offset
 * store): per key, the first is logged at once, then at most one per interval, and the lines left out are
 * counted into the next one (or into a summary line at the interval's end), so the log says what failed
 * and how often without flooding. docs/operations.md, "A full disk".
 */
export class RateLimitedLog {
  private readonly keys = new Map<string, { at: number; left: number; last: Record<string, unknown>; msg: string; log?: Logger; timer?: NodeJS.Timeout }>();

  constructor(
    private readonly logger: () => Logger | undefined,
    private readonly intervalMs = 10_000,
  ) {}

  /** `logger`: the line's own (a partition log's child logger), else the constructor's. */
  warn(key: string, fields: Record<string, unknown>, msg: string, logger: Logger | undefined = this.logger()): void {
    const now = performance.now();
    const k = this.keys.get(key);
    if (k === undefined || now - k.at >= this.intervalMs) {
      if (k?.timer) clearTimeout(k.timer);
      const left = k?.left ?? 0;
      logger?.warn(left > 0 ? { ...fields, notLogged: left, intervalMs: this.intervalMs } : fields, msg);
      this.keys.set(key, { at: now, left: 0, last: fields, msg, log: logger });
      if (this.keys.size > 10_000) this.prune(now);
      return;
    }
    k.left++;
    k.last = fields;
    k.msg = msg;
    k.timer ??= setTimeout(() => this.flush(key), Math.max(0, k.at + this.intervalMs - now)).unref();
  }

  /** An error log line with the stack, but a storage_error, which repeats while its cause lasts, rate-limited per message. */
  failure(err: unknown, fields: Record<string, unknown>, msg: string, key = msg): void {
    if (err instanceof TributaryError && err.code === 'storage_error') this.warn(key, { ...fields, reason: err.fields.reason }, msg);
    else this.logger()?.error({ err, ...fields }, msg);
  }

  private flush(key: string): void {
    const k = this.keys.get(key);
    if (k === undefined) return;
    k.timer = undefined;
    if (k.left === 0) return;
    k.log?.warn({ ...k.last, notLogged: k.left, intervalMs: this.intervalMs }, `${k.msg} (repeated)`);
    k.left = 0;
    k.at = performance.now();
  }

  private prune(now: number): void {
    for (const [key, k] of this.keys) if (k.timer === undefined && now - k.at >= this.intervalMs) this.keys.delete(key);
  }
}

import { writeSync } from 'node:fs';
import { Writable } from 'node:stream';
import { pino } from 'pino';
import { PinoPretty } from 'pino-pretty';

export type Logger = pino.Logger;

export type LogFormat = 'auto' | 'pretty' | 'json';

/**
 * stderr, each line written synchronously (nothing is lost when the process exits). Once stderr is gone
 * (its reader exited: EPIPE) lines are dropped: pino's own destination keeps a failed line buffered and
 * retries it forever when the process exits, so a broker whose log collector died could never stop.
 */
function stderrSink(): Writable {
  let gone = false;
  return new Writable({
    write(chunk: Buffer, _encoding, done) {
      let at = 0;
      while (!gone && at < chunk.length) {
        try {
          at += writeSync(2, chunk, at);
        } catch (err) {
          const code = (err as NodeJS.ErrnoException).code;
          if (code !== 'EAGAIN' && code !== 'EINTR') gone = true;
        }
      }
      done();
    },
  });
}

/**
 * Logs on stderr, so stdout stays free for command output: one JSON object per line for machines,
 * or readable lines (`12:00:01.234 INFO  broker ready port=9000 ...`) for a person at a terminal.
 * `auto` is pretty when stderr is a TTY and JSON otherwise (a service manager, a pipe, a file).
 */
export function createLogger(level: string = 'info', name = 'tributary', format: LogFormat = 'json'): Logger {
  const pretty = format === 'pretty' || (format === 'auto' && process.stderr.isTTY === true);
  const options = { name, level, base: { pid: process.pid } };
  if (!pretty) return pino(options, stderrSink());
  const stream = PinoPretty({ destination: stderrSink(), singleLine: true, colorize: process.stderr.isTTY === true, translateTime: 'SYS:HH:MM:ss.l', ignore: 'pid,hostname,name' });
  return pino(options, stream);
}

type LevelName = 'trace' | 'debug' | 'info' | 'warn' | 'error' | 'fatal';

/**
 * A child logger that is made the first time it logs something its level lets through. A pino child is
 * an object with a prototype of its own, its bindings serialised into a string and hidden classes for
 * both; a broker with 10,000 partitions made two per partition (about 15 MiB of heap and 250,000
 * objects for the garbage collector to mark) for loggers an idle partition never uses.
 */
class LazyChild {
  private made: Logger | undefined;

  constructor(
    private readonly parent: Logger | LazyChild,
    private readonly childBindings: pino.Bindings,
    /** A child's bindings, given before this one was made (see child()). */
    private readonly grandchildBindings: pino.Bindings | null = null,
  ) {}

  private get logger(): Logger {
    if (this.made === undefined) {
      const parent = this.parent instanceof LazyChild ? this.parent.logger : this.parent;
      const child = parent.child(this.childBindings);
      this.made = this.grandchildBindings ? child.child(this.grandchildBindings) : child;
    }
    return this.made;
  }

  get level(): string {
    return this.parent.level;
  }

  isLevelEnabled(level: string): boolean {
    return this.parent.isLevelEnabled(level);
  }

  child(bindings: pino.Bindings): LazyChild {
    // Not made yet: one lazy child for both (a partition's logger, passed to its log, is not kept alive
    // beside the log's). Bindings objects stay as given: a merged copy got a hidden class of its own.
    if (this.made === undefined && this.grandchildBindings === null) return new LazyChild(this.parent, this.childBindings, bindings);
    return new LazyChild(this, bindings);
  }

  bindings(): pino.Bindings {
    return this.logger.bindings();
  }

  private emit(level: LevelName, args: unknown[]): void {
    // Once made, the child filters by itself (pino makes a disabled level a no-op).
    if (this.made === undefined && !this.parent.isLevelEnabled(level)) return;
    (this.logger[level] as (...a: unknown[]) => void)(...args);
  }

  trace(...args: unknown[]): void {
    this.emit('trace', args);
  }
  debug(...args: unknown[]): void {
    this.emit('debug', args);
  }
  info(...args: unknown[]): void {
    this.emit('info', args);
  }
  warn(...args: unknown[]): void {
    this.emit('warn', args);
  }
  error(...args: unknown[]): void {
    this.emit('error', args);
  }
  fatal(...args: unknown[]): void {
    this.emit('fatal', args);
  }
}

/**
 * `parent.child(bindings)`, made on first use (LazyChild): for the many objects, one per partition,
 * whose loggers mostly stay silent. It logs, nests and filters by level as the child would.
 */
export function lazyChild(parent: Logger, bindings: pino.Bindings): Logger {
  return new LazyChild(parent, bindings) as unknown as Logger;
}

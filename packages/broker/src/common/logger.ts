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

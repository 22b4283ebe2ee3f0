import { pino } from 'pino';
import { PinoPretty } from 'pino-pretty';

export type Logger = pino.Logger;

export type LogFormat = 'auto' | 'pretty' | 'json';

/**
 * Logs on stderr, so stdout stays free for command output: one JSON object per line for machines,
 * or readable lines (`12:00:01.234 INFO  broker ready port=9000 ...`) for a person at a terminal.
 * `auto` is pretty when stderr is a TTY and JSON otherwise (a service manager, a pipe, a file).
 */
export function createLogger(level: string = 'info', name = 'tributary', format: LogFormat = 'json'): Logger {
  const pretty = format === 'pretty' || (format === 'auto' && process.stderr.isTTY === true);
  if (!pretty) return pino({ name, level, base: { pid: process.pid } }, pino.destination(2));
  // Synchronous on stderr, like the JSON destination: nothing is lost when the process exits.
  const stream = PinoPretty({ destination: 2, sync: true, singleLine: true, colorize: process.stderr.isTTY === true, translateTime: 'SYS:HH:MM:ss.l', ignore: 'pid,hostname,name' });
  return pino({ name, level, base: { pid: process.pid } }, stream);
}

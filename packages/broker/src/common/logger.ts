import { pino } from 'pino';

export type Logger = pino.Logger;

/** Structured JSON logs on stderr, so stdout stays free for command output. */
export function createLogger(level: string = 'info', name = 'tributary'): Logger {
  return pino({ name, level, base: { pid: process.pid } }, pino.destination(2));
}

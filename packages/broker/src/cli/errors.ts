import { formatValue } from 'tributary-protocol/command.js';
import type { TributaryError } from 'tributary-protocol/errors.js';

/** Exit codes the CLI promises: 0 ok, 1 runtime/broker failure, 2 bad usage or configuration. */
export const EXIT_OK = 0;
export const EXIT_FAILURE = 1;
export const EXIT_USAGE = 2;

/** Thrown by commands to end with a message on stderr and a given exit code. */
export class CliError extends Error {
  constructor(
    message: string,
    readonly exitCode: number = EXIT_FAILURE,
    /** Extra lines printed after the message (e.g. every config problem). */
    readonly lines: string[] = [],
  ) {
    super(message);
    this.name = 'CliError';
  }
}

/** The broker could not be reached or the connection to it was lost: a command may try the next address. */
export class BrokerUnreachableError extends CliError {}

export function usageError(message: string): CliError {
  return new CliError(`error: ${message}`, EXIT_USAGE);
}

/** `error: <code> [positional] k=v ...`, values quoted like the wire format. */
export function formatBrokerError(err: TributaryError): string {
  let out = `error: ${err.code}`;
  for (const p of err.extra) out += ` ${p}`;
  for (const [k, v] of Object.entries(err.fields)) out += ` ${k}=${formatValue(v)}`;
  return out;
}

/**
 * What a stop signal means to a running broker (docs/operations.md, "Shutdown"): the first stops it
 * cleanly; a repeat of the same signal within REPEAT_GRACE_MS is the same request arriving twice (GNU
 * `timeout` signals the child and its process group, a terminal sends one keypress to the whole group)
 * and is ignored; a later one, or another signal, is a second request: exit at once, uncleanly.
 */
export const REPEAT_GRACE_MS = 1000;

export interface FirstSignal {
  signal: NodeJS.Signals;
  at: number;
}

export type SignalAction = 'stop' | 'ignore' | 'exit';

export function signalAction(first: FirstSignal | undefined, signal: NodeJS.Signals, now: number): SignalAction {
  if (first === undefined) return 'stop';
  if (signal === first.signal && now - first.at < REPEAT_GRACE_MS) return 'ignore';
  return 'exit';
}

/**
 * One client call under a deadline of its own (the Admin's requestTimeoutMs): whatever its attempts,
 * retries and dials are doing when it passes, the call rejects with a retriable request_timeout.
 */
import type { Connection } from 'tributary-protocol/connection.js';
import { TributaryError } from 'tributary-protocol/errors.js';
import { untilAborted } from './abort.js';

/**
 * Puts a request of the call on `conn`'s wire: it ends with the call's signal, and a connection still
 * owing the call a reply at the deadline is dropped. Replies come in order, so one that never comes
 * would hold back every later request on that connection (its other requests fail with a retriable
 * connection_lost and are retried on a new one).
 */
export type Send = <R>(conn: Connection, request: Promise<R>) => Promise<R>;

/** Largest delay setTimeout takes: a longer one fires after 1 ms. */
const MAX_TIMER_MS = 2 ** 31 - 1;

/**
 * Runs `run` with a signal that aborts when the caller's `signal` does (the call rejects with its
 * reason, as untilAborted makes every SDK call do) or `ms` after now (the call rejects with
 * request_timeout, `what` naming it in the message).
 */
export async function withDeadline<T>(ms: number, what: string, signal: AbortSignal | undefined, run: (signal: AbortSignal, send: Send) => Promise<T>): Promise<T> {
  signal?.throwIfAborted();
  const bound = Math.min(ms, MAX_TIMER_MS);
  const deadline = new AbortController();
  const owing = new Map<Connection, number>();
  const timer = setTimeout(() => {
    deadline.abort(new TributaryError('request_timeout', { reason: 'no answer within requestTimeoutMs', timeoutMs: bound }, `${what}: no answer within ${bound} ms (requestTimeoutMs)`));
    for (const conn of owing.keys()) conn.abandon(new TributaryError('connection_lost', { reason: 'a request was not answered within requestTimeoutMs', timeoutMs: bound }));
  }, bound);
  const callSignal = signal ? AbortSignal.any([signal, deadline.signal]) : deadline.signal;
  const send: Send = async (conn, request) => {
    owing.set(conn, (owing.get(conn) ?? 0) + 1);
    try {
      return await untilAborted(request, callSignal);
    } finally {
      const n = (owing.get(conn) ?? 1) - 1;
      if (n > 0) owing.set(conn, n);
      else owing.delete(conn);
    }
  };
  try {
    return await run(callSignal, send);
  } catch (err) {
    // Whatever the attempt under way failed with once the deadline passed (an aborted backoff sleep, a
    // dial given up), the call's answer is the timeout.
    if (deadline.signal.aborted && !signal?.aborted) throw deadline.signal.reason;
    throw err;
  } finally {
    clearTimeout(timer);
  }
}

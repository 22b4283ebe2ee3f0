/**
 * The connection options every client takes, their defaults and checks (docs/sdk.md, "Connecting"); the
 * cluster (cluster.ts) uses them and re-exports them.
 */
import type { ClusterOptions } from './cluster.js';

/**
 * The connection options every client takes (stallTimeoutMs, connectTimeoutMs, bootstrapTimeoutMs):
 * the first that is invalid, as [option, reason], for the client's own invalid_config.
 */
export function checkConnectionOptions(o: Pick<ClusterOptions, 'stallTimeoutMs' | 'connectTimeoutMs' | 'bootstrapTimeoutMs'>): [string, string] | undefined {
  const stall = checkStallTimeout(o.stallTimeoutMs);
  if (stall) return ['stallTimeoutMs', stall];
  for (const k of ['connectTimeoutMs', 'bootstrapTimeoutMs'] as const) {
    const v = o[k];
    if (v !== undefined && (typeof v !== 'number' || !Number.isSafeInteger(v) || v < 1 || v > 2 ** 31 - 1)) return [k, 'must be an integer 1..2147483647 (ms)'];
  }
  return undefined;
}

/**
 * Until a client has reached a broker once, how long it keeps trying before every request fails with
 * brokers_unreachable (not retriable), naming each address tried and why it failed. After the first
 * connection, lost connections are retried with backoff for as long as the client lives
 * (docs/sdk.md, "Connecting").
 */
export const DEFAULT_BOOTSTRAP_TIMEOUT_MS = 10_000;

/**
 * How long a broker may answer nothing past a request's own wait before the connection is failed
 * (connection_lost, retried elsewhere), and how long one broker gets to answer a leader lookup. A
 * connection whose broker still answers a ping on its control connection is left alone (an acks=all
 * reply legitimately waits for the in-sync replicas), so this bounds frozen or unreachable brokers.
 */
export const DEFAULT_STALL_TIMEOUT_MS = 3000;

/** Validation shared by the clients: an integer in 10..2^31-1 (a timer's range). */
export function checkStallTimeout(v: unknown): string | undefined {
  if (v === undefined) return undefined;
  if (typeof v !== 'number' || !Number.isSafeInteger(v) || v < 10 || v > 2 ** 31 - 1) return 'must be an integer 10..2147483647 (ms)';
  return undefined;
}

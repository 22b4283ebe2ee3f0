/**
 * The headers a parked message carries on the retry and dead-letter topics (docs/sdk.md, "Retry and
 * dead-letter topics"): where it was first read, how many attempts failed, the last error, when it first
 * failed and when it is due. Values are decimal or UTF-8 text.
 */
import type { RecordHeader } from 'tributary-protocol/record.js';
import type { ConsumedMessage } from './consumer-context.js';

export const RETRY_HEADER_PREFIX = 'tributary.retry.';
export const RETRY_HEADERS = {
  topic: 'tributary.retry.topic',
  partition: 'tributary.retry.partition',
  offset: 'tributary.retry.offset',
  /** Attempts made (and failed) so far. */
  attempt: 'tributary.retry.attempt',
  error: 'tributary.retry.error',
  firstFailureAt: 'tributary.retry.first-failure',
  /** Not delivered to a handler before this time (ms since the epoch, the parking member's clock). */
  dueAt: 'tributary.retry.due',
} as const;

/** Longest error text kept in a header (the rest is cut). */
const MAX_ERROR_CHARS = 1000;

/** What a handler learns about the delivery it runs (`payload.retry`). */
export interface RetryInfo {
  /** This delivery's attempt: 1 for a message read from the source topic. */
  attempt: number;
  /** Where the message was first read. */
  topic: string;
  partition: number;
  offset: number;
  /** When its first attempt failed (ms since the epoch); absent on attempt 1. */
  firstFailureAt?: number;
  /** The error of the attempt before this one; absent on attempt 1. */
  lastError?: string;
  /** When this attempt was due (ms since the epoch); absent on attempt 1. */
  dueAt?: number;
}

function header(headers: RecordHeader[], key: string): string | undefined {
  for (let i = headers.length - 1; i >= 0; i--) if (headers[i]!.key === key) return headers[i]!.value.toString('utf8');
  return undefined;
}

function int(headers: RecordHeader[], key: string): number | undefined {
  const v = header(headers, key);
  if (v === undefined || !/^\d{1,16}$/.test(v)) return undefined;
  return Number(v);
}

/**
 * The retry state of a consumed message. A message without (valid) retry headers is on its first
 * attempt, read where it is.
 */
export function decodeRetryInfo(m: Pick<ConsumedMessage, 'topic' | 'partition' | 'offset' | 'headers'>): RetryInfo {
  const failed = int(m.headers, RETRY_HEADERS.attempt);
  const topic = header(m.headers, RETRY_HEADERS.topic);
  const partition = int(m.headers, RETRY_HEADERS.partition);
  const offset = int(m.headers, RETRY_HEADERS.offset);
  if (failed === undefined || failed < 1 || topic === undefined || topic === '' || partition === undefined || offset === undefined) {
    return { attempt: 1, topic: m.topic, partition: m.partition, offset: m.offset };
  }
  const info: RetryInfo = { attempt: failed + 1, topic, partition, offset };
  const first = int(m.headers, RETRY_HEADERS.firstFailureAt);
  if (first !== undefined) info.firstFailureAt = first;
  const err = header(m.headers, RETRY_HEADERS.error);
  if (err !== undefined) info.lastError = err;
  const due = int(m.headers, RETRY_HEADERS.dueAt);
  if (due !== undefined) info.dueAt = due;
  return info;
}

/** The message's headers without the retry ones (what a replay writes back to the source topic). */
export function withoutRetryHeaders(headers: RecordHeader[]): RecordHeader[] {
  return headers.filter((h) => !h.key.startsWith(RETRY_HEADER_PREFIX));
}

export function errorText(err: unknown): string {
  const e = err as { name?: unknown; code?: unknown; message?: unknown } | null;
  const text = e && typeof e === 'object' ? `${typeof e.code === 'string' ? e.code : String(e.name ?? 'Error')}: ${String(e.message ?? '')}` : String(err);
  return text.length > MAX_ERROR_CHARS ? `${text.slice(0, MAX_ERROR_CHARS)}...` : text;
}

/**
 * The headers of a message parked after attempt `info.attempt` failed with `err` at `now`: its own
 * headers (retry ones dropped) followed by the retry state; `dueAt` only for a retry topic.
 */
export function parkHeaders(m: Pick<ConsumedMessage, 'headers'>, info: RetryInfo, err: unknown, now: number, dueAt: number | undefined): RecordHeader[] {
  const text = (k: string, v: string | number): RecordHeader => ({ key: k, value: Buffer.from(String(v), 'utf8') });
  const out = withoutRetryHeaders(m.headers);
  out.push(
    text(RETRY_HEADERS.topic, info.topic),
    text(RETRY_HEADERS.partition, info.partition),
    text(RETRY_HEADERS.offset, info.offset),
    text(RETRY_HEADERS.attempt, info.attempt),
    text(RETRY_HEADERS.error, errorText(err)),
    text(RETRY_HEADERS.firstFailureAt, info.firstFailureAt ?? now),
  );
  if (dueAt !== undefined) out.push(text(RETRY_HEADERS.dueAt, dueAt));
  return out;
}

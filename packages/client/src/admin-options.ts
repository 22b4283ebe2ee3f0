/**
 * The Admin's options and the option objects its calls take: their names (unknown ones are refused, with
 * the nearest valid name, as the producer and consumer refuse theirs: docs/sdk.md, "Options") and the
 * checks that make an Admin that cannot work fail at construction.
 */
import { TributaryError } from 'tributary-protocol/errors.js';
import { checkConnectionOptions } from './cluster.js';
import { type Complete, refuseUnknownOptions } from './option-names.js';
import type { RetryOptions } from './retry.js';

export interface AdminOptions {
  /** Bootstrap brokers, `host:port`. */
  brokers: string[];
  /** How long one connection attempt (TCP, TLS and handshake) may take; default 5000. */
  connectTimeoutMs?: number;
  /** Until a broker answered once, how long to keep trying before failing with brokers_unreachable; default 10000. */
  bootstrapTimeoutMs?: number;
  retry?: RetryOptions;
  /** A broker that answers nothing for this long (past a request's own wait) is given up on and the request retried; default 3000. */
  stallTimeoutMs?: number;
  /** TLS for every broker connection (CA, client certificate and key, servername). */
  tls?: import('node:tls').ConnectionOptions;
  /** Credentials (`AUTH principal= token=`) for brokers with authentication on. */
  auth?: import('tributary-protocol/connection.js').AuthOptions;
  /**
   * How long one call may take, its retries and connecting included (plus `readRecords`' `waitMs`): past
   * it the call rejects with a retriable request_timeout, and a connection still owing it a reply is
   * dropped. Default 30000, as the producer's. Not `replayDeadLetters`, which runs for as long as the
   * topic needs (each of its own admin calls is bounded).
   */
  requestTimeoutMs?: number;
}

export const ADMIN_OPTION_NAMES = ['brokers', 'connectTimeoutMs', 'bootstrapTimeoutMs', 'retry', 'stallTimeoutMs', 'tls', 'auth', 'requestTimeoutMs'] as const;
const adminOptionsComplete: Complete<AdminOptions, typeof ADMIN_OPTION_NAMES> = true;
void adminOptionsComplete;

/** The producer's default requestTimeoutMs too. */
export const DEFAULT_ADMIN_REQUEST_TIMEOUT_MS = 30_000;

function configError(option: string, reason: string): TributaryError {
  return new TributaryError('invalid_config', { option, reason }, `invalid admin option ${option}: ${reason}`);
}

/** Validates the Admin's options up front: an Admin that cannot work fails at construction, not on its first call. */
export function validateAdminOptions(options: AdminOptions): void {
  if (!options || typeof options !== 'object') throw new TributaryError('invalid_config', { option: 'options', reason: 'required' });
  refuseUnknownOptions('admin', options, ADMIN_OPTION_NAMES);
  if (!Array.isArray(options.brokers) || options.brokers.length === 0) throw configError('brokers', 'at least one bootstrap broker is required');
  if (options.retry !== undefined && (options.retry === null || typeof options.retry !== 'object')) throw configError('retry', 'must be an object');
  const bad = checkConnectionOptions(options);
  if (bad) throw configError(...bad);
  const t = options.requestTimeoutMs;
  // A longer timer fires after 1 ms: every call would time out at once.
  if (t !== undefined && (typeof t !== 'number' || !Number.isSafeInteger(t) || t < 1 || t > 2 ** 31 - 1)) throw configError('requestTimeoutMs', 'must be an integer 1..2147483647');
}

/** What every Admin call takes last. */
export interface CallOptions {
  /** Aborting it rejects the call with the signal's reason. */
  signal?: AbortSignal;
}

export const CALL_OPTION_NAMES = ['signal'] as const;
const callOptionsComplete: Complete<CallOptions, typeof CALL_OPTION_NAMES> = true;
void callOptionsComplete;

export interface ListTopicsOptions extends CallOptions {
  /** Also the internal topics (`__` prefix). */
  includeInternal?: boolean;
}
export const LIST_TOPICS_OPTION_NAMES = ['signal', 'includeInternal'] as const;
const listTopicsComplete: Complete<ListTopicsOptions, typeof LIST_TOPICS_OPTION_NAMES> = true;
void listTopicsComplete;

export interface ListOffsetsOptions extends CallOptions {
  /** Ms: also the first offset stamped at or after it (`at`). */
  timestamp?: number;
}
export const LIST_OFFSETS_OPTION_NAMES = ['signal', 'timestamp'] as const;
const listOffsetsComplete: Complete<ListOffsetsOptions, typeof LIST_OFFSETS_OPTION_NAMES> = true;
void listOffsetsComplete;

/** alterTopic's settings: each one given replaces the topic's (docs/protocol.md, ALTER_TOPIC); at least one. */
export interface AlterTopicOptions {
  /** -1: unlimited. */
  retentionHours?: number;
  /** Per partition; -1: unlimited. */
  retentionBytes?: number;
  /** Compacted topics only (the broker refuses it on another). */
  deleteRetentionMs?: number;
}

/** alterTopic's answer: the retention settings in effect (deleteRetentionMs: the topic's own, else the broker's). */
export interface AlterTopicResult {
  topic: string;
  retentionHours: number;
  retentionBytes: number;
  deleteRetentionMs: number;
}

export const ALTER_TOPIC_OPTION_NAMES = ['retentionHours', 'retentionBytes', 'deleteRetentionMs'] as const;
const alterTopicComplete: Complete<AlterTopicOptions, typeof ALTER_TOPIC_OPTION_NAMES> = true;
void alterTopicComplete;

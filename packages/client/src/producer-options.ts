/**
 * The producer's options: their type, the defaults and the validation that makes a producer that cannot
 * work fail at construction (docs/sdk.md, "Producer").
 */
import { TributaryError } from 'tributary-protocol/errors.js';
import { DEFAULT_MAX_FRAME_BYTES } from 'tributary-protocol/frame.js';
import { checkConnectionOptions, DEFAULT_STALL_TIMEOUT_MS } from './cluster.js';
import type { RetryOptions } from './retry.js';
import { type Complete, refuseUnknownOptions } from './option-names.js';

export type ProducerAcks = 0 | 1 | 'all';

export interface ProducerOptions {
  /** Bootstrap brokers, `host:port`. */
  brokers: string[];
  clientId?: string;
  /** 0: fire and forget; 1 / 'all': wait until the record is durable (the same on a standalone broker). */
  acks?: ProducerAcks;
  /** How long a partition's batch waits for more records before it is sent (default 0: until the end of the event-loop turn). */
  lingerMs?: number;
  /** A batch is sent once adding the next record would pass this many bytes (a larger record goes alone). */
  maxBatchBytes?: number;
  /** A batch is sent once it holds this many records (default: no limit besides bytes). */
  maxBatchRecords?: number;
  /** Memory for records not yet acknowledged; `send()` waits for room beyond it. */
  maxBufferedBytes?: number;
  /** Batches of one partition on the wire at once (pipelined on the leader's shared connection). */
  maxInFlightPerPartition?: number;
  /** A batch reply that takes longer fails the attempt (and is retried); also the longest wait for buffer room. */
  requestTimeoutMs?: number;
  retry?: RetryOptions;
  /** TLS for every broker connection (CA, client certificate and key, servername). */
  tls?: import('node:tls').ConnectionOptions;
  /** How long one connection attempt (TCP, TLS and handshake) may take; default 5000. */
  connectTimeoutMs?: number;
  /** Until a broker answered once, how long to keep trying before failing with brokers_unreachable; default 10000. */
  bootstrapTimeoutMs?: number;
  /** Credentials (`AUTH principal= token=`) for brokers with authentication on. */
  auth?: import('tributary-protocol/connection.js').AuthOptions;
  /**
   * A broker connection on which nothing arrives for this long past a request's own wait, while the
   * broker does not answer a ping either, is failed (connection_lost) and its batches are retried;
   * also how long one broker gets to answer a leader lookup. Default 3000.
   */
  stallTimeoutMs?: number;
  /**
   * Idempotent producing: the producer gets a random id, numbers each partition's records, and the broker
   * answers a retried batch it already appended with the original offsets instead of appending it again,
   * so retries never duplicate. Needs `maxInFlightPerPartition` <= 5 and `acks` 1 or "all".
   */
  idempotent?: boolean;
  /**
   * Makes this a transactional producer: records are written through `transaction()` only. The id names
   * the producer across restarts: a new Producer with the same id fences this one (its transactions are
   * refused with ProducerFencedError) and aborts a transaction it left open.
   */
  transactionalId?: string;
  /** How long a transaction may stay open before the broker aborts it (default: the broker's, 60 s). */
  transactionTimeoutMs?: number;
  /**
   * Records with neither key nor partition: `sticky` (default) fills one partition's batch and moves to
   * the next partition once that batch is closed (full, or taken by the sender), so they travel in full
   * batches (Kafka's KIP-480); `round-robin` spreads them one record at a time.
   */
  keylessPartitioning?: 'sticky' | 'round-robin';
  /**
   * How long a topic's partition count is used before METADATA is asked again (default 300000, as
   * Kafka's metadata.max.age.ms): keyed and keyless records reach partitions added meanwhile. A send to
   * an explicit partition beyond the count asks at once.
   */
  metadataMaxAgeMs?: number;
}

export const PRODUCER_OPTION_NAMES = [
  'brokers', 'clientId', 'acks', 'lingerMs', 'maxBatchBytes', 'maxBatchRecords', 'maxBufferedBytes', 'maxInFlightPerPartition',
  'requestTimeoutMs', 'retry', 'tls', 'auth', 'stallTimeoutMs', 'connectTimeoutMs', 'bootstrapTimeoutMs', 'idempotent', 'transactionalId',
  'transactionTimeoutMs', 'keylessPartitioning', 'metadataMaxAgeMs',
] as const;
const producerOptionsComplete: Complete<ProducerOptions, typeof PRODUCER_OPTION_NAMES> = true;
void producerOptionsComplete;

const DEFAULTS = {
  acks: 'all' as ProducerAcks,
  lingerMs: 0,
  maxBatchBytes: 256 * 1024,
  maxBatchRecords: Number.POSITIVE_INFINITY,
  maxBufferedBytes: 32 * 1024 * 1024,
  maxInFlightPerPartition: 5,
  requestTimeoutMs: 30_000,
  metadataMaxAgeMs: 300_000,
};
/** The broker remembers this many batches per producer and partition for duplicate detection. */
export const MAX_IDEMPOTENT_IN_FLIGHT = 5;

const ID_RE = /^[A-Za-z0-9._-]{1,200}$/;
export function configError(option: string, reason: string): TributaryError {
  return new TributaryError('invalid_config', { option, reason }, `invalid producer option ${option}: ${reason}`);
}

function checkInt(o: Record<string, unknown>, key: string, min: number, max = Number.MAX_SAFE_INTEGER): void {
  const v = o[key];
  if (v === undefined) return;
  if (typeof v !== 'number' || !Number.isSafeInteger(v) || v < min || v > max) {
    throw configError(key, max === Number.MAX_SAFE_INTEGER ? `must be an integer >= ${min}` : `must be an integer ${min}..${max}`);
  }
}

/** Validates options up front: a producer that cannot work fails at construction, not on first send. */
export function validateProducerOptions(o: ProducerOptions): void {
  if (!o || typeof o !== 'object') throw configError('options', 'required');
  refuseUnknownOptions('producer', o, PRODUCER_OPTION_NAMES);
  if (!Array.isArray(o.brokers) || o.brokers.length === 0 || o.brokers.some((b) => typeof b !== 'string')) {
    throw configError('brokers', 'at least one bootstrap broker (host:port) is required');
  }
  if (o.clientId !== undefined && (typeof o.clientId !== 'string' || !ID_RE.test(o.clientId))) {
    throw configError('clientId', '1-200 characters of letters, digits, ".", "_", "-"');
  }
  if (o.acks !== undefined && o.acks !== 0 && o.acks !== 1 && o.acks !== 'all') throw configError('acks', 'expected 0, 1 or "all"');
  const r = o as unknown as Record<string, unknown>;
  checkInt(r, 'lingerMs', 0, 3_600_000);
  checkInt(r, 'maxBatchBytes', 1, DEFAULT_MAX_FRAME_BYTES);
  checkInt(r, 'maxBatchRecords', 1);
  checkInt(r, 'maxBufferedBytes', 1);
  checkInt(r, 'maxInFlightPerPartition', 1, 1000);
  // A longer timer fires after 1 ms: every request would time out at once.
  checkInt(r, 'requestTimeoutMs', 1, 2 ** 31 - 1);
  const badConnection = checkConnectionOptions(o);
  if (badConnection) throw configError(...badConnection);
  if (o.retry !== undefined && (o.retry === null || typeof o.retry !== 'object')) throw configError('retry', 'must be an object');
  if (o.idempotent !== undefined && typeof o.idempotent !== 'boolean') throw configError('idempotent', 'must be a boolean');
  if (o.transactionalId !== undefined && (typeof o.transactionalId !== 'string' || o.transactionalId.length === 0 || Buffer.byteLength(o.transactionalId, 'utf8') > 255 || /[\s"=]/.test(o.transactionalId))) {
    throw configError('transactionalId', '1-255 bytes without spaces, quotes or "="');
  }
  checkInt(r, 'transactionTimeoutMs', 1, 2 ** 31 - 1);
  checkInt(r, 'metadataMaxAgeMs', 1, 2 ** 31 - 1);
  if (o.keylessPartitioning !== undefined && o.keylessPartitioning !== 'sticky' && o.keylessPartitioning !== 'round-robin') {
    throw configError('keylessPartitioning', 'expected "sticky" or "round-robin"');
  }
  if (o.transactionTimeoutMs !== undefined && o.transactionalId === undefined) throw configError('transactionTimeoutMs', 'only for a transactional producer (transactionalId)');
  if (o.idempotent === true) {
    if (o.maxInFlightPerPartition !== undefined && o.maxInFlightPerPartition > MAX_IDEMPOTENT_IN_FLIGHT) {
      throw configError('maxInFlightPerPartition', `at most ${MAX_IDEMPOTENT_IN_FLIGHT} with idempotent: true`);
    }
    if (o.acks === 0) throw configError('acks', 'idempotent: true needs acks 1 or "all"');
  }
}

/** The options with every default filled in (`producer.options`). */
export interface ResolvedProducerOptions {
  brokers: string[];
  clientId: string;
  acks: ProducerAcks;
  lingerMs: number;
  maxBatchBytes: number;
  maxBatchRecords: number;
  maxBufferedBytes: number;
  maxInFlightPerPartition: number;
  requestTimeoutMs: number;
  stallTimeoutMs: number;
  retry: RetryOptions;
  idempotent: boolean;
  transactionalId: string | undefined;
  transactionTimeoutMs: number | undefined;
  keylessPartitioning: 'sticky' | 'round-robin';
  metadataMaxAgeMs: number;
}

/** Fills in the defaults; `options` has passed validateProducerOptions. */
export function resolveProducerOptions(options: ProducerOptions): ResolvedProducerOptions {
  return {
    brokers: options.brokers,
    clientId: options.clientId ?? 'tributary-producer',
    acks: options.acks ?? DEFAULTS.acks,
    lingerMs: options.lingerMs ?? DEFAULTS.lingerMs,
    maxBatchBytes: options.maxBatchBytes ?? DEFAULTS.maxBatchBytes,
    maxBatchRecords: options.maxBatchRecords ?? DEFAULTS.maxBatchRecords,
    maxBufferedBytes: options.maxBufferedBytes ?? DEFAULTS.maxBufferedBytes,
    maxInFlightPerPartition: options.maxInFlightPerPartition ?? DEFAULTS.maxInFlightPerPartition,
    requestTimeoutMs: options.requestTimeoutMs ?? DEFAULTS.requestTimeoutMs,
    stallTimeoutMs: options.stallTimeoutMs ?? DEFAULT_STALL_TIMEOUT_MS,
    retry: options.retry ?? {},
    idempotent: options.idempotent ?? false,
    transactionalId: options.transactionalId,
    transactionTimeoutMs: options.transactionTimeoutMs,
    keylessPartitioning: options.keylessPartitioning ?? 'sticky',
    metadataMaxAgeMs: options.metadataMaxAgeMs ?? DEFAULTS.metadataMaxAgeMs,
  };
}

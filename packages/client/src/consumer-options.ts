/**
 * The consumer's options: their defaults and the checks that make a consumer that cannot work fail at
 * construction (docs/sdk.md, "Consumer" → "Options").
 */
import { type AssignorName, isAssignorName } from 'tributary-protocol/assignors.js';
import { TributaryError } from 'tributary-protocol/errors.js';
import { checkConnectionOptions, DEFAULT_STALL_TIMEOUT_MS } from './cluster.js';
import { type Complete, refuseUnknownOptions } from './option-names.js';
import type { RetryOptions } from './retry.js';

export type AutoOffsetReset = 'earliest' | 'latest' | 'error';
export type Isolation = 'read_committed' | 'read_uncommitted';

export interface ConsumerOptions {
  /** Bootstrap brokers, `host:port`. */
  brokers: string[];
  groupId: string;
  topic: string;
  clientId?: string;
  /** Static membership: a restart within the session timeout gets its partitions back without a rebalance. */
  instanceId?: string;
  sessionTimeoutMs?: number;
  heartbeatIntervalMs?: number;
  rebalanceTimeoutMs?: number;
  assignor?: AssignorName;
  autoOffsetReset?: AutoOffsetReset;
  isolation?: Isolation;
  /** `poll`: CONSUME long polls; `stream`: broker push with STREAM. */
  mode?: 'poll' | 'stream';
  maxBatchRecords?: number;
  maxBatchBytes?: number;
  /** Long-poll wait of each CONSUME. */
  maxWaitMs?: number;
  autoCommit?: boolean;
  autoCommitIntervalMs?: number;
  /** How many partitions' handlers may run at once in `run()`. */
  partitionsConsumedConcurrently?: number;
  /** A handler running longer than this is reported with a `handler.slow` event (it is not cancelled). */
  processingTimeoutMs?: number;
  retry?: RetryOptions;
  /**
   * A broker connection on which nothing arrives for this long past a request's own wait (a long poll's
   * wait_ms), while the broker does not answer a ping either, is failed (connection_lost) and retried;
   * also how long one broker gets to answer a leader or coordinator lookup.
   */
  stallTimeoutMs?: number;
  /** How long one connection attempt (TCP, TLS and handshake) may take; default 5000. */
  connectTimeoutMs?: number;
  /** Until a broker answered once, how long to keep trying before failing with brokers_unreachable; default 10000. */
  bootstrapTimeoutMs?: number;
  /** TLS for every broker connection (CA, client certificate and key, servername). */
  tls?: import('node:tls').ConnectionOptions;
  /** Credentials (`AUTH principal= token=`) for brokers with authentication on. */
  auth?: import('tributary-protocol/connection.js').AuthOptions;
}

export const CONSUMER_OPTION_NAMES = [
  'brokers', 'groupId', 'topic', 'clientId', 'instanceId', 'sessionTimeoutMs', 'heartbeatIntervalMs', 'rebalanceTimeoutMs',
  'assignor', 'autoOffsetReset', 'isolation', 'mode', 'maxBatchRecords', 'maxBatchBytes', 'maxWaitMs', 'autoCommit',
  'autoCommitIntervalMs', 'partitionsConsumedConcurrently', 'processingTimeoutMs', 'retry', 'stallTimeoutMs', 'connectTimeoutMs', 'bootstrapTimeoutMs', 'tls', 'auth',
] as const;
const consumerOptionsComplete: Complete<ConsumerOptions, typeof CONSUMER_OPTION_NAMES> = true;
void consumerOptionsComplete;

const DEFAULTS = {
  sessionTimeoutMs: 10_000,
  heartbeatIntervalMs: 3_000,
  rebalanceTimeoutMs: 60_000,
  assignor: 'cooperative-sticky' as AssignorName,
  autoOffsetReset: 'latest' as AutoOffsetReset,
  isolation: 'read_committed' as Isolation,
  mode: 'poll' as 'poll' | 'stream',
  maxBatchRecords: 500,
  maxBatchBytes: 1024 * 1024,
  maxWaitMs: 1_000,
  autoCommit: true,
  autoCommitIntervalMs: 1_000,
  partitionsConsumedConcurrently: 1,
  processingTimeoutMs: 30_000,
  stallTimeoutMs: DEFAULT_STALL_TIMEOUT_MS,
};

export function configError(option: string, reason: string): TributaryError {
  return new TributaryError('invalid_config', { option, reason }, `invalid consumer option ${option}: ${reason}`);
}

const ID_RE = /^[A-Za-z0-9._-]{1,200}$/;

function positiveInt(opts: Record<string, unknown>, key: string, min = 1, max = Number.MAX_SAFE_INTEGER): void {
  const v = opts[key];
  if (v === undefined) return;
  if (typeof v !== 'number' || !Number.isSafeInteger(v) || v < min || v > max) {
    throw configError(key, max === Number.MAX_SAFE_INTEGER ? `must be an integer >= ${min}` : `must be an integer ${min}..${max}`);
  }
}

/** Options that become timers: setTimeout fires a longer delay after 1 ms. */
const TIMER_OPTIONS = new Set(['sessionTimeoutMs', 'heartbeatIntervalMs', 'rebalanceTimeoutMs', 'autoCommitIntervalMs', 'processingTimeoutMs', 'maxWaitMs']);

/**
 * The stall bound of the heartbeat connection. A coordinator that moves gives each member one session
 * from when it loaded the group (docs/sdk.md, "Rebalancing"); a member whose heartbeat hangs on
 * the old, frozen coordinator must notice, find the new one and heartbeat there within that session. The
 * heartbeat's own wait plus twice this bound stays inside it; never looser than the cluster's bound.
 */
export function heartbeatStallMs(sessionTimeoutMs: number, heartbeatIntervalMs: number): number {
  return Math.max(100, Math.floor((sessionTimeoutMs - heartbeatIntervalMs) / 2));
}

/** Validates options up front: a consumer that cannot work fails at construction, not on first poll. */
export function validateConsumerOptions(o: ConsumerOptions): void {
  if (!o || typeof o !== 'object') throw configError('options', 'required');
  refuseUnknownOptions('consumer', o, CONSUMER_OPTION_NAMES);
  if (!Array.isArray(o.brokers) || o.brokers.length === 0 || o.brokers.some((b) => typeof b !== 'string')) {
    throw configError('brokers', 'at least one bootstrap broker (host:port) is required');
  }
  if (typeof o.groupId !== 'string' || !ID_RE.test(o.groupId)) throw configError('groupId', '1-200 characters of letters, digits, ".", "_", "-"');
  if (typeof o.topic !== 'string' || o.topic.length === 0) throw configError('topic', 'required');
  if (o.clientId !== undefined && !ID_RE.test(o.clientId)) throw configError('clientId', '1-200 characters of letters, digits, ".", "_", "-"');
  if (o.instanceId !== undefined && !ID_RE.test(o.instanceId)) throw configError('instanceId', '1-200 characters of letters, digits, ".", "_", "-"');
  for (const k of ['sessionTimeoutMs', 'heartbeatIntervalMs', 'rebalanceTimeoutMs', 'maxBatchRecords', 'maxBatchBytes', 'autoCommitIntervalMs', 'partitionsConsumedConcurrently', 'processingTimeoutMs']) {
    positiveInt(o as unknown as Record<string, unknown>, k, 1, TIMER_OPTIONS.has(k) ? 2 ** 31 - 1 : Number.MAX_SAFE_INTEGER);
  }
  positiveInt(o as unknown as Record<string, unknown>, 'maxWaitMs', 0, 2 ** 31 - 1);
  // CONSUME refuses batch= above 10000 (docs/protocol.md): such a consumer could never read a record.
  if (o.maxBatchRecords !== undefined && o.maxBatchRecords > 10_000) throw configError('maxBatchRecords', 'at most 10000 (the protocol maximum)');
  if (o.assignor !== undefined && !isAssignorName(o.assignor)) throw configError('assignor', 'expected range, roundrobin, sticky or cooperative-sticky');
  if (o.autoOffsetReset !== undefined && !['earliest', 'latest', 'error'].includes(o.autoOffsetReset)) throw configError('autoOffsetReset', 'expected earliest, latest or error');
  if (o.isolation !== undefined && !['read_committed', 'read_uncommitted'].includes(o.isolation)) throw configError('isolation', 'expected read_committed or read_uncommitted');
  if (o.mode !== undefined && !['poll', 'stream'].includes(o.mode)) throw configError('mode', 'expected poll or stream');
  // `autoCommit: 'false'` would be truthy: auto-commit on while the caller meant it off.
  if (o.autoCommit !== undefined && typeof o.autoCommit !== 'boolean') throw configError('autoCommit', 'must be true or false');
  const badConnection = checkConnectionOptions(o);
  if (badConnection) throw configError(...badConnection);
  const session = o.sessionTimeoutMs ?? DEFAULTS.sessionTimeoutMs;
  if ((o.heartbeatIntervalMs ?? Math.min(DEFAULTS.heartbeatIntervalMs, Math.floor(session / 3))) >= session) throw configError('heartbeatIntervalMs', 'must be below sessionTimeoutMs');
}

/** The options a constructed consumer runs with: every default filled in. */
export type ResolvedConsumerOptions = Required<Omit<ConsumerOptions, 'instanceId' | 'retry' | 'clientId' | 'tls' | 'auth' | 'connectTimeoutMs' | 'bootstrapTimeoutMs'>> &
  Pick<ConsumerOptions, 'instanceId' | 'retry' | 'tls' | 'auth' | 'connectTimeoutMs' | 'bootstrapTimeoutMs'> & { clientId: string };

/** Fills in the defaults of validated options; the default heartbeat interval is at most a third of the session. */
export function resolveConsumerOptions(options: ConsumerOptions): ResolvedConsumerOptions {
  const session = options.sessionTimeoutMs ?? DEFAULTS.sessionTimeoutMs;
  return {
    ...DEFAULTS,
    heartbeatIntervalMs: Math.min(DEFAULTS.heartbeatIntervalMs, Math.floor(session / 3)),
    // An option given as undefined takes its default, as one left out does.
    ...Object.fromEntries(Object.entries(options).filter(([, v]) => v !== undefined)),
    clientId: options.clientId ?? 'tributary-consumer',
  } as ResolvedConsumerOptions;
}

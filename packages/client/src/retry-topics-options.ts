/**
 * run()'s `retryTopics` option: failed messages parked on retry topics and a dead-letter topic
 * (docs/sdk.md, "Retry and dead-letter topics"). Checked when run() is called; a bad value rejects run()
 * before anything connects.
 */
import { TOPIC_NAME_RE } from 'tributary-protocol/topic-name.js';
import { configError } from './consumer-options.js';
import { type Complete, refuseUnknownOptions } from './option-names.js';

export interface RetryTopicsOptions {
  /**
   * The wait before each further attempt: `'200ms'`, `'1s'`, `'1m'`, `'10m'`, `'1h'` or milliseconds.
   * Delay n is the delay of retry topic n; a message that failed its first attempt is due `delays[0]` later.
   */
  delays: Array<string | number>;
  /** Attempts in all, the first included; default `delays.length + 1`. Attempts past that reuse the last delay's topic. */
  maxAttempts?: number;
  /** Where a message goes after its last attempt failed; default `<topic>.<groupId>.dlq`. */
  deadLetterTopic?: string;
  /** Create the retry topics and the dead-letter topic when missing (default true; with the source topic's partition count). */
  createTopics?: boolean;
  /** Timeout of each park transaction (default 10000): how long a crashed member's open park can hold its partition. */
  transactionTimeoutMs?: number;
}

export const RETRY_TOPICS_OPTION_NAMES = ['delays', 'maxAttempts', 'deadLetterTopic', 'createTopics', 'transactionTimeoutMs'] as const;
const retryTopicsComplete: Complete<RetryTopicsOptions, typeof RETRY_TOPICS_OPTION_NAMES> = true;
void retryTopicsComplete;

export interface ResolvedRetryTopics {
  /** The source topic and group they were resolved for. */
  topic: string;
  groupId: string;
  delaysMs: number[];
  maxAttempts: number;
  /** Retry topic n (1-based) is `retryTopics[n - 1]`. */
  retryTopics: string[];
  deadLetterTopic: string;
  createTopics: boolean;
  transactionTimeoutMs: number;
}

const MAX_DELAYS = 20;
const MAX_ATTEMPTS = 1000;
/** The longest delay: a timer's limit (setTimeout caps at 2^31-1 ms, about 24.8 days). */
const MAX_DELAY_MS = 2 ** 31 - 1;
const UNIT_MS: Record<string, number> = { ms: 1, s: 1000, m: 60_000, h: 3_600_000 };

/** A delay as milliseconds: a non-negative integer, or `<integer><ms|s|m|h>`; undefined when it is neither. */
export function parseDelay(d: unknown): number | undefined {
  if (typeof d === 'number') return Number.isSafeInteger(d) && d >= 0 && d <= MAX_DELAY_MS ? d : undefined;
  if (typeof d !== 'string') return undefined;
  const m = /^(\d{1,10})(ms|s|m|h)$/.exec(d.trim());
  if (!m) return undefined;
  const ms = Number(m[1]) * UNIT_MS[m[2]!]!;
  return ms <= MAX_DELAY_MS ? ms : undefined;
}

/** The retry topic of attempt `attempt` (2 or more): delays beyond the list reuse the last one. */
export function retryTopicIndex(r: Pick<ResolvedRetryTopics, 'delaysMs'>, attempt: number): number {
  return Math.min(attempt - 2, r.delaysMs.length - 1);
}

/** The group of the internal consumer that reads retry topic `n` (1-based). */
export function retryGroupId(groupId: string, n: number): string {
  return `${groupId}.retry.${n}`;
}

/** The transactional id a consumer of `topic` in `groupId` parks through; `suffix`: its instanceId, else a random UUID. */
export function parkTransactionalId(groupId: string, topic: string, suffix: string): string {
  return `${groupId}.${topic}.park.${suffix}`;
}

/** A groupId's length limit (consumer-options.ts), which the retry consumers' groups must keep too. */
const MAX_GROUP_ID = 200;
const MAX_TRANSACTIONAL_ID_BYTES = 255;
/** Characters of randomUUID(): the park id's suffix without static membership. */
const UUID_LENGTH = 36;

/**
 * The names run() derives from the group and topic besides the topics: the retry consumers' groups and
 * every consumer's park transactional id. Checked up front, as the topic names are: one too long fails
 * only once the topics exist (a group), or at every park, for ever (a transactional id).
 */
function checkDerivedNames(ctx: { topic: string; groupId: string; instanceId?: string }, retryTopics: string[]): void {
  const suffix = ctx.instanceId ?? 'x'.repeat(UUID_LENGTH);
  const parkers: Array<[group: string, topic: string]> = [[ctx.groupId, ctx.topic]];
  for (const [i, topic] of retryTopics.entries()) {
    const group = retryGroupId(ctx.groupId, i + 1);
    if (group.length > MAX_GROUP_ID) {
      throw configError('retryTopics', `the retry consumers' group ${group} would be longer than ${MAX_GROUP_ID} characters: shorten the groupId`);
    }
    parkers.push([group, topic]);
  }
  for (const [group, topic] of parkers) {
    const id = parkTransactionalId(group, topic, ctx.instanceId ?? '<uuid>');
    const bytes = Buffer.byteLength(parkTransactionalId(group, topic, suffix));
    if (bytes > MAX_TRANSACTIONAL_ID_BYTES) {
      const reason = `the park transactional id ${id} would be ${bytes} bytes, more than ${MAX_TRANSACTIONAL_ID_BYTES}: shorten the topic or the groupId`;
      throw configError('retryTopics', reason);
    }
  }
}

/** Validates run()'s `retryTopics` and fills in the defaults for a consumer of `topic` in `groupId`. */
export function resolveRetryTopics(
  c: RetryTopicsOptions | undefined,
  ctx: { topic: string; groupId: string; instanceId?: string; eachBatch: boolean; concurrency: boolean },
): ResolvedRetryTopics | undefined {
  if (c === undefined) return undefined;
  if (c === null || typeof c !== 'object') throw configError('retryTopics', "expected an object { delays: ['1s', '1m'], maxAttempts?, deadLetterTopic? }");
  refuseUnknownOptions('run', c, RETRY_TOPICS_OPTION_NAMES, 'retryTopics.');
  // A batch handler fails or succeeds as a whole: there is no one message to park.
  if (ctx.eachBatch) throw configError('retryTopics', 'works with eachMessage only (eachBatch fails a whole batch)');
  // With parallel handlers the committed prefix can stop below a parked message: a crash then would
  // deliver it again and park it twice (docs/sdk.md, "Retry and dead-letter topics").
  if (ctx.concurrency) throw configError('retryTopics', 'cannot be combined with concurrency (a park must commit the offset just past its message)');
  if (!Array.isArray(c.delays) || c.delays.length === 0 || c.delays.length > MAX_DELAYS) throw configError('retryTopics.delays', `1 to ${MAX_DELAYS} delays, e.g. ['1s', '1m', '10m']`);
  const delaysMs = c.delays.map((d, i) => {
    const ms = parseDelay(d);
    if (ms === undefined) throw configError(`retryTopics.delays[${i}]`, `${JSON.stringify(d)} is not a delay: expected milliseconds (an integer) or '<n>ms', '<n>s', '<n>m', '<n>h', at most ${MAX_DELAY_MS} ms`);
    return ms;
  });
  const minAttempts = delaysMs.length + 1;
  const maxAttempts = c.maxAttempts ?? minAttempts;
  if (typeof maxAttempts !== 'number' || !Number.isSafeInteger(maxAttempts) || maxAttempts < minAttempts || maxAttempts > MAX_ATTEMPTS) {
    throw configError('retryTopics.maxAttempts', `must be an integer from ${minAttempts} (delays + 1: every delay is one more attempt) to ${MAX_ATTEMPTS}`);
  }
  if (c.createTopics !== undefined && typeof c.createTopics !== 'boolean') throw configError('retryTopics.createTopics', 'must be a boolean');
  const timeout = c.transactionTimeoutMs ?? 10_000;
  if (typeof timeout !== 'number' || !Number.isSafeInteger(timeout) || timeout < 100 || timeout > 2 ** 31 - 1) throw configError('retryTopics.transactionTimeoutMs', 'must be an integer >= 100');
  // Named after the group too: two groups reading one topic must not retry each other's failures.
  const base = `${ctx.topic}.${ctx.groupId}`;
  const retryTopics = delaysMs.map((_, i) => `${base}.retry.${i + 1}`);
  const deadLetterTopic = c.deadLetterTopic ?? `${base}.dlq`;
  for (const [option, name] of [...retryTopics.map((t) => ['retryTopics', t] as const), ['retryTopics.deadLetterTopic', deadLetterTopic] as const]) {
    if (typeof name !== 'string' || !TOPIC_NAME_RE.test(name) || name.startsWith('__')) {
      throw configError(option, `${JSON.stringify(name)} is not a valid topic name (1-249 of letters, digits, ".", "_", "-"; shorten the topic or group)`);
    }
  }
  if (deadLetterTopic === ctx.topic || retryTopics.includes(deadLetterTopic)) throw configError('retryTopics.deadLetterTopic', 'must differ from the source topic and the retry topics');
  checkDerivedNames(ctx, retryTopics);
  return { topic: ctx.topic, groupId: ctx.groupId, delaysMs, maxAttempts, retryTopics, deadLetterTopic, createTopics: c.createTopics ?? true, transactionTimeoutMs: timeout };
}

/** One Kafka API as the listener serves it: the versions it advertises and what answers a request. */
import type { KafkaApi } from '../protocol/apis.js';
import type { TributaryError } from 'tributary-protocol/errors.js';
import { type KafkaErrorName, kafkaErrorCode, kafkaErrorFor } from '../protocol/error-codes.js';
import type { KafkaStruct } from '../protocol/schema.js';
import type { KafkaRequestHeader } from '../protocol/headers.js';
import type { KafkaRequestContext } from '../context.js';

/**
 * No response, and the connection ends once the responses before it went out: how Kafka tells a client
 * whose request gets no response that it failed (Produce with acks 0, whose client would otherwise never
 * learn of a NOT_LEADER and refresh its metadata).
 */
export class EndConnection {
  constructor(readonly reason: string) {}
}

export type KafkaHandlerResult = KafkaStruct | null | EndConnection;

export interface KafkaHandler {
  /** Its entry in the API table: the range there is what ApiVersions advertises once the API is served. */
  readonly api: KafkaApi;
  /** The response body; null for a request that gets none (Produce with acks 0); EndConnection (above). */
  handle(ctx: KafkaRequestContext, version: number, body: KafkaStruct, header: KafkaRequestHeader): Promise<KafkaHandlerResult> | KafkaHandlerResult;
}

export function handler(api: KafkaApi, handle: KafkaHandler['handle']): KafkaHandler {
  return { api, handle };
}

/** The numeric Kafka error code for a thrown error (a refusal's or KafkaApiError's own, Tributary codes mapped, else UNKNOWN_SERVER_ERROR). */
export function errorCodeOf(err: unknown): number {
  return kafkaErrorCode(err instanceof KafkaRefusal || err instanceof KafkaApiError ? err.kafkaError : kafkaErrorFor(err));
}

/** A Kafka error a handler answers by name, where no Tributary error code stands for it (UNKNOWN_LEADER_EPOCH). */
export class KafkaApiError extends Error {
  constructor(
    readonly kafkaError: KafkaErrorName,
    message: string = kafkaError,
  ) {
    super(message);
  }
}

/**
 * Fetch's and ListOffsets' isolation level as Kafka reads it (IsolationLevel.forId): 0 read_uncommitted,
 * 1 read_committed, undefined before the versions that carry it (read_uncommitted). Kafka's broker answers
 * any other byte with an error in every partition (UNKNOWN_SERVER_ERROR, from forId's exception); here it
 * is INVALID_REQUEST, which says what is wrong (docs/kafka.md, "What is served", Fetch).
 */
export function isIsolationLevel(level: unknown): boolean {
  return level === undefined || level === 0 || level === 1;
}

/** The keys that occur more than once in a request. */
export function duplicated<T>(keys: Iterable<T>): Set<T> {
  const seen = new Set<T>();
  const twice = new Set<T>();
  for (const k of keys) {
    if (seen.has(k)) twice.add(k);
    else seen.add(k);
  }
  return twice;
}

/**
 * Kafka's admin APIs on a topic named twice in one request: one INVALID_REQUEST result for the name (its
 * first entry), none for its other entries, and none of them applied. `of` tells which an entry is.
 */
export class Duplicates<T> {
  private readonly twice: Set<T>;
  private readonly answered = new Set<T>();

  constructor(keys: Iterable<T>) {
    this.twice = duplicated(keys);
  }

  of(key: T): 'unique' | 'first' | 'again' {
    if (!this.twice.has(key)) return 'unique';
    if (this.answered.has(key)) return 'again';
    this.answered.add(key);
    return 'first';
  }
}

/**
 * Storage trouble under a coordinator (its `__consumer_offsets` or `__transaction_state` write failing or
 * its partition moving) as Kafka's group and transaction coordinators answer it: COORDINATOR_NOT_AVAILABLE
 * or NOT_COORDINATOR, which clients answer by looking the coordinator up again. A Java client treats the
 * partition-level codes (NOT_ENOUGH_REPLICAS, REQUEST_TIMED_OUT, ...) on EndTxn or OffsetCommit as fatal.
 */
const AS_COORDINATOR = new Map<number, number>([
  ...(['NOT_ENOUGH_REPLICAS', 'NOT_ENOUGH_REPLICAS_AFTER_APPEND', 'REQUEST_TIMED_OUT', 'LEADER_NOT_AVAILABLE'] as const).map((n) => [kafkaErrorCode(n), kafkaErrorCode('COORDINATOR_NOT_AVAILABLE')] as const),
  ...(['NOT_LEADER_OR_FOLLOWER', 'FENCED_LEADER_EPOCH', 'KAFKA_STORAGE_ERROR'] as const).map((n) => [kafkaErrorCode(n), kafkaErrorCode('NOT_COORDINATOR')] as const),
]);

/** A coordinator API's code (group and transaction APIs): storage trouble as a coordinator's. */
export function coordinatorCode(code: number): number {
  return AS_COORDINATOR.get(code) ?? code;
}

/** errorCodeOf for the group and transaction coordinators' APIs (see coordinatorCode). */
export function coordinatorErrorCodeOf(err: unknown): number {
  return coordinatorCode(errorCodeOf(err));
}

/** What a refused request was about: each has its Kafka authorization error. */
export type RefusedResource = 'topic' | 'cluster' | 'group' | 'transactional_id';

const REFUSED: Record<RefusedResource, KafkaErrorName> = {
  topic: 'TOPIC_AUTHORIZATION_FAILED',
  cluster: 'CLUSTER_AUTHORIZATION_FAILED',
  group: 'GROUP_AUTHORIZATION_FAILED',
  transactional_id: 'TRANSACTIONAL_ID_AUTHORIZATION_FAILED',
};

/**
 * A refusal of `ctx.authorize()` as the Kafka error of the resource it concerns: whether the principal lacks
 * the permission, the topic's ACL refuses it, or its user was removed since it authenticated (the main
 * port's NOT_AUTHORIZED_FOR_OPERATION, NOT_AUTHORIZED_FOR_TOPIC and authentication_required alike).
 */
export class KafkaRefusal extends Error {
  readonly kafkaError: KafkaErrorName;
  constructor(
    readonly denied: TributaryError,
    resource: RefusedResource,
  ) {
    super(denied.message);
    // A group ACL's refusal is the group's whatever the call site expected (a per-topic check naming the group).
    this.kafkaError = denied.code === 'NOT_AUTHORIZED_FOR_GROUP' ? 'GROUP_AUTHORIZATION_FAILED' : REFUSED[resource];
  }
}

export function refusal(denied: TributaryError, resource: RefusedResource): KafkaRefusal {
  return new KafkaRefusal(denied, resource);
}


/** One Kafka API as the listener serves it: the versions it advertises and what answers a request. */
import type { KafkaApi } from '../protocol/apis.js';
import type { TributaryError } from 'tributary-protocol/errors.js';
import { type KafkaErrorName, kafkaErrorCode, kafkaErrorFor } from '../protocol/error-codes.js';
import type { KafkaStruct } from '../protocol/schema.js';
import type { KafkaRequestHeader } from '../protocol/headers.js';
import type { KafkaRequestContext } from '../context.js';

export interface KafkaHandler {
  /** Its entry in the API table: the range there is what ApiVersions advertises once the API is served. */
  readonly api: KafkaApi;
  /** The response body; null for a request that gets none (Produce with acks 0). */
  handle(ctx: KafkaRequestContext, version: number, body: KafkaStruct, header: KafkaRequestHeader): Promise<KafkaStruct | null> | KafkaStruct | null;
}

export function handler(api: KafkaApi, handle: KafkaHandler['handle']): KafkaHandler {
  return { api, handle };
}

/** The numeric Kafka error code for a thrown error (a refusal's own, Tributary codes mapped, else UNKNOWN_SERVER_ERROR). */
export function errorCodeOf(err: unknown): number {
  return kafkaErrorCode(err instanceof KafkaRefusal ? err.kafkaError : kafkaErrorFor(err));
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
    this.kafkaError = REFUSED[resource];
  }
}

export function refusal(denied: TributaryError, resource: RefusedResource): KafkaRefusal {
  return new KafkaRefusal(denied, resource);
}


/** One Kafka API as the listener serves it: the versions it advertises and what answers a request. */
import type { KafkaApi } from '../protocol/apis.js';
import { kafkaErrorCode, kafkaErrorFor } from '../protocol/error-codes.js';
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

/** The numeric Kafka error code for a thrown error (Tributary codes mapped, else UNKNOWN_SERVER_ERROR). */
export function errorCodeOf(err: unknown): number {
  return kafkaErrorCode(kafkaErrorFor(err));
}


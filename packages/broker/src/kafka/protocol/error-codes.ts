/**
 * Kafka's numeric error codes (the protocol guide's table): code, name, and whether a client may retry.
 * The retriable flag is what clients act on (kafkajs and @platformatic/kafka retry exactly these), so it
 * decides whether a mapped Tributary error is retried or surfaced.
 */
import { ERROR_CODES, type ErrorCode, TributaryError } from 'tributary-protocol/errors.js';
import type { RecordBatchErrorReason } from 'tributary-protocol/record-batch/errors.js';
import { ClassicGroupError, isClassicErrorName } from '../../coordinator/classic-group.js';
import { KafkaCodecError } from './errors.js';

export interface KafkaErrorSpec {
  readonly code: number;
  readonly retriable: boolean;
}

// [name, code, retriable]
const TABLE: readonly (readonly [string, number, boolean])[] = [
  ['UNKNOWN_SERVER_ERROR', -1, false],
  ['NONE', 0, false],
  ['OFFSET_OUT_OF_RANGE', 1, false],
  ['CORRUPT_MESSAGE', 2, true],
  ['UNKNOWN_TOPIC_OR_PARTITION', 3, true],
  ['INVALID_FETCH_SIZE', 4, false],
  ['LEADER_NOT_AVAILABLE', 5, true],
  ['NOT_LEADER_OR_FOLLOWER', 6, true],
  ['REQUEST_TIMED_OUT', 7, true],
  ['BROKER_NOT_AVAILABLE', 8, false],
  ['REPLICA_NOT_AVAILABLE', 9, true],
  ['MESSAGE_TOO_LARGE', 10, false],
  ['STALE_CONTROLLER_EPOCH', 11, false],
  ['OFFSET_METADATA_TOO_LARGE', 12, false],
  ['NETWORK_EXCEPTION', 13, true],
  ['COORDINATOR_LOAD_IN_PROGRESS', 14, true],
  ['COORDINATOR_NOT_AVAILABLE', 15, true],
  ['NOT_COORDINATOR', 16, true],
  ['INVALID_TOPIC_EXCEPTION', 17, false],
  ['RECORD_LIST_TOO_LARGE', 18, false],
  ['NOT_ENOUGH_REPLICAS', 19, true],
  ['NOT_ENOUGH_REPLICAS_AFTER_APPEND', 20, true],
  ['INVALID_REQUIRED_ACKS', 21, false],
  ['ILLEGAL_GENERATION', 22, false],
  ['INCONSISTENT_GROUP_PROTOCOL', 23, false],
  ['INVALID_GROUP_ID', 24, false],
  ['UNKNOWN_MEMBER_ID', 25, false],
  ['INVALID_SESSION_TIMEOUT', 26, false],
  ['REBALANCE_IN_PROGRESS', 27, false],
  ['INVALID_COMMIT_OFFSET_SIZE', 28, false],
  ['TOPIC_AUTHORIZATION_FAILED', 29, false],
  ['GROUP_AUTHORIZATION_FAILED', 30, false],
  ['CLUSTER_AUTHORIZATION_FAILED', 31, false],
  ['INVALID_TIMESTAMP', 32, false],
  ['UNSUPPORTED_SASL_MECHANISM', 33, false],
  ['ILLEGAL_SASL_STATE', 34, false],
  ['UNSUPPORTED_VERSION', 35, false],
  ['TOPIC_ALREADY_EXISTS', 36, false],
  ['INVALID_PARTITIONS', 37, false],
  ['INVALID_REPLICATION_FACTOR', 38, false],
  ['INVALID_REPLICA_ASSIGNMENT', 39, false],
  ['INVALID_CONFIG', 40, false],
  ['NOT_CONTROLLER', 41, true],
  ['INVALID_REQUEST', 42, false],
  ['UNSUPPORTED_FOR_MESSAGE_FORMAT', 43, false],
  ['POLICY_VIOLATION', 44, false],
  ['OUT_OF_ORDER_SEQUENCE_NUMBER', 45, false],
  ['DUPLICATE_SEQUENCE_NUMBER', 46, false],
  ['INVALID_PRODUCER_EPOCH', 47, false],
  ['INVALID_TXN_STATE', 48, false],
  ['INVALID_PRODUCER_ID_MAPPING', 49, false],
  ['INVALID_TRANSACTION_TIMEOUT', 50, false],
  ['CONCURRENT_TRANSACTIONS', 51, true],
  ['TRANSACTION_COORDINATOR_FENCED', 52, false],
  ['TRANSACTIONAL_ID_AUTHORIZATION_FAILED', 53, false],
  ['SECURITY_DISABLED', 54, false],
  ['OPERATION_NOT_ATTEMPTED', 55, false],
  ['KAFKA_STORAGE_ERROR', 56, true],
  ['LOG_DIR_NOT_FOUND', 57, false],
  ['SASL_AUTHENTICATION_FAILED', 58, false],
  ['UNKNOWN_PRODUCER_ID', 59, false],
  ['REASSIGNMENT_IN_PROGRESS', 60, false],
  ['NON_EMPTY_GROUP', 68, false],
  ['GROUP_ID_NOT_FOUND', 69, false],
  ['FETCH_SESSION_ID_NOT_FOUND', 70, true],
  ['INVALID_FETCH_SESSION_EPOCH', 71, true],
  ['LISTENER_NOT_FOUND', 72, true],
  ['TOPIC_DELETION_DISABLED', 73, false],
  ['FENCED_LEADER_EPOCH', 74, true],
  ['UNKNOWN_LEADER_EPOCH', 75, true],
  ['UNSUPPORTED_COMPRESSION_TYPE', 76, false],
  ['STALE_BROKER_EPOCH', 77, false],
  ['OFFSET_NOT_AVAILABLE', 78, true],
  ['MEMBER_ID_REQUIRED', 79, false],
  ['PREFERRED_LEADER_NOT_AVAILABLE', 80, true],
  ['GROUP_MAX_SIZE_REACHED', 81, false],
  ['FENCED_INSTANCE_ID', 82, false],
  ['ELIGIBLE_LEADERS_NOT_AVAILABLE', 83, true],
  ['ELECTION_NOT_NEEDED', 84, true],
  ['NO_REASSIGNMENT_IN_PROGRESS', 85, false],
  ['GROUP_SUBSCRIBED_TO_TOPIC', 86, false],
  ['INVALID_RECORD', 87, false],
  ['UNSTABLE_OFFSET_COMMIT', 88, true],
  ['THROTTLING_QUOTA_EXCEEDED', 89, true],
  ['PRODUCER_FENCED', 90, false],
  ['RESOURCE_NOT_FOUND', 91, false],
  ['DUPLICATE_RESOURCE', 92, false],
  ['UNKNOWN_TOPIC_ID', 100, true],
  ['INCONSISTENT_TOPIC_ID', 103, true],
  ['TRANSACTIONAL_ID_NOT_FOUND', 105, false],
  ['FETCH_SESSION_TOPIC_ID_ERROR', 106, true],
];

export type KafkaErrorName = string;

export const KAFKA_ERRORS: Readonly<Record<KafkaErrorName, KafkaErrorSpec>> = Object.freeze(
  Object.fromEntries(TABLE.map(([name, code, retriable]) => [name, Object.freeze({ code, retriable })])),
);

const BY_CODE = new Map(TABLE.map(([name, code]) => [code, name]));

export function kafkaErrorName(code: number): KafkaErrorName | undefined {
  return BY_CODE.get(code);
}

export function kafkaErrorCode(name: KafkaErrorName): number {
  const spec = KAFKA_ERRORS[name];
  if (!spec) throw new Error(`unknown Kafka error ${name}`);
  return spec.code;
}

/**
 * Tributary's wire error codes that have an obvious Kafka counterpart. A first cut the listener refines per
 * API (an authorization failure is TOPIC_ or GROUP_ depending on the resource, for one).
 */
export const TRIBUTARY_TO_KAFKA: Partial<Record<ErrorCode, KafkaErrorName>> = {
  invalid_parameter: 'INVALID_REQUEST',
  invalid_batch: 'CORRUPT_MESSAGE',
  unsupported_version: 'UNSUPPORTED_VERSION',
  record_too_large: 'MESSAGE_TOO_LARGE',
  frame_too_large: 'MESSAGE_TOO_LARGE',
  authentication_failed: 'SASL_AUTHENTICATION_FAILED',
  NOT_AUTHORIZED_FOR_OPERATION: 'CLUSTER_AUTHORIZATION_FAILED',
  NOT_AUTHORIZED_FOR_TOPIC: 'TOPIC_AUTHORIZATION_FAILED',
  NOT_AUTHORIZED_FOR_GROUP: 'GROUP_AUTHORIZATION_FAILED',
  invalid_topic_name: 'INVALID_TOPIC_EXCEPTION',
  topic_not_found: 'UNKNOWN_TOPIC_OR_PARTITION',
  partition_not_found: 'UNKNOWN_TOPIC_OR_PARTITION',
  topic_loading: 'LEADER_NOT_AVAILABLE',
  topic_already_exists: 'TOPIC_ALREADY_EXISTS',
  OFFSET_OUT_OF_RANGE: 'OFFSET_OUT_OF_RANGE',
  out_of_order_sequence: 'OUT_OF_ORDER_SEQUENCE_NUMBER',
  stale_producer_epoch: 'INVALID_PRODUCER_EPOCH',
  unknown_producer_id: 'UNKNOWN_PRODUCER_ID',
  invalid_producer_epoch: 'INVALID_PRODUCER_EPOCH',
  invalid_producer_id_mapping: 'INVALID_PRODUCER_ID_MAPPING',
  producer_fenced: 'PRODUCER_FENCED',
  NOT_LEADER: 'NOT_LEADER_OR_FOLLOWER',
  FENCED_LEADER_EPOCH: 'FENCED_LEADER_EPOCH',
  NOT_ENOUGH_REPLICAS: 'NOT_ENOUGH_REPLICAS',
  NOT_COORDINATOR: 'NOT_COORDINATOR',
  COORDINATOR_LOADING: 'COORDINATOR_LOAD_IN_PROGRESS',
  COORDINATOR_NOT_AVAILABLE: 'COORDINATOR_NOT_AVAILABLE',
  group_not_found: 'GROUP_ID_NOT_FOUND',
  member_not_found: 'UNKNOWN_MEMBER_ID',
  GEN_MISMATCH: 'ILLEGAL_GENERATION',
  REBALANCE_IN_PROGRESS: 'REBALANCE_IN_PROGRESS',
  FENCED_INSTANCE_ID: 'FENCED_INSTANCE_ID',
  inconsistent_group_protocol: 'INCONSISTENT_GROUP_PROTOCOL',
  group_not_empty: 'NON_EMPTY_GROUP',
  UNSTABLE_OFFSET_COMMIT: 'UNSTABLE_OFFSET_COMMIT',
  // Committed offsets never move back (docs/kafka.md): Kafka has no code of its own for the refusal.
  offset_regression: 'INVALID_COMMIT_OFFSET_SIZE',
  transactional_id_not_found: 'TRANSACTIONAL_ID_NOT_FOUND',
  invalid_txn_state: 'INVALID_TXN_STATE',
  request_timeout: 'REQUEST_TIMED_OUT',
  // The metadata store (etcd) or the broker itself briefly unable: retriable, so a Kafka client waits it out.
  metadata_unavailable: 'REQUEST_TIMED_OUT',
  not_ready: 'LEADER_NOT_AVAILABLE',
  shutting_down: 'LEADER_NOT_AVAILABLE',
  throttled: 'THROTTLING_QUOTA_EXCEEDED',
  reassignment_in_progress: 'REASSIGNMENT_IN_PROGRESS',
  no_reassignment: 'NO_REASSIGNMENT_IN_PROGRESS',
  storage_error: 'KAFKA_STORAGE_ERROR',
  internal_error: 'UNKNOWN_SERVER_ERROR',
};

/**
 * A refused batch, by its reason: damaged bytes are CORRUPT_MESSAGE (retriable: they may be the network's);
 * a batch well formed but not acceptable (magic below 2 in Produce v3+, two batches for a partition, a
 * control batch from a client, bad producer fields: produce.ts's own reasons) is INVALID_RECORD, as
 * Kafka's LogValidator answers it (not retriable: the same batch fails again).
 */
const BATCH_TO_KAFKA: Record<RecordBatchErrorReason, KafkaErrorName> = {
  truncated: 'CORRUPT_MESSAGE',
  bad_length: 'CORRUPT_MESSAGE',
  crc_mismatch: 'CORRUPT_MESSAGE',
  bad_record_count: 'CORRUPT_MESSAGE',
  bad_record: 'CORRUPT_MESSAGE',
  int64_out_of_range: 'CORRUPT_MESSAGE',
  decompression_failed: 'CORRUPT_MESSAGE',
  bad_control_record: 'CORRUPT_MESSAGE',
  invalid_input: 'CORRUPT_MESSAGE',
  unknown_compression: 'CORRUPT_MESSAGE',
  unsupported_compression: 'UNSUPPORTED_COMPRESSION_TYPE',
  bad_magic: 'INVALID_RECORD',
  // Any int64 is a timestamp on the wire; one the log cannot hold (beyond 2^53) is refused as Kafka refuses a timestamp.
  timestamp_out_of_range: 'INVALID_TIMESTAMP',
};

/**
 * The Kafka error for a thrown error: a mapped Tributary code, a classic group error (also one relayed by a
 * peer), a codec reason, else UNKNOWN_SERVER_ERROR.
 */
export function kafkaErrorFor(err: unknown): KafkaErrorName {
  if (err instanceof ClassicGroupError) return err.kafkaName;
  if (err instanceof KafkaCodecError) return err.reason === 'unsupported_version' ? 'UNSUPPORTED_VERSION' : 'INVALID_REQUEST';
  if (err instanceof TributaryError) {
    const reason = err.fields.reason;
    if (err.code === 'invalid_batch' && typeof reason === 'string') return Object.hasOwn(BATCH_TO_KAFKA, reason) ? BATCH_TO_KAFKA[reason as RecordBatchErrorReason] : 'INVALID_RECORD';
    if (Object.hasOwn(ERROR_CODES, err.code)) return TRIBUTARY_TO_KAFKA[err.code as ErrorCode] ?? 'UNKNOWN_SERVER_ERROR';
    // A classic group error relayed by another broker (TXN_OFFSETS, TXN_GROUP_OFFSETS) keeps its Kafka name as its code.
    if (isClassicErrorName(err.code)) return err.code;
  }
  return 'UNKNOWN_SERVER_ERROR';
}

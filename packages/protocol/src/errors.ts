/**
 * The one registry of wire error codes. Every `ERROR:` reply the broker sends and every typed error the
 * SDK raises is built from this table, so a code's class and retryability can never disagree between the
 * two sides. docs/protocol.md lists the same table (a unit test keeps them in step).
 */

export type ErrorClass =
  | 'routing'
  | 'availability'
  | 'fencing'
  | 'conflict'
  | 'authorization'
  | 'not_found'
  | 'validation'
  | 'internal';

export const ERROR_CLASSES: readonly ErrorClass[] = [
  'routing',
  'availability',
  'fencing',
  'conflict',
  'authorization',
  'not_found',
  'validation',
  'internal',
];

export interface ErrorSpec {
  readonly class: ErrorClass;
  readonly retryable: boolean;
  readonly description: string;
}

export const ERROR_CODES = {
  // framing and parsing
  frame_too_large: { class: 'validation', retryable: false, description: 'declared frame length exceeds the maximum; the connection is closed' },
  invalid_encoding: { class: 'validation', retryable: false, description: 'text command is not valid UTF-8' },
  unknown_command: { class: 'validation', retryable: false, description: 'command name is not known' },
  invalid_parameter: { class: 'validation', retryable: false, description: 'a parameter is missing or malformed' },
  invalid_batch: { class: 'validation', retryable: false, description: 'binary batch frame is malformed' },
  UNSUPPORTED_FEATURE: { class: 'validation', retryable: false, description: 'NEGOTIATE required a feature this broker lacks' },
  unsupported_version: { class: 'validation', retryable: false, description: 'requested protocol version is not supported' },
  record_too_large: { class: 'validation', retryable: false, description: 'a record or batch exceeds the configured maximum' },
  // security
  authentication_failed: { class: 'authorization', retryable: false, description: 'AUTH was refused' },
  authentication_required: { class: 'authorization', retryable: false, description: 'the command needs an authenticated connection' },
  NOT_AUTHORIZED_FOR_OPERATION: { class: 'authorization', retryable: false, description: 'the principal lacks a permission' },
  NOT_AUTHORIZED_FOR_TOPIC: { class: 'authorization', retryable: false, description: 'the topic ACL refuses the principal' },
  NOT_AUTHORIZED_FOR_GROUP: { class: 'authorization', retryable: false, description: 'the group ACL refuses the principal' },
  // topics and data
  invalid_topic_name: { class: 'validation', retryable: false, description: 'topic name is empty, too long, has bad characters or is reserved' },
  topic_not_found: { class: 'not_found', retryable: false, description: 'no such topic' },
  topic_loading: { class: 'availability', retryable: true, description: 'the topic (or partition) exists in the cluster but this broker has not opened it yet; retry' },
  topic_already_exists: { class: 'conflict', retryable: false, description: 'a topic of that name exists with a different definition' },
  partition_not_found: { class: 'not_found', retryable: false, description: 'no such partition of the topic' },
  OFFSET_OUT_OF_RANGE: { class: 'validation', retryable: false, description: 'offset below the earliest retained or above the end of the log' },
  out_of_order_sequence: { class: 'conflict', retryable: false, description: 'idempotent producer skipped a sequence number, or a transaction reused a seqNum for another topic or partition' },
  stale_producer_epoch: { class: 'fencing', retryable: false, description: 'a newer epoch of this producer exists' },
  unknown_producer_id: { class: 'validation', retryable: false, description: 'the producer id was not handed out by INIT_PRODUCER_ID' },
  NOT_LEADER: { class: 'routing', retryable: true, description: 'this broker does not lead the partition; LEADER_IS names the leader' },
  FENCED_LEADER_EPOCH: { class: 'routing', retryable: true, description: 'the request names another leader epoch than the partition leader has; refresh metadata' },
  NOT_ENOUGH_REPLICAS: { class: 'availability', retryable: true, description: 'fewer in-sync replicas than min_insync_replicas' },
  // groups
  NOT_COORDINATOR: { class: 'routing', retryable: true, description: 'this broker is not the coordinator; host/port name the coordinator' },
  COORDINATOR_LOADING: { class: 'availability', retryable: true, description: 'the coordinator is still replaying its state' },
  COORDINATOR_NOT_AVAILABLE: { class: 'availability', retryable: true, description: "the group's coordinator did not answer this broker; retry" },
  group_not_found: { class: 'not_found', retryable: false, description: 'no such group' },
  member_not_found: { class: 'fencing', retryable: false, description: 'the member id is unknown to the group; join fresh' },
  GEN_MISMATCH: { class: 'fencing', retryable: false, description: 'the generation is not the current one' },
  NOT_OWNER: { class: 'fencing', retryable: false, description: 'the member does not own the partition in this generation' },
  REBALANCE_IN_PROGRESS: { class: 'fencing', retryable: false, description: 'the group is rebalancing; rejoin' },
  FENCED_INSTANCE_ID: { class: 'fencing', retryable: false, description: 'another live member holds this static instance id' },
  inconsistent_group_protocol: { class: 'conflict', retryable: false, description: "JOIN_GROUP asked for another assignor or protocol than the group's members use" },
  offset_regression: { class: 'conflict', retryable: false, description: 'a commit lower than the committed offset' },
  group_not_empty: { class: 'conflict', retryable: false, description: 'the group still has live members' },
  UNSTABLE_OFFSET_COMMIT: { class: 'availability', retryable: true, description: 'a transaction that is not finished holds offsets for the partition; retry' },
  // transactions
  transactional_id_not_found: { class: 'not_found', retryable: false, description: 'no such transactional id' },
  invalid_txn_state: { class: 'conflict', retryable: false, description: 'the transaction is not in a state that allows the request' },
  producer_fenced: { class: 'fencing', retryable: false, description: 'a newer producer epoch owns the transactional id' },
  invalid_producer_epoch: { class: 'validation', retryable: false, description: 'producerId/epoch do not match the transactional id (not an older epoch)' },
  invalid_producer_id_mapping: { class: 'fencing', retryable: false, description: "a producer id named for a transactional id is not the id's, current or previous (Kafka InitProducerId v3+)" },
  // availability and internals
  not_ready: { class: 'availability', retryable: true, description: 'the broker has not finished recovery' },
  shutting_down: { class: 'availability', retryable: true, description: 'the broker is shutting down' },
  too_many_connections: { class: 'availability', retryable: true, description: 'the connection limit is reached; the connection is closed' },
  request_timeout: { class: 'availability', retryable: true, description: 'the request did not complete in time' },
  throttled: { class: 'availability', retryable: true, description: 'a rate or in-flight limit is reached; retry later' },
  metadata_unavailable: { class: 'availability', retryable: true, description: 'metadata changes cannot be made now' },
  reassignment_in_progress: { class: 'conflict', retryable: false, description: 'a partition named already has a reassignment in progress; wait for it or cancel it' },
  no_reassignment: { class: 'not_found', retryable: false, description: 'no reassignment is in progress for the partitions named' },
  storage_error: { class: 'internal', retryable: true, description: 'the storage layer failed to complete the request' },
  internal_error: { class: 'internal', retryable: false, description: 'an unexpected broker failure' },
  // raised by the SDK, never sent by the broker
  connection_lost: { class: 'availability', retryable: true, description: '(SDK) the connection failed or closed before the reply' },
  invalid_config: { class: 'validation', retryable: false, description: '(SDK) an option is invalid; thrown at construction' },
  consumer_rebalancing: { class: 'fencing', retryable: false, description: '(SDK) work from an assignment that a rebalance revoked' },
  client_closed: { class: 'conflict', retryable: false, description: '(SDK) the producer, consumer or admin client is closed' },
  buffer_full: { class: 'availability', retryable: true, description: '(SDK) the producer buffer stayed full past its wait' },
  brokers_unreachable: { class: 'not_found', retryable: false, description: '(SDK) no broker answered within bootstrapTimeoutMs of the first attempt; the message names each address and why' },
  seek_below_committed: { class: 'validation', retryable: false, description: "(SDK) seek() below the group's committed offset; reset the group's offsets instead" },
} as const satisfies Record<string, ErrorSpec>;

export type ErrorCode = keyof typeof ERROR_CODES;

export function isErrorCode(code: string): code is ErrorCode {
  return Object.hasOwn(ERROR_CODES, code);
}

export type ErrorFields = Record<string, string | number | boolean | bigint>;

/** Base of every error Tributary raises, broker side and SDK side alike. */
export class TributaryError extends Error {
  readonly code: string;
  readonly errorClass: ErrorClass;
  readonly retriable: boolean;
  readonly fields: ErrorFields;
  /** Positional tokens after the code, e.g. `LEADER_IS host:port`. */
  readonly extra: string[];

  constructor(code: string, fields: ErrorFields = {}, message?: string, extra: string[] = []) {
    const spec: ErrorSpec | undefined = isErrorCode(code) ? ERROR_CODES[code] : undefined;
    super(message ?? describe(code, fields));
    this.name = 'TributaryError';
    this.code = code;
    this.errorClass = spec?.class ?? 'internal';
    this.retriable = spec?.retryable ?? false;
    this.fields = fields;
    this.extra = extra;
  }
}

function describe(code: string, fields: ErrorFields): string {
  const parts = Object.entries(fields).map(([k, v]) => `${k}=${String(v)}`);
  return parts.length ? `${code} ${parts.join(' ')}` : code;
}

/** Shorthand for the very common invalid_parameter error. */
export function invalidParam(param: string, reason: string): TributaryError {
  return new TributaryError('invalid_parameter', { param, reason });
}

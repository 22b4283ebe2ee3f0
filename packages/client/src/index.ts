/** The Tributary SDK: connections, routing, consumer, producer and admin clients. */
export { TributaryError, ERROR_CODES, type ErrorClass, type ErrorCode } from 'tributary-protocol/errors.js';
export type { RecordHeader } from 'tributary-protocol/record.js';
export { ASSIGNORS, assign, validatePlan, type AssignorName, type Assignment, type AssignmentInput } from 'tributary-protocol/assignors.js';
export { type AuthOptions, Connection, type ConnectionOptions } from 'tributary-protocol/connection.js';
export { Cluster, type ClusterOptions, type TopicMetadata, DEFAULT_BOOTSTRAP_TIMEOUT_MS, DEFAULT_STALL_TIMEOUT_MS } from './cluster.js';
export { retry, backoffDelay, isRetriable, DEFAULT_RETRY, type RetryOptions } from './retry.js';
export { channels } from './events.js';
export {
  Consumer,
  type ConsumerOptions,
  type ConsumerState,
  type ConsumerEvents,
  type ConsumedMessage,
  type EachMessagePayload,
  type EachBatchPayload,
  type RunOptions,
  type StartOptions,
  type CommitOptions,
  type ConcurrencyOptions,
  type Ordering,
  type RetryInfo,
  type RetryTopicsOptions,
  type ParkedEvent,
} from './consumer.js';
export { RETRY_HEADERS } from './retry-headers.js';
export type { ReplayDeadLettersOptions, ReplayDeadLettersResult } from './dead-letter-replay.js';
export {
  Producer,
  RecordAccumulator,
  choosePartition,
  validateProducerOptions,
  type ProducerOptions,
  type ProducerAcks,
  type ProducerEvents,
  type ProducerMessage,
  type ProducerRecord,
  type ProducerHeaders,
  type ProducerState,
  type RecordMetadata,
  type SendMetadata,
  type SendOptions,
  type SendRun,
} from './producer.js';
export {
  Admin,
  type AdminOptions,
  type CallOptions,
  type ListTopicsOptions,
  type ListOffsetsOptions,
  type CreateTopicOptions,
  type CreateTopicResult,
  type AlterTopicOptions,
  type AlterTopicResult,
  type TopicConfig,
  type TopicDescription,
  type PartitionOffsets,
  type GroupDescription,
  type ResetOffsetsOptions,
  type ResetTarget,
  type ReadRecordsOptions,
  type ReadRecord,
  type ReadRecordsResult,
  type ClusterStatus,
} from './admin.js';
export {
  Transaction,
  ProducerFencedError,
  TransactionStateError,
  type TransactionState,
  type TransactionalMessage,
  type GroupPosition,
} from './transaction.js';
export { partitionForKey } from 'tributary-protocol/partitioner.js';

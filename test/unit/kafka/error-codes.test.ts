/** The Kafka error table and the first mapping from Tributary's errors. */
import { CLASSIC_ERROR_NAMES, ClassicGroupError } from 'tributary-broker/coordinator/classic-group.js';
import { describe, expect, it } from 'vitest';
import { formatError, parseError } from 'tributary-protocol/command.js';
import { ERROR_CODES, TributaryError } from 'tributary-protocol/errors.js';
import { endTxnHandler, initTransactional, txnErrorCode } from 'tributary-broker/kafka/apis/transactions.js';
import { coordinatorErrorCodeOf } from 'tributary-broker/kafka/apis/handler.js';
import type { KafkaRequestContext } from 'tributary-broker/kafka/context.js';
import { ConcurrentTransactionsError } from 'tributary-broker/txn/txn-kafka.js';
import { RecordBatchError } from 'tributary-protocol/record-batch/errors.js';
import { KafkaCodecError } from 'tributary-broker/kafka/protocol/errors.js';
import { KAFKA_ERRORS, kafkaErrorCode, kafkaErrorFor, kafkaErrorName, TRIBUTARY_TO_KAFKA } from 'tributary-broker/kafka/protocol/error-codes.js';

/** The codes the listener will need (issue 15's list). */
const NEEDED = [
  'NONE',
  'UNKNOWN_SERVER_ERROR',
  'OFFSET_OUT_OF_RANGE',
  'CORRUPT_MESSAGE',
  'UNKNOWN_TOPIC_OR_PARTITION',
  'INVALID_FETCH_SIZE',
  'LEADER_NOT_AVAILABLE',
  'NOT_LEADER_OR_FOLLOWER',
  'REQUEST_TIMED_OUT',
  'MESSAGE_TOO_LARGE',
  'COORDINATOR_LOAD_IN_PROGRESS',
  'COORDINATOR_NOT_AVAILABLE',
  'NOT_COORDINATOR',
  'INVALID_TOPIC_EXCEPTION',
  'RECORD_LIST_TOO_LARGE',
  'NOT_ENOUGH_REPLICAS',
  'NOT_ENOUGH_REPLICAS_AFTER_APPEND',
  'INVALID_REQUIRED_ACKS',
  'ILLEGAL_GENERATION',
  'INCONSISTENT_GROUP_PROTOCOL',
  'INVALID_GROUP_ID',
  'UNKNOWN_MEMBER_ID',
  'INVALID_SESSION_TIMEOUT',
  'REBALANCE_IN_PROGRESS',
  'INVALID_COMMIT_OFFSET_SIZE',
  'TOPIC_AUTHORIZATION_FAILED',
  'GROUP_AUTHORIZATION_FAILED',
  'CLUSTER_AUTHORIZATION_FAILED',
  'UNSUPPORTED_SASL_MECHANISM',
  'ILLEGAL_SASL_STATE',
  'UNSUPPORTED_VERSION',
  'TOPIC_ALREADY_EXISTS',
  'INVALID_PARTITIONS',
  'INVALID_REPLICATION_FACTOR',
  'INVALID_REQUEST',
  'UNSUPPORTED_FOR_MESSAGE_FORMAT',
  'OUT_OF_ORDER_SEQUENCE_NUMBER',
  'DUPLICATE_SEQUENCE_NUMBER',
  'INVALID_PRODUCER_EPOCH',
  'INVALID_TXN_STATE',
  'INVALID_PRODUCER_ID_MAPPING',
  'INVALID_TRANSACTION_TIMEOUT',
  'CONCURRENT_TRANSACTIONS',
  'TRANSACTIONAL_ID_AUTHORIZATION_FAILED',
  'SASL_AUTHENTICATION_FAILED',
  'UNKNOWN_PRODUCER_ID',
  'GROUP_ID_NOT_FOUND',
  'MEMBER_ID_REQUIRED',
  'FENCED_INSTANCE_ID',
  'UNSUPPORTED_COMPRESSION_TYPE',
  'PRODUCER_FENCED',
  'UNSTABLE_OFFSET_COMMIT',
];

describe('Kafka error table', () => {
  it('has every code the listener needs, each code once', () => {
    expect(NEEDED.filter((n) => !KAFKA_ERRORS[n])).toEqual([]);
    const codes = Object.values(KAFKA_ERRORS).map((e) => e.code);
    expect(new Set(codes).size).toBe(codes.length);
    for (const [name, spec] of Object.entries(KAFKA_ERRORS)) {
      expect(kafkaErrorName(spec.code)).toBe(name);
      expect(kafkaErrorCode(name)).toBe(spec.code);
    }
  });

  it('maps Tributary codes onto known Kafka errors, and a retryable one never onto a fatal one', () => {
    for (const [code, kafka] of Object.entries(TRIBUTARY_TO_KAFKA)) {
      expect(Object.hasOwn(ERROR_CODES, code)).toBe(true);
      expect(KAFKA_ERRORS[kafka!], `${code} -> ${kafka}`).toBeDefined();
      if (ERROR_CODES[code as keyof typeof ERROR_CODES].retryable) expect(KAFKA_ERRORS[kafka!]!.retriable, `${code} -> ${kafka}`).toBe(true);
    }
  });

  it('kafkaErrorFor: Tributary codes, RecordBatch reasons, codec errors, anything else', () => {
    expect(kafkaErrorFor(new TributaryError('NOT_LEADER'))).toBe('NOT_LEADER_OR_FOLLOWER');
    expect(kafkaErrorFor(new TributaryError('NOT_COORDINATOR'))).toBe('NOT_COORDINATOR');
    expect(kafkaErrorFor(new TributaryError('GEN_MISMATCH'))).toBe('ILLEGAL_GENERATION');
    expect(kafkaErrorFor(new RecordBatchError('crc_mismatch', 'x'))).toBe('CORRUPT_MESSAGE');
    expect(kafkaErrorFor(new RecordBatchError('unsupported_compression', 'zstd'))).toBe('UNSUPPORTED_COMPRESSION_TYPE');
    // Any int64 is a timestamp on the wire: one the log cannot hold is the producer's timestamp error.
    expect(kafkaErrorFor(new RecordBatchError('timestamp_out_of_range', 'x'))).toBe('INVALID_TIMESTAMP');
    // Well formed but not acceptable: INVALID_RECORD (not retriable), as from Kafka.
    expect(kafkaErrorFor(new RecordBatchError('bad_magic', 'magic 1'))).toBe('INVALID_RECORD');
    expect(kafkaErrorFor(new TributaryError('invalid_batch', { reason: '2 batches for one partition; one is allowed' }))).toBe('INVALID_RECORD');
    expect(kafkaErrorFor(new KafkaCodecError('unsupported_version', 'x'))).toBe('UNSUPPORTED_VERSION');
    expect(kafkaErrorFor(new KafkaCodecError('truncated', 'x'))).toBe('INVALID_REQUEST');
    expect(kafkaErrorFor(new TributaryError('offset_regression'))).toBe('INVALID_COMMIT_OFFSET_SIZE');
    expect(kafkaErrorFor(new ClassicGroupError('FENCED_INSTANCE_ID'))).toBe('FENCED_INSTANCE_ID');
    expect(kafkaErrorFor(new TributaryError('invalid_encoding'))).toBe('UNKNOWN_SERVER_ERROR');
    expect(kafkaErrorFor(new RangeError('boom'))).toBe('UNKNOWN_SERVER_ERROR');
  });

  // A broker that relays another broker's refusal (TXN_OFFSETS, TXN_GROUP_OFFSETS) has only its
  // `ERROR:` text: the Kafka error must be the one the first broker would have answered itself.
  it('an error relayed through a peer\'s ERROR: reply keeps its Kafka error', () => {
    const relayed = (err: TributaryError) => parseError(formatError(err));
    for (const name of CLASSIC_ERROR_NAMES) expect(kafkaErrorFor(relayed(new ClassicGroupError(name, { group: 'g' }))), name).toBe(name);
    // Relayed twice (group coordinator -> id's coordinator -> group coordinator) too.
    expect(kafkaErrorFor(relayed(relayed(new ClassicGroupError('ILLEGAL_GENERATION'))))).toBe('ILLEGAL_GENERATION');
    expect(txnErrorCode(new ConcurrentTransactionsError('t', 'prepare_commit'))).toBe(kafkaErrorCode('CONCURRENT_TRANSACTIONS'));
    expect(txnErrorCode(relayed(new TributaryError('invalid_txn_state', { state: 'open' })))).toBe(kafkaErrorCode('INVALID_TXN_STATE'));
  });

  // KIP-360: a producer id that is not the transactional id's has a code of its own, so the Kafka answer
  // comes from the error table whatever carried the error (no class of its own to test for).
  it('invalid_producer_id_mapping is INVALID_PRODUCER_ID_MAPPING, also relayed, and InitProducerId answers it so', async () => {
    const mapping = () => new TributaryError('invalid_producer_id_mapping', { transactional_id: 't', producer_id: '7' });
    const relayed = parseError(formatError(mapping()));
    expect(relayed).toMatchObject({ code: 'invalid_producer_id_mapping', errorClass: 'fencing', retriable: false });
    expect(kafkaErrorFor(mapping())).toBe('INVALID_PRODUCER_ID_MAPPING');
    expect(kafkaErrorFor(relayed)).toBe('INVALID_PRODUCER_ID_MAPPING');
    for (const err of [mapping(), relayed]) {
      const ctx = {
        authorize: () => undefined,
        broker: {
          config: { maxTransactionTimeoutMs: 900_000 },
          security: { txnCaller: () => undefined },
          transactions: { checkCaller: () => undefined, initProducerId: async () => Promise.reject(err), status: () => ({ state: 'open' }) },
        },
      } as unknown as KafkaRequestContext;
      for (const version of [3, 4]) {
        const res = await initTransactional(ctx, version, { transactionalId: 't', transactionTimeoutMs: 60_000, producerId: 7n, producerEpoch: 0 });
        expect(res, `v${version}`).toMatchObject({ errorCode: kafkaErrorCode('INVALID_PRODUCER_ID_MAPPING'), producerId: -1n });
      }
    }
  });

  // Kafka's coordinators answer their own storage trouble with coordinator codes; a Java client treats
  // NOT_ENOUGH_REPLICAS or REQUEST_TIMED_OUT on EndTxn, JoinGroup or OffsetCommit as fatal.
  it('a coordinator API answers storage trouble with COORDINATOR_NOT_AVAILABLE or NOT_COORDINATOR, its own refusals unchanged', async () => {
    const cases: Array<[TributaryError, string]> = [
      [new TributaryError('NOT_ENOUGH_REPLICAS'), 'COORDINATOR_NOT_AVAILABLE'],
      [new TributaryError('request_timeout'), 'COORDINATOR_NOT_AVAILABLE'],
      [new TributaryError('not_ready'), 'COORDINATOR_NOT_AVAILABLE'],
      [new TributaryError('NOT_LEADER'), 'NOT_COORDINATOR'],
      [new TributaryError('FENCED_LEADER_EPOCH'), 'NOT_COORDINATOR'],
      [new TributaryError('storage_error'), 'NOT_COORDINATOR'],
      [new ClassicGroupError('ILLEGAL_GENERATION'), 'ILLEGAL_GENERATION'],
      [new TributaryError('COORDINATOR_LOADING'), 'COORDINATOR_LOAD_IN_PROGRESS'],
    ];
    for (const [err, name] of cases) {
      expect(coordinatorErrorCodeOf(err), err.code).toBe(kafkaErrorCode(name));
      if (err.retriable) expect(KAFKA_ERRORS[name]!.retriable, `${err.code} stays retriable`).toBe(true);
    }
    // EndTxn whose __transaction_state write could not reach its in-sync replicas.
    const ctx = {
      authorize: () => undefined,
      broker: {
        security: { txnCaller: () => undefined },
        transactions: { checkCaller: () => undefined, kafka: { endTxn: async () => Promise.reject(new TributaryError('NOT_ENOUGH_REPLICAS', { topic: '__transaction_state' })) } },
      },
    } as unknown as KafkaRequestContext;
    const res = await endTxnHandler.handle(ctx, 1, { transactionalId: 't', producerId: 1n, producerEpoch: 0, committed: true }, {} as never);
    expect(res).toEqual({ throttleTimeMs: 0, errorCode: kafkaErrorCode('COORDINATOR_NOT_AVAILABLE') });
  });
});

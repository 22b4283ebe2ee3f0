/**
 * What kafkajs sends and reads, per API: the arguments its request encoders take and what our decoder must
 * make of the bytes, and a response of ours with what kafkajs's decoder must make of it. Fields differ in
 * name between the two sides; these tables are the mapping, written per version where the message changes.
 */
import type { KafkaStruct } from 'tributary-broker/kafka/protocol/schema.js';
import { advertisedVersions } from 'tributary-broker/kafka/protocol/apis.js';
import { FETCH_RECORDS } from './fixtures.js';
import { Long } from './kafkajs.js';

type Obj = Record<string, unknown>;

export interface KafkajsCase {
  /** kafkajs's request directory and our API name. */
  dir: string;
  api: string;
  request(v: number): { args: Obj; expected: Obj };
  response(v: number): { ours: KafkaStruct; expected: Obj };
  /** First version whose response carries the throttle time (kafkajs reports it as clientSideThrottleTime from KIP-219 on). */
  throttleFrom: number;
}

const when = (cond: boolean, o: Obj): Obj => (cond ? o : {});
const pid = () => Long.fromValue('123456789012');
const b = (...bytes: number[]) => Buffer.from(bytes);

export const KAFKAJS_CASES: KafkajsCase[] = [
  {
    dir: 'produce',
    api: 'Produce',
    throttleFrom: 1,
    request: (v) => ({
      args: {
        acks: -1,
        timeout: 30000,
        transactionalId: 'tx-1',
        producerId: Long.fromValue(7),
        producerEpoch: 2,
        topicData: [
          {
            topic: 'orders',
            partitions: [{ partition: 1, firstSequence: 5, messages: [{ key: 'k1', value: 'v1', headers: { h: 'x' }, timestamp: 1_700_000_000_000 }] }],
          },
        ],
      },
      expected: { ...when(v >= 3, { transactionalId: 'tx-1' }), acks: -1, timeoutMs: 30000, topicData: [{ name: 'orders', partitionData: [{ index: 1 }] }] },
    }),
    response: (v) => ({
      ours: {
        responses: [
          { name: 'orders', partitionResponses: [{ index: 1, errorCode: 0, baseOffset: 42, logAppendTimeMs: 1_700_000_000_001, logStartOffset: 3 }] },
        ],
        throttleTimeMs: 25,
      },
      expected: {
        topics: [
          {
            topicName: 'orders',
            partitions: [
              {
                partition: 1,
                errorCode: 0,
                ...(v < 3 ? { offset: '42' } : { baseOffset: '42' }),
                ...when(v === 2, { timestamp: '1700000000001' }),
                ...when(v >= 3, { logAppendTime: '1700000000001' }),
                ...when(v >= 5, { logStartOffset: '3' }),
              },
            ],
          },
        ],
      },
    }),
  },
  {
    dir: 'fetch',
    api: 'Fetch',
    throttleFrom: 1,
    request: (v) => ({
      args: {
        replicaId: -1,
        maxWaitTime: 500,
        minBytes: 1,
        maxBytes: 1_048_576,
        isolationLevel: 1,
        sessionId: 0,
        sessionEpoch: -1,
        rackId: 'rack-a',
        topics: [{ topic: 'orders', partitions: [{ partition: 2, fetchOffset: 77, currentLeaderEpoch: 4, maxBytes: 65536 }] }],
        forgottenTopics: [{ topic: 'old', partitions: [1, 2] }],
      },
      expected: {
        replicaId: -1,
        maxWaitMs: 500,
        minBytes: 1,
        ...when(v >= 3, { maxBytes: 1_048_576 }),
        ...when(v >= 4, { isolationLevel: 1 }),
        ...when(v >= 7, { sessionId: 0, sessionEpoch: -1, forgottenTopicsData: [{ topic: 'old', partitions: [1, 2] }] }),
        topics: [
          {
            topic: 'orders',
            partitions: [
              { partition: 2, fetchOffset: 77n, partitionMaxBytes: 65536, ...when(v >= 9, { currentLeaderEpoch: 4 }), ...when(v >= 5, { logStartOffset: -1n }) },
            ],
          },
        ],
        ...when(v >= 11, { rackId: 'rack-a' }),
      },
    }),
    response: (v) => ({
      ours: {
        throttleTimeMs: 25,
        errorCode: 0,
        sessionId: 0,
        responses: [
          {
            topic: 'orders',
            partitions: [
              {
                partitionIndex: 2,
                errorCode: 0,
                highWatermark: 100,
                lastStableOffset: 90,
                logStartOffset: 1,
                abortedTransactions: [{ producerId: 9n, firstOffset: 12 }],
                preferredReadReplica: -1,
                // Before v4 a Fetch carries the old message sets, which kafkajs decodes separately.
                records: v >= 4 ? FETCH_RECORDS : Buffer.alloc(0),
              },
            ],
          },
        ],
      },
      expected: {
        ...when(v >= 7, { errorCode: 0, sessionId: 0 }),
        responses: [
          {
            topicName: 'orders',
            partitions: [
              {
                partition: 2,
                errorCode: 0,
                highWatermark: '100',
                ...when(v >= 4, { lastStableOffset: '90', abortedTransactions: [{ producerId: '9', firstOffset: '12' }] }),
                ...when(v >= 5, { lastStartOffset: '1' }),
                ...when(v >= 11, { preferredReadReplica: -1 }),
                messages:
                  v >= 4
                    ? [
                        { offset: '10', value: Buffer.from('a') },
                        { offset: '11', key: Buffer.from('k'), value: Buffer.from('b'), headers: { h: Buffer.from('x') } },
                      ]
                    : [],
              },
            ],
          },
        ],
      },
    }),
  },
  {
    dir: 'listOffsets',
    api: 'ListOffsets',
    throttleFrom: 2,
    request: (v) => ({
      args: { replicaId: -1, isolationLevel: 1, topics: [{ topic: 'orders', partitions: [{ partition: 0, timestamp: -2 }] }] },
      expected: {
        replicaId: -1,
        ...when(v >= 2, { isolationLevel: 1 }),
        topics: [{ name: 'orders', partitions: [{ partitionIndex: 0, timestamp: -2n, ...when(v === 0, { maxNumOffsets: 1 }) }] }],
      },
    }),
    response: (v) => ({
      ours: {
        throttleTimeMs: 25,
        topics: [{ name: 'orders', partitions: [{ partitionIndex: 0, errorCode: 0, oldStyleOffsets: [5], timestamp: -1, offset: 5 }] }],
      },
      expected: {
        responses: [{ topic: 'orders', partitions: [{ partition: 0, errorCode: 0, ...(v === 0 ? { offsets: ['5'] } : { timestamp: '-1', offset: '5' }) }] }],
      },
    }),
  },
  {
    dir: 'metadata',
    api: 'Metadata',
    throttleFrom: 3,
    request: (v) => ({
      args: { topics: ['a', 'b'], allowAutoTopicCreation: false },
      expected: { topics: [{ name: 'a' }, { name: 'b' }], ...when(v >= 4, { allowAutoTopicCreation: false }) },
    }),
    response: (v) => ({
      ours: {
        throttleTimeMs: 25,
        brokers: [{ nodeId: 1, host: 'h1', port: 9092, rack: 'r1' }],
        clusterId: 'cid',
        controllerId: 1,
        topics: [
          {
            errorCode: 0,
            name: 'a',
            isInternal: false,
            partitions: [{ errorCode: 0, partitionIndex: 0, leaderId: 1, leaderEpoch: 3, replicaNodes: [1, 2], isrNodes: [1], offlineReplicas: [2] }],
          },
        ],
      },
      expected: {
        brokers: [{ nodeId: 1, host: 'h1', port: 9092, ...when(v >= 1, { rack: 'r1' }) }],
        ...when(v >= 2, { clusterId: 'cid' }),
        ...when(v >= 1, { controllerId: 1 }),
        topicMetadata: [
          {
            topicErrorCode: 0,
            topic: 'a',
            ...when(v >= 1, { isInternal: false }),
            partitionMetadata: [{ partitionErrorCode: 0, partitionId: 0, leader: 1, replicas: [1, 2], isr: [1], ...when(v >= 5, { offlineReplicas: [2] }) }],
          },
        ],
      },
    }),
  },
  {
    dir: 'offsetCommit',
    api: 'OffsetCommit',
    throttleFrom: 3,
    request: (v) => ({
      args: {
        groupId: 'g',
        groupGenerationId: 3,
        memberId: 'm',
        retentionTime: -1,
        topics: [{ topic: 'orders', partitions: [{ partition: 0, offset: '15', timestamp: 1_700_000_000_000, metadata: 'md' }] }],
      },
      expected: {
        groupId: 'g',
        ...when(v >= 1, { generationId: 3, memberId: 'm' }),
        ...when(v >= 2 && v <= 4, { retentionTimeMs: -1n }),
        topics: [
          {
            name: 'orders',
            partitions: [{ partitionIndex: 0, committedOffset: 15n, committedMetadata: 'md', ...when(v === 1, { commitTimestamp: 1_700_000_000_000n }) }],
          },
        ],
      },
    }),
    response: () => ({
      ours: { throttleTimeMs: 25, topics: [{ name: 'orders', partitions: [{ partitionIndex: 0, errorCode: 0 }] }] },
      expected: { responses: [{ topic: 'orders', partitions: [{ partition: 0, errorCode: 0 }] }] },
    }),
  },
  {
    dir: 'offsetFetch',
    api: 'OffsetFetch',
    throttleFrom: 3,
    request: () => ({
      args: { groupId: 'g', topics: [{ topic: 'orders', partitions: [{ partition: 0 }, { partition: 1 }] }] },
      expected: { groupId: 'g', topics: [{ name: 'orders', partitionIndexes: [0, 1] }] },
    }),
    response: (v) => ({
      ours: {
        throttleTimeMs: 25,
        topics: [{ name: 'orders', partitions: [{ partitionIndex: 0, committedOffset: 15, metadata: 'md', errorCode: 0 }] }],
        errorCode: 0,
      },
      expected: {
        responses: [{ topic: 'orders', partitions: [{ partition: 0, offset: '15', metadata: 'md', errorCode: 0 }] }],
        ...when(v >= 2, { errorCode: 0 }),
      },
    }),
  },
  {
    dir: 'findCoordinator',
    api: 'FindCoordinator',
    throttleFrom: 1,
    request: (v) => ({
      args: v === 0 ? { groupId: 'g' } : { coordinatorKey: 'g', coordinatorType: 1 },
      expected: { key: 'g', ...when(v >= 1, { keyType: 1 }) },
    }),
    response: (v) => ({
      ours: { throttleTimeMs: 25, errorCode: 0, errorMessage: null, nodeId: 2, host: 'h2', port: 9093 },
      expected: { errorCode: 0, coordinator: { nodeId: 2, host: 'h2', port: 9093 }, ...when(v >= 1, { errorMessage: null }) },
    }),
  },
  {
    dir: 'joinGroup',
    api: 'JoinGroup',
    throttleFrom: 2,
    request: (v) => ({
      args: {
        groupId: 'g',
        sessionTimeout: 30000,
        rebalanceTimeout: 60000,
        memberId: '',
        groupInstanceId: 'inst-1',
        protocolType: 'consumer',
        groupProtocols: [{ name: 'RoundRobinAssigner', metadata: b(0, 1, 2) }],
      },
      expected: {
        groupId: 'g',
        sessionTimeoutMs: 30000,
        ...when(v >= 1, { rebalanceTimeoutMs: 60000 }),
        memberId: '',
        ...when(v >= 5, { groupInstanceId: 'inst-1' }),
        protocolType: 'consumer',
        protocols: [{ name: 'RoundRobinAssigner', metadata: b(0, 1, 2) }],
      },
    }),
    response: (v) => ({
      ours: {
        throttleTimeMs: 25,
        errorCode: 0,
        generationId: 4,
        protocolName: 'RoundRobinAssigner',
        leader: 'm1',
        memberId: 'm1',
        members: [{ memberId: 'm1', groupInstanceId: 'inst-1', metadata: b(9) }],
      },
      expected: {
        errorCode: 0,
        generationId: 4,
        groupProtocol: 'RoundRobinAssigner',
        leaderId: 'm1',
        memberId: 'm1',
        members: [{ memberId: 'm1', ...when(v >= 5, { groupInstanceId: 'inst-1' }), memberMetadata: b(9) }],
      },
    }),
  },
  {
    dir: 'heartbeat',
    api: 'Heartbeat',
    throttleFrom: 1,
    request: (v) => ({
      args: { groupId: 'g', groupGenerationId: 4, memberId: 'm1', groupInstanceId: 'inst-1' },
      expected: { groupId: 'g', generationId: 4, memberId: 'm1', ...when(v >= 3, { groupInstanceId: 'inst-1' }) },
    }),
    response: () => ({ ours: { throttleTimeMs: 25, errorCode: 0 }, expected: { errorCode: 0 } }),
  },
  {
    dir: 'leaveGroup',
    api: 'LeaveGroup',
    throttleFrom: 1,
    request: (v) =>
      v < 3
        ? { args: { groupId: 'g', memberId: 'm1' }, expected: { groupId: 'g', memberId: 'm1' } }
        : {
            args: { groupId: 'g', members: [{ memberId: 'm1', groupInstanceId: 'inst-1' }] },
            expected: { groupId: 'g', members: [{ memberId: 'm1', groupInstanceId: 'inst-1' }] },
          },
    response: (v) => ({
      ours: { throttleTimeMs: 25, errorCode: 0, members: [{ memberId: 'm1', groupInstanceId: 'inst-1', errorCode: 0 }] },
      expected: { errorCode: 0, ...when(v >= 3, { members: [{ memberId: 'm1', groupInstanceId: 'inst-1', errorCode: 0 }] }) },
    }),
  },
  {
    dir: 'syncGroup',
    api: 'SyncGroup',
    throttleFrom: 1,
    request: (v) => ({
      args: { groupId: 'g', generationId: 4, memberId: 'm1', groupInstanceId: 'inst-1', groupAssignment: [{ memberId: 'm1', memberAssignment: b(1, 2) }] },
      expected: {
        groupId: 'g',
        generationId: 4,
        memberId: 'm1',
        ...when(v >= 3, { groupInstanceId: 'inst-1' }),
        assignments: [{ memberId: 'm1', assignment: b(1, 2) }],
      },
    }),
    response: () => ({ ours: { throttleTimeMs: 25, errorCode: 0, assignment: b(3, 4) }, expected: { errorCode: 0, memberAssignment: b(3, 4) } }),
  },
  {
    dir: 'describeGroups',
    api: 'DescribeGroups',
    throttleFrom: 1,
    request: () => ({ args: { groupIds: ['g1', 'g2'] }, expected: { groups: ['g1', 'g2'] } }),
    response: () => {
      const member = { memberId: 'm1', clientId: 'c1', clientHost: '/127.0.0.1', memberMetadata: b(1), memberAssignment: b(2) };
      return {
        ours: {
          throttleTimeMs: 25,
          groups: [{ errorCode: 0, groupId: 'g1', groupState: 'Stable', protocolType: 'consumer', protocolData: 'RoundRobinAssigner', members: [member] }],
        },
        expected: { groups: [{ errorCode: 0, groupId: 'g1', state: 'Stable', protocolType: 'consumer', protocol: 'RoundRobinAssigner', members: [member] }] },
      };
    },
  },
  {
    dir: 'listGroups',
    api: 'ListGroups',
    throttleFrom: 1,
    request: () => ({ args: {}, expected: {} }),
    response: () => ({
      ours: { throttleTimeMs: 25, errorCode: 0, groups: [{ groupId: 'g1', protocolType: 'consumer' }] },
      expected: { errorCode: 0, groups: [{ groupId: 'g1', protocolType: 'consumer' }] },
    }),
  },
  {
    dir: 'saslHandshake',
    api: 'SaslHandshake',
    throttleFrom: Number.POSITIVE_INFINITY,
    request: () => ({ args: { mechanism: 'PLAIN' }, expected: { mechanism: 'PLAIN' } }),
    response: () => ({ ours: { errorCode: 0, mechanisms: ['PLAIN', 'SCRAM-SHA-256'] }, expected: { errorCode: 0, enabledMechanisms: ['PLAIN', 'SCRAM-SHA-256'] } }),
  },
  {
    dir: 'apiVersions',
    api: 'ApiVersions',
    throttleFrom: 1,
    request: () => ({ args: {}, expected: {} }),
    response: () => ({
      ours: { errorCode: 0, apiKeys: advertisedVersions(), throttleTimeMs: 25 },
      expected: { errorCode: 0, apiVersions: advertisedVersions() },
    }),
  },
  {
    dir: 'createTopics',
    api: 'CreateTopics',
    throttleFrom: 2,
    request: (v) => ({
      args: {
        topics: [
          {
            topic: 't1',
            numPartitions: 3,
            replicationFactor: 1,
            replicaAssignment: [{ partition: 0, replicas: [1] }],
            configEntries: [{ name: 'cleanup.policy', value: 'compact' }],
          },
        ],
        validateOnly: true,
        timeout: 5000,
      },
      expected: {
        topics: [
          {
            name: 't1',
            numPartitions: 3,
            replicationFactor: 1,
            assignments: [{ partitionIndex: 0, brokerIds: [1] }],
            configs: [{ name: 'cleanup.policy', value: 'compact' }],
          },
        ],
        timeoutMs: 5000,
        ...when(v >= 1, { validateOnly: true }),
      },
    }),
    response: (v) => ({
      ours: { throttleTimeMs: 25, topics: [{ name: 't1', errorCode: 0, errorMessage: null }] },
      expected: { topicErrors: [{ topic: 't1', errorCode: 0, ...when(v >= 1, { errorMessage: null }) }] },
    }),
  },
  {
    dir: 'deleteTopics',
    api: 'DeleteTopics',
    throttleFrom: 1,
    request: () => ({ args: { topics: ['t1'], timeout: 5000 }, expected: { topicNames: ['t1'], timeoutMs: 5000 } }),
    response: () => ({ ours: { throttleTimeMs: 25, responses: [{ name: 't1', errorCode: 0 }] }, expected: { topicErrors: [{ topic: 't1', errorCode: 0 }] } }),
  },
  {
    dir: 'deleteRecords',
    api: 'DeleteRecords',
    throttleFrom: 0,
    request: () => ({
      args: { topics: [{ topic: 't1', partitions: [{ partition: 0, offset: '20' }] }], timeout: 5000 },
      expected: { topics: [{ name: 't1', partitions: [{ partitionIndex: 0, offset: 20n }] }], timeoutMs: 5000 },
    }),
    response: () => ({
      ours: { throttleTimeMs: 25, topics: [{ name: 't1', partitions: [{ partitionIndex: 0, lowWatermark: 20, errorCode: 0 }] }] },
      expected: { topics: [{ topic: 't1', partitions: [{ partition: 0, lowWatermark: 20n, errorCode: 0 }] }] },
    }),
  },
  {
    dir: 'initProducerId',
    api: 'InitProducerId',
    throttleFrom: 0,
    request: () => ({ args: { transactionalId: 'tx-1', transactionTimeout: 60000 }, expected: { transactionalId: 'tx-1', transactionTimeoutMs: 60000 } }),
    response: () => ({
      ours: { throttleTimeMs: 25, errorCode: 0, producerId: 123_456_789_012n, producerEpoch: 3 },
      expected: { errorCode: 0, producerId: '123456789012', producerEpoch: 3 },
    }),
  },
  {
    dir: 'addPartitionsToTxn',
    api: 'AddPartitionsToTxn',
    throttleFrom: 0,
    request: () => ({
      args: { transactionalId: 'tx-1', producerId: pid(), producerEpoch: 3, topics: [{ topic: 'orders', partitions: [0, 2] }] },
      expected: { transactionalId: 'tx-1', producerId: 123_456_789_012n, producerEpoch: 3, topics: [{ name: 'orders', partitions: [0, 2] }] },
    }),
    response: () => ({
      ours: { throttleTimeMs: 25, results: [{ name: 'orders', results: [{ partitionIndex: 0, errorCode: 0 }] }] },
      expected: { errors: [{ topic: 'orders', partitionErrors: [{ partition: 0, errorCode: 0 }] }] },
    }),
  },
  {
    dir: 'addOffsetsToTxn',
    api: 'AddOffsetsToTxn',
    throttleFrom: 0,
    request: () => ({
      args: { transactionalId: 'tx-1', producerId: pid(), producerEpoch: 3, groupId: 'g' },
      expected: { transactionalId: 'tx-1', producerId: 123_456_789_012n, producerEpoch: 3, groupId: 'g' },
    }),
    response: () => ({ ours: { throttleTimeMs: 25, errorCode: 0 }, expected: { errorCode: 0 } }),
  },
  {
    dir: 'endTxn',
    api: 'EndTxn',
    throttleFrom: 0,
    request: () => ({
      args: { transactionalId: 'tx-1', producerId: pid(), producerEpoch: 3, transactionResult: true },
      expected: { transactionalId: 'tx-1', producerId: 123_456_789_012n, producerEpoch: 3, committed: true },
    }),
    response: () => ({ ours: { throttleTimeMs: 25, errorCode: 0 }, expected: { errorCode: 0 } }),
  },
  {
    dir: 'txnOffsetCommit',
    api: 'TxnOffsetCommit',
    throttleFrom: 0,
    request: () => ({
      args: {
        transactionalId: 'tx-1',
        groupId: 'g',
        producerId: pid(),
        producerEpoch: 3,
        topics: [{ topic: 'orders', partitions: [{ partition: 0, offset: '15', metadata: null }] }],
      },
      expected: {
        transactionalId: 'tx-1',
        groupId: 'g',
        producerId: 123_456_789_012n,
        producerEpoch: 3,
        topics: [{ name: 'orders', partitions: [{ partitionIndex: 0, committedOffset: 15n, committedMetadata: null }] }],
      },
    }),
    response: () => ({
      ours: { throttleTimeMs: 25, topics: [{ name: 'orders', partitions: [{ partitionIndex: 0, errorCode: 0 }] }] },
      expected: { topics: [{ topic: 'orders', partitions: [{ partition: 0, errorCode: 0 }] }] },
    }),
  },
  {
    dir: 'describeConfigs',
    api: 'DescribeConfigs',
    throttleFrom: 0,
    request: (v) => ({
      args: { resources: [{ type: 2, name: 'orders', configNames: ['retention.ms'] }], includeSynonyms: true },
      expected: { resources: [{ resourceType: 2, resourceName: 'orders', configurationKeys: ['retention.ms'] }], ...when(v >= 1, { includeSynonyms: true }) },
    }),
    response: (v) => ({
      ours: {
        throttleTimeMs: 25,
        results: [
          {
            errorCode: 0,
            errorMessage: null,
            resourceType: 2,
            resourceName: 'orders',
            configs: [
              {
                name: 'retention.ms',
                value: '1000',
                readOnly: false,
                isDefault: false,
                configSource: 1,
                isSensitive: false,
                synonyms: [{ name: 'retention.ms', value: '1000', source: 1 }],
              },
            ],
          },
        ],
      },
      expected: {
        resources: [
          {
            errorCode: 0,
            errorMessage: null,
            resourceType: 2,
            resourceName: 'orders',
            configEntries: [
              {
                configName: 'retention.ms',
                configValue: '1000',
                readOnly: false,
                isSensitive: false,
                ...(v >= 1
                  ? { configSource: 1, configSynonyms: [{ configName: 'retention.ms', configValue: '1000', configSource: 1 }] }
                  : { isDefault: false }),
              },
            ],
          },
        ],
      },
    }),
  },
  {
    dir: 'saslAuthenticate',
    api: 'SaslAuthenticate',
    throttleFrom: Number.POSITIVE_INFINITY,
    // kafkajs's mechanisms hand it the token with its int32 length already written (it writes it as is).
    request: () => ({ args: { authBytes: Buffer.concat([b(0, 0, 0, 9), Buffer.from('\0app\0pass')]) }, expected: { authBytes: Buffer.from('\0app\0pass') } }),
    response: (v) => ({
      ours: { errorCode: 0, errorMessage: null, authBytes: Buffer.from('v=abc'), sessionLifetimeMs: 0 },
      // It hands the server's token back to the mechanism with its int32 length, as it was on the wire.
      expected: { errorCode: 0, errorMessage: null, authBytes: Buffer.concat([b(0, 0, 0, 5), Buffer.from('v=abc')]), ...when(v >= 1, { sessionLifetimeMs: '0' }) },
    }),
  },
  {
    dir: 'createPartitions',
    api: 'CreatePartitions',
    throttleFrom: 0,
    request: () => ({
      args: { topicPartitions: [{ topic: 'orders', count: 6, assignments: [[1], [2]] }], validateOnly: false, timeout: 5000 },
      expected: { topics: [{ name: 'orders', count: 6, assignments: [{ brokerIds: [1] }, { brokerIds: [2] }] }], timeoutMs: 5000, validateOnly: false },
    }),
    response: () => ({
      ours: { throttleTimeMs: 25, results: [{ name: 'orders', errorCode: 0, errorMessage: null }] },
      expected: { topicErrors: [{ topic: 'orders', errorCode: 0, errorMessage: null }] },
    }),
  },
  {
    dir: 'alterConfigs',
    api: 'AlterConfigs',
    throttleFrom: 0,
    request: () => ({
      args: { resources: [{ type: 2, name: 'orders', configEntries: [{ name: 'retention.ms', value: '3600000' }] }], validateOnly: true },
      expected: { resources: [{ resourceType: 2, resourceName: 'orders', configs: [{ name: 'retention.ms', value: '3600000' }] }], validateOnly: true },
    }),
    response: () => ({
      ours: { throttleTimeMs: 25, responses: [{ errorCode: 40, errorMessage: 'config x cannot be changed', resourceType: 2, resourceName: 'orders' }] },
      expected: { resources: [{ errorCode: 40, errorMessage: 'config x cannot be changed', resourceType: 2, resourceName: 'orders' }] },
    }),
  },
];

/**
 * What @platformatic/kafka sends and reads, per API: the arguments of its request writers, what our decoder
 * must make of the bytes, and a response of ours. Its parsers mostly use the protocol's own field names (as
 * we do), so what it must read back is derived from our value (int64 as bigint) unless `parsed` says otherwise.
 */
import type { KafkaStruct } from 'tributary-broker/kafka/protocol/schema.js';
import { advertisedVersions } from 'tributary-broker/kafka/protocol/apis.js';
import { ZERO_UUID } from 'tributary-broker/kafka/protocol/reader.js';
import { FETCH_RECORDS } from './fixtures.js';

type Obj = Record<string, unknown>;

export interface PlatformaticCase {
  api: string;
  args(v: number): unknown[];
  request(v: number): Obj;
  response(v: number): KafkaStruct;
  /** What its parser returns when that is not our value with int64 fields as bigint. */
  parsed?(v: number, derived: Obj): Obj;
}

const when = (cond: boolean, o: Obj): Obj => (cond ? o : {});
const b = (...bytes: number[]) => Buffer.from(bytes);

export const PLATFORMATIC_CASES: PlatformaticCase[] = [
  {
    api: 'Produce',
    args: () => [
      -1,
      30000,
      [{ topic: 'orders', partition: 1, key: Buffer.from('k1'), value: Buffer.from('v1'), timestamp: 1_700_000_000_000n }],
      { transactionalId: 'tx-1', producerId: 7n, producerEpoch: 2 },
    ],
    request: () => ({ transactionalId: 'tx-1', acks: -1, timeoutMs: 30000, topicData: [{ name: 'orders', partitionData: [{ index: 1 }] }] }),
    response: (v) => ({
      responses: [
        {
          name: 'orders',
          partitionResponses: [
            { index: 1, errorCode: 0, baseOffset: 42, logAppendTimeMs: -1, logStartOffset: 0, ...when(v >= 8, { recordErrors: [], errorMessage: null }) },
          ],
        },
      ],
      throttleTimeMs: 0,
    }),
  },
  {
    api: 'Fetch',
    args: () => [
      500,
      1,
      1_048_576,
      1,
      0,
      -1,
      [{ topicId: 'orders', partitions: [{ partition: 0, currentLeaderEpoch: 3, fetchOffset: 10n, lastFetchedEpoch: -1, partitionMaxBytes: 1000 }] }],
      [],
      '',
    ],
    request: () => ({
      replicaId: -1,
      maxWaitMs: 500,
      minBytes: 1,
      maxBytes: 1_048_576,
      isolationLevel: 1,
      sessionId: 0,
      sessionEpoch: -1,
      topics: [
        {
          topic: 'orders',
          partitions: [{ partition: 0, currentLeaderEpoch: 3, fetchOffset: 10n, lastFetchedEpoch: -1, logStartOffset: -1n, partitionMaxBytes: 1000 }],
        },
      ],
      forgottenTopicsData: [],
      rackId: '',
    }),
    response: () => ({
      throttleTimeMs: 0,
      errorCode: 0,
      sessionId: 0,
      responses: [
        {
          topic: 'orders',
          partitions: [
            {
              partitionIndex: 0,
              errorCode: 0,
              highWatermark: 12,
              lastStableOffset: 12,
              logStartOffset: 0,
              abortedTransactions: [{ producerId: 9n, firstOffset: 4 }],
              preferredReadReplica: -1,
              records: FETCH_RECORDS,
            },
          ],
        },
      ],
    }),
    // It names the topic field topicId (the v13+ name) and parses the records itself.
    parsed: (_v, d) => {
      const topic = (d.responses as Obj[])[0]!;
      const part = { ...(topic.partitions as Obj[])[0]! };
      delete part.records;
      return { ...d, responses: [{ topicId: topic.topic, partitions: [part] }] };
    },
  },
  {
    api: 'ListOffsets',
    args: () => [-1, 1, [{ name: 'orders', partitions: [{ partitionIndex: 0, currentLeaderEpoch: -1, timestamp: -1n }] }]],
    request: () => ({
      replicaId: -1,
      isolationLevel: 1,
      topics: [{ name: 'orders', partitions: [{ partitionIndex: 0, currentLeaderEpoch: -1, timestamp: -1n }] }],
    }),
    response: () => ({
      throttleTimeMs: 0,
      topics: [{ name: 'orders', partitions: [{ partitionIndex: 0, errorCode: 0, timestamp: -1, offset: 12, leaderEpoch: 0 }] }],
    }),
  },
  {
    api: 'Metadata',
    args: () => [['a'], false, false],
    request: (v) => ({
      topics: [{ ...when(v >= 10, { topicId: ZERO_UUID }), name: 'a' }],
      allowAutoTopicCreation: false,
      ...when(v <= 10, { includeClusterAuthorizedOperations: false }),
      includeTopicAuthorizedOperations: false,
    }),
    response: (v) => ({
      throttleTimeMs: 0,
      brokers: [{ nodeId: 1, host: 'localhost', port: 9092, rack: null }],
      clusterId: 'tributary',
      controllerId: 1,
      topics: [
        {
          errorCode: 0,
          name: 'a',
          ...when(v >= 10, { topicId: '6ba7b810-9dad-11d1-80b4-00c04fd430c8' }),
          isInternal: false,
          partitions: [{ errorCode: 0, partitionIndex: 0, leaderId: 1, leaderEpoch: 2, replicaNodes: [1], isrNodes: [1], offlineReplicas: [] }],
          topicAuthorizedOperations: -2147483648,
        },
      ],
      clusterAuthorizedOperations: -2147483648,
    }),
    // Before v10 it fills topicId with the name; it skips the cluster authorized operations.
    parsed: (v, d) => {
      const { clusterAuthorizedOperations: _skipped, ...rest } = d;
      return v < 10 ? { ...rest, topics: (d.topics as Obj[]).map((t) => ({ ...t, topicId: t.name })) } : rest;
    },
  },
  {
    api: 'OffsetCommit',
    args: () => [
      'g',
      3,
      'm1',
      null,
      [{ name: 'orders', partitions: [{ partitionIndex: 0, committedOffset: 15n, committedLeaderEpoch: -1, committedMetadata: null }] }],
    ],
    request: () => ({
      groupId: 'g',
      generationId: 3,
      memberId: 'm1',
      groupInstanceId: null,
      topics: [{ name: 'orders', partitions: [{ partitionIndex: 0, committedOffset: 15n, committedLeaderEpoch: -1, committedMetadata: null }] }],
    }),
    response: () => ({ throttleTimeMs: 0, topics: [{ name: 'orders', partitions: [{ partitionIndex: 0, errorCode: 0 }] }] }),
  },
  {
    api: 'OffsetFetch',
    args: () => [[{ groupId: 'g', topics: [{ name: 'orders', partitionIndexes: [0, 1] }] }], true],
    request: () => ({ groups: [{ groupId: 'g', topics: [{ name: 'orders', partitionIndexes: [0, 1] }] }], requireStable: true }),
    response: () => ({
      throttleTimeMs: 0,
      groups: [
        {
          groupId: 'g',
          topics: [{ name: 'orders', partitions: [{ partitionIndex: 0, committedOffset: 15, committedLeaderEpoch: -1, metadata: null, errorCode: 0 }] }],
          errorCode: 0,
        },
      ],
    }),
  },
  {
    api: 'FindCoordinator',
    args: () => [0, ['g']],
    request: () => ({ keyType: 0, coordinatorKeys: ['g'] }),
    response: () => ({ throttleTimeMs: 0, coordinators: [{ key: 'g', nodeId: 1, host: 'localhost', port: 9092, errorCode: 0, errorMessage: null }] }),
  },
  {
    api: 'JoinGroup',
    args: () => ['g', 30000, 60000, '', 'inst-1', 'consumer', [{ name: 'roundrobin', metadata: b(0, 1) }], 'joining'],
    request: (v) => ({
      groupId: 'g',
      sessionTimeoutMs: 30000,
      rebalanceTimeoutMs: 60000,
      memberId: '',
      groupInstanceId: 'inst-1',
      protocolType: 'consumer',
      protocols: [{ name: 'roundrobin', metadata: b(0, 1) }],
      ...when(v >= 8, { reason: 'joining' }),
    }),
    response: () => ({
      throttleTimeMs: 0,
      errorCode: 0,
      generationId: 1,
      protocolType: 'consumer',
      protocolName: 'roundrobin',
      leader: 'm1',
      skipAssignment: false,
      memberId: 'm1',
      members: [{ memberId: 'm1', groupInstanceId: 'inst-1', metadata: b(1) }],
    }),
    parsed: (v, d) => (v < 7 ? { ...d, protocolType: '', skipAssignment: false } : { ...d, skipAssignment: false }),
  },
  {
    api: 'Heartbeat',
    args: () => ['g', 1, 'm1', null],
    request: () => ({ groupId: 'g', generationId: 1, memberId: 'm1', groupInstanceId: null }),
    response: () => ({ throttleTimeMs: 0, errorCode: 0 }),
  },
  {
    api: 'LeaveGroup',
    args: () => ['g', [{ memberId: 'm1', groupInstanceId: null, reason: 'bye' }]],
    request: (v) => ({ groupId: 'g', members: [{ memberId: 'm1', groupInstanceId: null, ...when(v >= 5, { reason: 'bye' }) }] }),
    response: () => ({ throttleTimeMs: 0, errorCode: 0, members: [{ memberId: 'm1', groupInstanceId: null, errorCode: 0 }] }),
  },
  {
    api: 'SyncGroup',
    args: () => ['g', 1, 'm1', null, 'consumer', 'roundrobin', [{ memberId: 'm1', assignment: b(5) }]],
    request: (v) => ({
      groupId: 'g',
      generationId: 1,
      memberId: 'm1',
      groupInstanceId: null,
      ...when(v >= 5, { protocolType: 'consumer', protocolName: 'roundrobin' }),
      assignments: [{ memberId: 'm1', assignment: b(5) }],
    }),
    response: () => ({ throttleTimeMs: 0, errorCode: 0, protocolType: 'consumer', protocolName: 'roundrobin', assignment: b(6) }),
  },
  {
    api: 'DescribeGroups',
    args: () => [['g'], true],
    request: () => ({ groups: ['g'], includeAuthorizedOperations: true }),
    response: () => ({
      throttleTimeMs: 0,
      groups: [
        {
          errorCode: 0,
          groupId: 'g',
          groupState: 'Stable',
          protocolType: 'consumer',
          protocolData: 'roundrobin',
          members: [{ memberId: 'm1', groupInstanceId: null, clientId: 'c', clientHost: '/127.0.0.1', memberMetadata: b(1), memberAssignment: b(2) }],
          authorizedOperations: 0,
        },
      ],
    }),
  },
  {
    api: 'ListGroups',
    args: () => [['Stable'], ['classic']],
    request: (v) => ({ statesFilter: ['Stable'], ...when(v >= 5, { typesFilter: ['classic'] }) }),
    response: () => ({ throttleTimeMs: 0, errorCode: 0, groups: [{ groupId: 'g', protocolType: 'consumer', groupState: 'Stable', groupType: 'classic' }] }),
  },
  {
    api: 'SaslHandshake',
    args: () => ['PLAIN'],
    request: () => ({ mechanism: 'PLAIN' }),
    response: () => ({ errorCode: 0, mechanisms: ['PLAIN', 'SCRAM-SHA-256'] }),
  },
  {
    api: 'ApiVersions',
    args: () => ['@platformatic/kafka', '1.35.0'],
    request: () => ({ clientSoftwareName: '@platformatic/kafka', clientSoftwareVersion: '1.35.0' }),
    response: () => ({ errorCode: 0, apiKeys: advertisedVersions(), throttleTimeMs: 0 }),
  },
  {
    api: 'CreateTopics',
    args: () => [
      [{ name: 't1', numPartitions: 3, replicationFactor: 1, assignments: [], configs: [{ name: 'cleanup.policy', value: 'compact' }] }],
      5000,
      false,
    ],
    request: () => ({
      topics: [{ name: 't1', numPartitions: 3, replicationFactor: 1, assignments: [], configs: [{ name: 'cleanup.policy', value: 'compact' }] }],
      timeoutMs: 5000,
      validateOnly: false,
    }),
    response: () => ({
      throttleTimeMs: 0,
      topics: [
        {
          name: 't1',
          topicId: '6ba7b810-9dad-11d1-80b4-00c04fd430c8',
          errorCode: 0,
          errorMessage: null,
          numPartitions: 3,
          replicationFactor: 1,
          configs: [{ name: 'cleanup.policy', value: 'compact', readOnly: false, configSource: 1, isSensitive: false }],
        },
      ],
    }),
  },
  {
    api: 'DeleteTopics',
    args: () => [[{ name: 't1', topicId: null }], 5000],
    request: () => ({ topics: [{ name: 't1', topicId: ZERO_UUID }], timeoutMs: 5000 }),
    response: () => ({ throttleTimeMs: 0, responses: [{ name: 't1', topicId: ZERO_UUID, errorCode: 0, errorMessage: null }] }),
  },
  {
    api: 'DeleteRecords',
    args: () => [[{ name: 't1', partitions: [{ partitionIndex: 0, offset: 20n }] }], 5000],
    request: () => ({ topics: [{ name: 't1', partitions: [{ partitionIndex: 0, offset: 20n }] }], timeoutMs: 5000 }),
    response: () => ({ throttleTimeMs: 0, topics: [{ name: 't1', partitions: [{ partitionIndex: 0, lowWatermark: 20, errorCode: 0 }] }] }),
  },
  {
    api: 'InitProducerId',
    args: () => ['tx-1', 60000, -1n, -1],
    request: () => ({ transactionalId: 'tx-1', transactionTimeoutMs: 60000, producerId: -1n, producerEpoch: -1 }),
    response: () => ({ throttleTimeMs: 0, errorCode: 0, producerId: 123_456_789_012n, producerEpoch: 0 }),
  },
  {
    api: 'AddPartitionsToTxn',
    args: () => [[{ transactionalId: 'tx-1', producerId: 5n, producerEpoch: 1, topics: [{ name: 'orders', partitions: [0, 1] }] }]],
    request: () => ({ transactionalId: 'tx-1', producerId: 5n, producerEpoch: 1, topics: [{ name: 'orders', partitions: [0, 1] }] }),
    response: () => ({ throttleTimeMs: 0, results: [{ name: 'orders', results: [{ partitionIndex: 0, errorCode: 0 }] }] }),
    // It reads the v3 results into its v4+ shape.
    parsed: () => ({
      throttleTimeMs: 0,
      resultsByTransaction: [{ topicResults: [{ name: 'orders', resultsByPartition: [{ partitionIndex: 0, partitionErrorCode: 0 }] }] }],
    }),
  },
  {
    api: 'AddOffsetsToTxn',
    args: () => ['tx-1', 5n, 1, 'g'],
    request: () => ({ transactionalId: 'tx-1', producerId: 5n, producerEpoch: 1, groupId: 'g' }),
    response: () => ({ throttleTimeMs: 0, errorCode: 0 }),
  },
  {
    api: 'EndTxn',
    args: () => ['tx-1', 5n, 1, true],
    request: () => ({ transactionalId: 'tx-1', producerId: 5n, producerEpoch: 1, committed: true }),
    response: () => ({ throttleTimeMs: 0, errorCode: 0 }),
  },
  {
    api: 'TxnOffsetCommit',
    args: () => [
      'tx-1',
      'g',
      5n,
      1,
      3,
      'm1',
      null,
      [{ name: 'orders', partitions: [{ partitionIndex: 0, committedOffset: 15n, committedLeaderEpoch: -1, committedMetadata: null }] }],
    ],
    request: () => ({
      transactionalId: 'tx-1',
      groupId: 'g',
      producerId: 5n,
      producerEpoch: 1,
      generationId: 3,
      memberId: 'm1',
      groupInstanceId: null,
      topics: [{ name: 'orders', partitions: [{ partitionIndex: 0, committedOffset: 15n, committedLeaderEpoch: -1, committedMetadata: null }] }],
    }),
    response: () => ({ throttleTimeMs: 0, topics: [{ name: 'orders', partitions: [{ partitionIndex: 0, errorCode: 0 }] }] }),
  },
  {
    api: 'DescribeConfigs',
    args: () => [[{ resourceType: 2, resourceName: 'orders', configurationKeys: ['retention.ms'] }], true, false],
    request: (v) => ({
      resources: [{ resourceType: 2, resourceName: 'orders', configurationKeys: ['retention.ms'] }],
      includeSynonyms: true,
      ...when(v >= 3, { includeDocumentation: false }),
    }),
    response: () => ({
      throttleTimeMs: 0,
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
              configSource: 1,
              isSensitive: false,
              synonyms: [{ name: 'retention.ms', value: '1000', source: 1 }],
              configType: 5,
              documentation: null,
            },
          ],
        },
      ],
    }),
  },
  {
    api: 'SaslAuthenticate',
    args: () => [Buffer.from('\0app\0pass')],
    request: () => ({ authBytes: Buffer.from('\0app\0pass') }),
    response: () => ({ errorCode: 0, errorMessage: null, authBytes: Buffer.from('v=abc'), sessionLifetimeMs: 0 }),
  },
  {
    api: 'CreatePartitions',
    args: () => [[{ name: 'orders', count: 6, assignments: [{ brokerIds: [1] }] }], 5000, false],
    request: () => ({ topics: [{ name: 'orders', count: 6, assignments: [{ brokerIds: [1] }] }], timeoutMs: 5000, validateOnly: false }),
    response: () => ({ throttleTimeMs: 0, results: [{ name: 'orders', errorCode: 0, errorMessage: null }] }),
  },
  {
    api: 'AlterConfigs',
    args: () => [[{ resourceType: 2, resourceName: 'orders', configs: [{ name: 'retention.bytes', value: '1024' }] }], false],
    request: () => ({ resources: [{ resourceType: 2, resourceName: 'orders', configs: [{ name: 'retention.bytes', value: '1024' }] }], validateOnly: false }),
    response: () => ({ throttleTimeMs: 0, responses: [{ errorCode: 0, errorMessage: null, resourceType: 2, resourceName: 'orders' }] }),
  },
  {
    api: 'IncrementalAlterConfigs',
    args: () => [[{ resourceType: 2, resourceName: 'orders', configs: [{ name: 'retention.ms', configOperation: 1, value: null }] }], true],
    request: () => ({ resources: [{ resourceType: 2, resourceName: 'orders', configs: [{ name: 'retention.ms', configOperation: 1, value: null }] }], validateOnly: true }),
    response: () => ({ throttleTimeMs: 0, responses: [{ errorCode: 0, errorMessage: null, resourceType: 2, resourceName: 'orders' }] }),
  },
];

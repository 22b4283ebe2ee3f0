import { api, arr, f } from '../schema.js';

/**
 * Metadata (key 3). v1 makes a null topic list mean "all topics", v9 is flexible, v10 adds topic ids, v11
 * drops the cluster authorized operations, v12 lets a response topic name be null.
 */
export const Metadata = api(
  3,
  'Metadata',
  '0-12',
  '9+',
  [
    arr('topics', [f('topicId', 'uuid', '10+'), f('name', 'string', '0+', { nullable: '10+' })], '0+', { nullable: '1+' }),
    f('allowAutoTopicCreation', 'bool', '4+', { default: true }),
    f('includeClusterAuthorizedOperations', 'bool', '8-10'),
    f('includeTopicAuthorizedOperations', 'bool', '8+'),
  ],
  [
    f('throttleTimeMs', 'int32', '3+'),
    arr('brokers', [f('nodeId', 'int32'), f('host', 'string'), f('port', 'int32'), f('rack', 'string', '1+', { nullable: '1+', default: null })]),
    f('clusterId', 'string', '2+', { nullable: '2+', default: null }),
    f('controllerId', 'int32', '1+', { default: -1 }),
    arr('topics', [
      f('errorCode', 'int16'),
      f('name', 'string', '0+', { nullable: '12+' }),
      f('topicId', 'uuid', '10+'),
      f('isInternal', 'bool', '1+'),
      arr('partitions', [
        f('errorCode', 'int16'),
        f('partitionIndex', 'int32'),
        f('leaderId', 'int32'),
        f('leaderEpoch', 'int32', '7+', { default: -1 }),
        arr('replicaNodes', 'int32'),
        arr('isrNodes', 'int32'),
        arr('offlineReplicas', 'int32', '5+'),
      ]),
      f('topicAuthorizedOperations', 'int32', '8+', { default: -2147483648 }),
    ]),
    f('clusterAuthorizedOperations', 'int32', '8-10', { default: -2147483648 }),
  ],
);

import { api, arr, f, struct } from '../schema.js';

/**
 * Fetch (key 1). v4 adds the isolation level and aborted transactions (RecordBatch v2 consumers), v7 fetch
 * sessions, v11 the rack, v12 is flexible with tagged diverging-epoch/leader fields. v13+ name topics by id.
 */
export const Fetch = api(
  1,
  'Fetch',
  '0-12',
  '12+',
  [
    f('clusterId', 'string', '12+', { nullable: '12+', tag: 0 }),
    f('replicaId', 'int32', '0+', { default: -1 }),
    f('maxWaitMs', 'int32'),
    f('minBytes', 'int32'),
    f('maxBytes', 'int32', '3+', { default: 0x7fffffff }),
    f('isolationLevel', 'int8', '4+'),
    f('sessionId', 'int32', '7+'),
    f('sessionEpoch', 'int32', '7+', { default: -1 }),
    arr('topics', [
      f('topic', 'string'),
      arr('partitions', [
        f('partition', 'int32'),
        f('currentLeaderEpoch', 'int32', '9+', { default: -1 }),
        // Any int64: one beyond 2^53 is answered for its partition (OFFSET_OUT_OF_RANGE), not refused as a request.
        f('fetchOffset', 'bigint64'),
        f('lastFetchedEpoch', 'int32', '12+', { default: -1 }),
        // A follower's log start (consumers send -1), not used here: any int64 is read, never refused.
        f('logStartOffset', 'bigint64', '5+', { default: -1n }),
        f('partitionMaxBytes', 'int32'),
      ]),
    ]),
    arr('forgottenTopicsData', [f('topic', 'string', '7+'), arr('partitions', 'int32', '7+')], '7+'),
    f('rackId', 'string', '11+'),
  ],
  [
    f('throttleTimeMs', 'int32', '1+'),
    f('errorCode', 'int16', '7+'),
    f('sessionId', 'int32', '7+'),
    arr('responses', [
      f('topic', 'string'),
      arr('partitions', [
        f('partitionIndex', 'int32'),
        f('errorCode', 'int16'),
        f('highWatermark', 'int64'),
        f('lastStableOffset', 'int64', '4+', { default: -1 }),
        f('logStartOffset', 'int64', '5+', { default: -1 }),
        struct('divergingEpoch', [f('epoch', 'int32', '12+', { default: -1 }), f('endOffset', 'int64', '12+', { default: -1 })], '12+', { tag: 0 }),
        struct('currentLeader', [f('leaderId', 'int32', '12+', { default: -1 }), f('leaderEpoch', 'int32', '12+', { default: -1 })], '12+', { tag: 1 }),
        struct('snapshotId', [f('endOffset', 'int64', '12+', { default: -1 }), f('epoch', 'int32', '12+', { default: -1 })], '12+', { tag: 2 }),
        arr('abortedTransactions', [f('producerId', 'bigint64', '4+'), f('firstOffset', 'int64', '4+')], '4+', { nullable: '4+', default: null }),
        f('preferredReadReplica', 'int32', '11+', { default: -1 }),
        f('records', 'records', '0+', { nullable: '0+' }),
      ]),
    ]),
  ],
);

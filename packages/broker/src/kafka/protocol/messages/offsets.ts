import { api, arr, f } from '../schema.js';

/**
 * OffsetCommit (key 8). v1 adds the generation and per-partition commit timestamp (dropped in v2 for a
 * retention time, itself dropped in v5), v6 the leader epoch, v7 static membership, v8 is flexible.
 */
export const OffsetCommit = api(
  8,
  'OffsetCommit',
  '0-8',
  '8+',
  [
    f('groupId', 'string'),
    f('generationId', 'int32', '1+', { default: -1 }),
    f('memberId', 'string', '1+'),
    f('groupInstanceId', 'string', '7+', { nullable: '7+', default: null }),
    // Any int64 in these three (docs/kafka.md, "Consumer groups"): an offset beyond 2^53 is answered for its
    // partition, the retention time and commit timestamp are not used.
    f('retentionTimeMs', 'bigint64', '2-4', { default: -1n }),
    arr('topics', [
      f('name', 'string'),
      arr('partitions', [
        f('partitionIndex', 'int32'),
        f('committedOffset', 'bigint64'),
        f('committedLeaderEpoch', 'int32', '6+', { default: -1 }),
        f('commitTimestamp', 'bigint64', '1', { default: -1n }),
        f('committedMetadata', 'string', '0+', { nullable: '0+' }),
      ]),
    ]),
  ],
  [f('throttleTimeMs', 'int32', '3+'), arr('topics', [f('name', 'string'), arr('partitions', [f('partitionIndex', 'int32'), f('errorCode', 'int16')])])],
);

const fetchedPartition = (v: string, epoch: string) => [
  f('partitionIndex', 'int32', v),
  f('committedOffset', 'int64', v),
  f('committedLeaderEpoch', 'int32', epoch, { default: -1 }),
  f('metadata', 'string', v, { nullable: v }),
  f('errorCode', 'int16', v),
];

/**
 * OffsetFetch (key 9). v2 lets a null topic list mean "all", v5 the leader epoch, v6 flexible, v7 require
 * stable, v8 batches groups (the per-group form replaces the top-level one).
 */
export const OffsetFetch = api(
  9,
  'OffsetFetch',
  '0-8',
  '6+',
  [
    f('groupId', 'string', '0-7'),
    arr('topics', [f('name', 'string', '0-7'), arr('partitionIndexes', 'int32', '0-7')], '0-7', { nullable: '2-7' }),
    arr(
      'groups',
      [f('groupId', 'string', '8+'), arr('topics', [f('name', 'string', '8+'), arr('partitionIndexes', 'int32', '8+')], '8+', { nullable: '8+' })],
      '8+',
    ),
    f('requireStable', 'bool', '7+'),
  ],
  [
    f('throttleTimeMs', 'int32', '3+'),
    arr('topics', [f('name', 'string', '0-7'), arr('partitions', fetchedPartition('0-7', '5-7'), '0-7')], '0-7'),
    f('errorCode', 'int16', '2-7'),
    arr(
      'groups',
      [
        f('groupId', 'string', '8+'),
        arr('topics', [f('name', 'string', '8+'), arr('partitions', fetchedPartition('8+', '8+'), '8+')], '8+'),
        f('errorCode', 'int16', '8+'),
      ],
      '8+',
    ),
  ],
);

/** TxnOffsetCommit (key 28). v2 the leader epoch, v3 flexible with the group generation and member. */
export const TxnOffsetCommit = api(
  28,
  'TxnOffsetCommit',
  '0-3',
  '3+',
  [
    f('transactionalId', 'string'),
    f('groupId', 'string'),
    f('producerId', 'bigint64'),
    f('producerEpoch', 'int16'),
    f('generationId', 'int32', '3+', { default: -1 }),
    f('memberId', 'string', '3+'),
    f('groupInstanceId', 'string', '3+', { nullable: '3+', default: null }),
    arr('topics', [
      f('name', 'string'),
      arr('partitions', [
        f('partitionIndex', 'int32'),
        // Any int64: one beyond 2^53 is answered for its partition (docs/kafka.md, "Transactions").
        f('committedOffset', 'bigint64'),
        f('committedLeaderEpoch', 'int32', '2+', { default: -1 }),
        f('committedMetadata', 'string', '0+', { nullable: '0+' }),
      ]),
    ]),
  ],
  [f('throttleTimeMs', 'int32'), arr('topics', [f('name', 'string'), arr('partitions', [f('partitionIndex', 'int32'), f('errorCode', 'int16')])])],
);

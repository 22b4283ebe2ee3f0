import { api, arr, f } from '../schema.js';

/** ListOffsets (key 2). v0 returns a list of old-style offsets; v2 adds the isolation level; v6 is flexible. */
export const ListOffsets = api(
  2,
  'ListOffsets',
  '0-7',
  '6+',
  [
    f('replicaId', 'int32', '0+', { default: -1 }),
    f('isolationLevel', 'int8', '2+'),
    arr('topics', [
      f('name', 'string'),
      arr('partitions', [
        f('partitionIndex', 'int32'),
        f('currentLeaderEpoch', 'int32', '4+', { default: -1 }),
        // Any int64: one beyond 2^53 is answered for its partition (no record stamped so late), not refused as a request.
        f('timestamp', 'bigint64'),
        f('maxNumOffsets', 'int32', '0', { default: 1 }),
      ]),
    ]),
  ],
  [
    f('throttleTimeMs', 'int32', '2+'),
    arr('topics', [
      f('name', 'string'),
      arr('partitions', [
        f('partitionIndex', 'int32'),
        f('errorCode', 'int16'),
        arr('oldStyleOffsets', 'int64', '0'),
        f('timestamp', 'int64', '1+', { default: -1 }),
        f('offset', 'int64', '1+', { default: -1 }),
        f('leaderEpoch', 'int32', '4+', { default: -1 }),
      ]),
    ]),
  ],
);

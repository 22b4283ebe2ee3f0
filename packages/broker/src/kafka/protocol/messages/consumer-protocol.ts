import { arr, f, message } from '../schema.js';

/**
 * What the classic consumer protocol puts in JoinGroup protocol metadata (the subscription) and in the
 * SyncGroup assignment. Each payload starts with its int16 version; never flexible.
 */
export const ConsumerProtocolSubscription = message({
  name: 'ConsumerProtocolSubscription',
  apiKey: -1,
  kind: 'data',
  versions: '0-3',
  flexible: 'none',
  fields: [
    arr('topics', 'string'),
    f('userData', 'bytes', '0+', { nullable: '0+', default: null }),
    arr('ownedPartitions', [f('topic', 'string', '1+'), arr('partitions', 'int32', '1+')], '1+'),
    f('generationId', 'int32', '2+', { default: -1 }),
    f('rackId', 'string', '3+', { nullable: '3+', default: null }),
  ],
});

export const ConsumerProtocolAssignment = message({
  name: 'ConsumerProtocolAssignment',
  apiKey: -1,
  kind: 'data',
  versions: '0-3',
  flexible: 'none',
  fields: [arr('assignedPartitions', [f('topic', 'string'), arr('partitions', 'int32')]), f('userData', 'bytes', '0+', { nullable: '0+', default: null })],
});

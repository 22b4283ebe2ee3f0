import { api, arr, f } from '../schema.js';

/** JoinGroup (key 11). v4 needs a member id first (MEMBER_ID_REQUIRED), v5 static membership, v6 flexible. */
export const JoinGroup = api(
  11,
  'JoinGroup',
  '0-9',
  '6+',
  [
    f('groupId', 'string'),
    f('sessionTimeoutMs', 'int32'),
    f('rebalanceTimeoutMs', 'int32', '1+', { default: -1 }),
    f('memberId', 'string'),
    f('groupInstanceId', 'string', '5+', { nullable: '5+', default: null }),
    f('protocolType', 'string'),
    arr('protocols', [f('name', 'string'), f('metadata', 'bytes')]),
    f('reason', 'string', '8+', { nullable: '8+', default: null }),
  ],
  [
    f('throttleTimeMs', 'int32', '2+'),
    f('errorCode', 'int16'),
    f('generationId', 'int32', '0+', { default: -1 }),
    f('protocolType', 'string', '7+', { nullable: '7+', default: null }),
    f('protocolName', 'string', '0+', { nullable: '7+' }),
    f('leader', 'string'),
    f('skipAssignment', 'bool', '9+'),
    f('memberId', 'string'),
    arr('members', [f('memberId', 'string'), f('groupInstanceId', 'string', '5+', { nullable: '5+', default: null }), f('metadata', 'bytes')]),
  ],
);

/** SyncGroup (key 14). v3 static membership, v4 flexible, v5 echoes the protocol type and name. */
export const SyncGroup = api(
  14,
  'SyncGroup',
  '0-5',
  '4+',
  [
    f('groupId', 'string'),
    f('generationId', 'int32'),
    f('memberId', 'string'),
    f('groupInstanceId', 'string', '3+', { nullable: '3+', default: null }),
    f('protocolType', 'string', '5+', { nullable: '5+', default: null }),
    f('protocolName', 'string', '5+', { nullable: '5+', default: null }),
    arr('assignments', [f('memberId', 'string'), f('assignment', 'bytes')]),
  ],
  [
    f('throttleTimeMs', 'int32', '1+'),
    f('errorCode', 'int16'),
    f('protocolType', 'string', '5+', { nullable: '5+', default: null }),
    f('protocolName', 'string', '5+', { nullable: '5+', default: null }),
    f('assignment', 'bytes'),
  ],
);

/** Heartbeat (key 12). v3 static membership, v4 flexible. */
export const Heartbeat = api(
  12,
  'Heartbeat',
  '0-4',
  '4+',
  [f('groupId', 'string'), f('generationId', 'int32'), f('memberId', 'string'), f('groupInstanceId', 'string', '3+', { nullable: '3+', default: null })],
  [f('throttleTimeMs', 'int32', '1+'), f('errorCode', 'int16')],
);

/** LeaveGroup (key 13). v3 batches members (static membership), v4 flexible, v5 adds a reason. */
export const LeaveGroup = api(
  13,
  'LeaveGroup',
  '0-5',
  '4+',
  [
    f('groupId', 'string'),
    f('memberId', 'string', '0-2'),
    arr(
      'members',
      [
        f('memberId', 'string', '3+'),
        f('groupInstanceId', 'string', '3+', { nullable: '3+', default: null }),
        f('reason', 'string', '5+', { nullable: '5+', default: null }),
      ],
      '3+',
    ),
  ],
  [
    f('throttleTimeMs', 'int32', '1+'),
    f('errorCode', 'int16'),
    arr(
      'members',
      [f('memberId', 'string', '3+'), f('groupInstanceId', 'string', '3+', { nullable: '3+', default: null }), f('errorCode', 'int16', '3+')],
      '3+',
    ),
  ],
);

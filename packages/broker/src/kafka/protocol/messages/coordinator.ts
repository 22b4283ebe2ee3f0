import { api, arr, f } from '../schema.js';

/** FindCoordinator (key 10). v1 adds the key type (0 group, 1 transaction), v3 flexible, v4 batches keys. */
export const FindCoordinator = api(
  10,
  'FindCoordinator',
  '0-4',
  '3+',
  [f('key', 'string', '0-3'), f('keyType', 'int8', '1+'), arr('coordinatorKeys', 'string', '4+')],
  [
    f('throttleTimeMs', 'int32', '1+'),
    f('errorCode', 'int16', '0-3'),
    f('errorMessage', 'string', '1-3', { nullable: '1-3', default: null }),
    f('nodeId', 'int32', '0-3'),
    f('host', 'string', '0-3'),
    f('port', 'int32', '0-3'),
    arr(
      'coordinators',
      [
        f('key', 'string', '4+'),
        f('nodeId', 'int32', '4+'),
        f('host', 'string', '4+'),
        f('port', 'int32', '4+'),
        f('errorCode', 'int16', '4+'),
        f('errorMessage', 'string', '4+', { nullable: '4+', default: null }),
      ],
      '4+',
    ),
  ],
);

/** DescribeGroups (key 15). v3 authorized operations, v4 static members, v5 flexible. */
export const DescribeGroups = api(
  15,
  'DescribeGroups',
  '0-5',
  '5+',
  [arr('groups', 'string'), f('includeAuthorizedOperations', 'bool', '3+')],
  [
    f('throttleTimeMs', 'int32', '1+'),
    arr('groups', [
      f('errorCode', 'int16'),
      f('groupId', 'string'),
      f('groupState', 'string'),
      f('protocolType', 'string'),
      f('protocolData', 'string'),
      arr('members', [
        f('memberId', 'string'),
        f('groupInstanceId', 'string', '4+', { nullable: '4+', default: null }),
        f('clientId', 'string'),
        f('clientHost', 'string'),
        f('memberMetadata', 'bytes'),
        f('memberAssignment', 'bytes'),
      ]),
      f('authorizedOperations', 'int32', '3+', { default: -2147483648 }),
    ]),
  ],
);

/** ListGroups (key 16). v3 flexible, v4 filters by state, v5 by group type. */
export const ListGroups = api(
  16,
  'ListGroups',
  '0-5',
  '3+',
  [arr('statesFilter', 'string', '4+'), arr('typesFilter', 'string', '5+')],
  [
    f('throttleTimeMs', 'int32', '1+'),
    f('errorCode', 'int16'),
    arr('groups', [f('groupId', 'string'), f('protocolType', 'string'), f('groupState', 'string', '4+'), f('groupType', 'string', '5+')]),
  ],
);

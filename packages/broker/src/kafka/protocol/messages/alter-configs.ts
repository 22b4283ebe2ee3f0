import { api, arr, f } from '../schema.js';

const response = [
  f('throttleTimeMs', 'int32'),
  arr('responses', [f('errorCode', 'int16'), f('errorMessage', 'string', '0+', { nullable: '0+', default: null }), f('resourceType', 'int8'), f('resourceName', 'string')]),
] as const;

/** AlterConfigs (key 33): a resource's whole set of configs (the ones not given go back to their defaults). v2 flexible. */
export const AlterConfigs = api(
  33,
  'AlterConfigs',
  '0-2',
  '2+',
  [
    arr('resources', [f('resourceType', 'int8'), f('resourceName', 'string'), arr('configs', [f('name', 'string'), f('value', 'string', '0+', { nullable: '0+' })])]),
    f('validateOnly', 'bool'),
  ],
  response,
);

/** IncrementalAlterConfigs (key 44): per config SET 0, DELETE 1, APPEND 2, SUBTRACT 3 (KIP-339). v1 flexible. */
export const IncrementalAlterConfigs = api(
  44,
  'IncrementalAlterConfigs',
  '0-1',
  '1+',
  [
    arr('resources', [
      f('resourceType', 'int8'),
      f('resourceName', 'string'),
      arr('configs', [f('name', 'string'), f('configOperation', 'int8'), f('value', 'string', '0+', { nullable: '0+' })]),
    ]),
    f('validateOnly', 'bool'),
  ],
  response,
);

import { api, arr, f } from '../schema.js';

/** CreateTopics (key 19). v1 validate-only, v5 flexible with the created topic's configs, v7 topic ids. */
export const CreateTopics = api(
  19,
  'CreateTopics',
  '0-7',
  '5+',
  [
    arr('topics', [
      f('name', 'string'),
      f('numPartitions', 'int32'),
      f('replicationFactor', 'int16'),
      arr('assignments', [f('partitionIndex', 'int32'), arr('brokerIds', 'int32')]),
      arr('configs', [f('name', 'string'), f('value', 'string', '0+', { nullable: '0+' })]),
    ]),
    f('timeoutMs', 'int32'),
    f('validateOnly', 'bool', '1+'),
  ],
  [
    f('throttleTimeMs', 'int32', '2+'),
    arr('topics', [
      f('name', 'string'),
      f('topicId', 'uuid', '7+'),
      f('errorCode', 'int16'),
      f('errorMessage', 'string', '1+', { nullable: '0+', default: null }),
      f('topicConfigErrorCode', 'int16', '5+', { tag: 0 }),
      f('numPartitions', 'int32', '5+', { default: -1 }),
      f('replicationFactor', 'int16', '5+', { default: -1 }),
      arr(
        'configs',
        [
          f('name', 'string', '5+'),
          f('value', 'string', '5+', { nullable: '5+' }),
          f('readOnly', 'bool', '5+'),
          f('configSource', 'int8', '5+', { default: -1 }),
          f('isSensitive', 'bool', '5+'),
        ],
        '5+',
        { nullable: '5+', default: null },
      ),
    ]),
  ],
);

/** DeleteTopics (key 20). v4 flexible, v5 error messages, v6 names or ids per topic. */
export const DeleteTopics = api(
  20,
  'DeleteTopics',
  '0-6',
  '4+',
  [
    arr('topics', [f('name', 'string', '6+', { nullable: '6+' }), f('topicId', 'uuid', '6+')], '6+'),
    arr('topicNames', 'string', '0-5'),
    f('timeoutMs', 'int32'),
  ],
  [
    f('throttleTimeMs', 'int32', '1+'),
    arr('responses', [
      f('name', 'string', '0+', { nullable: '6+' }),
      f('topicId', 'uuid', '6+'),
      f('errorCode', 'int16'),
      f('errorMessage', 'string', '5+', { nullable: '5+', default: null }),
    ]),
  ],
);

/** CreatePartitions (key 37). v2 flexible. */
export const CreatePartitions = api(
  37,
  'CreatePartitions',
  '0-3',
  '2+',
  [
    arr('topics', [f('name', 'string'), f('count', 'int32'), arr('assignments', [arr('brokerIds', 'int32')], '0+', { nullable: '0+', default: null })]),
    f('timeoutMs', 'int32'),
    f('validateOnly', 'bool'),
  ],
  [
    f('throttleTimeMs', 'int32'),
    arr('results', [f('name', 'string'), f('errorCode', 'int16'), f('errorMessage', 'string', '0+', { nullable: '0+', default: null })]),
  ],
);

/**
 * DeleteRecords (key 21). v2 flexible. Described, not served (docs/kafka.md, "Not supported yet"). `offset`
 * is any int64 (-1 the high watermark), as in every request: Kafka answers one out of reach for its
 * partition (OFFSET_OUT_OF_RANGE), it does not refuse the request.
 */
export const DeleteRecords = api(
  21,
  'DeleteRecords',
  '0-2',
  '2+',
  [arr('topics', [f('name', 'string'), arr('partitions', [f('partitionIndex', 'int32'), f('offset', 'bigint64')])]), f('timeoutMs', 'int32')],
  [
    f('throttleTimeMs', 'int32'),
    arr('topics', [f('name', 'string'), arr('partitions', [f('partitionIndex', 'int32'), f('lowWatermark', 'int64'), f('errorCode', 'int16')])]),
  ],
);

/** DescribeConfigs (key 32). v1 synonyms, v3 types and documentation, v4 flexible. */
export const DescribeConfigs = api(
  32,
  'DescribeConfigs',
  '0-4',
  '4+',
  [
    arr('resources', [f('resourceType', 'int8'), f('resourceName', 'string'), arr('configurationKeys', 'string', '0+', { nullable: '0+' })]),
    f('includeSynonyms', 'bool', '1+'),
    f('includeDocumentation', 'bool', '3+'),
  ],
  [
    f('throttleTimeMs', 'int32'),
    arr('results', [
      f('errorCode', 'int16'),
      f('errorMessage', 'string', '0+', { nullable: '0+', default: null }),
      f('resourceType', 'int8'),
      f('resourceName', 'string'),
      arr('configs', [
        f('name', 'string'),
        f('value', 'string', '0+', { nullable: '0+' }),
        f('readOnly', 'bool'),
        f('isDefault', 'bool', '0'),
        f('configSource', 'int8', '1+', { default: -1 }),
        f('isSensitive', 'bool'),
        arr('synonyms', [f('name', 'string', '1+'), f('value', 'string', '1+', { nullable: '1+' }), f('source', 'int8', '1+')], '1+'),
        f('configType', 'int8', '3+'),
        f('documentation', 'string', '3+', { nullable: '0+', default: null }),
      ]),
    ]),
  ],
);

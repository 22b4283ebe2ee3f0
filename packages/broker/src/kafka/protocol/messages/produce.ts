import { api, arr, f } from '../schema.js';

/** Produce (key 0). v3 is the first with RecordBatch v2 and the transactional id; v9 is flexible. */
export const Produce = api(
  0,
  'Produce',
  '0-9',
  '9+',
  [
    f('transactionalId', 'string', '3+', { nullable: '3+', default: null }),
    f('acks', 'int16'),
    f('timeoutMs', 'int32'),
    arr('topicData', [f('name', 'string'), arr('partitionData', [f('index', 'int32'), f('records', 'records', '0+', { nullable: '0+' })])]),
  ],
  [
    arr('responses', [
      f('name', 'string'),
      arr('partitionResponses', [
        f('index', 'int32'),
        f('errorCode', 'int16'),
        f('baseOffset', 'int64'),
        f('logAppendTimeMs', 'int64', '2+', { default: -1 }),
        f('logStartOffset', 'int64', '5+', { default: -1 }),
        arr('recordErrors', [f('batchIndex', 'int32', '8+'), f('batchIndexErrorMessage', 'string', '8+', { nullable: '8+', default: null })], '8+'),
        f('errorMessage', 'string', '8+', { nullable: '8+', default: null }),
      ]),
    ]),
    f('throttleTimeMs', 'int32', '1+'),
  ],
);

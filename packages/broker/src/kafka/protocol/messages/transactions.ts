import { api, arr, f } from '../schema.js';

/** InitProducerId (key 22). v2 flexible, v3 lets a producer resume its id and epoch. */
export const InitProducerId = api(
  22,
  'InitProducerId',
  '0-4',
  '2+',
  [
    f('transactionalId', 'string', '0+', { nullable: '0+', default: null }),
    f('transactionTimeoutMs', 'int32'),
    f('producerId', 'bigint64', '3+', { default: -1n }),
    f('producerEpoch', 'int16', '3+', { default: -1 }),
  ],
  [f('throttleTimeMs', 'int32'), f('errorCode', 'int16'), f('producerId', 'bigint64', '0+', { default: -1n }), f('producerEpoch', 'int16')],
);

/** AddPartitionsToTxn (key 24), the client forms v0-v3 (v3 flexible; v4+ is the broker-to-broker batch). */
export const AddPartitionsToTxn = api(
  24,
  'AddPartitionsToTxn',
  '0-3',
  '3+',
  [f('transactionalId', 'string'), f('producerId', 'bigint64'), f('producerEpoch', 'int16'), arr('topics', [f('name', 'string'), arr('partitions', 'int32')])],
  [f('throttleTimeMs', 'int32'), arr('results', [f('name', 'string'), arr('results', [f('partitionIndex', 'int32'), f('errorCode', 'int16')])])],
);

/** AddOffsetsToTxn (key 25). v3 flexible. */
export const AddOffsetsToTxn = api(
  25,
  'AddOffsetsToTxn',
  '0-3',
  '3+',
  [f('transactionalId', 'string'), f('producerId', 'bigint64'), f('producerEpoch', 'int16'), f('groupId', 'string')],
  [f('throttleTimeMs', 'int32'), f('errorCode', 'int16')],
);

/** EndTxn (key 26). v3 flexible. */
export const EndTxn = api(
  26,
  'EndTxn',
  '0-3',
  '3+',
  [f('transactionalId', 'string'), f('producerId', 'bigint64'), f('producerEpoch', 'int16'), f('committed', 'bool')],
  [f('throttleTimeMs', 'int32'), f('errorCode', 'int16')],
);

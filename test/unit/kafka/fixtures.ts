/** Shared test data for the Kafka codec tests. */
import { encodeRecordBatch } from 'tributary-protocol/record-batch/encode.js';

/** Two records at offsets 10 and 11, as a Fetch response carries them (RecordBatch v2). */
export const FETCH_RECORDS = encodeRecordBatch({
  baseOffset: 10,
  records: [
    { key: null, value: Buffer.from('a') },
    { key: Buffer.from('k'), value: Buffer.from('b'), headers: [{ key: 'h', value: Buffer.from('x') }] },
  ],
  now: 1_700_000_000_000,
});

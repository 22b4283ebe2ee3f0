/**
 * Splitting a buffer of concatenated batches, as a log segment or a Fetch response holds them. A batch cut
 * short at the end is reported, not thrown: recovery cuts a torn tail there, and a Fetch reply may end
 * with a partial batch by design.
 */
import { RecordBatchError, type RecordBatchErrorReason } from './errors.js';
import { BATCH_LENGTH, LOG_OVERHEAD, MAGIC, MAGIC_V2, MIN_BATCH_LENGTH, r32s } from './layout.js';
import { RecordBatchView, type ValidateOptions } from './view.js';

export interface BatchSplit {
  /** The whole, valid batches, in order. */
  batches: RecordBatchView[];
  /** End of the last valid batch: where a log would be cut. */
  validEnd: number;
  /**
   * Why the walk stopped before the end of the buffer, or null when every byte belongs to a valid batch.
   * 'truncated' is a torn tail (the last batch is incomplete); any other reason is corruption at `at`.
   */
  stop: { at: number; reason: RecordBatchErrorReason; error: RecordBatchError } | null;
}

/** Splits buf[start, end) into batches, validating each (CRC included unless opts.verifyCrc is false). */
export function splitRecordBatches(buf: Buffer, opts: ValidateOptions & { start?: number; end?: number } = {}): BatchSplit {
  const end = opts.end ?? buf.length;
  const region = end === buf.length ? buf : buf.subarray(0, end);
  const batches: RecordBatchView[] = [];
  let at = opts.start ?? 0;
  while (at < end) {
    const view = new RecordBatchView(region, at);
    let err: RecordBatchError | null;
    if (end - at < LOG_OVERHEAD) {
      err = new RecordBatchError('truncated', `${end - at} bytes, too few for a batch's length`, { at, need: LOG_OVERHEAD, have: end - at });
    } else {
      const batchLength = r32s(region, at + BATCH_LENGTH);
      // An old message set (magic 0 or 1, same place) is shorter than a v2 header: named for its magic. A
      // zero length (a preallocated region never written) stays bad_length.
      const magic = end - at > MAGIC ? region[at + MAGIC]! : MAGIC_V2;
      err =
        magic < MAGIC_V2 && batchLength > 0
          ? new RecordBatchError('bad_magic', `magic ${magic}, expected 2`, { at, magic })
          : batchLength < MIN_BATCH_LENGTH
            ? new RecordBatchError('bad_length', `batchLength ${batchLength} is below ${MIN_BATCH_LENGTH}`, { at, batchLength })
            : view.check(opts);
    }
    if (err !== null) return { batches, validEnd: at, stop: { at, reason: err.reason, error: err } };
    batches.push(view);
    at = view.end;
  }
  return { batches, validEnd: at, stop: null };
}

/**
 * Control records: the transaction markers (COMMIT, ABORT) a transaction coordinator writes into each data
 * partition, in a batch with the control and transactional bits set and exactly one record. Key: version
 * int16 (0), type int16 (0 ABORT, 1 COMMIT). Value of a marker: version int16 (0), coordinatorEpoch int32.
 */
import { encodeRecordBatch } from './encode.js';
import { RecordBatchError } from './errors.js';
import { r16s, r32s } from './layout.js';

export type ControlType = 'ABORT' | 'COMMIT';
const TYPE_IDS: Record<ControlType, number> = { ABORT: 0, COMMIT: 1 };

export interface ControlRecord {
  /** ABORT or COMMIT; UNKNOWN for the other control types (KRaft's), which consumers skip. */
  type: ControlType | 'UNKNOWN';
  /** The type as written. */
  typeId: number;
  /** The marker's coordinator epoch; -1 for an unknown type. */
  coordinatorEpoch: number;
}

export interface ControlBatchInput {
  type: ControlType;
  coordinatorEpoch: number;
  producerId: number;
  producerEpoch: number;
  baseOffset?: number;
  partitionLeaderEpoch?: number;
  /** Milliseconds since the epoch; Date.now() when absent. */
  timestamp?: number;
}

/** A transaction marker batch: one control record, transactional and control bits set, no sequence. */
export function encodeControlBatch(m: ControlBatchInput): Buffer {
  const key = Buffer.alloc(4);
  key.writeInt16BE(0, 0);
  key.writeInt16BE(TYPE_IDS[m.type], 2);
  const value = Buffer.alloc(6);
  value.writeInt16BE(0, 0);
  if (!Number.isInteger(m.coordinatorEpoch) || m.coordinatorEpoch < -0x80000000 || m.coordinatorEpoch > 0x7fffffff) {
    throw new RecordBatchError('invalid_input', `coordinatorEpoch must be an int32, got ${m.coordinatorEpoch}`, { field: 'coordinatorEpoch' });
  }
  value.writeInt32BE(m.coordinatorEpoch, 2);
  const timestamp = m.timestamp ?? Date.now();
  return encodeRecordBatch({
    records: [{ key, value, timestamp }],
    baseOffset: m.baseOffset,
    partitionLeaderEpoch: m.partitionLeaderEpoch,
    producerId: m.producerId,
    producerEpoch: m.producerEpoch,
    control: true,
  });
}

/** Reads a control record from its key and value (as a control batch's only record holds them). */
export function parseControlRecord(key: Uint8Array | null, value: Uint8Array | null): ControlRecord {
  if (key === null || key.length < 4) throw new RecordBatchError('bad_control_record', 'control record key shorter than 4 bytes');
  const version = r16s(key, 0);
  if (version < 0) throw new RecordBatchError('bad_control_record', `control record key version ${version}`);
  const typeId = r16s(key, 2);
  if (typeId !== 0 && typeId !== 1) return { type: 'UNKNOWN', typeId, coordinatorEpoch: -1 };
  if (value === null || value.length < 6) throw new RecordBatchError('bad_control_record', 'transaction marker value shorter than 6 bytes');
  return { type: typeId === 1 ? 'COMMIT' : 'ABORT', typeId, coordinatorEpoch: r32s(value, 2) };
}

/** What Partition's appends and reads take and return (partition.ts re-exports them). */
import type { LogRecord } from 'tributary-protocol/record.js';
import type { AppendOffsets } from './producer-state.js';

/** A transactional append: the records of one producer's open transaction on this partition. */
export interface TransactionalBatch {
  producerId: string;
  epoch: number;
  /** With sequences the append is also idempotent (as appendIdempotent): both or neither. */
  firstSequence?: number;
  lastSequence?: number;
}

export interface MarkerResult {
  /** Offset of the control record. */
  offset: number;
  timestamp: number;
  /** Whether the marker closed an open transaction (false: a retried or stray marker, written anyway). */
  closed: boolean;
}

export interface IdempotentBatch {
  producerId: string;
  epoch: number;
  firstSequence: number;
  lastSequence: number;
  /** A producer the partition has no state of may start at any sequence (the Kafka listener's, KIP-360). */
  anyFirstSequence?: boolean;
}

export interface IdempotentAppend extends AppendOffsets {
  duplicate: boolean;
}

export type Isolation = 'read_committed' | 'read_uncommitted';

export interface ReadResult {
  records: LogRecord[];
  /** Where the next read continues: past the returned records and any filtered ones. */
  nextOffset: number;
}

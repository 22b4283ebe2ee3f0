/** What Partition's appends and reads take and return (partition.ts re-exports them). */
import type { LogRecord } from 'tributary-protocol/record.js';
import type { WireReadRequest } from '../storage/tail-cache.js';
import type { AppendOffsets } from './producer-state.js';

/** A transactional append: the records of one producer's open transaction on this partition. */
export interface TransactionalBatch {
  producerId: string;
  epoch: number;
  /** With sequences the append is also idempotent (as appendIdempotent): both or neither. */
  firstSequence?: number;
  lastSequence?: number;
  /** With sequences: a producer the partition has no state of may start at any (as IdempotentBatch's). */
  anyFirstSequence?: boolean;
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

/** A read waiting for data (Partition.waitForData). */
export interface Waiter {
  offset: number;
  /** Waits on the LSO (read_committed) rather than the HWM. */
  committed: boolean;
  wake: () => void;
}

/** A wire read's limits (Partition.readWire, readWireFromDisk), as read()'s. */
export interface WireReadOptions {
  maxRecords: number;
  maxBytes: number;
  isolation: Isolation;
}

/** What a wire read writes its reply batch for. */
export type WireTarget = Pick<WireReadRequest, 'topic' | 'extensions' | 'alloc' | 'format' | 'views'>;

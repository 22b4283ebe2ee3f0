/**
 * A follower's producer state and transaction index follow the appends it stores from its leader: each
 * record is replayed as it would be from the log at open (ProducerStateReplay, TxnIndex.replay), from the
 * record objects or, for appends received as bytes (StoredAppends), from one reused view of each record.
 */
import type { LogRecord } from 'tributary-protocol/record.js';
import { StoredAppends, type StoredRecordView } from '../storage/stored-appends.js';
import { ProducerStateReplay, type ProducerStateTable } from './producer-state.js';
import type { TxnIndex } from './txn-index.js';

/** How many records a replica append holds. */
export function replicaCount(records: LogRecord[] | StoredAppends): number {
  return records instanceof StoredAppends ? records.count : records.length;
}

/** Replays the records of one replica append (whole leader appends: a batch never spans two calls). */
export function replayReplica(records: LogRecord[] | StoredAppends, producers: ProducerStateTable | null, txns: TxnIndex | null): void {
  const replay = producers ? new ProducerStateReplay(producers) : null;
  const each = (r: LogRecord | StoredRecordView) => {
    txns?.replay(r);
    replay?.record(r);
  };
  if (records instanceof StoredAppends) records.forEachRecord(each);
  else for (const r of records) each(r);
}

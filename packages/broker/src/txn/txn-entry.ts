import type { Clock, ClockTimer } from '../common/clock.js';
import { TributaryError } from 'tributary-protocol/errors.js';
import { MAX_PRODUCER_EPOCH } from 'tributary-protocol/record.js';
import type { TxnMetadata, TxnOffset, TxnState } from './txn-log.js';

/**
 * One transactional id as the transaction coordinator holds it in memory (its durable `TxnMetadata` plus
 * what only lives while the broker runs), and the checks and helpers on it that the coordinator
 * (txn-coordinator.ts) and the finisher (txn-finisher.ts) share. See docs/architecture.md,
 * "Transaction coordinator".
 */

/** The state names TXN_STATUS reports. */
export type TxnStatusState = 'empty' | 'open' | 'committing' | 'aborting' | 'committed' | 'aborted';

export const STATUS: Record<TxnState, TxnStatusState> = {
  empty: 'empty',
  open: 'open',
  prepare_commit: 'committing',
  prepare_abort: 'aborting',
  committed: 'committed',
  aborted: 'aborted',
};

export const RECOVERED = 'the transaction was open when its coordinator restarted or moved: it can only be aborted, and is';

export interface TxnPublishResult {
  partition: number;
  offset: number;
  /** A retried seqNum: nothing was appended. */
  duplicate: boolean;
}

/** Where a run of published records went: record i of the run to partitions[i] at offsets[i]. */
export interface PublishedRecords {
  partitions: number[];
  offsets: number[];
}

/** The seqNums `first`..`last` of the open transaction, published together (txn-publish.ts). */
export interface PublishedRun {
  first: number;
  last: number;
  /** Where the run went, known before its appends: a retry must name the same (docs/protocol.md, TXN_PUBLISH). */
  topic: string;
  partitions: number[];
  result: Promise<PublishedRecords>;
}

export interface Entry {
  meta: TxnMetadata;
  /** Open before the broker restarted: its sequence state is gone, so it can only be aborted. */
  recovered: boolean;
  /** Last seqNum accepted in the open transaction (0: none). */
  lastSeq: number;
  /** The open transaction's runs of seqNums in order (contiguous from 1), with their results, for retries. */
  runs: PublishedRun[];
  /** Set when a record of the open transaction failed: only an abort is allowed. */
  spoiled: string | undefined;
  /** The epoch whose transaction ended last: END_TXN retries of that epoch are answered again. */
  endedEpoch: number;
  /** Per data partition of the open transaction: its registration in the state log, durable when resolved. */
  adds: Map<string, Promise<void>>;
  /**
   * Appends of the open transaction not settled yet, from when they were admitted (their partition's
   * registration included): END_TXN commit waits for them before its decision, markers after any decision.
   */
  inflight: Set<Promise<unknown>>;
  /** END_TXN commit is waiting for `inflight` before it decides: no new append is admitted meanwhile. */
  committing: boolean;
  timer: ClockTimer | null;
  /** The running finish (markers and offsets) of a decided transaction. */
  finishing: Promise<void> | null;
  /** The decided transaction's next finish attempt after a failed one (txn-finisher.ts), if armed. */
  retry: ClockTimer | null;
  /** Failed finishes of the decided transaction in a row: the backoff of its next attempt. */
  finishFailures: number;
  /**
   * Its partition was given up (cluster mode): this entry is dead, even if the partition comes back (a
   * new entry is replayed then). Nothing may act on it: its markers would carry the coordinator's new epoch.
   */
  unloaded: boolean;
  /**
   * Cluster mode: the offset in `__transaction_state` of the decision replayed from past the HWM, until the
   * HWM passes it. Another change of leader may still lose it (the next coordinator would end the
   * transaction the other way), so no marker is written meanwhile (txn-finisher.ts, finishOnceReplicated).
   */
  unconfirmedAt: number | undefined;
}

/** The principal naming a transactional id (authentication on; undefined when off: nothing is checked). */
export interface TxnCaller {
  principal: string;
  admin: boolean;
}

/**
 * Refuses a principal other than the id's owner, as a missing permission is refused (docs/security.md,
 * "Transactional ids"): without it anyone with `transaction` could read, write into, end or fence another
 * principal's transaction. `admin` passes; an id with no owner yet (or unknown here) passes.
 */
export function checkCaller(e: Entry | undefined, command: string, caller: TxnCaller | undefined): void {
  const owner = e?.meta.owner;
  if (caller === undefined || caller.admin || owner === undefined || owner === caller.principal) return;
  throw new TributaryError('NOT_AUTHORIZED_FOR_OPERATION', {
    command,
    permission: 'transaction',
    principal: caller.principal,
    transactional_id: e!.meta.transactionalId,
    reason: 'the transactional id belongs to another principal',
  });
}

export function partKey(topic: string, partition: number): string {
  return `${topic}\u0000${partition}`;
}

export function newEntry(meta: TxnMetadata, recovered: boolean): Entry {
  return {
    meta,
    recovered,
    lastSeq: 0,
    runs: [],
    spoiled: undefined,
    endedEpoch: -1,
    adds: new Map(),
    inflight: new Set(),
    committing: false,
    timer: null,
    finishing: null,
    retry: null,
    finishFailures: 0,
    unloaded: false,
    unconfirmedAt: undefined,
  };
}

/**
 * INIT_PRODUCER_ID naming a producer id (KIP-360) that is not the transactional id's, current or previous:
 * its own code, Kafka's INVALID_PRODUCER_ID_MAPPING (kafka/protocol/error-codes.ts); the main port has no
 * such request.
 */
export function producerIdMappingError(id: string, producerId: string): TributaryError {
  return new TributaryError('invalid_producer_id_mapping', { transactional_id: id, producer_id: producerId, reason: "not the transactional id's producer id" });
}

/** Where a transactional id's producer ids come from (ProducerIdAllocator). */
export interface ProducerIds {
  allocate(): Promise<string>;
}

/**
 * The next epoch; at the end of the range, a new producer id starts over at 0. The previous pair of a
 * KIP-360 INIT_PRODUCER_ID is forgotten: it was the previous of the epoch this one replaces.
 */
export async function bumpEpoch(m: TxnMetadata, ids: ProducerIds): Promise<void> {
  delete m.lastProducerId;
  delete m.lastEpoch;
  if (m.epoch >= MAX_PRODUCER_EPOCH) {
    m.producerId = await ids.allocate();
    m.epoch = 0;
  } else {
    m.epoch++;
  }
}

export function txnState(id: string, state: TxnState, reason: string): TributaryError {
  return new TributaryError('invalid_txn_state', { transactional_id: id, state: STATUS[state], reason });
}

export function groupOffsets(offsets: TxnOffset[]): Map<{ group: string; topic: string }, TxnOffset[]> {
  const byKey = new Map<string, { k: { group: string; topic: string }; list: TxnOffset[] }>();
  for (const o of offsets) {
    const key = `${o.group}\u0000${o.topic}`;
    let v = byKey.get(key);
    if (!v) byKey.set(key, (v = { k: { group: o.group, topic: o.topic }, list: [] }));
    v.list.push(o);
  }
  return new Map([...byKey.values()].map((v) => [v.k, v.list]));
}

export function checkProducer(e: Entry, producerId: string, epoch: number): void {
  const m = e.meta;
  if (producerId === m.producerId && epoch === m.epoch) return;
  if (producerId === m.producerId && epoch < m.epoch) {
    throw new TributaryError('producer_fenced', { transactional_id: m.transactionalId, epoch, current_epoch: m.epoch, ...(m.abortReason ? { reason: m.abortReason } : {}) });
  }
  throw new TributaryError('invalid_producer_epoch', { transactional_id: m.transactionalId, producer_id: producerId, epoch });
}

/**
 * The producer's transaction is open. `admitted`: an append already in Entry.inflight checking again, which
 * END_TXN commit waits for; a new one is refused while it waits (docs/architecture.md, "Transaction coordinator").
 */
export function checkOpen(e: Entry, producerId: string, epoch: number, admitted = false): void {
  checkProducer(e, producerId, epoch);
  const m = e.meta;
  if (m.state !== 'open') throw txnState(m.transactionalId, m.state, 'no transaction is open (BEGIN_TXN first)');
  if (e.recovered) throw txnState(m.transactionalId, m.state, RECOVERED);
  if (e.committing && !admitted) {
    throw new TributaryError('invalid_txn_state', { transactional_id: m.transactionalId, state: 'committing', reason: 'the transaction is being committed (END_TXN)' });
  }
}

/** Cancels the entry's timers, if armed: its transaction timeout and its decided transaction's next finish attempt. */
export function clearTimer(clock: Clock, e: Entry): void {
  if (e.timer) clock.clearTimeout(e.timer);
  e.timer = null;
  clearRetry(clock, e);
}

/** Cancels the decided transaction's next finish attempt, if armed. */
export function clearRetry(clock: Clock, e: Entry): void {
  if (e.retry) clock.clearTimeout(e.retry);
  e.retry = null;
}

/**
 * END_TXN commit's check of the offsets the transaction staged, with the rules in force when the commit is
 * decided (docs/security.md, "Group ACLs"): throws the refusal, and the transaction stays open (only an
 * abort, or the rules given back, ends it). Run just before the decision, so a SIGHUP that withdrew a group
 * after SEND_OFFSETS_TO_TXN never has its offsets committed, nor the records without them.
 */
export type CommitCheck = (offsets: readonly TxnOffset[]) => void;

/** A CommitCheck of `refusal` (SEND_OFFSETS_TO_TXN's authorization now), once per group and topic the offsets name. */
export function commitCheck(refusal: (group: string, topic: string) => Error | undefined): CommitCheck {
  return (offsets) => {
    const seen = new Set<string>();
    for (const o of offsets) {
      const key = `${o.group}\0${o.topic}`;
      if (seen.has(key)) continue;
      seen.add(key);
      const refused = refusal(o.group, o.topic);
      if (refused) throw refused;
    }
  };
}

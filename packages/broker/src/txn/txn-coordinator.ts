import { randomBytes } from 'node:crypto';
import client from 'prom-client';
import { failpoint } from '../common/failpoints.js';
import type { Logger } from '../common/logger.js';
import type { TopicManager } from '../partition/topic-manager.js';
import { type Clock, type ClockTimer, systemClock } from '../common/clock.js';
import { KeyedLock } from '../common/keyed-lock.js';
import { PartitionOwnership } from '../common/partition-ownership.js';
import type { OffsetEntry } from '../coordinator/offset-store.js';
import { TributaryError, invalidParam } from 'tributary-protocol/errors.js';
import type { RecordInput } from 'tributary-protocol/record.js';
import type { TxnLog, TxnMetadata, TxnOffset, TxnState } from './txn-log.js';
import type { TxnTargets } from './txn-targets.js';

export interface TxnCoordinatorConfig {
  /** Used when INIT_PRODUCER_ID names no timeout. */
  defaultTimeoutMs: number;
  maxTimeoutMs: number;
}

/** The state names TXN_STATUS reports. */
export type TxnStatusState = 'empty' | 'open' | 'committing' | 'aborting' | 'committed' | 'aborted';

const STATUS: Record<TxnState, TxnStatusState> = {
  empty: 'empty',
  open: 'open',
  prepare_commit: 'committing',
  prepare_abort: 'aborting',
  committed: 'committed',
  aborted: 'aborted',
};

const MAX_EPOCH = 2 ** 31 - 1;
const RECOVERED = 'the transaction was open when its coordinator restarted or moved: it can only be aborted, and is';
/** After a failed finish (storage error), how long until it is tried again. */
const FINISH_RETRY_MS = 1000;

export interface TxnPublishResult {
  partition: number;
  offset: number;
  /** A retried seqNum: nothing was appended. */
  duplicate: boolean;
}

interface Entry {
  meta: TxnMetadata;
  /** Open before the broker restarted: its sequence state is gone, so it can only be aborted. */
  recovered: boolean;
  /** Last seqNum accepted in the open transaction (0: none). */
  lastSeq: number;
  /** Results per seqNum of the open transaction, for retries. */
  results: Map<number, Promise<TxnPublishResult>>;
  /** Set when a record of the open transaction failed: only an abort is allowed. */
  spoiled: string | undefined;
  /** The epoch whose transaction ended last: END_TXN retries of that epoch are answered again. */
  endedEpoch: number;
  /** Per data partition of the open transaction: its registration in the state log, durable when resolved. */
  adds: Map<string, Promise<void>>;
  /** Appends of the open transaction not settled yet: markers wait for them. */
  inflight: Set<Promise<unknown>>;
  timer: ClockTimer | null;
  /** The running finish (markers and offsets) of a decided transaction. */
  finishing: Promise<void> | null;
  /**
   * Its partition was given up (cluster mode): this entry is dead, even if the partition comes back (a
   * new entry is replayed then). Nothing may act on it: its markers would carry the coordinator's new epoch.
   */
  unloaded: boolean;
}

function partKey(topic: string, partition: number): string {
  return `${topic}\u0000${partition}`;
}

/**
 * The transaction coordinator: producer ids and epochs per transactional id, the state machine
 * empty → open → prepare_commit|prepare_abort → committed|aborted, and the two-phase end of a
 * transaction: the decision is made durable in `__transaction_state` first, then offsets are applied and
 * markers written, then the end is recorded. A crash after the decision is finished by start() before the
 * broker serves. Requests of one transactional id run under its lock, except TXN_PUBLISH, which must
 * pipeline: it checks the state before and after registering its partition, and END_TXN waits for the
 * appends already started.
 */
export class TransactionCoordinator {
  private readonly txns = new Map<string, Entry>();
  private readonly locks = new KeyedLock();
  private stopped = false;
  private ownership: PartitionOwnership | null = null;
  private readonly ended: client.Counter;
  /** Every time the coordinator reads and every timer it arms. */
  private readonly clock: Clock;

  constructor(
    private readonly deps: {
      topics: TopicManager;
      log: TxnLog;
      targets: TxnTargets;
      config: TxnCoordinatorConfig;
      logger: Logger;
      registry: client.Registry;
      /** Defaults to the real clock; tests pass a fake one. */
      clock?: Clock;
    },
  ) {
    this.clock = deps.clock ?? systemClock;
    this.ended = new client.Counter({
      name: 'tributary_transactions_total',
      help: 'Transactions ended, by result and cause (client, timeout, fenced, recovered)',
      labelNames: ['result', 'cause'],
      registers: [deps.registry],
    });
    const self = this;
    new client.Gauge({
      name: 'tributary_transactions_open',
      help: 'Transactions open or being ended',
      registers: [deps.registry],
      collect() {
        let n = 0;
        for (const e of self.txns.values()) if (e.meta.state === 'open' || e.meta.state.startsWith('prepare_')) n++;
        this.set(n);
      },
    });
  }

  partitionFor(transactionalId: string): number {
    return this.deps.log.partitionFor(transactionalId);
  }

  // ---- lifecycle ----

  /**
   * Replays `__transaction_state`. Decided transactions are finished before this resolves (so the broker
   * serves only once they are); open ones get their pending offsets back and their timeout rescheduled.
   */
  async start(): Promise<void> {
    let finished = 0;
    for (let p = 0; p < this.deps.log.partitionCount; p++) finished += await this.loadEntries(p, { retry: false });
    this.deps.logger.info({ transactionalIds: this.txns.size, finished }, 'transaction coordinator loaded');
  }

  /** One partition of the state log; resolves once its decided transactions are finished. */
  private async loadEntries(partition: number, opts: { retry: boolean }): Promise<number> {
    const finishing: Promise<void>[] = [];
    const recovered: Entry[] = [];
    for (const meta of (await this.deps.log.replay(partition)).values()) {
      const e = newEntry(meta, meta.state === 'open');
      this.txns.set(meta.transactionalId, e);
      if (meta.state === 'committed' || meta.state === 'aborted') e.endedEpoch = meta.epoch;
      if (meta.state === 'open') {
        for (const tp of meta.partitions) e.adds.set(partKey(tp.topic, tp.partition), Promise.resolve());
        for (const [k, list] of groupOffsets(meta.offsets)) await this.deps.targets.restorePending(meta.transactionalId, k.group, k.topic, list.map((o) => o.partition));
        recovered.push(e);
      } else if (meta.state === 'prepare_commit' || meta.state === 'prepare_abort') {
        finishing.push(this.finish(e, opts));
      }
    }
    await Promise.all(finishing);
    for (const e of recovered) this.abortRecovered(e);
    return finishing.length;
  }

  /**
   * A transaction open when its coordinator restarted or moved can only be aborted (its appends in
   * flight are lost with the old coordinator): abort it now rather than when its producer comes back or
   * its timeout fires, so read_committed readers of its partitions are not held behind it meanwhile.
   * The epoch stays: the producer's END_TXN abort is answered `aborted`, its commit and further sends
   * get invalid_txn_state, as before (docs/architecture.md, "Transaction coordinator").
   */
  private abortRecovered(e: Entry): void {
    const m = e.meta;
    const started = m.startedMs;
    void this.withTxn(m.transactionalId, async () => {
      if (m.state === 'open' && e.recovered && m.startedMs === started) await this.end(e, 'abort', 'recovered');
    }).catch((err: unknown) => {
      this.deps.logger.warn({ err, transactionalId: m.transactionalId }, 'aborting a recovered transaction failed; its timeout will');
      if (m.state === 'open') this.scheduleTimeout(e);
    });
  }

  // ---- cluster mode: coordinating the __transaction_state partitions this broker leads ----

  enableOwnership(notCoordinator: (partition: number) => TributaryError, topicExists: () => boolean, leaseHeld?: () => boolean): void {
    this.ownership = new PartitionOwnership('__transaction_state', notCoordinator, topicExists, leaseHeld);
  }

  private checkOwner(id: string): void {
    this.ownership?.check(() => this.partitionFor(id));
  }

  /**
   * This broker became leader of a `__transaction_state` partition: replay it and finish its decided
   * transactions before serving its ids (the same as a restart does).
   */
  async loadPartition(partition: number): Promise<void> {
    await this.ownership?.load(partition, async () => {
      const finished = await this.loadEntries(partition, { retry: true });
      this.deps.logger.info({ partition, finished }, 'took over transaction coordinator partition');
    });
  }

  unloadPartition(partition: number): void {
    if (!this.ownership) return;
    this.ownership.unload(partition);
    for (const [id, e] of [...this.txns]) {
      if (this.partitionFor(id) !== partition) continue;
      this.clearTimer(e);
      e.unloaded = true;
      this.txns.delete(id);
    }
  }

  async stop(): Promise<void> {
    this.stopped = true;
    for (const e of this.txns.values()) this.clearTimer(e);
    await this.locks.idle();
  }

  // ---- requests ----

  /**
   * INIT_PRODUCER_ID: a new id gets a producer id at epoch 0; a known one gets its epoch bumped, which
   * fences every older producer of the id; an open transaction of the old epoch is aborted first.
   */
  initProducerId(id: string, timeoutMs?: number): Promise<{ producerId: string; epoch: number }> {
    this.checkOwner(id);
    const timeout = timeoutMs ?? this.deps.config.defaultTimeoutMs;
    if (timeout > this.deps.config.maxTimeoutMs) throw invalidParam('transaction_timeout_ms', `at most ${this.deps.config.maxTimeoutMs}`);
    return this.withTxn(id, async () => {
      const now = this.clock.now();
      let e = this.txns.get(id);
      if (!e) {
        const meta: TxnMetadata = {
          transactionalId: id,
          producerId: newProducerId(),
          epoch: 0,
          state: 'empty',
          timeoutMs: timeout,
          startedMs: 0,
          partitions: [],
          offsets: [],
          updatedMs: now,
        };
        e = newEntry(meta, false);
        await this.deps.log.write(meta);
        this.txns.set(id, e);
        return { producerId: meta.producerId, epoch: meta.epoch };
      }
      const m = e.meta;
      if (m.state === 'prepare_commit' || m.state === 'prepare_abort') await this.awaitFinish(e);
      if (m.state === 'open') {
        // The abort's markers carry the new epoch, which fences the old one on every partition it wrote.
        await this.end(e, 'abort', 'fenced');
        // That abort was the old producer's: the new one has no transaction to end yet.
        e.endedEpoch = -1;
      } else {
        this.bump(e);
      }
      m.timeoutMs = timeout;
      m.updatedMs = now;
      await this.deps.log.write(m);
      return { producerId: m.producerId, epoch: m.epoch };
    });
  }

  /** BEGIN_TXN; a retry while the transaction is open answers again. */
  begin(id: string, producerId: string, epoch: number): Promise<void> {
    this.checkOwner(id);
    return this.withTxn(id, async () => {
      const e = this.entry(id);
      this.checkProducer(e, producerId, epoch);
      const m = e.meta;
      if (m.state === 'open') {
        if (e.recovered) throw txnState(id, m.state, RECOVERED);
        return;
      }
      if (m.state === 'prepare_commit' || m.state === 'prepare_abort') await this.awaitFinish(e);
      const before = { ...m };
      m.state = 'open';
      m.startedMs = this.clock.now();
      m.updatedMs = m.startedMs;
      m.partitions = [];
      m.offsets = [];
      m.abortReason = undefined;
      e.adds.clear();
      e.results.clear();
      e.lastSeq = 0;
      e.spoiled = undefined;
      e.recovered = false;
      try {
        await this.deps.log.write(m);
      } catch (err) {
        Object.assign(m, before);
        throw err;
      }
      this.scheduleTimeout(e);
    });
  }

  /**
   * TXN_PUBLISH: one record of the open transaction. `seqNum` counts the transaction's records from 1: the
   * next one is appended, an earlier one (a retry) is answered with its original result, anything else is
   * out_of_order_sequence. The record's partition is registered in the state log before the record
   * reaches it, so an abort after a crash knows every partition to mark. A failed append spoils the
   * transaction: it can then only be aborted.
   */
  publish(id: string, producerId: string, epoch: number, topicName: string, explicit: number | undefined, record: RecordInput, seqNum: number): Promise<TxnPublishResult> {
    this.checkOwner(id);
    const e = this.entry(id);
    this.checkOpen(e, producerId, epoch);
    const prior = e.results.get(seqNum);
    if (prior) return prior.then((r) => ({ ...r, duplicate: true }));
    if (seqNum !== e.lastSeq + 1) {
      throw new TributaryError('out_of_order_sequence', { transactional_id: id, sequence: seqNum, expected: e.lastSeq + 1 });
    }
    if (e.spoiled) throw txnState(id, e.meta.state, e.spoiled);
    const topic = this.deps.topics.get(topicName);
    const partition = topic.choosePartition(explicit, record.key);
    topic.partition(partition);
    e.lastSeq = seqNum;
    const result = this.append(e, topicName, partition, record, producerId, epoch).catch((err: unknown) => {
      const reason = `record ${seqNum} of the transaction failed (${err instanceof TributaryError ? err.code : 'error'}); abort it`;
      e.spoiled ??= reason;
      // The append may have landed, so it is never tried again: a retriable error would only have the
      // producer retry this seqNum (answered from this same result) until the transaction times out.
      if (err instanceof TributaryError && !err.retriable) throw err;
      throw txnState(id, e.meta.state, reason);
    });
    e.results.set(seqNum, result);
    result.catch(() => {});
    return result;
  }

  private async append(e: Entry, topicName: string, partition: number, record: RecordInput, producerId: string, epoch: number): Promise<TxnPublishResult> {
    const k = partKey(topicName, partition);
    let add = e.adds.get(k);
    if (!add) {
      e.meta.partitions.push({ topic: topicName, partition });
      e.meta.updatedMs = this.clock.now();
      add = this.deps.log.write(e.meta);
      e.adds.set(k, add);
    }
    // Publishes to one partition wait on the same promise, so they append in arrival order.
    await add;
    // END_TXN, a timeout or a new epoch may have come in meanwhile.
    this.checkOpen(e, producerId, epoch);
    const appended = this.deps.targets.append(topicName, partition, record, producerId, epoch, this.partitionFor(e.meta.transactionalId));
    e.inflight.add(appended);
    try {
      const res = await appended;
      return { partition, offset: res.offset, duplicate: false };
    } finally {
      e.inflight.delete(appended);
    }
  }

  /** SEND_OFFSETS_TO_TXN: fenced as a commit is, then held until the transaction ends. */
  sendOffsets(
    id: string,
    producerId: string,
    epoch: number,
    req: { group: string; topic: string; member: string; generation: number; entries: OffsetEntry[] },
  ): Promise<number> {
    this.checkOwner(id);
    return this.withTxn(id, async () => {
      const e = this.entry(id);
      this.checkOpen(e, producerId, epoch);
      await this.deps.targets.stageOffsets(id, req);
      const m = e.meta;
      for (const o of req.entries) {
        const i = m.offsets.findIndex((x) => x.group === req.group && x.topic === req.topic && x.partition === o.partition);
        const entry: TxnOffset = { group: req.group, topic: req.topic, partition: o.partition, offset: o.offset };
        if (i >= 0) m.offsets[i] = entry;
        else m.offsets.push(entry);
      }
      m.updatedMs = this.clock.now();
      await this.deps.log.write(m);
      return req.entries.length;
    });
  }

  /**
   * END_TXN. Retrying the result the transaction already has answers it again; the other result, or no
   * transaction, is invalid_txn_state.
   */
  endTxn(id: string, producerId: string, epoch: number, result: 'commit' | 'abort'): Promise<'committed' | 'aborted'> {
    this.checkOwner(id);
    const want = result === 'commit' ? 'committed' : 'aborted';
    return this.withTxn(id, async () => {
      const e = this.entry(id);
      this.checkProducer(e, producerId, epoch);
      const m = e.meta;
      if (m.state === 'open') {
        if (result === 'commit' && (e.recovered || e.spoiled)) throw txnState(id, m.state, e.spoiled ?? RECOVERED);
        await this.end(e, result, 'client');
        return want;
      }
      if (m.state === 'prepare_commit' || m.state === 'prepare_abort') {
        const deciding = m.state === 'prepare_commit' ? 'committed' : 'aborted';
        if (deciding !== want) throw txnState(id, m.state, `the transaction is already ${deciding === 'committed' ? 'committing' : 'aborting'}`);
        await this.awaitFinish(e);
        return want;
      }
      if ((m.state === 'committed' || m.state === 'aborted') && e.endedEpoch === m.epoch) {
        if (m.state !== want) throw txnState(id, m.state, `the transaction was ${m.state}`);
        return want;
      }
      throw txnState(id, m.state, 'no transaction is open');
    });
  }

  status(id: string): {
    state: TxnStatusState;
    producerId: string;
    epoch: number;
    partitions: number;
    offsets: number;
    timeoutMs: number;
    abortReason?: string;
  } {
    this.checkOwner(id);
    const e = this.entry(id);
    const m = e.meta;
    return {
      state: STATUS[m.state],
      producerId: m.producerId,
      epoch: m.epoch,
      partitions: m.partitions.length,
      offsets: m.offsets.length,
      timeoutMs: m.timeoutMs,
      ...(m.abortReason ? { abortReason: m.abortReason } : {}),
    };
  }

  /** The transactional ids known, for inspection. */
  list(): string[] {
    return [...this.txns.keys()].sort();
  }

  // ---- ending ----

  /**
   * Decides the open transaction (durably), then finishes it. `fenced`/`timeout` aborts bump the epoch
   * first, so the markers fence the old producer on every partition.
   */
  private async end(e: Entry, result: 'commit' | 'abort', cause: 'client' | 'timeout' | 'fenced' | 'recovered'): Promise<void> {
    const m = e.meta;
    this.clearTimer(e);
    if (cause === 'recovered') {
      m.abortReason = RECOVERED;
    } else if (cause !== 'client') {
      this.bump(e);
      m.abortReason = cause === 'timeout' ? `timed out after ${m.timeoutMs} ms` : 'fenced by a newer producer';
    }
    m.state = result === 'commit' ? 'prepare_commit' : 'prepare_abort';
    m.updatedMs = this.clock.now();
    await this.deps.log.write(m);
    failpoint('txn.after_decision');
    await Promise.allSettled([...e.inflight]);
    this.ended.inc({ result, cause });
    await this.finish(e, { retry: true });
  }

  private awaitFinish(e: Entry): Promise<void> {
    return e.finishing ?? this.finish(e, { retry: true });
  }

  /**
   * Carries out a decided transaction: offsets first on commit (so a member that takes a partition over
   * never starts below them), then a marker on every partition, then the end in the state log. Every
   * step may run again after a crash: offsets never move back, and a marker without an open transaction
   * changes nothing.
   */
  private finish(e: Entry, opts: { retry: boolean }): Promise<void> {
    if (e.finishing) return e.finishing;
    const m = e.meta;
    if (m.state !== 'prepare_commit' && m.state !== 'prepare_abort') return Promise.resolve();
    const commit = m.state === 'prepare_commit';
    // What this finish is for: a retry of it finishes that transaction or nothing.
    const decided = { producerId: m.producerId, epoch: m.epoch, state: m.state };
    const live = () => {
      if (e.unloaded) throw new TributaryError('NOT_COORDINATOR', { reason: 'this broker gave the transaction up', transactional_id: m.transactionalId });
    };
    const run = async () => {
      for (const [k, list] of groupOffsets(m.offsets)) {
        const parts = list.map((o) => o.partition);
        live();
        if (commit) await this.deps.targets.applyOffsets(m.transactionalId, k.group, k.topic, list.map((o) => ({ partition: o.partition, offset: o.offset })));
        else await this.deps.targets.clearOffsets(m.transactionalId, k.group, k.topic, parts);
      }
      failpoint('txn.after_offsets');
      live();
      await Promise.all(m.partitions.map((tp) => this.deps.targets.marker(tp.topic, tp.partition, m.producerId, m.epoch, commit ? 'commit' : 'abort', this.partitionFor(m.transactionalId))));
      failpoint('txn.after_markers');
      live();
      // Recorded as ended only once the log has it: until then the transaction stays decided, so no new
      // one can begin while its markers may still be written again.
      const ended: TxnMetadata = { ...m, state: commit ? 'committed' : 'aborted', partitions: [], offsets: [], startedMs: 0, updatedMs: this.clock.now() };
      await this.deps.log.write(ended);
      live();
      Object.assign(m, ended);
      e.endedEpoch = m.epoch;
      e.adds.clear();
    };
    const p = run().finally(() => {
      if (e.finishing === p) e.finishing = null;
    });
    e.finishing = p;
    p.catch((err: unknown) => {
      this.deps.logger.error({ err, transactionalId: m.transactionalId }, 'finishing a transaction failed');
      if (opts.retry && !this.stopped) this.clock.setTimeout(() => void this.retryFinish(e, decided).catch(() => {}), FINISH_RETRY_MS).unref();
    });
    return p;
  }

  /**
   * Finishes again the decided transaction whose finish failed, unless something else finished it first
   * (a retried END_TXN, a reload of its partition) or its partition is no longer this broker's: the entry
   * may hold the producer's next transaction by now, which this must not end.
   */
  private retryFinish(e: Entry, decided: { producerId: string; epoch: number; state: TxnState }): Promise<void> {
    const m = e.meta;
    return this.withTxn(m.transactionalId, async () => {
      if (e.unloaded || this.txns.get(m.transactionalId) !== e) return;
      if (m.producerId !== decided.producerId || m.epoch !== decided.epoch || m.state !== decided.state) return;
      await this.awaitFinish(e);
    });
  }

  // ---- helpers ----

  private bump(e: Entry): void {
    bumpEpoch(e.meta);
  }

  private withTxn<T>(id: string, fn: () => Promise<T>): Promise<T> {
    return this.locks.run(id, () => {
      if (this.stopped) throw new TributaryError('shutting_down');
      return fn();
    });
  }

  private entry(id: string): Entry {
    const e = this.txns.get(id);
    if (!e) throw new TributaryError('transactional_id_not_found', { transactional_id: id });
    return e;
  }

  private checkProducer(e: Entry, producerId: string, epoch: number): void {
    const m = e.meta;
    if (producerId === m.producerId && epoch === m.epoch) return;
    if (producerId === m.producerId && epoch < m.epoch) {
      throw new TributaryError('producer_fenced', { transactional_id: m.transactionalId, epoch, current_epoch: m.epoch, ...(m.abortReason ? { reason: m.abortReason } : {}) });
    }
    throw new TributaryError('invalid_producer_epoch', { transactional_id: m.transactionalId, producer_id: producerId, epoch });
  }

  private checkOpen(e: Entry, producerId: string, epoch: number): void {
    this.checkProducer(e, producerId, epoch);
    if (e.meta.state !== 'open') throw txnState(e.meta.transactionalId, e.meta.state, 'no transaction is open (BEGIN_TXN first)');
    if (e.recovered) throw txnState(e.meta.transactionalId, e.meta.state, RECOVERED);
  }

  private scheduleTimeout(e: Entry): void {
    this.clearTimer(e);
    const m = e.meta;
    const started = m.startedMs;
    const fire = () => {
      // Just resumed from a pause, the lease unconfirmed: the id may be another coordinator's by now.
      if (this.ownership && !this.ownership.canAct()) {
        e.timer = this.clock.setTimeout(fire, 500);
        e.timer.unref();
        return;
      }
      void this.withTxn(m.transactionalId, async () => {
        if (m.state === 'open' && m.startedMs === started) {
          this.deps.logger.warn({ transactionalId: m.transactionalId, timeoutMs: m.timeoutMs }, 'transaction timed out; aborting it');
          await this.end(e, 'abort', 'timeout');
        }
      }).catch((err: unknown) => this.deps.logger.error({ err, transactionalId: m.transactionalId }, 'aborting a timed-out transaction failed'));
    };
    e.timer = this.clock.setTimeout(fire, Math.max(0, started + m.timeoutMs - this.clock.now()));
    e.timer.unref();
  }

  private clearTimer(e: Entry): void {
    if (e.timer) this.clock.clearTimeout(e.timer);
    e.timer = null;
  }
}

function newEntry(meta: TxnMetadata, recovered: boolean): Entry {
  return {
    meta,
    recovered,
    lastSeq: 0,
    results: new Map(),
    spoiled: undefined,
    endedEpoch: -1,
    adds: new Map(),
    inflight: new Set(),
    timer: null,
    finishing: null,
    unloaded: false,
  };
}

function newProducerId(): string {
  return `txn-${randomBytes(8).toString('hex')}`;
}

/** The next epoch; at the end of the range, a new producer id starts over at 0. */
function bumpEpoch(m: TxnMetadata): void {
  if (m.epoch >= MAX_EPOCH) {
    m.producerId = newProducerId();
    m.epoch = 0;
  } else {
    m.epoch++;
  }
}

function txnState(id: string, state: TxnState, reason: string): TributaryError {
  return new TributaryError('invalid_txn_state', { transactional_id: id, state: STATUS[state], reason });
}

function groupOffsets(offsets: TxnOffset[]): Map<{ group: string; topic: string }, TxnOffset[]> {
  const byKey = new Map<string, { k: { group: string; topic: string }; list: TxnOffset[] }>();
  for (const o of offsets) {
    const key = `${o.group}\u0000${o.topic}`;
    let v = byKey.get(key);
    if (!v) byKey.set(key, (v = { k: { group: o.group, topic: o.topic }, list: [] }));
    v.list.push(o);
  }
  return new Map([...byKey.values()].map((v) => [v.k, v.list]));
}

import client from 'prom-client';
import type { Logger } from '../common/logger.js';
import type { TopicManager } from '../partition/topic-manager.js';
import { type Clock, type ClockTimer, systemClock } from '../common/clock.js';
import { KeyedLock } from '../common/keyed-lock.js';
import { PartitionOwnership } from '../common/partition-ownership.js';
import { TributaryError, invalidParam } from 'tributary-protocol/errors.js';
import type { RecordInput } from 'tributary-protocol/record.js';
import type { TxnLog, TxnMetadata, TxnOffset } from './txn-log.js';
import type { StageRequest, TxnTargets } from './txn-targets.js';
import {
  type CommitCheck,
  type Entry,
  RECOVERED,
  STATUS,
  type TxnCaller,
  type TxnPublishResult,
  type TxnStatusState,
  bumpEpoch,
  checkCaller,
  checkOpen,
  checkProducer,
  clearTimer,
  groupOffsets,
  newEntry,
  type ProducerIds,
  partKey,
  producerIdMappingError,
  txnState,
} from './txn-entry.js';
import { TxnFinisher } from './txn-finisher.js';
import { ConcurrentTransactionsError, KafkaTransactions } from './txn-kafka.js';
import { TxnPublisher } from './txn-publish.js';

export type { CommitCheck, TxnCaller, TxnPublishResult, TxnStatusState } from './txn-entry.js';
export { commitCheck } from './txn-entry.js';

export interface TxnCoordinatorConfig {
  /** Used when INIT_PRODUCER_ID names no timeout. */
  defaultTimeoutMs: number;
  maxTimeoutMs: number;
  /** An id with no transaction open and no change for this long is forgotten (default 7 days). */
  idExpirationMs?: number;
}

const DEFAULT_ID_EXPIRATION_MS = 7 * 24 * 60 * 60 * 1000;
/** How often idle ids are looked for, at most (a shorter expiration looks more often). */
const EXPIRY_SWEEP_MS = 60_000;

/** Whether an id may be forgotten: nothing open or being decided, nothing in flight, idle long enough. */
function expired(e: Entry, now: number, expirationMs: number): boolean {
  const s = e.meta.state;
  return (s === 'empty' || s === 'committed' || s === 'aborted') && e.inflight.size === 0 && now - e.meta.updatedMs >= expirationMs;
}

/**
 * The transaction coordinator: producer ids and epochs per transactional id, the state machine
 * empty → open → prepare_commit|prepare_abort → committed|aborted, and the two-phase end of a
 * transaction: the decision is made durable in `__transaction_state` first, then offsets are applied and
 * markers written, then the end is recorded. A crash after the decision is finished by start() before the
 * broker serves, or, when its markers cannot be written yet, retried in the background while only its id
 * waits. Requests of one transactional id run under its lock, except TXN_PUBLISH, which must
 * pipeline: it checks the state before and after registering its partition, and END_TXN waits for the
 * appends already started.
 *
 * The parts: the entries and their checks (txn-entry.ts), TXN_PUBLISH (txn-publish.ts), and the end and
 * finish of transactions (on request, timeout or recovery) with their retries (txn-finisher.ts); this class
 * keeps the requests under the lock, lifecycle and ownership.
 */
export class TransactionCoordinator {
  private readonly txns = new Map<string, Entry>();
  private readonly locks = new KeyedLock();
  private stopped = false;
  private ownership: PartitionOwnership | null = null;
  /** The end of transactions: decision, offsets, markers, finish retries; timeouts and recovered aborts. */
  private readonly finisher: TxnFinisher;
  /** TXN_PUBLISH, pipelined outside the lock. */
  private readonly publisher: TxnPublisher;
  /** Every time the coordinator reads and every timer it arms. */
  private readonly clock: Clock;
  private sweepTimer: ClockTimer | undefined;
  /** The Kafka port's AddPartitionsToTxn, AddOffsetsToTxn and transactional Produce (txn-kafka.ts). */
  readonly kafka: KafkaTransactions;

  constructor(
    private readonly deps: {
      topics: TopicManager;
      log: TxnLog;
      targets: TxnTargets;
      /** Producer ids for new transactional ids (ProducerIdAllocator: unique across brokers and restarts). */
      producerIds: ProducerIds;
      config: TxnCoordinatorConfig;
      logger: Logger;
      registry: client.Registry;
      /** Defaults to the real clock; tests pass a fake one. */
      clock?: Clock;
    },
  ) {
    this.clock = deps.clock ?? systemClock;
    // Registers the transactions_total counter, before the gauge below (the order /metrics lists them in).
    this.finisher = new TxnFinisher({
      log: deps.log,
      targets: deps.targets,
      producerIds: deps.producerIds,
      logger: deps.logger,
      registry: deps.registry,
      clock: this.clock,
      txns: this.txns,
      stopped: () => this.stopped,
      withTxn: (id, fn) => this.withTxn(id, fn),
      partitionFor: (id) => this.partitionFor(id),
      paused: () => this.ownership !== null && !this.ownership.canAct(),
    });
    this.publisher = new TxnPublisher({
      topics: deps.topics,
      log: deps.log,
      targets: deps.targets,
      clock: this.clock,
      partitionFor: (id) => this.partitionFor(id),
    });
    this.kafka = new KafkaTransactions({
      log: deps.log,
      clock: this.clock,
      entry: (id) => this.entry(id),
      checkOwner: (id) => this.checkOwner(id),
      withTxn: (id, fn) => this.withTxn(id, fn),
      open: (e) => this.open(e),
      endTxn: (id, producerId, epoch, result, check) => this.endTxn(id, producerId, epoch, result, check),
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
   * Replays `__transaction_state`. Decided transactions are tried once before this resolves (so the broker
   * serves them finished when their markers can be written); one that fails is retried in the background
   * and does not fail the start. Open ones get their pending offsets back and are aborted.
   */
  async start(): Promise<void> {
    const n = { finished: 0, pending: 0, unconfirmed: 0 };
    for (let p = 0; p < this.deps.log.partitionCount; p++) {
      const r = await this.loadEntries(p);
      n.finished += r.finished;
      n.pending += r.pending;
      n.unconfirmed += r.unconfirmed;
    }
    this.deps.logger.info({ transactionalIds: this.txns.size, ...n }, 'transaction coordinator loaded');
    this.armExpiry();
  }

  private get idExpirationMs(): number {
    return this.deps.config.idExpirationMs ?? DEFAULT_ID_EXPIRATION_MS;
  }

  /** The sweep that forgets idle transactional ids (Kafka's transactional.id.expiration.ms). */
  private armExpiry(): void {
    if (this.sweepTimer || this.stopped) return;
    const every = Math.min(EXPIRY_SWEEP_MS, Math.max(10, Math.floor(this.idExpirationMs / 4)));
    this.sweepTimer = this.clock.setTimeout(() => {
      this.sweepTimer = undefined;
      void this.expireIdle().finally(() => this.armExpiry());
    }, every);
    this.sweepTimer.unref();
  }

  /**
   * Forgets the ids idle for idExpirationMs: a tombstone in `__transaction_state`, then out of memory. The
   * producer id goes with it: a zombie of the id is refused (`transactional_id_not_found`, or
   * `invalid_producer_epoch` once the id is initialized again with a new producer id). Returns how many.
   */
  async expireIdle(): Promise<number> {
    // A coordinator that cannot vouch for its lease decides nothing (docs/architecture.md, "Cluster mode").
    if (this.stopped || (this.ownership !== null && !this.ownership.canAct())) return 0;
    const limit = this.idExpirationMs;
    let n = 0;
    for (const [id, e] of [...this.txns]) {
      if (!expired(e, this.clock.now(), limit)) continue;
      await this.withTxn(id, async () => {
        this.checkOwner(id);
        // Looked at again under the lock: a request may have come in while it waited.
        if (this.txns.get(id) !== e || !expired(e, this.clock.now(), limit)) return;
        await this.deps.log.remove(id);
        this.txns.delete(id);
        clearTimer(this.clock, e);
        n++;
      }).catch((err: unknown) => this.deps.logger.warn({ err, transactionalId: id }, 'could not expire an idle transactional id'));
    }
    if (n > 0) this.deps.logger.info({ expired: n, idleMs: limit }, 'forgot idle transactional ids');
    return n;
  }

  /**
   * One partition of the state log; resolves once each decided transaction had one attempt at its finish,
   * but one whose decision lies past the HWM, which waits for the HWM first (finishOnceReplicated). One
   * that failed (a full disk, a leader that cannot replicate) holds neither the load nor the other ids:
   * the finisher retries it with backoff, and its id's requests wait for it meanwhile
   * (docs/architecture.md, "Transaction coordinator"). Throws only if the replay or a restore failed.
   */
  private async loadEntries(partition: number, current: () => boolean = () => true): Promise<{ finished: number; pending: number; unconfirmed: number }> {
    const decided: Entry[] = [];
    const recovered: Entry[] = [];
    const unconfirmed: Entry[] = [];
    const { states, unreplicated } = await this.deps.log.replay(partition);
    // Overtaken by an unload (and perhaps a newer load): what it read may be older than decisions since.
    if (!current()) return { finished: 0, pending: 0, unconfirmed: 0 };
    for (const meta of states.values()) {
      const e = newEntry(meta, meta.state === 'open');
      this.txns.set(meta.transactionalId, e);
      if (meta.state === 'committed' || meta.state === 'aborted') e.endedEpoch = meta.epoch;
      if (meta.state === 'committed' || meta.state === 'aborted' || meta.state === 'empty') continue;
      if (meta.state === 'open') {
        for (const tp of meta.partitions) e.adds.set(partKey(tp.topic, tp.partition), Promise.resolve());
        recovered.push(e);
      } else if (unreplicated.has(meta.transactionalId)) {
        // Past the HWM: another change of leader may still lose the decision; no marker until the HWM passes it.
        e.unconfirmedAt = unreplicated.get(meta.transactionalId);
        unconfirmed.push(e);
      } else {
        decided.push(e);
      }
      // Pending until the transaction ends, decided ones too: the finish may fail before applying them,
      // and a member taking a partition over must not start below a commit in flight meanwhile.
      for (const [k, list] of groupOffsets(meta.offsets)) await this.deps.targets.restorePending(meta.transactionalId, k.group, k.topic, list.map((o) => o.partition));
    }
    const settled = await Promise.allSettled(decided.map((e) => this.finisher.finish(e)));
    const pending = settled.filter((r) => r.status === 'rejected').length;
    for (const e of recovered) this.finisher.abortRecovered(e);
    for (const e of unconfirmed) this.finisher.finishOnceReplicated(e);
    return { finished: decided.length - pending, pending, unconfirmed: unconfirmed.length };
  }

  // ---- cluster mode: coordinating the __transaction_state partitions this broker leads ----

  enableOwnership(notCoordinator: (partition: number) => TributaryError, topicExists: () => boolean, leaseHeld?: () => boolean): void {
    this.ownership = new PartitionOwnership('__transaction_state', notCoordinator, topicExists, leaseHeld, (partition, err, attempt, delayMs) =>
      this.deps.logger.warn({ err, partition, attempt, delayMs }, 'loading a transaction coordinator partition failed; trying again'),
    );
  }

  private checkOwner(id: string): void {
    this.ownership?.check(() => this.partitionFor(id));
  }

  /**
   * This broker became leader of a `__transaction_state` partition: replay it and try to finish its decided
   * transactions before serving its ids (the same as a restart does); one whose markers fail is retried in
   * the background and holds only its own id.
   */
  async loadPartition(partition: number): Promise<void> {
    this.armExpiry();
    await this.ownership?.load(partition, async (current) => {
      const n = await this.loadEntries(partition, current);
      this.deps.logger.info({ partition, ...n }, 'took over transaction coordinator partition');
    });
  }

  unloadPartition(partition: number): void {
    if (!this.ownership) return;
    this.ownership.unload(partition);
    for (const [id, e] of [...this.txns]) {
      if (this.partitionFor(id) !== partition) continue;
      clearTimer(this.clock, e);
      e.unloaded = true;
      this.txns.delete(id);
    }
  }

  async stop(): Promise<void> {
    this.stopped = true;
    // Loads still retrying their replay give up; the timers below are every other retry.
    this.ownership?.close();
    this.clock.clearTimeout(this.sweepTimer);
    for (const e of this.txns.values()) clearTimer(this.clock, e);
    await this.locks.idle();
  }

  // ---- requests ----

  /**
   * INIT_PRODUCER_ID: a new id gets a producer id at epoch 0; a known one gets its epoch bumped, which
   * fences every older producer of the id; an open transaction of the old epoch is aborted first.
   * `expected` (Kafka's InitProducerId v3+, KIP-360): the pair the producer holds, checked under the id's
   * lock. A known id's current pair is bumped and remembered as its previous one; the previous pair (the
   * same request sent again, its answer lost) gets the current one, with no bump and no abort, unless the
   * current epoch has a transaction open: that one is aborted at a new epoch and the request refused with
   * ConcurrentTransactionsError, as Kafka fences it; any other pair is refused: `producer_fenced` for an epoch of the id's producer id, else `invalid_producer_id_mapping`.
   */
  initProducerId(
    id: string,
    timeoutMs?: number,
    caller?: TxnCaller,
    expected?: { producerId: string; epoch: number },
  ): Promise<{ producerId: string; epoch: number }> {
    this.checkOwner(id);
    const timeout = timeoutMs ?? this.deps.config.defaultTimeoutMs;
    if (timeout > this.deps.config.maxTimeoutMs) throw invalidParam('transaction_timeout_ms', `at most ${this.deps.config.maxTimeoutMs}`);
    return this.withTxn(id, async () => {
      const now = this.clock.now();
      let e = this.txns.get(id);
      if (!e) {
        // Kafka creates an unknown id at epoch -1, which any named pair passes (@platformatic/kafka names
        // producer id 0 at epoch 0 on its first init).
        const meta: TxnMetadata = {
          transactionalId: id,
          producerId: await this.deps.producerIds.allocate(),
          epoch: 0,
          state: 'empty',
          timeoutMs: timeout,
          startedMs: 0,
          partitions: [],
          offsets: [],
          updatedMs: now,
          ...(caller ? { owner: caller.principal } : {}),
        };
        e = newEntry(meta, false);
        await this.deps.log.write(meta);
        this.txns.set(id, e);
        return { producerId: meta.producerId, epoch: meta.epoch };
      }
      // Under the lock: the owner is set here only (docs/security.md, "Transactional ids").
      checkCaller(e, 'INIT_PRODUCER_ID', caller);
      const m = e.meta;
      if (expected && !(expected.producerId === m.producerId && expected.epoch === m.epoch)) {
        if (expected.producerId === m.lastProducerId && expected.epoch === m.lastEpoch) {
          if (m.state === 'open') {
            // The current epoch began a transaction since: this is not the producer that holds it (a zombie,
            // or a retry its bump's answer overtook). As Kafka's coordinator fences an InitProducerId that
            // finds a transaction ongoing: aborted at a new epoch nobody gets, the previous pair forgotten
            // (the retry is fenced then), CONCURRENT_TRANSACTIONS (docs/kafka.md, "Transactions").
            await this.finisher.end(e, 'abort', 'fenced');
            throw new ConcurrentTransactionsError(id, STATUS[m.state]);
          }
          // The bump's fencing abort may still be finishing: answered once it is (a failure is Kafka's
          // CONCURRENT_TRANSACTIONS, kafka/apis/transactions.ts), as any INIT_PRODUCER_ID waits for it.
          if (m.state === 'prepare_commit' || m.state === 'prepare_abort') await this.finisher.awaitFinish(e);
          return { producerId: m.producerId, epoch: m.epoch };
        }
        if (expected.producerId !== m.producerId) throw producerIdMappingError(id, expected.producerId);
        throw new TributaryError('producer_fenced', { transactional_id: id, epoch: expected.epoch, current_epoch: m.epoch });
      }
      if (m.state === 'prepare_commit' || m.state === 'prepare_abort') await this.finisher.awaitFinish(e);
      const previous = expected ? { lastProducerId: expected.producerId, lastEpoch: expected.epoch } : undefined;
      // What stays if the write below fails: the state before a bump nobody got; an open transaction's
      // abort is durable by then, with its new epoch, which a retry of this request gets.
      let restore: TxnMetadata;
      if (m.state === 'open') {
        // The abort's markers carry the new epoch, which fences the old one on every partition it wrote.
        // The previous pair goes with the decision: durable even if the write below never happens.
        await this.finisher.end(e, 'abort', 'fenced', previous);
        // That abort was the old producer's: the new one has no transaction to end yet.
        e.endedEpoch = -1;
        restore = { ...m, ...previous };
      } else {
        restore = { ...m };
        await bumpEpoch(e.meta, this.deps.producerIds);
      }
      Object.assign(m, previous);
      m.timeoutMs = timeout;
      m.updatedMs = now;
      // An id without an owner (written before owners were kept) is claimed; an admin takes it over.
      if (caller) m.owner = caller.principal;
      try {
        await this.deps.log.write(m);
      } catch (err) {
        for (const k of Object.keys(m) as (keyof TxnMetadata)[]) if (!(k in restore)) delete m[k];
        Object.assign(m, restore);
        throw err;
      }
      return { producerId: m.producerId, epoch: m.epoch };
    });
  }

  /** BEGIN_TXN; a retry while the transaction is open answers again. */
  begin(id: string, producerId: string, epoch: number): Promise<void> {
    this.checkOwner(id);
    return this.withTxn(id, async () => {
      const e = this.entry(id);
      checkProducer(e, producerId, epoch);
      const m = e.meta;
      if (m.state === 'open') {
        if (e.recovered) throw txnState(id, m.state, RECOVERED);
        return;
      }
      if (m.state === 'prepare_commit' || m.state === 'prepare_abort') await this.finisher.awaitFinish(e);
      await this.open(e);
    });
  }

  /** Opens a new transaction of the entry (not open, not being decided), durably; under the id's lock. */
  private async open(e: Entry): Promise<void> {
    const m = e.meta;
    const before = { ...m };
    m.state = 'open';
    m.startedMs = this.clock.now();
    m.updatedMs = m.startedMs;
    m.partitions = [];
    m.offsets = [];
    m.abortReason = undefined;
    e.adds.clear();
    e.runs = [];
    e.lastSeq = 0;
    e.spoiled = undefined;
    e.recovered = false;
    try {
      await this.deps.log.write(m);
    } catch (err) {
      Object.assign(m, before);
      throw err;
    }
    this.finisher.scheduleTimeout(e);
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
    return this.publisher.publish(e, id, producerId, epoch, topicName, explicit, record, seqNum);
  }

  /** What publishRun() of `count` records would refuse before it looks at them (TxnPublisher.checkRun). */
  checkRun(id: string, producerId: string, epoch: number, topicName: string, explicit: number | undefined, count: number, firstSeq: number): void {
    this.checkOwner(id);
    this.publisher.checkRun(this.entry(id), id, producerId, epoch, topicName, explicit, count, firstSeq);
  }

  /** publish() of records with seqNums `firstSeq`.. (a transactional batch frame), taken whole or refused whole. */
  publishRun(id: string, producerId: string, epoch: number, topicName: string, explicit: number | undefined, records: RecordInput[], firstSeq: number): Promise<TxnPublishResult[]> {
    this.checkOwner(id);
    return this.publisher.publishRun(this.entry(id), id, producerId, epoch, topicName, explicit, records, firstSeq);
  }

  /**
   * SEND_OFFSETS_TO_TXN: fenced as a commit is, then held until the transaction ends. `req.classic`: a
   * Kafka classic group's member (TxnOffsetCommit), checked in place of req.member and req.generation.
   */
  sendOffsets(id: string, producerId: string, epoch: number, req: StageRequest): Promise<number> {
    this.checkOwner(id);
    return this.withTxn(id, async () => {
      const e = this.entry(id);
      checkOpen(e, producerId, epoch);
      await this.deps.targets.stageOffsets(id, req);
      const m = e.meta;
      for (const o of req.entries) {
        const i = m.offsets.findIndex((x) => x.group === req.group && x.topic === req.topic && x.partition === o.partition);
        const entry: TxnOffset = { group: req.group, topic: req.topic, partition: o.partition, offset: o.offset };
        if (i >= 0) m.offsets[i] = entry;
        else m.offsets.push(entry);
      }
      m.updatedMs = this.clock.now();
      try {
        await this.deps.log.write(m);
      } catch (err) {
        // The client hears this failed; a commit would still take the offsets it added (in memory and staged
        // at the group's coordinator), so the transaction may only abort now, as after a failed record.
        e.spoiled ??= `the offsets sent for group ${req.group} could not be recorded; abort the transaction`;
        throw err;
      }
      return req.entries.length;
    });
  }

  /**
   * END_TXN. Retrying the result the transaction already has answers it again; the other result, or no
   * transaction, is invalid_txn_state. `check` refuses a commit whose offsets the caller may no longer commit.
   */
  endTxn(id: string, producerId: string, epoch: number, result: 'commit' | 'abort', check?: CommitCheck): Promise<'committed' | 'aborted'> {
    this.checkOwner(id);
    const want = result === 'commit' ? 'committed' : 'aborted';
    return this.withTxn(id, async () => {
      const e = this.entry(id);
      checkProducer(e, producerId, epoch);
      const m = e.meta;
      if (m.state === 'open') {
        if (result === 'commit' && (e.recovered || e.spoiled)) throw txnState(id, m.state, e.spoiled ?? RECOVERED);
        await this.decided(id, e, result, this.finisher.end(e, result, 'client', undefined, check));
        return want;
      }
      if (m.state === 'prepare_commit' || m.state === 'prepare_abort') {
        const deciding = m.state === 'prepare_commit' ? 'committed' : 'aborted';
        if (deciding !== want) throw txnState(id, m.state, `the transaction is already ${deciding === 'committed' ? 'committing' : 'aborting'}`);
        await this.decided(id, e, result, this.finisher.awaitFinish(e));
        return want;
      }
      if ((m.state === 'committed' || m.state === 'aborted') && e.endedEpoch === m.epoch) {
        if (m.state !== want) throw txnState(id, m.state, `the transaction was ${m.state}`);
        return want;
      }
      throw txnState(id, m.state, 'no transaction is open');
    });
  }

  /**
   * Awaits `finishing` (the markers, offsets and end of END_TXN's transaction), but once the decision is
   * durable a failure of the rest is not the client's: the transaction ends as decided whatever it does
   * (the finisher retries it; a restart or takeover finishes it), so END_TXN answers the decision, as
   * Kafka does. read_committed readers still wait: each partition's LSO stays below the transaction
   * until its marker lands. A broker that gave the id up answers NOT_COORDINATOR: the new one answers.
   */
  private async decided(id: string, e: Entry, result: 'commit' | 'abort', finishing: Promise<void>): Promise<void> {
    try {
      await finishing;
    } catch (err) {
      // Given up meanwhile: NOT_COORDINATOR, so the client asks the new coordinator (which finishes it).
      if (e.unloaded) this.checkOwner(id);
      // A decision replayed from past the HWM (Entry.unconfirmedAt) may still be lost: not answered yet.
      if (e.unloaded || e.unconfirmedAt !== undefined || e.meta.state !== (result === 'commit' ? 'prepare_commit' : 'prepare_abort')) throw err;
    }
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

  /**
   * Refuses `caller` unless it owns the id, or is an admin (docs/security.md, "Transactional ids"). An id
   * this broker does not hold passes: the request itself then answers not found or NOT_COORDINATOR.
   */
  checkCaller(id: string, command: string, caller: TxnCaller | undefined): void {
    checkCaller(this.txns.get(id), command, caller);
  }

  /** The transactional ids known, for inspection. */
  list(): string[] {
    return [...this.txns.keys()].sort();
  }

  // ---- helpers ----

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

}

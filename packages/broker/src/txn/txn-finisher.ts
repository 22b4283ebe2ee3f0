import client from 'prom-client';
import { backoffDelay } from 'tributary-client/retry.js';
import { failpoint } from '../common/failpoints.js';
import type { Logger } from '../common/logger.js';
import type { Clock } from '../common/clock.js';
import { TributaryError } from 'tributary-protocol/errors.js';
import type { TxnLog, TxnMetadata, TxnState } from './txn-log.js';
import type { TxnTargets } from './txn-targets.js';
import { type CommitCheck, type Entry, type ProducerIds, RECOVERED, STATUS, bumpEpoch, clearRetry, clearTimer, groupOffsets, txnState } from './txn-entry.js';

/**
 * After a failed finish (a marker a full disk or an unreplicated leader refused): the next attempt within
 * 1 s, then within 2, 4, 8 and at most 10 s (full jitter, tributary-client/retry.js), until it lands.
 */
const FINISH_BACKOFF = { initialDelayMs: 500, maxDelayMs: 10_000 };
/** The partitions a retry's log line names, at most (a transaction may span thousands). */
const LOGGED_PARTITIONS = 20;

/** How long one wait for the HWM to pass a replayed decision lasts before it looks again. */
const UNCONFIRMED_WAIT_MS = 10_000;

/** A decision replayed from past the HWM, not on the in-sync replicas yet (finishOnceReplicated). */
function unconfirmedError(e: Entry): TributaryError {
  return new TributaryError('COORDINATOR_LOADING', {
    transactional_id: e.meta.transactionalId,
    state: STATUS[e.meta.state],
    reason: 'the decision on the transaction is not on the in-sync replicas yet; retry',
  });
}

/** What a finish is for: a retry of it finishes that decided transaction or nothing. */
interface Decided {
  producerId: string;
  epoch: number;
  state: TxnState;
}

/**
 * The two-phase end of a transaction (docs/architecture.md, "Transaction coordinator"): the decision is
 * made durable in `__transaction_state` first, then offsets are applied and markers written, then the end
 * is recorded; a finish that fails is retried in the background with backoff, for that transaction only
 * (its id waits meanwhile; every other id is served). The coordinator
 * (txn-coordinator.ts) calls it under the transactional id's lock; the aborts it decides by itself (a
 * transaction timeout, a transaction recovered open) take that lock here.
 */
export class TxnFinisher {
  private readonly ended: client.Counter;

  constructor(
    private readonly deps: {
      log: TxnLog;
      targets: TxnTargets;
      producerIds: ProducerIds;
      logger: Logger;
      registry: client.Registry;
      /** Every time the coordinator reads and every timer it arms. */
      clock: Clock;
      /** The coordinator's entries by transactional id (the same map): a retry checks its entry is still there. */
      txns: Map<string, Entry>;
      stopped: () => boolean;
      /** Runs `fn` under the transactional id's lock; refused once stopped. */
      withTxn: <T>(id: string, fn: () => Promise<T>) => Promise<T>;
      partitionFor: (transactionalId: string) => number;
      /** Cluster mode: just resumed from a pause, the lease unconfirmed (timeouts wait). */
      paused: () => boolean;
    },
  ) {
    this.ended = new client.Counter({
      name: 'tributary_transactions_total',
      help: 'Transactions ended, by result and cause (client, timeout, fenced, recovered)',
      labelNames: ['result', 'cause'],
      registers: [deps.registry],
    });
  }

  /**
   * Decides the open transaction (durably), then finishes it. `fenced`/`timeout` aborts bump the epoch
   * first, so the markers fence the old producer on every partition. `previous`: the pair a KIP-360
   * INIT_PRODUCER_ID that fences the transaction bumps from, remembered in the decision itself. `check`:
   * END_TXN commit's authorization of the staged offsets, run after the appends settled, right before the
   * decision (nothing awaited in between, so no reload comes between them).
   */
  async end(
    e: Entry,
    result: 'commit' | 'abort',
    cause: 'client' | 'timeout' | 'fenced' | 'recovered',
    previous?: { lastProducerId: string; lastEpoch: number },
    check?: CommitCheck,
  ): Promise<void> {
    const m = e.meta;
    // Under the id's lock: nothing else of the id runs while the appends settle, and the timeout that
    // fires meanwhile waits for the outcome (an open transaction it still aborts).
    if (result === 'commit') {
      await this.settleAppends(e);
      check?.(m.offsets);
    }
    const before = { ...m };
    clearTimer(this.deps.clock, e);
    try {
      if (cause === 'recovered') {
        m.abortReason = RECOVERED;
      } else if (cause !== 'client') {
        const old = { producerId: m.producerId, epoch: m.epoch };
        await bumpEpoch(e.meta, this.deps.producerIds);
        // At the last epoch the bump moved to a new producer id: the markers must still close the
        // transaction the old pair's records opened on each partition (finish() writes them for this pair).
        if (m.producerId !== old.producerId) {
          m.markerProducerId = old.producerId;
          m.markerEpoch = old.epoch;
        }
        // Durable with the decision (and the end, which copies it): a crash before INIT_PRODUCER_ID's own
        // write must not turn the same request sent again into producer_fenced for its rightful producer.
        if (previous) Object.assign(m, previous);
        m.abortReason = cause === 'timeout' ? `timed out after ${m.timeoutMs} ms` : 'fenced by a newer producer';
      }
      m.state = result === 'commit' ? 'prepare_commit' : 'prepare_abort';
      m.updatedMs = this.deps.clock.now();
      await this.deps.log.write(m);
    } catch (err) {
      // Not decided until the log has it: a retry that found the decision in memory would write markers
      // of a decision a crash then forgets (recovery aborts what it replays as open).
      for (const k of Object.keys(m) as (keyof TxnMetadata)[]) if (!(k in before)) delete m[k];
      Object.assign(m, before);
      if (m.state === 'open') this.scheduleTimeout(e);
      throw err;
    }
    failpoint('txn.after_decision');
    await Promise.allSettled([...e.inflight]);
    this.ended.inc({ result, cause });
    await this.finish(e);
  }

  /**
   * Before a commit's decision: waits for the transaction's appends in flight on every partition (those
   * admitted while it waits too; no new one is, Entry.committing), as Kafka's EndTxn comes only once the
   * producer has its produce responses. One that failed refuses the commit (invalid_txn_state, the
   * transaction stays open and spoiled: only an abort ends it), so it never commits without a record
   * its producer was told failed, nor has a record land after its marker.
   */
  private async settleAppends(e: Entry): Promise<void> {
    const seen = new Set<Promise<unknown>>();
    let failed: unknown;
    e.committing = true;
    try {
      for (let next = [...e.inflight]; next.length > 0; next = [...e.inflight].filter((p) => !seen.has(p))) {
        for (const p of next) seen.add(p);
        for (const r of await Promise.allSettled(next)) if (r.status === 'rejected') failed ??= r.reason;
      }
    } finally {
      e.committing = false;
    }
    const m = e.meta;
    if (failed !== undefined) {
      // TXN_PUBLISH's failed run named itself already; a Kafka Produce's is named here.
      e.spoiled ??= `an append of the transaction failed while END_TXN commit waited for it (${failed instanceof TributaryError ? failed.code : 'error'}); abort it`;
    }
    if (e.spoiled) throw txnState(m.transactionalId, m.state, e.spoiled);
  }

  // ---- ends the coordinator decides by itself ----

  /**
   * A transaction open when its coordinator restarted or moved can only be aborted (its appends in
   * flight are lost with the old coordinator): abort it now rather than when its producer comes back or
   * its timeout fires, so read_committed readers of its partitions are not held behind it meanwhile.
   * The epoch stays: the producer's END_TXN abort is answered `aborted`, its commit and further sends
   * get invalid_txn_state, as before (docs/architecture.md, "Transaction coordinator").
   */
  abortRecovered(e: Entry): void {
    const m = e.meta;
    const started = m.startedMs;
    void this.deps.withTxn(m.transactionalId, async () => {
      if (m.state === 'open' && e.recovered && m.startedMs === started) await this.end(e, 'abort', 'recovered');
    }).catch((err: unknown) => {
      this.deps.logger.warn({ err, transactionalId: m.transactionalId }, 'aborting a recovered transaction failed; its timeout will');
      if (m.state === 'open') this.scheduleTimeout(e);
    });
  }

  scheduleTimeout(e: Entry): void {
    clearTimer(this.deps.clock, e);
    const m = e.meta;
    const started = m.startedMs;
    const fire = () => {
      // Just resumed from a pause, the lease unconfirmed: the id may be another coordinator's by now.
      if (this.deps.paused()) {
        e.timer = this.deps.clock.setTimeout(fire, 500);
        e.timer.unref();
        return;
      }
      void this.deps.withTxn(m.transactionalId, async () => {
        if (m.state === 'open' && m.startedMs === started) {
          this.deps.logger.warn({ transactionalId: m.transactionalId, timeoutMs: m.timeoutMs }, 'transaction timed out; aborting it');
          await this.end(e, 'abort', 'timeout');
        }
      }).catch((err: unknown) => this.deps.logger.error({ err, transactionalId: m.transactionalId }, 'aborting a timed-out transaction failed'));
    };
    e.timer = this.deps.clock.setTimeout(fire, Math.max(0, started + m.timeoutMs - this.deps.clock.now()));
    e.timer.unref();
  }

  // ---- the end of a transaction ----

  /** The decided transaction's running finish, or a new attempt (a failed one is the caller's error too). */
  awaitFinish(e: Entry): Promise<void> {
    return e.finishing ?? this.finish(e);
  }

  /**
   * Carries out a decided transaction: offsets first on commit (so a member that takes a partition over
   * never starts below them), then a marker on every partition, then the end in the state log. Every
   * step may run again after a crash: offsets never move back, and a marker without an open transaction
   * changes nothing. A failure arms the next attempt (retryLater).
   */
  finish(e: Entry): Promise<void> {
    if (e.finishing) return e.finishing;
    const m = e.meta;
    if (m.state !== 'prepare_commit' && m.state !== 'prepare_abort') return Promise.resolve();
    if (e.unconfirmedAt !== undefined) {
      // Replayed from past the HWM: its markers wait until the in-sync replicas have the decision.
      if (!this.deps.log.replicatedPast(m.transactionalId, e.unconfirmedAt)) return Promise.reject(unconfirmedError(e));
      e.unconfirmedAt = undefined;
    }
    const commit = m.state === 'prepare_commit';
    const decided: Decided = { producerId: m.producerId, epoch: m.epoch, state: m.state };
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
      const markerPid = m.markerProducerId ?? m.producerId;
      const markerEpoch = m.markerEpoch ?? m.epoch;
      await Promise.all(m.partitions.map((tp) => this.deps.targets.marker(tp.topic, tp.partition, markerPid, markerEpoch, commit ? 'commit' : 'abort', this.deps.partitionFor(m.transactionalId))));
      failpoint('txn.after_markers');
      live();
      // Recorded as ended only once the log has it: until then the transaction stays decided, so no new
      // one can begin while its markers may still be written again.
      const { markerProducerId: _mp, markerEpoch: _me, ...rest } = m;
      const ended: TxnMetadata = { ...rest, state: commit ? 'committed' : 'aborted', partitions: [], offsets: [], startedMs: 0, updatedMs: this.deps.clock.now() };
      await this.deps.log.write(ended);
      live();
      delete m.markerProducerId;
      delete m.markerEpoch;
      Object.assign(m, ended);
      e.endedEpoch = m.epoch;
      e.adds.clear();
      // Done: an attempt armed by an earlier failure has nothing left to do.
      if (e.finishFailures > 0) this.deps.logger.info({ transactionalId: m.transactionalId, result: ended.state, failedAttempts: e.finishFailures }, 'finished a decided transaction after retrying');
      clearRetry(this.deps.clock, e);
      e.finishFailures = 0;
    };
    const p = run().finally(() => {
      if (e.finishing === p) e.finishing = null;
    });
    e.finishing = p;
    p.catch((err: unknown) => this.retryLater(e, decided, err));
    return p;
  }

  /**
   * A decision replayed from past the HWM (Entry.unconfirmedAt): finished once the HWM passes it, as
   * Kafka writes markers only once PREPARE is replicated; until then finish() refuses with the retriable
   * COORDINATOR_LOADING, so a coordinator that dies before its followers have the decision has written no
   * marker, and the next one (which may replay the transaction open, and abort it) ends it alike on every
   * partition (docs/architecture.md, "Transaction coordinator"). Given up with the partition or the coordinator.
   */
  finishOnceReplicated(e: Entry): void {
    const m = e.meta;
    const at = e.unconfirmedAt;
    if (at === undefined) return;
    const decided: Decided = { producerId: m.producerId, epoch: m.epoch, state: m.state };
    const wait = async () => {
      while (!this.deps.log.replicatedPast(m.transactionalId, at)) {
        if (e.unloaded || this.deps.stopped()) return;
        // False: timed out, or woken by a closing partition or a lost lead (checked above on the next turn,
        // after a pause on the coordinator's clock: a partition that keeps waking its waiters is no busy loop).
        if (!(await this.deps.log.waitReplicated(m.transactionalId, at, UNCONFIRMED_WAIT_MS))) await new Promise<void>((resolve) => this.deps.clock.setTimeout(resolve, 100).unref());
      }
      await this.retryFinish(e, decided);
    };
    // A failed finish arms its own retries (retryLater); a refusal (stopped) ends it.
    void wait().catch(() => {});
  }

  /**
   * Arms the next attempt at a finish that failed, with backoff, for that decided transaction only; none
   * once the coordinator stops or gave the id's partition up (its next start, or the partition's new
   * coordinator, finishes it from the log). Logged with what is retried.
   */
  private retryLater(e: Entry, decided: Decided, err: unknown): void {
    const m = e.meta;
    const what = {
      transactionalId: m.transactionalId,
      result: decided.state === 'prepare_commit' ? 'commit' : 'abort',
      partitions: m.partitions.slice(0, LOGGED_PARTITIONS).map((tp) => `${tp.topic}[${tp.partition}]`),
      partitionCount: m.partitions.length,
      offsets: m.offsets.length,
    };
    if (e.unloaded || this.deps.stopped()) {
      this.deps.logger.warn({ err, ...what }, 'finishing a decided transaction failed; left to the next coordinator of its id');
      return;
    }
    e.finishFailures++;
    const delayMs = backoffDelay(Math.min(e.finishFailures, 8), FINISH_BACKOFF);
    this.deps.logger.warn({ err, ...what, attempt: e.finishFailures, delayMs }, 'finishing a decided transaction failed; retrying its offsets, markers and end');
    clearRetry(this.deps.clock, e);
    e.retry = this.deps.clock.setTimeout(() => {
      e.retry = null;
      // A failure of this attempt arms the next one (finish's catch); a refusal (stopped) ends it.
      void this.retryFinish(e, decided).catch(() => {});
    }, delayMs);
    e.retry.unref();
  }

  /**
   * Finishes again the decided transaction whose finish failed, unless something else finished it first
   * (a retried END_TXN, a reload of its partition) or its partition is no longer this broker's: the entry
   * may hold the producer's next transaction by now, which this must not end.
   */
  private retryFinish(e: Entry, decided: Decided): Promise<void> {
    const m = e.meta;
    return this.deps.withTxn(m.transactionalId, async () => {
      if (e.unloaded || this.deps.txns.get(m.transactionalId) !== e) return;
      if (m.producerId !== decided.producerId || m.epoch !== decided.epoch || m.state !== decided.state) return;
      await this.awaitFinish(e);
    });
  }
}

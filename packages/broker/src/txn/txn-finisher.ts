import client from 'prom-client';
import { failpoint } from '../common/failpoints.js';
import type { Logger } from '../common/logger.js';
import type { Clock } from '../common/clock.js';
import { TributaryError } from 'tributary-protocol/errors.js';
import type { TxnLog, TxnMetadata, TxnState } from './txn-log.js';
import type { TxnTargets } from './txn-targets.js';
import { type Entry, type ProducerIds, RECOVERED, bumpEpoch, clearTimer, groupOffsets } from './txn-entry.js';

/** After a failed finish (storage error), how long until it is tried again. */
const FINISH_RETRY_MS = 1000;

/**
 * The two-phase end of a transaction (docs/architecture.md, "Transaction coordinator"): the decision is
 * made durable in `__transaction_state` first, then offsets are applied and markers written, then the end
 * is recorded; a finish that fails is retried later, for that transaction only. The coordinator
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
   * first, so the markers fence the old producer on every partition.
   */
  async end(e: Entry, result: 'commit' | 'abort', cause: 'client' | 'timeout' | 'fenced' | 'recovered'): Promise<void> {
    const m = e.meta;
    const before = { ...m };
    clearTimer(this.deps.clock, e);
    try {
      if (cause === 'recovered') {
        m.abortReason = RECOVERED;
      } else if (cause !== 'client') {
        await bumpEpoch(e.meta, this.deps.producerIds);
        m.abortReason = cause === 'timeout' ? `timed out after ${m.timeoutMs} ms` : 'fenced by a newer producer';
      }
      m.state = result === 'commit' ? 'prepare_commit' : 'prepare_abort';
      m.updatedMs = this.deps.clock.now();
      await this.deps.log.write(m);
    } catch (err) {
      // Not decided until the log has it: a retry that found the decision in memory would write markers
      // of a decision a crash then forgets (recovery aborts what it replays as open).
      Object.assign(m, before);
      if (m.state === 'open') this.scheduleTimeout(e);
      throw err;
    }
    failpoint('txn.after_decision');
    await Promise.allSettled([...e.inflight]);
    this.ended.inc({ result, cause });
    await this.finish(e, { retry: true });
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

  awaitFinish(e: Entry): Promise<void> {
    return e.finishing ?? this.finish(e, { retry: true });
  }

  /**
   * Carries out a decided transaction: offsets first on commit (so a member that takes a partition over
   * never starts below them), then a marker on every partition, then the end in the state log. Every
   * step may run again after a crash: offsets never move back, and a marker without an open transaction
   * changes nothing.
   */
  finish(e: Entry, opts: { retry: boolean }): Promise<void> {
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
      await Promise.all(m.partitions.map((tp) => this.deps.targets.marker(tp.topic, tp.partition, m.producerId, m.epoch, commit ? 'commit' : 'abort', this.deps.partitionFor(m.transactionalId))));
      failpoint('txn.after_markers');
      live();
      // Recorded as ended only once the log has it: until then the transaction stays decided, so no new
      // one can begin while its markers may still be written again.
      const ended: TxnMetadata = { ...m, state: commit ? 'committed' : 'aborted', partitions: [], offsets: [], startedMs: 0, updatedMs: this.deps.clock.now() };
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
      if (opts.retry && !this.deps.stopped()) this.deps.clock.setTimeout(() => void this.retryFinish(e, decided).catch(() => {}), FINISH_RETRY_MS).unref();
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
    return this.deps.withTxn(m.transactionalId, async () => {
      if (e.unloaded || this.deps.txns.get(m.transactionalId) !== e) return;
      if (m.producerId !== decided.producerId || m.epoch !== decided.epoch || m.state !== decided.state) return;
      await this.awaitFinish(e);
    });
  }
}

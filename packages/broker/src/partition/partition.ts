import type { LogRecord, RecordInput } from 'tributary-protocol/record.js';
import { RecordAttr } from 'tributary-protocol/record.js';
import { invalidParam, TributaryError } from 'tributary-protocol/errors.js';
import type { ScannedBatch } from 'tributary-protocol/batch.js';
import type { LogTicker } from '../storage/log-ticker.js';
import type { PartitionLog } from '../storage/partition-log.js';
import type { WireReadRequest } from '../storage/tail-cache.js';
import type { WireReply } from '../storage/log-reader.js';
import type { ReadOptions } from '../storage/log-options.js';
import type { StoredAppends } from '../storage/stored-appends.js';
import { failpointDelay, failpointRefuse } from '../common/failpoints.js';
import { SETTLED } from '../common/settled.js';
import { AppendTracker } from './append-tracker.js';
import { park } from './park.js';
import { type BatchEntry, type CheckResult, type ProducerStateTable, reusedSequence } from './producer-state.js';
import { replayReplica, replicaCount } from './replica-replay.js';
import { encodeMarkerValue, type MarkerType, type OpenTxn, type TxnIndex } from './txn-index.js';
import type { IdempotentAppend, IdempotentBatch, Isolation, MarkerResult, ReadResult, TransactionalBatch, Waiter, WireReadOptions, WireTarget } from './partition-types.js';
import { PartitionSnapshots, readTxnFloor, type SnapshotOwner } from './partition-snapshots.js';
import { applyPartitionRetention } from './partition-retention.js';
import { type ReleasedEpochs, releaseFiles } from './partition-release.js';

export type { IdempotentAppend, IdempotentBatch, Isolation, MarkerResult, ReadResult, TransactionalBatch } from './partition-types.js';
export { PRODUCER_ID_EXPIRATION_MS, PRODUCER_SNAPSHOT_FILE, TXN_SNAPSHOT_FILE } from './partition-snapshots.js';

/**
 * A partition as the broker serves it: the log plus the high-water mark that gates readers. The log
 * decides durability; this layer moves the HWM only once an append is durable, so a consumer never sees
 * a record that a crash could take back.
 */
export class Partition implements SnapshotOwner {
  /** Parked reads; null until the first (this and endWaiters: most partitions of a big broker are never read). */
  private waiters: Set<Waiter> | null = null;
  private closed = false;
  /** Idempotent producer state; null until loaded (PartitionSnapshots.loadProducers, from the constructor). */
  private producers: ProducerStateTable | null = null;
  private producersError: Error | null = null;
  /** SETTLED once loaded, so a loaded partition keeps no promise of its own. */
  private producersReady: Promise<void>;
  /** Transactions; null until rebuilt (PartitionSnapshots.loadTxns, from the constructor). */
  private txns: TxnIndex | null = null;
  private txnError: Error | null = null;
  private txnReady: Promise<void>;
  /** Until the index is rebuilt: an offset below which the log has no open transaction (from the snapshot). */
  private readonly txnFloor: number;
  /** The offset of the last transaction snapshot written (the rebuild scan after a crash starts there). */
  private readonly snapshots: PartitionSnapshots;
  private replicated = false;
  private durableEnd = 0;
  private onDurable: (() => void) | null = null;
  private endWaiters: Set<{ offset: number; wake: () => void }> | null = null;
  private readonly appends = new AppendTracker();

  constructor(
    readonly topic: string,
    readonly id: number,
    readonly log: PartitionLog,
    opts: { replicated?: boolean; snapshotTicker?: LogTicker } = {},
  ) {
    // Standalone, what survived recovery is on disk, hence durable as far as a restart can tell.
    // Replicated, the tail past the checkpointed HWM may be a dead leader's: only the leader's HWM moves it.
    if (!opts.replicated && log.highWatermark < log.logEndOffset) log.setHighWatermark(log.logEndOffset);
    this.snapshots = new PartitionSnapshots(log, this, opts.snapshotTicker);
    log.onFilesCreated(this.snapshots);
    this.txnFloor = readTxnFloor(log);
    log.readFloor = () => this.lastStableOffset;
    this.txnReady = this.snapshots.loadTxns().then(
      (t) => {
        this.txns = t;
        this.txnReady = SETTLED;
        this.notify();
      },
      (err: unknown) => {
        this.txnError = err instanceof Error ? err : new Error(String(err));
      },
    );
    this.producersReady = this.snapshots.loadProducers().then(
      (t) => {
        this.producers = t;
        this.producersReady = SETTLED;
      },
      (err: unknown) => {
        this.producersError = err instanceof Error ? err : new Error(String(err));
      },
    );
  }

  get earliest(): number {
    return this.log.logStartOffset;
  }

  get logEndOffset(): number {
    return this.log.logEndOffset;
  }

  get highWatermark(): number {
    return this.log.highWatermark;
  }

  /**
   * The last stable offset: what read_committed may see, min(HWM, first offset of the earliest open
   * transaction); until the index is rebuilt after open, a conservative bound from its snapshot.
   */
  get lastStableOffset(): number {
    const hwm = this.log.highWatermark;
    const first = this.txns ? this.txns.firstUnstableOffset() : this.txnFloor;
    return first < hwm ? Math.max(first, this.log.logStartOffset) : hwm;
  }

  /** The transaction index (for tests, inspection and the coordinator); undefined until rebuilt. */
  txnIndex(): TxnIndex | undefined {
    return this.txns ?? undefined;
  }

  /** Resolves once the transaction index is rebuilt (or failed to). */
  whenTxnIndexReady(): Promise<void> {
    return this.txnReady;
  }

  /** Retention of a 'delete' topic, never past what the snapshots cover (partition-retention.ts). */
  applyRetention(now: number): Promise<{ deletedSegments: number; deletedBytes: number }> {
    return applyPartitionRetention(this.log, this.snapshots, now);
  }

  private txnIndexOrThrow(): TxnIndex {
    if (this.txnError) throw new TributaryError('storage_error', { reason: `transaction index unavailable: ${this.txnError.message}` });
    return this.txns!;
  }

  /**
   * Appends records of the producer's transaction: each gets the TRANSACTIONAL attribute and the
   * producer id / epoch (and, with sequences, is checked and stored as appendIdempotent does). The
   * producer's first transactional append on this partition opens its transaction at its base offset,
   * which holds the LSO there until writeMarker() closes it. Errors: stale_producer_epoch (below the open
   * transaction's epoch or the idempotent state's), out_of_order_sequence.
   */
  appendTransactional(records: RecordInput[], b: TransactionalBatch): Promise<IdempotentAppend> {
    return this.track(() => this.transactional(records, b));
  }

  private transactional(records: RecordInput[], b: TransactionalBatch): Promise<IdempotentAppend> {
    if (this.closed) return Promise.reject(new TributaryError('shutting_down'));
    const idem = b.firstSequence !== undefined || b.lastSequence !== undefined;
    if (idem && (b.firstSequence === undefined || b.lastSequence === undefined || b.lastSequence - b.firstSequence + 1 !== records.length)) {
      return Promise.reject(invalidParam('sequence', 'firstSequence and lastSequence must span the records'));
    }
    if (!b.producerId) return Promise.reject(invalidParam('producerId', 'a transactional append needs a producer id'));
    if ((this.txns === null && this.txnError === null) || (idem && this.producers === null && this.producersError === null)) {
      return Promise.all([this.txnReady, this.producersReady]).then(() => this.transactional(records, b));
    }
    let index: TxnIndex;
    try {
      index = this.txnIndexOrThrow();
    } catch (err) {
      return Promise.reject(err);
    }
    const recs: RecordInput[] = records.map((r, i) => ({
      ...r,
      producerId: b.producerId,
      epoch: b.epoch,
      sequence: idem ? b.firstSequence! + i : -1,
      attributes: ((r.attributes ?? 0) & ~RecordAttr.CONTROL) | RecordAttr.TRANSACTIONAL,
    }));
    const hooks = {
      txn: null as OpenTxn | null,
      // A duplicate only of a batch of the open transaction (or pending): past a marker, numbers are reused.
      current: (e: BatchEntry) => e.result !== undefined || index.holds(b.producerId, e.baseOffset),
      start: () => {
        hooks.txn = index.begin(b.producerId, b.epoch, this.log.logEndOffset);
      },
      ok: (res: { baseOffset: number }) => {
        if (hooks.txn) index.appended(hooks.txn, res.baseOffset);
      },
      none: () => {
        if (hooks.txn) index.released(hooks.txn);
      },
    };
    if (idem) {
      return this.idempotent(recs, { ...b, firstSequence: b.firstSequence!, lastSequence: b.lastSequence! }, hooks);
    }
    try {
      hooks.start();
    } catch (err) {
      return Promise.reject(err);
    }
    return this.log.append(recs).then(
      (res) => {
        hooks.ok(res);
        const r = this.appended(res);
        return { ...r, duplicate: false };
      },
      (err: unknown) => {
        hooks.none();
        throw err;
      },
    );
  }

  /**
   * Appends a commit or abort marker (a CONTROL|TRANSACTIONAL record). Once durable it closes the
   * producer's open transaction (an abort records the range [first offset, marker offset)); the LSO moves
   * on, waiters wake. A marker without an open transaction (a retry after a crash) changes nothing else.
   * Error: stale_producer_epoch (below the open transaction's epoch).
   */
  writeMarker(producerId: string, epoch: number, type: MarkerType): Promise<MarkerResult> {
    return this.track(() => this.marker(producerId, epoch, type));
  }

  private marker(producerId: string, epoch: number, type: MarkerType): Promise<MarkerResult> {
    if (this.closed) return Promise.reject(new TributaryError('shutting_down'));
    if (!producerId) return Promise.reject(invalidParam('producerId', 'a marker needs a producer id'));
    if (type !== 'commit' && type !== 'abort') return Promise.reject(invalidParam('type', 'commit or abort'));
    if (failpointRefuse(`partition.marker:${this.topic}`)) return Promise.reject(new TributaryError('storage_error', { reason: 'failpoint: disk full' }));
    if ((this.txns === null && this.txnError === null) || (this.producers === null && this.producersError === null)) {
      return Promise.all([this.txnReady, this.producersReady]).then(() => this.marker(producerId, epoch, type));
    }
    let index: TxnIndex;
    let txn: OpenTxn | null;
    try {
      index = this.txnIndexOrThrow();
      txn = index.beginMarker(producerId, epoch);
    } catch (err) {
      return Promise.reject(err);
    }
    // Appends queue in call order: from here on, appends of an older epoch are refused.
    this.producers?.fence(producerId, epoch, Date.now());
    const rec: RecordInput = {
      key: null,
      value: encodeMarkerValue(type),
      producerId,
      epoch,
      sequence: -1,
      attributes: RecordAttr.CONTROL | RecordAttr.TRANSACTIONAL,
    };
    return this.log.append([rec]).then(
      (res) => {
        index.markerWritten(txn, type, res.baseOffset);
        this.appended(res);
        // The LSO may have moved even where the HWM did not.
        this.notify();
        return { offset: res.baseOffset, timestamp: res.timestamp, closed: txn !== null };
      },
      (err: unknown) => {
        index.markerFailed(txn);
        throw err;
      },
    );
  }

  /** Calls the log synchronously (no fault-test delay armed): plain appends land in the order they start. */
  append(records: RecordInput[]): Promise<{ baseOffset: number; lastOffset: number; timestamp: number }> {
    return this.track(() => {
      if (this.closed) return Promise.reject(new TributaryError('shutting_down'));
      const delay = failpointDelay(`leader.append:${this.topic}`); // fault tests: an append begun, not yet written
      const appended = delay ? delay.then(() => this.log.append(records)) : this.log.append(records);
      return appended.then((res) => this.appended(res));
    });
  }

  /** append() of the records of a produce batch, encoded straight from its wire bytes (PartitionLog.appendWire). */
  appendWire(batch: ScannedBatch): Promise<{ baseOffset: number; lastOffset: number; timestamp: number }> {
    return this.track(() => {
      if (this.closed) return Promise.reject(new TributaryError('shutting_down'));
      return this.log.appendWire(batch).then((res) => this.appended(res));
    });
  }

  /**
   * An idempotent append: the state check and the append are one synchronous step (appends are queued in
   * call order), so a duplicate of a pending batch waits for that append's result and resolves with its
   * offsets and `duplicate: true`. Errors: stale_producer_epoch, out_of_order_sequence. The records may be a
   * scanned produce batch whose producer id and epoch the caller checked are `b`'s (PartitionLog.appendWire).
   */
  appendIdempotent(records: RecordInput[] | ScannedBatch, b: IdempotentBatch): Promise<IdempotentAppend> {
    return this.track(() => this.idempotentWhenLoaded(records, b));
  }

  private idempotentWhenLoaded(records: RecordInput[] | ScannedBatch, b: IdempotentBatch): Promise<IdempotentAppend> {
    if (this.closed) return Promise.reject(new TributaryError('shutting_down'));
    if (this.producers === null && this.producersError === null) {
      // Still rebuilding (just opened): queue behind it; then-callbacks run in call order, so order holds.
      return this.producersReady.then(() => this.idempotentWhenLoaded(records, b));
    }
    return this.idempotent(records, b);
  }

  /** appendIdempotent() once the producer state is loaded; `hooks` let a transactional append track its offsets. */
  private idempotent(
    records: RecordInput[] | ScannedBatch,
    b: IdempotentBatch,
    hooks?: { start(): void; ok(res: { baseOffset: number }): void; none(): void; current(e: BatchEntry): boolean },
  ): Promise<IdempotentAppend> {
    if (this.producersError)
      return Promise.reject(new TributaryError('storage_error', { reason: `producer state unavailable: ${this.producersError.message}` }));
    const table = this.producers!;
    let check: CheckResult;
    try {
      check = table.check(b.producerId, b.epoch, b.firstSequence, b.lastSequence, b.anyFirstSequence === true);
    } catch (err) {
      return Promise.reject(err);
    }
    if (check.kind === 'duplicate') {
      const e = check.entry;
      if (hooks && !hooks.current(e)) return Promise.reject(reusedSequence(b, e));
      // A duplicate writes nothing: it neither opens nor extends a transaction.
      if (e.result) return e.result.then((r) => ({ ...r, duplicate: true }));
      return Promise.resolve({ baseOffset: e.baseOffset, lastOffset: e.lastOffset, timestamp: e.timestamp, duplicate: true });
    }
    try {
      hooks?.start();
    } catch (err) {
      return Promise.reject(err);
    }
    const entry = table.begin(b.producerId, b.epoch, b.firstSequence, b.lastSequence, Date.now());
    const guard = table.writeGuard(b.producerId, b.epoch, entry);
    const appending = Array.isArray(records) ? this.log.append(records, guard) : this.log.appendWire(records, guard, b.firstSequence);
    const result = appending.then(
      (res) => {
        table.complete(entry, res);
        hooks?.ok(res);
        return this.appended(res);
      },
      (err: unknown) => {
        guard.failed();
        hooks?.none();
        throw err;
      },
    );
    entry.result = result;
    return result.then((r) => ({ baseOffset: r.baseOffset, lastOffset: r.lastOffset, timestamp: r.timestamp, duplicate: false }));
  }

  /** The producer state (for tests and inspection); undefined until loaded. */
  producerState(): ProducerStateTable | undefined {
    return this.producers ?? undefined;
  }

  /** Resolves once the producer state is rebuilt (or failed to). */
  whenProducerStateReady(): Promise<void> {
    return this.producersReady;
  }

  /** Whether read_committed must wait for the index rebuild (a snapshot exists: it may know aborts). */
  private get txnPending(): boolean {
    return this.txns === null && this.txnError === null && this.txnFloor !== Infinity;
  }

  private appended(res: { baseOffset: number; lastOffset: number; timestamp: number }): { baseOffset: number; lastOffset: number; timestamp: number } {
    if (this.replicated) {
      this.localDurable(res.lastOffset + 1);
      return res;
    }
    if (res.lastOffset + 1 > this.log.highWatermark) {
      this.log.setHighWatermark(res.lastOffset + 1);
      this.notify();
    }
    return res;
  }

  // ---- replication (cluster mode: src/cluster/replica-manager.ts drives these) ----

  /** Cluster mode: the HWM follows the in-sync replicas, not this replica's own appends. */
  enableReplication(onDurable: () => void): void {
    this.replicated = true;
    this.durableEnd = this.log.logEndOffset;
    this.onDurable = onDurable;
  }

  get isReplicated(): boolean {
    return this.replicated;
  }

  /** What this replica holds durably: its share of the HWM (cluster mode; the HWM otherwise). */
  get localEnd(): number {
    return this.replicated ? this.durableEnd : this.log.highWatermark;
  }

  private localDurable(end: number): void {
    if (end > this.durableEnd) this.durableEnd = end;
    if (this.endWaiters) for (const w of this.endWaiters) if (this.durableEnd > w.offset) w.wake();
    this.onDurable?.();
  }

  /** The leader moved the HWM (never past this replica's log end); readers and acks=all waiters wake. */
  setReplicatedHighWatermark(o: number): void {
    const v = Math.min(o, this.log.logEndOffset);
    if (v === this.log.highWatermark) return;
    this.log.setHighWatermark(v);
    this.notify();
  }

  /** Resolves once this replica holds offset `offset` durably (a follower's fetch long-polls on it). */
  waitForLogEnd(offset: number, timeoutMs: number, signal?: AbortSignal): Promise<boolean> {
    return park((this.endWaiters ??= new Set()), (wake) => ({ offset, wake }), () => this.durableEnd > offset, this.closed, timeoutMs, signal);
  }

  /** A follower stores its leader's records as they are, and keeps producer state and transactions as the leader's. */
  appendReplica(records: LogRecord[] | StoredAppends): Promise<void> {
    return this.track(() => this.replica(records));
  }

  private async replica(records: LogRecord[] | StoredAppends): Promise<void> {
    if (this.closed) throw new TributaryError('shutting_down');
    if (replicaCount(records) === 0) return;
    await Promise.all([this.txnReady, this.producersReady]);
    const write = this.log.appendReplica(records);
    const slow = failpointDelay(`replica.append:${this.topic}`);
    if (slow) {
      write.catch(() => {}); // awaited below
      await slow;
    }
    const res = await write;
    replayReplica(records, this.producers, this.txns);
    this.localDurable(res.lastOffset + 1);
  }

  /** A follower drops a tail its new leader lacks (leader-epoch truncation); both states are rebuilt from the rest. */
  truncateTo(offset: number): Promise<void> {
    return this.appends.exclusive(async () => {
      // Appends already begun have touched the indexes: let them land first, so the rebuild below
      // starts from a log and indexes that agree; later ones wait for it (AppendTracker).
      await Promise.all([this.txnReady, this.producersReady]);
      await this.appends.drained();
      if (offset >= this.log.logEndOffset) return;
      await this.log.truncateTo(offset);
      await this.reload();
    });
  }

  /**
   * This broker stopped being a replica (cluster/replica-moves.ts): once the appends begun have landed,
   * and only if `unhosted()` still holds then (the role may have flipped back meanwhile), the log and its
   * directory go with `epochs`' history (partition-release.ts) and the producer state and transaction
   * index start again from the empty log. False: refused, nothing changed.
   */
  release(unhosted: () => boolean, epochs?: ReleasedEpochs): Promise<boolean> {
    return this.appends.exclusive(async () => {
      await Promise.all([this.txnReady, this.producersReady]);
      await this.appends.drained();
      let stopped = false;
      try {
        return await releaseFiles(this.log, this.snapshots, unhosted, epochs, () => {
          stopped = true;
        });
      } finally {
        if (stopped) await this.reload();
      }
    });
  }

  /** The log was cut or released: both states are rebuilt from what is left. */
  private async reload(): Promise<void> {
    this.durableEnd = Math.min(this.durableEnd, this.log.logEndOffset);
    this.snapshots.stop();
    await this.snapshots.settled();
    const txns = await this.snapshots.loadTxns();
    const producers = await this.snapshots.loadProducers();
    // Rebuilt from what is left, so an earlier failure to load them no longer holds.
    this.txns = txns;
    this.txnError = null;
    this.producers = producers;
    this.producersError = null;
    this.notify();
  }

  private track<T>(start: () => Promise<T>): Promise<T> {
    return this.appends.track(start);
  }

  /** No append-like operation in flight and no truncation running. */
  get idle(): boolean {
    return this.appends.idle;
  }

  /** Resolves once idle: every append begun (a follower's replica append included) has landed. */
  quiesced(): Promise<void> {
    return this.appends.quiesced();
  }

  /** Validate a starting offset against the retained range. */
  checkOffset(offset: number): void {
    if (offset < this.earliest || offset > this.logEndOffset) {
      throw new TributaryError('OFFSET_OUT_OF_RANGE', { requested: offset, earliest: this.earliest, latest: this.lastStableOffset });
    }
  }

  /**
   * Records from `offset`: under read_uncommitted up to the HWM, everything (control records included);
   * under read_committed up to the LSO, without control records and records of aborted transactions.
   */
  async read(offset: number, opts: { maxRecords: number; maxBytes: number; isolation: Isolation }): Promise<ReadResult> {
    this.checkOffset(offset);
    const committed = opts.isolation === 'read_committed';
    if (committed && this.txnPending) await this.txnReady;
    if (committed && this.txnError) this.txnIndexOrThrow();
    // Null only for a log without a snapshot (no transactions) still being scanned: nothing aborted.
    const index = this.txns;
    const end = committed ? this.lastStableOffset : this.highWatermark;
    if (offset >= end) return { records: [], nextOffset: offset };
    const raw = await this.log.read(offset, { maxRecords: opts.maxRecords, maxBytes: opts.maxBytes, maxOffset: end });
    if (raw.length === 0) return { records: [], nextOffset: offset };
    const nextOffset = raw[raw.length - 1]!.offset + 1;
    if (!committed) return { records: raw, nextOffset };
    const aborted = index ? index.abortedFilter(raw[0]!.offset, nextOffset) : null;
    // Copy only when there is a record to drop (the usual read has none).
    const drop = (r: LogRecord) => (r.attributes & RecordAttr.CONTROL) !== 0 || aborted?.(r.offset, r.producerId, r.attributes) === true;
    for (let i = 0; i < raw.length; i++) {
      if (drop(raw[i]!)) return { records: raw.filter((r) => !drop(r)), nextOffset };
    }
    return { records: raw, nextOffset };
  }

  /**
   * The reply batch of read() + encodeBatch(logRecordsToBatch(...)) (with `wire.format`: one RecordBatch v2)
   * written straight from the log's tail cache (consecutive offsets: those in reach are known before the
   * read), or null when the tail cache cannot serve it (or it is empty): then readWireFromDisk() or read().
   */
  readWire(offset: number, opts: WireReadOptions, wire: WireTarget): WireReply | null {
    const q = this.wireQuery(offset, opts, wire);
    return q && this.log.readWire(offset, q.opts, { ...q.w, skipAborted: q.w.abortedFor?.(offset, Math.min(q.opts.maxOffset, offset + opts.maxRecords)) });
  }

  /** readWire from the segment files: no object per record or header (read(), after a restart, built 1.9 GB of them). */
  async readWireFromDisk(offset: number, opts: WireReadOptions, wire: WireTarget): Promise<WireReply | null> {
    if (opts.isolation === 'read_committed' && this.txnPending) await this.txnReady;
    const q = this.wireQuery(offset, opts, wire);
    return q && this.log.readWireFromDisk(offset, q.opts, q.w);
  }

  /** The log's side of a wire read; null when read() must answer (read_committed: no transaction index yet). */
  private wireQuery(offset: number, opts: WireReadOptions, wire: WireTarget): { opts: ReadOptions & { maxOffset: number }; w: WireReadRequest } | null {
    if (offset < this.earliest || offset > this.logEndOffset) return null;
    const committed = opts.isolation === 'read_committed';
    if (committed && (this.txnPending || this.txnError)) return null;
    const end = committed ? this.lastStableOffset : this.highWatermark;
    if (offset >= end) return null;
    // Aborted records are left out by read()'s predicate; markers also at either isolation in a RecordBatch v2 reply (Kafka's Fetch reads so).
    const index = committed ? this.txns : null;
    const abortedFor = index ? (from: number, to: number) => index.abortedFilter(from, to) : null;
    return { opts: { maxRecords: opts.maxRecords, maxBytes: opts.maxBytes, maxOffset: end }, w: { ...wire, partition: this.id, skipControl: committed || wire.format === 'record_batch_v2', abortedFor } };
  }

  /**
   * Resolves once data past `offset` is readable under `isolation` (read_committed: the LSO passed it,
   * e.g. because a marker landed; read_uncommitted: the HWM), the wait ends, the signal aborts or the
   * partition closes.
   */
  waitForData(offset: number, timeoutMs: number, signal?: AbortSignal, isolation: Isolation = 'read_committed'): Promise<boolean> {
    const committed = isolation === 'read_committed';
    const ready = () => (committed ? this.lastStableOffset : this.highWatermark) > offset;
    return park<Waiter>((this.waiters ??= new Set()), (wake) => ({ offset, committed, wake }), ready, this.closed, timeoutMs, signal);
  }

  private notify(): void {
    // Whatever moved the HWM or the LSO changed what the snapshots hold.
    this.snapshots.changed();
    if (this.waiters === null || this.waiters.size === 0) return;
    const hwm = this.highWatermark;
    const lso = this.lastStableOffset;
    for (const w of this.waiters) if ((w.committed ? lso : hwm) > w.offset) w.wake();
  }

  /** Every parked read wakes and checks again: at close, and when this broker stops leading the partition. */
  wakeAll(): void {
    for (const w of [...(this.waiters ?? []), ...(this.endWaiters ?? [])]) w.wake();
  }

  /** Wake every waiter and refuse new waits: shutdown must not sit out long polls. */
  beginClose(): void {
    this.closed = true;
    this.wakeAll();
  }

  async close(): Promise<void> {
    this.closed = true;
    this.wakeAll();
    this.snapshots.stop();
    await this.producersReady;
    await this.txnReady;
    await this.log.close();
    // After the log is flushed: the state then covers every append up to the log end.
    if (this.producers) await this.snapshots.writeProducers(this.producers, this.log.logEndOffset).catch(() => {});
    if (this.txns) await this.snapshots.writeTxns(this.txns, this.log.logEndOffset).catch(() => {});
  }

  async destroy(): Promise<void> {
    this.closed = true;
    this.wakeAll();
    this.snapshots.stop();
    await this.producersReady;
    await this.txnReady;
    await this.snapshots.settled();
    await this.log.destroy();
  }

  get isClosed(): boolean {
    return this.closed;
  }
}

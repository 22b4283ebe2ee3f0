/**
 * The sender: takes a partition's ready batches from the accumulator and sends them to the partition
 * leader (pipelined up to maxInFlightPerPartition), retries failed batches through the retry module one
 * at a time in send order, and numbers idempotent batches (docs/sdk.md, "Producer"; the broker's side is
 * docs/architecture.md, "Idempotent producers").
 */
import { isErrorReply, parseError } from 'tributary-protocol/command.js';
import type { Connection } from 'tributary-protocol/connection.js';
import { TributaryError } from 'tributary-protocol/errors.js';
import type { Cluster } from './cluster.js';
import { channels, publish } from './events.js';
import type { ProducerEvents } from './producer-messages.js';
import type { ResolvedProducerOptions } from './producer-options.js';
import { cancelLinger, needsNewNumbers, type PartitionQueue, type ProducerBatch, type RecordAccumulator } from './record-accumulator.js';
import { DEFAULT_RETRY, isRetriable, retry } from './retry.js';

interface BatchAck {
  partition: number;
  base_offset: number;
  last_offset?: number;
  count?: number;
}

export type SenderOptions = Pick<ResolvedProducerOptions, 'acks' | 'maxInFlightPerPartition' | 'requestTimeoutMs' | 'retry' | 'idempotent'>;

/** What the sender needs of its producer: the facade (producer.ts) provides it, so this file never imports it. */
export interface SenderHost {
  readonly cluster: Cluster;
  readonly accumulator: RecordAccumulator;
  readonly options: SenderOptions;
  /** Aborted by a forced close: retries stop and everything pending fails with client_closed. */
  readonly signal: AbortSignal;
  emit<K extends keyof ProducerEvents & string>(event: K, payload: ProducerEvents[K]): void;
  listenerCount(event: keyof ProducerEvents & string): number;
  /** A completed batch's bytes are free again (maxBufferedBytes). */
  release(bytes: number): void;
  /** The topic or partition turned out not to exist: the cached partition count is looked up again. */
  forgetPartitionCount(topic: string): void;
}

export class ProducerSender {
  private readonly cluster: Cluster;
  private readonly accumulator: RecordAccumulator;
  private readonly options: SenderOptions;
  private readonly signal: AbortSignal;
  private readonly acksZero: boolean;

  constructor(private readonly host: SenderHost) {
    this.cluster = host.cluster;
    this.accumulator = host.accumulator;
    this.options = host.options;
    this.signal = host.signal;
    this.acksZero = this.options.acks === 0;
  }

  /** Sends what the partition may send now. One pump per partition at a time keeps batches in order. */
  pump(q: PartitionQueue): void {
    if (q.pumping) {
      q.again = true;
      return;
    }
    q.pumping = true;
    void this.pumpLoop(q);
  }

  private async pumpLoop(q: PartitionQueue): Promise<void> {
    const max = this.options.maxInFlightPerPartition;
    try {
      do {
        q.again = false;
        if (!this.accumulator.canSend(q, max)) continue;
        let conn: Connection;
        try {
          conn = await this.cluster.connection(await this.cluster.leaderFor(q.topic, q.partition, this.signal), this.signal);
        } catch (err) {
          // No route to the leader: the head batch takes the failure (and its retries), the rest wait behind it.
          const [head] = this.accumulator.takeReady(q, Math.min(max, q.inFlight.size + 1));
          if (head && this.expired(q, head)) {
            this.complete(q, head, q.failure!);
            q.again = true; // the next one's turn (complete() pumps only after a dispatched batch)
          } else if (head) {
            this.startBatch(head, q);
            this.onAttemptFailure(q, head, err);
          }
          continue;
        }
        // Written synchronously one after another: the connection keeps them in this order.
        for (const b of this.accumulator.takeReady(q, max)) {
          if (this.expired(q, b)) {
            this.complete(q, b, q.failure!);
            q.again = true; // the next one's turn (complete() pumps only after a dispatched batch)
            continue;
          }
          this.startBatch(b, q);
          this.transmit(conn, b).then(
            (ack) => this.complete(q, b, null, ack),
            (err) => this.onAttemptFailure(q, b, err),
          );
        }
      } while (q.again);
    } finally {
      // Cleared in the same turn the loop ends: a pump() after this point starts a new loop, none is lost.
      q.pumping = false;
    }
  }

  /**
   * Queued behind a failure of its partition (the leader gone, say) longer than the retry budget
   * (retry.maxElapsedMs, counted from a batch's creation): failed unsent rather than given a budget of its
   * own after the ones before it, so a queue fails within about one budget, not one budget per batch.
   */
  private expired(q: PartitionQueue, b: ProducerBatch): boolean {
    return q.failure !== undefined && performance.now() - b.createdAt >= (this.options.retry.maxElapsedMs ?? DEFAULT_RETRY.maxElapsedMs);
  }

  private startBatch(b: ProducerBatch, q: PartitionQueue): void {
    if (this.options.idempotent && b.firstSequence < 0) {
      // Numbered in send order; a retry sends the same numbers (that is what makes it detectable).
      if (q.bumpEpoch) {
        q.bumpEpoch = false;
        q.epoch++;
        q.nextSequence = 0;
      }
      this.number(q, b);
    }
    b.dispatched = true;
    b.startedAt = performance.now();
    cancelLinger(b);
  }

  private number(q: PartitionQueue, b: ProducerBatch): void {
    b.firstSequence = q.nextSequence;
    b.epoch = q.epoch;
    q.nextSequence += b.count;
    // The records already carry the producer id (the accumulator writes it); their numbers go in place.
    b.frame.setNumbers(b.epoch, b.firstSequence);
  }

  /**
   * New numbers for a batch the broker showed it never appended (and, by the sequence rule, nothing
   * numbered after it in that epoch either): the next ones of a newer epoch. Only the oldest unsettled
   * batch is renumbered, and new batches wait meanwhile, so send order holds and nothing is written twice.
   */
  private renumber(q: PartitionQueue, b: ProducerBatch): void {
    if (q.bumpEpoch || q.epoch <= b.epoch) {
      q.bumpEpoch = false;
      q.epoch = Math.max(q.epoch, b.epoch) + 1;
      q.nextSequence = 0;
    }
    this.number(q, b);
  }

  /** One attempt: the batch frame on `conn`, its reply parsed (with a reply deadline). */
  private async transmit(conn: Connection, b: ProducerBatch): Promise<BatchAck> {
    if (!conn.extensions && b.frame.extended) {
      throw new TributaryError('UNSUPPORTED_FEATURE', { feature: 'record_extensions_v1', reason: 'the broker cannot carry record headers or timestamps' });
    }
    const frame = b.firstSequence >= 0 ? b.frame.frame(true, b.firstSequence, b.firstSequence + b.count - 1, conn.extensions) : b.frame.frame(false, 0, 0, conn.extensions);
    // Written without a copy: the batch's buffer is only reused once a reply shows the broker has it all.
    const request = conn.requestFramed(frame);
    request.catch(() => {}); // settled below or abandoned on timeout
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<never>((_, reject) => {
      timer = setTimeout(() => {
        reject(new TributaryError('request_timeout', { reason: 'no reply to the batch', timeoutMs: this.options.requestTimeoutMs }));
        // A reply that never comes blocks every reply behind it: drop the connection (its other
        // requests fail with connection_lost and are retried on a new one).
        conn.abandon(new TributaryError('connection_lost', { reason: 'no reply to an earlier batch', timeoutMs: this.options.requestTimeoutMs }));
      }, this.options.requestTimeoutMs);
    });
    try {
      const reply = await Promise.race([request, timeout]);
      if (reply.kind !== 'text') throw new TributaryError('internal_error', { reason: 'unexpected batch reply to a produce batch' });
      if (isErrorReply(reply.text)) throw parseError(reply.text);
      if (this.acksZero) return { partition: b.partition, base_offset: -1 };
      let ack: BatchAck;
      try {
        ack = JSON.parse(reply.text) as BatchAck;
      } catch {
        throw new TributaryError('internal_error', { reason: `unexpected reply ${reply.text.slice(0, 80)}` });
      }
      if (typeof ack.base_offset !== 'number') throw new TributaryError('internal_error', { reason: `unexpected reply ${reply.text.slice(0, 80)}` });
      return ack;
    } finally {
      clearTimeout(timer);
    }
  }

  /**
   * A failed attempt. Retriable errors make the batch wait for a retry; retries run one at a time, oldest
   * unsettled batch first, and while one waits the partition sends nothing new.
   */
  private onAttemptFailure(q: PartitionQueue, b: ProducerBatch, err: unknown): void {
    this.cluster.onLeaderError(q.topic, q.partition, err);
    if (err instanceof TributaryError && (err.code === 'topic_not_found' || err.code === 'partition_not_found')) {
      this.host.forgetPartitionCount(q.topic);
      this.cluster.invalidateMetadata(q.topic);
    }
    if (this.signal.aborted) {
      this.complete(q, b, new TributaryError('client_closed'));
      return;
    }
    const verdict = this.sequenceVerdict(q, b, err);
    if (verdict === 'final' || (verdict === undefined && !isRetriable(err))) {
      this.complete(q, b, err as Error);
      return;
    }
    b.awaitingRetry = true;
    b.retryError = err;
    b.resendAtOnce = verdict !== undefined;
    q.retrying++;
    this.runRetries(q);
  }

  /**
   * Idempotent batches refused for their numbers (out_of_order_sequence, or stale_producer_epoch for
   * numbers already given up): `wait` while an earlier batch of the partition is unsettled (it was sent
   * ahead of that one and fits once it is appended); for the oldest unsettled batch a gap before its
   * numbers proves nothing from it on was appended (`renumber`); anything else is `final`.
   */
  private sequenceVerdict(q: PartitionQueue, b: ProducerBatch, err: unknown): 'wait' | 'renumber' | 'final' | undefined {
    if (b.firstSequence < 0 || !(err instanceof TributaryError)) return undefined;
    const outOfOrder = err.code === 'out_of_order_sequence';
    if (!outOfOrder && !(err.code === 'stale_producer_epoch' && needsNewNumbers(q, b))) return undefined;
    if (needsNewNumbers(q, b)) return 'renumber';
    if (q.inFlight.values().next().value !== b) return 'wait';
    const expected = Number(err.fields.expected);
    if (outOfOrder && Number.isSafeInteger(expected) && expected <= b.firstSequence) {
      q.lost.set(b.epoch, Math.min(q.lost.get(b.epoch) ?? b.firstSequence, b.firstSequence));
      return 'renumber';
    }
    return 'final';
  }

  /** Retries waiting batches in send order: only the oldest unsettled batch, once its attempt failed. */
  private runRetries(q: PartitionQueue): void {
    if (q.retryRunning) return;
    q.retryRunning = true;
    void (async () => {
      try {
        for (;;) {
          const head = q.inFlight.values().next().value;
          if (!head?.awaitingRetry) break;
          await this.retryBatch(q, head);
        }
      } finally {
        q.retryRunning = false;
        this.pump(q);
      }
    })();
  }

  private async retryBatch(q: PartitionQueue, b: ProducerBatch): Promise<void> {
    const first = b.retryError;
    const atOnce = b.resendAtOnce;
    let error: Error | null = null;
    let ack: BatchAck | undefined;
    // The retry budget (retry.maxElapsedMs) counts from the batch's creation, not from its turn to be
    // retried: the batches queued behind a failing one would each take a full budget after it, one after
    // another (hours for a long queue when the broker is gone). An attempt's own lookups stop with it.
    let left = (this.options.retry.maxElapsedMs ?? DEFAULT_RETRY.maxElapsedMs) - (performance.now() - b.createdAt);
    // A split part is sent at least once: failed unsent, an innocent send's records would get the refusal
    // of another send's record as their error (docs/sdk.md, "Producer").
    if (b.untried) left = Math.max(left, this.options.requestTimeoutMs);
    b.untried = false;
    const expired = new AbortController();
    const timer = setTimeout(() => expired.abort(new TributaryError('request_timeout', { reason: 'the batch outlived retry.maxElapsedMs' })), Math.max(0, left));
    try {
      if (left <= 0) throw first;
      ack = await retry(
        async (attempt) => {
          // The attempt that already failed: retry() backs off before the next (unless it is to be resent now).
          if (attempt === 0 && !atOnce) throw first;
          return await this.resend(q, b, expired.signal);
        },
        {
          ...this.options.retry,
          maxElapsedMs: left,
          signal: AbortSignal.any([this.signal, expired.signal]),
          onRetry: (e, attempt, delayMs) => {
            this.options.retry.onRetry?.(e, attempt, delayMs);
            this.host.emit('retry', { error: e as Error, topic: q.topic, partition: q.partition, attempt, delayMs });
          },
        },
      );
    } catch (err) {
      error = this.signal.aborted ? new TributaryError('client_closed') : expired.signal.aborted ? (expired.signal.reason as Error) : (err as Error);
    } finally {
      clearTimeout(timer);
      b.awaitingRetry = false;
      b.retryError = undefined;
      q.retrying--;
    }
    this.complete(q, b, error, ack);
  }

  /** One retry of the oldest unsettled batch, with new numbers when the broker showed the old ones unusable. */
  private async resend(q: PartitionQueue, b: ProducerBatch, expired: AbortSignal): Promise<BatchAck> {
    const signal = AbortSignal.any([this.signal, expired]);
    for (let renumbered = 0; ; renumbered++) {
      if (needsNewNumbers(q, b)) this.renumber(q, b);
      try {
        const conn = await this.cluster.connection(await this.cluster.leaderFor(q.topic, q.partition, signal), signal);
        return await this.transmit(conn, b);
      } catch (err) {
        this.cluster.onLeaderError(q.topic, q.partition, err);
        // Renumbered at most twice in a row: the second time into a fresh epoch at 0, which fits.
        if (renumbered < 2 && this.sequenceVerdict(q, b, err) === 'renumber') continue;
        throw err;
      }
    }
  }

  /** A batch is done: settle its records, free its buffer, let the partition send more. */
  private complete(q: PartitionQueue, b: ProducerBatch, err: Error | null, ack?: BatchAck): void {
    if (b.completed) return;
    if (err && this.split(q, b, err)) return;
    b.completed = true;
    cancelLinger(b);
    q.inFlight.delete(b);
    // A refusal of the batch's own records (record_too_large) says nothing of the partition: the batches
    // queued behind it are sent whatever their age, not failed unsent with another send's refusal.
    q.failure = err && !(err instanceof TributaryError && err.code === 'record_too_large') ? err : undefined;
    if (q.inFlight.size === 0) q.lost.clear();
    const durationMs = b.dispatched ? Math.round(performance.now() - b.startedAt) : 0;
    // Its numbers may or may not have reached the log: the partition continues in a new epoch.
    if (err && b.firstSequence >= 0 && b.epoch === q.epoch) q.bumpEpoch = true;
    const records = b.count;
    if (err) {
      for (let r = 0; r < b.sinks.length; r++) b.sinks[r]!.settle(b.runFirst[r]!, b.runCount[r]!, err, b.topic, b.partition, -1);
      if (this.host.listenerCount('error') > 0) this.host.emit('error', { error: err, topic: b.topic, partition: b.partition, records });
      publish(channels.producerSend, { topic: b.topic, partition: b.partition, records, bytes: b.bytes, durationMs, error: err });
    } else {
      const partition = ack?.partition ?? b.partition;
      const base = ack?.base_offset ?? -1;
      // One call per run of a send's messages: the records of a run sit at consecutive offsets.
      let offset = base;
      for (let r = 0; r < b.sinks.length; r++) {
        const n = b.runCount[r]!;
        b.sinks[r]!.settle(b.runFirst[r]!, n, null, b.topic, partition, base < 0 ? -1 : offset);
        offset += n;
      }
      this.host.emit('send', { topic: b.topic, partition, records, durationMs, baseOffset: base });
      publish(channels.producerSend, { topic: b.topic, partition, records, bytes: b.bytes, durationMs, baseOffset: base });
    }
    this.host.release(b.reserved);
    // Only an acknowledged batch's buffer is reused: after a failure a write of it may still be queued on a closing socket.
    if (!err) this.accumulator.recycle(b);
    b.markDone();
    // The next oldest batch may be waiting for its retry turn.
    if (q.retrying > 0) this.runRetries(q);
    if (b.dispatched) this.pump(q);
  }

  /**
   * A batch of several records refused as record_too_large: one oversized record must not fail the sends
   * it happened to share a batch with, nor a batch too large only as a whole fail its send (docs/sdk.md,
   * "Producer"). Each send's records are sent again in a batch of their own, or a single send's records
   * in two halves (split again if refused again), in the batch's place (first in line, in order), so only
   * a record that is itself too large fails, and its send. The broker appended nothing of the batch:
   * idempotent parts take its numbers, in order, so a split costs no epoch (16-bit); only when the
   * partition's numbering moved on meanwhile do they take new ones, as after a gap.
   */
  private split(q: PartitionQueue, b: ProducerBatch, err: Error): boolean {
    // Only a refusal of the batch itself: one failed unsent (expired behind another's failure) is not split.
    if (!(err instanceof TributaryError) || err.code !== 'record_too_large' || b.count < 2 || !b.dispatched || this.signal.aborted || !q.inFlight.has(b)) return false;
    const parts = this.accumulator.splitRefused(b);
    // The batch's numbers still fit unless its epoch is done with (a batch failed for good) or a gap was
    // already reported before them; then the parts, and the batches behind them, are renumbered.
    const numbered = b.firstSequence >= 0;
    if (numbered && (b.epoch !== q.epoch || q.bumpEpoch || needsNewNumbers(q, b))) q.lost.set(b.epoch, Math.min(q.lost.get(b.epoch) ?? b.firstSequence, b.firstSequence));
    let sequence = b.firstSequence;
    for (const part of parts) {
      if (numbered) {
        part.firstSequence = sequence;
        part.epoch = b.epoch;
        part.frame.setNumbers(b.epoch, sequence);
        sequence += part.count;
      }
      part.dispatched = true;
      part.startedAt = performance.now();
      part.awaitingRetry = true;
      part.retryError = err;
      part.resendAtOnce = true;
      part.untried = true;
      q.retrying++;
    }
    const inFlight = [...q.inFlight];
    q.inFlight.clear();
    for (const x of inFlight) {
      if (x !== b) q.inFlight.add(x);
      else for (const part of parts) q.inFlight.add(part);
    }
    b.completed = true;
    cancelLinger(b);
    void Promise.all(parts.map((part) => part.done)).then(() => b.markDone());
    this.runRetries(q);
    return true;
  }

  /** A forced close: fails every batch not sent yet with `closed`. */
  failQueued(closed: Error): void {
    for (const q of this.accumulator.all()) {
      for (const b of q.batches.splice(0)) this.complete(q, b, closed);
      // In-flight batches fail when their connections close (and their retries see the abort).
    }
  }
}

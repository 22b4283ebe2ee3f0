/**
 * The per-partition readers: one loop per installed partition, reading with CONSUME long polls or a
 * STREAM (the `mode` option), handing batches to the sink of run() or the iterator, and the flow
 * control (pause, resume, seek) that steers them. Positions follow docs/sdk.md, "Offsets"; re-routing
 * after a failed read follows "Routing".
 */
import type { Batch, RecordMaker } from 'tributary-protocol/batch.js';
import { RecordAttr, type RecordHeader } from 'tributary-protocol/record.js';
import { parseLine } from 'tributary-protocol/command.js';
import { TributaryError } from 'tributary-protocol/errors.js';
import type { ConsumedMessage, ConsumerContext } from './consumer-context.js';
import { configError } from './consumer-options.js';
import { channels, publish } from './events.js';
import type { PartitionWorker } from './partition-worker.js';
import { abortableSleep, backoffSleep, isRetriable } from './retry.js';
import { sessionHeld } from './session-guard.js';
import { Signal } from './wake-signal.js';

/** Where fetched batches go: run()'s handlers or the async iterator. */
export type Sink = (worker: PartitionWorker, messages: ConsumedMessage[]) => Promise<void>;

/** What a read refused as fenced tells the group membership (passed in: the membership starts the readers). */
export interface FencedReadOutcomes {
  requestRebalance(reason: string): void;
  memberLost(reason: TributaryError): void;
  partitionLost(w: PartitionWorker, reason: TributaryError): void;
}

/** The member and generation a read was sent as (fenced reads, docs/protocol.md). */
interface ReadAs {
  member: string | undefined;
  generation: number;
}

export class PartitionFetcher {
  sink: Sink | undefined;
  /**
   * Whether a sink call holds one of `partitionsConsumedConcurrently` slots. A windowed sink (run() with
   * `concurrency`) returns once a batch is admitted and bounds its handlers itself, so it takes none.
   */
  private slotted = true;
  /** Batches being handled now, at most `partitionsConsumedConcurrently`. */
  private running = 0;
  /** Woken when a slot frees up, a sink is set or the consumer closes. */
  readonly slots = new Signal();

  constructor(
    private readonly ctx: ConsumerContext,
    private readonly group: FencedReadOutcomes,
  ) {}

  /** Starts reading: batches go to `sink` from now on. */
  setSink(sink: Sink, opts: { slotted?: boolean } = {}): void {
    this.sink = sink;
    this.slotted = opts.slotted ?? true;
    this.slots.wake();
  }

  async readLoop(w: PartitionWorker): Promise<void> {
    const o = this.ctx.options;
    const cluster = this.ctx.cluster;
    const onAbort = () => void w.conn?.close();
    w.signal.addEventListener('abort', onAbort, { once: true });
    try {
      while (!w.signal.aborted) {
        if (w.paused) {
          // Any read that was in flight when pause() came has ended (its batch dropped): from here on
          // the partition delivers nothing until resume().
          publish(channels.consumerPaused, { group: o.groupId, partition: w.partition, offset: w.position });
          await w.resumed.wait(w.signal);
          continue;
        }
        if (!this.sink) {
          await this.slots.wait(w.signal, 100);
          continue;
        }
        const as: ReadAs = { member: this.ctx.memberId, generation: this.ctx.generation };
        try {
          if (!w.conn || w.conn.closed) w.conn = await cluster.dedicated(await cluster.leaderFor(o.topic, w.partition, w.signal), w.signal);
          if (o.mode === 'stream') await this.streamOnce(w, as);
          else await this.pollOnce(w, as);
          w.readFailures = 0;
        } catch (err) {
          if (w.signal.aborted) break;
          let e = err as TributaryError;
          if (await this.fenced(w, e, as)) continue;
          if (e.code === 'OFFSET_OUT_OF_RANGE') {
            const range = await this.offsetRange(w.partition, w.signal).catch(() => undefined);
            if (range && (w.position < range.earliest || w.position > range.end)) {
              if (o.autoOffsetReset === 'error') {
                this.ctx.crash(e, false);
                await w.resumed.wait(w.signal);
                continue;
              }
              w.position = o.autoOffsetReset === 'earliest' ? range.earliest : range.latest;
              continue;
            }
            // The partition's leader can serve this position (or could not be asked): the answer came from
            // a broker whose copy is gone or behind (a leader being moved off drops its copy). Resetting
            // would skip or redeliver records; the read is routed again instead (docs/sdk.md, "Offsets").
            e = new TributaryError('NOT_LEADER', { topic: o.topic, partition: w.partition, reason: `out of range at this broker, not at the leader (${e.message})` });
          }
          if (e.code === 'consumer_rebalancing' || e.code === 'client_closed') break;
          cluster.onLeaderError(o.topic, w.partition, e);
          if (w.conn) await cluster.release(w.conn).catch(() => {});
          w.conn = undefined;
          if (!isRetriable(e)) this.ctx.crash(e, false);
          w.readFailures++;
          await backoffSleep(Math.min(w.readFailures, 6), { initialDelayMs: 50, maxDelayMs: 2000 }, w.signal);
        }
      }
    } finally {
      w.signal.removeEventListener('abort', onAbort);
      if (w.conn) await cluster.release(w.conn).catch(() => {});
      w.conn = undefined;
      // revocation and close wait for the partition's running handlers, as for the one-at-a-time sink
      await w.window?.idle();
    }
  }

  /**
   * A read the broker refused because of the fence (docs/sdk.md, "Fenced reads"): true when it was
   * handled here and the loop goes on (or ends, its signal aborted). Answers about a member id or a
   * generation this consumer has left behind since the read was sent are stale: the read is sent again.
   */
  private async fenced(w: PartitionWorker, e: TributaryError, as: ReadAs): Promise<boolean> {
    if (!(e instanceof TributaryError) || e.errorClass !== 'fencing') return false;
    if (as.member !== this.ctx.memberId) return true;
    switch (e.code) {
      case 'member_not_found':
        this.group.memberLost(e);
        this.group.requestRebalance('member expired');
        return true;
      case 'FENCED_INSTANCE_ID':
        this.ctx.crash(e, true);
        return true;
      case 'NOT_OWNER':
      case 'REBALANCE_IN_PROGRESS':
        this.group.partitionLost(w, e);
        return true;
      case 'GEN_MISMATCH':
        // The member rejoined at another generation than the read carried (this consumer's own rejoin
        // racing the read): no partition moved for that; read again once the rejoin is through.
        if (as.generation === this.ctx.generation) {
          this.group.requestRebalance('generation mismatch on a read');
          await abortableSleep(50, w.signal);
        }
        return true;
      default:
        return false;
    }
  }

  private fetchFields(w: PartitionWorker, as: ReadAs): Record<string, string | number | undefined> {
    const o = this.ctx.options;
    return {
      topic: o.topic,
      partition: w.partition,
      offset: w.position,
      group: o.groupId,
      member: as.member,
      // A member fences its reads; none (a member lost, rejoining fresh) would make the read unfenced.
      generation: as.member === undefined ? undefined : as.generation,
      isolation: o.isolation,
      batch: o.maxBatchRecords,
      max_bytes: o.maxBatchBytes,
    };
  }

  /** The batch's user records: transaction markers (control records) are never delivered (docs/sdk.md, "Offsets"). */
  private toMessages(w: PartitionWorker, batch: Batch<FetchedMessage>): ConsumedMessage[] {
    const records = batch.records;
    let control = 0;
    for (let i = 0; i < records.length; i++) if ((records[i]!.attributes & RecordAttr.CONTROL) !== 0) control++;
    // Sized at once, as the producer's results are: grown by push, the array cost about a tenth of a read's garbage.
    const out: ConsumedMessage[] = new Array(records.length - control);
    const topic = batch.topic;
    const gen = w.assignmentGeneration;
    let n = 0;
    for (let i = 0; i < records.length; i++) {
      const m = records[i]!;
      if ((m.attributes & RecordAttr.CONTROL) !== 0) continue;
      m.topic = topic;
      m.partition = w.partition;
      m.assignmentGeneration = gen;
      m.signal = w.signal;
      out[n++] = m;
    }
    return out;
  }

  private async pollOnce(w: PartitionWorker, as: ReadAs): Promise<void> {
    if (as.member === undefined) return this.waitForMember(w);
    const batch = await w.conn!.consume({ ...this.fetchFields(w, as), wait_ms: this.ctx.options.maxWaitMs }, makeMessage);
    if (w.signal.aborted) return;
    if (w.seekTo !== undefined) return this.applySeek(w);
    if (w.paused) return; // paused while the poll was in flight: the batch is read again after resume()
    publish(channels.consumerFetch, { group: this.ctx.options.groupId, partition: w.partition, offset: w.position, records: batch.records.length });
    const messages = this.toMessages(w, batch);
    const next = batch.trailer?.nextOffset ?? (batch.records.length > 0 ? batch.records[batch.records.length - 1]!.offset + 1 : w.position);
    const gen = w.assignmentGeneration;
    const start = w.position;
    if (messages.length > 0) await this.deliver(w, messages);
    if (w.seekTo !== undefined) return this.applySeek(w);
    this.passSkipped(w, batch, gen, start, next);
    w.position = Math.max(w.position, next);
  }

  /**
   * What a read passed over without delivering (transaction markers; with read_committed also aborted
   * records, which the broker leaves out) counts as processed once everything delivered before it is:
   * the committed offset then reaches the end of a partition whose last record is a marker instead of
   * stopping one short of it (docs/sdk.md, "Offsets").
   */
  private passSkipped(w: PartitionWorker, batch: Batch<FetchedMessage>, assignmentGeneration: number, start: number, next: number): void {
    if (w.signal.aborted || w.assignmentGeneration !== assignmentGeneration) return;
    if (w.window) {
      w.window.passedTo(next); // counted once every message before `next` is handled
      return;
    }
    let lastDelivered = start - 1;
    for (const r of batch.records) if ((r.attributes & RecordAttr.CONTROL) === 0) lastDelivered = r.offset;
    // Nothing processed yet on this assignment: everything before where this read started is done.
    const upTo = w.processed === -1 ? start : w.processed;
    if (upTo >= lastDelivered + 1 && next > upTo && next > start) w.processed = next;
  }

  /** STREAM: a graceful CLOSE ends this round; a socket loss throws and the loop resumes from `position`. */
  private async streamOnce(w: PartitionWorker, as: ReadAs): Promise<void> {
    if (as.member === undefined) return this.waitForMember(w);
    const conn = w.conn!;
    w.conn = undefined; // a stream connection cannot be reused
    if (w.seekTo !== undefined) this.applySeek(w); // set while no stream was open: start there
    // A window reset after a handler failure (handler-window.ts) moves the position back while the
    // stream may be idle with nothing more to deliver: it ends the stream, which reopens from there.
    const interrupt = new AbortController();
    const stop = () => interrupt.abort();
    w.signal.addEventListener('abort', stop, { once: true });
    w.interruptRead = stop;
    try {
      // Keepalives at the long-poll interval: a stream that stays silent past it plus the stall bound is
      // dropped and the partition re-routed, as a long poll would be (docs/sdk.md, "Routing").
      const keepaliveMs = Math.max(200, this.ctx.options.maxWaitMs);
      const it = conn.stream({ ...this.fetchFields(w, as), keepalive_ms: keepaliveMs }, interrupt.signal, {
        silenceMs: keepaliveMs + this.ctx.options.stallTimeoutMs,
        makeRecord: makeMessage,
      });
      for (;;) {
        const n = await it.next();
        if (n.done) {
          if (n.value?.reason === 'offset_out_of_range') throw new TributaryError('OFFSET_OUT_OF_RANGE', { partition: w.partition });
          // A fenced stream ended by the broker (docs/protocol.md, "Fenced reads"): as a refused read.
          if (n.value?.code) throw new TributaryError(n.value.code, { partition: w.partition, reason: `stream closed: ${n.value.reason}` });
          // A failure without a code (an older broker's): a failed read, backed off, not a clean end.
          if (n.value?.reason === 'error') throw new TributaryError('connection_lost', { partition: w.partition, reason: 'stream closed: error' });
          return;
        }
        // seek() or pause() while the stream was open: drop this batch, it is read again from the new
        // position or after resume()
        if (w.seekTo !== undefined || w.paused) {
          if (w.seekTo !== undefined) this.applySeek(w);
          await it.return({} as Record<string, string>);
          return;
        }
        // A stream ends only by failing: its deliveries are what shows the route works again.
        w.readFailures = 0;
        const batch = n.value;
        const messages = this.toMessages(w, batch);
        const gen = w.assignmentGeneration;
        const start = w.position;
        if (messages.length > 0) await this.deliver(w, messages);
        if (w.seekTo !== undefined) {
          this.applySeek(w);
          await it.return({} as Record<string, string>);
          return;
        }
        const last = batch.records[batch.records.length - 1];
        const next = batch.trailer?.nextOffset ?? (last ? last.offset + 1 : w.position);
        this.passSkipped(w, batch, gen, start, next);
        w.position = next;
      }
    } finally {
      w.signal.removeEventListener('abort', stop);
      w.interruptRead = undefined;
      await this.ctx.cluster.release(conn).catch(() => {});
    }
  }

  private applySeek(w: PartitionWorker): void {
    w.position = w.seekTo!;
    w.seekTo = undefined;
  }

  /** No member id (lost, and not joined again yet): the rejoin stops or keeps this reader; nothing is read meanwhile. */
  private async waitForMember(w: PartitionWorker): Promise<void> {
    await this.ctx.sessionProven.wait(w.signal, 100);
  }

  /** Hands a batch to the sink, holding one of `partitionsConsumedConcurrently` slots. */
  private async deliver(w: PartitionWorker, messages: ConsumedMessage[]): Promise<void> {
    if (!this.slotted) return this.sink!(w, messages);
    while (this.running >= this.ctx.options.partitionsConsumedConcurrently && !w.signal.aborted) await this.slots.wait(w.signal, 50);
    // Only within the member's proven session: a batch found in the socket after a long pause waits for
    // the heartbeat that says whether the partition is still ours (session-guard.ts).
    if (!(await sessionHeld(this.ctx, w.signal))) return;
    this.running++;
    try {
      await this.sink!(w, messages);
    } finally {
      this.running--;
      this.slots.wake();
    }
  }

  // ---- starting positions ----

  /** Where a new partition's reader starts: its committed offset, else what autoOffsetReset says. */
  async startingOffset(partition: number, signal: AbortSignal): Promise<{ position: number; committed: number }> {
    const o = this.ctx.options;
    const reply = await this.ctx.cluster.coordinatorCommand(this.ctx.group, 'FETCH_OFFSET', { topic: o.topic, group: o.groupId, partition }, { signal });
    const p = parseLine(reply).params;
    if (p.get('committed') === 'true') {
      const offset = Number(p.get('offset'));
      return { position: offset, committed: offset };
    }
    if (o.autoOffsetReset === 'error') {
      throw new TributaryError('OFFSET_OUT_OF_RANGE', { partition, reason: 'no committed offset and autoOffsetReset=error' });
    }
    return { position: await this.resetOffset(partition, signal), committed: -1 };
  }

  private async resetOffset(partition: number, signal: AbortSignal): Promise<number> {
    const range = await this.offsetRange(partition, signal);
    return this.ctx.options.autoOffsetReset === 'earliest' ? range.earliest : range.latest;
  }

  /**
   * The partition's offsets as its leader sees them (any broker asks the leader): `latest` is where
   * `latest` resets to, `end` the highest position a read may start at (the log end).
   */
  private async offsetRange(partition: number, signal: AbortSignal): Promise<{ earliest: number; latest: number; end: number }> {
    const reply = await this.ctx.cluster.anyCommand('LIST_OFFSETS', { topic: this.ctx.options.topic, partition }, signal);
    const offsets = parseLine(reply).params.get('offsets') ?? '';
    const m = /earliest=(\d+):latest=(\d+)/.exec(offsets);
    if (!m) throw new TributaryError('internal_error', { reason: `unexpected LIST_OFFSETS reply ${reply}` });
    const leo = /:leo=(\d+)/.exec(offsets);
    const latest = Number(m[2]);
    return { earliest: Number(m[1]), latest, end: leo ? Number(leo[1]) : latest };
  }

  // ---- flow control ----

  pause(partitions: number[]): void {
    for (const p of partitions) {
      const w = this.ctx.workers.get(p);
      if (w && !w.paused) {
        w.paused = true;
        // An idle stream delivers nothing that would make the reader look at `paused`: end it, so the
        // reader stops (and reports it, docs/sdk.md) now rather than at the next record.
        w.interruptRead?.();
      }
    }
  }

  resume(partitions: number[]): void {
    for (const p of partitions) {
      const w = this.ctx.workers.get(p);
      if (w) {
        w.paused = false;
        w.resumed.wake();
        w.window?.wake();
      }
    }
  }

  paused(): number[] {
    return [...this.ctx.workers.values()].filter((w) => w.paused).map((w) => w.partition);
  }

  /** Moves a partition's read position; messages already fetched past it are dropped. */
  seek(partition: number, offset: number): void {
    if (!Number.isSafeInteger(offset) || offset < 0) throw configError('offset', 'must be a non-negative integer');
    const w = this.ctx.workers.get(partition);
    if (!w) throw new TributaryError('NOT_OWNER', { partition }, `partition ${partition} is not assigned to this consumer`);
    // The broker starts a group's reads at max(requested, committed) (docs/sdk.md, "Offsets"): such a
    // seek would silently do nothing. Rewinding a group is an explicit, fenced admin operation. A commit
    // still unanswered counts: the broker may have it already, or get it before the next read.
    const committed = Math.max(w.committed, w.committing);
    if (committed >= 0 && offset < committed) {
      throw new TributaryError(
        'seek_below_committed',
        { partition, offset, committed },
        `seek(${partition}, ${offset}) is below the group's committed offset ${committed}${committed > w.committed ? ' (being committed)' : ''}: a group reads from its committed offset on; to rewind, reset the group's offsets (admin.resetOffsets() or \`tributary group reset-offsets\`), which works while its consumers run`,
      );
    }
    w.seekTo = offset;
    w.processed = Math.min(w.processed, offset);
    w.window?.seek(offset);
    w.resumed.wake();
    // An idle stream delivers nothing that would make the reader look at seekTo: end it, it reopens there.
    w.interruptRead?.();
  }
}

/**
 * A delivered message: one shape for all (a class, so `fenced` is a prototype getter rather than a
 * closure per message). decodeBatch makes it as it decodes a read's reply (makeMessage), so a record
 * costs one object besides its value's view, not a BatchRecord and a copy of it; the fields of the read
 * (topic, partition, assignment generation, signal) are set once the reply is in (toMessages).
 */
class FetchedMessage implements ConsumedMessage {
  topic = '';
  partition = -1;
  assignmentGeneration = -1;
  signal!: AbortSignal;

  constructor(
    readonly offset: number,
    readonly key: Buffer | null,
    readonly value: Buffer,
    readonly timestamp: number,
    /** The record's attribute bits: transaction markers (control records) are never delivered. */
    readonly attributes: number,
    readonly headers: RecordHeader[],
  ) {}

  get fenced(): boolean {
    return this.signal.aborted;
  }
}

const makeMessage: RecordMaker<FetchedMessage> = (offset, key, value, timestamp, attributes, headers) =>
  new FetchedMessage(offset, key, value, timestamp, attributes, headers);

/**
 * What one producer send() resolves with (docs/sdk.md, "Producer"): one RecordMetadata per message
 * (`metadata: 'records'`, the default) or one SendRun per contiguous run of records (`metadata: 'runs'`),
 * and the SendResult that collects a send's acknowledged runs and settles its promise.
 */
import { TributaryError } from 'tributary-protocol/errors.js';
import { callOptions } from './option-names.js';
import type { RecordMetadata } from './producer-messages.js';
import type { RecordSink } from './record-accumulator.js';

/**
 * Messages `first` .. `first + count - 1` of a send, written to `partition` at consecutive offsets from
 * `baseOffset` (message `first + i` at `baseOffset + i`; -1 with `acks: 0`, the broker does not say).
 */
export interface SendRun {
  topic: string;
  partition: number;
  /** Index in `messages` of the run's first message. */
  first: number;
  count: number;
  /** Offset of the run's first record; -1 with `acks: 0`. */
  baseOffset: number;
}

/** What send() resolves with: `records` (default) one RecordMetadata per message, `runs` one SendRun per run. */
export type SendMetadata = 'records' | 'runs';

export interface SendOptions {
  signal?: AbortSignal;
  metadata?: SendMetadata;
}

const SEND_OPTION_NAMES = ['signal', 'metadata'] as const;

/** send()'s options, checked: an unknown name or `metadata` value is refused (invalid_config), never ignored. */
export function sendOptions(o: SendOptions | undefined): SendOptions {
  const opts: SendOptions = usualOptions(o) ? o : callOptions<SendOptions>('send', o, SEND_OPTION_NAMES);
  const m = opts.metadata;
  if (m !== undefined && m !== 'records' && m !== 'runs') {
    throw new TributaryError('invalid_config', { option: 'metadata', reason: 'expected "records" or "runs"' }, 'invalid send option metadata: expected "records" or "runs"');
  }
  return opts;
}

/** An object of known names with a valid signal: checked without callOptions' array of keys (one per send). */
function usualOptions(o: SendOptions | undefined): o is SendOptions {
  if (o === undefined || o === null || typeof o !== 'object') return false;
  for (const k in o) if (k !== 'signal' && k !== 'metadata') return false;
  return o.signal === undefined || o.signal instanceof AbortSignal;
}

/**
 * Per-record metadata (a transaction's acknowledgements) as runs: consecutive records of one partition at
 * consecutive offsets make one run.
 */
export function recordRuns(topic: string, records: ReadonlyArray<{ partition: number; offset: number }>): SendRun[] {
  const out: SendRun[] = [];
  let last: SendRun | undefined;
  for (let i = 0; i < records.length; i++) {
    const { partition, offset } = records[i]!;
    if (last !== undefined && last.partition === partition && (offset < 0 ? last.baseOffset < 0 : last.baseOffset >= 0 && last.baseOffset + last.count === offset)) {
      last.count++;
      continue;
    }
    last = { topic, partition, first: i, count: 1, baseOffset: offset < 0 ? -1 : offset };
    out.push(last);
  }
  return out;
}

/**
 * One send(): collects where its records went and settles once all are in. The result objects are
 * made only then, all at once: made as acknowledgements arrive they would outlive several young-generation
 * collections and be promoted (or pretenured) one per record. With `runs` there is one object per run
 * instead of one per message.
 */
export class SendResult implements RecordSink {
  private remaining: number;
  private settled = false;
  /** Per settled run of records: its first message index, count, partition and first offset (-1: none). */
  private readonly runs: number[] = [];
  private topic = '';
  readonly promise: Promise<RecordMetadata[] | SendRun[]>;
  private resolve!: (r: RecordMetadata[] | SendRun[]) => void;
  private reject!: (e: Error) => void;

  constructor(
    private readonly count: number,
    private readonly asRuns = false,
  ) {
    this.remaining = count;
    this.promise = new Promise<RecordMetadata[] | SendRun[]>((resolve, reject) => {
      this.resolve = resolve;
      this.reject = reject;
    });
    // The caller may stop waiting (signal): a later failure must not become an unhandled rejection.
    this.promise.catch(() => {});
  }

  settle(first: number, count: number, err: Error | null, topic: string, partition: number, offset: number): void {
    if (this.settled) return;
    if (err) {
      this.settled = true;
      this.reject(err);
      return;
    }
    this.topic = topic;
    this.runs.push(first, count, partition, offset);
    this.remaining -= count;
    if (this.remaining === 0) {
      this.settled = true;
      this.resolve(this.asRuns ? this.sendRuns() : this.results());
    }
  }

  fail(err: Error): void {
    if (this.settled) return;
    this.settled = true;
    this.reject(err);
  }

  private results(): RecordMetadata[] {
    const topic = this.topic;
    const runs = this.runs;
    // Sized at once: grown by push, a send of 500 records cost its array about as much as its 500 objects.
    const out: RecordMetadata[] = new Array(this.count);
    if (runs.length === 4) {
      // One run (the whole send went to one batch).
      const partition = runs[2]!;
      const offset = runs[3]!;
      for (let i = 0; i < this.count; i++) out[i] = { topic, partition, offset: offset < 0 ? -1 : offset + i };
      return out;
    }
    for (let r = 0; r < runs.length; r += 4) {
      const first = runs[r]!;
      const partition = runs[r + 2]!;
      const offset = runs[r + 3]!;
      for (let i = 0, n = runs[r + 1]!; i < n; i++) out[first + i] = { topic, partition, offset: offset < 0 ? -1 : offset + i };
    }
    return out;
  }

  /**
   * The runs in message order. Batches settle in any order (partitions, retries), so they are sorted; a
   * run that continues the previous one (same partition, next offsets: a send split over two batches
   * appended back to back) is merged into it.
   */
  private sendRuns(): SendRun[] {
    const topic = this.topic;
    const runs = this.runs;
    if (runs.length === 4) return [{ topic, partition: runs[2]!, first: runs[0]!, count: runs[1]!, baseOffset: runs[3]! < 0 ? -1 : runs[3]! }];
    const order: number[] = [];
    for (let r = 0; r < runs.length; r += 4) order.push(r);
    order.sort((a, b) => runs[a]! - runs[b]!);
    const out: SendRun[] = [];
    let last: SendRun | undefined;
    for (const r of order) {
      const first = runs[r]!;
      const count = runs[r + 1]!;
      const partition = runs[r + 2]!;
      const baseOffset = runs[r + 3]! < 0 ? -1 : runs[r + 3]!;
      if (last !== undefined && last.partition === partition && last.first + last.count === first && (baseOffset < 0 ? last.baseOffset < 0 : last.baseOffset >= 0 && last.baseOffset + last.count === baseOffset)) {
        last.count += count;
        continue;
      }
      last = { topic, partition, first, count, baseOffset };
      out.push(last);
    }
    return out;
  }
}

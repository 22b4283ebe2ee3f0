/**
 * run()'s handlers: eachMessage or eachBatch as the sink of the partition readers. A handler that
 * throws leaves its message unprocessed: `crash` (fatal=false), a backoff, then it is delivered again
 * (docs/sdk.md, "Offsets").
 */
import { TributaryError } from 'tributary-protocol/errors.js';
import type { ConcurrencyOptions, ResolvedConcurrency, RUN_OPTION_NAMES } from './concurrency-options.js';
import type { ConsumedMessage, ConsumerContext } from './consumer-context.js';
import { HandlerWindow } from './handler-window.js';
import type { OffsetCommitter } from './offset-committer.js';
import type { Complete } from './option-names.js';
import type { Sink } from './partition-fetcher.js';
import type { PartitionWorker } from './partition-worker.js';
import { handlerFailureBackoff } from './retry.js';
import { sessionHeld } from './session-guard.js';
import type { RetryInfo } from './retry-headers.js';
import type { RetryTopicsOptions } from './retry-topics-options.js';

export interface EachMessagePayload {
  message: ConsumedMessage;
  /** Aborted when the partition is revoked or the consumer closes. */
  signal: AbortSignal;
  /** With run()'s `retryTopics`: this delivery's attempt and where the message was first read. */
  retry?: RetryInfo;
}

export interface EachBatchPayload {
  topic: string;
  partition: number;
  messages: ConsumedMessage[];
  signal: AbortSignal;
  /** Marks messages up to this one as processed (committed by auto-commit or `commit()`). */
  resolveOffset(offset: number): void;
}

export interface RunOptions {
  eachMessage?: (p: EachMessagePayload) => Promise<void> | void;
  eachBatch?: (p: EachBatchPayload) => Promise<void> | void;
  signal?: AbortSignal;
  /** Parallel eachMessage handlers inside each partition (docs/sdk.md, "Concurrency"); without it, one at a time. */
  concurrency?: ConcurrencyOptions;
  /** Park failed messages on retry topics, then a dead-letter topic (docs/sdk.md, "Retry and dead-letter topics"). */
  retryTopics?: RetryTopicsOptions;
}
const runOptionsComplete: Complete<RunOptions, typeof RUN_OPTION_NAMES> = true;
void runOptionsComplete;

/**
 * The sink of run({ eachMessage, concurrency }): each partition installation gets its own window, which
 * runs the handlers; the sink returns once a batch is admitted, so the reader fetches on meanwhile.
 */
export function windowedSink(ctx: ConsumerContext, committer: OffsetCommitter, handler: NonNullable<RunOptions['eachMessage']>, limits: ResolvedConcurrency): Sink {
  return (w, messages) => {
    w.window ??= new HandlerWindow(ctx, committer, w, limits, handler);
    return w.window.admit(messages);
  };
}

/** The sink that hands each fetched batch to run()'s eachBatch, or message by message to its eachMessage. */
export function handlerSink(ctx: ConsumerContext, committer: OffsetCommitter, opts: RunOptions): Sink {
  return async (w, messages) => {
    if (opts.eachBatch) {
      const first = messages[0]!.offset;
      // seek() or pause() while the batch waited for a slot: it was fetched before them, so it is dropped
      // and read again from the sought offset or after resume(), as eachMessage's messages are (docs/sdk.md, "Offsets").
      if (w.signal.aborted || w.seekTo !== undefined) return;
      if (w.paused) {
        w.seekTo = first;
        return;
      }
      const last = messages[messages.length - 1]!.offset;
      const returned = await timed(ctx, w, first, () =>
        opts.eachBatch!({
          topic: ctx.options.topic,
          partition: w.partition,
          messages,
          signal: w.signal,
          resolveOffset: (offset) => {
            // Only an offset of this batch: one past it would commit records nobody handled.
            if (!Number.isSafeInteger(offset) || offset < first || offset > last) {
              throw new TributaryError('invalid_parameter', { param: 'offset', offset: String(offset), first, last, reason: "resolveOffset takes an offset of the batch's messages" });
            }
            // A seek() back into the batch while it ran: from the sought offset on the messages are read
            // again, so they do not count (docs/sdk.md, "Offsets", seek()).
            const upTo = w.seekTo !== undefined && offset >= w.seekTo ? w.seekTo - 1 : offset;
            if (upTo >= first) committer.markProcessed(w.partition, w.assignmentGeneration, upTo);
          },
        }),
      );
      // Returned with messages it did not resolve: they are not processed, so they are read again from the
      // first of them, as after a throw (docs/sdk.md, eachBatch); passing over them would let a later
      // batch's resolveOffset commit past them. A seek() the handler made stands.
      if (returned && !w.signal.aborted && w.seekTo === undefined && w.processed <= last) w.seekTo = Math.max(w.processed, first);
      return;
    }
    for (const message of messages) {
      if (w.signal.aborted || w.seekTo !== undefined) return;
      if (w.paused) {
        w.seekTo = message.offset; // paused mid-batch: the rest is read again after resume()
        return;
      }
      // A pause past the session: docs/sdk.md, "Fenced reads". Checked in the same synchronous run as the
      // handler's call when the session is live, so no turn of the event loop separates the two.
      if (!ctx.sessionLive && !(await sessionHeld(ctx, w.signal))) return;
      if (!(await timed(ctx, w, message.offset, () => opts.eachMessage!({ message, signal: w.signal })))) return;
      // seek() back to or below its own message while it ran: it is read again, not counted (as the
      // iterator does; docs/sdk.md, "Offsets"), else the commit would pass it and the re-read skip it.
      if (w.seekTo !== undefined && message.offset >= w.seekTo) return;
      committer.markProcessed(w.partition, w.assignmentGeneration, message.offset);
    }
  };
}

/** Runs a handler; false when it threw (its message is then read again after a pause). */
async function timed(ctx: ConsumerContext, w: PartitionWorker, offset: number, fn: () => Promise<void> | void): Promise<boolean> {
  const t0 = performance.now();
  const timer = setTimeout(
    () => ctx.emit('handler.slow', { partition: w.partition, offset, elapsedMs: Math.round(performance.now() - t0) }),
    ctx.options.processingTimeoutMs,
  );
  try {
    await fn();
    w.failures = 0;
    return true;
  } catch (err) {
    if (w.signal.aborted) return false;
    ctx.crash(err as Error, false);
    // Read again from the first unhandled record: the failed one, or (eachBatch) the first the handler
    // did not resolve. Never below `offset` (a forward seek() leaves `processed` behind it), and a seek()
    // the handler made before it threw stands.
    w.seekTo ??= Math.max(w.processed, offset);
    w.failures++;
    await handlerFailureBackoff(w.failures, w.signal);
    return false;
  } finally {
    clearTimeout(timer);
  }
}

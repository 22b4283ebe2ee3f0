/**
 * Sends waiting for a topic's METADATA, outside the producer's admission queue (producer.ts
 * enqueueSlowly): woken in call order, so per topic the sends keep their order.
 */

/** Sends waiting for one topic's METADATA (Producer.topicWaits). */
export interface TopicWait {
  /** Sends between the start of their wait and their entry to the admission queue. */
  pending: number;
  /** Each waiting send's wake-up, in call order; all run at once, in that order, when the METADATA is in. */
  waiters: Array<(err: Error | null) => void>;
  /** Set once the METADATA answered (null) or failed. */
  settled: Error | null | undefined;
  /** Resolves once no send waits any more (each went on to the admission queue, or failed): flush() waits for it. */
  readonly drained: Promise<void>;
  markDrained: () => void;
}

export function newTopicWait(): TopicWait {
  let markDrained!: () => void;
  const drained = new Promise<void>((resolve) => {
    markDrained = resolve;
  });
  return { pending: 0, waiters: [], settled: undefined, drained, markDrained };
}

export function settleTopicWait(wait: TopicWait, err: Error | null): void {
  wait.settled = err;
  for (const w of wait.waiters.splice(0)) w(err);
}

/** Waits for the topic's METADATA, woken in call order (a wrapper promise per send would reorder them); `signal` ends the wait. */
export function untilAbortedInOrder(wait: TopicWait, signal: AbortSignal | undefined): Promise<void> {
  if (wait.settled !== undefined) return wait.settled ? Promise.reject(wait.settled) : Promise.resolve();
  return new Promise<void>((resolve, reject) => {
    const wake = (err: Error | null) => {
      signal?.removeEventListener('abort', onAbort);
      if (err) reject(err);
      else resolve();
    };
    const onAbort = () => {
      const i = wait.waiters.indexOf(wake);
      if (i >= 0) wait.waiters.splice(i, 1);
      reject(signal!.reason);
    };
    if (signal?.aborted) return reject(signal.reason);
    signal?.addEventListener('abort', onAbort, { once: true });
    wait.waiters.push(wake);
  });
}

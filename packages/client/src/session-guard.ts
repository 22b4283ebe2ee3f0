/**
 * Delivery only within the member's proven session (docs/sdk.md, "Fenced reads"). A process paused past
 * its session (SIGSTOP, a long GC pause) may find batches fetched before the pause waiting in its
 * sockets when it resumes; its partitions may be another member's by then. A message is handed to the
 * application only while a request the coordinator answered for this member was sent less than a
 * session timeout ago: otherwise it waits for the next heartbeat, which either proves the session again
 * or reports the member lost, and then the partition's signal aborts and the message is dropped.
 */
import type { ConsumerContext } from './consumer-context.js';

/** Resolves true once the session is proven live, false if `signal` aborted first. */
export async function sessionHeld(ctx: ConsumerContext, signal: AbortSignal): Promise<boolean> {
  while (!ctx.sessionLive) {
    if (signal.aborted) return false;
    // Timed too: a proof that lapses while nothing wakes us is noticed by the loop condition.
    await ctx.sessionProven.wait(signal, 100);
  }
  return !signal.aborted;
}

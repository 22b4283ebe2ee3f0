/**
 * Test hooks of PartitionLog, kept out of its API the way common/failpoints.ts keeps fault points out of the
 * broker's: each log registers a small hooks object when it opens, tests reach it through the functions
 * here, and the log only reads it (a field that stays unset outside tests).
 */

/** Where armCompactionCrash stops a compaction: after writing the temp files, or after each rename of the swap. */
export type CompactionCrashPoint = 'temp-written' | 'index-renamed' | 'log-renamed';

/** Thrown at an armed compaction crash point (armCompactionCrash). */
export class SimulatedCrash extends Error {
  constructor(at: string | undefined) {
    super(`simulated crash during compaction (${at})`);
  }
}

/** What one log exposes to its tests. */
export interface LogTestHooks {
  /** Stops the log without a clean shutdown (see simulateCrash). */
  readonly crash: () => Promise<void>;
  /** Armed by armCompactionCrash; taken (and cleared) by the next compact() call. */
  compactionCrashAt?: CompactionCrashPoint;
}

const registered = new WeakMap<object, LogTestHooks>();

/** Called by the log when it opens. */
export function registerTestHooks(log: object, hooks: LogTestHooks): void {
  registered.set(log, hooks);
}

function hooksOf(log: object): LogTestHooks {
  const h = registered.get(log);
  if (!h) throw new Error('not a PartitionLog');
  return h;
}

/**
 * Simulates a crash of `log`: drops the fds without fsync, index files or clean-shutdown marker,
 * so the next open runs recovery. Queued appends are written first (as if the process died after).
 */
export function simulateCrash(log: object): Promise<void> {
  return hooksOf(log).crash();
}

/**
 * Makes the next compact() call of `log` stop as if the process died at `at` of its first swap, leaving the
 * files as they are; that call rejects with SimulatedCrash.
 */
export function armCompactionCrash(log: object, at: CompactionCrashPoint): void {
  hooksOf(log).compactionCrashAt = at;
}

/** The crash point armed for this compact() call, if any; disarms it. */
export function takeCompactionCrash(hooks: LogTestHooks): CompactionCrashPoint | undefined {
  const at = hooks.compactionCrashAt;
  if (at !== undefined) hooks.compactionCrashAt = undefined;
  return at;
}

/**
 * Test hooks of PartitionLog, kept out of its API the way common/failpoints.ts keeps fault points out of the
 * broker's: PartitionLog registers how a log crashes once (its class), tests reach it through the functions
 * here, and a log keeps nothing for them unless a test armed one.
 */

/**
 * Where armCompactionCrash stops a compaction: after writing the temp files, after each rename of the swap,
 * or once the segment before an emptied one was stretched over it (before the empty files are removed).
 */
export type CompactionCrashPoint = 'temp-written' | 'index-renamed' | 'log-renamed' | 'emptied-stretched';

/** Thrown at an armed compaction crash point (armCompactionCrash). */
export class SimulatedCrash extends Error {
  constructor(at: string | undefined) {
    super(`simulated crash during compaction (${at})`);
  }
}

let isLog: (log: object) => boolean = () => false;
let crash: (log: object) => Promise<void> = () => Promise.reject(new Error('not a PartitionLog'));
/** Compaction crash points armed by armCompactionCrash, per log; taken by its next compact() call. */
const armed = new WeakMap<object, CompactionCrashPoint>();

/** Called once by PartitionLog: which objects are logs, and how one stops without a clean shutdown. */
export function registerCrash(test: (log: object) => boolean, stop: (log: object) => Promise<void>): void {
  isLog = test;
  crash = stop;
}

function checkLog(log: object): void {
  if (!isLog(log)) throw new Error('not a PartitionLog');
}

/**
 * Simulates a crash of `log`: drops the fds without fsync, index files or clean-shutdown marker,
 * so the next open runs recovery. Queued appends are written first (as if the process died after).
 */
export function simulateCrash(log: object): Promise<void> {
  checkLog(log);
  return crash(log);
}

/**
 * Makes the next compact() call of `log` stop as if the process died at `at` of its first swap (of its first
 * emptied segment, for 'emptied-stretched'), leaving the files as they are; that call rejects with SimulatedCrash.
 */
export function armCompactionCrash(log: object, at: CompactionCrashPoint): void {
  checkLog(log);
  armed.set(log, at);
}

/** The crash point armed on `log` for this compact() call, if any; disarms it. */
export function takeCompactionCrash(log: object): CompactionCrashPoint | undefined {
  const at = armed.get(log);
  if (at !== undefined) armed.delete(log);
  return at;
}

/**
 * run()'s `concurrency` option: parallel handlers inside one partition (docs/sdk.md, "Concurrency").
 * Checked when run() is called; a bad value rejects run() before anything is read.
 */
import { configError } from './consumer-options.js';
import type { Ordering } from './key-scheduler.js';
import { type Complete, refuseUnknownOptions } from './option-names.js';

export interface ConcurrencyOptions {
  /** Most handlers of one partition running at once. */
  perPartition: number;
  /**
   * `key` (default): same key in offset order, different keys in parallel (no key: one key of its own);
   * `partition`: one at a time in offset order (perPartition must be 1); `none`: any order.
   */
  ordering?: Ordering;
  /**
   * Most messages of one partition held between the fetch and the committed prefix (queued, running, or
   * handled behind an unhandled one); default 10 × perPartition. Bounds what a crash redelivers.
   */
  maxBuffered?: number;
}

export const CONCURRENCY_OPTION_NAMES = ['perPartition', 'ordering', 'maxBuffered'] as const;
const concurrencyComplete: Complete<ConcurrencyOptions, typeof CONCURRENCY_OPTION_NAMES> = true;
void concurrencyComplete;

export const RUN_OPTION_NAMES = ['eachMessage', 'eachBatch', 'signal', 'concurrency', 'retryTopics'] as const;

export type ResolvedConcurrency = Required<ConcurrencyOptions>;

const MAX_PER_PARTITION = 10_000;
const MAX_BUFFERED = 1_000_000;

function intIn(c: Record<string, unknown>, key: string, min: number, max: number): void {
  const v = c[key];
  if (v === undefined) return;
  if (typeof v !== 'number' || !Number.isSafeInteger(v) || v < min || v > max) throw configError(`concurrency.${key}`, `must be an integer from ${min} to ${max}`);
}

/** Validates run()'s `concurrency` and fills in its defaults; undefined stays undefined (one at a time, as without it). */
export function resolveConcurrency(c: ConcurrencyOptions | undefined, withEachBatch: boolean): ResolvedConcurrency | undefined {
  if (c === undefined) return undefined;
  if (c === null || typeof c !== 'object') throw configError('concurrency', 'expected an object { perPartition, ordering?, maxBuffered? }');
  refuseUnknownOptions('run', c, CONCURRENCY_OPTION_NAMES, 'concurrency.');
  // eachBatch hands a whole batch to one call: there is nothing to run in parallel inside it.
  if (withEachBatch) throw configError('concurrency', 'works with eachMessage only (eachBatch gets a whole batch per call)');
  if (c.perPartition === undefined) throw configError('concurrency.perPartition', 'required');
  const r = c as unknown as Record<string, unknown>;
  intIn(r, 'perPartition', 1, MAX_PER_PARTITION);
  intIn(r, 'maxBuffered', 1, MAX_BUFFERED);
  const ordering = c.ordering === undefined ? 'key' : c.ordering;
  if (!['key', 'partition', 'none'].includes(ordering)) throw configError('concurrency.ordering', 'expected key, partition or none');
  if (ordering === 'partition' && c.perPartition !== 1) throw configError('concurrency.perPartition', "must be 1 with ordering 'partition' (one message of a partition at a time)");
  const maxBuffered = c.maxBuffered ?? Math.min(MAX_BUFFERED, 10 * c.perPartition);
  if (maxBuffered < c.perPartition) throw configError('concurrency.maxBuffered', `must be at least perPartition (${c.perPartition})`);
  return { perPartition: c.perPartition, ordering, maxBuffered };
}

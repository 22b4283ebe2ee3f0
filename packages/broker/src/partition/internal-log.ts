/**
 * What the coordinators share about their internal topics (`__consumer_offsets`, `__transaction_state`):
 * how they append to them and how a partition of one is replayed into memory.
 */
import { TributaryError } from 'tributary-protocol/errors.js';
import type { RecordInput } from 'tributary-protocol/record.js';
import type { Partition } from './partition.js';

/**
 * Every record of an internal topic's partition, keys and values parsed as JSON (an empty value is null, a
 * tombstone), with its offset, to the log end: not the HWM, since a new leader's log is the truth from now
 * on, even the records its followers have not confirmed yet. `confirmed` says which side of the HWM (read
 * before the records) the record lies on: one at or past it may still be lost with another change of leader,
 * so a caller neither answers nor acts on it until the HWM passes it (replicatedPast, waitReplicated): the
 * group log's snapshots and offsets (group-log.ts), the transaction log's decisions (txn-log.ts; docs/
 * architecture.md, "Cluster mode", Coordinators). A record that does not parse stops the replay: the broker
 * must stay unready rather than serve with state missing.
 */
export async function replayJson(
  part: Partition,
  label: string,
  apply: (key: unknown, value: unknown, at: string, offset: number, confirmed: boolean) => void,
): Promise<void> {
  let offset = part.earliest;
  const end = part.logEndOffset;
  // Read before the records: a HWM that moves on meanwhile only leaves more of them unconfirmed, which the
  // callers check again (replicatedPast) before they act on them.
  const hwm = part.highWatermark;
  while (offset < end) {
    const records = await part.log.read(Math.max(offset, part.earliest), { maxRecords: 5000, maxBytes: 8 * 1024 * 1024, maxOffset: end });
    if (records.length === 0) break;
    for (const r of records) {
      const at = `${label} offset ${r.offset}`;
      let key: unknown;
      let value: unknown;
      try {
        key = JSON.parse(r.key?.toString('utf8') ?? 'null');
        value = r.value.length === 0 ? null : JSON.parse(r.value.toString('utf8'));
      } catch {
        throw new Error(`${at}: record does not parse`);
      }
      apply(key, value, at, r.offset, r.offset < hwm);
    }
    offset = records[records.length - 1]!.offset + 1;
  }
}

/** Whether the partition's HWM has passed `offset`: every in-sync replica has the record there. */
export function replicatedPast(part: Partition, offset: number): boolean {
  return part.highWatermark > offset;
}

/**
 * Resolves once the partition's HWM passed `offset` (true), or after `timeoutMs`, or when the partition
 * closes or wakes its waiters (this broker stopped leading it): false unless it passed.
 */
export function waitReplicated(part: Partition, offset: number, timeoutMs: number): Promise<boolean> {
  return part.waitForData(offset, timeoutMs, undefined, 'read_uncommitted');
}

/** How the coordinators append to their internal topics (cluster mode: only as leader, acknowledged once replicated). */
export type InternalAppend = (part: Partition, records: RecordInput[]) => Promise<unknown>;

export const localAppend: InternalAppend = (part, records) => part.append(records);

/**
 * Cluster mode: `gate` checks this broker leads (throwing leaves nothing written) and names the epoch,
 * `replicated` waits for the in-sync replicas. A failure once the leader wrote the records (the wait timed
 * out, leadership moved, the ISR shrank) carries `outcome=unknown`: they are in the leader's log, which a
 * replay here reads to its end, and may yet be committed, or lost with a change of leader (unconfirmedAppend;
 * docs/architecture.md, "Cluster mode", Coordinators).
 */
export function replicatedAppend(
  gate: (part: Partition) => number | undefined,
  replicated: (part: Partition, lastOffset: number, epoch: number | undefined) => Promise<void>,
): InternalAppend {
  return async (part, records) => {
    const epoch = gate(part);
    const res = await part.append(records);
    try {
      await replicated(part, res.lastOffset, epoch);
    } catch (err) {
      const marked = outcomeUnknownError(err);
      unconfirmed.set(marked, res.lastOffset);
      throw marked;
    }
  };
}

/** The errors of replicatedAppend after the append: the last offset it wrote. */
const unconfirmed = new WeakMap<Error, number>();

/**
 * The last offset an append that failed with `err` wrote to the leader's log without its replication being
 * confirmed (undefined: not such an error). It is committed once the partition's HWM has passed it.
 */
export function unconfirmedAppend(err: unknown): number | undefined {
  return err instanceof Error ? unconfirmed.get(err) : undefined;
}

/** The same error (its code still says why), marked as a write that may or may not have happened. */
function outcomeUnknownError(err: unknown): TributaryError {
  if (!(err instanceof TributaryError)) return new TributaryError('storage_error', { reason: (err as Error).message, outcome: 'unknown' });
  const marked = new TributaryError(err.code, { ...err.fields, outcome: 'unknown' }, undefined, err.extra);
  marked.stack = err.stack;
  return marked;
}

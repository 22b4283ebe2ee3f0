/**
 * A follower and its leader's tombstone horizon (docs/architecture.md, "Compaction" and "Cluster mode";
 * storage/tombstone-horizon.ts). Once the leader's compaction has dropped a tombstone, a follower that
 * never read it and still holds an older value of its key would keep that value for ever (and serve it if
 * it led later): fetching from its log end it never gets the tombstone. So the leader reports its horizon
 * H (LEADER_EPOCHS, and a REPLICA_FETCH answer of its own whenever the follower's fetch names a lower one,
 * decided after the fetch's read), and a follower whose non-empty log ends below H drops its records and
 * fetches them again from the leader's log start, as a replica being added does.
 */
import { parseError, parseLine } from 'tributary-protocol/command.js';
import type { Logger } from '../common/logger.js';
import type { Replica } from './replica-types.js';

/** One fetch loop's view of its leader's horizon (a new leader epoch, or a restart, starts afresh). */
export interface HorizonWatch {
  /** The leader reports its horizon (a leader of an older version does not: nothing is sent then). */
  supported: boolean;
  /** The leader's horizon as last heard: each REPLICA_FETCH names it. */
  known: number;
}

export function newHorizonWatch(): HorizonWatch {
  return { supported: false, known: 0 };
}

/** The REPLICA_FETCH parameter naming the horizon this follower knows ('' for a leader that reports none). */
export function horizonParam(w: HorizonWatch): string {
  return w.supported ? ` tombstone_horizon=${w.known}` : '';
}

/**
 * The leader's horizon `h` as LEADER_EPOCHS or REPLICA_FETCH reported it (after any epoch truncation, and
 * before any record fetched with it is stored): the log is emptied when it ends below `h`, holds records
 * and has not taken `h` as its own yet; then `h` becomes this log's own horizon (never lowered), on disk
 * before a record the leader compacted is: should this replica lead, its followers hear of those tombstones.
 * A log takes `h` only when it is safe for `h` (emptied for it, empty, or reaching it), and its own
 * compaction never raises it past its own end: so a fetch loop started again part-way through a refetch
 * (a new leader epoch, a restart) goes on from there instead of emptying the log once more.
 */
export async function followLeaderHorizon(r: Replica, h: number, w: HorizonWatch, logger: Logger): Promise<void> {
  w.supported = true;
  w.known = h;
  const log = r.partition.log;
  const start = log.logStartOffset;
  const end = log.logEndOffset;
  if (h > end && start < end && h > log.tombstoneHorizon) {
    logger.warn(
      { topic: r.topic, partition: r.id, tombstoneHorizon: h, logStart: start, logEnd: end },
      "the leader dropped a tombstone this replica never read: dropping this replica's records and fetching them again",
    );
    // As a follower behind the leader's log start: empty at its own start, it fetches from there and the
    // leader answers from its log start on.
    await r.partition.truncateTo(start);
  }
  await log.raiseTombstoneHorizon(h);
}

/**
 * A REPLICA_FETCH answered with a text line: an error (thrown), or the leader's horizon above the one the
 * fetch named (no records were sent), which is followed before fetching again.
 */
export async function onFetchText(r: Replica, text: string, w: HorizonWatch, logger: Logger): Promise<void> {
  const h = text.startsWith('OK') ? parseHorizon(parseLine(text).params.get('tombstone_horizon')) : undefined;
  if (h === undefined) throw parseError(text);
  await followLeaderHorizon(r, h, w, logger);
}

/** A reported horizon, or undefined when there is none (a leader of an older version) or it is not an offset. */
export function parseHorizon(v: string | undefined): number | undefined {
  if (v === undefined || !/^[0-9]{1,16}$/.test(v)) return undefined;
  const n = Number(v);
  return Number.isSafeInteger(n) ? n : undefined;
}

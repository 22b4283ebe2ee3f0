/**
 * Where a tail reads each partition (docs/http-api.md, "Live tail"): the `from=partition:offset` pairs it
 * resumes with, and where it goes on when a position is gone from the log (OFFSET_OUT_OF_RANGE).
 */
import type { PartitionOffsets } from 'tributary-client/admin.js';
import { invalidParam } from 'tributary-protocol/errors.js';
import { readEnd } from './api-records.js';

/** The `event: reset` a tail sends when it moved a partition on: `requested` is gone, it reads from `position`. */
export interface TailReset {
  partition: number;
  code: 'OFFSET_OUT_OF_RANGE';
  requested: number;
  position: number;
  earliest: number;
  latest: number;
}

/**
 * Where a tail goes on when `requested` is not in the partition, else undefined. Below the log start
 * (retention deleted it): the earliest kept, so that nothing still there is skipped. Past the end (the
 * broker lost records it had, in a crash or an unclean leader change): the end, as a Kafka consumer with
 * auto.offset.reset=latest.
 */
export function outOfRange(
  partition: number,
  requested: number,
  o: PartitionOffsets,
  isolation: 'read_committed' | 'read_uncommitted' | undefined,
): TailReset | undefined {
  const latest = readEnd(o, isolation);
  if (requested >= o.earliest && requested <= latest) return undefined;
  return { partition, code: 'OFFSET_OUT_OF_RANGE', requested, position: requested < o.earliest ? o.earliest : latest, earliest: o.earliest, latest };
}

/**
 * `from=0:12,1:40` (a tail resuming where an earlier one stopped: the next offset of each partition), as
 * a map; undefined for any other `from`. A partition named twice is refused.
 */
export function resumePositions(from: string): Map<number, number> | undefined {
  if (!/^\d{1,7}:\d{1,16}(,\d{1,7}:\d{1,16})*$/.test(from)) return undefined;
  const out = new Map<number, number>();
  for (const pair of from.split(',')) {
    const [p, offset] = pair.split(':').map(Number) as [number, number];
    if (out.has(p)) throw invalidParam('from', `names partition ${p} twice`);
    out.set(p, offset);
  }
  return out;
}

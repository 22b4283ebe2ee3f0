import type { Partition } from './partition.js';

/** A partition's offsets as LIST_OFFSETS reports them (docs/protocol.md): `latest` is the last stable offset. */
export interface LogOffsets {
  earliest: number;
  latest: number;
  leo: number;
  hwm: number;
  /** With a timestamp: the first offset stamped at or after it (the log end when none is). */
  at?: number;
}

/**
 * Reads a partition's offsets where they are true: from this broker's copy standalone, from the partition's
 * leader in a cluster (broker/partition-offsets.ts), where a follower's copy trails and a broker that hosts
 * no replica has none.
 */
export type LogOffsetsOf = (topic: string, partition: number, timestamp?: number) => Promise<LogOffsets>;

/** This broker's own copy (`latest` exact once the transaction index is rebuilt). */
export async function localLogOffsets(p: Partition, timestamp?: number): Promise<LogOffsets> {
  await p.whenTxnIndexReady();
  const offsets: LogOffsets = { earliest: p.earliest, latest: p.lastStableOffset, leo: p.logEndOffset, hwm: p.highWatermark };
  if (timestamp !== undefined) offsets.at = await p.log.offsetForTimestamp(timestamp);
  return offsets;
}

/** One partition's entry of a LIST_OFFSETS reply: `P3:earliest=0:latest=5:leo=5:hwm=5[:at=2]`. */
export function formatLogOffsets(partition: number, o: LogOffsets): string {
  return `P${partition}:earliest=${o.earliest}:latest=${o.latest}:leo=${o.leo}:hwm=${o.hwm}${o.at === undefined ? '' : `:at=${o.at}`}`;
}

/** The entry formatLogOffsets wrote, or undefined if `entry` is not one for `partition`. */
export function parseLogOffsets(partition: number, entry: string): LogOffsets | undefined {
  const [head, ...fields] = entry.split(':');
  if (head !== `P${partition}`) return undefined;
  const kv = new Map(fields.map((f) => f.split('=') as [string, string]));
  const num = (k: string) => (kv.has(k) && /^\d+$/.test(kv.get(k)!) ? Number(kv.get(k)) : undefined);
  const [earliest, latest, leo, hwm, at] = ['earliest', 'latest', 'leo', 'hwm', 'at'].map(num);
  if (earliest === undefined || latest === undefined || leo === undefined || hwm === undefined) return undefined;
  return at === undefined ? { earliest, latest, leo, hwm } : { earliest, latest, leo, hwm, at };
}

/**
 * The step of Partition.release that takes a partition's files away (docs/architecture.md, "Hosted
 * partitions"). It runs in the partition's exclusive section once every append begun has landed, and
 * decides there, not before waiting: the broker may have become a replica again meanwhile.
 */
import type { PartitionLog } from '../storage/partition-log.js';
import type { PartitionSnapshots } from './partition-snapshots.js';

/** The replica's leader epoch cache, whose checkpoint goes with the directory (LeaderEpochCache.removeWith). */
export interface ReleasedEpochs {
  removeWith(drop: () => Promise<boolean>): Promise<boolean>;
}

/**
 * False, changing nothing, unless `unhosted()` holds when checked here (with no epoch checkpoint write in
 * flight). Otherwise the snapshot timers stop (`stopping` tells the caller, which reloads the states
 * whether or not the rest succeeds), and the log's directory goes (PartitionLog.release), the epoch
 * history being cleared in the same step.
 */
export function releaseFiles(
  log: PartitionLog,
  snapshots: PartitionSnapshots,
  unhosted: () => boolean,
  epochs: ReleasedEpochs | undefined,
  stopping: () => void,
): Promise<boolean> {
  const drop = async (): Promise<boolean> => {
    if (!unhosted()) return false;
    stopping();
    snapshots.stop();
    await snapshots.settled();
    await log.release();
    return true;
  };
  return epochs ? epochs.removeWith(drop) : drop();
}

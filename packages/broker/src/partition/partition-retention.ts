/**
 * Retention of a user topic's partition (Partition.applyRetention, on the retention timer of a 'delete'
 * topic): segments go only below what both snapshots of the partition's states cover (partition-snapshots.ts).
 */
import type { PartitionLog } from '../storage/partition-log.js';
import type { PartitionSnapshots } from './partition-snapshots.js';

/**
 * After a crash, a state rebuilt from a snapshot older than the log start would miss the records between
 * (an idempotent producer's sequences, a transaction's marker, so its LSO stays at the log start): both
 * snapshots are written as of the HWM first, their names fsynced, and only then are segments deleted, none
 * past what they cover. While a state is being rebuilt nothing goes (the next pass deletes it). Whether
 * anything is due is decided once, before writing: most partitions have nothing to delete on a pass.
 */
export async function applyPartitionRetention(
  log: PartitionLog,
  snapshots: PartitionSnapshots,
  now: number,
): Promise<{ deletedSegments: number; deletedBytes: number }> {
  const none = { deletedSegments: 0, deletedBytes: 0 };
  if (!log.retentionDue(now)) return none;
  const hwm = log.highWatermark;
  try {
    if (!(await snapshots.writeBoth(hwm))) return none;
  } catch (err) {
    // A full disk: retention may be what frees it, so it still deletes what the last snapshots cover.
    log.logger.warn({ err }, 'could not write the snapshots before retention; deleting only below the last ones');
  }
  const covered = snapshots.coveredUpTo(hwm);
  if (covered < 0) return none;
  return log.applyDueRetention(now, covered);
}

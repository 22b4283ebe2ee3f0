/**
 * Keys of per-partition records in etcd, `<topic>/<partition>` (partition-state.ts, reassignment.ts): one
 * split, one order and one listing for both stores.
 */
import type { Versioned, WatchedPrefix } from './watched-prefix.js';

export function splitKey(key: string): { topic: string; partition: number } {
  const slash = key.lastIndexOf('/');
  return { topic: key.slice(0, slash), partition: Number(key.slice(slash + 1)) };
}

/** Topic in code-point order, then partition number. */
export function byTopicPartition(a: { topic: string; partition: number }, b: { topic: string; partition: number }): number {
  return a.topic < b.topic ? -1 : a.topic > b.topic ? 1 : a.partition - b.partition;
}

/**
 * The records of one topic (or all), sorted by byTopicPartition. Filtered on the key before anything is
 * built: with 10,000 partitions, building and sorting every record for each topic's lookup stalled a
 * controller's event loop for seconds.
 */
export function listPartitionRecords<T>(records: WatchedPrefix<T>, topic?: string): Array<{ topic: string; partition: number } & Versioned<T>> {
  const prefix = topic === undefined ? undefined : `${topic}/`;
  const out: Array<{ topic: string; partition: number } & Versioned<T>> = [];
  for (const [key, entry] of records.each()) {
    if (prefix !== undefined && (!key.startsWith(prefix) || key.includes('/', prefix.length))) continue;
    out.push({ ...splitKey(key), ...entry });
  }
  return out.sort(byTopicPartition);
}

/** How many records each topic has, in one pass. */
export function countByTopic(keys: Iterable<string>): Map<string, number> {
  const counts = new Map<string, number>();
  for (const key of keys) {
    const { topic } = splitKey(key);
    counts.set(topic, (counts.get(topic) ?? 0) + 1);
  }
  return counts;
}

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

type Listed<T> = { topic: string; partition: number } & Versioned<T>;

/** One kept key: split once, with the entry it last listed and that entry's listed form. */
interface KeptKey {
  key: string;
  topic: string;
  partition: number;
  entry?: Versioned<unknown>;
  listed?: Listed<unknown>;
}

/** Each store's keys in byTopicPartition order, for as long as its set of keys stays the same. */
const sortedKeys = new WeakMap<WatchedPrefix<unknown>, { version: number; keys: KeptKey[] }>();

/**
 * The records of one topic (or all), sorted by byTopicPartition. A controller lists every partition state
 * on each pass: with 10,000 partitions, splitting, building and sorting them every time (here and for
 * CLUSTER_STATUS) was about 30 % of a controller's longest stretch without an idle sample while a
 * restarted broker's partitions moved (bench scale-cluster). So the sorted keys are kept until a key comes
 * or goes, and each entry's listed form until the entry is replaced (an entry is replaced, never changed,
 * when its key is written); only the array is new on each call. Callers must not change the entries.
 */
export function listPartitionRecords<T>(records: WatchedPrefix<T>, topic?: string): Array<Listed<T>> {
  const out: Array<Listed<T>> = [];
  for (const k of keysOf(records)) {
    if (topic !== undefined && k.topic !== topic) continue;
    const entry = records.get(k.key);
    if (entry === undefined) continue;
    if (k.entry !== entry) {
      k.entry = entry;
      k.listed = { topic: k.topic, partition: k.partition, ...entry };
    }
    out.push(k.listed as Listed<T>);
  }
  return out;
}

/** How many records each topic has (from the kept keys, as listPartitionRecords). */
export function countByTopic<T>(records: WatchedPrefix<T>): Map<string, number> {
  const counts = new Map<string, number>();
  for (const { topic } of keysOf(records)) counts.set(topic, (counts.get(topic) ?? 0) + 1);
  return counts;
}

/** The store's keys, split and sorted: rebuilt only when its set of keys changed. */
function keysOf<T>(records: WatchedPrefix<T>): KeptKey[] {
  const store = records as WatchedPrefix<unknown>;
  let sorted = sortedKeys.get(store);
  if (sorted?.version !== records.keyVersion) {
    const keys: KeptKey[] = [];
    for (const key of records.eachKey()) keys.push({ key, ...splitKey(key) });
    sorted = { version: records.keyVersion, keys: keys.sort(byTopicPartition) };
    sortedKeys.set(store, sorted);
  }
  return sorted.keys;
}

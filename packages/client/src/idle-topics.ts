/**
 * Forgetting the topics a producer no longer sends to (docs/sdk.md, "Producer"): a producer that writes to
 * ever new topics (a topic per tenant or per day) kept each one's partition count, round-robin position,
 * sticky batch, metadata and partition queues for good.
 */
import type { Cluster } from './cluster.js';
import type { RecordAccumulator } from './record-accumulator.js';

export interface ProducerTopicState {
  readonly partitionCounts: Map<string, { n: number; at: number }>;
  readonly roundRobin: Map<string, number>;
  readonly sticky: Map<string, unknown>;
  readonly topicWaits: Map<string, unknown>;
}

/**
 * Forgets every topic whose partition count is older than `maxAgeMs` (the next send would ask METADATA
 * again anyway) and that has nothing queued, in flight or waiting. An idempotent producer keeps its
 * partition queues: they hold the sequence numbers the broker expects next.
 */
export function forgetIdleTopics(s: ProducerTopicState, acc: RecordAccumulator, cluster: Cluster, now: number, maxAgeMs: number, keepQueues: boolean): void {
  const topics = new Set([...s.partitionCounts.keys(), ...s.roundRobin.keys(), ...s.sticky.keys()]);
  for (const topic of topics) {
    const c = s.partitionCounts.get(topic);
    if ((c !== undefined && now - c.at < maxAgeMs) || s.topicWaits.has(topic)) continue;
    if (!acc.idle(topic)) continue;
    if (!keepQueues) acc.forget(topic);
    s.partitionCounts.delete(topic);
    s.roundRobin.delete(topic);
    s.sticky.delete(topic);
    cluster.forgetTopic(topic);
  }
}

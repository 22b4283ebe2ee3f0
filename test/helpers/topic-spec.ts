import type { TopicDefinition } from 'tributary-broker/partition/metadata-store.js';

/** What a metadata store's createTopic takes: a plain topic of `partitions` (no retention, delete policy). */
export type TopicSpec = Omit<TopicDefinition, 'topicId' | 'createdAt'>;

export function topicSpec(name: string, over: Partial<TopicSpec> = {}): TopicSpec {
  return {
    name,
    partitions: 1,
    replicationFactor: 1,
    idempotent: false,
    partitioner: 'hash_key',
    retentionHours: -1,
    retentionBytes: -1,
    cleanupPolicy: 'delete',
    ...over,
  };
}

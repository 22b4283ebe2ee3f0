import pino from 'pino';
import { resolveConfig } from 'tributary-broker/common/config.js';
import { BrokerMetrics } from 'tributary-broker/common/metrics.js';
import { LocalMetadataStore } from 'tributary-broker/partition/metadata-store.js';
import { TopicManager } from 'tributary-broker/partition/topic-manager.js';

/** A standalone broker's topics on `dir` (metadata.json, --flush os, silent), opened. */
export async function openTopicManager(dir: string): Promise<{ store: LocalMetadataStore; topics: TopicManager }> {
  const store = new LocalMetadataStore(dir);
  await store.open();
  const topics = new TopicManager(store, resolveConfig({ dataDir: dir, flush: 'os' }), pino({ level: 'silent' }), new BrokerMetrics());
  await topics.open();
  return { store, topics };
}

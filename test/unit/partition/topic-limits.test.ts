/**
 * A topic gets at most --max-partitions whatever its count's source: the request's, or the default a
 * request without one takes (main port CREATE, Kafka CreateTopics with numPartitions -1). The config
 * refuses a default above the maximum (config.ts); these check the creation itself, with a config that
 * was not validated (an embedding program's). Kafka CreateTopics also refuses a config key given twice,
 * and takes retention.ms 0 as CREATE takes retention_hours=0.
 */
import pino from 'pino';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { type BrokerConfig, resolveConfig } from 'tributary-broker/common/config.js';
import { BrokerMetrics } from 'tributary-broker/common/metrics.js';
import { TopicManager, type TopicSpec } from 'tributary-broker/partition/topic-manager.js';
import { LocalMetadataStore } from 'tributary-broker/partition/metadata-store.js';
import { createTopicsHandler } from 'tributary-broker/kafka/apis/create-topics.js';
import type { KafkaRequestContext } from 'tributary-broker/kafka/context.js';
import type { KafkaStruct } from 'tributary-broker/kafka/protocol/schema.js';
import type { KafkaRequestHeader } from 'tributary-broker/kafka/protocol/headers.js';
import { kafkaErrorCode } from 'tributary-broker/kafka/protocol/error-codes.js';
import { removeDir, tempDir } from '../../helpers/util.js';

/** Validated, then given a default above the maximum, as the schema now refuses. */
const unchecked = (dir: string): BrokerConfig => ({ ...resolveConfig({ dataDir: dir, flush: 'os' }), defaultPartitions: 8, maxPartitions: 4 });

const spec = (name: string, partitions: number): TopicSpec => ({
  name,
  partitions,
  replicationFactor: 1,
  idempotent: false,
  partitioner: 'hash_key',
  retentionHours: 168,
  retentionBytes: -1,
  cleanupPolicy: 'delete',
});

let dir: string;
let store: LocalMetadataStore;
let topics: TopicManager;
beforeEach(async () => {
  dir = await tempDir('trib-topic-limits-');
  store = new LocalMetadataStore(dir);
  await store.open();
  topics = new TopicManager(store, unchecked(dir), pino({ level: 'silent' }), new BrokerMetrics());
  await topics.open();
});
afterEach(async () => {
  await topics.close();
  await store.close();
  await removeDir(dir);
});

describe('TopicManager.create', () => {
  it('refuses more partitions than the maximum, wherever the count came from; internal topics keep their own setting', async () => {
    await expect(topics.create(spec('big', 8))).rejects.toMatchObject({ code: 'invalid_parameter', fields: { param: 'partitions' } });
    expect(store.getTopic('big')).toBeUndefined();
    expect((await topics.create(spec('ok', 4))).created).toBe(true);
    expect((await topics.create({ ...spec('__internal', 8), cleanupPolicy: 'compact', retentionHours: -1 }, { allowInternal: true })).created).toBe(true);
  });
});

describe('Kafka CreateTopics', () => {
  const ctx = () => ({ broker: { config: unchecked(dir), cluster: undefined, topics }, authorize: () => undefined }) as unknown as KafkaRequestContext;
  const create = async (topic: Partial<KafkaStruct>) => {
    const body = { topics: [{ name: 't', numPartitions: 1, replicationFactor: -1, assignments: [], configs: [], ...topic }], timeoutMs: 0, validateOnly: false };
    const res = (await createTopicsHandler.handle(ctx(), 5, body, {} as KafkaRequestHeader)) as { topics: Array<{ errorCode: number; errorMessage: string | null; numPartitions: number }> };
    return res.topics[0]!;
  };

  it('numPartitions -1 takes the default, bound by the maximum as a count given', async () => {
    expect(await create({ name: 'dflt', numPartitions: -1 })).toMatchObject({ errorCode: kafkaErrorCode('INVALID_PARTITIONS') });
    expect(await create({ name: 'given', numPartitions: 8 })).toMatchObject({ errorCode: kafkaErrorCode('INVALID_PARTITIONS') });
    expect(topics.tryGet('dflt')).toBeUndefined();
  });

  it('refuses a config key given twice instead of keeping the last', async () => {
    const r = await create({ name: 'dup', configs: [{ name: 'retention.bytes', value: '1000' }, { name: 'retention.bytes', value: '2000' }] });
    expect(r).toMatchObject({ errorCode: kafkaErrorCode('INVALID_REQUEST'), errorMessage: expect.stringMatching(/duplicate config keys: retention\.bytes/) });
    expect(topics.tryGet('dup')).toBeUndefined();
  });

  it('takes retention.ms 0 (as CREATE takes retention_hours=0) and refuses more hours than CREATE takes', async () => {
    expect(await create({ name: 'zero', configs: [{ name: 'retention.ms', value: '0' }] })).toMatchObject({ errorCode: 0 });
    expect(topics.get('zero').def.retentionHours).toBe(0);
    expect(await create({ name: 'long', configs: [{ name: 'retention.ms', value: String(1_000_001 * 3_600_000) }] })).toMatchObject({ errorCode: kafkaErrorCode('INVALID_CONFIG') });
    expect(await create({ name: 'neg', configs: [{ name: 'retention.ms', value: '-2' }] })).toMatchObject({ errorCode: kafkaErrorCode('INVALID_CONFIG') });
  });
});

/**
 * AlterConfigs and IncrementalAlterConfigs against a real broker (docs/kafka.md): kafkajs's alterConfigs
 * and @platformatic/kafka's alterConfigs / incrementalAlterConfigs change a topic's retention, which
 * DescribeConfigs and the main port's DESCRIBE then show; validateOnly changes nothing, and a refused
 * resource (another config, APPEND, a broker resource, an unknown topic) changes nothing of it.
 */
import { ConfigResourceTypes, Kafka, logLevel } from 'kafkajs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Connection } from 'tributary-protocol/connection.js';
import { kafkaErrorCode } from 'tributary-broker/kafka/protocol/error-codes.js';
import { BrokerProcess } from '../../helpers/launcher.js';
import { RawKafka } from '../../helpers/raw-kafka.js';

const HOUR = 3_600_000;

interface PlatformaticAdmin {
  alterConfigs(o: { resources: Array<{ resourceType: number; resourceName: string; configs: Array<{ name: string; value: string | null }> }>; validateOnly?: boolean }): Promise<void>;
  incrementalAlterConfigs(o: {
    resources: Array<{ resourceType: number; resourceName: string; configs: Array<{ name: string; configOperation: number; value: string | null }> }>;
    validateOnly?: boolean;
  }): Promise<void>;
  close(): Promise<void>;
}

describe('AlterConfigs and IncrementalAlterConfigs', () => {
  let broker: BrokerProcess;
  let c: Connection;
  let raw: RawKafka;
  const kafka = () => new Kafka({ brokers: [`127.0.0.1:${broker.kafkaPort}`], clientId: 'alter', logLevel: logLevel.NOTHING });

  beforeAll(async () => {
    broker = await BrokerProcess.start({ args: ['--kafka-port', '0', '--offsets-topic-partitions', '1', '--retention-hours', '100', '--retention-bytes', '-1', '--delete-retention-ms', '1234'] });
    c = await broker.connect();
    raw = await RawKafka.connect(broker.kafkaPort);
  });

  afterAll(async () => {
    raw?.socket.destroy();
    await broker?.dispose();
  });

  const policy = (topic: string) => c.json<{ retention_hours: number; retention_bytes: number; delete_retention_ms: number }>('DESCRIBE', { topic });

  it('kafkajs alterConfigs changes retention, DescribeConfigs and DESCRIBE show it; what it leaves out goes back to the defaults', async () => {
    const admin = kafka().admin();
    await admin.connect();
    try {
      await admin.createTopics({ topics: [{ topic: 'ka', numPartitions: 2, configEntries: [{ name: 'retention.ms', value: String(5 * HOUR) }, { name: 'retention.bytes', value: '999' }] }] });
      await admin.alterConfigs({
        validateOnly: false,
        resources: [{ type: ConfigResourceTypes.TOPIC, name: 'ka', configEntries: [{ name: 'retention.ms', value: String(2 * HOUR) }, { name: 'delete.retention.ms', value: '777' }] }],
      });
      const described = await admin.describeConfigs({
        includeSynonyms: false,
        resources: [{ type: ConfigResourceTypes.TOPIC, name: 'ka', configNames: ['retention.ms', 'retention.bytes', 'delete.retention.ms', 'cleanup.policy'] }],
      });
      const entries = Object.fromEntries(described.resources[0]!.configEntries.map((e) => [e.configName, { value: e.configValue, readOnly: e.readOnly }]));
      expect(entries).toEqual({
        'retention.ms': { value: String(2 * HOUR), readOnly: false },
        // Not given: back to --retention-bytes, as Kafka's AlterConfigs replaces the whole set.
        'retention.bytes': { value: '-1', readOnly: false },
        'delete.retention.ms': { value: '777', readOnly: false },
        'cleanup.policy': { value: 'delete', readOnly: true },
      });
      expect(await policy('ka')).toMatchObject({ retention_hours: 2, retention_bytes: -1, delete_retention_ms: 777 });

      // validateOnly: checked, nothing changed.
      await admin.alterConfigs({ validateOnly: true, resources: [{ type: ConfigResourceTypes.TOPIC, name: 'ka', configEntries: [{ name: 'retention.bytes', value: '1' }] }] });
      expect(await policy('ka')).toMatchObject({ retention_hours: 2, retention_bytes: -1, delete_retention_ms: 777 });

      // Refused, each changing nothing: a partial hour, another config, an unknown topic, a broker resource.
      const refused: Array<[number, string, { name: string; value: string }, string]> = [
        [ConfigResourceTypes.TOPIC, 'ka', { name: 'retention.ms', value: '1000' }, 'INVALID_CONFIG'],
        [ConfigResourceTypes.TOPIC, 'ka', { name: 'cleanup.policy', value: 'delete' }, 'INVALID_CONFIG'],
        [ConfigResourceTypes.TOPIC, 'ka', { name: 'retention.bytes', value: '-2' }, 'INVALID_CONFIG'],
        [ConfigResourceTypes.TOPIC, 'nope', { name: 'retention.bytes', value: '5' }, 'UNKNOWN_TOPIC_OR_PARTITION'],
        [ConfigResourceTypes.TOPIC, '__consumer_offsets', { name: 'retention.bytes', value: '5' }, 'UNKNOWN_TOPIC_OR_PARTITION'],
        [ConfigResourceTypes.BROKER, '0', { name: 'log.retention.hours', value: '5' }, 'INVALID_REQUEST'],
      ];
      for (const [type, name, entry, type_] of refused) {
        await expect(admin.alterConfigs({ validateOnly: false, resources: [{ type, name, configEntries: [entry] }] }), `${name} ${entry.name}`).rejects.toMatchObject({ type: type_ });
      }
      expect(await policy('ka')).toMatchObject({ retention_hours: 2, retention_bytes: -1, delete_retention_ms: 777 });
      expect(await c.json('DESCRIBE', { topic: '__consumer_offsets' })).toMatchObject({ retention_hours: -1, retention_bytes: -1 });
    } finally {
      await admin.disconnect();
    }
  });

  it('@platformatic/kafka alterConfigs and incrementalAlterConfigs: SET and DELETE (back to the default)', async () => {
    await c.command('CREATE', { topic: 'pa', partitions: 1, retention_hours: 10, retention_bytes: 5000 });
    await import('../../helpers/with-resolvers.js');
    const pk = (await import('@platformatic/kafka')) as unknown as { Admin: new (o: { clientId: string; bootstrapBrokers: string[] }) => PlatformaticAdmin };
    const admin = new pk.Admin({ clientId: 'pk-alter', bootstrapBrokers: [`127.0.0.1:${broker.kafkaPort}`] });
    try {
      await admin.incrementalAlterConfigs({
        resources: [
          {
            resourceType: 2,
            resourceName: 'pa',
            configs: [
              { name: 'retention.bytes', configOperation: 0, value: '8192' },
              { name: 'retention.ms', configOperation: 1, value: null },
            ],
          },
        ],
      });
      // retention.ms deleted: the broker's --retention-hours; retention.bytes set; the rest as it was.
      expect(await policy('pa')).toMatchObject({ retention_hours: 100, retention_bytes: 8192, delete_retention_ms: 1234 });
      await admin.incrementalAlterConfigs({ validateOnly: true, resources: [{ resourceType: 2, resourceName: 'pa', configs: [{ name: 'retention.bytes', configOperation: 0, value: '1' }] }] });
      await expect(
        admin.incrementalAlterConfigs({ resources: [{ resourceType: 2, resourceName: 'pa', configs: [{ name: 'retention.bytes', configOperation: 2, value: '1' }] }] }),
      ).rejects.toThrow();
      expect(await policy('pa')).toMatchObject({ retention_hours: 100, retention_bytes: 8192 });
      await admin.alterConfigs({ resources: [{ resourceType: 2, resourceName: 'pa', configs: [{ name: 'retention.ms', value: '-1' }, { name: 'retention.bytes', value: '4096' }] }] });
      expect(await policy('pa')).toMatchObject({ retention_hours: -1, retention_bytes: 4096, delete_retention_ms: 1234 });
    } finally {
      await admin.close();
    }
  });

  it('per resource: a refused one changes nothing of it, the others are applied (IncrementalAlterConfigs v1, raw)', async () => {
    await c.command('CREATE', { topic: 'ra', partitions: 1, retention_hours: 10 });
    await c.command('CREATE', { topic: 'rb', partitions: 1, retention_hours: 10 });
    await c.command('CREATE', { topic: 're', partitions: 1, retention_hours: 10 });
    const res = await raw.call(44, 1, {
      resources: [
        { resourceType: 2, resourceName: 'ra', configs: [{ name: 'retention.ms', configOperation: 0, value: String(3 * HOUR) }] },
        // One bad op refuses the whole resource: its good SET is not applied either.
        {
          resourceType: 2,
          resourceName: 'rb',
          configs: [
            { name: 'retention.ms', configOperation: 0, value: String(4 * HOUR) },
            { name: 'retention.bytes', configOperation: 3, value: '1' },
          ],
        },
        { resourceType: 2, resourceName: 'rb', configs: [] },
        { resourceType: 4, resourceName: '', configs: [{ name: 'num.partitions', configOperation: 0, value: '3' }] },
        { resourceType: 2, resourceName: 'ra', configs: [{ name: 'segment.bytes', configOperation: 0, value: '3' }] },
      ],
      validateOnly: false,
    });
    const codes = (res.responses as Array<{ resourceName: string; errorCode: number }>).map((r) => [r.resourceName, r.errorCode]);
    // As Kafka: every entry of a resource given twice is refused.
    expect(codes).toEqual([
      ['ra', kafkaErrorCode('INVALID_REQUEST')],
      ['rb', kafkaErrorCode('INVALID_REQUEST')],
      ['rb', kafkaErrorCode('INVALID_REQUEST')],
      ['', kafkaErrorCode('INVALID_REQUEST')],
      ['ra', kafkaErrorCode('INVALID_REQUEST')],
    ]);
    const one = await raw.call(44, 1, {
      resources: [
        { resourceType: 2, resourceName: 'ra', configs: [{ name: 'retention.ms', configOperation: 0, value: String(3 * HOUR) }] },
        { resourceType: 2, resourceName: 'rb', configs: [{ name: 'retention.bytes', configOperation: 3, value: '1' }] },
        { resourceType: 2, resourceName: 'ra2', configs: [{ name: 'retention.bytes', configOperation: 9, value: '1' }] },
        { resourceType: 2, resourceName: 're', configs: [{ name: 'retention.bytes', configOperation: 9, value: '1' }] },
        { resourceType: 2, resourceName: 'rc', configs: [{ name: 'retention.bytes', configOperation: 0, value: null }] },
        { resourceType: 2, resourceName: 'rd', configs: [{ name: 'retention.bytes', configOperation: 0, value: '1' }, { name: 'retention.bytes', configOperation: 1, value: null }] },
        { resourceType: 7, resourceName: 'x', configs: [] },
      ],
      validateOnly: false,
    });
    expect((one.responses as Array<{ errorCode: number }>).map((r) => r.errorCode)).toEqual([
      0,
      kafkaErrorCode('INVALID_CONFIG'),
      kafkaErrorCode('UNKNOWN_TOPIC_OR_PARTITION'),
      kafkaErrorCode('INVALID_REQUEST'),
      kafkaErrorCode('INVALID_REQUEST'),
      kafkaErrorCode('INVALID_REQUEST'),
      kafkaErrorCode('INVALID_REQUEST'),
    ]);
    expect(await policy('ra')).toMatchObject({ retention_hours: 3 });
    expect(await policy('rb')).toMatchObject({ retention_hours: 10, retention_bytes: -1 });
    expect(await policy('re')).toMatchObject({ retention_hours: 10, retention_bytes: -1 });
  });
});

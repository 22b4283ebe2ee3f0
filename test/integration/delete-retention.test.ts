/**
 * A topic's tombstone retention (Kafka's delete.retention.ms; docs/protocol.md "Topics and metadata",
 * docs/operations.md "Tombstones in compacted topics"): only a compacted topic takes it, so CREATE refuses
 * `delete_retention_ms` on a topic that is not (every user topic in this version) and creates nothing,
 * while Kafka's CreateTopics stores `delete.retention.ms` on any topic, as Kafka does. DESCRIBE shows the
 * value in effect (else the broker's --delete-retention-ms), and a bad value is refused with nothing created.
 */
import { Kafka, logLevel } from 'kafkajs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseLine } from 'tributary-protocol/command.js';
import type { Connection } from 'tributary-protocol/connection.js';
import { runCli } from '../helpers/cli.js';
import { BrokerProcess } from '../helpers/launcher.js';

const cli = (args: string[]) => runCli(args);

describe('delete_retention_ms', () => {
  let broker: BrokerProcess;
  let c: Connection;

  beforeAll(async () => {
    broker = await BrokerProcess.start({ args: ['--offsets-topic-partitions', '1', '--delete-retention-ms', '1234', '--kafka-port', '0'] });
    c = await broker.connect();
  });

  afterAll(async () => {
    await broker?.dispose();
  });

  const topics = async () => (parseLine(await c.command('LIST')).params.get('topics') ?? '').split(',');

  it('CREATE refuses it on a topic that is not compacted and creates nothing; without it the broker default is in effect', async () => {
    // Before: stored with a delete-policy topic, where it did nothing (no topic changes its policy).
    for (const params of [{ delete_retention_ms: 5000 }, { delete_retention_ms: 0, cleanup_policy: 'delete' }]) {
      await expect(c.command('CREATE', { topic: 'dr-own', ...params })).rejects.toMatchObject({
        code: 'invalid_parameter',
        fields: expect.objectContaining({ param: 'delete_retention_ms', reason: 'only a compacted topic keeps tombstones; this one is cleanup_policy=delete' }),
      });
    }
    expect(await topics()).not.toContain('dr-own');
    await c.command('CREATE', { topic: 'dr-default' });
    expect(await c.json('DESCRIBE', { topic: 'dr-default' })).toMatchObject({ delete_retention_ms: 1234 });
    expect(await c.json('DESCRIBE', { topic: '__consumer_offsets' })).toMatchObject({ cleanup_policy: 'compact', delete_retention_ms: 1234 });
    const described = await cli(['topic', 'describe', '__consumer_offsets', '--bootstrap', broker.address]);
    expect(described.stdout).toMatch(/cleanup compact \(tombstones 1234 ms\)/);
  });

  it("Kafka's CreateTopics stores delete.retention.ms on a delete-policy topic, as Kafka does", async () => {
    const admin = new Kafka({ brokers: [`127.0.0.1:${broker.kafkaPort}`], clientId: 'dr', logLevel: logLevel.NOTHING }).admin();
    await admin.connect();
    try {
      expect(await admin.createTopics({ topics: [{ topic: 'dr-kafka', numPartitions: 1, configEntries: [{ name: 'delete.retention.ms', value: '5000' }] }] })).toBe(true);
    } finally {
      await admin.disconnect();
    }
    expect(await c.json('DESCRIBE', { topic: 'dr-kafka' })).toMatchObject({ cleanup_policy: 'delete', delete_retention_ms: 5000 });
  });

  it('a negative, fractional, non-numeric or unsafe value is an ERROR and creates nothing; topic create has no option for it', async () => {
    for (const bad of ['-1', '1.5', 'abc', '9007199254740992', '']) {
      const reply = await c.command('CREATE', { topic: 'dr-bad', delete_retention_ms: bad }).catch((e: unknown) => e);
      expect(reply, bad).toMatchObject({ code: 'invalid_parameter', fields: expect.objectContaining({ param: 'delete_retention_ms' }) });
    }
    const unknown = await cli(['topic', 'create', 'dr-bad', '--delete-retention-ms', '5', '--bootstrap', broker.address]);
    expect(unknown.code).toBe(2);
    expect(unknown.stderr).toMatch(/error: unknown option '--delete-retention-ms'/);
    expect(await topics()).not.toContain('dr-bad');
  });
});

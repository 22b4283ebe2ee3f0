/**
 * A topic's tombstone retention (Kafka's delete.retention.ms; docs/protocol.md "Topics and metadata",
 * docs/operations.md "Tombstones in compacted topics"): `topic create --delete-retention-ms` and CREATE's
 * `delete_retention_ms` store it with the topic, DESCRIBE shows the value in effect (else the broker's
 * --delete-retention-ms), and a bad value is refused with nothing created.
 */
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
    broker = await BrokerProcess.start({ args: ['--offsets-topic-partitions', '1', '--delete-retention-ms', '1234'] });
    c = await broker.connect();
  });

  afterAll(async () => {
    await broker?.dispose();
  });

  const topics = async () => (parseLine(await c.command('LIST')).params.get('topics') ?? '').split(',');

  it('is stored with the topic and shown by CREATE and DESCRIBE; without it the broker default is in effect', async () => {
    const b = ['--bootstrap', broker.address];
    const created = await cli(['topic', 'create', 'dr-own', '--delete-retention-ms', '5000', '--format', 'json', ...b]);
    expect(created.code).toBe(0);
    expect(JSON.parse(created.stdout)).toMatchObject({ topic: 'dr-own', delete_retention_ms: '5000', created: 'true' });
    expect(await c.json('DESCRIBE', { topic: 'dr-own' })).toMatchObject({ delete_retention_ms: 5000 });
    // CREATE is idempotent for the same definition only: another tombstone retention is another definition.
    expect(parseLine(await c.command('CREATE', { topic: 'dr-own', delete_retention_ms: 5000 })).params.get('created')).toBe('false');
    await expect(c.command('CREATE', { topic: 'dr-own', delete_retention_ms: 6000 })).rejects.toMatchObject({ code: 'topic_already_exists' });
    await c.command('CREATE', { topic: 'dr-default' });
    expect(await c.json('DESCRIBE', { topic: 'dr-default' })).toMatchObject({ delete_retention_ms: 1234 });
    expect(await c.json('DESCRIBE', { topic: '__consumer_offsets' })).toMatchObject({ cleanup_policy: 'compact', delete_retention_ms: 1234 });
    const described = await cli(['topic', 'describe', '__consumer_offsets', ...b]);
    expect(described.stdout).toMatch(/cleanup compact \(tombstones 1234 ms\)/);
  });

  it('a negative, fractional, non-numeric or unsafe value is an ERROR and creates nothing', async () => {
    const b = ['--bootstrap', broker.address];
    for (const bad of ['-1', '1.5', 'abc', '9007199254740992', '']) {
      const reply = await c.command('CREATE', { topic: 'dr-bad', delete_retention_ms: bad }).catch((e: unknown) => e);
      expect(reply, bad).toMatchObject({ code: 'invalid_parameter', fields: expect.objectContaining({ param: 'delete_retention_ms' }) });
      if (bad === '') continue;
      const res = await cli(['topic', 'create', 'dr-bad', '--delete-retention-ms', bad, ...b]);
      expect(res.code, bad).toBe(2);
      expect(res.stderr, bad).toMatch(/error: option '--delete-retention-ms <ms>' argument .* is invalid/);
    }
    const unknown = await cli(['topic', 'create', 'dr-bad', '--delete-retention', '5', ...b]);
    expect(unknown.code).toBe(2);
    expect(unknown.stderr).toMatch(/error: unknown option '--delete-retention'/);
    expect(await topics()).not.toContain('dr-bad');
  });
});

/**
 * ALTER_TOPIC on a standalone broker (docs/protocol.md, "Topics and metadata"): a topic's retention settings
 * change after creation with CREATE's ranges and rules, are in effect without a restart (the next retention
 * pass deletes by the new limit), are kept in metadata.json across a restart, and a refused request
 * changes nothing.
 */
import fs from 'node:fs/promises';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Connection } from 'tributary-protocol/connection.js';
import { parseLine } from 'tributary-protocol/command.js';
import { Admin } from 'tributary-client/admin.js';
import { runCli } from '../helpers/cli.js';
import { BrokerProcess } from '../helpers/launcher.js';
import { eventually } from '../helpers/util.js';

interface Described {
  retention_hours: number;
  retention_bytes: number;
  delete_retention_ms: number;
  partitions: Array<{ earliest: number; leo: number }>;
}

describe('ALTER_TOPIC (standalone)', () => {
  let broker: BrokerProcess;
  let c: Connection;

  beforeAll(async () => {
    // Small segments and a short retention pass: a lowered retention_bytes shows within a moment.
    broker = await BrokerProcess.start({ args: ['--segment-bytes', '1024', '--retention-check-ms', '100', '--delete-retention-ms', '4321', '--offsets-topic-partitions', '1'] });
    c = await broker.connect();
  });

  afterAll(async () => {
    await broker?.dispose();
  });

  const describeTopic = (topic: string) => c.json<Described>('DESCRIBE', { topic });

  it('changes the given settings only, replies with the values in effect, and DESCRIBE shows them', async () => {
    await c.command('CREATE', { topic: 'alt', partitions: 2, retention_hours: 24, retention_bytes: 1_000_000 });
    const reply = parseLine(await c.command('ALTER_TOPIC', { topic: 'alt', retention_hours: 48 })).params;
    expect(Object.fromEntries(reply)).toEqual({ topic: 'alt', retention_hours: '48', retention_bytes: '1000000', delete_retention_ms: '4321' });
    expect(await describeTopic('alt')).toMatchObject({ retention_hours: 48, retention_bytes: 1_000_000, delete_retention_ms: 4321 });
    await c.command('ALTER_TOPIC', { topic: 'alt', retention_hours: -1, retention_bytes: -1 });
    expect(await describeTopic('alt')).toMatchObject({ retention_hours: -1, retention_bytes: -1 });
    await c.command('ALTER_TOPIC', { topic: 'alt', retention_hours: 0, retention_bytes: 5000 });
    expect(await describeTopic('alt')).toMatchObject({ retention_hours: 0, retention_bytes: 5000 });
  });

  it('refuses bad input with the ERROR CREATE gives, and changes nothing', async () => {
    await c.command('CREATE', { topic: 'alt-bad', retention_hours: 10, retention_bytes: 2000 });
    const refused: Array<[Record<string, string | number>, string, string | undefined]> = [
      [{ topic: 'alt-bad', retention_hours: -2 }, 'invalid_parameter', 'retention_hours'],
      [{ topic: 'alt-bad', retention_hours: 1_000_001 }, 'invalid_parameter', 'retention_hours'],
      [{ topic: 'alt-bad', retention_hours: '1.5' }, 'invalid_parameter', 'retention_hours'],
      [{ topic: 'alt-bad', retention_bytes: -2 }, 'invalid_parameter', 'retention_bytes'],
      [{ topic: 'alt-bad', retention_bytes: 'abc', retention_hours: 5 }, 'invalid_parameter', 'retention_bytes'],
      [{ topic: 'alt-bad', delete_retention_ms: -1 }, 'invalid_parameter', 'delete_retention_ms'],
      // Only a compacted topic keeps tombstones, as CREATE refuses it.
      [{ topic: 'alt-bad', delete_retention_ms: 5000, retention_hours: 5 }, 'invalid_parameter', 'delete_retention_ms'],
      [{ topic: 'alt-bad', retention_hourz: 5 }, 'invalid_parameter', 'retention_hourz'],
      [{ topic: 'alt-bad', partitions: 5, retention_hours: 5 }, 'invalid_parameter', 'partitions'],
      [{ topic: 'alt-bad' }, 'invalid_parameter', 'command'],
      [{ retention_hours: 5 }, 'invalid_parameter', 'topic'],
      // As ADD_PARTITIONS and DELETE refuse an internal topic.
      [{ topic: '__consumer_offsets', retention_hours: 5 }, 'invalid_topic_name', undefined],
      [{ topic: 'no-such-topic', retention_hours: 5 }, 'topic_not_found', undefined],
    ];
    for (const [params, code, param] of refused) {
      const err = await c.command('ALTER_TOPIC', params).catch((e: unknown) => e);
      expect(err, JSON.stringify(params)).toMatchObject({ code, ...(param ? { fields: expect.objectContaining({ param }) } : {}) });
    }
    expect(await describeTopic('alt-bad')).toMatchObject({ retention_hours: 10, retention_bytes: 2000, delete_retention_ms: 4321 });
    expect(await c.json('DESCRIBE', { topic: '__consumer_offsets' })).toMatchObject({ retention_hours: -1, retention_bytes: -1 });
    const topics = (parseLine(await c.command('LIST')).params.get('topics') ?? '').split(',');
    expect(topics).not.toContain('no-such-topic');
  });

  it('a lowered retention_bytes deletes closed segments at the next retention pass, without a restart', async () => {
    await c.command('CREATE', { topic: 'alt-shrink', partitions: 1, retention_hours: -1, retention_bytes: -1 });
    for (let i = 0; i < 30; i++) await c.command('PUBLISH', { topic: 'alt-shrink', partition: 0, message: `record-${i}-${'x'.repeat(200)}` });
    const before = (await describeTopic('alt-shrink')).partitions[0]!;
    expect(before).toMatchObject({ earliest: 0, leo: 30 });
    await c.command('ALTER_TOPIC', { topic: 'alt-shrink', retention_bytes: 1 });
    // Every closed segment goes; the active one stays, so the earliest offset moves up but not past the end.
    const earliest = await eventually('the earliest offset to move', async () => {
      const e = (await describeTopic('alt-shrink')).partitions[0]!.earliest;
      return e > 0 ? e : undefined;
    });
    expect(earliest).toBeLessThanOrEqual(30);
  });

  it('tributary topic alter: changes what is given, refuses no settings (exit 2) and what the broker refuses (exit 1)', async () => {
    const b = ['--bootstrap', broker.address];
    await c.command('CREATE', { topic: 'alt-cli', retention_hours: 5, retention_bytes: 100 });
    const ok = await runCli(['topic', 'alter', 'alt-cli', '--retention-hours', '-1', ...b]);
    expect(ok.code, ok.stderr).toBe(0);
    expect(ok.stdout).toBe('altered topic alt-cli: retention unlimited / 100 B, tombstones 4321 ms\n');
    const json = await runCli(['topic', 'alter', 'alt-cli', '--retention-bytes', '2048', '--format', 'json', ...b]);
    expect(JSON.parse(json.stdout)).toEqual({ topic: 'alt-cli', retention_hours: '-1', retention_bytes: '2048', delete_retention_ms: '4321' });
    expect(await describeTopic('alt-cli')).toMatchObject({ retention_hours: -1, retention_bytes: 2048 });
    const none = await runCli(['topic', 'alter', 'alt-cli', ...b]);
    expect(none.code).toBe(2);
    expect(none.stderr).toMatch(/error: give --replication-factor or at least one of --retention-hours, --retention-bytes, --delete-retention-ms/);
    // --throttle and --wait shape a replication-factor change; alone they would be ignored, so they are refused.
    for (const extra of [['--throttle', '1000'], ['--wait']]) {
      const stray = await runCli(['topic', 'alter', 'alt-cli', '--retention-hours', '7', ...extra, ...b]);
      expect(stray.code, extra.join(' ')).toBe(2);
      expect(stray.stderr).toMatch(/error: --throttle and --wait go with --replication-factor/);
    }
    const badValue = await runCli(['topic', 'alter', 'alt-cli', '--retention-hours', '-2', ...b]);
    expect(badValue.code).toBe(2);
    const refused = await runCli(['topic', 'alter', 'alt-cli', '--delete-retention-ms', '5', ...b]);
    expect(refused.code).toBe(1);
    expect(refused.stderr).toMatch(/error: invalid_parameter param=delete_retention_ms/);
    const unknown = await runCli(['topic', 'alter', 'alt-none', '--retention-hours', '1', ...b]);
    expect(unknown.code).toBe(1);
    expect(unknown.stderr).toMatch(/error: topic_not_found/);
    expect(await describeTopic('alt-cli')).toMatchObject({ retention_hours: -1, retention_bytes: 2048 });
  });

  it('the SDK: admin.alterTopic changes what is given and refuses unknown options and no settings before sending', async () => {
    const admin = new Admin({ brokers: [broker.address], retry: { retries: 1, initialDelayMs: 10 } });
    try {
      await admin.createTopic({ topic: 'alt-sdk', retentionHours: 5, retentionBytes: 100 });
      expect(await admin.alterTopic('alt-sdk', { retentionBytes: 4096 })).toEqual({ topic: 'alt-sdk', retentionHours: 5, retentionBytes: 4096, deleteRetentionMs: 4321 });
      expect(await admin.describeTopic('alt-sdk')).toMatchObject({ retention_hours: 5, retention_bytes: 4096 });
      await expect(admin.alterTopic('alt-sdk', { retentionHourz: 1 } as never)).rejects.toMatchObject({ code: 'invalid_config', fields: expect.objectContaining({ option: 'retentionHourz', did_you_mean: 'retentionHours' }) });
      await expect(admin.alterTopic('alt-sdk', {})).rejects.toMatchObject({ code: 'invalid_parameter' });
      await expect(admin.alterTopic('alt-sdk', { retentionHours: -2 })).rejects.toMatchObject({ code: 'invalid_parameter', fields: expect.objectContaining({ param: 'retentionHours' }) });
      await expect(admin.alterTopic('alt-sdk', { deleteRetentionMs: 5 })).rejects.toMatchObject({ code: 'invalid_parameter', fields: expect.objectContaining({ param: 'delete_retention_ms' }) });
      await expect(admin.alterTopic('alt-sdk-none', { retentionHours: 1 })).rejects.toMatchObject({ code: 'topic_not_found' });
      const aborted = new AbortController();
      aborted.abort();
      await expect(admin.alterTopic('alt-sdk', { retentionHours: 1 }, { signal: aborted.signal })).rejects.toThrow();
      expect(await admin.describeTopic('alt-sdk')).toMatchObject({ retention_hours: 5, retention_bytes: 4096 });
    } finally {
      await admin.close();
    }
  });

  it('HTTP PATCH /api/v1/topics/{topic}: 200 with the values in effect; 4xx for bad input, unknown fields and topics, changing nothing', async () => {
    await c.command('CREATE', { topic: 'alt-http', retention_hours: 5, retention_bytes: 100 });
    const patch = async (topic: string, body: string, type = 'application/json') => {
      const res = await fetch(`http://127.0.0.1:${broker.healthPort}/api/v1/topics/${topic}`, { method: 'PATCH', headers: { 'content-type': type }, body });
      return { status: res.status, body: (await res.json()) as Record<string, unknown> & { error?: { code: string; fields: Record<string, unknown> } } };
    };
    const ok = await patch('alt-http', JSON.stringify({ retentionHours: 12, retentionBytes: -1 }));
    expect(ok).toEqual({ status: 200, body: { name: 'alt-http', retentionHours: 12, retentionBytes: -1, deleteRetentionMs: 4321 } });
    const got = (await (await fetch(`http://127.0.0.1:${broker.healthPort}/api/v1/topics/alt-http`)).json()) as Record<string, unknown>;
    expect(got).toMatchObject({ retentionHours: 12, retentionBytes: -1, deleteRetentionMs: 4321 });
    const refused: Array<[string, string, number, string]> = [
      ['alt-http', JSON.stringify({ retentionHours: 1, cleanupPolicy: 'delete' }), 400, 'invalid_parameter'],
      ['alt-http', JSON.stringify({}), 400, 'invalid_parameter'],
      ['alt-http', JSON.stringify({ retentionHours: -2 }), 400, 'invalid_parameter'],
      ['alt-http', JSON.stringify({ retentionBytes: '5' }), 400, 'invalid_parameter'],
      ['alt-http', JSON.stringify({ deleteRetentionMs: 5 }), 400, 'invalid_parameter'],
      ['alt-http', '{"retentionHours":1,"retentionHours":2}', 400, 'invalid_parameter'],
      ['alt-http', 'not json', 400, 'invalid_parameter'],
      ['alt-http-none', JSON.stringify({ retentionHours: 1 }), 404, 'topic_not_found'],
    ];
    for (const [topic, body, status, code] of refused) {
      const r = await patch(topic, body);
      expect([r.status, r.body.error?.code], body).toEqual([status, code]);
    }
    // A value the broker refuses is named by the body's field, not the command's parameter (retention_hours).
    expect((await patch('alt-http', JSON.stringify({ retentionHours: 2_000_000 }))).body.error?.fields.param).toBe('retentionHours');
    // Named by what the request lacks, not by the SDK's argument behind the route (it said param=opts).
    expect((await patch('alt-http', '{}')).body.error?.fields).toMatchObject({ param: 'body', reason: expect.stringMatching(/retentionHours, retentionBytes, deleteRetentionMs/) });
    expect((await patch('alt-http', JSON.stringify({ retentionHours: 1 }), 'text/plain')).status).toBe(400);
    expect(await describeTopic('alt-http')).toMatchObject({ retention_hours: 12, retention_bytes: -1 });
  });

  it('keeps the altered settings across a restart (metadata.json)', async () => {
    await c.command('CREATE', { topic: 'alt-kept', retention_hours: 3 });
    await c.command('ALTER_TOPIC', { topic: 'alt-kept', retention_hours: 7, retention_bytes: 123456 });
    const stored = JSON.parse(await fs.readFile(path.join(broker.dataDir, 'metadata.json'), 'utf8')) as { topics: Array<{ name: string; retentionHours: number; retentionBytes: number }> };
    expect(stored.topics.find((t) => t.name === 'alt-kept')).toMatchObject({ retentionHours: 7, retentionBytes: 123456 });
    await broker.restart();
    c = await broker.connect();
    expect(await describeTopic('alt-kept')).toMatchObject({ retention_hours: 7, retention_bytes: 123456 });
    expect(await describeTopic('alt')).toMatchObject({ retention_hours: 0, retention_bytes: 5000 });
  });
});

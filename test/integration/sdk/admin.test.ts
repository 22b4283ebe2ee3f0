/**
 * The Admin client against a real broker: every method, the errors the broker raises surfacing as
 * TributaryErrors, and the client's lifecycle.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Admin } from 'tributary-client/admin.js';
import type { Connection } from 'tributary-protocol/connection.js';
import { Producer } from 'tributary-client/producer.js';
import { BrokerProcess } from '../../helpers/launcher.js';
import { rejection } from '../../helpers/util.js';

describe('Admin against a broker', () => {
  let broker: BrokerProcess;
  let raw: Connection;
  let admin: Admin;

  /** A member of `group` on `topic` that owns every partition, over a raw connection. */
  async function joinAndCommit(topic: string, group: string, commits: Record<number, number>): Promise<{ conn: Connection; member: string }> {
    const conn = await broker.connect();
    const join = await conn.command('JOIN_GROUP', { topic, group, member: 'admin-test' });
    const member = /member=(\S+)/.exec(join)![1]!;
    const generation = Number(/generation=(\d+)/.exec(join)![1]);
    await conn.command('SYNC_GROUP', { topic, group, member, generation });
    for (const [partition, offset] of Object.entries(commits)) {
      await conn.command('COMMIT_OFFSET', { topic, group, partition: Number(partition), offset, member, generation });
    }
    return { conn, member };
  }

  beforeAll(async () => {
    broker = await BrokerProcess.start({ args: ['--offsets-topic-partitions', '4', '--group-join-window-ms', '20'] });
    raw = await broker.connect();
    admin = new Admin({ brokers: [broker.address], retry: { retries: 2, initialDelayMs: 10 } });
  });

  afterAll(async () => {
    await admin?.close();
    await broker?.dispose();
  });

  it('refuses bad options at construction', () => {
    expect(() => new Admin({ brokers: [] })).toThrow(expect.objectContaining({ code: 'invalid_config' }));
    expect(() => new Admin({ brokers: ['nohost'] })).toThrow(expect.objectContaining({ code: 'invalid_config' }));
    expect(() => new Admin({ brokers: ['127.0.0.1:1'], retry: 5 as never })).toThrow(expect.objectContaining({ code: 'invalid_config' }));
  });

  it('createTopic returns the definition and created=true, then created=false for the same definition', async () => {
    const first = await admin.createTopic({ topic: 'a-create', partitions: 3, retentionHours: 24, retentionBytes: 1_000_000 });
    expect(first).toEqual({
      topic: 'a-create',
      partitions: 3,
      replicationFactor: 1,
      idempotent: false,
      partitioner: 'hash_key',
      retentionHours: 24,
      retentionBytes: 1_000_000,
      cleanupPolicy: 'delete',
      deleteRetentionMs: 86_400_000, // the broker's --delete-retention-ms (the topic sets none)
      created: true,
    });
    const again = await admin.createTopic({ topic: 'a-create', partitions: 3, retentionHours: 24, retentionBytes: 1_000_000 });
    expect(again).toEqual({ ...first, created: false });
    const conflict = await rejection(admin.createTopic({ topic: 'a-create', partitions: 5 }));
    expect(conflict.code).toBe('topic_already_exists');
    expect((await rejection(admin.createTopic({ topic: 'bad name!' }))).code).toBe('invalid_topic_name');
    expect((await rejection(admin.createTopic({ topic: 'x', partitions: 0 }))).code).toBe('invalid_parameter');
    const defaults = await admin.createTopic({ topic: 'a-defaults' });
    expect(defaults.partitions).toBe(4);
    expect(defaults.created).toBe(true);
  });

  it('listTopics lists user topics (internal ones on request), sorted', async () => {
    await admin.createTopic({ topic: 'a-list-2', partitions: 1 });
    await admin.createTopic({ topic: 'a-list-1', partitions: 1 });
    const topics = await admin.listTopics();
    expect(topics).toEqual([...topics].sort());
    expect(topics).toEqual(expect.arrayContaining(['a-list-1', 'a-list-2']));
    expect(topics.some((t) => t.startsWith('__'))).toBe(false);
    expect(await admin.listTopics({ includeInternal: true })).toContain('__consumer_offsets');
  });

  it('describeTopic returns the parsed DESCRIBE JSON', async () => {
    await admin.createTopic({ topic: 'a-describe', partitions: 2 });
    await raw.command('PUBLISH', { topic: 'a-describe', partition: 1, message: 'x' });
    const d = await admin.describeTopic('a-describe');
    expect(d).toMatchObject({ topic: 'a-describe', replication_factor: 1, partitioner: 'hash_key', cleanup_policy: 'delete' });
    expect((d as unknown as Record<string, unknown>).status).toBeUndefined();
    expect(d.partitions.map((p) => [p.id, p.earliest, p.leo, p.hwm])).toEqual([
      [0, 0, 0, 0],
      [1, 0, 1, 1],
    ]);
    expect(d.partitions[0]!.leader).toBe(broker.address);
    expect((await rejection(admin.describeTopic('a-missing'))).code).toBe('topic_not_found');
  });

  it('listOffsets parses earliest/latest/leo/hwm for every partition or one', async () => {
    await admin.createTopic({ topic: 'a-offsets', partitions: 3 });
    const p = new Producer({ brokers: [broker.address] });
    await p.send({ topic: 'a-offsets', messages: [0, 0, 2, 2, 2].map((partition) => ({ value: 'v', partition })) });
    await p.close();
    expect(await admin.listOffsets('a-offsets')).toEqual([
      { partition: 0, earliest: 0, latest: 2, leo: 2, hwm: 2 },
      { partition: 1, earliest: 0, latest: 0, leo: 0, hwm: 0 },
      { partition: 2, earliest: 0, latest: 3, leo: 3, hwm: 3 },
    ]);
    expect(await admin.listOffsets('a-offsets', 2)).toEqual([{ partition: 2, earliest: 0, latest: 3, leo: 3, hwm: 3 }]);
    expect((await rejection(admin.listOffsets('a-offsets', 9))).code).toBe('partition_not_found');
  });

  it('deleteTopic deletes; a second delete is topic_not_found', async () => {
    await admin.createTopic({ topic: 'a-delete', partitions: 1 });
    await admin.deleteTopic('a-delete');
    expect(await admin.listTopics()).not.toContain('a-delete');
    expect((await rejection(admin.deleteTopic('a-delete'))).code).toBe('topic_not_found');
  });

  it('groups: listGroups, describeGroup, fetchOffset, resetOffsets (all targets), deleteGroup', async () => {
    await admin.createTopic({ topic: 'a-groups', partitions: 2 });
    const p = new Producer({ brokers: [broker.address] });
    // partition 0: records at t=1000..5000 ms; partition 1: 3 records stamped by the broker
    await p.send({ topic: 'a-groups', messages: [1000, 2000, 3000, 4000, 5000].map((timestamp, i) => ({ value: `r${i}`, partition: 0, timestamp })) });
    await p.send({ topic: 'a-groups', messages: [1, 2, 3].map(() => ({ value: 'x', partition: 1 })) });
    await p.close();

    const { conn, member } = await joinAndCommit('a-groups', 'a-group', { 0: 3, 1: 1 });
    expect(await admin.listGroups()).toContain('a-group');

    const g = await admin.describeGroup('a-group');
    expect(g).toMatchObject({ group: 'a-group', topic: 'a-groups', state: 'Stable', generation: 1, leader: member });
    expect(g.members).toEqual([expect.objectContaining({ member_id: member, client_id: 'admin-test', assignments: [0, 1] })]);
    expect(g.offsets).toEqual([
      { partition: 0, committed: 3, log_end: 5, lag: 2, owner: member },
      { partition: 1, committed: 1, log_end: 3, lag: 2, owner: member },
    ]);
    expect(g.total_lag).toBe(4);
    expect(g.history[0]).toMatchObject({ generation: 1, reasons: [{ cause: 'join', member }] });

    expect(await admin.fetchOffset('a-group', 'a-groups', 0)).toEqual({ offset: 3, committed: true });
    expect(await admin.fetchOffset('a-group', 'a-groups', 1)).toEqual({ offset: 1, committed: true });

    // a live member blocks deletion, not a reset (a dry run changes nothing)
    expect(await admin.resetOffsets({ group: 'a-group', topic: 'a-groups', to: 'earliest', dryRun: true })).toEqual([
      { partition: 0, offset: 0 },
      { partition: 1, offset: 0 },
    ]);
    expect(await admin.fetchOffset('a-group', 'a-groups', 0)).toEqual({ offset: 3, committed: true });
    expect((await rejection(admin.resetOffsets({ group: 'a-group', topic: 'a-groups', to: 'earliest', dryRun: 'yes' as never }))).code).toBe('invalid_parameter');
    expect((await rejection(admin.deleteGroup('a-group'))).code).toBe('group_not_empty');
    await conn.command('LEAVE_GROUP', { topic: 'a-groups', group: 'a-group', member });

    expect(await admin.resetOffsets({ group: 'a-group', topic: 'a-groups', to: 'earliest' })).toEqual([
      { partition: 0, offset: 0 },
      { partition: 1, offset: 0 },
    ]);
    expect(await admin.fetchOffset('a-group', 'a-groups', 0)).toEqual({ offset: 0, committed: true });
    expect(await admin.resetOffsets({ group: 'a-group', topic: 'a-groups', to: 'latest' })).toEqual([
      { partition: 0, offset: 5 },
      { partition: 1, offset: 3 },
    ]);
    expect(await admin.resetOffsets({ group: 'a-group', topic: 'a-groups', partition: 0, to: { offset: 2 } })).toEqual([{ partition: 0, offset: 2 }]);
    expect(await admin.fetchOffset('a-group', 'a-groups', 0)).toEqual({ offset: 2, committed: true });
    expect(await admin.fetchOffset('a-group', 'a-groups', 1)).toEqual({ offset: 3, committed: true });
    expect(await admin.resetOffsets({ group: 'a-group', topic: 'a-groups', partition: 0, to: { timestamp: 2500 } })).toEqual([{ partition: 0, offset: 2 }]);
    expect(await admin.resetOffsets({ group: 'a-group', topic: 'a-groups', partition: 0, to: { timestamp: new Date(4000) } })).toEqual([{ partition: 0, offset: 3 }]);
    expect((await rejection(admin.resetOffsets({ group: 'a-group', topic: 'a-groups', partition: 0, to: { offset: 99 } }))).code).toBe('OFFSET_OUT_OF_RANGE');
    expect((await rejection(admin.resetOffsets({ group: 'a-group', topic: 'a-groups', to: 'sideways' as never }))).code).toBe('invalid_parameter');

    const empty = await admin.describeGroup('a-group');
    expect(empty.members).toEqual([]);
    expect(empty.offsets.map((o) => o.committed)).toEqual([3, 3]);

    await admin.deleteGroup('a-group');
    expect(await admin.listGroups()).not.toContain('a-group');
    expect((await rejection(admin.describeGroup('a-group'))).code).toBe('group_not_found');
    expect((await rejection(admin.deleteGroup('a-group'))).code).toBe('group_not_found');
    expect(await admin.fetchOffset('a-group', 'a-groups', 0)).toEqual({ offset: 0, committed: false });
  });

  it('argument checks happen before anything is sent', async () => {
    expect((await rejection(admin.describeTopic(''))).code).toBe('invalid_parameter');
    expect((await rejection(admin.fetchOffset('g', 't', -1))).code).toBe('invalid_parameter');
    expect((await rejection(admin.resetOffsets({ group: 'g', topic: 't', to: { offset: -1 } }))).code).toBe('invalid_parameter');
    expect((await rejection(admin.createTopic({ topic: 't', retentionHours: -2 }))).code).toBe('invalid_parameter');
  });

  it('close is idempotent; calls after it reject with client_closed; asyncDispose closes', async () => {
    const a = new Admin({ brokers: [broker.address] });
    expect(await a.listTopics()).toContain('a-create');
    await a.close();
    await a.close();
    expect((await rejection(a.listTopics())).code).toBe('client_closed');
    expect((await rejection(a.describeGroup('g'))).code).toBe('client_closed');
    let ref: Admin;
    {
      await using b = new Admin({ brokers: [broker.address] });
      ref = b;
      await b.listGroups();
    }
    expect((await rejection(ref.listGroups())).code).toBe('client_closed');
  });

  it('a broker never reached surfaces as brokers_unreachable after bootstrapTimeoutMs, however few the retries', async () => {
    const a = new Admin({ brokers: ['127.0.0.1:1'], bootstrapTimeoutMs: 200, retry: { retries: 1, initialDelayMs: 1, maxDelayMs: 2 } });
    const err = await rejection(a.listTopics());
    expect(err.code).toBe('brokers_unreachable');
    await a.close();
  });
});

describe('Admin against a broker that stops answering', () => {
  let broker: BrokerProcess | undefined;

  afterAll(async () => {
    await broker?.dispose(); // SIGKILL ends a stopped process too
  });

  it('a SIGSTOPped broker: every call rejects with a retriable request_timeout after requestTimeoutMs, whatever the retries', async () => {
    broker = await BrokerProcess.start();
    const a = new Admin({ brokers: [broker.address], requestTimeoutMs: 1500, stallTimeoutMs: 200, retry: { retries: 1_000_000, maxDelayMs: 50, maxElapsedMs: 600_000 } });
    try {
      await a.createTopic({ topic: 'frozen', partitions: 1 });
      await broker.kill('SIGSTOP');
      const started = Date.now();
      const calls = [a.listTopics(), a.describeTopic('frozen'), a.describeGroup('g'), a.readRecords({ topic: 'frozen', partition: 0, offset: 0 })];
      for (const call of calls) call.catch(() => {});
      const outcomes = await Promise.race([
        Promise.allSettled(calls),
        new Promise<'hung'>((resolve) => setTimeout(() => resolve('hung'), 8000)),
      ]);
      expect(outcomes).not.toBe('hung');
      for (const o of outcomes as PromiseSettledResult<unknown>[]) {
        expect(o.status).toBe('rejected');
        expect((o as PromiseRejectedResult).reason).toMatchObject({ code: 'request_timeout', retriable: true });
      }
      expect(Date.now() - started).toBeLessThan(4000);
    } finally {
      await broker.kill('SIGCONT');
      await a.close();
    }
  });
});

/**
 * Malformed and hostile group commands against a real broker. Every case checks the exact error code
 * (and `param=` for invalid_parameter), and afterwards that the group is exactly as it was: same
 * generation, members, assignments and offsets (GROUP_STATUS without heartbeat times).
 */
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import type { Connection } from 'tributary-protocol/connection.js';
import type { FieldValue } from 'tributary-protocol/command.js';
import type { BrokerProcess } from '../../helpers/launcher.js';
import { GroupMember, fill, groupStatus, kv, stableStatus, startBroker } from './helpers.js';
import { eventually, expectError, rejection } from '../../helpers/util.js';

const TOPIC = 'bad-t';
const GROUP = 'bad-g';

describe('consumer group bad input', () => {
  let broker: BrokerProcess;
  let admin: Connection;
  let a: GroupMember;
  let b: GroupMember;
  let snapshot: unknown;

  beforeAll(async () => {
    broker = await startBroker();
    admin = await broker.connect();
    await admin.command('CREATE', { topic: TOPIC, partitions: 4 });
    await admin.command('CREATE', { topic: 'bad-other', partitions: 2 });
    await fill(admin, TOPIC, 4, 10);
    a = await GroupMember.connect(broker, TOPIC, GROUP, 'a');
    b = await GroupMember.connect(broker, TOPIC, GROUP, 'b');
    await Promise.all([a.join(), b.join()]);
    await a.sync();
    await b.sync();
    const s = await groupStatus(admin, GROUP);
    expect(s.state).toBe('Stable');
    expect(kv(await a.batchCommit(a.owned.map((p) => `P${p}:3`).join(','))).get('batched')).toBe('2');
    expect(kv(await b.batchCommit(b.owned.map((p) => `P${p}:4`).join(','))).get('batched')).toBe('2');
    snapshot = await stableStatus(admin, GROUP);
  });

  afterAll(async () => {
    await broker?.dispose();
  });

  /** After each case: the group is unchanged and its members still work. */
  async function unchanged(): Promise<void> {
    expect(await stableStatus(admin, GROUP)).toEqual(snapshot);
    expect(kv(await a.heartbeat()).get('generation')).toBe(String(a.generation));
    expect(kv(await b.heartbeat()).get('generation')).toBe(String(b.generation));
  }

  beforeEach(async () => {
    if (snapshot) expect(await stableStatus(admin, GROUP)).toEqual(snapshot);
  });

  const base = (): Record<string, FieldValue> => ({ topic: TOPIC, group: GROUP, member: a.id, generation: a.generation });
  /** LEAVE_GROUP takes no generation (docs/protocol.md): base() without it. */
  const leave = (): Record<string, FieldValue> => {
    const { generation: _g, ...rest } = base();
    return rest;
  };

  it('unknown group: HEARTBEAT, SYNC, COMMIT, BATCH_COMMIT, LEAVE, GROUP_STATUS, DELETE → group_not_found', async () => {
    const g = { topic: TOPIC, group: 'no-such-group', member: a.id, generation: 1 };
    await expectError(admin.command('HEARTBEAT', g), 'group_not_found', { group: 'no-such-group' });
    await expectError(admin.command('SYNC_GROUP', g), 'group_not_found');
    await expectError(admin.command('COMMIT_OFFSET', { ...g, partition: 0, offset: 1 }), 'group_not_found');
    await expectError(admin.command('BATCH_COMMIT', g, ['P0:1']), 'group_not_found');
    await expectError(admin.command('LEAVE_GROUP', { topic: TOPIC, group: 'no-such-group', member: a.id }), 'group_not_found');
    await expectError(admin.command('GROUP_STATUS', { group: 'no-such-group' }), 'group_not_found');
    await expectError(admin.command('DELETE_GROUP', { group: 'no-such-group' }), 'group_not_found');
    expect(kv(await admin.command('LIST_GROUPS')).get('groups')).toBe(GROUP);
    await unchanged();
  });

  it('empty and 10,000-character member and group ids', async () => {
    const long = 'm'.repeat(10_000);
    for (const member of ['', long, 'has space', 'semi;colon', 'co:lon']) {
      for (const cmd of ['HEARTBEAT', 'SYNC_GROUP', 'LEAVE_GROUP']) {
        await expectError(admin.command(cmd, { ...(cmd === 'LEAVE_GROUP' ? leave() : base()), member }), 'invalid_parameter', { param: 'member' });
      }
      await expectError(admin.command('COMMIT_OFFSET', { ...base(), member, partition: a.owned[0]!, offset: 5 }), 'invalid_parameter', { param: 'member' });
      await expectError(admin.command('BATCH_COMMIT', { ...base(), member }, [`P${a.owned[0]}:5`]), 'invalid_parameter', { param: 'member' });
      await expectError(admin.command('JOIN_GROUP', { topic: TOPIC, group: GROUP, member }), 'invalid_parameter', { param: 'member' });
    }
    for (const group of ['', 'g'.repeat(10_000), 'a/b']) {
      for (const cmd of ['JOIN_GROUP', 'HEARTBEAT', 'SYNC_GROUP', 'LEAVE_GROUP']) {
        await expectError(admin.command(cmd, { ...(cmd === 'LEAVE_GROUP' ? leave() : base()), group }), 'invalid_parameter', { param: 'group' });
      }
      await expectError(admin.command('COMMIT_OFFSET', { ...base(), group, partition: 0, offset: 1 }), 'invalid_parameter', { param: 'group' });
      await expectError(admin.command('FETCH_OFFSET', { topic: TOPIC, group, partition: 0 }), 'invalid_parameter', { param: 'group' });
      await expectError(admin.command('GROUP_STATUS', { group }), 'invalid_parameter', { param: 'group' });
      await expectError(admin.command('DELETE_GROUP', { group }), 'invalid_parameter', { param: 'group' });
      await expectError(admin.command('RESET_OFFSETS', { group, topic: TOPIC, to: 'earliest' }), 'invalid_parameter', { param: 'group' });
    }
    // A value the chosen `to` does not use is refused, not ignored.
    await expectError(admin.command('RESET_OFFSETS', { group: 'fresh', topic: TOPIC, to: 'latest', offset: 5 }), 'invalid_parameter', { param: 'offset' });
    await expectError(admin.command('RESET_OFFSETS', { group: 'fresh', topic: TOPIC, to: 'offset', offset: 1, timestamp: 5 }), 'invalid_parameter', {
      param: 'timestamp',
    });
    await expectError(admin.command('JOIN_GROUP', { topic: TOPIC, group: 'fresh', member: 'x', instance: 'i'.repeat(10_000) }), 'invalid_parameter', {
      param: 'instance',
    });
    await expectError(admin.command('JOIN_GROUP', { topic: TOPIC, group: 'fresh', member: 'x', instance: '' }), 'invalid_parameter', { param: 'instance' });
    await expectError(groupStatus(admin, 'fresh'), 'group_not_found');
    await unchanged();
  });

  it('generation=-1, NaN, 1e3, 1.5, 2^31 and missing are invalid_parameter param=generation', async () => {
    for (const generation of ['-1', 'NaN', '1e3', '1.5', '0x2', String(2 ** 31), '99999999999999999999', '']) {
      for (const cmd of ['HEARTBEAT', 'SYNC_GROUP']) {
        await expectError(admin.command(cmd, { ...base(), generation }), 'invalid_parameter', { param: 'generation' });
      }
      await expectError(admin.command('COMMIT_OFFSET', { ...base(), generation, partition: a.owned[0]!, offset: 9 }), 'invalid_parameter', {
        param: 'generation',
      });
      await expectError(admin.command('BATCH_COMMIT', { ...base(), generation }, [`P${a.owned[0]}:9`]), 'invalid_parameter', { param: 'generation' });
      await expectError(admin.command('JOIN_GROUP', { topic: TOPIC, group: GROUP, member: a.id, generation }), 'invalid_parameter', { param: 'generation' });
    }
    const { generation: _g, ...noGen } = base();
    await expectError(admin.command('HEARTBEAT', noGen), 'invalid_parameter', { param: 'generation' });
    await expectError(admin.command('COMMIT_OFFSET', { ...noGen, partition: a.owned[0]!, offset: 9 }), 'invalid_parameter', { param: 'generation' });
    await unchanged();
  });

  it('malformed BATCH_COMMIT entries and duplicate partitions apply nothing', async () => {
    const [p, q] = a.owned as [number, number];
    for (const entries of [
      [`P${p}:x`],
      [`P${p}:`],
      [`${p}:5`],
      [`P-1:5`],
      [`P${p}:5:6`],
      [`P${p}:1e3`],
      [`P${p}:-5`],
      [`P${p}:5;P${q}:5`],
      [`P${p}:99999999999999999`],
      [`P${p}:5,P${q}:6,P${p}:7`],
      [`P${p}:5`, `P${p}:5`],
      [`Q${p}:5`],
    ]) {
      await expectError(admin.command('BATCH_COMMIT', base(), entries), 'invalid_parameter', { param: 'entries' });
    }
    await expectError(admin.command('BATCH_COMMIT', base()), 'invalid_parameter', { param: 'entries' });
    await expectError(admin.command('BATCH_COMMIT', base(), [',,,']), 'invalid_parameter', { param: 'entries' });
    // a partition the topic does not have
    const err = await rejection(admin.command('BATCH_COMMIT', base(), [`P${p}:5,P99:5`]));
    expect(['partition_not_found', 'NOT_OWNER']).toContain(err.code);
    // COMMIT_OFFSET's own parameters
    await expectError(admin.command('COMMIT_OFFSET', { ...base(), partition: p, offset: -1 }), 'invalid_parameter', { param: 'offset' });
    await expectError(admin.command('COMMIT_OFFSET', { ...base(), partition: p, offset: 'ten' }), 'invalid_parameter', { param: 'offset' });
    await expectError(admin.command('COMMIT_OFFSET', { ...base(), partition: -2, offset: 5 }), 'invalid_parameter', { param: 'partition' });
    await expectError(admin.command('COMMIT_OFFSET', { ...base(), offset: 5 }), 'invalid_parameter', { param: 'partition' });
    await unchanged();
  });

  it('JOIN for a missing topic, a different topic, or with a session timeout out of range changes nothing', async () => {
    await expectError(admin.command('JOIN_GROUP', { topic: 'no-such-topic', group: GROUP, member: 'c' }), 'topic_not_found');
    await expectError(admin.command('JOIN_GROUP', { topic: 'no-such-topic', group: 'brand-new', member: 'c' }), 'topic_not_found');
    await expectError(groupStatus(admin, 'brand-new'), 'group_not_found');
    await expectError(admin.command('JOIN_GROUP', { topic: 'bad-other', group: GROUP, member: 'c' }), 'invalid_parameter', { param: 'topic' });
    await expectError(admin.command('COMMIT_OFFSET', { ...base(), topic: 'bad-other', partition: 0, offset: 1 }), 'invalid_parameter', { param: 'topic' });
    await expectError(admin.command('SYNC_GROUP', { ...base(), topic: 'bad-other' }), 'invalid_parameter', { param: 'topic' });
    for (const ms of ['0', '50', '99', '300001', '3600001', '-5', 'soon']) {
      await expectError(admin.command('JOIN_GROUP', { topic: TOPIC, group: GROUP, member: 'c', session_timeout_ms: ms }), 'invalid_parameter', {
        param: 'session_timeout_ms',
      });
      await expectError(admin.command('JOIN_GROUP', { topic: TOPIC, group: 'brand-new', member: 'c', session_timeout_ms: ms }), 'invalid_parameter', {
        param: 'session_timeout_ms',
      });
    }
    await expectError(admin.command('JOIN_GROUP', { topic: TOPIC, group: GROUP, member: 'c', rebalance_timeout_ms: 0 }), 'invalid_parameter', {
      param: 'rebalance_timeout_ms',
    });
    await expectError(admin.command('JOIN_GROUP', { topic: TOPIC, group: GROUP, member: 'c', protocol: 'telepathy' }), 'invalid_parameter', {
      param: 'protocol',
    });
    await expectError(admin.command('JOIN_GROUP', { topic: TOPIC, group: GROUP, member: 'c', assignor: 'bogus' }), 'invalid_parameter', { param: 'assignor' });
    await expectError(admin.command('HEARTBEAT', { ...base(), wait_ms: -1 }), 'invalid_parameter', { param: 'wait_ms' });
    await expectError(groupStatus(admin, 'brand-new'), 'group_not_found');
    await unchanged();
  });

  it("a JOIN asking for another assignor or protocol than the group's is inconsistent_group_protocol and changes nothing", async () => {
    const assignor = (await groupStatus(admin, GROUP)).assignor;
    const other = assignor === 'range' ? 'roundrobin' : 'range';
    const join = (fields: Record<string, FieldValue>) => admin.command('JOIN_GROUP', { topic: TOPIC, group: GROUP, member: 'c', ...fields });
    await expectError(join({ assignor: other }), 'inconsistent_group_protocol', { group: GROUP, assignor, requested: other });
    await expectError(join({ protocol: 'client' }), 'inconsistent_group_protocol', { group: GROUP, protocol: 'server', requested: 'client' });
    // A member of the group, rejoining, cannot change it for the others either.
    await expectError(admin.command('JOIN_GROUP', { ...base(), assignor: other }), 'inconsistent_group_protocol', { assignor, requested: other });
    // A misspelt parameter is not taken for "no assignor named".
    await expectError(join({ assignors: other }), 'invalid_parameter', { param: 'assignors', reason: 'unknown parameter' });
    await unchanged();
  });

  it('an unknown member id with a generation creates nothing, in an existing or a new group', async () => {
    const ghost = 'ghost-11111111-2222-3333-4444-555555555555';
    await expectError(admin.command('JOIN_GROUP', { topic: TOPIC, group: GROUP, member: ghost, generation: 1 }), 'member_not_found', { member: ghost });
    await expectError(admin.command('HEARTBEAT', { ...base(), member: ghost }), 'member_not_found');
    await expectError(admin.command('SYNC_GROUP', { ...base(), member: ghost }), 'member_not_found');
    await expectError(admin.command('LEAVE_GROUP', { ...leave(), member: ghost }), 'member_not_found');
    await expectError(admin.command('COMMIT_OFFSET', { ...base(), member: ghost, partition: 0, offset: 9 }), 'member_not_found');
    // a brand-new group is not created by a refused join
    await expectError(admin.command('JOIN_GROUP', { topic: TOPIC, group: 'phantom', member: ghost, generation: 3 }), 'member_not_found');
    await expectError(groupStatus(admin, 'phantom'), 'group_not_found');
    expect(
      kv(await admin.command('LIST_GROUPS'))
        .get('groups')!
        .split(','),
    ).not.toContain('phantom');
    await unchanged();
  });

  it('an empty group keeps its topic and assignor when a refused JOIN names others', async () => {
    const e = await GroupMember.connect(broker, TOPIC, 'bad-empty', 'e');
    await e.join({ assignor: 'range' });
    await e.sync();
    expect(await e.commit(e.owned[0]!, 2)).toBe('OK');
    await e.leave();
    await eventually('generation 2', async () => (await groupStatus(admin, 'bad-empty')).generation === 2); // the leave's window closed
    const before = await stableStatus(admin, 'bad-empty');
    expect(before).toMatchObject({ topic: TOPIC, assignor: 'range', state: 'Empty' });
    await expectError(
      admin.command('JOIN_GROUP', { topic: 'bad-other', group: 'bad-empty', member: 'ghost-1', generation: 4, assignor: 'roundrobin' }),
      'member_not_found',
    );
    expect(await stableStatus(admin, 'bad-empty')).toEqual(before);
    await unchanged();
  });

  it('answers pipelined garbage and valid group commands on one connection in order', async () => {
    const c = await broker.connect();
    const replies = await Promise.all(
      [
        c.command('HEARTBEAT', base()),
        c.command('HEARTBEAT', { ...base(), generation: 'NaN' }),
        c.command('FETCH_OFFSET', { topic: TOPIC, group: GROUP, partition: a.owned[0]! }),
        c.command('BATCH_COMMIT', base(), ['P0:zz']),
        c.command('GROUP_STATUS', { group: GROUP }),
      ].map((p) =>
        p.then(
          (r) => r.slice(0, 20),
          (e: { code: string }) => `ERR ${e.code}`,
        ),
      ),
    );
    expect(replies).toEqual([
      `OK member=${a.id}`.slice(0, 20),
      'ERR invalid_parameter',
      'OK offset=3 committe',
      'ERR invalid_parameter',
      '{"status":"OK","grou',
    ]);
    await unchanged();
  });
});

describe('a broker whose record limit is below a group snapshot', () => {
  let broker: BrokerProcess;
  beforeAll(async () => {
    broker = await startBroker(['--max-record-bytes', '100']);
  });
  afterAll(async () => {
    await broker?.dispose();
  });

  it('still runs groups: the limit is for what clients write, not for the coordinator own records', async () => {
    const admin = await broker.connect();
    await admin.command('CREATE', { topic: 'small', partitions: 2 });
    await fill(admin, 'small', 2, 3);
    // Before: the group's snapshot (hundreds of bytes) was refused as record_too_large and the JOIN never answered.
    const m = await GroupMember.connect(broker, 'small', 'g-small', 'a-client-id-long-enough-to-make-a-snapshot-over-a-hundred-bytes');
    await m.join();
    expect((await m.sync()).sort()).toEqual([0, 1]);
    await m.commit(0, 2);
    await expect(admin.command('PUBLISH', { topic: 'small', partition: 0, message: 'x'.repeat(200) })).rejects.toMatchObject({ code: 'record_too_large' });
  });
});

/**
 * After DELETE_GROUP and a new join under the same id, generations start again from 1. Nothing of the
 * deleted group's era passes the new group's checks: member ids are new for every join (`<id>-<uuid>`), and
 * every request that names a member (COMMIT_OFFSET, HEARTBEAT, SYNC_GROUP, JOIN_GROUP with a generation, a
 * fenced CONSUME; Kafka's OffsetCommit, Heartbeat, SyncGroup, JoinGroup) is checked against the group's
 * members now, whatever generation it carries. docs/protocol.md, "Consumer groups".
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseLine } from 'tributary-protocol/command.js';
import type { Connection } from 'tributary-protocol/connection.js';
import { encodeAssignment, encodeSubscription } from 'tributary-broker/kafka/protocol/consumer-protocol.js';
import { kafkaErrorCode } from 'tributary-broker/kafka/protocol/error-codes.js';
import type { KafkaStruct } from 'tributary-broker/kafka/protocol/schema.js';
import { BrokerProcess } from '../helpers/launcher.js';
import { RawKafka } from '../helpers/raw-kafka.js';

describe("a deleted group's members, commits and generations after the id is used again", () => {
  let broker: BrokerProcess;
  let c: Connection;

  beforeAll(async () => {
    broker = await BrokerProcess.start({ args: ['--kafka-port', '0', '--group-join-window-ms', '0', '--offsets-topic-partitions', '1'] });
    c = await broker.connect();
    await c.command('CREATE', { topic: 'era', partitions: 1 });
    for (let i = 0; i < 5; i++) await c.command('PUBLISH', { topic: 'era', partition: 0, message: `r${i}` });
  });

  afterAll(async () => {
    await broker?.dispose();
  });

  const refusal = (p: Promise<unknown>) => p.then(() => 'OK', (e: { code?: string }) => e.code);

  it('the main port: the old member id at generation 1 is member_not_found everywhere, its commit is gone', async () => {
    const g = { topic: 'era', group: 'era-native' };
    const joinAs = async (member: string) => parseLine(await c.command('JOIN_GROUP', { ...g, member })).params;
    const first = await joinAs('a');
    const old = first.get('member')!;
    expect(first.get('generation')).toBe('1');
    await c.command('SYNC_GROUP', { ...g, member: old, generation: 1 });
    await c.command('COMMIT_OFFSET', { ...g, partition: 0, offset: 3, member: old, generation: 1 });
    await c.command('LEAVE_GROUP', { ...g, member: old });
    await c.command('DELETE_GROUP', { group: g.group });

    const second = await joinAs('b');
    const now = second.get('member')!;
    expect([second.get('generation'), now === old]).toEqual(['1', false]);
    await c.command('SYNC_GROUP', { ...g, member: now, generation: 1 });

    const era = { ...g, member: old, generation: 1 };
    expect(await refusal(c.command('COMMIT_OFFSET', { ...era, partition: 0, offset: 4 }))).toBe('member_not_found');
    expect(await refusal(c.command('HEARTBEAT', era))).toBe('member_not_found');
    expect(await refusal(c.command('SYNC_GROUP', era))).toBe('member_not_found');
    expect(await refusal(c.command('JOIN_GROUP', era))).toBe('member_not_found');
    expect(await refusal(c.consume({ ...era, partition: 0, offset: 0 }))).toBe('member_not_found');
    // The old commit went with the group, and the refused one stored nothing.
    expect(parseLine(await c.command('FETCH_OFFSET', { ...g, partition: 0 })).params.get('committed')).toBe('false');
    // The new member is untouched.
    expect(parseLine(await c.command('HEARTBEAT', { ...g, member: now, generation: 1 })).params.get('member')).toBe(now);
  });

  it('the Kafka port: the old member id at generation 1 is UNKNOWN_MEMBER_ID everywhere, its commit is gone', async () => {
    const raw = await RawKafka.connect(broker.kafkaPort);
    const groupId = 'era-kafka';
    const code = (name: string) => kafkaErrorCode(name);
    const metadata = encodeSubscription(0, { topics: ['era'], userData: null });
    const assignment = encodeAssignment(0, { assignedPartitions: [{ topic: 'era', partitions: [0] }], userData: null });
    const join = (memberId: string) =>
      raw.call(11, 5, { groupId, sessionTimeoutMs: 10_000, rebalanceTimeoutMs: 10_000, memberId, groupInstanceId: null, protocolType: 'consumer', protocols: [{ name: 'range', metadata }] });
    const sync = (memberId: string, generationId: number) => raw.call(14, 3, { groupId, generationId, memberId, groupInstanceId: null, assignments: [{ memberId, assignment }] });
    const commit = async (memberId: string, generationId: number, offset: number) => {
      const res = await raw.call(8, 7, { groupId, generationId, memberId, groupInstanceId: null, topics: [{ name: 'era', partitions: [{ partitionIndex: 0, committedOffset: offset, committedLeaderEpoch: -1, committedMetadata: null }] }] });
      return ((res.topics as KafkaStruct[])[0]!.partitions as KafkaStruct[])[0]!.errorCode;
    };
    /** A member joined and synced alone: its id and generation. */
    const solo = async (): Promise<[string, number]> => {
      let res = await join('');
      if (res.errorCode === code('MEMBER_ID_REQUIRED')) res = await join(res.memberId as string);
      expect(res.errorCode).toBe(0);
      expect((await sync(res.memberId as string, res.generationId as number)).errorCode).toBe(0);
      return [res.memberId as string, res.generationId as number];
    };
    try {
      const [old, gen] = await solo();
      expect(gen).toBe(1);
      expect(await commit(old, 1, 3)).toBe(0);
      expect((await raw.call(13, 3, { groupId, members: [{ memberId: old, groupInstanceId: null }] })).errorCode).toBe(0);
      await c.command('DELETE_GROUP', { group: groupId });

      const [now, again] = await solo();
      expect([again, now === old]).toEqual([1, false]);

      const unknown = code('UNKNOWN_MEMBER_ID');
      expect(await commit(old, 1, 4)).toBe(unknown);
      expect((await raw.call(12, 3, { groupId, generationId: 1, memberId: old, groupInstanceId: null })).errorCode).toBe(unknown);
      expect((await sync(old, 1)).errorCode).toBe(unknown);
      expect((await join(old)).errorCode).toBe(unknown);
      const fetched = await raw.call(9, 4, { groupId, topics: [{ name: 'era', partitionIndexes: [0] }] });
      expect(((fetched.topics as KafkaStruct[])[0]!.partitions as KafkaStruct[])[0]!.committedOffset).toBe(-1);
      expect((await raw.call(12, 3, { groupId, generationId: 1, memberId: now, groupInstanceId: null })).errorCode).toBe(0);
    } finally {
      raw.socket.destroy();
    }
  });
});

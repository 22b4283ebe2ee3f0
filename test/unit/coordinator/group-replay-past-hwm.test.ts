/**
 * Cluster mode: a coordinator that takes a `__consumer_offsets` partition over replays it to its log end,
 * past the HWM, and a group snapshot (membership, generation, assignment) it finds there is not on the
 * in-sync replicas yet: another change of leader may still lose it, and the next coordinator then serves
 * the generation before it. So such a group answers the retriable COORDINATOR_LOADING until the HWM passes
 * its snapshot, as its offsets do (docs/architecture.md, "Cluster mode", Coordinators). Without that, one
 * coordinator fenced a member by a generation that the next one never had, which accepted it again.
 * Real partitions, the leader check and the replication wait faked as in replication-timeout.test.ts.
 */
import { beforeEach, expect, it } from 'vitest';
import { OFFSETS_TOPIC } from 'tributary-broker/coordinator/group-log.js';
import type { MemberView } from 'tributary-broker/coordinator/group-coordinator.js';
import type { Partition } from 'tributary-broker/partition/partition.js';
import { replicatedAppend } from 'tributary-broker/partition/internal-log.js';
import { TributaryError } from 'tributary-protocol/errors.js';
import { GROUP_CONFIG, classicJoinRequest, joinAlone, useCoordinators } from '../../helpers/coordinators.js';
import { until } from '../../helpers/util.js';

const TOPIC = 't';
/** 'timeout': the next appends' replication waits fail after the append (outcome unknown). */
let fault: 'none' | 'timeout' = 'none';

const f = useCoordinators(
  'trib-group-past-hwm-',
  { [TOPIC]: 2 },
  {
    // As the cluster wires it (broker.ts), with the leader check and the replication wait faked.
    groupAppend: replicatedAppend(
      () => 1,
      async (part, lastOffset) => {
        if (fault === 'timeout') throw new TributaryError('request_timeout', { reason: 'injected: the in-sync replicas did not confirm the record in time' });
        part.setReplicatedHighWatermark(lastOffset + 1);
      },
    ),
  },
);

// As a cluster's leader: the HWM moves only when the fake replication says so.
beforeEach(() => {
  fault = 'none';
  for (const p of f.c.topics.get(OFFSETS_TOPIC).partitions) p.enableReplication(() => {});
});

const offsetsPartition = (): Partition => f.c.topics.get(OFFSETS_TOPIC).partitions[f.gc.partitionFor('g')]!;

/** The answer's code (or `ok`), so a test can list what a member was told. */
async function answer(fn: () => unknown): Promise<string> {
  try {
    await fn();
    return 'ok';
  } catch (err) {
    return (err as TributaryError).code;
  }
}

const heartbeat = (v: MemberView, generation = v.generation) => answer(() => f.gc.heartbeat({ topic: TOPIC, group: 'g', member: v.memberId, generation }));
const commit = (v: MemberView, partition: number, offset: number, generation = v.generation) =>
  answer(() => f.gc.commit({ topic: TOPIC, group: 'g', member: v.memberId, generation, entries: [{ partition, offset }] }));

/** As in a cluster: this broker leads the group's partition (again) and replays it, to its log end. */
async function takeOver(): Promise<void> {
  const p = f.gc.partitionFor('g');
  f.gc.enableOwnership((q) => new TributaryError('NOT_COORDINATOR', { partition: q }), () => true, () => true, () => true);
  f.gc.unloadPartition(p);
  await f.gc.loadPartition(p);
}

/** The next leader is an in-sync replica without the records past the HWM (they are lost). */
async function loseUnreplicated(): Promise<void> {
  const p = offsetsPartition();
  await p.truncateTo(p.highWatermark);
}

/** `a` alone in generation 1; then `b` joins, and generation 2's snapshot is appended but not replicated. */
async function generation2Unreplicated(): Promise<{ a: MemberView; b: string }> {
  const a = await joinAlone(f, { topic: TOPIC, group: 'g', member: 'a', host: '127.0.0.1' });
  expect(a).toMatchObject({ generation: 1, assignments: [0, 1] });
  const joining = answer(() => f.gc.join({ topic: TOPIC, group: 'g', member: 'b', host: '127.0.0.1' }));
  await until(() => f.gc.scheduler.has('window:g'), 5000, 'the join window');
  fault = 'timeout';
  await f.clock.advance(GROUP_CONFIG.joinWindowMs);
  expect(await joining).not.toBe('ok');
  fault = 'none';
  await takeOver();
  const p = offsetsPartition();
  expect(p.highWatermark).toBeLessThan(p.logEndOffset);
  const b = (await f.c.groupLog.replay(f.gc.partitionFor('g'))).groups.get('g')!.members.find((m) => m.clientId === 'b')!.id;
  return { a, b };
}

it('a generation replayed from past the HWM is not served until the in-sync replicas have it', async () => {
  const { a, b } = await generation2Unreplicated();
  // Generation 2 may still be lost with a change of leader: nothing is answered from it, nor from generation 1.
  expect(await answer(() => f.gc.status('g'))).toBe('COORDINATOR_LOADING');
  expect(await heartbeat(a)).toBe('COORDINATOR_LOADING');
  expect(await heartbeat({ ...a, memberId: b }, 2)).toBe('COORDINATOR_LOADING');
  expect(await answer(() => f.gc.sync({ topic: TOPIC, group: 'g', member: b, generation: 2 }))).toBe('COORDINATOR_LOADING');
  expect(await commit(a, 1, 5)).toBe('COORDINATOR_LOADING');
  expect(await answer(() => f.gc.fetchOffset('g', TOPIC, 0))).toBe('COORDINATOR_LOADING');
  expect(await answer(() => f.gc.checkRead({ group: 'g', topic: TOPIC, member: a.memberId, partition: 1 }))).toBe('COORDINATOR_LOADING');
  // The followers catch up: generation 2 is committed, and served.
  const p = offsetsPartition();
  p.setReplicatedHighWatermark(p.logEndOffset);
  expect((f.gc.status('g') as { generation: number }).generation).toBe(2);
  expect(await heartbeat({ ...a, memberId: b }, 2)).toBe('ok');
});

/** `a` alone in generation 1; then its session expires, and the snapshot without it is appended but not replicated. */
async function expiryUnreplicated(): Promise<MemberView> {
  const a = await joinAlone(f, { topic: TOPIC, group: 'g', member: 'a', host: '127.0.0.1' });
  fault = 'timeout';
  await f.clock.advance(GROUP_CONFIG.defaultSessionTimeoutMs + 1);
  await until(() => offsetsPartition().logEndOffset > offsetsPartition().highWatermark, 5000, 'the expiry appended');
  fault = 'none';
  await takeOver();
  return a;
}

it('an expiry lost with the next change of leader was never answered: a member is not fenced by one coordinator and accepted by the next', async () => {
  const a = await expiryUnreplicated();
  // What `a`, a zombie still on generation 1, hears from this coordinator, then from the next one, which lacks the expiry.
  const told = [await heartbeat(a), await commit(a, 1, 5)];
  await loseUnreplicated();
  await takeOver();
  told.push(await heartbeat(a), await commit(a, 1, 5));
  expect(told).toEqual(['COORDINATOR_LOADING', 'COORDINATOR_LOADING', 'ok', 'ok']);
  expect((f.gc.status('g') as { generation: number }).generation).toBe(1);
});

it('an expiry replayed from past the HWM fences the member once the in-sync replicas have it', async () => {
  const a = await expiryUnreplicated();
  expect(await heartbeat(a)).toBe('COORDINATOR_LOADING');
  offsetsPartition().setReplicatedHighWatermark(offsetsPartition().logEndOffset);
  expect(await heartbeat(a)).toBe('member_not_found');
  expect(await commit(a, 1, 5)).toBe('member_not_found');
});

it('a Kafka classic group alike: its member is not told UNKNOWN_MEMBER_ID by an expiry the next coordinator may not have', async () => {
  const classic = f.gc.classic;
  const joining = classic.join(classicJoinRequest('', { sessionTimeoutMs: 1000 }));
  await f.clock.advance(GROUP_CONFIG.joinWindowMs);
  const a = await joining;
  if ('memberIdRequired' in a) throw new Error('unexpected MEMBER_ID_REQUIRED');
  const ref = { group: 'g', memberId: a.memberId, instanceId: null, generation: a.generation };
  await classic.sync({ ...ref, assignments: [{ memberId: a.memberId, assignment: Buffer.from('a') }], protocolType: null, protocolName: null });
  fault = 'timeout';
  await f.clock.advance(1001);
  await until(() => offsetsPartition().logEndOffset > offsetsPartition().highWatermark, 5000, 'the expiry appended');
  fault = 'none';
  await takeOver();
  const told = [await answer(() => classic.heartbeat(ref))];
  await loseUnreplicated();
  await takeOver();
  told.push(await answer(() => classic.heartbeat(ref)));
  // COORDINATOR_LOADING is the Kafka port's COORDINATOR_LOAD_IN_PROGRESS, retriable.
  expect(told).toEqual(['COORDINATOR_LOADING', 'ok']);
});

it('an empty group whose retention ends while its snapshot lies past the HWM is deleted once the HWM passes it', async () => {
  const a = await joinAlone(f, { topic: TOPIC, group: 'g', member: 'a', host: '127.0.0.1' });
  fault = 'timeout';
  expect(await answer(() => f.gc.leave({ topic: TOPIC, group: 'g', member: a.memberId }))).toBe('request_timeout');
  fault = 'none';
  await until(() => f.c.groupLog.lastWritten('g') !== undefined, 5000, 'the partition reloaded from the log');
  await f.clock.advance(GROUP_CONFIG.offsetsRetentionMs + 1);
  expect(await answer(() => f.gc.status('g'))).toBe('COORDINATOR_LOADING');
  // Its expiry fell due meanwhile and waits for the HWM rather than being dropped.
  offsetsPartition().setReplicatedHighWatermark(offsetsPartition().logEndOffset);
  await f.clock.advance(1000);
  await until(async () => (await answer(() => f.gc.status('g'))) === 'group_not_found', 5000, 'the group expired');
});

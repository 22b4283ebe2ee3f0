/**
 * A deleted topic's committed offsets go with it (docs/operations.md, "Deleting a topic"): the group
 * coordinator on a fake clock over real partitions, deleting as the standalone broker's DELETE does
 * (TopicManager.delete, then GroupCoordinator.deleteTopicOffsets), and restarted on the same directory.
 */
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { GroupCoordinator, MemberView } from 'tributary-broker/coordinator/group-coordinator.js';
import { LogOffsetStore } from 'tributary-broker/coordinator/group-log.js';
import { MemoryOffsetStore } from 'tributary-broker/coordinator/memory-offset-store.js';
import type { OffsetEntry } from 'tributary-broker/coordinator/offset-store.js';
import { TributaryError } from 'tributary-protocol/errors.js';
import { type Coordinators, GROUP_CONFIG, openCoordinators, topicSpec } from '../../helpers/coordinators.js';
import { FakeClock } from '../../helpers/fake-clock.js';
import { expectError, rec, removeDir, tempDir, until } from '../../helpers/util.js';

const TOPIC = 't';

let dir: string;
let clock: FakeClock;
let c: Coordinators;
let gc: GroupCoordinator;

async function open(opts: Parameters<typeof openCoordinators>[2] = {}): Promise<void> {
  c = await openCoordinators(dir, clock, opts);
  gc = c.groups;
}

/** (Re-)creates a topic with `records` records in each partition. */
async function createTopic(name: string, partitions: number, records: number): Promise<void> {
  await c.topics.create(topicSpec(name, partitions, false));
  for (const p of c.topics.get(name).partitions) await p.append(Array.from({ length: records }, (_, i) => rec(`r${i}`)));
}

/** What the standalone broker's DELETE does. */
async function deleteTopic(name: string): Promise<void> {
  await c.topics.delete(name);
  await gc.deleteTopicOffsets(name);
}

beforeEach(async () => {
  dir = await tempDir('trib-topic-offsets-');
  clock = new FakeClock();
});

afterEach(async () => {
  await c?.close();
  await removeDir(dir);
});

/** A one-member Tributary group on TOPIC, joined and synced (it owns every partition). */
async function member(group: string): Promise<MemberView> {
  const joining = gc.join({ topic: TOPIC, group, member: 'm', host: '127.0.0.1' });
  await until(() => gc.scheduler.has(`window:${group}`), 5000, 'the join to be registered');
  await clock.advance(GROUP_CONFIG.joinWindowMs);
  const v = await joining;
  return gc.sync({ topic: TOPIC, group, member: v.memberId, generation: v.generation });
}

const commit = (group: string, v: MemberView, entries: Array<[number, number]>) =>
  gc.commit({ topic: TOPIC, group, member: v.memberId, generation: v.generation, entries: entries.map(([partition, offset]) => ({ partition, offset })) });

/** A commit into a Kafka classic group from outside any group (generation -1), as kcat or a tool commits. */
const classicCommit = (group: string, topics: Array<{ topic: string; entries: OffsetEntry[] }>) =>
  gc.classic.commit({ group, memberId: '', instanceId: null, generation: -1 }, topics);

/** Every committed offset of a Kafka group, as OffsetFetch without topics answers. */
const classicOffsets = (group: string) =>
  gc.classic
    .fetch(group, null, false)
    .map((t) => ({ topic: t.topic, offsets: t.partitions.map((p) => [p.partition, p.offset]) }))
    .sort((a, b) => a.topic.localeCompare(b.topic));

describe('the committed offsets of a deleted topic', () => {
  it('go from every group of both kinds, others stay; the re-created topic starts over, also after a restart', async () => {
    await open({ topics: {} });
    await createTopic(TOPIC, 4, 10);
    await createTopic('u', 1, 10);
    const v = await member('g');
    expect(await commit('g', v, [[0, 5], [1, 7]])).toBe(2);
    expect(await classicCommit('k', [{ topic: TOPIC, entries: [{ partition: 2, offset: 9 }] }, { topic: 'u', entries: [{ partition: 0, offset: 3 }] }])).toEqual([null, null]);
    expect(await classicCommit('only-t', [{ topic: TOPIC, entries: [{ partition: 0, offset: 4 }] }])).toEqual([null]);
    expect(gc.listGroups()).toEqual(['g', 'k', 'only-t']);

    await deleteTopic(TOPIC);
    expect(gc.committedOffset('g', TOPIC, 0)).toBeUndefined();
    expect(gc.committedOffset('g', TOPIC, 1)).toBeUndefined();
    expect(classicOffsets('k')).toEqual([{ topic: 'u', offsets: [[0, 3]] }]);
    // A group known only by its offsets of the topic is no longer listed; the Tributary group keeps its members.
    expect(gc.listGroups()).toEqual(['g', 'k']);
    expect(gc.classic.describe('only-t').state).toBe('Dead');

    // A commit for the deleted topic is refused, through either kind of group.
    await expectError(commit('g', v, [[0, 6]]), 'topic_not_found', { topic: TOPIC });
    const [refused] = await classicCommit('k', [{ topic: TOPIC, entries: [{ partition: 2, offset: 10 }] }]);
    expect((refused as TributaryError).code).toBe('topic_not_found');

    // Re-created with less data: none is committed before. A member of the generation that read the old
    // topic may not commit into the new one (its position is the old log's); it rejoins, then lower
    // offsets commit (no offset_regression).
    await createTopic(TOPIC, 4, 2);
    expect(gc.fetchOffset('g', TOPIC, 0)).toEqual({ offset: 0, committed: false });
    await expectError(commit('g', v, [[0, 1]]), 'REBALANCE_IN_PROGRESS', { reason: 'offsets_reset' });
    // Left and joined again as the group's one member (a second member beside it would own only some
    // partitions, by the order of two random member ids: partition 0 was not always its own).
    await gc.leave({ topic: TOPIC, group: 'g', member: v.memberId });
    expect(await commit('g', await member('g'), [[0, 1]])).toBe(1);
    expect(await classicCommit('k', [{ topic: TOPIC, entries: [{ partition: 2, offset: 2 }] }])).toEqual([null]);

    await c.close();
    await open();
    expect(gc.fetchOffset('g', TOPIC, 0)).toEqual({ offset: 1, committed: true });
    expect(gc.fetchOffset('g', TOPIC, 1)).toEqual({ offset: 0, committed: false });
    expect(classicOffsets('k')).toEqual([
      { topic: TOPIC, offsets: [[2, 2]] },
      { topic: 'u', offsets: [[0, 3]] },
    ]);
    expect(gc.listGroups()).toEqual(['g', 'k']);
  });

  it('a commit still being made durable when the topic is deleted does not bring its offsets back', async () => {
    await open({ topics: { [TOPIC]: 4 } });
    for (const p of c.topics.get(TOPIC).partitions) await p.append(Array.from({ length: 10 }, (_, i) => rec(`r${i}`)));
    const v = await member('g');
    // The commit's record is appended (its place in the log is taken) but its fsync has not answered.
    const write = c.groupLog.writeOffsets.bind(c.groupLog);
    let release!: () => void;
    const held = new Promise<void>((r) => {
      release = r;
    });
    let appended = false;
    c.groupLog.writeOffsets = async (...args) => {
      await write(...args);
      appended = true;
      await held;
    };
    const pending = commit('g', v, [[0, 5]]);
    await until(() => appended, 5000, 'the commit to be appended');

    await deleteTopic(TOPIC);
    release();
    expect(await pending).toBe(1); // accepted before the deletion: answered, then deleted with the rest
    expect(gc.committedOffset('g', TOPIC, 0)).toBeUndefined();

    await createTopic(TOPIC, 4, 2);
    expect(gc.fetchOffset('g', TOPIC, 0)).toEqual({ offset: 0, committed: false });
    await c.close();
    await open();
    expect(gc.fetchOffset('g', TOPIC, 0)).toEqual({ offset: 0, committed: false });
    // Nor does the store refuse a lower offset for the re-created topic.
    const again = await member('g2');
    expect(await commit('g2', again, [[0, 1]])).toBe(1);
  });

  it('offsets a transaction sent for the topic go with it: stable at once, not applied by its commit', async () => {
    await open({ topics: { [TOPIC]: 2 } });
    await c.topics.get(TOPIC).partition(0).append([rec('x'), rec('y')]);
    const { producerId, epoch } = await c.txns.initProducerId('tx', 60_000);
    await c.txns.kafka.addOffsets('tx', producerId, epoch);
    const entries = [{ partition: 0, offset: 2 }];
    await c.txns.sendOffsets('tx', producerId, epoch, { group: 'k', topic: TOPIC, member: '', generation: -1, entries, classic: { memberId: '', instanceId: null, generation: -1 } });
    await expectError(Promise.resolve().then(() => gc.fetchOffset('k', TOPIC, 0)), 'UNSTABLE_OFFSET_COMMIT');

    await deleteTopic(TOPIC);
    await createTopic(TOPIC, 2, 1);
    expect(gc.fetchOffset('k', TOPIC, 0)).toEqual({ offset: 0, committed: false });
    await c.txns.kafka.endTxn('tx', producerId, epoch, 'commit');
    expect(gc.fetchOffset('k', TOPIC, 0)).toEqual({ offset: 0, committed: false });
    expect(await classicCommit('k', [{ topic: TOPIC, entries: [{ partition: 0, offset: 1 }] }])).toEqual([null]);
    await c.close();
    await open();
    expect(gc.fetchOffset('k', TOPIC, 0)).toEqual({ offset: 1, committed: true });
  });

  it('offsets of a topic deleted without the coordinator are deleted when it loads them', async () => {
    await open({ topics: { [TOPIC]: 2 } });
    for (const p of c.topics.get(TOPIC).partitions) await p.append(Array.from({ length: 10 }, (_, i) => rec(`r${i}`)));
    expect(await classicCommit('k', [{ topic: TOPIC, entries: [{ partition: 0, offset: 8 }] }])).toEqual([null]);
    await c.topics.delete(TOPIC); // the coordinator is not told (a crash before it was)
    await c.close();
    await open();
    expect(classicOffsets('k')).toEqual([]);
    // Deleted in the log too: a topic re-created before the next restart does not get them back.
    await createTopic(TOPIC, 2, 2);
    await c.close();
    await open();
    expect(classicOffsets('k')).toEqual([]);
    expect(await classicCommit('k', [{ topic: TOPIC, entries: [{ partition: 0, offset: 1 }] }])).toEqual([null]);
  });
});

describe('catching up on a deletion at load', () => {
  it('is best effort: a store that fails to delete does not stop the start, and the next load deletes them', async () => {
    await open({ topics: { [TOPIC]: 2 } });
    await c.topics.get(TOPIC).partition(0).append([rec('x')]);
    expect(await classicCommit('k', [{ topic: TOPIC, entries: [{ partition: 0, offset: 1 }] }])).toEqual([null]);
    await c.topics.delete(TOPIC);
    await c.close();
    let refused = 0;
    await open({
      offsetStore: (log) =>
        Object.assign(new LogOffsetStore(log), {
          async deleteTopic(): Promise<void> {
            refused++;
            throw new TributaryError('storage_error', { op: 'deleteTopic', reason: 'disk full' });
          },
        }),
    });
    expect(refused).toBe(1);
    // Kept, as the store still has them.
    expect(classicOffsets('k')).toEqual([{ topic: TOPIC, offsets: [[0, 1]] }]);
    await c.close();
    await open();
    expect(classicOffsets('k')).toEqual([]);
  });
});

/** A memory store whose next commit or topic deletion fails, as a PostgreSQL store does when the database is down. */
class FlakyStore extends MemoryOffsetStore {
  failNext = false;
  commits = 0;

  private maybeFail(op: string): void {
    if (!this.failNext) return;
    this.failNext = false;
    throw new TributaryError('storage_error', { op, reason: 'database down' });
  }

  override async commit(group: string, topic: string, entries: OffsetEntry[], opts?: { force?: boolean }): Promise<void> {
    this.commits++;
    this.maybeFail('commit');
    return super.commit(group, topic, entries, opts);
  }

  override async deleteTopic(topic: string, groups?: readonly string[]): Promise<void> {
    this.maybeFail('deleteTopic');
    return super.deleteTopic(topic, groups);
  }
}

describe('a store that fails (serialized stores: PostgreSQL, memory)', () => {
  let store: FlakyStore;
  beforeEach(async () => {
    store = new FlakyStore();
    await open({ topics: { [TOPIC]: 2 }, offsetStore: () => store });
    for (const p of c.topics.get(TOPIC).partitions) await p.append(Array.from({ length: 10 }, (_, i) => rec(`r${i}`)));
  });

  it('a failed commit gives its reservation back: the retry is written', async () => {
    const v = await member('g');
    store.failNext = true;
    await expectError(commit('g', v, [[0, 5]]), 'storage_error');
    expect(await commit('g', v, [[0, 5]])).toBe(1);
    expect(store.commits).toBe(2);
    expect(gc.fetchOffset('g', TOPIC, 0)).toEqual({ offset: 5, committed: true });
  });

  it('a failed deletion rejects and leaves the group its offsets, as the store still has them', async () => {
    const v = await member('g');
    expect(await commit('g', v, [[0, 5]])).toBe(1);
    await c.topics.delete(TOPIC);
    store.failNext = true;
    await expectError(gc.deleteTopicOffsets(TOPIC), 'storage_error');
    expect(gc.committedOffset('g', TOPIC, 0)).toBe(5);
    expect(await store.fetch('g', TOPIC, 0)).toBe(5);
    await gc.deleteTopicOffsets(TOPIC);
    expect(gc.committedOffset('g', TOPIC, 0)).toBeUndefined();
    expect(await store.fetch('g', TOPIC, 0)).toBeUndefined();
  });
});

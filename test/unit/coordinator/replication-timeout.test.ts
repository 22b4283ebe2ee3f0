/**
 * Cluster mode's offset commits (the log store): an append the leader wrote whose wait for the in-sync
 * replicas then failed (timed out) is in the leader's log, and a replay reads it. The coordinator must take
 * its outcome as unknown (docs/architecture.md, "Cluster mode"), never as not written: else FETCH_OFFSET
 * answers the offset from before it and a lower commit is accepted after it, so the committed offset goes
 * back once the log is replayed. Nor may it answer the new offset before the in-sync replicas have it (a
 * change of leader could still lose it). A write refused before the append (not leader) stays not written.
 */
import { afterEach, beforeEach, expect, it } from 'vitest';
import { LogOffsetStore, OFFSETS_TOPIC } from 'tributary-broker/coordinator/group-log.js';
import { replicatedAppend } from 'tributary-broker/partition/internal-log.js';
import { TributaryError } from 'tributary-protocol/errors.js';
import { groupOnPartition0, useCoordinators } from '../../helpers/coordinators.js';
import { expectError, until } from '../../helpers/util.js';

const TOPIC = 't';

/**
 * 'timeout': the replication wait fails after the append; 'not_leader': the leader check refuses before it;
 * 'hold': the next append's wait lasts until `release` (then it is replicated), the fault back to 'none'.
 */
let fault: 'none' | 'timeout' | 'not_leader' | 'hold' = 'none';
let release: (() => void) | undefined;

const f = useCoordinators(
  'trib-repl-timeout-',
  { [TOPIC]: 1 },
  {
    records: 30,
    // As the cluster wires it (broker.ts), with the leader check and the replication wait faked.
    groupAppend: replicatedAppend(
      (part) => {
        if (fault === 'not_leader') throw new TributaryError('NOT_LEADER', { topic: part.topic, partition: part.id, reason: 'injected' });
        return 1;
      },
      async (part, lastOffset) => {
        if (fault === 'hold') {
          fault = 'none';
          await new Promise<void>((resolve) => {
            release = resolve;
          });
          part.setReplicatedHighWatermark(Math.max(part.highWatermark, lastOffset + 1));
          return;
        }
        // Replicated at once (the HWM passes the records), or not at all.
        if (fault === 'none') part.setReplicatedHighWatermark(lastOffset + 1);
        if (fault === 'timeout') throw new TributaryError('request_timeout', { reason: 'injected: the in-sync replicas did not confirm the record in time', topic: part.topic, partition: part.id });
      },
    ),
  },
);

const { member, commit, fetched } = groupOnPartition0(f, TOPIC);

/** What a replay of the log (a coordinator taking the partition over) finds committed. */
async function replayed(): Promise<number | undefined> {
  const offsets = await new LogOffsetStore(f.c.groupLog, f.clock).loadAll();
  return offsets.find((o) => o.group === 'g' && o.topic === TOPIC && o.partition === 0)?.offset;
}

// As a cluster's leader: the HWM moves only when the fake replication says so.
beforeEach(() => {
  for (const p of f.c.topics.get(OFFSETS_TOPIC).partitions) p.enableReplication(() => {});
});

afterEach(() => {
  fault = 'none';
  release?.();
  release = undefined;
});

/** A member that committed 10, then 20 whose replication timed out (of unknown outcome); the fault is off again. */
async function committedThenUnknown(): Promise<Awaited<ReturnType<typeof member>>> {
  const v = await member('a');
  await commit(v, 10);
  fault = 'timeout';
  await expectError(commit(v, 20), 'request_timeout', { outcome: 'unknown' });
  fault = 'none';
  return v;
}

/** A member that committed 10, then its topic's offset tombstones whose replication timed out; the fault is off again. */
async function tombstonesUnknown(): Promise<Awaited<ReturnType<typeof member>>> {
  const v = await member('a');
  await commit(v, 10);
  fault = 'timeout';
  await expectError(f.gc.deleteTopicOffsets(TOPIC), 'request_timeout', { outcome: 'unknown' });
  fault = 'none';
  return v;
}

/** As in a cluster: the lead of the group's partition moves away (its records stay in this log) and comes back. */
async function takeOver(): Promise<number> {
  const p = f.gc.partitionFor('g');
  f.gc.enableOwnership((q) => new TributaryError('NOT_COORDINATOR', { partition: q }), () => true, () => true, () => true);
  f.gc.unloadPartition(p);
  await f.gc.loadPartition(p);
  return p;
}

/** The followers catch up: the HWM of the offsets partitions reaches their log end. */
function replicate(): void {
  for (const p of f.c.topics.get(OFFSETS_TOPIC).partitions) p.setReplicatedHighWatermark(p.logEndOffset);
}
it('a commit whose replication timed out is of unknown outcome: FETCH_OFFSET never answers the offset from before it, and a lower commit is refused', async () => {
  const v = await committedThenUnknown();
  expect(await replayed()).toBe(20);
  // Not replicated yet: neither 10 nor 20 is answered, and 15 is refused without being written (accepted,
  // it would follow 20 in the log: a replay would answer 20, then 15).
  expect(fetched()).toBe('storage_error');
  await expectError(f.store.fetch('g', TOPIC, 0), 'storage_error');
  await expectError(commit(v, 15), 'storage_error');
  expect(await replayed()).toBe(20);
  expect(fetched()).toBe('storage_error');
  replicate();
  await until(() => fetched() === 20, 5000, 'FETCH_OFFSET answering 20, what the log holds');
  await expectError(commit(v, 15), 'offset_regression', { current: '20' });
  expect(await replayed()).toBe(20);
  await expect(commit(v, 25)).resolves.toBe(1);
  expect(fetched()).toBe(25);
});

it('a commit refused before the append (not leader) is not written: its offset stays as before', async () => {
  const v = await member('a');
  await commit(v, 10);
  fault = 'not_leader';
  const err = await expectError(commit(v, 20), 'NOT_LEADER');
  expect(err.fields.outcome).toBeUndefined();
  fault = 'none';
  expect(fetched()).toBe(10);
  expect(await replayed()).toBe(10);
  await expect(commit(v, 15)).resolves.toBe(1);
  expect(fetched()).toBe(15);
});

it('a commit above one whose replication timed out is written, and once replicated confirms both', async () => {
  const v = await committedThenUnknown();
  await expect(commit(v, 25)).resolves.toBe(1);
  await until(() => fetched() === 25, 5000, 'FETCH_OFFSET answering 25');
  expect(await f.store.fetch('g', TOPIC, 0)).toBe(25);
  await expectError(commit(v, 20), 'offset_regression', { current: '25' });
});

it('a group change whose replication timed out is not undone as a write known not to have happened: the group is reloaded from the log, which holds it, and served once replicated', async () => {
  const v = await member('a');
  fault = 'timeout';
  await expectError(f.gc.leave({ topic: TOPIC, group: 'g', member: v.memberId }), 'request_timeout', { outcome: 'unknown' });
  fault = 'none';
  const members = (): number | string => {
    try {
      return (f.gc.status('g') as { members: unknown[] }).members.length;
    } catch (err) {
      return (err as TributaryError).code;
    }
  };
  // Reverted to its last written snapshot (a `not_written` refusal), the group would still have `a`.
  await until(() => f.c.groupLog.lastWritten('g') !== undefined, 5000, 'the partition reloaded from the log');
  expect(f.c.groupLog.lastWritten('g')?.members).toEqual([]);
  // Past the HWM, the leave may still be lost with a change of leader: neither answer until it is replicated.
  expect(members()).toBe('COORDINATOR_LOADING');
  replicate();
  expect(members()).toBe(0);
});

it('a replay (the partition taken over) does not answer an offset whose record lies past the HWM until the in-sync replicas have it', async () => {
  const v = await committedThenUnknown();
  // The record stays in this log, past the HWM.
  const p = await takeOver();
  expect(f.c.topics.get(OFFSETS_TOPIC).partitions[p]!.highWatermark).toBeLessThan(f.c.topics.get(OFFSETS_TOPIC).partitions[p]!.logEndOffset);
  // 20 may still be lost with a change of leader (then 10 would be answered): neither is answered yet.
  expect(fetched()).toBe('storage_error');
  await expectError(f.store.fetch('g', TOPIC, 0), 'storage_error');
  await expectError(commit(v, 15), 'storage_error');
  replicate();
  await until(() => fetched() === 20, 5000, 'FETCH_OFFSET answering 20 once replicated');
  await expectError(commit(v, 15), 'offset_regression', { current: '20' });
});

it('the reload after a group change of unknown outcome does not answer an offset whose record lies past the HWM either', async () => {
  const v = await committedThenUnknown();
  fault = 'timeout';
  await expectError(f.gc.leave({ topic: TOPIC, group: 'g', member: v.memberId }), 'request_timeout', { outcome: 'unknown' });
  fault = 'none';
  await until(() => f.c.groupLog.lastWritten('g') !== undefined, 5000, 'the partition reloaded from the log');
  // The group's snapshot past the HWM holds its offsets back too (group-replay-past-hwm.test.ts).
  expect(fetched()).toBe('COORDINATOR_LOADING');
  replicate();
  await until(() => fetched() === 20, 5000, 'FETCH_OFFSET answering 20 once replicated');
});

/** FETCH_OFFSET's answer (undefined: nothing committed), or the error code it refuses with. */
function committed(): number | undefined | string {
  try {
    const o = f.gc.fetchOffset('g', TOPIC, 0);
    return o.committed ? o.offset : undefined;
  } catch (err) {
    return (err as TributaryError).code;
  }
}

/** Offsets whose tombstones are of unknown outcome: not answered until replicated, then none committed. */
async function deletedOnceReplicated(): Promise<void> {
  expect(committed()).toBe('storage_error');
  await expectError(f.store.fetch('g', TOPIC, 0), 'storage_error');
  replicate();
  await until(() => committed() === undefined, 5000, 'FETCH_OFFSET answering no committed offset');
  expect(await f.store.fetch('g', TOPIC, 0)).toBeUndefined();
}

it('offset tombstones whose replication timed out (DELETE_GROUP, a deleted topic) are of unknown outcome: the offsets are not answered until the in-sync replicas confirm the deletion', async () => {
  const v = await tombstonesUnknown();
  expect(await replayed()).toBeUndefined();
  // The tombstone may commit (nothing), or be lost with a change of leader (10): neither is answered.
  await deletedOnceReplicated();
  await commit(v, 12);
  await f.gc.leave({ topic: TOPIC, group: 'g', member: v.memberId });
  fault = 'timeout';
  await expectError(f.gc.deleteGroup('g'), 'request_timeout', { outcome: 'unknown' });
  fault = 'none';
  expect(await replayed()).toBeUndefined();
  await deletedOnceReplicated();
});

it('a replay does not answer "none committed" for an offset whose tombstone lies past the HWM', async () => {
  await tombstonesUnknown();
  await takeOver();
  // Another change of leader may lose the tombstone, and 10 be answered again.
  expect(committed()).toBe('storage_error');
  replicate();
  await until(() => committed() === undefined, 5000, 'FETCH_OFFSET answering no committed offset');
});

it('a commit being written when the tombstones of its topic are of unknown outcome is not answered once it completes: the tombstones follow it', async () => {
  const v = await member('a');
  await commit(v, 10);
  fault = 'hold';
  const committing = commit(v, 20);
  await until(() => release !== undefined, 5000, 'the commit of 20 appended, its replication held');
  fault = 'timeout';
  await expectError(f.gc.deleteTopicOffsets(TOPIC), 'request_timeout', { outcome: 'unknown' });
  fault = 'none';
  release!();
  await expect(committing).resolves.toBe(1);
  expect(await replayed()).toBeUndefined();
  await deletedOnceReplicated();
});

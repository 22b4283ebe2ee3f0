/**
 * DELETE_GROUP deletes the group's offsets in the offset store, then writes the tombstone of its snapshot
 * to the group log. When the store's deletion is done and the log refuses the tombstone (a full disk), the
 * offsets are gone from the store all the same: FETCH_OFFSET must not answer them (nor a restart bring them
 * back, which it does not). The PostgreSQL store (here the memory store, which keeps offsets apart from the
 * group log as it does) shows this the most plainly.
 */
import { afterEach, beforeEach, expect, it } from 'vitest';
import { TributaryError } from 'tributary-protocol/errors.js';
import { MemoryOffsetStore } from 'tributary-broker/coordinator/memory-offset-store.js';
import type { InternalAppend } from 'tributary-broker/partition/internal-log.js';
import { type Coordinators, joinAlone, openCoordinators } from '../../helpers/coordinators.js';
import { FakeClock } from '../../helpers/fake-clock.js';
import { expectError, rec, removeDir, tempDir } from '../../helpers/util.js';

const TOPIC = 't';

/** Set: the group log refuses the next append holding an empty value (a tombstone), writing nothing. */
let refuseTombstone = false;
const append: InternalAppend = async (part, records) => {
  if (refuseTombstone && records.some((r) => r.value !== null && r.value !== undefined && Buffer.byteLength(r.value as Buffer) === 0)) {
    refuseTombstone = false;
    throw new TributaryError('storage_error', { reason: 'injected: the disk is full', outcome: 'not_written' });
  }
  return part.append(records);
};

let dir: string;
let clock: FakeClock;
let c: Coordinators;
let store: MemoryOffsetStore;

beforeEach(async () => {
  dir = await tempDir('trib-delete-tombstone-');
  clock = new FakeClock();
  store = new MemoryOffsetStore();
  c = await openCoordinators(dir, clock, { topics: { [TOPIC]: 1 }, groupAppend: append, offsetStore: () => store });
  await c.topics.get(TOPIC).partitions[0]!.append(Array.from({ length: 10 }, (_, i) => rec(`r${i}`)));
});

afterEach(async () => {
  refuseTombstone = false;
  await c.close();
  await removeDir(dir);
});

it("a DELETE_GROUP whose snapshot tombstone the log refuses after the store deleted the offsets answers none of them", async () => {
  const v = await joinAlone({ gc: c.groups, clock }, { topic: TOPIC, group: 'g', member: 'a', host: '127.0.0.1' });
  await c.groups.commit({ topic: TOPIC, group: 'g', member: v.memberId, generation: v.generation, entries: [{ partition: 0, offset: 6 }] });
  await c.groups.leave({ topic: TOPIC, group: 'g', member: v.memberId });
  refuseTombstone = true;
  await expectError(c.groups.deleteGroup('g'), 'storage_error');
  expect(await store.fetch('g', TOPIC, 0)).toBeUndefined();
  // Before: 6, which the store no longer held (and a restart forgot).
  expect(c.groups.fetchOffset('g', TOPIC, 0)).toEqual({ offset: 0, committed: false });
  // Tried again, the deletion completes.
  await c.groups.deleteGroup('g');
  expect(c.groups.listGroups()).not.toContain('g');
});

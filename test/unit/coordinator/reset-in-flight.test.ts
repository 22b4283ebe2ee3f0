/**
 * RESET_OFFSETS and a commit still being written (appended, its durability not acknowledged yet): the log
 * store lets the next write start before the previous one is durable, so a reset could run between a
 * commit's append and its acknowledgment. The commit's completion must not overtake the reset (FETCH_OFFSET
 * answering the commit's offset while the log holds the reset's): the reset waits for it, as DELETE_GROUP
 * does (docs/protocol.md, RESET_OFFSETS).
 */
import { afterEach, expect, it, vi } from 'vitest';
import { GroupOffsets } from 'tributary-broker/coordinator/group-offsets.js';
import { LogOffsetStore } from 'tributary-broker/coordinator/group-log.js';
import type { InternalAppend } from 'tributary-broker/partition/internal-log.js';
import { joinAlone, useCoordinators } from '../../helpers/coordinators.js';
import { until } from '../../helpers/util.js';

const TOPIC = 't';

/** Set: the next append of the group log is written, then its acknowledgment held until it resolves. */
let hold: Promise<void> | undefined;
let held = false;
const holdingAppend: InternalAppend = async (part, records) => {
  const res = await part.append(records);
  const h = hold;
  hold = undefined;
  if (h) {
    held = true;
    await h;
  }
  return res;
};

const f = useCoordinators('trib-reset-in-flight-', { [TOPIC]: 1 }, { records: 30, groupAppend: holdingAppend });

afterEach(() => {
  hold = undefined;
  held = false;
  vi.restoreAllMocks();
});

it('a reset waits for the commit being written: the reset offset is what FETCH_OFFSET answers and the log holds', async () => {
  const v = await joinAlone(f, { topic: TOPIC, group: 'g', member: 'a', host: '127.0.0.1' });
  const commit = (offset: number) => f.gc.commit({ topic: TOPIC, group: 'g', member: v.memberId, generation: v.generation, entries: [{ partition: 0, offset }] });
  await commit(10);
  let release = () => {};
  hold = new Promise<void>((resolve) => {
    release = resolve;
  });
  const committing = commit(20);
  await until(() => held, 5000, 'the commit of 20 appended, its acknowledgment held');
  const waits = vi.spyOn(GroupOffsets.prototype, 'writesSettled');
  let settled = false;
  const reset = f.gc.resetOffsets({ group: 'g', topic: TOPIC, partition: 0, to: 'offset', value: 5 }).finally(() => {
    settled = true;
  });
  // Released once the reset is done (the commit then completes after it) or waits for the commit.
  await until(() => settled || waits.mock.calls.length > 0, 5000, 'the reset done or waiting for the commit');
  release();
  await expect(committing).resolves.toBe(1);
  await expect(reset).resolves.toEqual([{ partition: 0, offset: 5 }]);
  const replayed = (await new LogOffsetStore(f.c.groupLog, f.clock).loadAll()).find((o) => o.group === 'g')?.offset;
  expect(replayed).toBe(5);
  expect(f.gc.fetchOffset('g', TOPIC, 0).offset).toBe(5);
  expect(await f.store.fetch('g', TOPIC, 0)).toBe(5);
});

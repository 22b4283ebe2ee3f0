/**
 * PartitionOwnership (cluster coordinators' `__consumer_offsets` / `__transaction_state` partitions): a load
 * overtaken by an unload and a newer load neither marks the partition owned nor ends the newer load, and
 * tells its replay it is no longer current, so what it read (older than commits since) is not applied.
 */
import { expect, it } from 'vitest';
import { TributaryError } from 'tributary-protocol/errors.js';
import { PartitionOwnership } from 'tributary-broker/common/partition-ownership.js';

const ownership = () =>
  new PartitionOwnership(
    '__consumer_offsets',
    (p) => new TributaryError('NOT_COORDINATOR', { partition: p }),
    () => true,
  );
const code = (f: () => void) => {
  try {
    f();
    return 'owned';
  } catch (err) {
    return (err as TributaryError).code;
  }
};

it('a load overtaken by an unload and a newer load is not current, and leaves the newer one in charge', async () => {
  const o = ownership();
  let releaseOld!: () => void;
  let oldCurrent: (() => boolean) | undefined;
  const oldLoad = o.load(3, async (current) => {
    oldCurrent = current;
    await new Promise<void>((r) => {
      releaseOld = r;
    });
  });
  expect(code(() => o.check(() => 3))).toBe('COORDINATOR_LOADING');
  // Leadership went away and came back while the first replay was still reading.
  o.unload(3);
  expect(oldCurrent!()).toBe(false);
  let releaseNew!: () => void;
  let newCurrent: (() => boolean) | undefined;
  const newLoad = o.load(3, async (current) => {
    newCurrent = current;
    await new Promise<void>((r) => {
      releaseNew = r;
    });
  });
  // The old replay finishes first: it must not mark the partition owned, nor end the newer load.
  releaseOld();
  await oldLoad;
  expect(oldCurrent!()).toBe(false);
  expect(newCurrent!()).toBe(true);
  expect(code(() => o.check(() => 3))).toBe('COORDINATOR_LOADING');
  releaseNew();
  await newLoad;
  expect(code(() => o.check(() => 3))).toBe('owned');
});

it('a load unloaded while replaying ends not owned', async () => {
  const o = ownership();
  let release!: () => void;
  const load = o.load(1, async () => {
    await new Promise<void>((r) => {
      release = r;
    });
  });
  o.unload(1);
  release();
  await load;
  expect(code(() => o.check(() => 1))).toBe('NOT_COORDINATOR');
});

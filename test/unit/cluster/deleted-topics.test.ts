/**
 * The expiry rules of deleted topics' tombstones (cluster/deleted-topics.ts) on a fake clock: what a
 * tombstone's value says, what the controller does with it at a given time, and a sweep that fails (etcd
 * away) without throwing into the controller's pass, tried again later. The etcd side is in
 * test/integration/cluster/deleted-topics.test.ts.
 */
import type { Etcd3 } from 'etcd3';
import { describe, expect, it } from 'vitest';
import { DeletedTopicSweeper, tombstoneFate, tombstoneTime, tombstoneTopic, tombstoneValue } from 'tributary-broker/cluster/deleted-topics.js';
import type { Logger } from 'tributary-broker/common/logger.js';
import { FakeClock } from '../../helpers/fake-clock.js';

const RETENTION = 7 * 86_400_000;

describe('tombstones of deleted topics', () => {
  it("reads the delete's time from a value, and none from an earlier version's empty value or a broken one", () => {
    expect(tombstoneTime(tombstoneValue(1_700_000_000_000))).toBe(1_700_000_000_000);
    for (const v of ['', 'null', '12', '{"deletedAt":"1"}', '{"deletedAt":-1}', '{"deletedAt":1.5}', '{not json']) expect(tombstoneTime(v), v).toBeUndefined();
    expect(tombstoneTopic('orders~00aa11')).toEqual({ name: 'orders', topicId: '00aa11' });
    expect(tombstoneTopic('no-id')).toBeUndefined();
  });

  it('keeps a tombstone younger than the retention, removes it from then on, and stamps one without a believable time', () => {
    const clock = new FakeClock();
    const deletedAt = clock.now();
    expect(tombstoneFate(deletedAt, clock.now(), RETENTION)).toEqual({ kind: 'keep', expiresAt: deletedAt + RETENTION });
    expect(tombstoneFate(deletedAt, deletedAt + RETENTION - 1, RETENTION)).toEqual({ kind: 'keep', expiresAt: deletedAt + RETENTION });
    expect(tombstoneFate(deletedAt, deletedAt + RETENTION, RETENTION)).toEqual({ kind: 'remove' });
    // An earlier version's tombstone, or one from a broker whose clock ran far ahead: counted from now.
    expect(tombstoneFate(undefined, clock.now(), RETENTION)).toEqual({ kind: 'stamp' });
    expect(tombstoneFate(clock.now() + 3_600_000, clock.now(), RETENTION)).toEqual({ kind: 'stamp' });
    // A little ahead (clocks a few seconds apart) is believed.
    expect(tombstoneFate(clock.now() + 5_000, clock.now(), RETENTION)).toEqual({ kind: 'keep', expiresAt: clock.now() + 5_000 + RETENTION });
  });

  it("a sweep that cannot reach etcd does not throw into the controller's pass; it warns once and tries again 10 s later", async () => {
    const clock = new FakeClock();
    let reads = 0;
    const client = {
      getAll: () => ({
        inRange: () => ({
          limit: () => ({
            exec: () => {
              reads++;
              return Promise.reject(new Error('etcd down'));
            },
          }),
        }),
      }),
    } as unknown as Etcd3;
    const warned: string[] = [];
    const logger = { warn: (_: unknown, msg: string) => warned.push(msg), info: () => {} } as unknown as Logger;
    const sweep = new DeletedTopicSweeper({ client, prefix: '/t/', retentionMs: RETENTION, clock, logger });
    // One step at a time: a pass while one runs (the controller does not await it) joins that one.
    const [first, second] = [sweep.pass(), sweep.pass()];
    expect(second).toBe(first);
    expect(await first).toEqual({ read: 0, removed: 0, stamped: 0 });
    expect(reads).toBe(1);
    await clock.advance(9_999);
    await sweep.pass();
    expect(reads).toBe(1);
    await clock.advance(1);
    await sweep.pass();
    expect(reads).toBe(2);
    expect(warned).toEqual(['expiring the tombstones of deleted topics failed; retrying']);
  });
});

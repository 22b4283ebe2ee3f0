/**
 * seek() and pause() of a partition whose fetched batch waits for one of `partitionsConsumedConcurrently`
 * slots, under run({ eachBatch }) (docs/sdk.md, "Offsets", "eachBatch"): the batch was fetched before the
 * seek or pause, so it is dropped, not handed to eachBatch; it is read again from the sought offset, or
 * after resume(). Every delivery is recorded with the partition, its offsets and whether it came after the
 * seek or pause.
 */
import { subscribe, unsubscribe } from 'node:diagnostics_channel';
import { describe, expect, it } from 'vitest';
import { Consumer } from 'tributary-client/consumer.js';
import type { BrokerProcess } from '../../helpers/launcher.js';
import { useGroupBroker } from '../../helpers/group-broker.js';
import { until } from '../../helpers/util.js';

const TOPIC = 'batch-flow';
const PARTITIONS = 2;
const RECORDS = 60;

interface Delivery {
  partition: number;
  offsets: number[];
  /** Handed out after the test's seek() or pause() of the waiting partition. */
  after: boolean;
}

describe('eachBatch: seek and pause of a batch waiting for a slot', () => {
  let broker: BrokerProcess;
  const ends: number[] = [];

  useGroupBroker({ offsetsPartitions: 1, topic: { name: TOPIC, partitions: PARTITIONS, records: RECORDS } }, (g) => {
    broker = g.broker;
    ends.push(...g.ends);
  });

  /**
   * A consumer whose first batch holds the only slot until `release()`, and `waiting`: resolves with the
   * other partition once its reader fetched a batch, which then waits for the slot.
   */
  function setUp(group: string) {
    const c = new Consumer({
      brokers: [broker.address],
      groupId: group,
      topic: TOPIC,
      autoOffsetReset: 'earliest',
      sessionTimeoutMs: 6000,
      heartbeatIntervalMs: 200,
      maxWaitMs: 100,
      maxBatchRecords: 5,
      partitionsConsumedConcurrently: 1,
    });
    const deliveries: Delivery[] = [];
    let after = false;
    let release = () => {};
    const held = new Promise<void>((r) => {
      release = r;
    });
    let holder: number | undefined;
    let heldStarted = () => {};
    const holding = new Promise<number>((r) => {
      heldStarted = () => r(holder!);
    });
    const run = c.run({
      eachBatch: async ({ partition, messages, resolveOffset }) => {
        deliveries.push({ partition, offsets: messages.map((m) => m.offset), after });
        if (holder === undefined) {
          holder = partition;
          heldStarted();
          await held;
        }
        for (const m of messages) resolveOffset(m.offset);
      },
    });
    // The other partition's reader fetched a batch while the held one has the slot.
    const waiting = holding.then(
      (p) =>
        new Promise<number>((resolve) => {
          const other = 1 - p;
          const onFetch = (msg: unknown) => {
            const e = msg as { group: string; partition: number; records: number };
            if (e.group !== group || e.partition !== other || e.records === 0) return;
            unsubscribe('tributary:consumer:fetch', onFetch);
            resolve(other);
          };
          subscribe('tributary:consumer:fetch', onFetch);
        }),
    );
    return { c, run, deliveries, waiting, release, markAfter: () => (after = true) };
  }

  it('a seek drops the batch fetched before it', async () => {
    const t = setUp('g-seek');
    try {
      const q = await t.waiting;
      const to = ends[q]! - 1;
      t.c.seek(q, to);
      t.markAfter();
      t.release();
      await until(() => t.deliveries.some((d) => d.after && d.partition === q && d.offsets.includes(to)), 20_000, 'the sought record delivered');
      const stale = t.deliveries.filter((d) => d.after && d.partition === q && d.offsets.some((o) => o < to));
      expect(stale).toEqual([]);
    } finally {
      t.release();
      await t.c.close();
      await t.run.catch(() => {});
    }
  }, 60_000);

  it('a pause drops the batch fetched before it, and resume() reads it again', async () => {
    const t = setUp('g-pause');
    let onPaused: ((msg: unknown) => void) | undefined;
    try {
      const q = await t.waiting;
      // The paused partition's reader has stopped (docs/sdk.md, "tributary:consumer:paused").
      const stopped = new Promise<void>((resolve) => {
        onPaused = (msg: unknown) => {
          const e = msg as { group: string; partition: number };
          if (e.group === 'g-pause' && e.partition === q) resolve();
        };
        subscribe('tributary:consumer:paused', onPaused);
      });
      t.c.pause([q]);
      t.markAfter();
      t.release();
      await stopped;
      expect(t.deliveries.filter((d) => d.after && d.partition === q)).toEqual([]);
      t.c.resume([q]);
      // nothing of it skipped: every record of the partition is delivered
      await until(() => new Set(t.deliveries.filter((d) => d.partition === q).flatMap((d) => d.offsets)).size === ends[q], 20_000, 'every record of the resumed partition');
    } finally {
      if (onPaused) unsubscribe('tributary:consumer:paused', onPaused);
      t.release();
      await t.c.close();
      await t.run.catch(() => {});
    }
  }, 60_000);
});

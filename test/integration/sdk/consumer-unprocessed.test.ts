/**
 * No poll-skip in run()'s handlers against a real broker: a message a handler did not process (it sought
 * back to it, or an eachBatch handler left it unresolved) is never committed past, and is delivered
 * again. The broker starts a group's reads at max(requested, committed) (docs/sdk.md, "Offsets"), so a
 * commit past such a message would lose it for good. Each test pauses the partition at the point where a
 * commit could pass the message, commits, and checks the committed offset before it resumes.
 */
import diagnostics from 'node:diagnostics_channel';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import type { Connection } from 'tributary-protocol/connection.js';
import { parseLine } from 'tributary-protocol/command.js';
import { channels } from 'tributary-client/events.js';
import { Consumer, type ConsumerOptions } from 'tributary-client/consumer.js';
import { BrokerProcess } from '../../helpers/launcher.js';
import { sleep, until } from '../../helpers/util.js';

describe('Consumer: what a handler did not process is not committed', () => {
  let broker: BrokerProcess;
  let admin: Connection;
  let topicSeq = 0;
  const consumers: Consumer[] = [];
  const unhandled: unknown[] = [];
  const onUnhandled = (r: unknown) => unhandled.push(r);
  /** `<group>:<partition>` of every paused partition whose reader reported it stopped. */
  const stopped: string[] = [];
  const onPaused = (m: unknown) => {
    const e = m as { group: string; partition: number };
    stopped.push(`${e.group}:${e.partition}`);
  };

  beforeAll(async () => {
    diagnostics.subscribe(channels.consumerPaused.name, onPaused);
    broker = await BrokerProcess.start({ args: ['--offsets-topic-partitions', '4', '--group-join-window-ms', '20'] });
    admin = await broker.connect();
  });

  afterAll(async () => {
    diagnostics.unsubscribe(channels.consumerPaused.name, onPaused);
    await broker?.dispose();
  });

  beforeEach(() => {
    unhandled.length = 0;
    process.on('unhandledRejection', onUnhandled);
  });

  afterEach(async () => {
    await Promise.all(consumers.splice(0).map((c) => c.close()));
    await sleep(20);
    process.off('unhandledRejection', onUnhandled);
    expect(unhandled).toEqual([]);
  });

  async function topic(partitions: number): Promise<string> {
    const t = `unproc-${++topicSeq}`;
    await admin.command('CREATE', { topic: t, partitions });
    return t;
  }

  async function produce(t: string, partition: number, values: string[]): Promise<void> {
    for (const message of values) await admin.json('PUBLISH', { topic: t, partition, message });
  }

  function consumer(t: string, group: string, extra: Partial<ConsumerOptions> = {}): Consumer {
    const c = new Consumer({
      brokers: [broker.address],
      groupId: group,
      topic: t,
      clientId: 'unproc',
      autoOffsetReset: 'earliest',
      // commits only when the test asks: it checks each one
      autoCommit: false,
      sessionTimeoutMs: 15_000,
      heartbeatIntervalMs: 200,
      maxWaitMs: 100,
      retry: { initialDelayMs: 5, maxDelayMs: 100 },
      ...extra,
    });
    consumers.push(c);
    return c;
  }

  async function fetchOffset(t: string, group: string, partition: number): Promise<{ offset: number; committed: boolean }> {
    const p = parseLine(await admin.command('FETCH_OFFSET', { topic: t, group, partition })).params;
    return { offset: Number(p.get('offset')), committed: p.get('committed') === 'true' };
  }

  it('eachMessage: seek() back to its own message ("not yet") and pause: it is not counted, and delivered again after resume', async () => {
    const t = await topic(1);
    const g = 'g-seek-own';
    await produce(t, 0, ['0', '1', '2']);
    const c = consumer(t, g);
    const delivered: number[] = [];
    const run = c.run({
      eachMessage: ({ message }) => {
        delivered.push(message.offset);
        if (message.offset === 1 && delivered.filter((o) => o === 1).length === 1) {
          c.seek(0, 1); // not ready: read it again
          c.pause([0]); // later
        }
      },
    });
    await until(() => stopped.includes(`${g}:0`), 10_000, 'the paused reader stopped');
    await c.commit();
    // 0 was processed, 1 was not: the commit must not pass it (the re-read would start past it)
    expect(await fetchOffset(t, g, 0)).toEqual({ offset: 1, committed: true });
    c.resume([0]);
    await until(() => delivered.includes(2), 10_000, 'offset 2');
    expect(delivered).toEqual([0, 1, 1, 2]);
    await c.commit();
    expect(await fetchOffset(t, g, 0)).toEqual({ offset: 3, committed: true });
    await c.close();
    await run;
  });

  it('eachBatch: resolveOffset() past an offset the handler sought back to counts only what lies below it', async () => {
    const t = await topic(1);
    const g = 'g-seek-batch';
    await produce(t, 0, ['0', '1', '2', '3']);
    const c = consumer(t, g);
    const batches: number[][] = [];
    const run = c.run({
      eachBatch: ({ messages, resolveOffset }) => {
        batches.push(messages.map((m) => m.offset));
        if (batches.length === 1) {
          c.seek(0, 2); // 2 and 3 are to be handled later
          c.pause([0]);
        }
        resolveOffset(messages[messages.length - 1]!.offset);
      },
    });
    await until(() => stopped.includes(`${g}:0`), 10_000, 'the paused reader stopped');
    await c.commit();
    expect(await fetchOffset(t, g, 0)).toEqual({ offset: 2, committed: true });
    c.resume([0]);
    await until(() => batches.length === 2, 10_000, 'the second batch');
    expect(batches).toEqual([
      [0, 1, 2, 3],
      [2, 3],
    ]);
    await c.commit();
    expect(await fetchOffset(t, g, 0)).toEqual({ offset: 4, committed: true });
    await c.close();
    await run;
  });
  it('eachBatch: a handler that pauses and returns mid-batch gets the rest of the batch after resume()', async () => {
    const t = await topic(1);
    const g = 'g-batch-pause';
    await produce(t, 0, ['0', '1', '2', '3', '4', '5']);
    const c = consumer(t, g);
    const resolved: number[] = [];
    let paused = false;
    const run = c.run({
      eachBatch: ({ partition, messages, resolveOffset }) => {
        for (const m of messages) {
          if (m.offset === 3 && !paused) {
            // back-pressure: stop here, go on with the partition later
            paused = true;
            c.pause([partition]);
            return;
          }
          resolveOffset(m.offset);
          resolved.push(m.offset);
        }
      },
    });
    await until(() => stopped.includes(`${g}:0`), 10_000, 'the paused reader stopped');
    await c.commit();
    expect(await fetchOffset(t, g, 0)).toEqual({ offset: 3, committed: true });
    c.resume([0]);
    await produce(t, 0, ['6']);
    await until(() => resolved.includes(6), 10_000, 'offset 6');
    expect(resolved).toEqual([0, 1, 2, 3, 4, 5, 6]);
    await c.commit();
    expect(await fetchOffset(t, g, 0)).toEqual({ offset: 7, committed: true });
    await c.close();
    await run;
  });

  it('eachBatch: a batch returned with nothing resolved is delivered again (there is no auto-resolve)', async () => {
    const t = await topic(1);
    const g = 'g-batch-none';
    await produce(t, 0, ['0', '1', '2']);
    const c = consumer(t, g);
    const batches: number[][] = [];
    const run = c.run({
      eachBatch: ({ messages, resolveOffset }) => {
        batches.push(messages.map((m) => m.offset));
        if (batches.length > 1) resolveOffset(messages[messages.length - 1]!.offset);
      },
    });
    await until(() => batches.length === 2, 10_000, 'the batch again');
    expect(batches).toEqual([
      [0, 1, 2],
      [0, 1, 2],
    ]);
    await c.commit();
    expect(await fetchOffset(t, g, 0)).toEqual({ offset: 3, committed: true });
    await c.close();
    await run;
  });
});

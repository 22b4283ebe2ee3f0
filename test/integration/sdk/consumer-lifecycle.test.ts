/**
 * The SDK Consumer against a real broker: lifecycle states and events, the three ways to consume
 * (async iterator, eachMessage, eachBatch), concurrency, pause/resume, seek, manual commit, offset reset
 * policies, incremental rebalancing without stalls on kept partitions, close() in every situation (no
 * unhandled rejection, no leaked socket or timer), handler failures and slow handlers, and the fencing of
 * work from a revoked partition.
 */
import diagnostics from 'node:diagnostics_channel';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import type { Connection } from 'tributary-protocol/connection.js';
import { channels } from 'tributary-client/events.js';
import { type ConsumedMessage, Consumer, type ConsumerOptions, type ConsumerState } from 'tributary-client/consumer.js';
import { parseLine } from 'tributary-protocol/command.js';
import type { TributaryError } from 'tributary-protocol/errors.js';
import { GroupMember, groupStatus } from '../groups/helpers.js';
import { BrokerProcess } from '../../helpers/launcher.js';
import { sleep, until } from '../../helpers/util.js';

/** Active handles (sockets, timers, ...) by type. */
function resources(): Map<string, number> {
  const m = new Map<string, number>();
  for (const r of process.getActiveResourcesInfo()) m.set(r, (m.get(r) ?? 0) + 1);
  return m;
}

/** Resource types whose count grew (vitest's own are in the baseline). */
function grown(before: Map<string, number>, after: Map<string, number>): Record<string, number> {
  const out: Record<string, number> = {};
  for (const [k, n] of after) if (n > (before.get(k) ?? 0)) out[k] = n - (before.get(k) ?? 0);
  return out;
}

interface Seen {
  partition: number;
  offset: number;
  value: string;
  at: number;
}

describe('Consumer against a broker', () => {
  let broker: BrokerProcess;
  let admin: Connection;
  let topicSeq = 0;
  const consumers: Consumer[] = [];
  const rawMembers: GroupMember[] = [];
  const unhandled: unknown[] = [];
  const onUnhandled = (r: unknown) => unhandled.push(r);

  beforeAll(async () => {
    broker = await BrokerProcess.start({ args: ['--offsets-topic-partitions', '4', '--group-join-window-ms', '20'] });
    admin = await broker.connect();
  });

  afterAll(async () => {
    await broker?.dispose();
  });

  beforeEach(() => {
    unhandled.length = 0;
    process.on('unhandledRejection', onUnhandled);
  });

  afterEach(async () => {
    await Promise.all(consumers.splice(0).map((c) => c.close()));
    await Promise.all(rawMembers.splice(0).map((m) => m.conn.close()));
    await sleep(20);
    process.off('unhandledRejection', onUnhandled);
    expect(unhandled).toEqual([]);
  });

  async function topic(partitions: number): Promise<string> {
    const t = `life-${++topicSeq}`;
    await admin.command('CREATE', { topic: t, partitions });
    return t;
  }

  async function produce(t: string, partition: number, values: string[]): Promise<number[]> {
    const acks = await Promise.all(values.map((message) => admin.json<{ offset: number }>('PUBLISH', { topic: t, partition, message })));
    return acks.map((a) => a.offset);
  }

  function consumer(t: string, group: string, extra: Partial<ConsumerOptions> = {}): Consumer {
    const c = new Consumer({
      brokers: [broker.address],
      groupId: group,
      topic: t,
      clientId: 'life',
      autoOffsetReset: 'earliest',
      sessionTimeoutMs: 3000,
      heartbeatIntervalMs: 200,
      maxWaitMs: 100,
      autoCommitIntervalMs: 100,
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

  /** Records `<p>-<round>` to partitions 0..3 in rounds `pauseMs` apart until stop(), which resolves with the rounds sent. */
  function keepProducing(t: string, pauseMs: number): { stop: () => Promise<number> } {
    let producing = true;
    let sent = 0;
    const loop = (async () => {
      while (producing) {
        await Promise.all([0, 1, 2, 3].map((p) => produce(t, p, [`${p}-${sent}`])));
        sent++;
        await sleep(pauseMs);
      }
    })();
    return {
      stop: async () => {
        producing = false;
        await loop;
        return sent;
      },
    };
  }

  function record(into: Seen[]) {
    return ({ message }: { message: { partition: number; offset: number; value: Buffer } }) => {
      into.push({ partition: message.partition, offset: message.offset, value: message.value.toString(), at: Date.now() });
    };
  }

  function byPartition(seen: Seen[]): Map<number, number[]> {
    const m = new Map<number, number[]>();
    for (const s of seen) m.set(s.partition, [...(m.get(s.partition) ?? []), s.offset]);
    return m;
  }

  it('start: new → rebalancing → running, with group.join, rebalance.start/end, heartbeat and commit events', async () => {
    const t = await topic(3);
    await produce(t, 1, ['a', 'b']);
    const c = consumer(t, 'g-start');
    const events: Array<[string, ConsumerState, unknown]> = [];
    for (const e of ['group.join', 'rebalance.start', 'rebalance.end', 'heartbeat', 'commit'] as const) {
      c.on(e, (payload) => events.push([e, c.state, payload]));
    }
    expect(c.state).toBe('new');
    const seen: Seen[] = [];
    const run = c.run({ eachMessage: record(seen) });
    expect(c.state).toBe('rebalancing'); // synchronously on start
    await until(() => c.state === 'running', 10_000, 'running');
    await until(() => events.some(([e]) => e === 'heartbeat') && events.some(([e]) => e === 'commit'), 10_000, 'heartbeat and commit');

    const names = events.map(([e]) => e);
    expect(names.slice(0, 3)).toEqual(['rebalance.start', 'group.join', 'rebalance.end']);
    const [, startState, start] = events[0]!;
    expect(startState).toBe('rebalancing');
    expect(start).toEqual({ reason: 'start', generation: 0 });
    const join = events[1]![2] as { memberId: string; generation: number; leader: string; assignments: number[] };
    expect(join.memberId).toMatch(/^life-/);
    expect(join).toMatchObject({ generation: 1, leader: join.memberId, assignments: [0, 1, 2] });
    expect(events[2]![2]).toMatchObject({ generation: 1, assignmentGeneration: 1, assigned: [0, 1, 2], revoked: [], kept: [] });
    expect(c.memberId).toBe(join.memberId);
    expect(c.generation).toBe(1);
    expect(c.assignment()).toEqual([0, 1, 2]);
    const hb = events.find(([e]) => e === 'heartbeat')!;
    expect(hb[1]).toBe('running');
    expect(hb[2]).toEqual({ memberId: join.memberId, generation: 1 });
    const commit = events.find(([e]) => e === 'commit')![2] as { offsets: unknown[]; generation: number };
    expect(commit).toEqual({ offsets: [{ partition: 1, offset: 2 }], generation: 1 });
    expect(await fetchOffset(t, 'g-start', 1)).toEqual({ offset: 2, committed: true });
    expect(seen.map((s) => [s.partition, s.offset, s.value])).toEqual([
      [1, 0, 'a'],
      [1, 1, 'b'],
    ]);
    const s = await groupStatus(admin, 'g-start');
    expect(s.members.map((m) => m.member_id)).toEqual([join.memberId]);
    await c.close();
    await run;
    expect(c.state).toBe('closed');
  });

  it('run() with a signal that is already aborted closes the consumer at once: run() resolves, nothing is read', { timeout: 20_000 }, async () => {
    const t = await topic(1);
    await produce(t, 0, ['0', '1', '2']);
    const seen: Seen[] = [];
    const c = consumer(t, 'g-pre-aborted');
    await c.run({ signal: AbortSignal.abort(), eachMessage: record(seen) });
    expect(c.state).toBe('closed');
    // with retryTopics too, before it looks at any topic
    const c2 = consumer(t, 'g-pre-aborted-rt');
    await c2.run({ signal: AbortSignal.abort(), retryTopics: { delays: ['1s'] }, eachMessage: record(seen) });
    expect(c2.state).toBe('closed');
    // an abort while run() sets up its retry topics stops it the same way: it resolves, it does not fail
    const ac = new AbortController();
    const c3 = consumer(t, 'g-pre-aborted-rt2');
    const running = c3.run({ signal: ac.signal, retryTopics: { delays: ['1s'] }, eachMessage: record(seen) });
    ac.abort();
    await running;
    expect(c3.state).toBe('closed');
    expect(seen).toEqual([]);
    expect((await fetchOffset(t, 'g-pre-aborted', 0)).committed).toBe(false);
  });

  it('for await: per-partition order; break closes and leaves, and the message it broke on is not counted', async () => {
    const t = await topic(3);
    const N = 30;
    for (let p = 0; p < 3; p++) await produce(t, p, Array.from({ length: N }, (_, i) => `p${p}-${i}`));
    const c = consumer(t, 'g-iter');
    const seen: Seen[] = [];
    const stopAfter = 2 * N + 7;
    for await (const m of c) {
      seen.push({ partition: m.partition, offset: m.offset, value: m.value.toString(), at: Date.now() });
      expect(m.value.toString()).toBe(`p${m.partition}-${m.offset}`);
      expect(m.topic).toBe(t);
      expect(m.assignmentGeneration).toBe(1);
      if (seen.length === stopAfter) break;
    }
    expect(c.state).toBe('closed');
    for (const [p, offsets] of byPartition(seen)) expect(offsets, `partition ${p}`).toEqual(offsets.map((_, i) => i));
    // the group has no members afterwards: the consumer left
    const s = await groupStatus(admin, 'g-iter');
    expect(s.members).toEqual([]);
    // every partition is committed up to the messages the loop asked past; the one it broke on is not
    // counted (leaving the loop cannot tell a break from a throw)
    const last = seen.at(-1)!;
    for (let p = 0; p < 3; p++) {
      const counted = seen.filter((x) => x.partition === p && x !== last);
      expect(await fetchOffset(t, 'g-iter', p), `partition ${p}`).toEqual(
        counted.length ? { offset: counted.at(-1)!.offset + 1, committed: true } : { offset: 0, committed: false },
      );
    }
    // a new consumer of the group continues with the message broken on, then exactly after what was seen
    const c2 = consumer(t, 'g-iter');
    const rest: Seen[] = [];
    const run = c2.run({ eachMessage: record(rest) });
    await until(() => rest.length >= 3 * N - stopAfter + 1, 10_000, 'the rest');
    await sleep(200);
    await c2.close();
    await run;
    expect(rest).toHaveLength(3 * N - stopAfter + 1);
    expect(rest.filter((x) => x.partition === last.partition)[0]!.offset).toBe(last.offset);
    const all = [...seen, ...rest].map((x) => `${x.partition}:${x.offset}`);
    expect(new Set(all).size).toBe(3 * N);
  });

  it('for await: a body that throws leaves its message uncounted; commit({ message }) counts the one a loop stops on', async () => {
    const t = await topic(1);
    await produce(t, 0, ['0', '1', '2', '3', '4', '5']);
    const c = consumer(t, 'g-iter-throw');
    const seen: number[] = [];
    const loop = async () => {
      for await (const m of c) {
        seen.push(m.offset);
        if (m.offset === 3) throw new Error('handler failed on 3');
      }
    };
    await expect(loop()).rejects.toThrow('handler failed on 3');
    expect(seen).toEqual([0, 1, 2, 3]);
    expect(c.state).toBe('closed');
    expect(await fetchOffset(t, 'g-iter-throw', 0)).toEqual({ offset: 3, committed: true });
    // the group's next member gets 3 again; it stops after handling 4 and counts it first
    const c2 = consumer(t, 'g-iter-throw');
    const again: number[] = [];
    for await (const m of c2) {
      again.push(m.offset);
      if (m.offset === 4) {
        await c2.commit({ message: m });
        break;
      }
    }
    expect(again).toEqual([3, 4]);
    expect(await fetchOffset(t, 'g-iter-throw', 0)).toEqual({ offset: 5, committed: true });
    // run() counts a handler's message when it returns: commit({ message }) is refused there
    const c3 = consumer(t, 'g-iter-throw');
    const got: Array<{ offset: number; commit: unknown }> = [];
    const run = c3.run({
      eachMessage: async ({ message }) => void got.push({ offset: message.offset, commit: await c3.commit({ message }).catch((e: unknown) => e) }),
    });
    await until(() => got.length === 1, 10_000, 'offset 5 handled');
    await c3.close();
    await run;
    expect(got).toEqual([{ offset: 5, commit: expect.objectContaining({ code: 'invalid_config' }) }]);
  });

  it('commit({ message }) refuses a message this consumer did not hand out with invalid_config, and counts nothing of it', async () => {
    const mine = await topic(1);
    const other = await topic(3);
    await produce(mine, 0, ['a', 'b']);
    await produce(other, 2, ['x']);
    // another consumer's message, of a partition (2) this consumer does not hold
    const b = consumer(other, 'g-foreign-b', { autoCommit: false });
    let foreign: ConsumedMessage | undefined;
    for await (const m of b) {
      foreign = m;
      break;
    }
    const c = consumer(mine, 'g-foreign-a', { autoCommit: false });
    const refusals: unknown[] = [];
    for await (const m of c) {
      for (const message of [foreign!, { ...foreign!, topic: mine, partition: 0 }, { topic: mine, partition: 0, offset: 1 }, 'm']) {
        refusals.push(await c.commit({ message: message as ConsumedMessage }).catch((e: TributaryError) => e.code));
      }
      // its own message counts
      await c.commit({ message: m });
      break;
    }
    expect(refusals).toEqual(['invalid_config', 'invalid_config', 'invalid_config', 'invalid_config']);
    expect(await fetchOffset(mine, 'g-foreign-a', 0)).toEqual({ offset: 1, committed: true });
  });

  it('run({ eachBatch }) with resolveOffset: batches in order; what a batch left unresolved is delivered again, never committed past', async () => {
    const t = await topic(2);
    await produce(t, 0, ['0', '1', '2', '3', '4', '5']);
    await produce(t, 1, ['0', '1', '2']);
    const c = consumer(t, 'g-batch', { maxBatchRecords: 4 });
    const batches: Array<{ partition: number; offsets: number[] }> = [];
    const run = c.run({
      eachBatch: ({ partition, messages, resolveOffset }) => {
        batches.push({ partition, offsets: messages.map((m) => m.offset) });
        // partition 1: resolve only the first message of each batch
        for (const m of messages) {
          if (partition === 1 && m.offset > messages[0]!.offset) break;
          resolveOffset(m.offset);
        }
      },
    });
    await until(async () => (await fetchOffset(t, 'g-batch', 0)).offset === 6, 10_000, 'partition 0 committed');
    await until(async () => (await fetchOffset(t, 'g-batch', 1)).offset === 3, 10_000, 'partition 1 committed');
    const p0 = batches.filter((b) => b.partition === 0).flatMap((b) => b.offsets);
    expect(p0).toEqual([0, 1, 2, 3, 4, 5]);
    expect(batches.every((b) => b.offsets.length <= 4)).toBe(true);
    // partition 1: the messages a batch did not resolve are read again, from the first of them
    expect(batches.filter((b) => b.partition === 1).map((b) => b.offsets)).toEqual([[0, 1, 2], [1, 2], [2]]);
    await c.close();
    await run;
  });

  it('partitionsConsumedConcurrently bounds how many partitions run handlers at once', async () => {
    const t = await topic(4);
    for (let p = 0; p < 4; p++) await produce(t, p, ['x', 'y']);
    for (const [limit, expected] of [
      [1, 1],
      [3, 3],
    ] as const) {
      const c = consumer(t, `g-conc-${limit}`, { partitionsConsumedConcurrently: limit });
      let active = 0;
      let maxActive = 0;
      let done = 0;
      const run = c.run({
        eachMessage: async () => {
          active++;
          maxActive = Math.max(maxActive, active);
          await sleep(60);
          active--;
          done++;
        },
      });
      await until(() => done === 8, 10_000, `8 messages with limit ${limit}`);
      await c.close();
      await run;
      expect(maxActive, `limit ${limit}`).toBe(expected);
    }
  });

  for (const mode of ['poll', 'stream'] as const) {
    it(`pause/resume (${mode}): nothing from a paused partition until it is resumed`, async () => {
      const t = await topic(2);
      const group = `g-pause-${mode}`;
      // The reader of a paused partition reports when it has stopped: then the read that was in flight
      // at pause() has ended, and anything it fetched from partition 0 was dropped, not delivered.
      const stopped: number[] = [];
      const onPaused = (m: unknown) => {
        const e = m as { group: string; partition: number };
        if (e.group === group) stopped.push(e.partition);
      };
      diagnostics.subscribe(channels.consumerPaused.name, onPaused);
      try {
        const c = consumer(t, group, { mode, maxWaitMs: 500 });
        const seen: Seen[] = [];
        const run = c.run({ eachMessage: record(seen) });
        await until(() => c.state === 'running', 10_000, 'running');
        await sleep(100); // readers are in their long polls / streams
        c.pause([0]);
        expect(c.paused()).toEqual([0]);
        const pausedAt = Date.now();
        await produce(t, 0, ['p0-a', 'p0-b']);
        await produce(t, 1, ['p1-a', 'p1-b']);
        await until(() => seen.filter((s) => s.partition === 1).length === 2, 10_000, 'partition 1');
        await until(() => stopped.includes(0), 10_000, 'the reader of partition 0 stopped');
        expect(stopped.filter((p) => p !== 0)).toEqual([]);
        expect(seen.filter((s) => s.partition === 0 && s.at >= pausedAt)).toEqual([]);
        const resumedAt = Date.now();
        c.resume([0]);
        expect(c.paused()).toEqual([]);
        await until(() => seen.filter((s) => s.partition === 0).length === 2, 10_000, 'partition 0 after resume');
        expect(seen.filter((s) => s.partition === 0).every((s) => s.at >= resumedAt)).toBe(true);
        expect(seen.filter((s) => s.partition === 0).map((s) => s.value)).toEqual(['p0-a', 'p0-b']);
        await c.close();
        await run;
      } finally {
        diagnostics.unsubscribe(channels.consumerPaused.name, onPaused);
      }
    });
  }

  it('pause() from inside a handler stops the rest of the batch; for await honours it too', async () => {
    const t = await topic(1);
    await produce(t, 0, ['0', '1', '2', '3', '4', '5']);
    const c = consumer(t, 'g-pause-inside');
    const seen: Seen[] = [];
    const run = c.run({
      eachMessage: (p) => {
        record(seen)(p);
        if (p.message.offset === 2) c.pause([0]);
      },
    });
    await until(() => seen.length === 3, 10_000, 'up to the pause');
    await sleep(400);
    expect(seen.map((s) => s.offset)).toEqual([0, 1, 2]); // 3..5 were in the same batch, not delivered
    c.resume([0]);
    await until(() => seen.length === 6, 10_000, 'after resume');
    expect(seen.map((s) => s.offset)).toEqual([0, 1, 2, 3, 4, 5]);
    await c.close();
    await run;

    const it2 = consumer(t, 'g-pause-iter');
    const got: Array<[number, number]> = [];
    let resumedAt = 0;
    for await (const m of it2) {
      got.push([m.offset, Date.now()]);
      if (m.offset === 1) {
        it2.pause([0]);
        setTimeout(() => {
          resumedAt = Date.now();
          it2.resume([0]);
        }, 300);
      }
      if (m.offset === 5) break;
    }
    expect(got.map(([o]) => o)).toEqual([0, 1, 2, 3, 4, 5]);
    // the rest of the batch waited for resume()
    expect(resumedAt).toBeGreaterThan(0);
    expect(got[2]![1]).toBeGreaterThanOrEqual(resumedAt);
  });

  it('seek: moves the read position back (redelivery) and forward (skip), from outside and from a handler', async () => {
    const t = await topic(1);
    await produce(t, 0, Array.from({ length: 10 }, (_, i) => `v${i}`));
    // Nothing is committed until commit() below: a seek below the committed offset is refused. A
    // rebalance would restart the partition from offset 0 (nothing committed) and garble the sequence:
    // a long session keeps a loaded machine's late heartbeat from causing one, and the check below says so.
    const c = consumer(t, 'g-seek', { autoCommit: false, sessionTimeoutMs: 15_000 });
    const rebalances: unknown[] = [];
    c.on('rebalance.start', (e) => rebalances.push(e));
    const seen: Seen[] = [];
    let seekedForward = false;
    const run = c.run({
      eachMessage: (p) => {
        record(seen)(p);
        if (p.message.offset === 12 && !seekedForward) {
          seekedForward = true;
          c.seek(0, 17);
        }
      },
    });
    await until(() => seen.length === 10, 10_000, 'first pass');
    const joinedWith = rebalances.length;
    c.seek(0, 3);
    await until(() => seen.length === 17, 10_000, 'redelivery from 3');
    expect(seen.slice(10).map((s) => s.offset)).toEqual([3, 4, 5, 6, 7, 8, 9]);
    await produce(t, 0, Array.from({ length: 10 }, (_, i) => `w${i}`)); // offsets 10..19
    await until(() => seen.some((s) => s.offset === 19), 10_000, 'new records');
    await sleep(200);
    expect(rebalances.slice(joinedWith)).toEqual([]);
    expect(seen.slice(17).map((s) => s.offset)).toEqual([10, 11, 12, 17, 18, 19]);
    // the commit covers what was processed, never lower because of the backward seek
    await c.commit();
    expect(await fetchOffset(t, 'g-seek', 0)).toEqual({ offset: 20, committed: true });
    // below the committed offset the broker would start at 20 anyway: refused, with the way to rewind
    expect(() => c.seek(0, 19)).toThrow(expect.objectContaining({ code: 'seek_below_committed', message: expect.stringMatching(/resetOffsets/) }));
    expect(() => c.seek(0, 20)).not.toThrow();
    expect(() => c.seek(5, 0)).toThrow(expect.objectContaining({ code: 'NOT_OWNER' }));
    await c.close();
    await run;
  });

  it('seek: for await drops the rest of a batch it holds; a failure after a forward seek reads again from the failed record, not below the seek', async () => {
    const t = await topic(1);
    await produce(t, 0, Array.from({ length: 20 }, (_, i) => `v${i}`));
    const it1 = consumer(t, 'g-seek-iter', { autoCommit: false, sessionTimeoutMs: 15_000 });
    const iterated: number[] = [];
    for await (const m of it1) {
      iterated.push(m.offset);
      if (m.offset === 3) it1.seek(0, 15);
      if (m.offset === 19) break;
    }
    expect(iterated).toEqual([0, 1, 2, 3, 15, 16, 17, 18, 19]);

    const c = consumer(t, 'g-seek-fail', { autoCommit: false, sessionTimeoutMs: 15_000 });
    c.on('crash', () => {});
    const seen: number[] = [];
    let failed = false;
    const run = c.run({
      eachMessage: ({ message: m }) => {
        seen.push(m.offset);
        if (m.offset === 3) c.seek(0, 15);
        if (m.offset === 15 && !failed) {
          failed = true;
          throw new Error('transient');
        }
      },
    });
    await until(() => seen.includes(19), 15_000, 'offset 19');
    expect(seen).toEqual([0, 1, 2, 3, 15, 15, 16, 17, 18, 19]);
    await c.close();
    await run;
  });

  it('eachBatch: resolveOffset refuses an offset outside its batch, so nothing unhandled can be committed', async () => {
    const t = await topic(1);
    await produce(t, 0, ['0', '1', '2']);
    const c = consumer(t, 'g-resolve-bad', { autoCommit: false });
    const refusals: string[] = [];
    const run = c.run({
      eachBatch: ({ messages, resolveOffset }) => {
        const last = messages[messages.length - 1]!.offset;
        for (const bad of [last + 1000, messages[0]!.offset - 1, 1.5]) {
          try {
            resolveOffset(bad);
          } catch (err) {
            refusals.push((err as { code: string }).code);
          }
        }
        resolveOffset(last);
      },
    });
    await until(
      async () => {
        await c.commit();
        return (await fetchOffset(t, 'g-resolve-bad', 0)).offset === 3;
      },
      10_000,
      'every batch handled and committed',
    );
    expect(refusals.length % 3).toBe(0);
    expect(new Set(refusals)).toEqual(new Set(['invalid_parameter']));
    await c.close();
    await run;
  });

  it('manual commit: autoCommit false commits nothing until commit()', async () => {
    const t = await topic(2);
    await produce(t, 0, ['a', 'b', 'c']);
    await produce(t, 1, ['d']);
    const c = consumer(t, 'g-manual', { autoCommit: false, autoCommitIntervalMs: 50 });
    const commits: unknown[] = [];
    c.on('commit', (e) => commits.push(e));
    const seen: Seen[] = [];
    const run = c.run({ eachMessage: record(seen) });
    await until(() => seen.length === 4, 10_000, 'messages');
    await sleep(400); // many auto-commit intervals
    expect(commits).toEqual([]);
    expect(await fetchOffset(t, 'g-manual', 0)).toEqual({ offset: 0, committed: false });
    await c.commit();
    expect(commits).toHaveLength(1);
    expect((commits[0] as { offsets: unknown[] }).offsets).toEqual(expect.arrayContaining([{ partition: 0, offset: 3 }, { partition: 1, offset: 1 }]));
    expect(await fetchOffset(t, 'g-manual', 0)).toEqual({ offset: 3, committed: true });
    expect(await fetchOffset(t, 'g-manual', 1)).toEqual({ offset: 1, committed: true });
    // nothing new processed: commit() sends nothing
    await c.commit();
    expect(commits).toHaveLength(1);
    await c.close();
    await run;
    await expect(c.commit()).rejects.toMatchObject({ code: 'client_closed' });
  });

  it('autoOffsetReset: earliest reads the retained log, latest only what comes after, error refuses to start', async () => {
    const t = await topic(1);
    await produce(t, 0, ['old-0', 'old-1', 'old-2']);

    const early = consumer(t, 'g-earliest', { autoOffsetReset: 'earliest' });
    const e: Seen[] = [];
    const runE = early.run({ eachMessage: record(e) });
    await until(() => e.length === 3, 10_000, 'earliest');
    await early.close();
    await runE;
    expect(e.map((s) => s.value)).toEqual(['old-0', 'old-1', 'old-2']);

    const late = consumer(t, 'g-latest', { autoOffsetReset: 'latest' });
    const l: Seen[] = [];
    const runL = late.run({ eachMessage: record(l) });
    await until(() => late.state === 'running', 10_000, 'latest running');
    await sleep(200);
    expect(l).toEqual([]);
    await produce(t, 0, ['new-3']);
    await until(() => l.length === 1, 10_000, 'latest');
    expect(l.map((s) => [s.offset, s.value])).toEqual([[3, 'new-3']]);
    await late.close();
    await runL;

    const strict = consumer(t, 'g-error', { autoOffsetReset: 'error' });
    const err = (await strict.start().then(
      () => undefined,
      (x: TributaryError) => x,
    )) as TributaryError | undefined;
    expect(err?.code).toBe('OFFSET_OUT_OF_RANGE');
    expect(strict.state).toBe('closed');
    expect((await groupStatus(admin, 'g-error')).members).toEqual([]);

    // with a committed offset, autoOffsetReset=error starts from it
    const strict2 = consumer(t, 'g-latest', { autoOffsetReset: 'error' });
    const s2: Seen[] = [];
    const run2 = strict2.run({ eachMessage: record(s2) });
    await produce(t, 0, ['new-4']);
    await until(() => s2.length === 1, 10_000, 'from the committed offset');
    expect(s2.map((s) => s.offset)).toEqual([4]);
    await strict2.close();
    await run2;
  });

  it("a consumer whose assignor is not its group's refuses to start with inconsistent_group_protocol; the group is untouched", async () => {
    const t = await topic(2);
    const first = consumer(t, 'g-assignor', { assignor: 'range' });
    await first.start();
    const before = await groupStatus(admin, 'g-assignor');
    expect(before).toMatchObject({ assignor: 'range', generation: 1 });

    const other = consumer(t, 'g-assignor', { assignor: 'roundrobin' });
    const err = (await other.start().then(
      () => undefined,
      (x: TributaryError) => x,
    )) as TributaryError | undefined;
    expect(err?.code).toBe('inconsistent_group_protocol');
    expect(err?.fields).toMatchObject({ assignor: 'range', requested: 'roundrobin' });
    expect(other.state).toBe('closed');
    const after = await groupStatus(admin, 'g-assignor');
    expect(after.members.map((m) => m.member_id)).toEqual(before.members.map((m) => m.member_id));
    expect(after.generation).toBe(1);
  });

  it('a consumer does not join a client-assigned group (no plan would ever come from it): start() rejects with inconsistent_group_protocol', async () => {
    const t = await topic(2);
    const raw = await GroupMember.connect(broker, t, 'g-client-side', 'raw');
    rawMembers.push(raw);
    await raw.join({ protocol: 'client' });
    const before = await groupStatus(admin, 'g-client-side');

    const c = consumer(t, 'g-client-side');
    let settled: TributaryError | 'started' | undefined;
    void c.start().then(
      () => (settled = 'started'),
      (x: TributaryError) => (settled = x),
    );
    await until(() => settled !== undefined, 10_000, 'start() to settle');
    expect(settled).toMatchObject({ code: 'inconsistent_group_protocol', fields: { protocol: 'client', requested: 'server' } });
    expect(c.state).toBe('closed');
    const after = await groupStatus(admin, 'g-client-side');
    expect(after.members.map((m) => m.member_id)).toEqual(before.members.map((m) => m.member_id));
    expect(after.generation).toBe(before.generation);
  });

  it('a second consumer takes half the partitions; the kept ones keep delivering without a stall', async () => {
    const t = await topic(4);
    const a = consumer(t, 'g-split', { clientId: 'a' });
    const b = consumer(t, 'g-split', { clientId: 'b' });
    const seenA: Seen[] = [];
    const seenB: Seen[] = [];
    const endsA: Array<{ kept: number[]; revoked: number[]; assigned: number[] }> = [];
    a.on('rebalance.end', (e) => endsA.push(e));
    const runA = a.run({ eachMessage: record(seenA) });
    await until(() => a.state === 'running', 10_000, 'a running');
    const producer = keepProducing(t, 20);
    await sleep(500);
    const joinAt = Date.now();
    const runB = b.run({ eachMessage: record(seenB) });
    await until(() => a.assignment().length === 2 && b.assignment().length === 2 && a.state === 'running' && b.state === 'running', 10_000, 'split');
    const splitAt = Date.now();
    await sleep(700);
    const sent = await producer.stop();
    await until(() => seenA.length + seenB.length >= 4 * sent, 10_000, 'everything delivered');

    expect([...a.assignment(), ...b.assignment()].sort()).toEqual([0, 1, 2, 3]);
    const end = endsA.at(-1)!;
    expect(end.kept).toEqual(a.assignment());
    // (a commit racing the rejoin may cost A one more, empty, rebalance: take every one since B came)
    expect(endsA.slice(1).flatMap((e) => e.revoked).sort()).toEqual(b.assignment());
    expect(endsA.slice(1).flatMap((e) => e.assigned)).toEqual([]);
    // no partition was delivered to both at once: B's first delivery of a partition comes after A's last one
    for (const p of b.assignment()) {
      const lastA = Math.max(...seenA.filter((s) => s.partition === p).map((s) => s.at));
      const firstB = Math.min(...seenB.filter((s) => s.partition === p).map((s) => s.at));
      expect(firstB).toBeGreaterThanOrEqual(lastA);
    }
    // kept partitions: deliveries kept flowing through the rebalance
    for (const p of end.kept) {
      const times = seenA.filter((s) => s.partition === p && s.at >= joinAt - 300 && s.at <= splitAt + 500).map((s) => s.at);
      expect(times.length).toBeGreaterThan(5);
      const gaps = times.slice(1).map((x, i) => x - times[i]!);
      expect(Math.max(...gaps), `largest gap on kept partition ${p}`).toBeLessThan(1000);
      // and nothing of it reached B
      expect(seenB.some((s) => s.partition === p)).toBe(false);
    }
    // every record was processed at least once, in order per partition per consumer
    const all = new Set([...seenA, ...seenB].map((s) => s.value));
    for (let i = 0; i < sent; i++) for (let p = 0; p < 4; p++) expect(all.has(`${p}-${i}`), `${p}-${i}`).toBe(true);
    for (const seen of [seenA, seenB]) for (const [, offs] of byPartition(seen)) expect(offs).toEqual([...offs].sort((x, y) => x - y));
    const s = await groupStatus(admin, 'g-split');
    expect(s.members).toHaveLength(2);
    expect(s.state).toBe('Stable');
    await Promise.all([a.close(), b.close()]);
    await Promise.all([runA, runB]);
  });

  it('a member joining costs a running member one JOIN, not two: refusals of what it sent before its JOIN returned queue no other', async () => {
    const t = await topic(4);
    const a = consumer(t, 'g-once', { clientId: 'a' });
    const b = consumer(t, 'g-once', { clientId: 'b' });
    const joinsA: number[] = [];
    const joinsB: number[] = [];
    a.on('group.join', (e) => joinsA.push(e.generation));
    b.on('group.join', (e) => joinsB.push(e.generation));
    const runA = a.run({ eachMessage: () => {} });
    await until(() => a.state === 'running' && a.assignment().length === 4, 10_000, 'a running');
    // Reads, commits and heartbeats of A are in flight all the time, so some are refused while A's JOIN waits.
    const producer = keepProducing(t, 10);
    await sleep(300);
    const runB = b.run({ eachMessage: () => {} });
    await until(() => a.assignment().length === 2 && b.assignment().length === 2 && a.state === 'running' && b.state === 'running', 10_000, 'split');
    // Settled: a second JOIN of A would have been queued by now; several heartbeats of both pass at the generation B joined.
    let beats = 0;
    const onBeat = () => beats++;
    a.on('heartbeat', onBeat);
    b.on('heartbeat', onBeat);
    await until(() => beats >= 10, 10_000, 'heartbeats after the split');
    await producer.stop();
    // A: its first JOIN and one for B's arrival. B may JOIN again in the same generation: that is how it
    // takes the partitions A released (docs/architecture.md, "Rebalancing without stopping the world").
    expect(joinsA).toHaveLength(2);
    expect(new Set(joinsB)).toEqual(new Set([joinsA[1]]));
    await Promise.all([a.close(), b.close()]);
    await Promise.all([runA, runB]);
  });

  it('close() during a rebalance, during a slow handler and twice in a row ends closed with nothing leaked', async () => {
    const t = await topic(4);
    for (let p = 0; p < 4; p++) await produce(t, p, ['x']);
    const before = resources();

    // 1. during a rebalance: B joins; A closes as soon as its rebalance starts
    const a = consumer(t, 'g-close', { clientId: 'a' });
    const b = consumer(t, 'g-close', { clientId: 'b' });
    const runA = a.run({ eachMessage: () => {} });
    await until(() => a.state === 'running', 10_000, 'a running');
    const closing = new Promise<void>((resolve) =>
      a.on('rebalance.start', () => {
        expect(a.state).toBe('rebalancing');
        void a.close().then(resolve);
      }),
    );
    const runB = b.run({ eachMessage: () => {} });
    await closing;
    await runA;
    expect(a.state).toBe('closed');
    await until(() => b.assignment().length === 4, 10_000, 'b takes over everything');

    // 2. during a slow handler (it ignores the abort signal; close waits for it, then ends)
    await produce(t, 0, ['slow']);
    let handlerDone = false;
    let handlerStarted = false;
    const c = consumer(t, 'g-close-slow', { clientId: 'c' });
    const runC = c.run({
      eachMessage: async ({ message }) => {
        if (message.value.toString() !== 'slow') return;
        handlerStarted = true;
        await sleep(800);
        handlerDone = true;
      },
    });
    await until(() => handlerStarted, 10_000, 'slow handler');
    await c.close();
    expect(handlerDone).toBe(true);
    expect(c.state).toBe('closed');
    await runC;

    // 3. twice in a row (and concurrently): the same outcome, once
    const closes = await Promise.allSettled([b.close(), b.close()]);
    expect(closes.map((x) => x.status)).toEqual(['fulfilled', 'fulfilled']);
    await b.close();
    expect(b.state).toBe('closed');
    await runB;
    expect((await groupStatus(admin, 'g-close')).members).toEqual([]);
    expect((await groupStatus(admin, 'g-close-slow')).members).toEqual([]);

    await sleep(1100); // Connection.close's unref'd destroy timer
    expect(grown(before, resources())).toEqual({});
  });

  it('close() while a rebalance waits for a revoked partition\'s handler: close() commits what that partition handled', async () => {
    const t = await topic(2);
    for (const p of [0, 1]) await produce(t, p, ['a', 'b', 'c']);
    const g = 'g-close-revoke';
    const a = consumer(t, g, { clientId: 'a', autoCommit: false, partitionsConsumedConcurrently: 2 });
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    const handled: string[] = [];
    const revoking: number[] = [];
    const runA = a.run({
      eachMessage: async ({ message, signal }) => {
        if (message.offset < 2) {
          handled.push(`${message.partition}:${message.offset}`);
          return;
        }
        // a slow handler that does not watch its signal: a revocation waits for it to return
        signal.addEventListener('abort', () => revoking.push(message.partition), { once: true });
        await gate;
      },
    });
    await until(() => handled.length === 4, 10_000, 'offsets 0 and 1 of both partitions handled');
    // B joins: A gives one partition up and waits for its handler; A is closed meanwhile (a SIGTERM)
    const b = consumer(t, g, { clientId: 'b', autoCommit: false });
    const runB = b.run({ eachMessage: ({ signal }) => new Promise<void>((r) => signal.addEventListener('abort', () => r(), { once: true })) });
    await until(() => revoking.length === 1, 10_000, 'A revoking a partition');
    const closing = a.close();
    release();
    await closing;
    await runA;
    // A handled offsets 0 and 1 of both partitions (the handlers of 2 returned after the abort: not counted)
    expect([await fetchOffset(t, g, 0), await fetchOffset(t, g, 1)]).toEqual([
      { offset: 2, committed: true },
      { offset: 2, committed: true },
    ]);
    await b.close();
    await runB;
  });

  it('await using closes the consumer on scope exit', async () => {
    const t = await topic(1);
    await produce(t, 0, ['x']);
    const before = resources();
    let escaped: Consumer | undefined;
    {
      await using c = new Consumer({
        brokers: [broker.address],
        groupId: 'g-using',
        topic: t,
        autoOffsetReset: 'earliest',
        sessionTimeoutMs: 3000,
        heartbeatIntervalMs: 200,
        maxWaitMs: 100,
      });
      escaped = c;
      for await (const m of c) {
        expect(m.value.toString()).toBe('x');
        break;
      }
      // break already closed it; scope exit closes again (idempotent)
    }
    expect(escaped!.state).toBe('closed');
    {
      await using c2 = new Consumer({ brokers: [broker.address], groupId: 'g-using2', topic: t, sessionTimeoutMs: 3000, heartbeatIntervalMs: 200, maxWaitMs: 100 });
      escaped = c2;
      await c2.start();
      expect(c2.state).toBe('running');
    }
    expect(escaped.state).toBe('closed');
    expect((await groupStatus(admin, 'g-using2')).members).toEqual([]);
    await sleep(1100);
    expect(grown(before, resources())).toEqual({});
  });

  it('a handler that throws: crash event (fatal=false), the message is delivered again, nothing skipped', async () => {
    const t = await topic(1);
    await produce(t, 0, ['0', '1', '2', '3', '4']);
    const c = consumer(t, 'g-throw');
    const crashes: Array<{ error: Error; fatal: boolean }> = [];
    c.on('crash', (x) => crashes.push(x));
    const calls: number[] = [];
    let thrown = 0;
    const run = c.run({
      eachMessage: ({ message }) => {
        calls.push(message.offset);
        if (message.offset === 2 && thrown < 2) {
          thrown++;
          throw new Error(`boom ${thrown}`);
        }
      },
    });
    await until(() => calls.includes(4), 10_000, 'all processed');
    await until(async () => (await fetchOffset(t, 'g-throw', 0)).offset === 5, 10_000, 'committed');
    expect(calls).toEqual([0, 1, 2, 2, 2, 3, 4]);
    expect(crashes.map((x) => [x.error.message, x.fatal])).toEqual([
      ['boom 1', false],
      ['boom 2', false],
    ]);
    expect(c.state).toBe('running');
    await c.close();
    await run;
  });

  it('a handler slower than processingTimeoutMs: handler.slow, but the member keeps its session and generation', async () => {
    const t = await topic(1);
    await produce(t, 0, ['slow', 'next']);
    const c = consumer(t, 'g-slow', { sessionTimeoutMs: 1000, heartbeatIntervalMs: 150, processingTimeoutMs: 200 });
    const slow: Array<{ partition: number; offset: number; elapsedMs: number }> = [];
    c.on('handler.slow', (x) => slow.push(x));
    let beats = 0;
    c.on('heartbeat', () => beats++);
    let inHandler = false;
    const done: number[] = [];
    const run = c.run({
      eachMessage: async ({ message }) => {
        if (message.offset === 0) {
          inHandler = true;
          await sleep(2500); // 2.5 session timeouts
          inHandler = false;
        }
        done.push(message.offset);
      },
    });
    await until(() => inHandler, 10_000, 'slow handler running');
    const member = c.memberId!;
    const generation = c.generation;
    const beatsBefore = beats;
    await until(() => slow.length > 0, 2000, 'handler.slow');
    expect(slow[0]).toMatchObject({ partition: 0, offset: 0 });
    expect(slow[0]!.elapsedMs).toBeGreaterThanOrEqual(190);
    await sleep(1500); // past the session timeout, handler still running
    expect(inHandler).toBe(true);
    const s = await groupStatus(admin, 'g-slow');
    expect(s.members.map((m) => m.member_id)).toEqual([member]);
    expect(s.generation).toBe(generation);
    expect(s.members[0]!.last_heartbeat_ms_ago).toBeLessThan(1000);
    expect(beats - beatsBefore).toBeGreaterThanOrEqual(3);
    await until(() => done.length === 2, 10_000, 'both processed');
    expect(slow).toHaveLength(1); // the fast one was not reported
    expect(c.memberId).toBe(member);
    expect(c.generation).toBe(generation);
    expect(c.state).toBe('running');
    await c.close();
    await run;
  });

  it('work of a revoked partition is not committed: a late handler finishing after revocation moves no offset', async () => {
    const t = await topic(2);
    await produce(t, 0, ['a0']);
    await produce(t, 1, ['b0']);
    const c = consumer(t, 'g-fence', { autoCommit: false, partitionsConsumedConcurrently: 2, sessionTimeoutMs: 5000 });
    const ends: Array<{ kept: number[]; revoked: number[] }> = [];
    c.on('rebalance.end', (e) => ends.push(e));
    const commits: Array<{ partition: number; offset: number }> = [];
    c.on('commit', (e) => commits.push(...e.offsets));
    let release!: () => void;
    const gate = new Promise<void>((r) => {
      release = r;
    });
    const started = new Set<number>();
    const finished: number[] = [];
    const run = c.run({
      eachMessage: async ({ message }) => {
        started.add(message.partition);
        await gate; // both handlers hold their message until the rebalance has begun
        finished.push(message.partition);
      },
    });
    await until(() => started.size === 2, 10_000, 'both handlers running');
    const gen1 = c.generation;

    // A raw member joins (it never consumes or commits): the consumer must give one partition away.
    const other = await GroupMember.connect(broker, t, 'g-fence', 'other');
    rawMembers.push(other);
    await other.join({ session_timeout_ms: 10_000 });
    await other.sync();
    await until(() => c.generation > gen1, 10_000, 'consumer rejoined');
    expect(c.state).toBe('rebalancing'); // revocation waits for the handler of the revoked partition
    release();
    await until(() => ends.length === 2 && c.state === 'running', 10_000, 'rebalance end');
    const { kept, revoked } = ends[1]!;
    expect(revoked).toHaveLength(1);
    expect(kept).toHaveLength(1);
    const [P] = revoked;
    const [K] = kept;
    expect(finished.sort()).toEqual([0, 1]); // both handlers ran to the end
    // the revoked partition's late work was rejected: no commit for P was sent, before or after
    expect(commits).toEqual([]);
    await c.commit();
    expect(commits).toEqual([{ partition: K, offset: 1 }]);
    expect(await fetchOffset(t, 'g-fence', K!)).toEqual({ offset: 1, committed: true });
    expect(await fetchOffset(t, 'g-fence', P!)).toEqual({ offset: 0, committed: false });
    // the raw member can take P over (the consumer really released it)
    await until(async () => {
      await other.poll(50);
      return other.owned.includes(P!);
    }, 10_000, 'the other member owns P');
    await c.close();
    await run;
    expect(await fetchOffset(t, 'g-fence', P!)).toEqual({ offset: 0, committed: false });
  });
});

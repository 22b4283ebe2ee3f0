/**
 * run()'s `retryTopics` without a server (docs/sdk.md, "Retry and dead-letter topics"): option parsing
 * and refusals, the retry headers, the due-time wait on a fake clock, and the parking handler's choices.
 * The brokers listed are never contacted.
 */
import { describe, expect, it } from 'vitest';
import { TributaryError } from 'tributary-protocol/errors.js';
import type { Cluster } from 'tributary-client/cluster.js';
import { Consumer } from 'tributary-client/consumer.js';
import { type ConsumedMessage, ConsumerContext } from 'tributary-client/consumer-context.js';
import { resolveConsumerOptions } from 'tributary-client/consumer-options.js';
import { handlerSink } from 'tributary-client/message-handlers.js';
import { OffsetCommitter } from 'tributary-client/offset-committer.js';
import { PartitionWorker } from 'tributary-client/partition-worker.js';
import { sessionHeld } from 'tributary-client/session-guard.js';
import { waitUntilDue } from 'tributary-client/retry-due.js';
import { decodeRetryInfo, parkHeaders, RETRY_HEADERS, type RetryInfo, withoutRetryHeaders } from 'tributary-client/retry-headers.js';
import { parkingHandler, type Parker } from 'tributary-client/retry-topics.js';
import { parseDelay, resolveRetryTopics, retryTopicIndex } from 'tributary-client/retry-topics-options.js';
import { FakeClock, turn } from '../../helpers/fake-clock.js';
import { rejection, thrown } from '../../helpers/util.js';

const ctx = { topic: 'orders', groupId: 'billing', eachBatch: false, concurrency: false };

function message(over: Partial<ConsumedMessage> = {}): ConsumedMessage {
  const signal = new AbortController().signal;
  return { topic: 'orders', partition: 2, offset: 41, key: Buffer.from('k'), value: Buffer.from('v'), timestamp: 0, headers: [], assignmentGeneration: 1, signal, fenced: false, ...over };
}

describe('retryTopics options', () => {
  it('parses delays and fills in the defaults', () => {
    expect(parseDelay('200ms')).toBe(200);
    expect(parseDelay('1s')).toBe(1000);
    expect(parseDelay('1m')).toBe(60_000);
    expect(parseDelay('10m')).toBe(600_000);
    expect(parseDelay('2h')).toBe(7_200_000);
    expect(parseDelay(0)).toBe(0);
    expect(parseDelay(1500)).toBe(1500);
    for (const bad of ['1', '1 s', '1.5s', '-1s', 's', '1d', '', -1, 1.5, Number.NaN, null, '999999h']) expect(parseDelay(bad), String(bad)).toBeUndefined();
    const r = resolveRetryTopics({ delays: ['1s', '1m', 600_000] }, ctx)!;
    expect(r).toEqual({
      topic: 'orders',
      groupId: 'billing',
      delaysMs: [1000, 60_000, 600_000],
      maxAttempts: 4,
      retryTopics: ['orders.billing.retry.1', 'orders.billing.retry.2', 'orders.billing.retry.3'],
      deadLetterTopic: 'orders.billing.dlq',
      createTopics: true,
      transactionTimeoutMs: 10_000,
    });
    expect(resolveRetryTopics(undefined, ctx)).toBeUndefined();
    const more = resolveRetryTopics({ delays: ['1s', '2s'], maxAttempts: 5, deadLetterTopic: 'orders.dlq', createTopics: false }, ctx)!;
    expect([more.maxAttempts, more.deadLetterTopic, more.createTopics]).toEqual([5, 'orders.dlq', false]);
    // attempt 2 → topic 1, attempt 3 → topic 2, later attempts stay on the last one
    expect([2, 3, 4, 5].map((a) => retryTopicIndex(more, a))).toEqual([0, 1, 1, 1]);
  });

  it('refuses unknown names (with the nearest one), bad values and combinations it cannot keep exactly once', () => {
    const cases: Array<[unknown, Partial<typeof ctx>, string, RegExp]> = [
      [{ delays: ['1s'], maxAttemps: 3 }, {}, 'retryTopics.maxAttemps', /did you mean retryTopics\.maxAttempts\?/],
      [{ delay: ['1s'] }, {}, 'retryTopics.delay', /did you mean retryTopics\.delays\?/],
      [{ delays: ['1s'], deadLetterTopik: 'x' }, {}, 'retryTopics.deadLetterTopik', /did you mean retryTopics\.deadLetterTopic\?/],
      [{ delays: [] }, {}, 'retryTopics.delays', /1 to 20 delays/],
      [{}, {}, 'retryTopics.delays', /1 to 20 delays/],
      [{ delays: '1s' }, {}, 'retryTopics.delays', /1 to 20 delays/],
      [{ delays: ['1s', '1 minute'] }, {}, 'retryTopics.delays[1]', /"1 minute" is not a delay/],
      [{ delays: [-5] }, {}, 'retryTopics.delays[0]', /is not a delay/],
      [{ delays: ['1s', '2s'], maxAttempts: 2 }, {}, 'retryTopics.maxAttempts', /from 3/],
      [{ delays: ['1s'], maxAttempts: 2.5 }, {}, 'retryTopics.maxAttempts', /integer/],
      [{ delays: ['1s'], maxAttempts: 1001 }, {}, 'retryTopics.maxAttempts', /to 1000/],
      [{ delays: ['1s'], deadLetterTopic: 'bad name' }, {}, 'retryTopics.deadLetterTopic', /not a valid topic name/],
      [{ delays: ['1s'], deadLetterTopic: '__dlq' }, {}, 'retryTopics.deadLetterTopic', /not a valid topic name/],
      [{ delays: ['1s'], deadLetterTopic: 'orders' }, {}, 'retryTopics.deadLetterTopic', /must differ/],
      [{ delays: ['1s'], deadLetterTopic: 'orders.billing.retry.1' }, {}, 'retryTopics.deadLetterTopic', /must differ/],
      [{ delays: ['1s'], createTopics: 'yes' }, {}, 'retryTopics.createTopics', /boolean/],
      [{ delays: ['1s'], transactionTimeoutMs: 5 }, {}, 'retryTopics.transactionTimeoutMs', />= 100/],
      [{ delays: ['1s'] }, { eachBatch: true }, 'retryTopics', /eachMessage only/],
      [{ delays: ['1s'] }, { concurrency: true }, 'retryTopics', /cannot be combined with concurrency/],
      [{ delays: ['1s'] }, { topic: 'x'.repeat(240) }, 'retryTopics', /not a valid topic name/],
      ['1s', {}, 'retryTopics', /expected an object/],
    ];
    for (const [c, over, option, msg] of cases) {
      const e = thrown(() => resolveRetryTopics(c as never, { ...ctx, ...over }));
      expect(e.code, JSON.stringify(c)).toBe('invalid_config');
      expect(e.fields.option, JSON.stringify(c)).toBe(option);
      expect(e.message, JSON.stringify(c)).toMatch(msg);
    }
  });

  it('refuses a groupId or topic too long for the other names it derives: the retry groups, the park transactional ids', () => {
    const long = (over: Partial<typeof ctx> & { instanceId?: string }) => thrown(() => resolveRetryTopics({ delays: ['1s', '1m'] }, { ...ctx, ...over }));
    // <groupId>.retry.<n>, a retry consumer's group, at most 200 characters (the retry topics themselves are valid)
    const group = long({ groupId: 'g'.repeat(195) });
    expect(group).toMatchObject({ code: 'invalid_config', fields: { option: 'retryTopics' } });
    expect(group.message).toMatch(/the retry consumers' group g+\.retry\.1 would be longer than 200 characters: shorten the groupId/);
    // <groupId>.<topic>.park.<uuid>, the source consumer's park transactional id, at most 255 bytes: 263
    const source = long({ groupId: 'g'.repeat(120), topic: 't'.repeat(100) });
    expect(source.message).toMatch(/the park transactional id g+\.t+\.park\.<uuid> would be 263 bytes, more than 255/);
    // With a short instanceId the source's id fits (229 bytes), a retry consumer's does not:
    // <groupId>.retry.1.<topic>.<groupId>.retry.1.park.<instanceId>
    const retryConsumer = long({ groupId: 'g'.repeat(120), topic: 't'.repeat(100), instanceId: 'i1' });
    expect(retryConsumer.message).toMatch(/park transactional id g+\.retry\.1\.t+\.g+\.retry\.1\.park\.i1 would be 366 bytes/);
    // Long names that fit
    expect(resolveRetryTopics({ delays: ['1s', '1m'] }, { ...ctx, groupId: 'g'.repeat(40), topic: 't'.repeat(40) })?.retryTopics).toHaveLength(2);
  });

  it('run() rejects bad retryTopics before it connects, and the consumer can still be run', async () => {
    const c = new Consumer({ brokers: ['127.0.0.1:1'], groupId: 'g', topic: 't' });
    const eachMessage = async () => {};
    expect((await rejection(c.run({ eachMessage, retryTopics: { delays: ['1x'] } }))).fields.option).toBe('retryTopics.delays[0]');
    expect((await rejection(c.run({ eachMessage, retryTopics: { delays: ['1s'] }, concurrency: { perPartition: 2 } }))).message).toMatch(/cannot be combined with concurrency/);
    expect((await rejection(c.run({ eachBatch: eachMessage, retryTopics: { delays: ['1s'] } }))).message).toMatch(/eachMessage only/);
    expect((await rejection(c.run({ eachMessage, retryTopic: {} } as never))).message).toMatch(/did you mean retryTopics\?/);
    expect(c.state).toBe('new');
    await c.close();
    // Names derived from a long group: refused before anything connects (or creates a retry topic)
    const g = new Consumer({ brokers: ['127.0.0.1:1'], groupId: 'g'.repeat(195), topic: 't', bootstrapTimeoutMs: 200, connectTimeoutMs: 100 });
    expect((await rejection(g.run({ eachMessage, retryTopics: { delays: ['1s'] } }))).message).toMatch(/retry consumers' group/);
    expect(g.state).toBe('new');
    await g.close();
  });
});

describe('retry headers', () => {
  it('a message without retry headers is on attempt 1 where it was read', () => {
    expect(decodeRetryInfo(message())).toEqual({ attempt: 1, topic: 'orders', partition: 2, offset: 41 });
    // incomplete or malformed headers do not make up an attempt
    const partial = message({ headers: [{ key: RETRY_HEADERS.attempt, value: Buffer.from('x1') }] });
    expect(decodeRetryInfo(partial).attempt).toBe(1);
  });

  it('park headers keep the user headers, carry the origin and decode to the next attempt', () => {
    const m = message({ headers: [{ key: 'trace', value: Buffer.from('t-1') }, { key: RETRY_HEADERS.attempt, value: Buffer.from('7') }] });
    const first: RetryInfo = { attempt: 1, topic: 'orders', partition: 2, offset: 41 };
    const h1 = parkHeaders(m, first, new Error('boom'), 1000, 1200);
    expect(withoutRetryHeaders(h1)).toEqual([{ key: 'trace', value: Buffer.from('t-1') }]);
    const onRetry = { topic: 'orders.billing.retry.1', partition: 0, offset: 3, headers: h1 };
    expect(decodeRetryInfo(onRetry)).toEqual({ attempt: 2, topic: 'orders', partition: 2, offset: 41, firstFailureAt: 1000, lastError: 'Error: boom', dueAt: 1200 });
    // a second failure keeps the origin and the first failure time, counts the attempt, replaces the error
    const h2 = parkHeaders(onRetry, decodeRetryInfo(onRetry), Object.assign(new Error('no'), { code: 'E_X' }), 5000, undefined);
    expect(h2.filter((h) => h.key === RETRY_HEADERS.attempt)).toHaveLength(1);
    expect(decodeRetryInfo({ topic: 'orders.dlq', partition: 0, offset: 9, headers: h2 })).toEqual({
      attempt: 3,
      topic: 'orders',
      partition: 2,
      offset: 41,
      firstFailureAt: 1000,
      lastError: 'E_X: no',
    });
  });
});

describe('due time', () => {
  it('waits on the injected clock until the message is due, and not a moment less', async () => {
    const clock = new FakeClock(10_000);
    let done = false;
    const waiting = waitUntilDue(10_500, clock, undefined).then(() => (done = true));
    await clock.advance(499);
    expect(done).toBe(false);
    await clock.advance(1);
    await waiting;
    expect(clock.now()).toBe(10_500);
    // already due: at once, no timer
    await waitUntilDue(10_000, clock);
    expect(clock.pending).toBe(0);
  });

  it('a timer that fires early waits again; an abort ends the wait with its reason', async () => {
    const clock = new FakeClock(0);
    let fired = 0;
    // a clock whose timers fire 10 ms before their time, as a real timer may against Date.now()
    const early = {
      now: () => clock.now(),
      setTimeout: (fn: () => void, ms: number) =>
        clock.setTimeout(() => {
          fired++;
          fn();
        }, ms > 10 ? ms - 10 : ms),
      clearTimeout: (t: unknown) => clock.clearTimeout(t as never),
    };
    let done = false;
    const waiting = waitUntilDue(100, early).then(() => (done = true));
    await clock.advance(90);
    expect(done).toBe(false);
    await clock.advance(10);
    await waiting;
    expect(fired).toBeGreaterThanOrEqual(2);
    const ac = new AbortController();
    const aborted = waitUntilDue(1000, clock, ac.signal);
    ac.abort(new Error('revoked'));
    await expect(aborted).rejects.toThrow('revoked');
    expect(clock.pending).toBe(0);
  });

  it('the parking handler holds a retry message until due, then runs the handler with its attempt; a failure is parked', async () => {
    const clock = new FakeClock(1000);
    const parked: Array<{ offset: number; attempt: number; error: string }> = [];
    const parker = { park: async (m: ConsumedMessage, info: RetryInfo, err: Error) => void parked.push({ offset: m.offset, attempt: info.attempt, error: err.message }) } as unknown as Parker;
    const seen: Array<{ at: number; retry: RetryInfo | undefined }> = [];
    const handler = parkingHandler(
      async ({ message, retry }) => {
        seen.push({ at: clock.now(), retry });
        if (message.value.toString() === 'bad') throw new Error('still bad');
      },
      parker,
      clock,
      500,
      async () => true,
    );
    const headers = parkHeaders(message(), { attempt: 1, topic: 'orders', partition: 2, offset: 41 }, new Error('boom'), 900, 1400);
    const signal = new AbortController().signal;
    const run = handler({ message: message({ topic: 'orders.billing.retry.1', offset: 0, headers }), signal });
    await turn();
    expect(seen).toHaveLength(0);
    await clock.advance(399);
    expect(seen).toHaveLength(0);
    await clock.advance(1);
    await run;
    expect(seen[0]!.at).toBe(1400);
    expect(seen[0]!.retry).toMatchObject({ attempt: 2, topic: 'orders', partition: 2, offset: 41, dueAt: 1400 });
    await handler({ message: message({ topic: 'orders.billing.retry.1', offset: 1, value: Buffer.from('bad'), headers }), signal });
    expect(parked).toEqual([{ offset: 1, attempt: 2, error: 'still bad' }]);
    // on the source topic the headers are not read: a message produced with retry headers is attempt 1
    const main = parkingHandler(
      async ({ retry }) => void seen.push({ at: clock.now(), retry }),
      parker,
      clock,
      undefined,
      async () => true,
    );
    await main({ message: message({ headers }), signal });
    expect(seen.at(-1)!.retry).toEqual({ attempt: 1, topic: 'orders', partition: 2, offset: 41 });
  });

  it("a retry message waits at most its topic's delay from now, whatever its due header says (one produced by anyone else)", async () => {
    const clock = new FakeClock(1000);
    const parker = { park: async () => {} } as unknown as Parker;
    const seen: number[] = [];
    const handler = parkingHandler(async () => void seen.push(clock.now()), parker, clock, 500, async () => true);
    const farFuture = parkHeaders(message(), { attempt: 1, topic: 'orders', partition: 2, offset: 41 }, new Error('boom'), 900, 9_999_999_999_999);
    const run = handler({ message: message({ topic: 'orders.billing.retry.1', offset: 0, headers: farFuture }), signal: new AbortController().signal });
    await clock.advance(499);
    expect(seen).toEqual([]);
    await clock.advance(1);
    await run;
    expect(seen).toEqual([1500]);
    // The real clock's timers: a wait beyond a timer's limit takes several, none shorter than it should be.
    const timers: number[] = [];
    const recording = {
      now: () => 0,
      setTimeout: (fn: () => void, ms: number) => {
        timers.push(ms);
        return clock.setTimeout(fn, 0);
      },
      clearTimeout: () => {},
    };
    const ac = new AbortController();
    const wait = waitUntilDue(2 ** 33, recording, ac.signal);
    await turn();
    ac.abort(new Error('stop'));
    await expect(wait).rejects.toThrow('stop');
    expect(timers.length).toBeGreaterThan(0);
    expect(Math.max(...timers)).toBe(2 ** 31 - 1);
  });

  it('a handler that stopped because its partition was revoked is not parked', async () => {
    const clock = new FakeClock(0);
    let parks = 0;
    const parker = { park: async () => void parks++ } as unknown as Parker;
    const ac = new AbortController();
    const handler = parkingHandler(
      async ({ signal }) => {
        ac.abort(new Error('revoked'));
        signal.throwIfAborted();
      },
      parker,
      clock,
      undefined,
      async () => true,
    );
    await expect(handler({ message: message(), signal: ac.signal })).rejects.toThrow('revoked');
    expect(parks).toBe(0);
  });

  it('a retry message that falls due after the session lapsed waits for the session to be proven again; a loss meanwhile drops it', async () => {
    const clock = new FakeClock(1000);
    const options = resolveConsumerOptions({ brokers: ['127.0.0.1:1'], groupId: 'billing.retry.1', topic: 'orders.billing.retry.1', sessionTimeoutMs: 6000 });
    const ctx = new ConsumerContext(
      options,
      {} as Cluster,
      () => {},
      async () => {},
    );
    ctx.sessionProvenAt = performance.now(); // a heartbeat was just answered
    const lapse = () => (ctx.sessionProvenAt = performance.now() - options.sessionTimeoutMs - 1); // then none for a whole session
    const committer = new OffsetCommitter(ctx, { requestRebalance: () => {}, memberLost: () => {} });
    const w = new PartitionWorker(0, 1, 0, -1, ctx.root.signal);
    ctx.workers.set(0, w);
    let parks = 0;
    const parker = { park: async () => void parks++ } as unknown as Parker;
    const calls: Array<{ offset: number; sessionLive: boolean }> = [];
    const user = ({ message: m }: { message: ConsumedMessage }) => void calls.push({ offset: m.offset, sessionLive: ctx.sessionLive });
    const sink = handlerSink(ctx, committer, { eachMessage: parkingHandler(user, parker, clock, 500, (signal) => sessionHeld(ctx, signal)) });
    const retry = (offset: number, dueAt: number) =>
      message({
        topic: 'orders.billing.retry.1',
        partition: 0,
        offset,
        signal: w.signal,
        headers: parkHeaders(message(), { attempt: 1, topic: 'orders', partition: 2, offset: 41 }, new Error('boom'), 900, dueAt),
      });

    const first = sink(w, [retry(0, 1400)]);
    await turn();
    lapse();
    await clock.advance(400);
    await turn();
    expect(calls).toEqual([]); // due, but the partition may be another member's by now
    ctx.proveSession(performance.now()); // the next heartbeat: still a member
    await first;
    expect(calls).toEqual([{ offset: 0, sessionLive: true }]);
    expect(w.processed).toBe(1);

    const second = sink(w, [retry(1, 1800)]);
    await turn();
    lapse();
    await clock.advance(400);
    await turn();
    w.ac.abort(new TributaryError('member_not_found')); // the heartbeat says the member was lost
    await second;
    expect(calls).toHaveLength(1); // dropped: neither handled nor parked
    expect(parks).toBe(0);
    expect(w.processed).toBe(1);
    ctx.root.abort();
  });
});

/**
 * run({ retryTopics }) against a real standalone broker (docs/sdk.md, "Retry and dead-letter topics"):
 * a message that fails once is handled on attempt 2, exactly once; one that always fails ends in the
 * dead-letter topic with attempt = maxAttempts; no retry is handled before the due time its headers
 * carry (both times from the same clock, Date.now() in this process); replay moves the dead letters back
 * to the source topic, where they are handled again.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Admin, type ReadRecord } from 'tributary-client/admin.js';
import { Consumer, type ConsumerOptions } from 'tributary-client/consumer.js';
import { Producer } from 'tributary-client/producer.js';
import { decodeRetryInfo, RETRY_HEADERS, type RetryInfo } from 'tributary-client/retry-headers.js';
import type { ParkedEvent } from 'tributary-client/retry-topics.js';
import { BrokerProcess } from '../../helpers/launcher.js';
import { until } from '../../helpers/util.js';

const PARTITIONS = 2;
const DELAYS = ['200ms', '400ms'];

describe('SDK retry and dead-letter topics', () => {
  let broker: BrokerProcess;
  let admin: Admin;
  const consumers: Consumer[] = [];

  function consumer(opts: Partial<ConsumerOptions> & Pick<ConsumerOptions, 'topic' | 'groupId'>): Consumer {
    const c = new Consumer({ brokers: [broker.address], autoOffsetReset: 'earliest', sessionTimeoutMs: 3000, autoCommitIntervalMs: 200, ...opts });
    consumers.push(c);
    return c;
  }

  async function produce(topic: string, values: string[]): Promise<void> {
    await using p = new Producer({ brokers: [broker.address] });
    await p.send({ topic, messages: values.map((v, i) => ({ key: `k${i % 5}`, value: v, headers: { trace: `t-${v}` } })) });
  }

  /** Every committed (read_committed) record of a topic. */
  async function readTopic(topic: string): Promise<Array<ReadRecord & { partition: number }>> {
    const out: Array<ReadRecord & { partition: number }> = [];
    const partitions = (await admin.describeTopic(topic)).partitions.length;
    for (let p = 0; p < partitions; p++) {
      let offset = 0;
      for (;;) {
        const r = await admin.readRecords({ topic, partition: p, offset, maxRecords: 1000 });
        out.push(...r.records.map((x) => ({ ...x, partition: p })));
        if (r.records.length === 0 && r.nextOffset <= offset) break;
        offset = r.nextOffset;
      }
    }
    return out;
  }

  async function committed(group: string, topic: string): Promise<number[]> {
    const out = [];
    for (let p = 0; p < PARTITIONS; p++) out.push((await admin.fetchOffset(group, topic, p).catch(() => ({ offset: -1 }))).offset);
    return out;
  }

  beforeAll(async () => {
    broker = await BrokerProcess.start({ args: ['--offsets-topic-partitions', '2', '--transaction-state-partitions', '2', '--group-join-window-ms', '20'] });
    admin = new Admin({ brokers: [broker.address] });
  });

  afterAll(async () => {
    await Promise.allSettled(consumers.map((c) => c.close()));
    await admin?.close();
    await broker?.dispose();
  });

  it('a message that fails once is handled again on attempt 2, after its due time, and once only', { timeout: 90_000 }, async () => {
    await admin.createTopic({ topic: 'rt-once', partitions: PARTITIONS });
    const values = Array.from({ length: 20 }, (_, i) => (i % 4 === 0 ? `fail-${i}` : `ok-${i}`));
    await produce('rt-once', values);
    const handled: Array<{ value: string; retry: RetryInfo; at: number; trace: string | undefined }> = [];
    const parked: ParkedEvent[] = [];
    const c = consumer({ topic: 'rt-once', groupId: 'rt-once-g' });
    c.on('retry.parked', (e) => parked.push(e));
    const running = c.run({
      retryTopics: { delays: DELAYS },
      eachMessage: async ({ message, retry }) => {
        const value = message.value.toString();
        if (value.startsWith('fail-') && retry!.attempt === 1) throw new Error(`first try of ${value}`);
        handled.push({ value, retry: retry!, at: Date.now(), trace: message.headers.find((h) => h.key === 'trace')?.value.toString() });
      },
    });
    await until(() => handled.length >= values.length, 60_000, 'every message handled');
    expect(handled.map((h) => h.value).sort()).toEqual([...values].sort());
    const retried = handled.filter((h) => h.value.startsWith('fail-'));
    expect(retried).toHaveLength(5);
    for (const h of retried) {
      expect(h.retry.attempt).toBe(2);
      expect(h.retry.topic).toBe('rt-once');
      expect(h.retry.lastError).toBe(`Error: first try of ${h.value}`);
      expect(h.at).toBeGreaterThanOrEqual(h.retry.dueAt!);
      expect(h.retry.dueAt! - h.retry.firstFailureAt!).toBe(200);
      expect(h.trace).toBe(`t-${h.value}`); // the user's headers travel with it
    }
    for (const h of handled.filter((x) => x.value.startsWith('ok-'))) expect(h.retry).toMatchObject({ attempt: 1, topic: 'rt-once' });
    // each failed message was parked once, on retry topic 1, and its origin is where it was read
    expect(parked.map((p) => [p.topic, p.attempt, p.deadLetter])).toEqual(retried.map(() => ['rt-once.rt-once-g.retry.1', 1, false]));
    const onRetry = await readTopic('rt-once.rt-once-g.retry.1');
    expect(onRetry.map((r) => r.value.toString()).sort()).toEqual(retried.map((h) => h.value).sort());
    const sources = await readTopic('rt-once');
    for (const r of onRetry) {
      const info = decodeRetryInfo({ ...r, topic: 'rt-once.rt-once-g.retry.1' });
      expect(sources.find((s) => s.partition === info.partition && s.offset === info.offset)!.value.toString()).toBe(r.value.toString());
      expect(r.partition).toBe(info.partition); // same partition number as its source
    }
    expect(await readTopic('rt-once.rt-once-g.dlq')).toEqual([]);
    // the source group's offsets reach the end: parks and plain commits interleave without a gap
    const ends = (await admin.listOffsets('rt-once')).map((o) => o.latest);
    await until(async () => JSON.stringify(await committed('rt-once-g', 'rt-once')) === JSON.stringify(ends), 20_000, 'source offsets committed');
    await c.close();
    await running;
  });

  it('start(), then run({ retryTopics }): what the readers fetch while run() sets up its topics is handled', { timeout: 60_000 }, async () => {
    await admin.createTopic({ topic: 'rt-start', partitions: PARTITIONS });
    const values = Array.from({ length: 20 }, (_, i) => `v-${i}`);
    await produce('rt-start', values.slice(0, 10));
    const c = consumer({ topic: 'rt-start', groupId: 'rt-start-g', maxWaitMs: 100 });
    await c.start(); // its readers are running before run() has a handler to give them
    const handled: string[] = [];
    const running = c.run({ retryTopics: { delays: DELAYS }, eachMessage: async ({ message }) => void handled.push(message.value.toString()) });
    await produce('rt-start', values.slice(10));
    const ends = (await admin.listOffsets('rt-start')).map((o) => o.latest);
    await until(async () => JSON.stringify(await committed('rt-start-g', 'rt-start')) === JSON.stringify(ends), 20_000, 'source offsets committed to the end');
    expect([...handled].sort()).toEqual([...values].sort());
    await c.close();
    await running;
  });

  it('a message that always fails ends in the dead-letter topic with attempt = maxAttempts, never early; replay brings it back', { timeout: 120_000 }, async () => {
    await admin.createTopic({ topic: 'rt-dead', partitions: PARTITIONS });
    const values = Array.from({ length: 12 }, (_, i) => (i % 3 === 0 ? `dead-${i}` : `ok-${i}`));
    await produce('rt-dead', values);
    const attempts: Array<{ value: string; retry: RetryInfo; at: number }> = [];
    const c = consumer({ topic: 'rt-dead', groupId: 'rt-dead-g' });
    let fixed = false;
    const running = c.run({
      retryTopics: { delays: DELAYS, maxAttempts: 4, deadLetterTopic: 'rt-dead.dlq' },
      eachMessage: async ({ message, retry }) => {
        const value = message.value.toString();
        attempts.push({ value, retry: retry!, at: Date.now() });
        if (value.startsWith('dead-') && !fixed) throw new Error('cannot handle');
      },
    });
    const dead = values.filter((v) => v.startsWith('dead-'));
    await until(async () => (await readTopic('rt-dead.dlq').catch(() => [])).length >= dead.length, 60_000, 'dead letters');
    const dlq = await readTopic('rt-dead.dlq');
    expect(dlq.map((r) => r.value.toString()).sort()).toEqual([...dead].sort());
    for (const r of dlq) {
      const h = (k: string) => r.headers.find((x) => x.key === k)?.value.toString();
      expect(h(RETRY_HEADERS.attempt)).toBe('4');
      expect(h(RETRY_HEADERS.topic)).toBe('rt-dead');
      expect(h(RETRY_HEADERS.dueAt)).toBeUndefined();
      expect(h(RETRY_HEADERS.error)).toBe('Error: cannot handle');
    }
    // attempts 1..4 of each, in order; attempts 2 and 3 on retry topics 1 and 2, attempt 4 on topic 2 again
    for (const v of dead) expect(attempts.filter((a) => a.value === v).map((a) => a.retry.attempt)).toEqual([1, 2, 3, 4]);
    const retries = attempts.filter((a) => a.retry.attempt > 1);
    expect(retries.length).toBe(dead.length * 3);
    const early = retries.map((a) => a.retry.dueAt! - a.at).filter((d) => d > 0);
    expect(early).toEqual([]);
    for (const t of ['rt-dead.rt-dead-g.retry.1', 'rt-dead.rt-dead-g.retry.2']) {
      const on = await readTopic(t);
      expect(on.length, t).toBe(t.endsWith('1') ? dead.length : dead.length * 2);
      expect(new Set(on.map((r) => `${r.value}:${decodeRetryInfo({ ...r, topic: t }).attempt}`)).size, t).toBe(on.length);
    }

    // Replay: the dead letters go back to rt-dead, without retry headers, and are handled there (attempt 1).
    fixed = true;
    const before = attempts.length;
    const result = await admin.replayDeadLetters({ deadLetterTopic: 'rt-dead.dlq' });
    expect(result).toEqual({ replayed: { 'rt-dead': dead.length }, skipped: 0 });
    await until(() => attempts.length >= before + dead.length, 30_000, 'replayed messages handled');
    const replayed = attempts.slice(before);
    expect(replayed.map((a) => a.value).sort()).toEqual([...dead].sort());
    expect(replayed.every((a) => a.retry.attempt === 1 && a.retry.topic === 'rt-dead')).toBe(true);
    const source = await readTopic('rt-dead');
    for (const v of dead) {
      // the original and its replayed copy, both with the user's headers and neither with retry headers
      const copies = source.filter((r) => r.value.toString() === v);
      expect(copies, v).toHaveLength(2);
      expect(copies.every((r) => r.headers.some((h) => h.key === 'trace') && r.headers.every((h) => !h.key.startsWith('tributary.retry.'))), v).toBe(true);
    }
    // a second replay finds nothing new: the replay group's offsets passed them
    expect(await admin.replayDeadLetters({ deadLetterTopic: 'rt-dead.dlq' })).toEqual({ replayed: {}, skipped: 0 });
    await c.close();
    await running;
  });

  it('replayDeadLetters replays every dead letter of a partition that takes the replay consumer several batches', { timeout: 120_000 }, async () => {
    await admin.createTopic({ topic: 'rt-many', partitions: 1 });
    await admin.createTopic({ topic: 'rt-many.dlq', partitions: 1 });
    // Parked as the SDK parks: one transaction per dead letter, so each record is followed by its
    // transaction's marker, and wherever a batch of the replay consumer (500 records by default) ends,
    // the replay group's committed offset points at a marker.
    const n = 510;
    {
      await using p = new Producer({ brokers: [broker.address], transactionalId: 'rt-many-parker' });
      for (let i = 0; i < n; i++) {
        const txn = await p.transaction();
        const retry = { topic: 'rt-many', partition: '0', offset: String(i), attempt: '3', error: 'Error: x', firstFailureAt: '1' };
        const headers = Object.entries(retry).map(([k, value]) => ({ key: RETRY_HEADERS[k as keyof typeof retry], value }));
        await txn.send({ topic: 'rt-many.dlq', messages: [{ value: `v${i}`, headers }] });
        await txn.commit();
      }
    }
    expect(await admin.replayDeadLetters({ deadLetterTopic: 'rt-many.dlq' })).toEqual({ replayed: { 'rt-many': n }, skipped: 0 });
    expect((await readTopic('rt-many')).map((r) => r.value.toString())).toEqual(Array.from({ length: n }, (_, i) => `v${i}`));
  });

  it('close() while run({ retryTopics }) sets its topics up: run() resolves, as without retryTopics, and no retry consumer starts', async () => {
    await admin.createTopic({ topic: 'rt-close', partitions: 1 });
    const c = consumer({ topic: 'rt-close', groupId: 'rt-close-g' });
    const running = c.run({ retryTopics: { delays: ['1s'] }, eachMessage: () => {} });
    // run() is checking (and creating) its topics now: close() lands in the middle of it
    await c.close();
    await expect(running).resolves.toBeUndefined();
    expect(c.state).toBe('closed');
    const groups = await admin.listGroups();
    expect(groups.filter((g) => g.startsWith('rt-close-g'))).toEqual([]);
  });

  it('replayDeadLetters refuses bad input before it reads anything', async () => {
    await expect(admin.replayDeadLetters({ deadLetterTopic: 'rt-dead.dlq', grupId: 'x' } as never)).rejects.toThrow(/unknown option \(did you mean groupId\?\)/);
    await expect(admin.replayDeadLetters({} as never)).rejects.toThrow(/deadLetterTopic: required/);
    await expect(admin.replayDeadLetters({ deadLetterTopic: 'nope-dlq' })).rejects.toMatchObject({ code: 'topic_not_found' });
  });

  it('a park the broker refuses for good (transactionTimeoutMs above its maximum) stops run() instead of failing the message for ever', { timeout: 60_000 }, async () => {
    await admin.createTopic({ topic: 'rt-refused', partitions: 1 });
    await produce('rt-refused', ['x']);
    const c = consumer({ topic: 'rt-refused', groupId: 'rt-refused' });
    let calls = 0;
    // The broker's default maximum is 900000 ms.
    const running = c.run({
      retryTopics: { delays: ['100ms'], transactionTimeoutMs: 1_000_000 },
      eachMessage: async () => {
        calls++;
        throw new Error('handler failed');
      },
    });
    await expect(running).rejects.toMatchObject({ code: 'invalid_parameter' });
    expect(calls).toBe(1);
    expect(await readTopic('rt-refused.rt-refused.retry.1')).toEqual([]);
  });
});

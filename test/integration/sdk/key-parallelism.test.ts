/**
 * run({ eachMessage, concurrency }) against a standalone broker (docs/sdk.md, "Concurrency"): handlers
 * that sleep a random 0-20 ms run in parallel inside a partition up to perPartition, the same key always
 * in offset order and never twice at once, every record is handled and the committed offsets reach the
 * end; a failing handler is retried without the commit passing it or the key's order breaking; close()
 * waits for running handlers and commits only the contiguous prefix.
 */
import { describe, expect, it } from 'vitest';
import { type ConcurrencyOptions, type ConsumedMessage, Consumer, type ConsumerOptions } from 'tributary-client/consumer.js';
import { useKeyedGroupTests } from '../../helpers/group-broker.js';
import { sleep, until } from '../../helpers/util.js';

const PARTITIONS = 2;


interface Run {
  /** Per partition: the most handlers that ran at once. */
  maxRunning: Map<number, number>;
  /** Per key, the offsets in the order their handlers succeeded. */
  order: Map<string, number[]>;
  /** Same key started while one of it ran. */
  overlaps: string[];
  handled: Array<{ partition: number; offset: number }>;
  commits: Array<{ partition: number; offset: number }>;
  /** Commits acknowledged while a record below them was not handled yet. */
  earlyCommits: string[];
  crashes: number;
}

describe('run() with concurrency against a broker', () => {
  const t = useKeyedGroupTests('kp', PARTITIONS);
  const { consumers, keyedTopic, committed } = t;

  function consumer(topic: string, group: string, extra: Partial<ConsumerOptions> = {}): Consumer {
    const c = new Consumer({
      brokers: [t.broker.address],
      groupId: group,
      topic,
      autoOffsetReset: 'earliest',
      sessionTimeoutMs: 6000,
      heartbeatIntervalMs: 300,
      maxWaitMs: 100,
      autoCommitIntervalMs: 50,
      retry: { initialDelayMs: 5, maxDelayMs: 100 },
      ...extra,
    });
    consumers.push(c);
    return c;
  }

  /** Runs a consumer with a handler sleeping 0-20 ms until the group committed every partition's end. */
  async function consumeAll(
    topic: string,
    ends: number[],
    concurrency: ConcurrencyOptions | undefined,
    failOnce?: (m: ConsumedMessage) => boolean,
    extra: Partial<ConsumerOptions> = {},
  ): Promise<Run> {
    const group = `g-${topic}-${concurrency?.perPartition ?? 0}-${concurrency?.ordering ?? ''}-${extra.mode ?? ''}`;
    const c = consumer(topic, group, extra);
    const r: Run = { maxRunning: new Map(), order: new Map(), overlaps: [], handled: [], commits: [], earlyCommits: [], crashes: 0 };
    c.on('crash', () => r.crashes++);
    const handledSet = new Set<string>();
    const running = new Map<number, number>();
    const activeKeys = new Set<string>();
    const failed = new Set<number>();
    c.on('commit', (e) => {
      r.commits.push(...e.offsets);
      for (const { partition, offset } of e.offsets) {
        for (let o = 0; o < offset; o++) if (!handledSet.has(`${partition}:${o}`)) r.earlyCommits.push(`commit ${partition}:${offset} before ${o} was handled`);
      }
    });
    const run = c.run({
      concurrency,
      eachMessage: async ({ message: m }) => {
        const key = `${m.partition}/${m.key!.toString()}`;
        if (activeKeys.has(key)) r.overlaps.push(`${key}@${m.offset}`);
        activeKeys.add(key);
        running.set(m.partition, (running.get(m.partition) ?? 0) + 1);
        r.maxRunning.set(m.partition, Math.max(r.maxRunning.get(m.partition) ?? 0, running.get(m.partition)!));
        try {
          await sleep(Math.floor(Math.random() * 21));
          if (failOnce?.(m) && !failed.has(m.offset * PARTITIONS + m.partition)) {
            failed.add(m.offset * PARTITIONS + m.partition);
            throw new Error(`handler failure at ${m.partition}:${m.offset}`);
          }
          r.order.set(key, [...(r.order.get(key) ?? []), m.offset]);
          r.handled.push({ partition: m.partition, offset: m.offset });
          handledSet.add(`${m.partition}:${m.offset}`);
        } finally {
          activeKeys.delete(key);
          running.set(m.partition, running.get(m.partition)! - 1);
        }
      },
    });
    // a partition without records never gets a commit
    await until(async () => (await committed(topic, group)).every((o, p) => o === (ends[p] === 0 ? -1 : ends[p])), 60_000, `group ${group} committed the end`, 50);
    await c.close();
    await run;
    return r;
  }

  function expectKeyOrder(r: Run): void {
    expect(r.overlaps).toEqual([]);
    for (const [key, offsets] of r.order) expect(offsets, key).toEqual([...offsets].sort((a, b) => a - b));
  }

  it('different keys run in parallel up to perPartition, each key in offset order, and every record is handled once', async () => {
    const { topic, ends } = await keyedTopic(400, 40);
    const serial = await consumeAll(topic, ends, undefined);
    const parallel = await consumeAll(topic, ends, { perPartition: 8 });
    for (const r of [serial, parallel]) {
      expectKeyOrder(r);
      expect(r.earlyCommits).toEqual([]);
      expect(r.handled.length).toBe(400);
      expect(new Set(r.handled.map((h) => `${h.partition}:${h.offset}`)).size).toBe(400);
    }
    // one at a time without concurrency; more than one at once, never above 8, with it
    expect(Math.max(...serial.maxRunning.values())).toBe(1);
    for (let p = 0; p < PARTITIONS; p++) {
      expect(parallel.maxRunning.get(p)).toBeGreaterThan(1);
      expect(parallel.maxRunning.get(p)).toBeLessThanOrEqual(8);
    }
  });

  it('one key: no parallelism under key ordering; ordering none runs the same key in parallel', async () => {
    const { topic, ends } = await keyedTopic(120, 1);
    const keyed = await consumeAll(topic, ends, { perPartition: 8 });
    expectKeyOrder(keyed);
    expect(Math.max(...keyed.maxRunning.values())).toBe(1);
    const none = await consumeAll(topic, ends, { perPartition: 8, ordering: 'none' });
    expect(Math.max(...none.maxRunning.values())).toBeGreaterThan(1);
    expect(new Set(none.handled.map((h) => `${h.partition}:${h.offset}`)).size).toBe(120);
  });

  it('a failing handler is retried: per-key order holds and no commit passes the failed offset before it succeeds', async () => {
    const { topic, ends } = await keyedTopic(300, 30);
    const failAt = new Set([5, 40, 41, 90]);
    const r = await consumeAll(topic, ends, { perPartition: 6, maxBuffered: 24 }, (m) => failAt.has(m.offset));
    expectKeyOrder(r);
    expect(new Set(r.handled.map((h) => `${h.partition}:${h.offset}`)).size).toBe(300);
    expect(r.crashes).toBe(ends.reduce((n, end) => n + [...failAt].filter((o) => o < end).length, 0));
    expect(r.commits.length).toBeGreaterThan(0);
    expect(r.earlyCommits).toEqual([]);
  });

  it('stream mode: the same order, failure and commit guarantees', async () => {
    const { topic, ends } = await keyedTopic(300, 30);
    const failAt = new Set([3, 50]);
    const r = await consumeAll(topic, ends, { perPartition: 8 }, (m) => failAt.has(m.offset), { mode: 'stream' });
    expectKeyOrder(r);
    expect(new Set(r.handled.map((h) => `${h.partition}:${h.offset}`)).size).toBe(300);
    expect(r.crashes).toBe(ends.reduce((n, end) => n + [...failAt].filter((o) => o < end).length, 0));
    expect(r.earlyCommits).toEqual([]);
    for (let p = 0; p < PARTITIONS; p++) expect(r.maxRunning.get(p)).toBeGreaterThan(1);
  });

  it('stream mode: a failure on the last record is retried although no new record arrives', async () => {
    const { topic, ends } = await keyedTopic(60, 12);
    // the reader has delivered everything and waits on an idle stream when the last records fail
    const r = await consumeAll(topic, ends, { perPartition: 4 }, (m) => m.offset === ends[m.partition]! - 1, { mode: 'stream' });
    expect(r.crashes).toBe(ends.filter((e) => e > 0).length);
    expect(new Set(r.handled.map((h) => `${h.partition}:${h.offset}`)).size).toBe(60);
    expectKeyOrder(r);
  });

  it('a rebalance moves partitions: the new owner starts only after the old one\'s handlers ended, at its handled prefix', async () => {
    const { topic, ends } = await keyedTopic(600, 60);
    const group = `g-rebalance-${topic}`;
    // one log for both members, in the order things happened
    const log: Array<{ member: string; type: 'start' | 'end'; partition: number; offset: number; key: string }> = [];
    const runOne = (member: string) => {
      const c = consumer(topic, group, { clientId: member });
      const run = c.run({
        concurrency: { perPartition: 8 },
        eachMessage: async ({ message: m, signal }) => {
          const e = { member, partition: m.partition, offset: m.offset, key: m.key!.toString() };
          log.push({ ...e, type: 'start' });
          await sleep(Math.floor(Math.random() * 21));
          // a handler that does not give up when its partition is revoked: the revocation must wait for it
          if (signal.aborted) await sleep(300);
          log.push({ ...e, type: 'end' });
        },
      });
      return { c, run };
    };
    const a = runOne('a');
    await until(() => log.filter((l) => l.type === 'end').length >= 150, 30_000, 'a handled 150');
    const b = runOne('b');
    await until(() => log.some((l) => l.member === 'b'), 30_000, 'b got partitions');
    await until(async () => (await committed(topic, group)).every((o, p) => o === ends[p]), 60_000, 'the group committed the end', 50);
    await Promise.all([a.c.close(), b.c.close()]);
    await Promise.all([a.run, b.run]);

    const moved = [...new Set(log.filter((l) => l.member === 'b').map((l) => l.partition))];
    expect(moved.length).toBeGreaterThan(0);
    for (const p of moved) {
      const lp = log.filter((l) => l.partition === p);
      const firstB = lp.findIndex((l) => l.member === 'b');
      // a's handlers of the partition had all returned before b started any
      const aRunning = new Set<number>();
      for (const l of lp.slice(0, firstB)) {
        if (l.member !== 'a') continue;
        if (l.type === 'start') aRunning.add(l.offset);
        else aRunning.delete(l.offset);
      }
      expect([...aRunning], `p${p}: a still running when b started`).toEqual([]);
      expect(lp.slice(firstB).some((l) => l.member === 'a')).toBe(false);
      // b starts where a's handled prefix ended: everything below was handled by a
      const start = lp[firstB]!.offset;
      const aDone = new Set(lp.filter((l) => l.member === 'a' && l.type === 'end').map((l) => l.offset));
      for (let o = 0; o < start; o++) expect(aDone.has(o), `p${p}: ${o} below b's start ${start} never handled`).toBe(true);
    }
    // every record handled, each key in offset order within each member
    const handled = new Set(log.filter((l) => l.type === 'end').map((l) => `${l.partition}:${l.offset}`));
    expect(handled.size).toBe(600);
    for (const member of ['a', 'b']) {
      const last = new Map<string, number>();
      for (const l of log) {
        if (l.member !== member || l.type !== 'end') continue;
        const k = `${l.partition}/${l.key}`;
        expect(l.offset, `${member} ${k}`).toBeGreaterThan(last.get(k) ?? -1);
        last.set(k, l.offset);
      }
    }
  });

  it('close() waits for running handlers and commits only the contiguous prefix', async () => {
    const { topic } = await keyedTopic(40, 40);
    const group = `g-close-${topic}`;
    const c = consumer(topic, group);
    const release = new Map<string, () => void>();
    const handled = new Set<string>();
    const run = c.run({
      concurrency: { perPartition: 4 },
      eachMessage: ({ message: m }) => {
        const id = `${m.partition}:${m.offset}`;
        // the first record of each partition blocks; the rest finish at once
        if (m.offset === 0) {
          return new Promise<void>((r) =>
            release.set(id, () => {
              handled.add(id);
              r();
            }),
          );
        }
        handled.add(id);
      },
    });
    await until(() => release.size === PARTITIONS && handled.size >= 2 * PARTITIONS, 20_000, 'offset 0 blocked and later offsets handled');
    let closed = false;
    const closing = c.close().then(() => (closed = true));
    await sleep(100);
    expect(closed).toBe(false); // close waits for the handlers still running
    // nothing was committed past the blocked offset 0
    expect(await committed(topic, group)).toEqual(Array(PARTITIONS).fill(-1));
    for (const r of release.values()) r();
    await closing;
    await run;
    // released during close: revoked by then, so not committed (docs/sdk.md, "Concurrency")
    expect(await committed(topic, group)).toEqual(Array(PARTITIONS).fill(-1));
  });
});

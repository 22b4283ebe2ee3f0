/**
 * A Jepsen-style history check of the consumer group against a real broker: three members join and
 * leave one after another while run() handles a keyed topic, and every handler call is recorded with its
 * member, generation, partition and offset (start, end, outcome), and every acknowledged commit with its
 * member. Variants: eachMessage, eachBatch, `concurrency`, the async iterator, stream mode; handlers that
 * throw, pause and resume their partition, or seek back to their own record ("not yet"). Over that
 * history (docs/sdk.md, "Rebalancing", "Offsets", "Concurrency"):
 *  - no poll-skip: a commit of offset O of a partition comes after every record below O was handled;
 *  - fencing: two members never run handlers of the same partition at the same time;
 *  - at least once, exactly once on clean hand-overs: every record is handled, and one handled (its handler
 *    returned before its partition was revoked) is never handled again by anyone once an acknowledged
 *    commit passed it (a revocation's commit that failed leaves it to be delivered again);
 *  - the group's final committed offsets are the ends.
 */
import { describe, expect, it } from 'vitest';
import { parseLine } from 'tributary-protocol/command.js';
import { type ConsumedMessage, Consumer, type ConsumerOptions, type RunOptions } from 'tributary-client/consumer.js';
import { Producer } from 'tributary-client/producer.js';
import { useKeyedGroupTests } from '../../helpers/group-broker.js';
import { sleep, until } from '../../helpers/util.js';

const PARTITIONS = 4;
const RECORDS = 600;

interface Call {
  member: string;
  generation: number;
  partition: number;
  offset: number;
  start: number;
  end: number;
  ok: boolean;
  /** The partition's signal was aborted when the handler returned (revoked or closed meanwhile). */
  late: boolean;
  /** The partition installation: member and local assignment generation. */
  inst: string;
}
interface CommitEvent {
  member: string;
  generation: number;
  partition: number;
  offset: number;
  at: number;
}

/** A handler's seek back to its own record. */
interface Seek {
  inst: string;
  partition: number;
  offset: number;
  at: number;
}

type Variant = Pick<RunOptions, 'concurrency'> & { batch?: boolean; iterator?: boolean; options?: Partial<ConsumerOptions>; failEvery?: number; pauseEvery?: number; seekBackEvery?: number };

describe('consumer group history', () => {
  const kt = useKeyedGroupTests('hist', PARTITIONS);
  const { consumers, committed } = kt;
  const keyedTopic = () => kt.keyedTopic(RECORDS, 7);
  // Topics of the targeted cases (kt's are hist-<n>).
  let seq = 0;

  async function history(v: Variant): Promise<{ calls: Call[]; commits: CommitEvent[]; seeks: Seek[]; ends: number[]; final: number[] }> {
    const { topic, ends } = await keyedTopic();
    const group = `g-${topic}`;
    const calls: Call[] = [];
    const commits: CommitEvent[] = [];
    const seeks: Seek[] = [];
    const failed = new Set<string>();
    const soughtBack = new Set<string>();
    const handled = new Set<string>();
    const t0 = performance.now();
    const now = () => performance.now() - t0;

    const member = (name: string) => {
      const c = new Consumer({
        brokers: [kt.broker.address],
        groupId: group,
        topic,
        clientId: name,
        autoOffsetReset: 'earliest',
        sessionTimeoutMs: 6000,
        heartbeatIntervalMs: 200,
        maxWaitMs: 100,
        maxBatchRecords: 20,
        autoCommitIntervalMs: 30,
        retry: { initialDelayMs: 5, maxDelayMs: 100 },
        ...v.options,
      });
      consumers.push(c);
      c.on('commit', (e) => {
        for (const o of e.offsets) commits.push({ member: name, generation: e.generation, ...o, at: now() });
      });
      const handle = async (m: ConsumedMessage, signal: AbortSignal): Promise<boolean> => {
        const call: Call = { member: name, generation: c.generation, partition: m.partition, offset: m.offset, start: now(), end: -1, ok: false, late: false, inst: `${name}/${m.assignmentGeneration}` };
        calls.push(call);
        try {
          await sleep(Math.floor(Math.random() * 4));
          // Back-pressure: pause the partition now and then, resume it a moment later.
          if (v.pauseEvery && m.offset % v.pauseEvery === 0 && !signal.aborted) {
            c.pause([m.partition]);
            setTimeout(() => {
              if (!signal.aborted) c.resume([m.partition]);
            }, 5);
          }
          const id = `${m.partition}:${m.offset}`;
          if (v.failEvery && m.offset % v.failEvery === 3 && !failed.has(id)) {
            failed.add(id);
            throw new Error(`planned failure at ${id}`);
          }
          // "Not yet": seek back to its own record, which is then delivered again and not counted.
          if (v.seekBackEvery && m.offset % v.seekBackEvery === 7 && !soughtBack.has(id) && !signal.aborted) {
            soughtBack.add(id);
            seeks.push({ inst: call.inst, partition: m.partition, offset: m.offset, at: now() });
            c.seek(m.partition, m.offset);
            return false;
          }
          call.ok = true;
          handled.add(id);
          return true;
        } finally {
          call.end = now();
          call.late = signal.aborted;
        }
      };
      if (v.iterator) {
        const loop = (async () => {
          for await (const m of c) await handle(m, m.signal).catch(() => {});
        })();
        loop.catch(() => {});
        return { c, run: loop };
      }
      const run = v.batch
        ? c.run({
            eachBatch: async ({ messages, resolveOffset, signal }) => {
              for (const m of messages) {
                if (signal.aborted) return;
                if (!(await handle(m, signal))) return;
                resolveOffset(m.offset);
              }
            },
          })
        : c.run({
            concurrency: v.concurrency,
            eachMessage: async ({ message, signal }) => {
              await handle(message, signal);
            },
          });
      run.catch(() => {});
      return { c, run };
    };
    const total = ends.reduce((a, b) => a + b, 0);
    const handledAtLeast = (n: number) => until(() => handled.size >= n, 60_000, `${n} records handled`, 5);

    const a = member('a');
    await handledAtLeast(total / 6);
    const b = member('b');
    await handledAtLeast((2 * total) / 6);
    const c = member('c');
    await handledAtLeast((3 * total) / 6);
    await a.c.close();
    await handledAtLeast((4 * total) / 6);
    await b.c.close();
    await until(async () => (await committed(topic, group)).every((o, p) => o === (ends[p] === 0 ? -1 : ends[p])), 60_000, 'the group committed the ends', 50);
    await c.c.close();
    return { calls, commits, seeks, ends, final: await committed(topic, group) };
  }

  function check(h: { calls: Call[]; commits: CommitEvent[]; seeks: Seek[]; ends: number[]; final: number[] }): void {
    const violations: string[] = [];
    // No poll-skip: a commit past an offset comes after a handler of it returned ok.
    const firstOk = new Map<string, number>();
    for (const call of h.calls) {
      const id = `${call.partition}:${call.offset}`;
      if (call.ok && (firstOk.get(id) ?? Number.POSITIVE_INFINITY) > call.end) firstOk.set(id, call.end);
    }
    for (const cm of h.commits) {
      for (let o = 0; o < cm.offset; o++) {
        const done = firstOk.get(`${cm.partition}:${o}`);
        if (done === undefined || done > cm.at) violations.push(`${cm.member} committed ${cm.partition}:${cm.offset} (gen ${cm.generation}) before ${o} was handled`);
      }
    }
    // Fencing: handlers of one partition never overlap across members.
    for (let p = 0; p < PARTITIONS; p++) {
      const ps = h.calls.filter((c) => c.partition === p);
      for (const x of ps) for (const y of ps) if (x.member < y.member && x.start < y.end && y.start < x.end) violations.push(`${p}: ${x.member}@${x.offset} (gen ${x.generation}) overlaps ${y.member}@${y.offset} (gen ${y.generation})`);
    }
    // At least once; and a record an installation handled in time, with every record below it handled in
    // time by it or before it started (the contiguous prefix a revocation or close commits), is never
    // delivered again.
    for (let p = 0; p < PARTITIONS; p++) {
      const inTime: Array<Call | undefined> = [];
      for (let o = 0; o < h.ends[p]!; o++) {
        const cs = h.calls.filter((c) => c.partition === p && c.offset === o && c.ok);
        if (cs.length === 0) violations.push(`${p}:${o} never handled`);
        const x = cs.find((c) => !c.late);
        inTime.push(x);
        if (!x) continue;
        const first = Math.min(...h.calls.filter((c) => c.partition === p && c.inst === x.inst).map((c) => c.start));
        const prefix = inTime.every((y) => y !== undefined && (y.inst === x.inst || y.end <= first));
        const again = h.calls.find((c) => c.partition === p && c.offset === o && c !== x && c.start >= x.end);
        // A seek back to or below it reads again what was handled from the sought offset on (docs/sdk.md,
        // "Concurrency"): it, if its handler had started, or a record between the two handled before it.
        const sought =
          again &&
          h.seeks.some(
            (k) => k.inst === x.inst && k.partition === p && k.offset <= o && k.at <= again.start && (k.at >= x.start || inTime.slice(k.offset, o).some((y) => y !== undefined && y.end <= k.at)),
          );
        // Delivered again although an acknowledged commit had passed it: the committed offset went back, or
        // a reader started below it. Without one, the revocation's or close's commit did not land (a commit
        // may fail: the records are then delivered again, as at-least-once allows; docs/sdk.md, "Offsets").
        const passed = again && h.commits.find((cm) => cm.partition === p && cm.offset > o && cm.at <= again.start);
        if (prefix && again && !sought && passed) {
          violations.push(`${p}:${o} delivered again to ${again.inst} (gen ${again.generation}) after ${x.inst} (gen ${x.generation}) handled it and all below it, and ${passed.member} committed ${passed.offset} (gen ${passed.generation})`);
        }
      }
    }
    expect(violations.slice(0, 20)).toEqual([]);
    expect(h.final).toEqual(h.ends.map((e) => (e === 0 ? -1 : e)));
  }

  it('eachMessage', async () => check(await history({})), 120_000);
  it('eachMessage with failing handlers', async () => check(await history({ failEvery: 50 })), 120_000);
  it('eachBatch with partitionsConsumedConcurrently', async () => check(await history({ batch: true, options: { partitionsConsumedConcurrently: 2 } })), 120_000);
  it('eachBatch with failing handlers', async () => check(await history({ batch: true, failEvery: 50, options: { partitionsConsumedConcurrently: 3 } })), 120_000);
  it('concurrency (key ordering)', async () => check(await history({ concurrency: { perPartition: 4 } })), 120_000);
  it('concurrency with failing handlers', async () => check(await history({ concurrency: { perPartition: 4, ordering: 'none' }, failEvery: 50 })), 120_000);
  it('async iterator', async () => check(await history({ iterator: true })), 120_000);
  it('pause and resume in eachMessage', async () => check(await history({ pauseEvery: 15 })), 120_000);
  it('pause and resume in eachBatch', async () => check(await history({ batch: true, pauseEvery: 15, options: { partitionsConsumedConcurrently: 2 } })), 120_000);
  it('pause and resume with concurrency', async () => check(await history({ concurrency: { perPartition: 4 }, pauseEvery: 15 })), 120_000);
  it('pause and resume in the async iterator', async () => check(await history({ iterator: true, pauseEvery: 15 })), 120_000);
  it('stream mode with eachBatch and failing handlers', async () => check(await history({ batch: true, failEvery: 50, options: { mode: 'stream', partitionsConsumedConcurrently: 2 } })), 120_000);
  it('stream mode with the async iterator and pauses', async () => check(await history({ iterator: true, pauseEvery: 15, options: { mode: 'stream' } })), 120_000);
  it('seek back in eachMessage', async () => check(await history({ seekBackEvery: 20 })), 120_000);
  it('seek back in eachBatch', async () => check(await history({ batch: true, seekBackEvery: 20, options: { partitionsConsumedConcurrently: 2 } })), 120_000);
  it('seek back with concurrency', async () => check(await history({ concurrency: { perPartition: 4 }, seekBackEvery: 20 })), 120_000);
  it('seek back in the async iterator, in stream mode', async () => check(await history({ iterator: true, seekBackEvery: 20, options: { mode: 'stream' } })), 120_000);
  it('stream mode', async () => check(await history({ options: { mode: 'stream' } })), 120_000);
  it('stream mode with concurrency and failing handlers', async () => check(await history({ options: { mode: 'stream' }, concurrency: { perPartition: 4 }, failEvery: 50 })), 120_000);
  it('concurrency: a handler seeking back to its own record does not skip an unhandled record below it', async () => {
    // One partition: a@0 (held until the seek), a@1 (queued behind it, same key), b@2 (seeks back to itself once).
    const topic = `hist-t${++seq}`;
    await kt.admin.command('CREATE', { topic, partitions: 1 });
    const producer = new Producer({ brokers: [kt.broker.address] });
    try {
      await producer.send({ topic, messages: ['a', 'a', 'b'].map((key, i) => ({ key, value: `r${i}` })) });
    } finally {
      await producer.close();
    }
    const c = new Consumer({ brokers: [kt.broker.address], groupId: `g-${topic}`, topic, autoOffsetReset: 'earliest', sessionTimeoutMs: 6000, heartbeatIntervalMs: 200, maxWaitMs: 100 });
    consumers.push(c);
    let release = () => {};
    const held = new Promise<void>((r) => {
      release = r;
    });
    const handled: number[] = [];
    let soughtBack = false;
    void c.run({
      concurrency: { perPartition: 2 },
      eachMessage: async ({ message }) => {
        if (message.offset === 0) await held;
        if (message.offset === 2 && !soughtBack) {
          soughtBack = true;
          c.seek(0, 2); // "not yet": delivered again, never committed past
          release();
          return;
        }
        handled.push(message.offset);
      },
    });
    const committed0 = async () => parseLine(await kt.admin.command('FETCH_OFFSET', { topic, group: `g-${topic}`, partition: 0 })).params.get('offset');
    await until(async () => (await committed0()) === '3', 20_000, 'the end committed');
    expect(handled.sort()).toEqual([0, 1, 2]);
  }, 60_000);
  it('async iterator: a revocation waits for the loop body holding a message of the partition', async () => {
    // Range assignment: when b joins, a (the lower member id) keeps partition 0 and gives partition 1 to b.
    const topic = `hist-t${++seq}`;
    await kt.admin.command('CREATE', { topic, partitions: 2 });
    const producer = new Producer({ brokers: [kt.broker.address] });
    try {
      await producer.send({ topic, messages: Array.from({ length: 10 }, (_, i) => ({ partition: i % 2, value: `r${i}` })) });
    } finally {
      await producer.close();
    }
    const options = { brokers: [kt.broker.address], groupId: `g-${topic}`, topic, assignor: 'range' as const, autoOffsetReset: 'earliest' as const, sessionTimeoutMs: 6000, heartbeatIntervalMs: 100, maxWaitMs: 100 };
    const a = new Consumer({ ...options, clientId: 'a' });
    const b = new Consumer({ ...options, clientId: 'b' });
    consumers.push(a, b);
    const intervals: Array<{ member: string; offset: number; start: number; end: number }> = [];
    let aHolds: ConsumedMessage | undefined;
    let release = () => {};
    const held = new Promise<void>((r) => {
      release = r;
    });
    const aLoop = (async () => {
      for await (const m of a) {
        if (m.partition !== 1) continue;
        const i = { member: 'a', offset: m.offset, start: performance.now(), end: Number.POSITIVE_INFINITY };
        intervals.push(i);
        if (!aHolds) {
          aHolds = m;
          await held; // the loop body is still at work on it when the partition is revoked
        }
        i.end = performance.now();
      }
    })();
    aLoop.catch(() => {});
    await until(() => aHolds !== undefined, 20_000, 'a holds a message of partition 1');
    let bGot: () => void = () => {};
    const bHasIt = new Promise<void>((r) => {
      bGot = r;
    });
    void b.run({
      eachMessage: ({ message: m }) => {
        if (m.partition !== 1) return;
        intervals.push({ member: 'b', offset: m.offset, start: performance.now(), end: performance.now() });
        if (m.offset === aHolds!.offset) bGot();
      },
    });
    // Hold a's loop body until b got the held message or b heartbeated a while after a's partition was revoked.
    await until(() => aHolds!.fenced, 20_000, 'partition 1 revoked from a');
    let beats = 0;
    b.on('heartbeat', () => beats++);
    await Promise.race([bHasIt, until(() => beats >= 10, 20_000, 'b heartbeats')]);
    release();
    await bHasIt;
    const overlaps = intervals.filter((x) => x.member === 'a').flatMap((x) => intervals.filter((y) => y.member === 'b' && y.offset === x.offset && y.start < x.end));
    expect(overlaps).toEqual([]);
  }, 60_000);
});

/**
 * run({ eachMessage, concurrency })'s per-partition driver (packages/client/src/handler-window.ts)
 * without a server: a reader loop like the partition fetcher's admits batches, handlers take random
 * short delays and fail at random, and every run must keep per-key order, handle every message exactly
 * once (a failure's redelivery does not run again what was handled), never let the processed offset
 * pass an unhandled message, and stay within perPartition and maxBuffered.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import type { Cluster } from 'tributary-client/cluster.js';
import type { ResolvedConcurrency } from 'tributary-client/concurrency-options.js';
import { type ConsumedMessage, ConsumerContext, type ConsumerEvents } from 'tributary-client/consumer-context.js';
import { resolveConsumerOptions } from 'tributary-client/consumer-options.js';
import { HandlerWindow } from 'tributary-client/handler-window.js';
import type { EachMessagePayload } from 'tributary-client/message-handlers.js';
import { OffsetCommitter } from 'tributary-client/offset-committer.js';
import { PartitionWorker } from 'tributary-client/partition-worker.js';
import { until } from '../../helpers/util.js';

const tick = (ms: number): Promise<void> => new Promise((r) => (ms === 0 ? setImmediate(r) : setTimeout(r, ms)));

function message(offset: number, key: string | null): ConsumedMessage {
  return { topic: 't', partition: 0, offset, key: key === null ? null : Buffer.from(key), value: Buffer.from(String(offset)), timestamp: 0, headers: [], assignmentGeneration: 1, signal: new AbortController().signal, fenced: false };
}

function setup(limits: ResolvedConcurrency, handler: (p: EachMessagePayload) => Promise<void> | void) {
  const options = resolveConsumerOptions({ brokers: ['127.0.0.1:1'], groupId: 'g', topic: 't' });
  const events: Array<{ event: keyof ConsumerEvents; payload: unknown }> = [];
  const ctx = new ConsumerContext(options, {} as Cluster, (event, payload) => void events.push({ event, payload }), async () => {});
  ctx.sessionProvenAt = Number.POSITIVE_INFINITY; // no coordinator here: the session never lapses (session-guard.ts)
  const committer = new OffsetCommitter(ctx, { requestRebalance: () => {}, memberLost: () => {} });
  const w = new PartitionWorker(0, 1, 0, -1, ctx.root.signal);
  ctx.workers.set(0, w);
  const backoffs: number[] = [];
  const win = new HandlerWindow(ctx, committer, w, limits, handler, async (failures) => {
    backoffs.push(failures);
    await tick(0);
  });
  w.window = win;
  return { ctx, w, win, events, backoffs };
}

/** The partition reader, as partition-fetcher.ts drives its sink: batches from `position`, seeks applied after each. */
async function read(w: PartitionWorker, win: HandlerWindow, log: ConsumedMessage[], batch: number, done: () => boolean): Promise<void> {
  let position = log[0]?.offset ?? 0;
  while (!done() && !w.signal.aborted) {
    if (w.seekTo !== undefined) {
      position = w.seekTo;
      w.seekTo = undefined;
    }
    const messages = log.filter((m) => m.offset >= position).slice(0, batch);
    if (messages.length === 0 || w.paused) {
      await tick(1);
      continue;
    }
    await win.admit(messages);
    if (w.seekTo !== undefined) continue;
    position = messages.at(-1)!.offset + 1;
    win.passedTo(position);
  }
}

const workload = fc.record({
  keys: fc.array(fc.option(fc.integer({ min: 0, max: 6 }), { freq: 5 }), { minLength: 1, maxLength: 60 }),
  gaps: fc.array(fc.integer({ min: 1, max: 2 }), { minLength: 60, maxLength: 60 }),
  delays: fc.array(fc.integer({ min: 0, max: 3 }), { minLength: 60, maxLength: 60 }),
  fails: fc.array(fc.boolean(), { minLength: 60, maxLength: 60 }),
  perPartition: fc.integer({ min: 1, max: 8 }),
  extra: fc.integer({ min: 0, max: 10 }),
  batch: fc.integer({ min: 1, max: 20 }),
  ordering: fc.constantFrom('key' as const, 'none' as const),
});

describe('HandlerWindow', () => {
  it('per-key order, exactly one successful run per message, and a prefix that never passes an unhandled message', async () => {
    await fc.assert(
      fc.asyncProperty(workload, async ({ keys, gaps, delays, fails, perPartition, extra, batch, ordering }) => {
        let offset = 100;
        const log = keys.map((k, i) => message((offset += gaps[i]!), k === null ? null : `k${k}`));
        const end = log.at(-1)!.offset + 1;
        const limits = { perPartition, maxBuffered: perPartition + extra, ordering };
        const handled = new Map<number, number>();
        const attempts = new Map<number, number>();
        const activeKeys = new Map<string, number>();
        const lastByKey = new Map<string, number>();
        const violations: string[] = [];
        let running = 0;
        let maxRunning = 0;
        const idx = new Map(log.map((m, i) => [m.offset, i]));
        const { w, win, events } = setup(limits, async ({ message: m }) => {
          const i = idx.get(m.offset)!;
          const key = m.key === null ? '<none>' : m.key.toString();
          const firstUnhandled = log.find((x) => !handled.has(x.offset))?.offset ?? end;
          if (w.processed > firstUnhandled) violations.push(`processed ${w.processed} passed unhandled ${firstUnhandled}`);
          if (win.buffered > limits.maxBuffered) violations.push(`buffered ${win.buffered}`);
          if (ordering === 'key') {
            if (activeKeys.has(key)) violations.push(`${key}@${m.offset} started while ${key}@${activeKeys.get(key)} runs`);
            if ((lastByKey.get(key) ?? -1) > m.offset) violations.push(`${key}@${m.offset} after ${key}@${lastByKey.get(key)}`);
            // every earlier message of the key is handled
            for (const x of log) if (x.offset < m.offset && (x.key?.toString() ?? '<none>') === key && !handled.has(x.offset)) violations.push(`${key}@${m.offset} before ${x.offset}`);
          }
          activeKeys.set(key, m.offset);
          running++;
          maxRunning = Math.max(maxRunning, running);
          const attempt = (attempts.get(m.offset) ?? 0) + 1;
          attempts.set(m.offset, attempt);
          try {
            await tick(delays[i]!);
            if (fails[i] && attempt === 1) throw new Error(`fail ${m.offset}`);
            handled.set(m.offset, (handled.get(m.offset) ?? 0) + 1);
            lastByKey.set(key, m.offset);
          } finally {
            running--;
            activeKeys.delete(key);
          }
        });
        await read(w, win, log, batch, () => w.processed === end);
        await win.idle();
        expect(violations).toEqual([]);
        expect(maxRunning).toBeLessThanOrEqual(perPartition);
        expect([...handled.entries()].filter(([, n]) => n !== 1)).toEqual([]);
        expect(handled.size).toBe(log.length);
        expect(w.processed).toBe(end);
        expect(events.filter((e) => e.event === 'crash').length).toBe(log.filter((_, i) => fails[i]).length);
      }),
      { numRuns: 60 },
    );
  });

  it('different keys run at once up to perPartition; one key runs one at a time', async () => {
    for (const [keys, expected] of [
      [8, 4],
      [1, 1],
    ] as const) {
      let running = 0;
      let maxRunning = 0;
      const { w, win } = setup({ perPartition: 4, maxBuffered: 40, ordering: 'key' }, async () => {
        maxRunning = Math.max(maxRunning, ++running);
        await tick(2);
        running--;
      });
      const log = Array.from({ length: 40 }, (_, i) => message(i, `k${i % keys}`));
      await read(w, win, log, 10, () => w.processed === 40);
      expect(maxRunning).toBe(expected);
    }
  });

  it('a failure settles the window, backs off, then sends the reader back to the first unhandled record and ends an idle stream', async () => {
    let attempt = 0;
    const release: Array<() => void> = [];
    const { w, win, events, backoffs } = setup({ perPartition: 3, maxBuffered: 10, ordering: 'key' }, ({ message: m }) => {
      if (m.offset === 1 && attempt++ === 0) return Promise.reject(new Error('boom'));
      return new Promise<void>((r) => release.push(r));
    });
    let interrupted = 0;
    w.interruptRead = () => interrupted++;
    await win.admit([message(0, 'a'), message(1, 'b'), message(2, 'c'), message(3, 'b')]);
    await until(() => events.some((e) => e.event === 'crash'), 5000, 'crash reported');
    // 0 and 2 still run: nothing is reset before they return, and 3 (key b, after the failed 1) never starts
    expect(release.length).toBe(2);
    expect(w.seekTo).toBeUndefined();
    release[1]!(); // offset 2
    await tick(1);
    expect(w.seekTo).toBeUndefined();
    release[0]!(); // offset 0
    await until(() => w.seekTo !== undefined, 5000, 'reader sent back');
    expect(w.seekTo).toBe(1);
    expect(interrupted).toBe(1);
    expect(backoffs).toEqual([1]);
    expect(w.processed).toBe(1); // 0 handled; 1 is not
    expect(release.length).toBe(2);
  });

  it('what the reader passed over (markers, aborted records) counts once everything before it is handled', async () => {
    const release = new Map<number, () => void>();
    const { w, win } = setup({ perPartition: 2, maxBuffered: 10, ordering: 'none' }, ({ message: m }) => new Promise<void>((r) => release.set(m.offset, r)));
    await win.admit([message(10, null), message(12, null)]); // 11 and 13-14 were markers
    win.passedTo(15);
    release.get(12)!();
    await tick(1);
    expect(w.processed).toBe(10); // the next offset to commit: 10 still runs
    release.get(10)!();
    await until(() => w.processed === 15, 5000, 'processed past the trailing markers');
  });

  it('a record read again while it is still in the window is not admitted twice', async () => {
    const started: number[] = [];
    const { w, win } = setup({ perPartition: 4, maxBuffered: 10, ordering: 'none' }, async ({ message: m }) => {
      started.push(m.offset);
      await tick(1);
    });
    await win.admit([message(0, null), message(1, null)]);
    await win.admit([message(1, null), message(2, null)]);
    await until(() => w.processed === 3, 5000, 'all handled');
    expect(started.sort()).toEqual([0, 1, 2]);
  });

  it('revocation: the signal aborts, running handlers are awaited, and nothing handled after it is marked', async () => {
    const release: Array<() => void> = [];
    const signals: AbortSignal[] = [];
    const { w, win } = setup({ perPartition: 3, maxBuffered: 10, ordering: 'key' }, ({ signal }) => {
      signals.push(signal);
      return new Promise<void>((r) => release.push(r));
    });
    const admitted = win.admit([message(0, 'a'), message(1, 'b'), message(2, 'c'), message(3, 'd')]);
    await until(() => release.length === 3, 5000, 'three handlers running');
    release[1]!(); // offset 1 is handled, but 0 is not: the prefix stays; its slot goes to offset 3
    await until(() => release.length === 4, 5000, 'offset 3 started');
    expect(w.processed).toBe(-1);
    w.ac.abort();
    await admitted;
    expect(signals.every((s) => s.aborted)).toBe(true);
    let idle = false;
    const waiting = win.idle().then(() => (idle = true));
    await tick(1);
    expect(idle).toBe(false); // revocation waits for the handlers still running
    release[0]!();
    release[2]!();
    await tick(1);
    expect(idle).toBe(false); // offset 3 still runs
    release[3]!();
    await waiting;
    expect(w.processed).toBe(-1); // handled after the revocation: not marked
    expect(release.length).toBe(4);
    await win.admit([message(4, 'e')]);
    expect(release.length).toBe(4); // a revoked window admits and starts nothing
  });

  it('pause starts nothing new until resume; seek settles the window and does not leave processed above the target', async () => {
    const started: number[] = [];
    const release = new Map<number, () => void>();
    const { w, win, ctx } = setup({ perPartition: 2, maxBuffered: 10, ordering: 'none' }, ({ message: m }) => {
      started.push(m.offset);
      return new Promise<void>((r) => release.set(m.offset, r));
    });
    await win.admit([0, 1, 2, 3, 4].map((o) => message(o, null)));
    expect(started).toEqual([0, 1]);
    w.paused = true;
    release.get(0)!();
    await tick(1);
    expect(started).toEqual([0, 1]); // paused: 2 waits
    expect(w.processed).toBe(1);
    w.paused = false;
    win.wake();
    await until(() => started.length === 3, 5000, 'offset 2 started after resume');
    // seek back to 1 while 1 and 2 run: nothing new starts, both settle, then the window is empty
    w.seekTo = 1;
    win.seek(1);
    release.get(1)!();
    release.get(2)!();
    await until(() => win.running === 0 && win.buffered === 0, 5000, 'window settled and cleared');
    expect(started).toEqual([0, 1, 2]);
    expect(w.processed).toBeLessThanOrEqual(1);
    // the reader reads from the target again
    w.seekTo = undefined;
    await win.admit([message(1, null), message(2, null)]);
    await until(() => started.length === 5, 5000, 'redelivered after seek');
    expect(started.slice(3)).toEqual([1, 2]);
    ctx.root.abort();
    for (const r of release.values()) r();
  });

  it('seek while handlers run: what the reader reads again from the sought offset before the window settles is handled, not passed over', async () => {
    const started: number[] = [];
    const release = new Map<number, () => void>();
    let processedWhen2Started: number | undefined;
    const { w, win } = setup({ perPartition: 2, maxBuffered: 4, ordering: 'none' }, ({ message: m }) => {
      started.push(m.offset);
      if (m.offset === 2) processedWhen2Started = w.processed;
      if (m.offset > 1) return;
      return new Promise<void>((r) => release.set(m.offset, r));
    });
    const log = Array.from({ length: 10 }, (_, i) => message(i, null));
    const reading = read(w, win, log, 10, () => w.processed === 10);
    await until(() => release.size === 2, 5000, '0 and 1 running, 2 and 3 queued');
    // as PartitionFetcher.seek(): the reader takes the new position, the window settles
    w.seekTo = 2;
    w.processed = Math.min(w.processed, 2);
    win.seek(2);
    release.get(1)!();
    await until(() => w.seekTo === undefined, 5000, 'the reader reads from 2 again while 0 still runs');
    await tick(1);
    release.get(0)!();
    await reading;
    expect(started.slice(0, 2)).toEqual([0, 1]);
    expect(started.slice(2).sort((a, b) => a - b)).toEqual([2, 3, 4, 5, 6, 7, 8, 9]);
    expect(processedWhen2Started).toBeLessThanOrEqual(2);
  });

  it('while a seek settles, the processed offset never passes the sought offset (an auto-commit meanwhile would skip what is read again)', async () => {
    const release = new Map<number, () => void>();
    const { w, win } = setup({ perPartition: 3, maxBuffered: 10, ordering: 'none' }, ({ message: m }) => {
      if (m.offset === 0) return new Promise<void>((r) => release.set(m.offset, r));
    });
    await win.admit([0, 1, 2, 3, 4].map((o) => message(o, null)));
    await until(() => win.running === 1, 5000, '1-4 handled, 0 still runs');
    w.seekTo = 1;
    w.processed = Math.min(w.processed, 1);
    win.seek(1);
    // every value the processed offset takes from here on (what the commit worker could send)
    const values: number[] = [];
    let processed = w.processed;
    Object.defineProperty(w, 'processed', {
      get: () => processed,
      set: (v: number) => {
        processed = v;
        values.push(v);
      },
    });
    release.get(0)!();
    await until(() => win.buffered === 0, 5000, 'window settled and cleared');
    expect(values.length).toBeGreaterThan(0);
    expect(Math.max(...values)).toBeLessThanOrEqual(1);
  });
});

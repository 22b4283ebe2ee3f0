/**
 * The window of run({ concurrency }) as a state machine (packages/client/src/key-scheduler.ts), driven
 * by random interleavings of admissions, starts, completions and failures against a model: per-key
 * order, the contiguous prefix, the bounds on running and held messages, and that it never stalls while
 * something may start.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { KeyScheduler, type Ordering, type WindowEntry } from 'tributary-client/key-scheduler.js';

interface Msg {
  offset: number;
  key: Buffer | null;
}

const RUNS = { numRuns: 300 };

/** Offsets with gaps (markers, aborted records) and keys from a small set, some without a key. */
const messages = fc
  .array(fc.record({ gap: fc.integer({ min: 1, max: 3 }), key: fc.option(fc.integer({ min: 0, max: 5 }), { freq: 4 }) }), { minLength: 1, maxLength: 120 })
  .map((xs) => {
    let offset = 10;
    return xs.map(({ gap, key }) => {
      offset += gap;
      return { offset, key: key === null ? null : Buffer.from(`key-${key}`) } satisfies Msg;
    });
  });

const keyId = (m: Msg): string => (m.key === null ? '<none>' : m.key.toString());

/** What must hold whatever the interleaving. */
function checkInvariants(s: KeyScheduler<Msg>, admitted: Msg[], done: Set<number>, limits: { perPartition: number; maxBuffered: number }): void {
  expect(s.running).toBeLessThanOrEqual(limits.perPartition);
  expect(s.buffered).toBeLessThanOrEqual(limits.maxBuffered);
  const unhandled = admitted.filter((m) => !done.has(m.offset));
  // the frontier is the lowest unhandled offset: the processed offset never passes an unhandled message
  expect(s.frontier()).toBe(unhandled[0]?.offset);
  // held: from the first unhandled message to the last admitted
  expect(s.buffered).toBe(unhandled.length === 0 ? 0 : admitted.length - admitted.indexOf(unhandled[0]!));
}

/** May `m` start now under `ordering`, given what is done? */
function mayStart(ordering: Ordering, m: Msg, admitted: Msg[], done: Set<number>): boolean {
  const earlier = admitted.filter((x) => x.offset < m.offset && !done.has(x.offset));
  if (ordering === 'none') return true;
  if (ordering === 'partition') return earlier.length === 0;
  return earlier.every((x) => keyId(x) !== keyId(m));
}

describe('KeyScheduler', () => {
  for (const ordering of ['key', 'partition', 'none'] as const) {
    it(`${ordering} ordering: order, prefix and bounds hold in every interleaving, and nothing stalls`, () => {
      fc.assert(
        fc.property(
          messages,
          fc.integer({ min: 1, max: 8 }),
          fc.integer({ min: 0, max: 12 }),
          fc.array(fc.nat(), { minLength: 400, maxLength: 400 }),
          (msgs, n, extra, choices) => {
            const perPartition = ordering === 'partition' ? 1 : n;
            const limits = { perPartition, maxBuffered: perPartition + extra, ordering };
            const s = new KeyScheduler<Msg>(limits, (m) => m.key);
            const admitted: Msg[] = [];
            const done = new Set<number>();
            const running: Array<WindowEntry<Msg>> = [];
            let next = 0;
            let step = 0;
            const pick = (k: number) => choices[step++ % choices.length]! % k;
            while (done.size < msgs.length) {
              const canAdmit = next < msgs.length && s.hasRoom();
              const op = pick(3);
              if (op === 0 && canAdmit) {
                const m = msgs[next++]!;
                s.admit(m.offset, m);
                admitted.push(m);
              } else if (op === 1) {
                const e = s.take();
                if (e) {
                  // started only once everything earlier it depends on is handled
                  expect(mayStart(ordering, e.message!, admitted, done)).toBe(true);
                  expect(running.some((r) => keyId(r.message!) === keyId(e.message!)) && ordering !== 'none').toBe(false);
                  running.push(e);
                } else {
                  // nothing was refused that could have started (work-conserving up to perPartition)
                  const startable = admitted.filter((m) => !done.has(m.offset) && !running.some((r) => r.offset === m.offset) && mayStart(ordering, m, admitted, done));
                  if (running.length < perPartition) expect(startable).toEqual([]);
                }
              } else if (running.length > 0) {
                const [e] = running.splice(pick(running.length), 1);
                done.add(e!.offset);
                s.complete(e!);
              } else if (!canAdmit) {
                // nothing runs and nothing can be admitted: something must be able to start
                const e = s.take();
                expect(e, 'stalled with unhandled messages').toBeDefined();
                expect(mayStart(ordering, e!.message!, admitted, done)).toBe(true);
                running.push(e!);
              }
              checkInvariants(s, admitted, done, limits);
            }
            expect(s.frontier()).toBeUndefined();
            expect(s.buffered).toBe(0);
            expect(s.lastAdmitted).toBe(msgs.at(-1)!.offset);
          },
        ),
        RUNS,
      );
    });
  }

  it('key ordering runs different keys in parallel up to perPartition, one per key', () => {
    const s = new KeyScheduler<Msg>({ perPartition: 3, maxBuffered: 10, ordering: 'key' }, (m) => m.key);
    const keys = ['a', 'a', 'b', null, 'c', null, 'd'];
    for (const [i, k] of keys.entries()) s.admit(i, { offset: i, key: k === null ? null : Buffer.from(k) });
    const started = [s.take(), s.take(), s.take(), s.take()].map((e) => e?.offset);
    // a@0, b@2, keyless@3; the second a and the second keyless wait; the limit stops c
    expect(started).toEqual([0, 2, 3, undefined]);
    expect(s.running).toBe(3);
  });

  it('a failed message blocks the prefix and its key; clear() lets the window read again from the frontier', () => {
    fc.assert(
      fc.property(messages, fc.integer({ min: 1, max: 6 }), fc.array(fc.nat(), { minLength: 200, maxLength: 200 }), (msgs, n, choices) => {
        const limits = { perPartition: n, maxBuffered: n + 4, ordering: 'key' as const };
        const s = new KeyScheduler<Msg>(limits, (m) => m.key);
        let step = 0;
        const pick = (k: number) => choices[step++ % choices.length]! % k;
        const admitted: Msg[] = [];
        const running: Array<WindowEntry<Msg>> = [];
        const done = new Set<number>();
        for (const m of msgs) {
          if (!s.hasRoom()) break;
          s.admit(m.offset, m);
          admitted.push(m);
        }
        for (let e = s.take(); e; e = s.take()) running.push(e);
        // one running message fails; the others finish (a window settling after a failure)
        const failed = running.splice(pick(running.length), 1)[0]!;
        s.fail(failed);
        for (const e of running) {
          s.complete(e);
          done.add(e.offset);
        }
        // nothing of the failed key may start, and the prefix stops at or before the failure
        for (let e = s.take(); e; e = s.take()) {
          expect(keyId(e.message!)).not.toBe(keyId(failed.message!));
          s.complete(e);
          done.add(e.offset);
        }
        const frontier = s.frontier()!;
        expect(frontier).toBeLessThanOrEqual(failed.offset);
        expect(admitted.filter((m) => m.offset < frontier).every((m) => done.has(m.offset))).toBe(true);
        const ahead = new Set(s.handledAhead());
        expect([...ahead].every((o) => o > frontier && done.has(o))).toBe(true);
        // redelivery from the frontier: handled messages only take their place, the rest runs again
        s.clear();
        const again = admitted.filter((m) => m.offset >= frontier);
        for (const m of again) s.admit(m.offset, m, ahead.has(m.offset));
        const rerun: number[] = [];
        for (let guard = 0; s.frontier() !== undefined && guard < 1000; guard++) {
          const e = s.take();
          expect(e).toBeDefined();
          rerun.push(e!.offset);
          s.complete(e!);
        }
        expect(rerun.sort((a, b) => a - b)).toEqual(again.filter((m) => !ahead.has(m.offset)).map((m) => m.offset));
        expect(rerun).toContain(failed.offset);
      }),
      RUNS,
    );
  });

  it('refuses what would break its own bounds', () => {
    const s = new KeyScheduler<Msg>({ perPartition: 1, maxBuffered: 1, ordering: 'key' }, (m) => m.key);
    s.admit(5, { offset: 5, key: null });
    expect(() => s.admit(6, { offset: 6, key: null })).toThrow(/window full/);
    const e = s.take()!;
    expect(() => s.clear()).toThrow(/still running/);
    s.complete(e);
    expect(() => s.admit(5, { offset: 5, key: null })).toThrow(/offset 5 after 5/);
  });
});

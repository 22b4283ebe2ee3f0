import { describe, expect, it } from 'vitest';
import { describePlan, FAULT_KINDS, planSchedule } from '../../chaos/nemesis.js';
import { chaosSeed, Rng } from '../../chaos/prng.js';

const shape = { brokers: 3, partitions: 6, consumers: 3 };

describe('chaos nemesis schedule', () => {
  it('is a function of the seed', () => {
    expect(planSchedule(42, 60_000, shape)).toEqual(planSchedule(42, 60_000, shape));
    expect(planSchedule(42, 60_000, shape)).not.toEqual(planSchedule(43, 60_000, shape));
  });

  it('covers every fault kind once per round and fills the time', () => {
    const plan = planSchedule(7, 180_000, shape);
    const round = plan.slice(0, FAULT_KINDS.length).map((f) => f.kind);
    expect(new Set(round)).toEqual(new Set(FAULT_KINDS));
    const planned = plan.reduce((t, f) => t + f.gapMs + f.durationMs, 0);
    expect(planned).toBeGreaterThanOrEqual(180_000);
    for (const f of plan) {
      expect(f.broker).toBeLessThan(3);
      expect(f.partition).toBeLessThan(6);
      expect(f.consumer).toBeLessThan(3);
      expect(describePlan(f)).toMatch(new RegExp(`^#${f.id} ${f.kind} `));
    }
  });

  it('holds etcd shorter than the 2 s lease for the short pause and longer for the long one', () => {
    for (const f of planSchedule(9, 600_000, shape)) {
      if (f.kind === 'pause-etcd-short') expect(f.durationMs).toBeLessThan(2000);
      if (f.kind === 'pause-etcd-long' || f.kind === 'pause-leader') expect(f.durationMs).toBeGreaterThan(2000);
    }
  });
});

describe('chaos PRNG', () => {
  it('replays and keeps derived streams apart', () => {
    const a = new Rng(1);
    const b = new Rng(1);
    const xs = Array.from({ length: 5 }, () => a.next());
    expect(Array.from({ length: 5 }, () => b.next())).toEqual(xs);
    expect(Rng.derive(1, 'x').next()).not.toBe(Rng.derive(1, 'y').next());
    for (const x of xs) expect(x >= 0 && x < 1).toBe(true);
    const r = new Rng(3);
    for (let i = 0; i < 100; i++) {
      const n = r.int(2, 4);
      expect(n >= 2 && n <= 4).toBe(true);
    }
  });

  it('takes CHAOS_SEED when set', () => {
    expect(chaosSeed('123')).toBe(123);
    expect(() => chaosSeed('x')).toThrow(/CHAOS_SEED/);
    expect(chaosSeed(undefined)).toBeGreaterThanOrEqual(0);
  });
});
